//! A member that loses its disk and comes back under its node id, with the
//! same flags (a replacement host): its peers tell it that it replaces the
//! member they knew, it says so, takes each group's log from its leader
//! and votes again once it holds what the group committed (`GET
//! /replication` says `member` again). From then on the cluster counts on
//! it: with the old leader lost, it and the third member elect a leader
//! that delivers everything published before and while it was gone.

use std::collections::BTreeSet;
use std::time::Duration;

use super::leader::leader_of;
use super::members::*;

fn bodies(range: std::ops::Range<usize>) -> Vec<Vec<u8>> {
    range.map(|i| format!("r{i:03}").into_bytes()).collect()
}

#[test]
fn a_member_back_with_an_empty_disk_catches_up_and_then_counts() {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut members = start_cluster(&dirs, |_| Vec::new());
    for m in &members {
        wait_standing(&m.nsqd, "member");
    }
    let t = "replaced_member";
    let all: Vec<&Member> = members.iter().collect();
    let lid = leader_of(&all, t, None);
    let victim = all.iter().find(|m| m.id != lid).unwrap().id;
    assert_eq!(
        create(&by_id(&members, lid).nsqd, t, 3),
        (200, String::new())
    );
    wait_replicas(&members, t, 3);
    let r = by_id(&members, lid)
        .nsqd
        .post(&format!("/channel/create?topic={t}&channel=c"), b"");
    assert_eq!(r.status, 200, "{}", r.text());
    let publish = |on: &Member, range| {
        let b = bodies(range);
        let refs: Vec<&[u8]> = b.iter().map(Vec::as_slice).collect();
        on.nsqd.connect().mpublish(t, &refs);
    };
    publish(by_id(&members, lid), 0..50);
    wait_unfinished(&members.iter().collect::<Vec<_>>(), t, 50);

    // The victim's host is lost with its disk; 50 more are published
    // meanwhile (the other two are a majority).
    let mut gone = members.remove(members.iter().position(|m| m.id == victim).unwrap());
    gone.nsqd.kill9();
    let dir = dirs[at_dir(victim)].path();
    std::fs::remove_dir_all(dir).unwrap();
    std::fs::create_dir_all(dir).unwrap();
    publish(by_id(&members, lid), 50..100);

    // A fresh host takes its place.
    gone.nsqd = start(dir, &gone.args);
    members.push(gone);
    let back = by_id(&members, victim);
    let deadline = std::time::Instant::now() + WAIT;
    while replication(&back.nsqd)["standing"] != "member" {
        assert!(
            std::time::Instant::now() < deadline,
            "the replacement does not vote again: {}\n{}\nleader:\n{}",
            replication(&back.nsqd),
            back.nsqd.stderr(),
            by_id(&members, lid).nsqd.stderr()
        );
        nsq_tests::sleep_ms(100);
    }
    let log = back.nsqd.stderr();
    assert!(
        log.contains("this member replaces it"),
        "the replacement did not say what it is:\n{log}"
    );
    // Its peers noticed too.
    let peer = by_id(&members, lid).nsqd.stderr();
    assert!(
        peer.contains(&format!(
            "node {victim} came back with another data directory"
        )),
        "{peer}"
    );
    // It holds the 100 (its progress is read from the log it was sent).
    wait_unfinished(&[back], t, 100);

    // The leader is lost: the replacement's vote is needed, and given.
    let mut old = members.remove(members.iter().position(|m| m.id == lid).unwrap());
    old.nsqd.kill9();
    let left: Vec<&Member> = members.iter().collect();
    let next = leader_of(&left, t, Some(lid));
    let leader = by_id(&members, next);
    publish(leader, 100..110);
    let mut consumer = leader.nsqd.connect();
    consumer.sub(t, "c");
    consumer.rdy(200);
    let got: BTreeSet<Vec<u8>> = (0..110)
        .map(|_| consumer.expect_msg_within(Duration::from_secs(20)).body)
        .collect();
    assert_eq!(got, bodies(0..110).into_iter().collect::<BTreeSet<_>>());
    drop(old);
}

/// A member that cannot have learnt the cluster's topics yet (started on
/// an empty disk while its peers are down) creates none for a publish: the
/// name may be a replicated topic it has not applied, and a topic made
/// here would keep what it took on this member alone. Once it has caught
/// up (its peers up, a leader's entry applied), it does as NSQ does.
#[test]
fn a_member_not_caught_up_creates_no_topic_for_a_publish() {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let ports = nsq_tests::free_ports(3);
    let peers = (1..=3u64)
        .map(|id| format!("{id}@127.0.0.1:{}", ports[id as usize - 1]))
        .collect::<Vec<_>>()
        .join(",");
    let args = |id: u64| member_args(id, ports[id as usize - 1], &peers);
    let first = start(dirs[0].path(), &args(1));
    assert_eq!(replication(&first)["standing"], "joining");
    let mut c = first.connect();
    // Refused, and the connection kept (the producer may retry).
    for _ in 0..2 {
        c.send(&nsq_tests::pub_cmd("not_yet", b"m"));
        let f = c.read_frame();
        assert_eq!(
            (f.ftype, String::from_utf8_lossy(&f.data).to_string()),
            (
                nsq_tests::FRAME_ERROR,
                "E_PUB_FAILED PUB failed REPLICATION_CATCHING_UP".to_string()
            )
        );
    }
    let r = first.post("/pub?topic=not_yet", b"m");
    assert_eq!(
        (r.status, r.text()),
        (503, "{\"message\":\"REPLICATION_CATCHING_UP\"}".to_string())
    );
    assert!(first.topic_stats("not_yet").is_none(), "a topic was made");

    let _others: Vec<_> = (2..=3u64)
        .map(|id| start(dirs[id as usize - 1].path(), &args(id)))
        .collect();
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        c.send(&nsq_tests::pub_cmd("not_yet", b"m"));
        match c.read_frame() {
            f if f.data == b"OK" => break,
            f => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "still refused: {:?}",
                    String::from_utf8_lossy(&f.data)
                );
                nsq_tests::sleep_ms(200);
            }
        }
    }
    wait_standing(&first, "member");
}

/// A member restarted with more committed entries in a group than its
/// applier's queue holds (4,096) starts: openraft applies them again at
/// start, before nsqd reads anything, so they are read back from the log
/// instead of queued (queued, the start waited for good).
#[test]
fn a_member_restarts_with_more_entries_than_its_applier_queue_holds() {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut members = start_cluster(&dirs, |_| Vec::new());
    let t = "many_entries";
    let all: Vec<&Member> = members.iter().collect();
    let lid = leader_of(&all, t, None);
    assert_eq!(
        create(&by_id(&members, lid).nsqd, t, 3),
        (200, String::new())
    );
    wait_replicas(&members, t, 3);
    let r = by_id(&members, lid)
        .nsqd
        .post(&format!("/channel/create?topic={t}&channel=c"), b"");
    assert_eq!(r.status, 200, "{}", r.text());
    // 5,000 PUBs, one entry each, 100 pipelined at a time; one that was
    // not committed within nsqd's 5 s (a loaded machine) is published
    // again, so a few may be there twice: the count is the leader's.
    const N: usize = 5_000;
    let mut c = by_id(&members, lid).nsqd.connect();
    c.timeout = Duration::from_secs(30);
    let mut todo: Vec<usize> = (0..N).collect();
    while !todo.is_empty() {
        let window: Vec<usize> = todo.drain(..todo.len().min(100)).collect();
        let mut batch = Vec::new();
        for i in &window {
            batch.extend(nsq_tests::pub_cmd(t, format!("e{i}").as_bytes()));
        }
        c.send(&batch);
        for i in window {
            let f = c.recv();
            if f.data != b"OK" {
                let text = String::from_utf8_lossy(&f.data).to_string();
                assert!(
                    text.starts_with("E_PUB_FAILED PUB failed REPLICATION_"),
                    "{text}"
                );
                todo.push(i);
            }
        }
    }
    nsq_tests::sleep_ms(1_000);
    let total = unfinished(&by_id(&members, lid).nsqd, t).expect("the leader's count");
    assert!(total >= N as u64, "{total}");
    let all: Vec<&Member> = members.iter().collect();
    wait_unfinished(&all, t, total);

    let follower = members.iter().find(|m| m.id != lid).unwrap().id;
    let stopped = stop_member(&mut members, follower);
    let nsqd = start(dirs[at_dir(follower)].path(), &stopped.args);
    members.push(Member {
        id: follower,
        nsqd,
        args: stopped.args.clone(),
    });
    wait_unfinished(&[by_id(&members, follower)], t, total);
}

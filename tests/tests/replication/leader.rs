//! Only the leader of a replicated topic's group serves it: three members
//! and a real nsqlookupd. `/lookup` lists the leader alone as the topic's
//! producer; a SUB to a follower is refused naming the leader and its TCP
//! address; a leader
//! that loses its group while alive (SIGSTOP past the election, then
//! SIGCONT) closes its consumers and leaves the lookupd to the new one; a
//! leader stopped with SIGTERM is replaced in `/lookup` by the next, whose
//! consumers get what is published after the failover.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use nsq_tests::{frame, freeze, send_signal, wait_for, Lookupd, FRAME_ERROR, HEARTBEAT};

use super::members::*;

/// The node ids of the members `/lookup?topic=` lists as producers (by
/// their TCP ports); None while the lookupd does not know the topic.
fn producers(l: &Lookupd, ms: &[&Member], topic: &str) -> Option<BTreeSet<u64>> {
    let v = l.lookup(topic)?;
    let ports = v["producers"]
        .as_array()?
        .iter()
        .map(|p| p["tcp_port"].as_u64());
    let mut ids = BTreeSet::new();
    for port in ports {
        let port = port?;
        let m = ms.iter().find(|m| u64::from(m.nsqd.tcp_port) == port);
        // A producer that is no member here: recorded as 0 so it fails.
        ids.insert(m.map_or(0, |m| m.id));
    }
    Some(ids)
}

/// Waits until `/lookup` lists exactly `want`, then checks it still does
/// after the others had time to register too (a follower that registers
/// does so when it applies the topic, like the leader).
fn wait_listed_alone(l: &Lookupd, ms: &[&Member], topic: &str, want: u64) {
    let only = BTreeSet::from([want]);
    wait_for(WAIT, &format!("/lookup listing node {want} alone"), || {
        (producers(l, ms, topic).as_ref() == Some(&only)).then_some(())
    });
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until {
        let now = producers(l, ms, topic);
        assert_eq!(now.as_ref(), Some(&only), "/lookup?topic={topic}");
        nsq_tests::sleep_ms(100);
    }
}

/// The leader of `topic`'s group that every member in `ms` agrees on, not
/// `not`.
pub fn leader_of(ms: &[&Member], topic: &str, not: Option<u64>) -> u64 {
    let group = group_of(topic);
    match not {
        // Only the topic's group: the member barred from it may have won
        // another group back once it ran again (CI saw the old leader of
        // one group elected in another after its SIGCONT, and the wait
        // for it to lead no group at all never ended).
        Some(n) => agreed_leaders_except_in(ms, group, n)[group],
        None => agreed_leaders(ms, None)[group],
    }
}

/// Waits until a SUB to `topic` on `on` is refused naming the leader
/// `lid` with the TCP address consumers reach it at, `lid`'s broadcast
/// address and TCP port (a member names it once the leader's `Serving`
/// entry reached it; before that, only the node id is allowed).
pub fn sub_refused_naming(on: &Member, topic: &str, leader: &Member) {
    let lid = leader.id;
    let bare = format!("E_SUB_FAILED SUB topic {topic} is led by node {lid}");
    let named = format!("{bare} (127.0.0.1:{})", leader.nsqd.tcp_port);
    let hb = frame(nsq_tests::FRAME_RESPONSE, HEARTBEAT);
    wait_for(WAIT, &format!("a SUB refused naming {named:?}"), || {
        let mut c = on.nsqd.connect();
        c.cmd(&format!("SUB {topic} c"));
        let mut got = c.read_until_closed(Duration::from_secs(5));
        while got.starts_with(&hb) {
            got.drain(..hb.len());
        }
        if got == frame(FRAME_ERROR, named.as_bytes()) {
            return Some(());
        }
        assert_eq!(
            got,
            frame(FRAME_ERROR, bare.as_bytes()),
            "{}",
            String::from_utf8_lossy(&got)
        );
        None
    });
}

#[test]
fn only_the_groups_leader_serves_a_replicated_topic() {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let (lookupd, mut members) = start_cluster_with_lookupd(&dirs);
    let all: Vec<&Member> = members.iter().collect();
    let t = "served_by_its_leader";
    let lid = leader_of(&all, t, None);
    let follower = all.iter().find(|m| m.id != lid).unwrap();
    assert_eq!(create(&follower.nsqd, t, 3), (200, String::new()));
    wait_replicas(&members, t, 3);
    follower.nsqd.connect().publish(t, b"before");
    // An unreplicated topic is registered by every nsqd that has it, as
    // in NSQ.
    for m in &members {
        m.nsqd.http_pub("plain", b"x");
    }
    let everyone: BTreeSet<u64> = members.iter().map(|m| m.id).collect();
    wait_for(
        WAIT,
        "every member listed for an unreplicated topic",
        || (producers(&lookupd, &all, "plain") == Some(everyone.clone())).then_some(()),
    );

    // The leader alone is listed; a SUB to a follower is refused with the
    // leader's id and TCP address, fatal as NSQ's SUB errors, and makes no
    // channel there.
    wait_listed_alone(&lookupd, &all, t, lid);
    let leader = by_id(&members, lid);
    sub_refused_naming(follower, t, leader);
    assert!(follower.nsqd.channel_stats(t, "c").is_none());
    let mut consumer = leader.nsqd.connect();
    consumer.sub(t, "c");
    consumer.rdy(10);
    let m = consumer.expect_msg_within(Duration::from_secs(10));
    assert_eq!(m.body, b"before");
    consumer.fin(&m.id);
    // Its FIN committed everywhere (the leader commits FINs every 100 ms),
    // so no later leader puts it back: at-least-once would allow that
    // duplicate, and this test expects the next message to be "after".
    wait_unfinished(&all, t, 0);
    wait_for(WAIT, "the channel registered by the leader", || {
        let v = lookupd.lookup(t)?;
        v["channels"]
            .as_array()?
            .iter()
            .any(|c| c == "c")
            .then_some(())
    });

    // The leader loses its group while alive: stopped past the election
    // timeout, the others elect another; once it runs again it closes its
    // consumer (which would look the topic up again) and unregisters.
    freeze(leader.nsqd.pid());
    let others: Vec<&Member> = all.iter().copied().filter(|m| m.id != lid).collect();
    let second = leader_of(&others, t, Some(lid));
    send_signal(leader.nsqd.pid(), libc::SIGCONT);
    consumer.read_until_closed(Duration::from_secs(10));
    assert!(
        leader
            .nsqd
            .stderr()
            .contains("REPLICATION: closing consumer"),
        "{}",
        leader.nsqd.stderr()
    );
    wait_listed_alone(&lookupd, &all, t, second);
    leader_of(&all, t, Some(lid));
    sub_refused_naming(leader, t, by_id(&members, second));

    // The second leader is stopped (SIGTERM): a third is elected among the
    // two left, listed alone, and its consumer gets what is published after
    // the failover.
    let _gone = stop_member(&mut members, second);
    let left: Vec<&Member> = members.iter().collect();
    let third = leader_of(&left, t, Some(second));
    wait_listed_alone(&lookupd, &left, t, third);
    let mut consumer = by_id(&members, third).nsqd.connect();
    consumer.sub(t, "c");
    consumer.rdy(10);
    let publisher = left.iter().find(|m| m.id != third).unwrap();
    publisher.nsqd.connect().publish(t, b"after");
    let m = consumer.expect_msg_within(Duration::from_secs(10));
    assert_eq!(m.body, b"after");
    consumer.fin(&m.id);
}

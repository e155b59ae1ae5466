//! A topic with fewer replicas than the cluster has members: five nsqds
//! and a real nsqlookupd, a `replicas=3` topic. Its group is one of the
//! groups of three (placement computed here independently: docs/
//! replication.md, "Groups smaller than the cluster"): only its three
//! voters hold its log, every member knows the topic, the two outside it
//! forward publishes and channel changes to its leader and name it when a
//! SUB is refused, and it fails over among its voters. With two of its three voters gone its
//! publishes fail, while a topic of all five keeps taking them.

use std::collections::BTreeSet;
use std::time::Duration;

use nsq_tests::{wait_for, Lookupd, Nsqd};
use serde_json::Value;

use super::leader::sub_refused_naming;
use super::members::*;

/// The group of `topic` with `replicas=3` on five members with
/// [`GROUPS`] groups per size (ids `0..GROUPS` of five, then those of
/// three from `2 * GROUPS`), and its voters.
fn placed_on_three_of_five(topic: &str) -> (u64, BTreeSet<u64>) {
    let index = group_of(topic);
    let group = (2 * GROUPS + index) as u64;
    let start = index % 5;
    let voters = (0..3).map(|k| ((start + k) % 5) as u64 + 1).collect();
    (group, voters)
}

fn topic_replication(n: &Nsqd, topic: &str) -> Option<Value> {
    Some(n.topic_stats(topic)?["replication"].clone())
}

/// The groups `n` votes in, as `GET /replication` lists them.
fn voted_groups(n: &Nsqd) -> BTreeSet<u64> {
    replication(n)["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .filter_map(|g| g["group"].as_u64())
        .collect()
}

/// Waits until every member in `ms` shows `topic` in `group` led by the
/// same member, not `not`; that leader.
fn agreed_topic_leader(ms: &[&Member], topic: &str, group: u64, not: Option<u64>) -> u64 {
    wait_for(
        ELECTION_WAIT,
        &format!("every member naming {topic}'s leader"),
        || {
            let seen: Vec<Option<u64>> = ms
                .iter()
                .map(|m| {
                    let r = topic_replication(&m.nsqd, topic)?;
                    assert_eq!(r["group"].as_u64(), Some(group), "node {}: {r}", m.id);
                    r["leader"].as_u64()
                })
                .collect();
            let first = seen[0]?;
            (Some(first) != not && seen.iter().all(|s| *s == Some(first))).then_some(first)
        },
    )
}

/// Subscribes to channel `c` of `topic` on `m` and takes `n` messages,
/// FINing the first `fin`: their bodies, and the connection (kept open,
/// so what it did not FIN stays in flight).
fn consume(m: &Member, topic: &str, n: usize, fin: usize) -> (BTreeSet<String>, nsq_tests::Conn) {
    let mut consumer = m.nsqd.connect();
    consumer.sub(topic, "c");
    consumer.rdy(10);
    let mut bodies = BTreeSet::new();
    for i in 0..n {
        let msg = consumer.expect_msg_within(Duration::from_secs(10));
        bodies.insert(String::from_utf8(msg.body).unwrap());
        if i < fin {
            consumer.fin(&msg.id);
        }
    }
    (bodies, consumer)
}

#[test]
fn a_topic_of_three_replicas_on_five_members_lives_on_its_three() {
    let dirs: Vec<tempfile::TempDir> = (0..5).map(|_| tempfile::tempdir().unwrap()).collect();
    let lookupd = Lookupd::start(&[]);
    let mut members = start_cluster_of(5, &dirs, |_| {
        vec![
            format!("--lookupd-tcp-address={}", lookupd.tcp),
            "--broadcast-address=127.0.0.1".into(),
        ]
    });
    for m in &members {
        wait_standing(&m.nsqd, "member");
    }
    let t = "three_of_five";
    let (group, voters) = placed_on_three_of_five(t);
    let outsiders: Vec<u64> = (1..=5).filter(|id| !voters.contains(id)).collect();
    let outsider = by_id(&members, outsiders[0]);

    // Each member runs the groups of five and its groups of three.
    for m in &members {
        let mine = voted_groups(&m.nsqd);
        assert!((0..GROUPS as u64).all(|g| mine.contains(&g)), "{mine:?}");
        assert_eq!(
            mine.contains(&group),
            voters.contains(&m.id),
            "node {}",
            m.id
        );
    }

    // Created on a member outside the group: every member has it.
    assert_eq!(create(&outsider.nsqd, t, 3), (200, String::new()));
    assert_eq!(create(&outsider.nsqd, "all_five", 5), (200, String::new()));
    wait_replicas(&members, t, 3);
    wait_replicas(&members, "all_five", 5);
    let all: Vec<&Member> = members.iter().collect();
    let lid = agreed_topic_leader(&all, t, group, None);
    assert!(voters.contains(&lid), "leader {lid} of {voters:?}");
    for m in &members {
        let r = topic_replication(&m.nsqd, t).unwrap();
        let listed: BTreeSet<u64> = r["replicas"]
            .as_array()
            .expect("replicas")
            .iter()
            .filter_map(|x| x["node_id"].as_u64())
            .collect();
        assert_eq!(listed, voters, "node {}: {r}", m.id);
        // Only its voters hold its log.
        let dir = dirs[at_dir(m.id)]
            .path()
            .join("raft")
            .join(format!("{group:04}"));
        assert_eq!(dir.exists(), voters.contains(&m.id), "{}", dir.display());
    }

    // Published on every member: the two outside forward to the leader.
    for m in &members {
        m.nsqd
            .connect()
            .publish(t, format!("from {}", m.id).as_bytes());
    }
    outsider.nsqd.http_pub(t, b"over http");
    let leader = by_id(&members, lid);
    // Named with the TCP address it told its peers when they met.
    sub_refused_naming(outsider, t, leader);
    wait_for(WAIT, "the lookupd listing the leader alone", || {
        let v = lookupd.lookup(t)?;
        let ports: Vec<u64> = v["producers"]
            .as_array()?
            .iter()
            .filter_map(|p| p["tcp_port"].as_u64())
            .collect();
        (ports == vec![u64::from(leader.nsqd.tcp_port)]).then_some(())
    });
    // Two left unfinished for the next leader.
    let (bodies, _consumer) = consume(leader, t, 6, 4);
    let want: BTreeSet<String> = (1..=5)
        .map(|i| format!("from {i}"))
        .chain(["over http".to_string()])
        .collect();
    assert_eq!(bodies, want);
    let voting: Vec<&Member> = all
        .iter()
        .copied()
        .filter(|m| voters.contains(&m.id))
        .collect();
    wait_unfinished(&voting, t, 2);

    // A member outside the group has none of its channels, yet takes a
    // change to one: its group applies it.
    assert!(outsider.nsqd.channel_stats(t, "c").is_none());
    for (action, paused) in [("pause", true), ("unpause", false)] {
        let r = outsider
            .nsqd
            .post(&format!("/channel/{action}?topic={t}&channel=c"), b"");
        assert_eq!(r.status, 200, "{action}: {}", r.text());
        wait_for(
            WAIT,
            &format!("the leader's channel after {action}"),
            || {
                let c = leader.nsqd.channel_stats(t, "c")?;
                (c["paused"].as_bool() == Some(paused)).then_some(())
            },
        );
    }
    let r = leader
        .nsqd
        .post(&format!("/channel/pause?topic={t}&channel=nope"), b"");
    assert_eq!(r.status, 404, "{}", r.text());

    // The leader lost: its two other voters elect one, every member
    // names it, a publish through a member outside reaches it, and its
    // consumer gets the two unfinished and the new one.
    let mut gone = members.remove(members.iter().position(|m| m.id == lid).unwrap());
    gone.nsqd.kill9();
    let left: Vec<&Member> = members.iter().collect();
    let second = agreed_topic_leader(&left, t, group, Some(lid));
    assert!(voters.contains(&second) && second != lid);
    by_id(&members, outsiders[1])
        .nsqd
        .connect()
        .publish(t, b"after");
    let (again, _consumer) = consume(by_id(&members, second), t, 3, 3);
    sub_refused_naming(by_id(&members, outsiders[1]), t, by_id(&members, second));
    assert!(again.contains("after"), "{again:?}");
    assert!(
        again.iter().all(|b| want.contains(b) || b == "after"),
        "{again:?}"
    );

    // Two of its three voters gone: its publishes fail, on a member
    // outside too; the topic of all five (three of five still up) takes
    // them.
    let _second_gone = stop_member(&mut members, second);
    let outsider = by_id(&members, outsiders[0]);
    let mut c = outsider.nsqd.connect();
    let started = std::time::Instant::now();
    c.send(&nsq_tests::pub_cmd(t, b"no majority"));
    let f = c.recv_timeout(Duration::from_secs(10)).expect("an answer");
    let text = f.text();
    assert!(
        text.starts_with("E_PUB_FAILED PUB failed REPLICATION_"),
        "{text}"
    );
    assert!(started.elapsed() < Duration::from_secs(8));
    c.nop();
    c.publish("all_five", b"still");
}

//! A group's log does not grow forever: with `--replication-snapshot-entries=20`
//! every member takes snapshots of what the group's entries made (topics,
//! channels, pauses, each channel's progress) and purges its log below
//! them, never above the oldest batch a channel has not finished. A member
//! restarted after the purge starts from its snapshot; one that lost its
//! disk is sent the leader's snapshot; both then hold the topic, its
//! channels (paused as they were) and what is unfinished, and the next
//! leader delivers exactly that.

use std::collections::BTreeSet;
use std::time::Duration;

use nsq_tests::wait_for;
use serde_json::Value;

use super::leader::leader_of;
use super::members::*;

/// The snapshot index and purge point of `topic`'s group on `n`.
fn snapshot_of(n: &nsq_tests::Nsqd, topic: &str) -> (Option<u64>, Option<u64>) {
    let r = replication(n);
    let g = r["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .find(|g| g["group"].as_u64() == Some(group_of(topic) as u64))
        .cloned()
        .unwrap_or(Value::Null);
    (g["snapshot"].as_u64(), g["purged"].as_u64())
}

/// The channel `channel` of `topic` in `n`'s `/stats`: whether it is
/// there, and paused.
fn channel_paused(n: &nsq_tests::Nsqd, topic: &str, channel: &str) -> Option<bool> {
    let t = n.topic_stats(topic)?;
    t["channels"]
        .as_array()?
        .iter()
        .find(|c| c["channel_name"] == channel)
        .and_then(|c| c["paused"].as_bool())
}

fn bodies(range: std::ops::Range<usize>) -> BTreeSet<Vec<u8>> {
    range.map(|i| format!("s{i:03}").into_bytes()).collect()
}

#[test]
fn members_snapshot_and_purge_their_logs_and_start_again_from_a_snapshot() {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut members = start_cluster(&dirs, |_| {
        vec!["--replication-snapshot-entries=20".to_string()]
    });
    for m in &members {
        wait_standing(&m.nsqd, "member");
    }
    let t = "snapshot_purge";
    let all: Vec<&Member> = members.iter().collect();
    let lid = leader_of(&all, t, None);
    let leader = by_id(&members, lid);
    assert_eq!(create(&leader.nsqd, t, 3), (200, String::new()));
    wait_replicas(&members, t, 3);
    for path in [
        format!("/channel/create?topic={t}&channel=c"),
        format!("/channel/create?topic={t}&channel=p"),
        format!("/channel/pause?topic={t}&channel=p"),
    ] {
        let r = leader.nsqd.post(&path, b"");
        assert_eq!(r.status, 200, "{path}: {}", r.text());
    }

    // 100 batches (one PUB each), every one finished on `c`; `p` keeps
    // them all until it is emptied: the log may not be purged meanwhile.
    let mut producer = leader.nsqd.connect();
    for b in bodies(0..100) {
        producer.publish(t, &b);
    }
    let mut consumer = leader.nsqd.connect();
    consumer.sub(t, "c");
    consumer.rdy(100);
    for _ in 0..100 {
        let m = consumer.expect_msg_within(Duration::from_secs(20));
        consumer.fin(&m.id);
    }
    wait_unfinished(&all, t, 100);
    for m in &all {
        let (_, purged) = snapshot_of(&m.nsqd, t);
        let first_batch_kept = purged.is_none_or(|p| p < 5);
        assert!(
            first_batch_kept,
            "node {} purged up to {purged:?} while `p` has every batch unfinished",
            m.id
        );
    }
    let r = leader
        .nsqd
        .post(&format!("/channel/empty?topic={t}&channel=p"), b"");
    assert_eq!(r.status, 200, "{}", r.text());
    wait_unfinished(&all, t, 0);
    drop(consumer);

    // 5 more, not consumed: they stay in the log whatever is purged.
    for b in bodies(100..105) {
        producer.publish(t, &b);
    }
    wait_unfinished(&all, t, 5);
    for m in &all {
        wait_for(WAIT, &format!("node {} purging its log", m.id), || {
            let (snapshot, purged) = snapshot_of(&m.nsqd, t);
            (snapshot.is_some() && purged.is_some_and(|p| p > 50)).then_some(())
        });
    }
    drop(producer);

    // A follower restarted: from its snapshot and the rest of its log.
    let followers: Vec<u64> = all.iter().map(|m| m.id).filter(|id| *id != lid).collect();
    let mut restarted = members.remove(members.iter().position(|m| m.id == followers[0]).unwrap());
    restarted.nsqd.kill9();
    restarted.nsqd = start(dirs[at_dir(restarted.id)].path(), &restarted.args);
    members.push(restarted);

    // The other follower loses its disk: the leader sends its snapshot.
    let mut replaced = members.remove(members.iter().position(|m| m.id == followers[1]).unwrap());
    replaced.nsqd.kill9();
    let dir = dirs[at_dir(replaced.id)].path();
    std::fs::remove_dir_all(dir).unwrap();
    std::fs::create_dir_all(dir).unwrap();
    replaced.nsqd = start(dir, &replaced.args);
    members.push(replaced);

    for id in &followers {
        let m = by_id(&members, *id);
        wait_standing(&m.nsqd, "member");
        wait_unfinished(&[m], t, 5);
        assert_eq!(channel_paused(&m.nsqd, t, "c"), Some(false), "node {id}");
        assert_eq!(channel_paused(&m.nsqd, t, "p"), Some(true), "node {id}");
        assert_eq!(replicas_of(&m.nsqd, t), Some(Some(3)), "node {id}");
    }
    let sent = by_id(&members, followers[1]).nsqd.stderr();
    assert!(
        sent.contains("installed a snapshot from the leader"),
        "the member with an empty disk was not sent the snapshot:\n{sent}"
    );

    // The leader is lost: the next one delivers the 5, and nothing else.
    let mut old = members.remove(members.iter().position(|m| m.id == lid).unwrap());
    old.nsqd.kill9();
    let left: Vec<&Member> = members.iter().collect();
    let next = by_id(&members, leader_of(&left, t, Some(lid)));
    let mut consumer = next.nsqd.connect();
    consumer.sub(t, "c");
    consumer.rdy(100);
    let got: BTreeSet<Vec<u8>> = (0..5)
        .map(|_| consumer.expect_msg_within(Duration::from_secs(20)).body)
        .collect();
    assert_eq!(got, bodies(100..105));
    consumer.expect_nothing(Duration::from_secs(1));
    drop(old);
}

//! A replicated topic's pause and empty go through its group: paused
//! through a follower (answered once applied there and in its `nsqd.dat`),
//! every member shows it paused; emptied through a follower, the leader's
//! topic drops what it held; after the leader's SIGTERM the new leader
//! still has it paused, so a message published then waits until the topic
//! is unpaused through another member; without a majority a pause is a 503
//! naming why. A `reject` depth limit (the group's) refuses a publish on
//! the member that takes it, before it is proposed.

use std::time::Duration;

use nsq_tests::{frame, pub_cmd, wait_for, Nsqd, FRAME_ERROR};
use serde_json::Value;

use super::leader::leader_of;
use super::members::*;

fn topic_post(n: &Nsqd, action: &str, t: &str) -> (u16, String) {
    let r = n.post(&format!("/topic/{action}?topic={t}"), b"");
    (r.status, r.text())
}

/// A number or flag of the topic in `n`'s `/stats`; None without the topic.
fn topic_field(n: &Nsqd, t: &str, key: &str) -> Option<Value> {
    n.topic_stats(t).map(|s| s[key].clone())
}

fn wait_topic(ms: &[&Member], t: &str, key: &str, want: Value) {
    for m in ms {
        wait_for(
            WAIT,
            &format!("node {} showing {t} {key}={want}", m.id),
            || (topic_field(&m.nsqd, t, key).as_ref() == Some(&want)).then_some(()),
        );
    }
}

/// The topic's `paused` in `n`'s `nsqd.dat`.
fn paused_on_disk(n: &Nsqd, t: &str) -> Option<bool> {
    let dat: Value = serde_json::from_str(&n.read_metadata()?).ok()?;
    dat["topics"].as_array()?.iter().find(|x| x["name"] == t)?["paused"].as_bool()
}

#[test]
fn a_replicated_topics_pause_and_empty_follow_its_group() {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut members = start_cluster(&dirs, |_| Vec::new());
    let all: Vec<&Member> = members.iter().collect();
    let t = "replicated_pause";
    let lid = leader_of(&all, t, None);
    let followers: Vec<&Member> = all.iter().copied().filter(|m| m.id != lid).collect();
    assert_eq!(create(&followers[0].nsqd, t, 3), (200, String::new()));
    wait_replicas(&members, t, 3);
    let r = followers[0]
        .nsqd
        .post(&format!("/channel/create?topic={t}&channel=c"), b"");
    assert_eq!(r.status, 200, "{}", r.text());

    // Paused through a follower (forwarded to the leader): answered once
    // applied and persisted there, then shown paused by every member.
    assert_eq!(
        topic_post(&followers[0].nsqd, "pause", t),
        (200, String::new())
    );
    assert_eq!(
        topic_field(&followers[0].nsqd, t, "paused"),
        Some(Value::Bool(true))
    );
    assert_eq!(paused_on_disk(&followers[0].nsqd, t), Some(true));
    wait_topic(&all, t, "paused", Value::Bool(true));

    // Held in the paused topic on the leader, then emptied through the
    // other follower: the leader drops them.
    followers[0].nsqd.connect().publish(t, b"dropped");
    followers[1].nsqd.connect().publish(t, b"dropped too");
    let leader = by_id(&members, lid);
    wait_topic(&[leader], t, "depth", Value::from(2));
    assert_eq!(
        topic_post(&followers[1].nsqd, "empty", t),
        (200, String::new())
    );
    wait_topic(&[leader], t, "depth", Value::from(0));

    // The leader stops: the new one has the topic paused, so what is
    // published now waits until it is unpaused through the other member.
    let _gone = stop_member(&mut members, lid);
    let left: Vec<&Member> = members.iter().collect();
    let second = leader_of(&left, t, Some(lid));
    let new_leader = by_id(&members, second);
    let other = left.iter().copied().find(|m| m.id != second).unwrap();
    assert_eq!(
        topic_field(&new_leader.nsqd, t, "paused"),
        Some(Value::Bool(true))
    );
    let mut consumer = new_leader.nsqd.connect();
    consumer.sub(t, "c");
    consumer.rdy(10);
    other.nsqd.connect().publish(t, b"held");
    wait_topic(&[new_leader], t, "depth", Value::from(1));
    assert!(
        consumer.recv_timeout(Duration::from_secs(1)).is_none(),
        "a paused topic delivered"
    );
    assert_eq!(topic_post(&other.nsqd, "unpause", t), (200, String::new()));
    let m = consumer.expect_msg_within(Duration::from_secs(10));
    assert_eq!(m.body, b"held");
    consumer.fin(&m.id);
    wait_topic(&left, t, "paused", Value::Bool(false));

    // Without a majority a pause is refused, naming why, and changes
    // nothing here.
    let _gone = stop_member(&mut members, second);
    let last = &members[0];
    let (status, body) = topic_post(&last.nsqd, "pause", t);
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("REPLICATION_NO_LEADER") || body.contains("REPLICATION_TIMEOUT"),
        "{body}"
    );
    assert_eq!(
        topic_field(&last.nsqd, t, "paused"),
        Some(Value::Bool(false))
    );
}

/// The channel's `depth` in `n`'s `/stats`.
fn channel_depth(n: &Nsqd, t: &str, c: &str) -> Option<u64> {
    n.channel_stats(t, c).and_then(|s| s["depth"].as_u64())
}

#[test]
fn a_reject_limit_refuses_a_replicated_publish_before_it_is_proposed() {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let members = start_cluster(&dirs, |_| Vec::new());
    let all: Vec<&Member> = members.iter().collect();
    let t = "replicated_limit";
    let lid = leader_of(&all, t, None);
    let leader = by_id(&members, lid);
    let follower = all.iter().copied().find(|m| m.id != lid).unwrap();
    assert_eq!(create(&leader.nsqd, t, 3), (200, String::new()));
    wait_replicas(&members, t, 3);
    let r = leader
        .nsqd
        .post(&format!("/channel/create?topic={t}&channel=c"), b"");
    assert_eq!(r.status, 200, "{}", r.text());
    // The limit is the group's (`limits.rs` has the rest).
    let r = leader.nsqd.post(
        &format!("/channel/config?topic={t}&channel=c&max_depth=2&max_depth_policy=reject"),
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());

    let mut producer = leader.nsqd.connect();
    producer.publish(t, b"one");
    producer.publish(t, b"two");
    assert_eq!(channel_depth(&leader.nsqd, t, "c"), Some(2));
    // A third would take c past 2: refused as an unreplicated publish is,
    // the connection kept, nothing proposed.
    let last = replication(&leader.nsqd)["groups"][group_of(t)]["last_log_index"].clone();
    producer.send(&pub_cmd(t, b"three"));
    producer.expect_error_nonfatal("E_PUB_FAILED PUB failed channel c is at max_depth 2");
    leader
        .nsqd
        .post(&format!("/pub?topic={t}"), b"three")
        .assert_error(503, "MAX_DEPTH_REACHED");
    assert_eq!(
        replication(&leader.nsqd)["groups"][group_of(t)]["last_log_index"],
        last,
        "a refused publish was proposed"
    );
    assert_eq!(channel_depth(&leader.nsqd, t, "c"), Some(2));
    // The connection still serves.
    producer.publish("plain", b"x");

    // A follower counts what the group holds, as the leader does, once it
    // has applied the two: it refuses too.
    wait_for(WAIT, "the follower counting the two", || {
        let r = follower
            .nsqd
            .get(&format!("/channel/config?topic={t}&channel=c"));
        (r.json()["group_depth"] == 2).then_some(())
    });
    // (Read here: the helpers' check that the connection stays open
    // publishes to a new topic, which a member not yet caught up with its
    // groups refuses.)
    let mut other = follower.nsqd.connect();
    other.send(&pub_cmd(t, b"four"));
    let f = other.recv();
    assert_eq!(
        f.bytes(),
        frame(
            FRAME_ERROR,
            b"E_PUB_FAILED PUB failed channel c is at max_depth 2"
        ),
        "{f:?}"
    );
    assert_eq!(channel_depth(&leader.nsqd, t, "c"), Some(2));
}

//! Depth limits of a replicated topic are its group's (docs/features/limits.md,
//! "On a replicated topic"): set on any member, committed through the group,
//! shown by every member; a `reject` limit counts what the group holds
//! unfinished (in flight on the leader included), so every member refuses
//! at the same depth, and so does a new leader after the old one is
//! SIGKILLed, and every member after all of them restart; a channel's
//! `drop-oldest` drops the same messages on every member, which no leader
//! delivers, before or after a failover; a limit the group cannot keep (a
//! topic's own `drop-oldest`) and bad values are refused with why; a
//! member outside the topic's group (five members, `replicas=3`) is
//! refused by the group's leader.

use std::collections::BTreeSet;
use std::time::Duration;

use nsq_tests::{frame, pub_cmd, wait_for, Conn, Nsqd, FRAME_ERROR};
use serde_json::Value;

use super::leader::leader_of;
use super::members::*;

/// `n`'s `/channel/config` (GET) of `t`'s channel `c`.
fn channel_config(n: &Nsqd, t: &str, c: &str) -> Value {
    let r = n.get(&format!("/channel/config?topic={t}&channel={c}"));
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

/// Waits until every member shows `key` = `want` in `c`'s config (a
/// member that has not applied the channel yet answers 404 meanwhile).
fn wait_config(ms: &[&Member], t: &str, c: &str, key: &str, want: Value) {
    for m in ms {
        wait_for(
            WAIT,
            &format!("node {} showing {t}/{c} {key}={want}", m.id),
            || {
                let r = m
                    .nsqd
                    .get(&format!("/channel/config?topic={t}&channel={c}"));
                (r.status == 200 && r.json()[key] == want).then_some(())
            },
        );
    }
}

/// A PUB to `t` on `n` refused by `c`'s limit of `max`, twice on one
/// connection (it stays open), and `/pub` refused with 503.
fn refused(n: &Nsqd, t: &str, c: &str, max: u64) {
    let mut producer = n.connect();
    pub_refused(
        &mut producer,
        t,
        &format!("E_PUB_FAILED PUB failed channel {c} is at max_depth {max}"),
    );
    n.post(&format!("/pub?topic={t}"), b"over")
        .assert_error(503, "MAX_DEPTH_REACHED");
}

/// A PUB to `t` answered with the non-fatal error `msg`, and a second one
/// on the same connection too: it stays open. (Not the helpers' check,
/// which publishes to a new topic, which a member that has not caught up
/// with its groups since it started refuses.)
fn pub_refused(producer: &mut Conn, t: &str, msg: &str) {
    for _ in 0..2 {
        producer.send(&pub_cmd(t, b"over"));
        let f = producer.recv();
        assert_eq!(f.bytes(), frame(FRAME_ERROR, msg.as_bytes()), "{f:?}");
    }
}

/// Where `n` purged the log of `t`'s group, if it did.
fn purged(n: &Nsqd, t: &str) -> Option<u64> {
    replication(n)["groups"]
        .as_array()?
        .iter()
        .find(|g| g["group"].as_u64() == Some(group_of(t) as u64))?["purged"]
        .as_u64()
}

/// Reads `n` messages within generous waits: (id, body).
fn receive(c: &mut Conn, n: usize) -> Vec<(String, Vec<u8>)> {
    (0..n)
        .map(|_| {
            let m = c.expect_msg_within(Duration::from_secs(20));
            (m.id, m.body)
        })
        .collect()
}

#[test]
fn a_reject_limit_counts_what_the_group_holds_across_a_failover_and_restarts() {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    // A snapshot at every entry it may claim, so the restarts below start
    // from images, the limit's entry purged from the logs.
    let mut members = start_cluster(&dirs, |_| {
        vec!["--replication-snapshot-entries=1".to_string()]
    });
    let t = "group_limit_reject";
    let lid = led_topic_with_channel(&members, t);
    let leader = by_id(&members, lid);

    // Set on the leader, committed through the group: every member has it.
    let r = leader.nsqd.post(
        &format!("/channel/config?topic={t}&channel=c&max_depth=3&max_depth_policy=reject"),
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["max_depth"], 3);
    // The limit's entry is at or below this.
    let limit_index = replication(&leader.nsqd)["groups"][group_of(t)]["last_log_index"]
        .as_u64()
        .expect("an index");
    let all: Vec<&Member> = members.iter().collect();
    wait_config(&all, t, "c", "max_depth", Value::from(3));

    // One of three in flight on the leader: its channel's depth is 2, but
    // the group holds 3 unfinished, and that is what counts.
    let mut consumer = leader.nsqd.connect();
    consumer.sub(t, "c");
    consumer.rdy(1);
    let mut producer = leader.nsqd.connect();
    for body in [b"one", b"two", b"thr"] {
        producer.publish(t, body);
    }
    let first = consumer.expect_msg_within(Duration::from_secs(20));
    wait_config(&all, t, "c", "group_depth", Value::from(3));
    refused(&leader.nsqd, t, "c", 3);
    for m in &all {
        refused(&m.nsqd, t, "c", 3);
    }
    let last = replication(&leader.nsqd)["groups"][group_of(t)]["last_log_index"].clone();
    refused(&leader.nsqd, t, "c", 3);
    assert_eq!(
        replication(&leader.nsqd)["groups"][group_of(t)]["last_log_index"],
        last,
        "a refused publish was proposed"
    );

    // The leader is SIGKILLed with one in flight: the new leader counts
    // the same three and refuses at the same depth.
    let mut gone = members.remove(members.iter().position(|m| m.id == lid).unwrap());
    gone.nsqd.kill9();
    drop((consumer, first));
    let left: Vec<&Member> = members.iter().collect();
    let second = leader_of(&left, t, Some(lid));
    let new_leader = by_id(&members, second);
    wait_config(&left, t, "c", "group_depth", Value::from(3));
    assert_eq!(channel_config(&new_leader.nsqd, t, "c")["max_depth"], 3);
    refused(&new_leader.nsqd, t, "c", 3);

    // A FIN committed through the group makes room, on every member.
    let mut consumer = new_leader.nsqd.connect();
    consumer.sub(t, "c");
    consumer.rdy(10);
    let got = receive(&mut consumer, 3);
    let bodies: BTreeSet<Vec<u8>> = got.iter().map(|(_, b)| b.clone()).collect();
    assert_eq!(bodies.len(), 3, "{got:?}");
    consumer.fin(&got[0].0);
    wait_config(&left, t, "c", "group_depth", Value::from(2));
    let other = left.iter().find(|m| m.id != second).unwrap();
    other.nsqd.connect().publish(t, b"fits");
    wait_config(&left, t, "c", "group_depth", Value::from(3));
    refused(&other.nsqd, t, "c", 3);
    drop(consumer);

    // Every member restarts (the killed one too): the limit is still the
    // group's, from the snapshot the survivors took past its entry.
    for m in &left {
        wait_for(WAIT, &format!("node {} purging its log", m.id), || {
            purged(&m.nsqd, t).filter(|&p| p >= limit_index).map(drop)
        });
    }
    let mut stopped = vec![gone];
    for id in members.iter().map(|m| m.id).collect::<Vec<_>>() {
        stopped.push(stop_member(&mut members, id));
    }
    for s in stopped {
        let nsqd = start(dirs[at_dir(s.id)].path(), &s.args);
        members.push(Member {
            id: s.id,
            nsqd,
            args: s.args.clone(),
        });
    }
    let all: Vec<&Member> = members.iter().collect();
    leader_of(&all, t, None);
    wait_config(&all, t, "c", "max_depth", Value::from(3));
    wait_config(&all, t, "c", "group_depth", Value::from(3));
    for m in &all {
        refused(&m.nsqd, t, "c", 3);
    }
}

#[test]
fn drop_oldest_drops_the_same_messages_everywhere_and_bad_limits_are_refused() {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut members = start_cluster(&dirs, |_| Vec::new());
    let t = "group_limit_drop";
    let lid = led_topic_with_channel(&members, t);
    let all: Vec<&Member> = members.iter().collect();
    // Every member has the channel (none refuses it as not found below).
    wait_config(&all, t, "c", "max_depth", Value::from(0));
    let follower = all.iter().copied().find(|m| m.id != lid).unwrap();
    let leader = by_id(&members, lid);
    let config = |n: &Nsqd, q: &str| {
        let r = n.post(&format!("/channel/config?topic={t}&{q}"), b"");
        (r.status, r.text())
    };

    // Bad input: a clear answer, nothing committed.
    let last = replication(&leader.nsqd)["groups"][group_of(t)]["last_log_index"].clone();
    let (status, body) = {
        let r = follower.nsqd.post(
            &format!("/topic/config?topic={t}&max_depth=5&max_depth_policy=drop-oldest"),
            b"",
        );
        (r.status, r.text())
    };
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("REPLICATED_TOPIC_DROP_OLDEST"), "{body}");
    assert_eq!(
        config(&follower.nsqd, "channel=c&max_depth=x"),
        (400, r#"{"message":"INVALID_ARG_MAX_DEPTH"}"#.into())
    );
    assert_eq!(
        config(&follower.nsqd, "channel=c&max_depth_policy=oldest"),
        (400, r#"{"message":"INVALID_ARG_MAX_DEPTH_POLICY"}"#.into())
    );
    assert_eq!(
        config(&follower.nsqd, "channel=nope&max_depth=1"),
        (404, r#"{"message":"CHANNEL_NOT_FOUND"}"#.into())
    );
    assert_eq!(
        replication(&leader.nsqd)["groups"][group_of(t)]["last_log_index"],
        last,
        "a refused limit was proposed"
    );

    // Set through a follower: two kept, the oldest dropped.
    let (status, body) = config(
        &follower.nsqd,
        "channel=c&max_depth=2&max_depth_policy=drop-oldest",
    );
    assert_eq!(status, 200, "{body}");
    wait_config(&all, t, "c", "max_depth_policy", Value::from("drop-oldest"));
    let mut producer = leader.nsqd.connect();
    for i in 1..=5 {
        producer.publish(t, format!("m{i}").as_bytes());
    }
    // Every member agrees on what is left and what was dropped.
    wait_config(&all, t, "c", "group_dropped_count", Value::from(3));
    wait_config(&all, t, "c", "group_depth", Value::from(2));
    // The leader's channel holds the two kept, no more.
    wait_for(WAIT, "the leader's channel two deep", || {
        let c = leader.nsqd.channel_stats(t, "c")?;
        (c["depth"] == 2).then_some(())
    });
    // `/stats` shows the group's limit and drops on every member.
    for m in &all {
        let c = m.nsqd.channel_stats(t, "c").expect("channel c");
        assert_eq!(
            (&c["max_depth"], &c["max_depth_policy"], &c["dropped_count"]),
            (
                &Value::from(2),
                &Value::from("drop-oldest"),
                &Value::from(3)
            ),
            "node {}",
            m.id
        );
    }

    // The leader delivers only the two kept.
    let mut consumer = leader.nsqd.connect();
    consumer.sub(t, "c");
    consumer.rdy(10);
    let got: BTreeSet<Vec<u8>> = receive(&mut consumer, 2)
        .into_iter()
        .map(|(_, b)| b)
        .collect();
    let kept: BTreeSet<Vec<u8>> = [b"m4".to_vec(), b"m5".to_vec()].into();
    assert_eq!(got, kept);
    consumer.expect_nothing(Duration::from_secs(1));

    // SIGKILLed with both in flight: the new leader delivers the same two,
    // none of the dropped.
    let mut gone = members.remove(members.iter().position(|m| m.id == lid).unwrap());
    gone.nsqd.kill9();
    drop(consumer);
    let left: Vec<&Member> = members.iter().collect();
    let second = leader_of(&left, t, Some(lid));
    let new_leader = by_id(&members, second);
    let mut consumer = new_leader.nsqd.connect();
    consumer.sub(t, "c");
    consumer.rdy(10);
    let again = receive(&mut consumer, 2);
    let got: BTreeSet<Vec<u8>> = again.iter().map(|(_, b)| b.clone()).collect();
    assert_eq!(got, kept);
    consumer.expect_nothing(Duration::from_secs(1));
    for (id, _) in &again {
        consumer.fin(id);
    }
    wait_config(&left, t, "c", "group_depth", Value::from(0));

    // A topic's own reject limit counts what it holds (no channel yet).
    let held = "group_limit_held";
    assert_eq!(create(&new_leader.nsqd, held, 3), (200, String::new()));
    wait_replicas(&members, held, 3);
    let r = new_leader
        .nsqd
        .post(&format!("/topic/config?topic={held}&max_depth=1"), b"");
    assert_eq!(r.status, 200, "{}", r.text());
    let other = left.iter().find(|m| m.id != second).unwrap();
    wait_for(WAIT, "the topic's limit on the other member", || {
        let r = other.nsqd.get(&format!("/topic/config?topic={held}"));
        (r.json()["max_depth"] == 1).then_some(())
    });
    new_leader.nsqd.connect().publish(held, b"kept");
    wait_for(WAIT, "the held message on the other member", || {
        let r = other.nsqd.get(&format!("/topic/config?topic={held}"));
        (r.json()["group_depth"] == 1).then_some(())
    });
    let mut producer = other.nsqd.connect();
    pub_refused(
        &mut producer,
        held,
        "E_PUB_FAILED PUB failed topic is at max_depth 1",
    );
}

#[test]
fn a_member_outside_the_group_is_refused_by_the_groups_leader() {
    let dirs: Vec<tempfile::TempDir> = (0..5).map(|_| tempfile::tempdir().unwrap()).collect();
    let members = start_cluster_of(5, &dirs, |_| Vec::new());
    let t = "group_limit_outside";
    assert_eq!(create(&members[0].nsqd, t, 3), (200, String::new()));
    wait_replicas(&members, t, 3);
    let voters: BTreeSet<u64> = wait_for(WAIT, "the topic's voters", || {
        let r = members[0].nsqd.topic_stats(t)?["replication"]["replicas"].clone();
        let ids: BTreeSet<u64> = r
            .as_array()?
            .iter()
            .filter_map(|v| v["node_id"].as_u64())
            .collect();
        (ids.len() == 3).then_some(ids)
    });
    let outside = members.iter().find(|m| !voters.contains(&m.id)).unwrap();
    let voter = members.iter().find(|m| voters.contains(&m.id)).unwrap();
    let r = outside
        .nsqd
        .post(&format!("/channel/create?topic={t}&channel=c"), b"");
    assert_eq!(r.status, 200, "{}", r.text());
    wait_for(WAIT, "the channel on a voter", || {
        voter.nsqd.channel_stats(t, "c").map(drop)
    });
    let r = voter.nsqd.post(
        &format!("/channel/config?topic={t}&channel=c&max_depth=2"),
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let voters_m: Vec<&Member> = members.iter().filter(|m| voters.contains(&m.id)).collect();
    wait_config(&voters_m, t, "c", "max_depth", Value::from(2));

    // The member outside holds none of the group's progress: its publishes
    // are checked by the group's leader, which refuses the third.
    let mut producer = outside.nsqd.connect();
    producer.publish(t, b"one");
    producer.publish(t, b"two");
    wait_config(&voters_m, t, "c", "group_depth", Value::from(2));
    pub_refused(
        &mut producer,
        t,
        "E_PUB_FAILED PUB failed channel c is at max_depth 2",
    );
    outside
        .nsqd
        .post(&format!("/pub?topic={t}"), b"three")
        .assert_error(503, "MAX_DEPTH_REACHED");
    assert_eq!(channel_config(&voter.nsqd, t, "c")["group_depth"], 2);
}

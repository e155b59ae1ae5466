//! The channels of a replicated topic go through its group: made and
//! paused through any member (each answers once applied there), every
//! member has them (paused); a SUB on the
//! leader makes its channel at once and every member gets it soon after;
//! an `#ephemeral` channel stays on the leader, and none is pre-created
//! from the lookupd. When the leader stops, the
//! new one registers the channels with nsqlookupd and the paused one is
//! still paused; a restarted member has them again; a delete through any
//! member removes the channel everywhere; without a majority a change is a
//! 503 naming why, and a channel a SUB made meanwhile is committed once
//! the majority is back.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use nsq_tests::{http_get, http_post, wait_for, Lookupd, Nsqd};
use serde_json::Value;

use super::leader::leader_of;
use super::members::*;

fn channel_post(n: &Nsqd, action: &str, t: &str, c: &str) -> (u16, String) {
    let r = n.post(&format!("/channel/{action}?topic={t}&channel={c}"), b"");
    (r.status, r.text())
}

/// The channel's `paused` in `n`'s `/stats`; None while it has no such
/// channel.
fn paused(n: &Nsqd, t: &str, c: &str) -> Option<bool> {
    n.channel_stats(t, c).and_then(|s| s["paused"].as_bool())
}

fn wait_paused(ms: &[&Member], t: &str, c: &str, want: bool) {
    for m in ms {
        wait_for(
            WAIT,
            &format!("node {} showing {t}/{c} paused={want}", m.id),
            || (paused(&m.nsqd, t, c) == Some(want)).then_some(()),
        );
    }
}

/// The TCP ports of the producers that registered channel `c` of `t` with
/// the lookupd (its `/debug`: a lookupd keeps a channel it was told of
/// after its producer left, so `/channels` alone does not show who
/// registered it).
fn registered_by(l: &Lookupd, t: &str, c: &str) -> BTreeSet<u64> {
    let r = http_get(&l.http, "/debug");
    assert_eq!(r.status, 200, "{}", r.text());
    let v: Value = r.json();
    v[format!("channel:{t}:{c}")]
        .as_array()
        .map(|ps| ps.iter().filter_map(|p| p["tcp_port"].as_u64()).collect())
        .unwrap_or_default()
}

fn lookupd_channels(l: &Lookupd, t: &str) -> Vec<String> {
    let r = http_get(&l.http, &format!("/channels?topic={t}"));
    assert_eq!(r.status, 200, "{}", r.text());
    let v: Value = r.json();
    v["channels"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .filter_map(|c| c.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn channels_of_a_replicated_topic_follow_its_group() {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let (lookupd, mut members) = start_cluster_with_lookupd(&dirs);
    let all: Vec<&Member> = members.iter().collect();
    let t = "replicated_channels";
    // A channel the lookupd was told of before the topic exists: NSQ's
    // pre-creation would make it on every member, outside the group.
    let pre = http_post(
        &lookupd.http,
        &format!("/channel/create?topic={t}&channel=pre"),
        b"",
    );
    assert_eq!(pre.status, 200, "{}", pre.text());
    let lid = leader_of(&all, t, None);
    let followers: Vec<&Member> = all.iter().copied().filter(|m| m.id != lid).collect();
    assert_eq!(create(&followers[0].nsqd, t, 3), (200, String::new()));
    wait_replicas(&members, t, 3);

    // Made through one follower, paused through the other (each forwarded
    // to the leader): both answered once applied there, and every member
    // has the channel, paused.
    assert_eq!(
        channel_post(&followers[0].nsqd, "create", t, "c"),
        (200, String::new())
    );
    assert_eq!(paused(&followers[0].nsqd, t, "c"), Some(false));
    // The other follower answers from what it has applied: it has the
    // channel once the leader's next append or heartbeat tells it the
    // create was committed.
    wait_paused(&[followers[1]], t, "c", false);
    assert_eq!(
        channel_post(&followers[1].nsqd, "pause", t, "c"),
        (200, String::new())
    );
    assert_eq!(paused(&followers[1].nsqd, t, "c"), Some(true));
    // ... and persisted there before the answer.
    let dat = followers[1].nsqd.read_metadata().expect("nsqd.dat");
    assert!(dat.contains(r#"{"name":"c","paused":true}"#), "{dat}");
    wait_paused(&all, t, "c", true);
    for m in &all {
        assert!(
            m.nsqd.channel_stats(t, "pre").is_none(),
            "node {} pre-created a channel of a replicated topic",
            m.id
        );
    }
    // A channel a member does not have is NSQ's 404, not a proposal.
    assert_eq!(
        channel_post(&followers[0].nsqd, "pause", t, "none"),
        (404, "{\"message\":\"CHANNEL_NOT_FOUND\"}".into())
    );

    // A SUB on the leader is answered at once and every member gets its
    // channel; an ephemeral channel stays on the leader.
    let leader = by_id(&members, lid);
    let mut ephemeral = leader.nsqd.connect();
    ephemeral.sub(t, "e#ephemeral");
    let mut consumer = leader.nsqd.connect();
    consumer.sub(t, "s");
    wait_paused(&all, t, "s", false);
    for f in &followers {
        assert!(
            f.nsqd.channel_stats(t, "e#ephemeral").is_none(),
            "node {} has the ephemeral channel",
            f.id
        );
    }
    wait_for(WAIT, "the leader registering both channels", || {
        let port = u64::from(leader.nsqd.tcp_port);
        (registered_by(&lookupd, t, "c").contains(&port)
            && registered_by(&lookupd, t, "s").contains(&port))
        .then_some(())
    });

    // The leader stops: the new one registers both channels with the
    // lookupd (alone), and "c" is still paused there.
    drop(ephemeral);
    drop(consumer);
    let mut old = stop_member(&mut members, lid);
    let left: Vec<&Member> = members.iter().collect();
    let second = leader_of(&left, t, Some(lid));
    let new_leader = by_id(&members, second);
    let port = u64::from(new_leader.nsqd.tcp_port);
    wait_for(
        WAIT,
        "the new leader registering both channels alone",
        || {
            (registered_by(&lookupd, t, "c") == BTreeSet::from([port])
                && registered_by(&lookupd, t, "s") == BTreeSet::from([port]))
            .then_some(())
        },
    );
    let listed = lookupd_channels(&lookupd, t);
    assert!(
        listed.contains(&"c".to_string()) && listed.contains(&"s".to_string()),
        "/channels?topic={t}: {listed:?}"
    );
    assert_eq!(paused(&new_leader.nsqd, t, "c"), Some(true));
    assert_eq!(paused(&new_leader.nsqd, t, "s"), Some(false));
    // Paused there: a message published now waits in the channel.
    let mut c = new_leader.nsqd.connect();
    c.sub(t, "c");
    c.rdy(1);
    new_leader.nsqd.connect().publish(t, b"held");
    wait_for(WAIT, "the message waiting in the paused channel", || {
        let s = new_leader.nsqd.channel_stats(t, "c")?;
        (s["depth"].as_u64() == Some(1) && s["in_flight_count"].as_u64() == Some(0)).then_some(())
    });
    nsq_tests::sleep_ms(300);
    let s = new_leader.nsqd.channel_stats(t, "c").unwrap();
    assert_eq!(
        s["in_flight_count"], 0,
        "delivered from a paused channel: {s}"
    );

    // Deleted through the member that does not lead: gone everywhere, and
    // from the new leader's registrations.
    let other = left.iter().find(|m| m.id != second).unwrap();
    assert_eq!(
        channel_post(&other.nsqd, "delete", t, "c"),
        (200, String::new())
    );
    assert!(other.nsqd.channel_stats(t, "c").is_none());
    for m in &left {
        wait_for(WAIT, &format!("node {} without {t}/c", m.id), || {
            m.nsqd.channel_stats(t, "c").is_none().then_some(())
        });
    }
    c.read_until_closed(Duration::from_secs(10));
    wait_for(WAIT, "the channel unregistered", || {
        registered_by(&lookupd, t, "c").is_empty().then_some(())
    });

    // The old leader restarts from its data path: it has "s" and not "c"
    // (its nsqd.dat and the group's log, applied again, agree).
    old.nsqd = start(dirs[at_dir(lid)].path(), &old.args);
    members.push(old);
    let back = members.last().unwrap();
    wait_paused(&[back], t, "s", false);
    wait_for(WAIT, "the restarted member without c", || {
        back.nsqd.channel_stats(t, "c").is_none().then_some(())
    });

    // Two of three stopped: a change is refused with the reason, within
    // the 5 s a commit may take.
    let keep = members.iter().position(|m| m.id != second).unwrap();
    let ids: Vec<u64> = members.iter().map(|m| m.id).collect();
    for (i, m) in members.iter_mut().enumerate() {
        if i != keep {
            let st = m.nsqd.sigterm_and_wait(Duration::from_secs(10));
            assert!(st.success(), "node {}: {st}", ids[i]);
        }
    }
    let alone = &members[keep].nsqd;
    let began = Instant::now();
    let (status, body) = channel_post(alone, "pause", t, "s");
    assert_eq!(status, 503, "{body}");
    assert!(
        body == "{\"message\":\"REPLICATION_NO_LEADER\"}"
            || body == "{\"message\":\"REPLICATION_TIMEOUT\"}",
        "{body}"
    );
    assert!(began.elapsed() < Duration::from_secs(8));
    assert_eq!(paused(alone, t, "s"), Some(false), "nothing changed");
}

/// A SUB on the leader while its group has no majority makes the channel
/// there at once; its proposal times out (logged) but stays in the
/// leader's log, so the group commits it once the majority is back, with
/// no second SUB: the followers have it and a failover keeps it.
#[test]
fn a_channel_made_by_a_sub_without_a_majority_is_committed_once_it_returns() {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut members = start_cluster(&dirs, |_| Vec::new());
    let all: Vec<&Member> = members.iter().collect();
    let t = "replicated_sub_retry";
    assert_eq!(create(&all[0].nsqd, t, 3), (200, String::new()));
    wait_replicas(&members, t, 3);
    let lid = leader_of(&all, t, None);

    // Both followers stopped: the leader keeps the group (nothing can
    // depose it) but can commit nothing.
    let followers: Vec<u64> = members
        .iter()
        .map(|m| m.id)
        .filter(|&id| id != lid)
        .collect();
    let stopped: Vec<Member> = followers
        .iter()
        .map(|&id| stop_member(&mut members, id))
        .collect();
    let leader = by_id(&members, lid);
    let mut consumer = leader.nsqd.connect();
    consumer.sub(t, "late");
    assert!(leader.nsqd.channel_stats(t, "late").is_some());
    // Its proposal times out (the 5 s a commit may take).
    wait_for(WAIT, "the timed-out proposal logged", || {
        leader
            .nsqd
            .stderr()
            .contains("channel made by a SUB not committed to its group")
            .then_some(())
    });

    // The followers back: they get the channel with no other SUB.
    for mut m in stopped {
        m.nsqd = start(dirs[at_dir(m.id)].path(), &m.args);
        members.push(m);
    }
    let all: Vec<&Member> = members.iter().collect();
    wait_paused(&all, t, "late", false);

    // The leader lost: the new one has the channel, and takes its consumer.
    drop(consumer);
    stop_member(&mut members, lid);
    let left: Vec<&Member> = members.iter().collect();
    let next = by_id(&members, leader_of(&left, t, Some(lid)));
    assert_eq!(paused(&next.nsqd, t, "late"), Some(false));
    next.nsqd.connect().publish(t, b"after the failover");
    let mut c = next.nsqd.connect();
    c.sub(t, "late");
    c.rdy(1);
    let m = c.expect_msg_within(Duration::from_secs(10));
    assert_eq!(m.body, b"after the failover");
}

//! Idle groups go quiet and still fail over: three members, a replicated
//! topic with a channel and a consumer on its leader. Once nothing is
//! published, every group's leader says `"quiet": true` in `GET
//! /replication` (its heartbeats are off) while every member has applied
//! all of it; a publish through a follower is delivered at once. The
//! leader of the topic's group, quiet, is then lost (SIGKILL): the other
//! two elect a new leader, which takes publishes and delivers what was
//! not finished. The killed member restarts with its disk and, though
//! the new leader was quiet, learns who leads and catches up (its
//! publishes are accepted), and the groups go quiet again.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::leader::leader_of;
use super::members::*;

/// Waits until every group has a leader that says it is quiet, and every
/// member has applied that leader's last entry, in two views in a row
/// with the same logs (a flag read just after a publish may be the one
/// from before it); the groups' views.
fn wait_all_quiet(members: &[&Member]) -> Vec<Value> {
    let deadline = Instant::now() + WAIT;
    let mut before: Option<Vec<Value>> = None;
    loop {
        let views: Vec<Value> = members.iter().map(|m| replication(&m.nsqd)).collect();
        let groups = views[0]["groups"].as_array().map_or(0, Vec::len);
        let quiet = (0..groups).all(|g| {
            views.iter().any(|v| {
                let me = &v["groups"][g];
                me["state"] == "leader"
                    && me["quiet"] == true
                    && views
                        .iter()
                        .all(|o| o["groups"][g]["last_applied"] == me["last_log_index"])
            })
        });
        let logs = |vs: &[Value]| -> Vec<Value> {
            vs.iter()
                .flat_map(|v| v["groups"].as_array().cloned().unwrap_or_default())
                .map(|g| g["last_log_index"].clone())
                .collect()
        };
        assert!(
            Instant::now() < deadline,
            "groups not quiet: {}",
            serde_json::to_string_pretty(&views).unwrap_or_default()
        );
        if groups > 0 && quiet {
            if before.as_deref().is_some_and(|b| logs(b) == logs(&views)) {
                return views;
            }
            before = Some(views);
        } else {
            before = None;
        }
        nsq_tests::sleep_ms(100);
    }
}

/// PUBs `body` until it is `OK` (a member that just started, or a leader
/// just elected, may refuse it for a moment: `E_PUB_FAILED ...`).
fn publish_until_ok(n: &nsq_tests::Nsqd, topic: &str, body: &[u8]) {
    let deadline = Instant::now() + WAIT;
    let mut c = n.connect();
    loop {
        c.send(&nsq_tests::pub_cmd(topic, body));
        let f = c.read_frame();
        if f.data == b"OK" {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "PUB still refused: {}",
            String::from_utf8_lossy(&f.data)
        );
        nsq_tests::sleep_ms(200);
    }
}

/// The member whose view says it leads group `g` (views in `members` order).
fn leader_in(views: &[Value], members: &[&Member], g: usize) -> u64 {
    let at = views
        .iter()
        .position(|v| v["groups"][g]["state"] == "leader")
        .expect("a leader of the group");
    members[at].id
}

/// Receives one message; its body.
fn receive(c: &mut nsq_tests::Conn, fin: bool) -> Vec<u8> {
    let m = c.expect_msg_within(Duration::from_secs(20));
    if fin {
        c.fin(&m.id);
    }
    m.body
}

#[test]
fn idle_groups_go_quiet_and_still_fail_over() {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut members = start_cluster(&dirs, |_| Vec::new());
    let t = "quiet_groups";
    let g = group_of(t);
    let all: Vec<&Member> = members.iter().collect();
    leader_of(&all, t, None);
    assert_eq!(create(&all[0].nsqd, t, 3), (200, String::new()));
    wait_replicas(&members, t, 3);
    let r = all[0]
        .nsqd
        .post(&format!("/channel/create?topic={t}&channel=c"), b"");
    assert_eq!(r.status, 200, "{}", r.text());
    all[0].nsqd.connect().mpublish(t, &[b"a0", b"a1"]);

    // Idle: every group's leader is quiet, followers never are.
    let views = wait_all_quiet(&all);
    for (v, m) in views.iter().zip(&all) {
        for grp in v["groups"].as_array().unwrap() {
            if grp["state"] != "leader" {
                assert_eq!(grp["quiet"], false, "node {}: {grp}", m.id);
            }
        }
    }
    // The leaders: found in the views (an election on a loaded machine may
    // have moved one since the cluster started).
    let lid = leader_in(&views, &all, g);
    let follower = all.iter().find(|m| m.id != lid).unwrap();
    let mut consumer = by_id(&members, lid).nsqd.connect();
    consumer.sub(t, "c");
    consumer.rdy(100);
    let got: BTreeSet<Vec<u8>> = (0..2).map(|_| receive(&mut consumer, true)).collect();
    assert_eq!(got, BTreeSet::from([b"a0".to_vec(), b"a1".to_vec()]));
    wait_unfinished(&all, t, 0);

    // A publish to a quiet group is committed and delivered at once.
    wait_all_quiet(&all);
    follower.nsqd.connect().publish(t, b"a2");
    assert_eq!(receive(&mut consumer, true), b"a2");
    wait_unfinished(&all, t, 0);

    // One unfinished message, then the quiet leader is lost.
    follower.nsqd.connect().publish(t, b"a3");
    assert_eq!(receive(&mut consumer, false), b"a3");
    wait_unfinished(&all, t, 1);
    let views = wait_all_quiet(&all);
    let lid = leader_in(&views, &all, g);
    let mut gone = members.remove(members.iter().position(|m| m.id == lid).unwrap());
    gone.nsqd.kill9();
    drop(consumer);
    let left: Vec<&Member> = members.iter().collect();
    let second = leader_of(&left, t, Some(lid));
    let new_leader = by_id(&members, second);
    let mut consumer = new_leader.nsqd.connect();
    consumer.sub(t, "c");
    consumer.rdy(100);
    assert_eq!(
        receive(&mut consumer, true),
        b"a3",
        "the new leader delivers what was unfinished"
    );
    publish_until_ok(&new_leader.nsqd, t, b"a4");
    assert_eq!(receive(&mut consumer, true), b"a4");
    wait_all_quiet(&left);

    // The lost member restarts with its disk into quiet groups: it learns
    // who leads (its leader wakes for it), catches up, takes publishes.
    gone.nsqd = start(dirs[at_dir(lid)].path(), &gone.args);
    members.push(gone);
    let back = by_id(&members, lid);
    wait_standing(&back.nsqd, "member");
    publish_until_ok(&back.nsqd, t, b"a5");
    assert_eq!(receive(&mut consumer, true), b"a5");
    let all: Vec<&Member> = members.iter().collect();
    let views = wait_all_quiet(&all);
    let now = leader_in(&views, &all, g);
    let mine = &views[all.iter().position(|m| m.id == lid).unwrap()]["groups"][g];
    assert_eq!(mine["leader"], now, "{mine}");
}

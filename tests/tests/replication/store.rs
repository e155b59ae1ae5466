//! The log is a replicated topic's store: on the members of its group, a
//! replicated topic and its channels keep past `--mem-queue-size` only
//! where each message is in the group's log, and read it back from there
//! when its turn comes. Three members with `--mem-queue-size=10`: what
//! overflows (a publish's batches, a requeue past a full memory) is
//! delivered once each, a requeued message with its attempts; no member
//! writes a disk queue for the topic or its channel; `/stats` counts the
//! places as the channel's backend depth. A new leader places what is
//! unfinished instead of reading it all first, and a DPUB put back that
//! way waits out what is left of its delay.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use nsq_tests::{dpub_cmd, wait_for, Conn, Msg};

use super::leader::leader_of;
use super::members::*;

fn body(i: usize) -> Vec<u8> {
    format!("s{i:04}").into_bytes()
}

fn mpublish(c: &mut Conn, topic: &str, range: std::ops::Range<usize>) {
    let bodies: Vec<Vec<u8>> = range.map(body).collect();
    let refs: Vec<&[u8]> = bodies.iter().map(Vec::as_slice).collect();
    c.mpublish(topic, &refs);
}

/// Files of a disk queue of `topic` (its own or a channel's) in `dir`.
fn disk_queue_files(dir: &Path, topic: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(topic) && n.contains(".diskqueue."))
        .collect()
}

fn receive(c: &mut Conn, n: usize) -> Vec<Msg> {
    (0..n)
        .map(|_| c.expect_msg_within(Duration::from_secs(20)))
        .collect()
}

fn depths(m: &Member, topic: &str) -> (u64, u64) {
    let c = m.nsqd.channel_stats(topic, "c").expect("channel");
    (
        c["depth"].as_u64().unwrap(),
        c["backend_depth"].as_u64().unwrap(),
    )
}

/// Three members with `--mem-queue-size=10`, and `topic` (replicas=3)
/// with channel `c`, made through its group's leader; that leader's id.
fn cluster_with_channel(dirs: &[tempfile::TempDir], topic: &str) -> (Vec<Member>, u64) {
    let members = start_cluster(dirs, |_| vec!["--mem-queue-size=10".into()]);
    let lid = led_topic_with_channel(&members, topic);
    (members, lid)
}

#[test]
fn a_replicated_topic_keeps_its_overflow_as_places_in_its_log() {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let t = "log_store";
    let (members, lid) = cluster_with_channel(&dirs, t);
    let all: Vec<&Member> = members.iter().collect();
    let leader = by_id(&members, lid);

    // Four batches of 50 and 20 single messages: 10 in memory, the rest
    // placed in the log.
    let mut publisher = leader.nsqd.connect();
    for k in 0..4 {
        mpublish(&mut publisher, t, k * 50..(k + 1) * 50);
    }
    for i in 200..220 {
        publisher.publish(t, &body(i));
    }
    wait_unfinished(&all, t, 220);
    assert_eq!(depths(leader, t), (220, 210));

    // One delivered and requeued while memory is full again: its place
    // keeps its attempt.
    let mut consumer = leader.nsqd.connect();
    consumer.sub(t, "c");
    consumer.rdy(1);
    let first = consumer.expect_msg_within(Duration::from_secs(20));
    assert_eq!(first.attempts, 1);
    // no more credit: the requeue stays queued
    consumer.rdy(0);
    publisher.publish(t, &body(220));
    wait_for(WAIT, "the new message in memory", || {
        (depths(leader, t).0 == 220).then_some(())
    });
    consumer.req(&first.id, 0);
    wait_for(WAIT, "the requeue placed in the log", || {
        (depths(leader, t) == (221, 211)).then_some(())
    });

    consumer.rdy(300);
    let got = receive(&mut consumer, 221);
    consumer.expect_nothing(Duration::from_millis(500));
    let bodies: BTreeSet<Vec<u8>> = got.iter().map(|m| m.body.clone()).collect();
    assert_eq!(bodies.len(), 221, "a message delivered twice");
    assert_eq!(bodies, (0..221).map(body).collect());
    let again = got.iter().find(|m| m.body == first.body).unwrap();
    assert_eq!(again.attempts, 2, "the requeued message's attempts");
    for m in &got {
        consumer.fin(&m.id);
    }
    wait_unfinished(&all, t, 0);
    assert_eq!(depths(leader, t), (0, 0));

    for (m, dir) in members.iter().zip(&dirs) {
        assert_eq!(
            disk_queue_files(dir.path(), t),
            Vec::<String>::new(),
            "node {} wrote a disk queue for the replicated topic",
            m.id
        );
    }
}

#[test]
fn a_new_leader_places_what_is_unfinished_and_reads_it_from_the_log() {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let t = "log_store_failover";
    let (mut members, lid) = cluster_with_channel(&dirs, t);
    let all: Vec<&Member> = members.iter().collect();
    let leader = by_id(&members, lid);

    let mut publisher = leader.nsqd.connect();
    for k in 0..3 {
        mpublish(&mut publisher, t, k * 100..(k + 1) * 100);
    }
    // A DPUB still waiting when the next leader takes over.
    let delay = Duration::from_secs(10);
    let sent = Instant::now();
    publisher.send(&dpub_cmd(t, delay.as_millis() as i64, &body(300)));
    publisher.expect_ok();
    wait_unfinished(&all, t, 301);

    let mut gone = members.remove(members.iter().position(|m| m.id == lid).unwrap());
    gone.nsqd.kill9();
    let left: Vec<&Member> = members.iter().collect();
    let second = leader_of(&left, t, Some(lid));
    let new_leader = by_id(&members, second);

    // Everything is placed; memory is filled from the log.
    wait_for(WAIT, "the unfinished messages placed", || {
        (depths(new_leader, t).0 == 301).then_some(())
    });
    let put_back = new_leader.nsqd.topic_stats(t).unwrap()["replication"]["put_back"].as_u64();
    assert_eq!(put_back, Some(301));

    let mut consumer = new_leader.nsqd.connect();
    consumer.sub(t, "c");
    consumer.rdy(400);
    let got = receive(&mut consumer, 300);
    let bodies: BTreeSet<Vec<u8>> = got.iter().map(|m| m.body.clone()).collect();
    assert_eq!(bodies, (0..300).map(body).collect());
    for m in &got {
        consumer.fin(&m.id);
    }
    let late = consumer.expect_msg_within(Duration::from_secs(30));
    assert_eq!(late.body, body(300));
    assert!(
        sent.elapsed() >= delay - Duration::from_millis(500),
        "the DPUB came {:?} after it was sent, before its delay of {delay:?}",
        sent.elapsed()
    );
    consumer.fin(&late.id);
    let survivors: Vec<&Member> = members.iter().collect();
    wait_unfinished(&survivors, t, 0);
    let dir = dirs[at_dir(second)].path();
    assert_eq!(disk_queue_files(dir, t), Vec::<String>::new());
    drop(gone);
}

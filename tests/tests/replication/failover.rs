//! A new leader delivers what its group has not finished: three members,
//! a replicated topic with a channel, 100 messages of which the consumer on
//! the leader FINs 60; every member's `/stats` then counts 40 committed
//! but not finished (the FINs reached the log as `Finished`); the leader is
//! killed (SIGKILL), and a consumer of the new leader gets exactly the 40,
//! once each. A second topic of the same group, published to while it had
//! no channel, gives what it held to the first channel made on the new
//! leader, as NSQ gives a topic's backlog to its first channel. The killed
//! member comes back knowing the FINs; a leader stopped cleanly with
//! messages queued shows none once back as a follower (the log is their
//! store), and its successor delivers them from the log.

use std::collections::BTreeSet;
use std::time::Duration;

use nsq_tests::{wait_for, Conn};

use super::leader::leader_of;
use super::members::*;

/// Reads `n` messages; their bodies, each at most once.
fn receive(c: &mut Conn, n: usize) -> Vec<(String, Vec<u8>)> {
    (0..n)
        .map(|_| {
            let m = c.expect_msg_within(Duration::from_secs(20));
            (m.id, m.body)
        })
        .collect()
}

fn bodies(range: std::ops::Range<usize>) -> BTreeSet<Vec<u8>> {
    range.map(|i| format!("m{i:03}").into_bytes()).collect()
}

#[test]
fn a_new_leader_delivers_what_the_old_one_had_not_finished() {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut members = start_cluster(&dirs, |_| Vec::new());
    let all: Vec<&Member> = members.iter().collect();
    let t = "failover_redelivers";
    // A second topic of the same group (so the same leader), with no
    // channel while it is published to.
    let held = (0..1000)
        .map(|i| format!("failover_held_{i}"))
        .find(|n| group_of(n) == group_of(t))
        .expect("a name in the same group");
    let lid = leader_of(&all, t, None);
    let follower = all.iter().find(|m| m.id != lid).unwrap();
    for topic in [t, held.as_str()] {
        assert_eq!(create(&follower.nsqd, topic, 3), (200, String::new()));
        wait_replicas(&members, topic, 3);
    }
    let r = follower
        .nsqd
        .post(&format!("/channel/create?topic={t}&channel=c"), b"");
    assert_eq!(r.status, 200, "{}", r.text());

    // Published through a follower (forwarded to the leader).
    let all_bodies: Vec<Vec<u8>> = bodies(0..100).into_iter().collect();
    let refs: Vec<&[u8]> = all_bodies.iter().map(Vec::as_slice).collect();
    let mut publisher = follower.nsqd.connect();
    publisher.mpublish(t, &refs);
    publisher.mpublish(&held, &refs[..5]);
    wait_unfinished(&all, t, 100);
    wait_unfinished(&all, &held, 5);

    // The leader's consumer FINs the first 60 (by body) of the 100.
    let leader = by_id(&members, lid);
    let mut consumer = leader.nsqd.connect();
    consumer.sub(t, "c");
    consumer.rdy(100);
    let got = receive(&mut consumer, 100);
    let done = bodies(0..60);
    for (id, body) in &got {
        if done.contains(body) {
            consumer.fin(id);
        }
    }
    // Every member has the FINs from the log.
    wait_unfinished(&all, t, 40);

    // The leader is lost with 40 in flight.
    let mut gone = members.remove(members.iter().position(|m| m.id == lid).unwrap());
    gone.nsqd.kill9();
    drop(consumer);
    let left: Vec<&Member> = members.iter().collect();
    let second = leader_of(&left, t, Some(lid));
    let new_leader = by_id(&members, second);

    let mut consumer = new_leader.nsqd.connect();
    consumer.sub(t, "c");
    consumer.rdy(100);
    let again = receive(&mut consumer, 40);
    let got: BTreeSet<Vec<u8>> = again.iter().map(|(_, b)| b.clone()).collect();
    assert_eq!(got.len(), 40, "a message delivered twice by the new leader");
    assert_eq!(got, bodies(60..100));
    // It says how many it put back: the 40, and the 5 the other topic held.
    let put_back = |topic: &str| {
        new_leader.nsqd.topic_stats(topic).expect("topic")["replication"]["put_back"].as_u64()
    };
    assert_eq!((put_back(t), put_back(&held)), (Some(40), Some(5)));
    consumer.expect_nothing(Duration::from_secs(1));
    for (id, _) in &again {
        consumer.fin(id);
    }
    let survivors: Vec<&Member> = members.iter().collect();
    wait_unfinished(&survivors, t, 0);

    // What the second topic held goes to its first channel.
    let mut first = new_leader.nsqd.connect();
    first.sub(&held, "first");
    first.rdy(10);
    let got: BTreeSet<Vec<u8>> = receive(&mut first, 5).into_iter().map(|(_, b)| b).collect();
    assert_eq!(got, bodies(0..5));
    first.expect_nothing(Duration::from_millis(500));
    drop(first);

    // The killed member comes back and learns the FINs from the log.
    let nsqd = start(dirs[at_dir(lid)].path(), &gone.args);
    members.push(Member {
        id: lid,
        nsqd,
        args: gone.args.clone(),
    });
    drop(gone);
    let all: Vec<&Member> = members.iter().collect();
    wait_unfinished(&all, t, 0);

    // Ten more wait on the leader's channel when it stops cleanly; once
    // back as a follower it holds none of them, and the next leader
    // delivers them from the log.
    let more: Vec<Vec<u8>> = bodies(100..110).into_iter().collect();
    let refs: Vec<&[u8]> = more.iter().map(Vec::as_slice).collect();
    follower_of(&members, second)
        .nsqd
        .connect()
        .mpublish(t, &refs);
    wait_unfinished(&all, t, 10);
    let stopped = stop_member(&mut members, second);
    let left: Vec<&Member> = members.iter().collect();
    let third = leader_of(&left, t, Some(second));
    let mut consumer = by_id(&members, third).nsqd.connect();
    consumer.sub(t, "c");
    consumer.rdy(100);
    let again = receive(&mut consumer, 10);
    let got: BTreeSet<Vec<u8>> = again.iter().map(|(_, b)| b.clone()).collect();
    assert_eq!(got, bodies(100..110));
    let nsqd = start(dirs[at_dir(second)].path(), &stopped.args);
    members.push(Member {
        id: second,
        nsqd,
        args: stopped.args.clone(),
    });
    let back = by_id(&members, second);
    wait_for(WAIT, "the restarted member's channel empty", || {
        let depth = back.nsqd.channel_stats(t, "c")?["depth"].as_u64()?;
        let leads = leader_of(&[back], t, None) == second;
        (depth == 0 || leads).then_some(())
    });
    for (id, _) in &again {
        consumer.fin(id);
    }
    let all: Vec<&Member> = members.iter().collect();
    wait_unfinished(&all, t, 0);
}

/// A member other than `not` (to publish through).
fn follower_of(ms: &[Member], not: u64) -> &Member {
    ms.iter().find(|m| m.id != not).expect("another member")
}

/// A message a consumer requeued with a delay on the leader (REQ) is not
/// delivered by the next leader before that delay runs out: the delay
/// reached the group as a `Deferred` entry. The other message, in flight
/// at the loss, comes again at once.
#[test]
fn a_requeue_delay_outlives_the_leader_that_took_it() {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut members = start_cluster(&dirs, |_| Vec::new());
    let all: Vec<&Member> = members.iter().collect();
    let t = "failover_req_delay";
    let lid = led_topic_with_channel(&members, t);
    let leader = by_id(&members, lid);
    leader.nsqd.connect().mpublish(t, &[b"later", b"again"]);
    wait_unfinished(&all, t, 2);

    let mut consumer = leader.nsqd.connect();
    consumer.sub(t, "c");
    consumer.rdy(2);
    let got = receive(&mut consumer, 2);
    let (later, _) = got.iter().find(|(_, b)| b == b"later").unwrap();
    let delay = Duration::from_secs(10);
    consumer.req(later, delay.as_millis() as i64);
    let requeued = std::time::Instant::now();
    // FINs and requeue delays reach the group every 100 ms.
    std::thread::sleep(Duration::from_secs(1));

    let mut gone = members.remove(members.iter().position(|m| m.id == lid).unwrap());
    gone.nsqd.kill9();
    drop(consumer);
    let left: Vec<&Member> = members.iter().collect();
    let next = by_id(&members, leader_of(&left, t, Some(lid)));
    let mut consumer = next.nsqd.connect();
    consumer.sub(t, "c");
    consumer.rdy(10);
    let first = consumer.expect_msg_within(Duration::from_secs(20));
    assert_eq!(first.body, b"again");
    consumer.fin(&first.id);
    let second = consumer.expect_msg_within(Duration::from_secs(30));
    assert_eq!(second.body, b"later");
    assert!(
        requeued.elapsed() >= delay - Duration::from_millis(500),
        "delivered {:?} after its REQ of {delay:?}",
        requeued.elapsed()
    );
    consumer.fin(&second.id);
    let survivors: Vec<&Member> = members.iter().collect();
    wait_unfinished(&survivors, t, 0);
    drop(gone);
}

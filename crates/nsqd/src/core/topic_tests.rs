//! The topic state machine with real channel state machines under it, driven
//! the way the server drives them, and an in-memory backend for the backlog.

use std::collections::VecDeque;
use std::time::Instant;

use nsq_protocol::Message;

use super::*;
use crate::core::channel::{Channel, ChannelConfig};

const NOW_NS: i64 = 1_796_012_200_000_000_000;

/// No channel refuses (no limits).
fn no_refusal(_: &Channel, _: usize) -> Option<u64> {
    None
}

fn cfg(mem: usize) -> TopicConfig {
    TopicConfig {
        mem_queue_size: mem,
        durable: true,
        backend_unread: false,
        backend_depth: 0,
        node_id: 7,
        started: true,
    }
}

fn channel() -> Channel {
    let cfg = ChannelConfig {
        mem_queue_size: 1000,
        durable: true,
        backend_unread: false,
        backend_depth: 0,
        max_attempts: 0,
        hand_off: true,
        e2e: None,
        seed: 1,
        spill: None,
        restored_runs: Vec::new(),
    };
    Channel::new(cfg, Instant::now())
}

struct Harness {
    topic: Topic<Channel>,
    disk: VecDeque<Message>,
    now: Instant,
}

impl Harness {
    fn new(cfg: TopicConfig) -> Harness {
        Harness {
            topic: Topic::new(cfg),
            disk: VecDeque::new(),
            now: Instant::now(),
        }
    }

    fn publish(&mut self, bodies: &[&str], defer: Option<Duration>) {
        let bodies = bodies
            .iter()
            .map(|b| Bytes::copy_from_slice(b.as_bytes()))
            .collect();
        self.try_publish(bodies, defer).unwrap();
    }

    /// A publish as the server carries it out: channels with a `reject`
    /// limit asked first (their disk queues are empty here).
    fn try_publish(&mut self, bodies: Vec<Bytes>, defer: Option<Duration>) -> Result<(), Refused> {
        let p = self
            .topic
            .publish(bodies, defer, NOW_NS, |c: &Channel, n| {
                c.refuses(n).then_some(c.limit().max_depth)
            })?;
        if p.skip > 0 {
            let n = (p.skip as usize).min(self.disk.len());
            self.disk.drain(..n);
        }
        self.fan_out(p.fan_out, p.defer);
        let mut pump = p.pump;
        if !p.append.is_empty() {
            self.disk.extend(p.append);
            pump |= self.topic.appended();
        }
        if pump {
            self.pump();
        }
        Ok(())
    }

    fn fan_out(&mut self, msgs: Vec<Message>, defer: Option<Duration>) {
        let n = self.topic.channel_count();
        let now = self.now;
        for ((_, ch), batch) in self.topic.channels_mut().zip(copies(msgs, n)) {
            match defer {
                Some(d) if !d.is_zero() => ch.put_deferred(batch, d, now),
                _ => ch.put(batch, now),
            }
        }
    }

    /// The server's pump task, run to completion.
    fn pump(&mut self) {
        loop {
            let p = self.topic.pump(4);
            for b in p.batch {
                self.fan_out(vec![b.msg], b.defer);
            }
            if let Some(r) = p.refill {
                let n = r.max.min(self.disk.len());
                let recs = self.disk.drain(..n).collect();
                self.topic.refilled(r, recs, !self.disk.is_empty());
                continue;
            }
            if !p.more {
                return;
            }
        }
    }

    fn add(&mut self, name: &str) {
        if self.topic.add_channel(name, channel()).unwrap() {
            self.pump();
        }
    }

    fn depth(&self, name: &str) -> usize {
        self.topic.channel(name).unwrap().memory_depth()
    }

    /// What a channel holds, delivered to one client with plenty of RDY.
    fn drain(&mut self, name: &str) -> Vec<Message> {
        let now = self.now;
        let ch = self
            .topic
            .channels_mut()
            .find(|(n, _)| n.as_str() == name)
            .unwrap()
            .1;
        ch.add_client(99, Duration::from_secs(60), 0, 0).unwrap();
        ch.set_rdy(99, 10_000, now);
        let mut out = Vec::new();
        ch.flush_deliveries(|_, frames| {
            let mut f = &frames[..];
            while !f.is_empty() {
                let size = u32::from_be_bytes(f[..4].try_into().unwrap()) as usize;
                out.push(Message::decode(Bytes::copy_from_slice(&f[8..4 + size])).unwrap());
                f = &f[4 + size..];
            }
        });
        out
    }
}

fn bodies(ms: &[Message]) -> Vec<String> {
    ms.iter()
        .map(|m| String::from_utf8(m.body.to_vec()).unwrap())
        .collect()
}

#[test]
fn every_channel_gets_every_message_with_the_same_id_and_one_shared_body() {
    let mut h = Harness::new(cfg(100));
    h.add("a");
    h.add("b");
    let big = "x".repeat(1000);
    let p = h
        .topic
        .publish(vec![Bytes::from(big.clone())], None, NOW_NS, no_refusal)
        .unwrap();
    let batches: Vec<Vec<Message>> = copies(p.fan_out, 2).collect();
    assert_eq!(batches[0][0].id, batches[1][0].id);
    assert_eq!(
        batches[0][0].body.as_ptr(),
        batches[1][0].body.as_ptr(),
        "one body for all channels"
    );
    h.publish(&["m1", "m2"], None);
    let (a, b) = (h.drain("a"), h.drain("b"));
    assert_eq!(bodies(&a), vec!["m1", "m2"]);
    assert_eq!(bodies(&b), vec!["m1", "m2"]);
    assert_eq!(
        a.iter().map(|m| m.id).collect::<Vec<_>>(),
        b.iter().map(|m| m.id).collect::<Vec<_>>()
    );
    assert!(a.iter().all(|m| m.timestamp == NOW_NS));
}

#[test]
fn ids_are_unique_and_increasing_within_one_instant() {
    let mut h = Harness::new(cfg(100));
    h.add("a");
    let p = h
        .topic
        .publish(
            (0..1000).map(|i| Bytes::from(i.to_string())).collect(),
            None,
            NOW_NS,
            no_refusal,
        )
        .unwrap();
    assert!(p.fan_out.windows(2).all(|w| w[0].id < w[1].id));
}

#[test]
fn a_topic_with_no_channel_keeps_its_backlog_in_memory_then_on_disk_in_order() {
    let mut h = Harness::new(cfg(2));
    h.publish(&["0", "1", "2", "3", "4"], None);
    assert_eq!(h.topic.memory_depth(), 2);
    assert_eq!(bodies(h.disk.make_contiguous()), vec!["2", "3", "4"]);
    let s = h.topic.stats("t", h.disk.len() as i64);
    assert_eq!(
        (s.depth, s.backend_depth, s.message_count, s.message_bytes),
        (5, 3, 5, 5)
    );
    h.add("a");
    assert_eq!(
        h.topic.memory_depth() + h.disk.len(),
        0,
        "the backlog moved on"
    );
    assert_eq!(bodies(&h.drain("a")), vec!["0", "1", "2", "3", "4"]);
}

#[test]
fn while_a_backlog_drains_new_messages_queue_behind_it() {
    let mut h = Harness::new(cfg(100));
    h.add("a");
    assert!(!h.topic.set_paused(true));
    h.publish(&["0", "1"], None);
    assert_eq!(
        (h.topic.memory_depth(), h.depth("a")),
        (2, 0),
        "paused: held in the topic"
    );
    assert!(h.topic.is_paused());
    // unpaused, but the pump has not run yet: a new message must wait
    assert!(h.topic.set_paused(false));
    let p = h
        .topic
        .publish(vec![Bytes::from_static(b"2")], None, NOW_NS, no_refusal)
        .unwrap();
    assert!(p.fan_out.is_empty() && p.pump);
    h.pump();
    assert_eq!(bodies(&h.drain("a")), vec!["0", "1", "2"]);
}

#[test]
fn a_topic_not_started_holds_messages_until_its_channels_are_pre_created() {
    let mut h = Harness::new(TopicConfig {
        started: false,
        ..cfg(100)
    });
    h.publish(&["first"], None);
    h.add("from-lookupd-1");
    h.add("from-lookupd-2");
    assert_eq!(h.depth("from-lookupd-1"), 0, "nothing flows before start");
    assert!(h.topic.start());
    h.pump();
    assert_eq!(bodies(&h.drain("from-lookupd-1")), vec!["first"]);
    assert_eq!(bodies(&h.drain("from-lookupd-2")), vec!["first"]);
}

#[test]
fn an_ephemeral_topic_drops_what_overflows_its_backlog() {
    let mut h = Harness::new(TopicConfig {
        durable: false,
        ..cfg(2)
    });
    let p = h
        .topic
        .publish(
            (0..5).map(|i| Bytes::from(i.to_string())).collect(),
            None,
            NOW_NS,
            no_refusal,
        )
        .unwrap();
    assert!(p.append.is_empty() && p.fan_out.is_empty());
    assert_eq!(h.topic.memory_depth(), 2);
    assert_eq!(h.topic.stats("t#ephemeral", 0).message_count, 5);
}

#[test]
fn a_dpub_waiting_in_the_backlog_keeps_its_delay_in_memory() {
    let mut h = Harness::new(cfg(100));
    h.publish(&["later"], Some(Duration::from_secs(5)));
    h.add("a");
    let ch = h.topic.channel("a").unwrap();
    assert_eq!((ch.deferred_count(), ch.memory_depth()), (1, 0));
}

#[test]
fn refused_messages_are_not_counted() {
    let mut h = Harness::new(cfg(100));
    h.add("a");
    let p = h
        .topic
        .publish(
            vec![Bytes::from_static(b"abc"), Bytes::from_static(b"de")],
            None,
            NOW_NS,
            no_refusal,
        )
        .unwrap();
    assert_eq!(p.fan_out.len(), 2);
    h.topic.unpublish(2, 5);
    let s = h.topic.stats("t", 0);
    assert_eq!((s.message_count, s.message_bytes), (0, 0));
}

#[test]
fn empty_drops_the_backlog_and_answers_to_old_refills() {
    let mut h = Harness::new(TopicConfig {
        backend_unread: true,
        ..cfg(1)
    });
    h.disk.extend((0..3).map(|i| {
        Message::new(
            nsq_protocol::MessageId::from_guid(i),
            0,
            Bytes::from(i.to_string()),
        )
    }));
    h.topic.add_channel("a", channel()).unwrap();
    let p = h.topic.pump(4);
    let r = p.refill.expect("the backend has a backlog");
    h.topic.empty();
    h.disk.clear();
    h.topic.refilled(
        r,
        vec![Message::new(
            nsq_protocol::MessageId::from_guid(0),
            0,
            Bytes::new(),
        )],
        false,
    );
    assert_eq!(
        h.topic.pump(4).batch.len(),
        0,
        "a refill from before the empty is dropped"
    );
}

#[test]
fn delete_hands_over_the_channels_and_refuses_everything_after() {
    let mut h = Harness::new(cfg(100));
    h.add("a");
    h.add("b");
    let gone: Vec<String> = h.topic.delete().into_iter().map(|(n, _)| n).collect();
    assert_eq!(gone, vec!["a", "b"]);
    assert_eq!(h.topic.channel_count(), 0);
    assert!(h
        .topic
        .publish(vec![Bytes::from_static(b"x")], None, NOW_NS, no_refusal)
        .is_err());
    assert!(h.topic.add_channel("c", channel()).is_err());
}

#[test]
fn close_returns_the_backlog_in_order_and_refuses_publishes() {
    let mut h = Harness::new(cfg(100));
    h.publish(&["0", "1"], None);
    assert_eq!(bodies(&h.topic.close()), vec!["0", "1"]);
    assert!(h.topic.is_exiting());
    assert!(h
        .topic
        .publish(vec![Bytes::from_static(b"x")], None, NOW_NS, no_refusal)
        .is_err());
}

fn batch(n: std::ops::Range<u32>) -> Vec<Bytes> {
    n.map(|i| Bytes::from(format!("b{i}"))).collect()
}

#[test]
fn a_channel_that_rejects_refuses_the_whole_publish_for_every_channel() {
    use crate::core::{Full, Limit, Policy};
    let mut h = Harness::new(cfg(100));
    h.add("a");
    h.add("b");
    let limit = Limit {
        max_depth: 3,
        policy: Policy::Reject,
    };
    h.topic
        .channels_mut()
        .find(|(n, _)| *n == "b")
        .unwrap()
        .1
        .set_limit(limit);
    h.topic.set_channel_rejects("b", true);
    h.try_publish(batch(0..2), None).unwrap();
    // two more would take b to four: refused whole, a gets nothing either
    assert_eq!(
        h.try_publish(batch(2..4), None),
        Err(Refused::Full(Full::Channel("b".into(), 3)))
    );
    assert_eq!((h.depth("a"), h.depth("b")), (2, 2));
    assert_eq!(h.topic.stats("t", 0).message_count, 2, "nothing counted");
    h.try_publish(batch(4..5), None).unwrap();
    assert_eq!((h.depth("a"), h.depth("b")), (3, 3));
    // the channel gone, so is its refusal
    h.topic.remove_channel("b");
    h.try_publish(batch(5..9), None).unwrap();
    assert_eq!(h.depth("a"), 7);
}

#[test]
fn the_topics_own_limit_bounds_its_backlog() {
    use crate::core::{Full, Limit, Policy};
    // no channel: everything waits in the backlog, memory 2 then disk
    let mut h = Harness::new(cfg(2));
    h.topic.set_limit(Limit {
        max_depth: 4,
        policy: Policy::Reject,
    });
    h.try_publish(batch(0..4), None).unwrap();
    assert_eq!(
        h.try_publish(batch(4..5), None),
        Err(Refused::Full(Full::Topic(4)))
    );
    let s = h.topic.stats("t", h.disk.len() as i64);
    assert_eq!((s.depth, s.message_count), (4, 4));
    // drop-oldest: memory's first, then the disk's head
    h.topic.set_limit(Limit {
        max_depth: 4,
        policy: Policy::DropOldest,
    });
    h.try_publish(batch(4..7), None).unwrap();
    let s = h.topic.stats("t", h.disk.len() as i64);
    assert_eq!((s.depth, s.dropped_count, s.message_count), (4, 3, 7));
    h.add("c");
    let mut got = bodies(&h.drain("c"));
    got.sort();
    assert_eq!(got, ["b3", "b4", "b5", "b6"]);
}

#[test]
fn a_topics_mem_queue_size_overrides_the_flag() {
    let mut h = Harness::new(cfg(100));
    h.topic.set_mem_queue_size(Some(1), 100);
    h.try_publish(batch(0..3), None).unwrap();
    assert_eq!((h.topic.memory_depth(), h.disk.len()), (1, 2));
    assert_eq!(h.topic.stats("t", 2).mem_queue_size, Some(1));
    h.topic.set_mem_queue_size(None, 100);
    assert_eq!(h.topic.stats("t", 2).mem_queue_size, None);
}

#[test]
fn a_refusal_is_told_before_routing_and_admitted_batches_pass_reject_limits() {
    use crate::core::{Full, Limit, Policy};
    // no channel: everything waits in the backlog (memory)
    let mut h = Harness::new(cfg(100));
    h.topic.set_limit(Limit {
        max_depth: 2,
        policy: Policy::Reject,
    });
    let refuses = |c: &Channel, n: usize| c.refuses(n).then_some(c.limit().max_depth);
    assert_eq!(h.topic.refusal(2, refuses), None);
    h.try_publish(batch(0..2), None).unwrap();
    // what route would refuse, told without changing anything
    assert_eq!(h.topic.refusal(1, refuses), Some(Full::Topic(2)));
    assert_eq!(h.topic.stats("t", 0).message_count, 2);
    // a batch admitted before (a replicated topic's, committed since) is
    // taken past the reject limit: refusing it would lose it
    let msgs = h.topic.stamp(batch(2..4), NOW_NS);
    h.topic.route_admitted(msgs, None).unwrap();
    let s = h.topic.stats("t", 0);
    assert_eq!((s.depth, s.message_count), (4, 4));
}

// ---- expiry (max_age) ----

#[test]
fn a_backlog_that_cannot_flow_loses_what_expires_and_asks_for_a_backend_sweep() {
    let mut t: Topic<Channel> = Topic::new(cfg(2));
    t.set_max_age(Some(Duration::from_secs(60)), Duration::ZERO);
    // no channel: everything waits in the backlog, two in memory
    let p = t
        .publish(
            vec![Bytes::from("a"), Bytes::from("b")],
            None,
            NOW_NS,
            no_refusal,
        )
        .unwrap();
    assert!(p.fan_out.is_empty() && p.append.is_empty());
    let p = t
        .publish(
            vec![Bytes::from("c")],
            None,
            NOW_NS + 10_000_000_000,
            no_refusal,
        )
        .unwrap();
    assert_eq!(p.append.len(), 1, "past memory: the backend");
    t.appended();
    // 30 s on: nothing expired yet; the backend is looked at again in a
    // second (before a and b expire, at 60 s)
    let s = t.sweep_expired(NOW_NS + 30_000_000_000);
    assert_eq!(s.next_ns, Some(NOW_NS + 31_000_000_000));
    assert!(s.backend.is_some(), "the backend holds one");
    t.backend_expired(0);
    // 61 s on: both in memory expired
    let s = t.sweep_expired(NOW_NS + 61_000_000_000);
    assert_eq!(t.stats("t", 1).expired_count, 2);
    assert_eq!(s.backend.map(|b| b.before_ns), Some(NOW_NS + 1_000_000_000));
    // the server's sweep took c (published at +10 s: expired at +70 s)
    t.backend_expired(1);
    let st = t.stats("t", 0);
    assert_eq!((st.expired_count, st.max_age.as_deref()), (3, Some("1m0s")));
}

#[test]
fn a_backlog_that_flows_is_left_to_its_channels_and_expiry_off_sweeps_nothing() {
    let mut t: Topic<Channel> = Topic::new(cfg(10));
    t.publish(vec![Bytes::from("a")], None, NOW_NS, no_refusal)
        .unwrap();
    assert!(
        t.sweep_expired(NOW_NS + 1_000_000_000_000)
            .next_ns
            .is_none(),
        "off"
    );
    t.set_max_age(None, Duration::from_secs(1));
    t.add_channel("c", channel()).unwrap();
    let s = t.sweep_expired(NOW_NS + 1_000_000_000_000);
    assert!(s.next_ns.is_none() && s.backend.is_none());
    assert_eq!(
        t.stats("t", 0).expired_count,
        0,
        "its channels expire what reaches them"
    );
}

//! Unit tests of channel progress (`core::progress`): who gets which batch,
//! FINs in and out of order, the cursor, empty and delete, forgetting, the
//! trim point and replaying the log.

use bytes::Bytes;

use super::*;
use crate::core::replicated::entry::{Cursor, Published};

const T: &str = "t";

fn id(n: u64) -> MessageId {
    MessageId::from_guid(n)
}

fn num(id: &MessageId) -> u64 {
    u64::from_str_radix(std::str::from_utf8(&id.0).unwrap(), 16).unwrap()
}

fn publish_to(topic: &str, ns: &[u64]) -> Entry {
    Entry::Publish {
        topic: topic.into(),
        messages: ns
            .iter()
            .map(|&n| Published {
                id: id(n),
                timestamp: 1,
                defer_ms: 0,
                body: Bytes::from_static(b"body"),
            })
            .collect(),
    }
}

fn publish(ns: &[u64]) -> Entry {
    publish_to(T, ns)
}

fn create(c: &str) -> Entry {
    Entry::ChannelCreate {
        topic: T.into(),
        channel: c.into(),
    }
}

fn delete(c: &str) -> Entry {
    Entry::ChannelDelete {
        topic: T.into(),
        channel: c.into(),
    }
}

fn empty(c: &str) -> Entry {
    Entry::ChannelEmpty {
        topic: T.into(),
        channel: c.into(),
        up_to: 0,
    }
}

fn fin(c: &str, ns: &[u64]) -> Entry {
    Entry::Finished {
        topic: T.into(),
        channel: c.into(),
        cursor: Cursor {
            index: 0,
            offset: 0,
        },
        ids: ns.iter().map(|&n| id(n)).collect(),
    }
}

fn topic_pause(paused: bool) -> Entry {
    Entry::TopicPause {
        topic: T.into(),
        paused,
    }
}

fn topic_create(topic: &str) -> Entry {
    Entry::TopicCreate {
        topic: topic.into(),
        replicas: 3,
    }
}

/// A group's log being applied: entries get the next index.
struct Group {
    p: Progress,
    log: Vec<(u64, Entry)>,
}

impl Group {
    /// A group whose log starts with the topic's `TopicCreate` at index 1.
    fn new() -> Group {
        let mut g = Group {
            p: Progress::new(),
            log: Vec::new(),
        };
        g.at(topic_create(T));
        g
    }

    /// Applies `e` at the next index, which it returns; it must apply.
    fn at(&mut self, e: Entry) -> u64 {
        let index = self.log.len() as u64 + 1;
        assert_eq!(self.p.apply(index, &e), Outcome::Applied, "{e:?}");
        self.log.push((index, e));
        index
    }

    /// Applies `e` at the next index and says what it did.
    fn try_at(&mut self, e: Entry) -> Outcome {
        let index = self.log.len() as u64 + 1;
        let o = self.p.apply(index, &e);
        self.log.push((index, e));
        o
    }

    /// What channel `c` would be given again: (index, ids).
    fn pending(&self, c: &str) -> Vec<(u64, Vec<u64>)> {
        numbers(self.p.unfinished(T, c).expect("channel exists"))
    }

    fn held(&self) -> Vec<(u64, Vec<u64>)> {
        numbers(self.p.held(T).expect("topic exists"))
    }

    fn topic(&self) -> &TopicProgress {
        self.p.topic(T).expect("topic exists")
    }

    fn count(&self, c: &str) -> u64 {
        self.topic()
            .channel(c)
            .expect("channel exists")
            .unfinished()
    }
}

fn numbers(v: Vec<Pending>) -> Vec<(u64, Vec<u64>)> {
    v.into_iter()
        .map(|p| (p.index, p.ids.iter().map(num).collect()))
        .collect()
}

#[test]
fn channels_at_different_speeds_each_keep_their_own_unfinished() {
    let mut g = Group::new();
    g.at(create("fast"));
    g.at(create("slow"));
    let i1 = g.at(publish(&[1, 2]));
    let i2 = g.at(publish(&[3]));
    g.at(fin("fast", &[1, 2, 3]));
    g.at(fin("slow", &[1]));
    assert_eq!(g.pending("fast"), vec![]);
    assert_eq!(g.pending("slow"), vec![(i1, vec![2]), (i2, vec![3])]);
    assert_eq!((g.count("fast"), g.count("slow")), (0, 2));
    assert_eq!(g.topic().cursor("fast"), None);
    assert_eq!(g.topic().cursor("slow"), Some(i1));
    // The topic's count is its slowest channel's, not the sum.
    assert_eq!(g.topic().unfinished(), 2);
    assert_eq!(g.p.trim_point(), Some(i1));
}

#[test]
fn fins_out_of_order_hold_the_cursor_at_the_oldest_unfinished_batch() {
    let mut g = Group::new();
    g.at(create("c"));
    let i1 = g.at(publish(&[1]));
    let i2 = g.at(publish(&[2, 3, 4]));
    let i3 = g.at(publish(&[5]));
    g.at(fin("c", &[5, 3]));
    assert_eq!(g.topic().cursor("c"), Some(i1));
    assert_eq!(g.pending("c"), vec![(i1, vec![1]), (i2, vec![2, 4])]);
    assert_eq!(g.count("c"), 3);
    g.at(fin("c", &[1, 2]));
    // Batch i1 is done, i2 still has 4: the cursor moves to i2 only.
    assert_eq!(g.topic().cursor("c"), Some(i2));
    assert_eq!(g.pending("c"), vec![(i2, vec![4])]);
    assert_eq!(g.p.trim_point(), Some(i2));
    assert_eq!(g.topic().remembered(), 4, "batch i1 forgotten");
    g.at(fin("c", &[4]));
    // i2 done, and i3 was finished before: the cursor passes both.
    assert_eq!(g.topic().cursor("c"), None);
    assert_eq!(g.pending("c"), vec![]);
    assert_eq!(g.p.trim_point(), None);
    assert_eq!(g.topic().remembered(), 0);
    let _ = i3;
}

#[test]
fn a_channel_made_later_gets_only_what_is_published_after_it() {
    let mut g = Group::new();
    g.at(create("a"));
    let i1 = g.at(publish(&[1]));
    g.at(create("b"));
    let i2 = g.at(publish(&[2]));
    assert_eq!(g.pending("a"), vec![(i1, vec![1]), (i2, vec![2])]);
    assert_eq!(g.pending("b"), vec![(i2, vec![2])]);
    assert_eq!(g.count("b"), 1);
    // A FIN on b of a message it never had changes nothing.
    g.at(fin("b", &[1]));
    assert_eq!(g.pending("b"), vec![(i2, vec![2])]);
    assert_eq!(g.pending("a"), vec![(i1, vec![1]), (i2, vec![2])]);
}

#[test]
fn the_first_channel_gets_what_the_topic_held_and_the_next_does_not() {
    let mut g = Group::new();
    let i1 = g.at(publish(&[1]));
    let i2 = g.at(publish(&[2, 3]));
    assert_eq!(g.held(), vec![(i1, vec![1]), (i2, vec![2, 3])]);
    assert_eq!((g.topic().held(), g.topic().unfinished()), (3, 3));
    assert_eq!(g.p.trim_point(), Some(i1));
    g.at(create("first"));
    assert_eq!(g.pending("first"), vec![(i1, vec![1]), (i2, vec![2, 3])]);
    assert_eq!(g.held(), vec![]);
    assert_eq!((g.topic().held(), g.count("first")), (0, 3));
    g.at(create("second"));
    assert_eq!(g.pending("second"), vec![]);
    // An ephemeral channel is not the group's: it is no first channel.
    let mut h = Group::new();
    let j = h.at(publish(&[7]));
    assert_eq!(
        h.try_at(create("x#ephemeral")),
        Outcome::Skipped(Skip::NotReplicated)
    );
    assert_eq!(h.held(), vec![(j, vec![7])]);
}

#[test]
fn a_topic_that_lost_its_last_channel_holds_again_for_the_next() {
    let mut g = Group::new();
    g.at(create("a"));
    g.at(publish(&[1]));
    g.at(delete("a"));
    assert_eq!(g.p.unfinished(T, "a"), None);
    assert_eq!(g.p.trim_point(), None, "message 1 went with channel a");
    let i2 = g.at(publish(&[2]));
    assert_eq!(g.held(), vec![(i2, vec![2])]);
    g.at(create("b"));
    assert_eq!(g.pending("b"), vec![(i2, vec![2])]);
}

#[test]
fn a_paused_topic_holds_for_every_channel_it_has_when_unpaused() {
    let mut g = Group::new();
    g.at(create("a"));
    let i1 = g.at(publish(&[1]));
    g.at(topic_pause(true));
    let i2 = g.at(publish(&[2]));
    g.at(create("b"));
    // Held by the topic: no channel has message 2 yet.
    assert_eq!(g.pending("a"), vec![(i1, vec![1])]);
    assert_eq!(g.pending("b"), vec![]);
    assert_eq!(g.held(), vec![(i2, vec![2])]);
    assert_eq!(g.topic().unfinished(), 2);
    // A FIN of a held message is not one the channel had.
    g.at(fin("a", &[2]));
    // Emptying a channel leaves the topic's hold alone.
    g.at(empty("b"));
    g.at(topic_pause(false));
    assert_eq!(g.pending("a"), vec![(i1, vec![1]), (i2, vec![2])]);
    assert_eq!(g.pending("b"), vec![(i2, vec![2])]);
    assert_eq!((g.count("a"), g.count("b"), g.topic().held()), (2, 1, 0));
    g.at(create("c"));
    assert_eq!(g.pending("c"), vec![]);
}

#[test]
fn a_paused_topic_without_channels_keeps_its_hold_until_unpaused() {
    let mut g = Group::new();
    g.at(topic_pause(true));
    let i1 = g.at(publish(&[1]));
    g.at(create("a"));
    assert_eq!(g.pending("a"), vec![]);
    assert_eq!(g.held(), vec![(i1, vec![1])]);
    g.at(topic_pause(false));
    assert_eq!(g.pending("a"), vec![(i1, vec![1])]);
}

#[test]
fn emptying_a_topic_drops_its_hold_but_not_its_channels_messages() {
    let mut g = Group::new();
    g.at(publish(&[1]));
    g.at(Entry::TopicEmpty { topic: T.into() });
    assert_eq!((g.held(), g.p.trim_point()), (vec![], None));
    let i2 = g.at(publish(&[2]));
    g.at(create("a"));
    assert_eq!(g.pending("a"), vec![(i2, vec![2])]);
    g.at(Entry::TopicEmpty { topic: T.into() });
    assert_eq!(g.pending("a"), vec![(i2, vec![2])]);
    // Paused with a channel: the empty drops what the topic held since.
    g.at(topic_pause(true));
    g.at(publish(&[3]));
    g.at(Entry::TopicEmpty { topic: T.into() });
    g.at(topic_pause(false));
    assert_eq!(g.pending("a"), vec![(i2, vec![2])]);
}

fn defer(c: &str, due: &[(u64, i64)]) -> Entry {
    Entry::Deferred {
        topic: T.into(),
        channel: c.into(),
        until: due.iter().map(|&(n, d)| (id(n), d)).collect(),
    }
}

fn dues(g: &Group, c: &str) -> Vec<(u64, i64)> {
    g.topic().due(c).iter().map(|(i, &d)| (num(i), d)).collect()
}

#[test]
fn requeue_delays_are_kept_for_unfinished_messages_until_finished_or_emptied() {
    let mut g = Group::new();
    g.at(create("a"));
    g.at(create("b"));
    g.at(publish(&[1, 2, 3]));
    g.at(fin("a", &[1]));
    // 1 is finished on a, 9 is unknown: neither is kept; the last of 2 counts
    g.at(defer("a", &[(1, 10), (2, 20), (3, 30), (9, 90), (2, 25)]));
    g.at(defer("b", &[(1, 15)]));
    assert_eq!(dues(&g, "a"), vec![(2, 25), (3, 30)]);
    assert_eq!(dues(&g, "b"), vec![(1, 15)]);
    assert_eq!(g.pending("a").len(), 1, "deferred is still unfinished");
    g.at(fin("a", &[2]));
    assert_eq!(dues(&g, "a"), vec![(3, 30)]);
    g.at(empty("a"));
    assert_eq!(dues(&g, "a"), Vec::new());
    assert_eq!(dues(&g, "b"), vec![(1, 15)]);
    assert_eq!(
        g.try_at(defer("nope", &[(1, 1)])),
        Outcome::Skipped(Skip::UnknownChannel)
    );
    g.at(delete("b"));
    assert_eq!(dues(&g, "b"), Vec::new());
}

#[test]
fn emptying_a_channel_finishes_what_it_had_at_that_point_of_the_log() {
    let mut g = Group::new();
    g.at(create("a"));
    g.at(create("b"));
    let i1 = g.at(publish(&[1, 2]));
    g.at(fin("a", &[2]));
    g.at(empty("a"));
    let i2 = g.at(publish(&[3]));
    assert_eq!(g.pending("a"), vec![(i2, vec![3])]);
    assert_eq!(g.count("a"), 1);
    assert_eq!(g.pending("b"), vec![(i1, vec![1, 2]), (i2, vec![3])]);
    // A FIN after the empty of something the empty finished is ignored.
    g.at(fin("a", &[1]));
    assert_eq!(g.count("a"), 1);
    g.at(delete("b"));
    assert_eq!(g.p.trim_point(), Some(i2), "batch i1 went with b");
    assert_eq!(g.topic().remembered(), 1);
}

#[test]
fn unknown_ids_channels_and_topics_are_skipped_never_a_panic() {
    let mut g = Group::new();
    g.at(create("a"));
    let i1 = g.at(publish(&[1]));
    g.at(fin("a", &[99, 1, 1]));
    assert_eq!(g.count("a"), 0);
    g.at(fin("a", &[1]));
    assert_eq!(g.count("a"), 0);
    assert_eq!(
        g.try_at(fin("nope", &[1])),
        Outcome::Skipped(Skip::UnknownChannel)
    );
    assert_eq!(
        g.try_at(empty("nope")),
        Outcome::Skipped(Skip::UnknownChannel)
    );
    assert_eq!(
        g.try_at(delete("nope")),
        Outcome::Skipped(Skip::UnknownChannel)
    );
    assert_eq!(
        g.try_at(publish_to("other", &[5])),
        Outcome::Skipped(Skip::UnknownTopic)
    );
    assert_eq!(
        g.try_at(Entry::Serving {
            node: 1,
            address: "a:1".into()
        }),
        Outcome::Skipped(Skip::NotProgress)
    );
    assert_eq!(
        g.p.apply(i1, &publish(&[1])),
        Outcome::Skipped(Skip::AlreadyApplied)
    );
    assert_eq!(g.pending("a"), vec![]);
    assert_eq!(g.p.unfinished("other", "a"), None);
}

#[test]
fn a_finished_entrys_cursor_is_the_proposers_view_and_never_applied() {
    let run = |cursor: Cursor| {
        let mut g = Group::new();
        g.at(create("a"));
        g.at(publish(&[1]));
        let i2 = g.at(publish(&[2]));
        g.at(Entry::Finished {
            topic: T.into(),
            channel: "a".into(),
            cursor,
            ids: vec![id(2)],
        });
        (g.p, i2)
    };
    let (honest, _) = run(Cursor {
        index: 2,
        offset: 0,
    });
    let (ahead, i2) = run(Cursor {
        index: 1_000,
        offset: 7,
    });
    assert_eq!(honest, ahead);
    assert_eq!(ahead.topic(T).unwrap().cursor("a"), Some(i2 - 1));
}

#[test]
fn deleting_the_topic_forgets_it() {
    let mut g = Group::new();
    g.at(create("a"));
    g.at(publish(&[1]));
    g.at(Entry::TopicDelete { topic: T.into() });
    assert!(g.p.topic(T).is_none());
    assert_eq!(g.p.trim_point(), None);
    assert_eq!(
        g.try_at(fin("a", &[1])),
        Outcome::Skipped(Skip::UnknownTopic)
    );
    // Created again, it starts with nothing.
    g.at(topic_create(T));
    g.at(create("a"));
    assert_eq!(g.pending("a"), vec![]);
}

#[test]
fn the_trim_point_is_the_lowest_index_any_topic_needs() {
    let mut g = Group::new();
    g.at(topic_create("u"));
    g.at(create("a"));
    let i1 = g.at(publish(&[1]));
    let u1 = g.at(publish_to("u", &[10]));
    assert_eq!(g.p.trim_point(), Some(i1));
    g.at(fin("a", &[1]));
    assert_eq!(
        g.p.trim_point(),
        Some(u1),
        "u holds 10 for its first channel"
    );
    g.at(Entry::TopicEmpty { topic: "u".into() });
    assert_eq!(g.p.trim_point(), None);
}

/// Every kind of entry in one log.
fn busy_log() -> Group {
    let mut g = Group::new();
    g.at(publish(&[1, 2]));
    g.at(create("a"));
    g.at(publish(&[3]));
    g.at(create("b"));
    g.at(fin("a", &[2, 3]));
    g.at(topic_pause(true));
    g.at(publish(&[4, 5]));
    g.at(Entry::ChannelPause {
        topic: T.into(),
        channel: "c".into(),
        paused: true,
    });
    g.at(topic_pause(false));
    g.at(publish(&[6]));
    g.at(fin("b", &[5, 6]));
    g.at(empty("c"));
    g.at(publish(&[7]));
    g.at(delete("a"));
    g.at(topic_create("u"));
    g.at(publish_to("u", &[8]));
    g.at(Entry::TopicEmpty { topic: T.into() });
    g
}

#[test]
fn applying_the_log_again_leaves_what_applying_it_once_left() {
    let g = busy_log();
    assert_eq!(g.pending("b"), vec![(8, vec![4]), (14, vec![7])]);
    assert_eq!(g.pending("c"), vec![(14, vec![7])]);
    // The same member applies it all again (a replay without a restart).
    let mut again = g.p.clone();
    for (i, e) in &g.log {
        again.apply(*i, e);
    }
    assert_eq!(again, g.p);
    // A restarted member applies it from the start.
    let mut fresh = Progress::new();
    for (i, e) in &g.log {
        fresh.apply(*i, e);
    }
    assert_eq!(fresh, g.p);
    // Every entry applied twice in a row.
    let mut twice = Progress::new();
    for (i, e) in &g.log {
        twice.apply(*i, e);
        twice.apply(*i, e);
    }
    assert_eq!(twice, g.p);
}

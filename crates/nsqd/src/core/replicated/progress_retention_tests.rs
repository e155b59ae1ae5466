//! Unit tests of retention and replay (`progress_retention.rs`): the kept
//! part by age (on the group's clock), by size and by both, the snapshot's
//! claim, the marks' bound, a reset's target and recall, `only_new`, and
//! the image that holds it all.

use bytes::Bytes;

use super::super::Pending;
use super::*;
use crate::core::replicated::entry::{Cursor, Entry, Published};

const T: &str = "t";
const SEC: i64 = 1_000_000_000;

fn id(n: u64) -> MessageId {
    MessageId::from_guid(n)
}

/// One message `n` of `len` body bytes published at second `at`.
fn publish(n: u64, at: i64, len: usize) -> Entry {
    Entry::Publish {
        topic: T.into(),
        messages: vec![Published {
            id: id(n),
            timestamp: at * SEC,
            defer_ms: 0,
            body: Bytes::from(vec![b'x'; len]),
        }],
    }
}

fn fin(c: &str, ns: impl IntoIterator<Item = u64>) -> Entry {
    Entry::Finished {
        topic: T.into(),
        channel: c.into(),
        cursor: Cursor {
            index: 0,
            offset: 0,
        },
        ids: ns.into_iter().map(id).collect(),
    }
}

fn reset(c: &str, to: u64, only_new: bool) -> Entry {
    Entry::ChannelReset {
        topic: T.into(),
        channel: c.into(),
        to,
        only_new,
    }
}

fn retention(age_s: u64, bytes: u64) -> Entry {
    Entry::Retention {
        topic: T.into(),
        age_ms: age_s * 1000,
        bytes,
    }
}

/// A group applying entries one index after another.
struct Group {
    p: Progress,
    next: u64,
}

impl Group {
    /// Topic `t` (channel `c`) with `retention` applied at index 3.
    fn new(ret: Entry) -> Group {
        let mut g = Group {
            p: Progress::new(),
            next: 1,
        };
        g.apply(Entry::TopicCreate {
            topic: T.into(),
            replicas: 3,
        });
        g.apply(Entry::ChannelCreate {
            topic: T.into(),
            channel: "c".into(),
        });
        g.apply(ret);
        g
    }

    fn apply(&mut self, e: Entry) -> u64 {
        let index = self.next;
        self.next += 1;
        self.p.apply(index, &e);
        index
    }

    /// Publishes message n at second n (1 + n bytes) and finishes it on c:
    /// its index.
    fn publish_finished(&mut self, n: u64) -> u64 {
        let index = self.apply(publish(n, n as i64, 1 + n as usize));
        self.apply(fin("c", [n]));
        index
    }

    fn from(&self) -> u64 {
        self.p.topic(T).unwrap().retention().unwrap().from
    }

    /// What a reset applied next reads back and recalls, as the server
    /// does: the ids of batches of the log (`log`: index -> id).
    fn reset_from_log(&mut self, e: Entry, log: &[(u64, u64)]) -> u64 {
        let index = self.next;
        if let Some(range) = self.p.reset_needs(index, &e) {
            for &(i, n) in log.iter().filter(|(i, _)| range.contains(i)) {
                self.p.recall(T, i, vec![id(n)]);
            }
        }
        self.apply(e)
    }
}

fn ids(p: &Progress, c: &str) -> Vec<u64> {
    p.unfinished(T, c)
        .unwrap()
        .into_iter()
        .flat_map(|Pending { ids, .. }| ids)
        .map(|i| u64::from_str_radix(std::str::from_utf8(&i.0).unwrap(), 16).unwrap())
        .collect()
}

#[test]
fn an_age_keeps_what_the_group_published_within_it_and_no_ids() {
    let mut g = Group::new(retention(10, 0));
    let first = g.publish_finished(1);
    assert_eq!(g.from(), 4, "kept from the entry after the retention");
    for n in 2..=30 {
        g.publish_finished(n);
    }
    let t = g.p.topic(T).unwrap();
    assert_eq!(t.remembered(), 0, "finished: no ids kept");
    // The clock is the newest publish (second 30): seconds 20.. are kept;
    // with one mark a second, the kept part starts at second 20's batch.
    let at_20 = first + 2 * 19;
    assert_eq!(g.from(), at_20);
    assert_eq!(g.p.snapshot_index(), Some(at_20 - 1));
    let (msgs, bytes) = t.retention().unwrap().kept();
    assert_eq!(msgs, 11);
    assert_eq!(bytes, (20..=30).map(|n| 1 + n).sum::<u64>());
}

#[test]
fn without_publishes_the_kept_part_stays_and_a_late_publish_ages_it_all() {
    let mut g = Group::new(retention(10, 0));
    for n in 1..=5 {
        g.publish_finished(n);
    }
    let from = g.from();
    let fin_only = g.apply(fin("c", [99]));
    assert_eq!(g.from(), from, "no publish: the clock stands");
    assert_eq!(g.p.snapshot_index(), Some(from - 1));
    // Second 100: all of seconds 1-5 aged out, the new one kept.
    let late = g.apply(publish(100, 100, 1));
    assert!(fin_only < late);
    assert_eq!(g.from(), late);
}

#[test]
fn a_size_keeps_the_newest_bytes_and_the_stricter_bound_wins() {
    // 64 KiB steps: one mark every 64 KiB of 32 KiB messages (2 a mark).
    let mut g = Group::new(retention(0, 256 << 10));
    let mut at = Vec::new();
    for n in 0..20 {
        at.push(g.apply(publish(n, 1, 32 << 10)));
        g.apply(fin("c", [n]));
    }
    let (_, kept) = g.p.topic(T).unwrap().retention().unwrap().kept();
    assert!((256 << 10..(256 + 64) << 10).contains(&kept), "{kept}");
    assert_eq!(g.from(), at[12]);
    // An age of 5 s on top: everything at second 1 is older at second 7.
    g.apply(retention(5, 256 << 10));
    let late = g.apply(publish(50, 7, 1));
    assert_eq!(g.from(), late);
}

#[test]
fn marks_stay_bounded_and_the_kept_part_errs_on_keeping_more() {
    let mut g = Group::new(retention(3_600, 0));
    for n in 0..5_000u64 {
        g.apply(publish(n, n as i64, 1));
    }
    let r = g.p.topic(T).unwrap().retention().unwrap();
    assert!(r.marks().count() <= MAX_MARKS);
    // Kept: seconds 1399.. (3600 s before 4999); the start is at or before.
    let want = 4 + 1_399;
    assert!(g.from() <= want && g.from() + 16 > want, "{}", g.from());
    assert!(r.scan_from(2_000 * SEC) <= 4 + 2_000);
    assert!(r.scan_from(2_000 * SEC) + 16 > 4 + 2_000);
}

#[test]
fn a_reset_to_earliest_hands_the_channel_every_kept_message_again() {
    let mut g = Group::new(retention(3_600, 0));
    let mut log = Vec::new();
    for n in 1..=6 {
        log.push((g.publish_finished(n), n));
    }
    let other = g.apply(Entry::ChannelCreate {
        topic: T.into(),
        channel: "other".into(),
    });
    assert!(other > 0 && ids(&g.p, "c").is_empty());
    g.reset_from_log(reset("c", 0, false), &log);
    assert_eq!(ids(&g.p, "c"), [1, 2, 3, 4, 5, 6]);
    assert_eq!(g.p.topic(T).unwrap().channel("c").unwrap().unfinished(), 6);
    assert!(
        ids(&g.p, "other").is_empty(),
        "the other channel is untouched"
    );
    assert_eq!(g.p.snapshot_index(), Some(log[0].0 - 1));
    // Finished again: the ids are forgotten again, the kept part stays.
    g.apply(fin("c", 1..=6));
    assert_eq!(g.p.topic(T).unwrap().remembered(), 0);
    assert_eq!(g.from(), log[0].0);
}

#[test]
fn a_reset_goes_no_further_back_than_kept_nor_past_itself() {
    let mut g = Group::new(retention(3_600, 0));
    let mut log = Vec::new();
    for n in 1..=4 {
        log.push((g.publish_finished(n), n));
    }
    // To the third message's batch: the third and fourth again.
    g.reset_from_log(reset("c", log[2].0, false), &log);
    assert_eq!(ids(&g.p, "c"), [3, 4]);
    // Latest: nothing; a message published after is the channel's.
    let at = g.reset_from_log(reset("c", u64::MAX, false), &log);
    assert!(ids(&g.p, "c").is_empty());
    assert_eq!(g.p.topic(T).unwrap().reset_target(at, u64::MAX), at + 1);
    g.apply(publish(9, 9, 1));
    assert_eq!(ids(&g.p, "c"), [9]);
    // Unfinished messages of a channel reset past them are skipped.
    g.reset_from_log(reset("c", u64::MAX, false), &log);
    assert!(ids(&g.p, "c").is_empty());
}

#[test]
fn without_retention_a_reset_reaches_only_what_a_channel_still_needs() {
    let mut p = Progress::new();
    let es = [
        Entry::TopicCreate {
            topic: T.into(),
            replicas: 3,
        },
        Entry::ChannelCreate {
            topic: T.into(),
            channel: "a".into(),
        },
        Entry::ChannelCreate {
            topic: T.into(),
            channel: "b".into(),
        },
        publish(1, 1, 1),
        publish(2, 2, 1),
        fin("a", [1, 2]),
        fin("b", [1]),
    ];
    for (i, e) in es.iter().enumerate() {
        p.apply(i as u64 + 1, e);
    }
    assert_eq!(p.reset_needs(8, &reset("a", 0, false)), None);
    p.apply(8, &reset("a", 0, false));
    assert_eq!(ids(&p, "a"), [2], "message 1 is forgotten by every channel");
}

#[test]
fn a_new_channel_may_start_at_the_earliest_kept_and_an_existing_one_is_left() {
    let mut g = Group::new(retention(3_600, 0));
    let mut log = Vec::new();
    for n in 1..=3 {
        log.push((g.publish_finished(n), n));
    }
    g.reset_from_log(reset("new", 0, true), &log);
    assert_eq!(ids(&g.p, "new"), [1, 2, 3]);
    // A second create with start= changes nothing (nothing recalled).
    g.apply(fin("new", [1]));
    assert_eq!(g.p.reset_needs(g.next, &reset("new", 0, true)), None);
    g.reset_from_log(reset("new", 0, true), &log);
    assert_eq!(ids(&g.p, "new"), [2, 3]);
    assert!(ids(&g.p, "c").is_empty());
}

#[test]
fn an_ended_retention_lets_the_log_go_and_recall_ignores_what_it_should() {
    let mut g = Group::new(retention(3_600, 0));
    for n in 1..=3 {
        g.publish_finished(n);
    }
    assert!(g.p.snapshot_index() < g.p.applied());
    g.apply(retention(0, 0));
    assert!(g.p.topic(T).unwrap().retention().is_none());
    assert_eq!(g.p.snapshot_index(), g.p.applied());
    // Above the last applied, of an unknown topic: nothing.
    g.p.recall(T, 1_000, vec![id(7)]);
    g.p.recall("nope", 2, vec![id(7)]);
    assert_eq!(g.p.topic(T).unwrap().remembered(), 0);
}

#[test]
fn the_image_keeps_retention_and_the_clock_and_goes_on_alike() {
    let mut g = Group::new(retention(10, 1 << 20));
    for n in 1..=40 {
        g.publish_finished(n);
    }
    let image = g.p.image().unwrap();
    assert_eq!(image[0], 4);
    let mut back = Progress::from_image(image.clone()).unwrap();
    assert_eq!(back, g.p);
    for cut in 0..image.len() {
        assert!(
            Progress::from_image(image.slice(..cut)).is_err(),
            "cut {cut}"
        );
    }
    let e = publish(41, 41, 2);
    back.apply(g.next, &e);
    g.apply(e);
    assert_eq!(back, g.p);
    // Without any retention the image is one an earlier build reads.
    g.apply(retention(0, 0));
    assert_eq!(g.p.image().unwrap()[0], 1);
}

#[test]
fn earliest_never_skips_a_backlog_older_than_the_retention() {
    // Message 1 (second 1) is not finished; the kept part (10 s) moves past
    // it at second 100, but a reset to the earliest still has it.
    let mut g = Group::new(retention(10, 0));
    let first = g.apply(publish(1, 1, 1));
    let second = g.publish_finished(100);
    assert_eq!(g.from(), second);
    let log = [(first, 1), (second, 100)];
    g.reset_from_log(reset("c", 0, false), &log);
    assert_eq!(ids(&g.p, "c"), [1, 100]);
    assert_eq!(g.p.snapshot_index(), Some(first - 1));
}

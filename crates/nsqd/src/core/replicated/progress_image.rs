//! A group's [`Progress`] as bytes: the image its snapshot holds, so the
//! log below the trim point may be purged and a member behind the purge
//! point (or restarted after it) starts from it. Owns the image's layout
//! (docs/replication.md, "Snapshots and the purge"). Never: when a
//! snapshot is taken or what installing one changes in nsqd's topics
//! (`crate::server::snapshots`).
//!
//! Written by hand with `bytes`, as the entries are (`core::replicated`,
//! whose name and integer helpers it shares): fixed by this file, not by a
//! serde format's version. A corrupt image is an error, never a panic, and
//! no count in it makes a larger allocation than the bytes that follow
//! could fill.
//!
//! ```text
//! u8 version (1; 2 when a channel has messages requeued with a delay; 3
//!   when the group set a depth limit or a channel dropped messages; 4
//!   when a topic has a retention)
//! u8 has applied | u64 applied
//! u8 has serving | u64 node | name address
//! (version 4) i64 clock (the newest publish applied, ns)
//! u32 topics, each:
//!   name topic | u8 replicas | u8 paused | u8 holds | u64 held_from | u64 held
//!   (version 4) u8 has retention, then if 1:
//!     u64 age ms | u64 bytes | u64 from | u64 time step ms | u64 byte step
//!     u64 total bytes | u64 total messages | i64 newest ns | u64 last index
//!     u32 marks, each: u64 index | i64 ns | i64 newest before | u64 bytes | u64 messages
//!   u32 batches, each: u64 index | u32 n | n × 16-byte id
//!   u32 channels, each:
//!     name channel | u8 paused | u64 from | u64 floor | u64 unfinished
//!     u32 finished batches, each: u64 index | u32 count | u32 words | words × u64
//!     (version 2 and later) u32 due, each: 16-byte id | i64 due (Unix ms)
//! (version 3 and later) u32 limits, each: name topic | name channel (length 0: the
//!   topic's own) | u64 max_depth | u8 policy (0 reject, 1 drop-oldest) | u64 dropped
//! ```
//!
//! Each image is written in the lowest version that holds what it has
//! (version 1 while no channel has a message requeued with a delay, no
//! limit was set and no topic has a retention), so a member of an earlier build can still read it; every
//! version is read.

use std::collections::BTreeMap;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use nsq_protocol::message::MESSAGE_ID_LEN;

use super::super::entry::{
    count, put_limit, put_name, take_flag, take_id, take_limit, take_name, take_u32, take_u64,
    take_u8, DecodeError, EncodeError,
};
use super::retention::{Mark, Retention};
use super::{Bits, ChannelProgress, Progress, TopicProgress};
use crate::core::ids::IdMap;

/// The image without any channel's due messages, and with them.
const VERSION: u8 = 1;
const VERSION_DUE: u8 = 2;
/// With the group's depth limits (and the due messages).
const VERSION_LIMITS: u8 = 3;
/// With the group's clock and each topic's retention (and the limits).
const VERSION_RETAIN: u8 = 4;

/// Why bytes are not a group's image.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    #[error("image: {0}")]
    Decode(#[from] DecodeError),
    #[error("image: {0}")]
    Encode(#[from] EncodeError),
    #[error("image: unknown version {0}")]
    Version(u8),
    #[error("image: {0} says more than the image holds")]
    Count(&'static str),
    #[error("image: a limit of {0} {1:?}, which the image does not have")]
    LimitOf(&'static str, String),
    #[error("image: batch {index} counts {count} finished, its bits say {set}")]
    Bits { index: u64, count: u32, set: u32 },
}

impl Progress {
    /// The image of everything the group's entries made, as of the last
    /// entry applied.
    pub fn image(&self) -> Result<Bytes, ImageError> {
        let mut out = BytesMut::with_capacity(64 + self.remembered_hint());
        let limits = self.limits();
        let with_retention = self.topics.values().any(|t| t.retention.is_some());
        let with_limits = with_retention || !limits.is_empty();
        let with_due = with_limits
            || self
                .topics
                .values()
                .any(|t| t.channels.values().any(|c| !c.due.is_empty()));
        out.put_u8(match (with_retention, with_limits, with_due) {
            (true, _, _) => VERSION_RETAIN,
            (false, true, _) => VERSION_LIMITS,
            (false, false, true) => VERSION_DUE,
            (false, false, false) => VERSION,
        });
        put_opt_u64(&mut out, self.applied);
        match &self.serving {
            Some((node, address)) => {
                out.put_u8(1);
                out.put_u64(*node);
                put_name(&mut out, "serving address", address)?;
            }
            None => out.put_u8(0),
        }
        if with_retention {
            out.put_i64(self.clock_ns);
        }
        out.put_u32(count("topics", self.topics.len())?);
        for (name, t) in &self.topics {
            put_name(&mut out, "topic", name)?;
            out.put_u8(t.replicas);
            out.put_u8(t.paused.into());
            put_opt_u64(&mut out, t.held_from);
            out.put_u64(t.held);
            if with_retention {
                put_retention(&mut out, t.retention.as_deref())?;
            }
            out.put_u32(count("batches", t.batches.len())?);
            for (index, ids) in &t.batches {
                out.put_u64(*index);
                out.put_u32(count("batch ids", ids.len())?);
                for id in ids {
                    out.put_slice(&id.0);
                }
            }
            out.put_u32(count("channels", t.channels.len())?);
            for (name, c) in &t.channels {
                put_name(&mut out, "channel", name)?;
                out.put_u8(c.paused.into());
                out.put_u64(c.from);
                out.put_u64(c.floor);
                out.put_u64(c.unfinished);
                out.put_u32(count("finished batches", c.finished.len())?);
                for (index, bits) in &c.finished {
                    out.put_u64(*index);
                    out.put_u32(bits.count);
                    out.put_u32(count("finished words", bits.words.len())?);
                    for w in &bits.words {
                        out.put_u64(*w);
                    }
                }
                if with_due {
                    out.put_u32(count("due", c.due.len())?);
                    for (id, due) in &c.due {
                        out.put_slice(&id.0);
                        out.put_i64(*due);
                    }
                }
            }
        }
        if with_limits {
            out.put_u32(count("limits", limits.len())?);
            for (topic, channel, limit, dropped) in limits {
                put_name(&mut out, "topic", topic)?;
                put_name(&mut out, "channel", channel)?;
                put_limit(&mut out, &limit);
                out.put_u64(dropped);
            }
        }
        Ok(out.freeze())
    }

    /// Every limit set and every channel's drops: topic, channel (empty
    /// for the topic's own), limit, dropped.
    fn limits(&self) -> Vec<(&str, &str, crate::core::limits::Limit, u64)> {
        let mut out = Vec::new();
        for (name, t) in &self.topics {
            if t.limit.is_set() {
                out.push((name.as_str(), "", t.limit, 0));
            }
            for (c_name, c) in &t.channels {
                if c.limit.is_set() || c.dropped > 0 {
                    out.push((name.as_str(), c_name.as_str(), c.limit, c.dropped));
                }
            }
        }
        out
    }

    /// The progress an image holds.
    pub fn from_image(mut buf: Bytes) -> Result<Progress, ImageError> {
        let version = take_u8(&mut buf, "version")?;
        if !(VERSION..=VERSION_RETAIN).contains(&version) {
            return Err(ImageError::Version(version));
        }
        let applied = take_opt_u64(&mut buf, "applied")?;
        let serving = if take_flag(&mut buf)? {
            let node = take_u64(&mut buf, "serving node")?;
            Some((node, take_name(&mut buf, "serving address")?))
        } else {
            None
        };
        let clock_ns = if version >= VERSION_RETAIN {
            take_u64(&mut buf, "clock")? as i64
        } else {
            0
        };
        let mut topics = BTreeMap::new();
        // Each at least its name's length byte and fixed fields.
        for _ in 0..take_count(&mut buf, "topics", 1 + 2 + 9 + 8 + 8)? {
            let name = take_name(&mut buf, "topic")?;
            let replicas = take_u8(&mut buf, "replicas")?;
            let paused = take_flag(&mut buf)?;
            let held_from = take_opt_u64(&mut buf, "held from")?;
            let held = take_u64(&mut buf, "held")?;
            let retention = if version >= VERSION_RETAIN {
                take_retention(&mut buf)?
            } else {
                None
            };
            let mut batches = BTreeMap::new();
            let mut ids = IdMap::default();
            for _ in 0..take_count(&mut buf, "batches", 12)? {
                let index = take_u64(&mut buf, "batch index")?;
                let n = take_count(&mut buf, "batch ids", MESSAGE_ID_LEN)?;
                let mut batch = Vec::with_capacity(n as usize);
                for k in 0..n {
                    let id = take_id(&mut buf, "message id")?;
                    ids.insert(id, (index, k));
                    batch.push(id);
                }
                batches.insert(index, batch);
            }
            let mut channels = BTreeMap::new();
            for _ in 0..take_count(&mut buf, "channels", 1 + 1 + 24 + 4)? {
                let name = take_name(&mut buf, "channel")?;
                let paused = take_flag(&mut buf)?;
                let from = take_u64(&mut buf, "channel from")?;
                let floor = take_u64(&mut buf, "channel floor")?;
                let unfinished = take_u64(&mut buf, "channel unfinished")?;
                let mut finished = BTreeMap::new();
                for _ in 0..take_count(&mut buf, "finished batches", 16)? {
                    let index = take_u64(&mut buf, "finished index")?;
                    let count = take_u32(&mut buf, "finished count")?;
                    let n = take_count(&mut buf, "finished words", 8)?;
                    let words = (0..n)
                        .map(|_| take_u64(&mut buf, "finished word"))
                        .collect::<Result<Vec<u64>, _>>()?;
                    let set: u32 = words.iter().map(|w| w.count_ones()).sum();
                    if set != count {
                        return Err(ImageError::Bits { index, count, set });
                    }
                    finished.insert(index, Bits { words, count });
                }
                let mut due = BTreeMap::new();
                if version >= VERSION_DUE {
                    for _ in 0..take_count(&mut buf, "due", MESSAGE_ID_LEN + 8)? {
                        let id = take_id(&mut buf, "due id")?;
                        due.insert(id, take_u64(&mut buf, "due time")? as i64);
                    }
                }
                channels.insert(
                    name,
                    ChannelProgress {
                        from,
                        floor,
                        finished,
                        unfinished,
                        paused,
                        due,
                        ..ChannelProgress::default()
                    },
                );
            }
            topics.insert(
                name,
                TopicProgress {
                    batches,
                    ids,
                    channels,
                    paused,
                    replicas,
                    held_from,
                    held,
                    retention,
                    ..TopicProgress::default()
                },
            );
        }
        if version >= VERSION_LIMITS {
            // Each at least two name lengths, a limit and a count.
            for _ in 0..take_count(&mut buf, "limits", 2 + 9 + 8)? {
                let topic = take_name(&mut buf, "limit topic")?;
                let channel = take_name(&mut buf, "limit channel")?;
                let limit = take_limit(&mut buf)?;
                let dropped = take_u64(&mut buf, "dropped")?;
                // A limit of a topic or channel the image lacks is corrupt.
                let t = topics
                    .get_mut(&topic)
                    .ok_or_else(|| ImageError::LimitOf("topic", topic.clone()))?;
                if channel.is_empty() {
                    t.limit = limit;
                } else {
                    let c = t
                        .channels
                        .get_mut(&channel)
                        .ok_or_else(|| ImageError::LimitOf("channel", channel.clone()))?;
                    c.limit = limit;
                    c.dropped = dropped;
                }
            }
        }
        if buf.has_remaining() {
            return Err(DecodeError::Trailing(buf.remaining()).into());
        }
        for t in topics.values() {
            for c in t.channels.values() {
                for (index, bits) in &c.finished {
                    let len = t.batches.get(index).map_or(0, Vec::len) as u32;
                    if bits.count > len {
                        return Err(ImageError::Bits {
                            index: *index,
                            count: bits.count,
                            set: len,
                        });
                    }
                }
            }
        }
        Ok(Progress {
            topics,
            applied,
            serving,
            clock_ns,
        })
    }

    /// About how many bytes the image takes, to allocate it once.
    fn remembered_hint(&self) -> usize {
        self.topics
            .values()
            .map(|t| 64 + t.ids.len() * MESSAGE_ID_LEN + t.batches.len() * 12)
            .sum()
    }
}

fn put_retention(out: &mut BytesMut, r: Option<&Retention>) -> Result<(), ImageError> {
    let Some(r) = r else {
        out.put_u8(0);
        return Ok(());
    };
    out.put_u8(1);
    for v in [r.age_ms, r.bytes, r.from, r.time_step_ms, r.byte_step] {
        out.put_u64(v);
    }
    out.put_u64(r.total_bytes);
    out.put_u64(r.total_msgs);
    out.put_i64(r.newest_ns);
    out.put_u64(r.last_index);
    out.put_u32(count("marks", r.marks.len())?);
    for m in &r.marks {
        out.put_u64(m.index);
        out.put_i64(m.ts_ns);
        out.put_i64(m.newest_before);
        out.put_u64(m.bytes);
        out.put_u64(m.msgs);
    }
    Ok(())
}

fn take_retention(buf: &mut Bytes) -> Result<Option<Box<Retention>>, ImageError> {
    if !take_flag(buf)? {
        return Ok(None);
    }
    let mut r = Retention {
        age_ms: take_u64(buf, "retention age")?,
        bytes: take_u64(buf, "retention bytes")?,
        from: take_u64(buf, "retention from")?,
        time_step_ms: take_u64(buf, "retention time step")?,
        byte_step: take_u64(buf, "retention byte step")?,
        total_bytes: take_u64(buf, "retention total bytes")?,
        total_msgs: take_u64(buf, "retention total messages")?,
        newest_ns: take_u64(buf, "retention newest")? as i64,
        last_index: take_u64(buf, "retention last index")?,
        ..Retention::default()
    };
    for _ in 0..take_count(buf, "marks", 40)? {
        let index = take_u64(buf, "mark index")?;
        let ts_ns = take_u64(buf, "mark time")? as i64;
        let newest_before = take_u64(buf, "mark newest before")? as i64;
        let bytes = take_u64(buf, "mark bytes")?;
        let msgs = take_u64(buf, "mark messages")?;
        // A mark counts what came before it: never more than all.
        if bytes > r.total_bytes || msgs > r.total_msgs {
            return Err(ImageError::Count("mark"));
        }
        r.marks.push_back(Mark {
            index,
            ts_ns,
            newest_before,
            bytes,
            msgs,
        });
    }
    Ok(Some(Box::new(r)))
}

fn put_opt_u64(out: &mut BytesMut, v: Option<u64>) {
    match v {
        Some(v) => {
            out.put_u8(1);
            out.put_u64(v);
        }
        None => {
            out.put_u8(0);
            out.put_u64(0);
        }
    }
}

fn take_opt_u64(buf: &mut Bytes, what: &'static str) -> Result<Option<u64>, ImageError> {
    let has = take_flag(buf)?;
    let v = take_u64(buf, what)?;
    Ok(has.then_some(v))
}

/// A count of items each at least `min_bytes` long: no more than the rest
/// of the image could hold.
fn take_count(buf: &mut Bytes, what: &'static str, min_bytes: usize) -> Result<u32, ImageError> {
    let n = take_u32(buf, what)?;
    if (n as usize).saturating_mul(min_bytes) > buf.remaining() {
        return Err(ImageError::Count(what));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::replicated::entry::{Entry, Published};
    use nsq_protocol::MessageId;

    fn id(n: u8) -> MessageId {
        MessageId([n; MESSAGE_ID_LEN])
    }

    fn publish(topic: &str, ids: std::ops::Range<u8>) -> Entry {
        Entry::Publish {
            topic: topic.into(),
            messages: ids
                .map(|n| Published {
                    id: id(n),
                    timestamp: 1,
                    defer_ms: 0,
                    body: Bytes::from_static(b"x"),
                })
                .collect(),
        }
    }

    /// Every message of topic `t` finished on `channel`.
    fn finish_all(channel: &str) -> Entry {
        Entry::Finished {
            topic: "t".into(),
            channel: channel.into(),
            cursor: crate::core::replicated::entry::Cursor {
                index: 0,
                offset: 0,
            },
            ids: (0..80).map(id).collect(),
        }
    }

    /// A group with two topics: one with a paused channel, a finished
    /// message out of order and a served leader; one held (no channel).
    fn sample() -> Progress {
        let mut p = Progress::new();
        let entries = vec![
            Entry::TopicCreate {
                topic: "t".into(),
                replicas: 3,
            },
            Entry::ChannelCreate {
                topic: "t".into(),
                channel: "a".into(),
            },
            Entry::ChannelCreate {
                topic: "t".into(),
                channel: "b".into(),
            },
            publish("t", 0..70),
            publish("t", 70..80),
            Entry::Finished {
                topic: "t".into(),
                channel: "a".into(),
                cursor: crate::core::replicated::entry::Cursor {
                    index: 0,
                    offset: 0,
                },
                ids: vec![id(3), id(66)],
            },
            Entry::ChannelPause {
                topic: "t".into(),
                channel: "b".into(),
                paused: true,
            },
            Entry::TopicCreate {
                topic: "held".into(),
                replicas: 2,
            },
            publish("held", 100..105),
            Entry::TopicPause {
                topic: "held".into(),
                paused: true,
            },
            Entry::Serving {
                node: 2,
                address: "10.0.0.2:4150".into(),
            },
        ];
        for (i, e) in entries.iter().enumerate() {
            p.apply(i as u64 + 1, e);
        }
        p
    }

    #[test]
    fn an_image_gives_back_the_progress_it_was_taken_of() {
        let p = sample();
        let back = Progress::from_image(p.image().unwrap()).unwrap();
        assert_eq!(back, p);
        assert_eq!(back.serving(), Some((2, "10.0.0.2:4150")));
        let t = back.topic("t").unwrap();
        assert_eq!(t.replicas(), 3);
        assert!(back.topic("held").unwrap().is_paused());
        assert!(t.channel("b").unwrap().is_paused());
        assert!(!t.channel("a").unwrap().is_paused());
        assert_eq!(t.channel("a").unwrap().unfinished(), 78);
        // It goes on as the original does.
        let fin = finish_all("b");
        let (mut a, mut b) = (p, back);
        a.apply(20, &fin);
        b.apply(20, &fin);
        assert_eq!(a, b);
        assert_eq!(a.unfinished("t", "b"), Some(Vec::new()));
    }

    #[test]
    fn requeue_delays_make_a_version_2_image_and_come_back() {
        let mut p = sample();
        let plain = p.image().unwrap();
        assert_eq!(plain[0], VERSION, "no delays: an image earlier builds read");
        p.apply(
            30,
            &Entry::Deferred {
                topic: "t".into(),
                channel: "b".into(),
                until: vec![(id(5), 1_796_000_000_123), (id(71), 7)],
            },
        );
        let image = p.image().unwrap();
        assert_eq!(image[0], VERSION_DUE);
        let back = Progress::from_image(image.clone()).unwrap();
        assert_eq!(back, p);
        assert_eq!(back.topic("t").unwrap().due("b").len(), 2);
        for cut in 0..image.len() {
            assert!(
                Progress::from_image(image.slice(..cut)).is_err(),
                "cut {cut}"
            );
        }
    }

    #[test]
    fn an_empty_group_has_an_image_too() {
        let p = Progress::new();
        assert_eq!(Progress::from_image(p.image().unwrap()).unwrap(), p);
    }

    #[test]
    fn every_cut_or_damaged_image_is_an_error_not_a_panic() {
        let image = sample().image().unwrap();
        for cut in 0..image.len() {
            assert!(
                Progress::from_image(image.slice(..cut)).is_err(),
                "cut {cut}"
            );
        }
        let mut longer = image.to_vec();
        longer.push(0);
        assert_eq!(
            Progress::from_image(longer.into()),
            Err(ImageError::Decode(DecodeError::Trailing(1)))
        );
        // Every byte flipped: an error or some progress that goes on
        // applying entries, never a panic.
        let fin = finish_all("a");
        for k in 0..image.len() {
            let mut bad = image.to_vec();
            bad[k] ^= 0xff;
            if let Ok(mut p) = Progress::from_image(bad.into()) {
                p.apply(1_000, &publish("t", 200..210));
                p.apply(1_001, &fin);
                let _ = (p.trim_point(), p.unfinished("t", "a"), p.image());
            }
        }
        assert_eq!(
            Progress::from_image(Bytes::from_static(&[9])),
            Err(ImageError::Version(9))
        );
    }

    #[test]
    fn a_count_larger_than_the_image_is_refused_before_allocating() {
        let mut image = BytesMut::new();
        image.put_u8(VERSION);
        put_opt_u64(&mut image, None);
        image.put_u8(0);
        image.put_u32(u32::MAX);
        assert_eq!(
            Progress::from_image(image.freeze()),
            Err(ImageError::Count("topics"))
        );
    }
}

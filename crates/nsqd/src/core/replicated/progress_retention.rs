//! Retention and replay on a replicated topic (nsq-rs; a child of
//! `progress`): what of the group's log must stay (the trim point below
//! every unfinished message, and what a snapshot may claim), how much of a
//! topic's finished messages its group's log keeps (a `Retention` entry: an
//! age and/or a size), where that kept part starts, and what moving a channel's position (`ChannelReset`) does to
//! its progress. Owns those rules. Never: reading the log (the server reads
//! the batches a reset needs back and hands their ids in, [`recall`]), or
//! the wall clock.
//!
//! **The group's clock.** Age is counted on the newest publish timestamp
//! the group has applied, not on a member's clock: every member computes
//! the same start of the kept part from the same entries, so a snapshot's
//! claim, and the batches a reset hands a channel again, are the same on
//! every member (a member's clock would make them differ by a few
//! batches). A group that no one publishes to keeps what it kept until the
//! next publish.
//!
//! **Ids never, marks only.** Retained messages cost no memory per message:
//! the topic keeps a few marks (log index, publish time, bytes and messages
//! published before it), at most [`MAX_MARKS`] of them (a new one at most
//! every time or byte step; past the most, every other one is dropped and
//! the steps doubled), so the start of the kept part is known to within a
//! step and "kept" errs on keeping more. A message is kept while it is
//! within every bound set (the stricter wins, as Kafka's retention.ms and
//! retention.bytes), and never purged while a channel has not finished it.
//!
//! **Monotonic.** The start only moves forward: raising a topic's retention
//! keeps more from then on; what a member's log purged is not brought back.
//!
//! [`recall`]: super::Progress::recall

use std::collections::VecDeque;

use nsq_protocol::MessageId;

use super::{replicated, Outcome, Progress, Skip, TopicProgress};

/// The most marks a topic keeps.
pub const MAX_MARKS: usize = 1024;
/// The finest time step between marks.
const MIN_TIME_STEP_MS: u64 = 1_000;
/// The finest byte step between marks (with a size bound).
const MIN_BYTE_STEP: u64 = 64 << 10;

/// A replicated topic's retention: its bounds and where its kept part
/// starts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Retention {
    /// How long after its publish a message is kept, ms (0: no such bound).
    pub age_ms: u64,
    /// How many body bytes of the newest messages are kept (0: no bound).
    pub bytes: u64,
    /// The first log index the kept part may hold a batch of the topic at:
    /// a snapshot never claims it, and a reset goes no further back.
    pub from: u64,
    pub(super) marks: VecDeque<Mark>,
    pub(super) time_step_ms: u64,
    pub(super) byte_step: u64,
    /// Body bytes and messages published since the retention was set.
    pub(super) total_bytes: u64,
    pub(super) total_msgs: u64,
    /// The newest batch of the topic: its publish time (ns) and index.
    pub(super) newest_ns: i64,
    pub(super) last_index: u64,
}

/// A point of the topic's log: a batch's index, its publish time (ns), the
/// newest publish time before it (ns), and the bytes and messages
/// published before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    pub index: u64,
    pub ts_ns: i64,
    pub newest_before: i64,
    pub bytes: u64,
    pub msgs: u64,
}

impl Retention {
    /// A retention of `age_ms` and `bytes` set at log `from`.
    pub fn new(age_ms: u64, bytes: u64, from: u64) -> Retention {
        let mut r = Retention {
            from,
            ..Retention::default()
        };
        r.set(age_ms, bytes);
        r
    }

    /// New bounds; the marks stay, the steps start again from the bounds.
    fn set(&mut self, age_ms: u64, bytes: u64) {
        self.age_ms = age_ms;
        self.bytes = bytes;
        self.time_step_ms = (age_ms / 512).max(MIN_TIME_STEP_MS);
        self.byte_step = if bytes == 0 {
            u64::MAX
        } else {
            (bytes / 512).max(MIN_BYTE_STEP)
        };
    }

    /// A batch of `msgs` messages and `bytes` body bytes published at
    /// `ts_ns` is at `index`.
    pub(super) fn published(&mut self, index: u64, ts_ns: i64, msgs: u64, bytes: u64) {
        let due = match self.marks.back() {
            None => true,
            Some(m) => {
                ts_ns.saturating_sub(m.ts_ns)
                    >= (self.time_step_ms as i64).saturating_mul(1_000_000)
                    || self.total_bytes - m.bytes >= self.byte_step
            }
        };
        if due {
            self.marks.push_back(Mark {
                index,
                ts_ns,
                newest_before: self.newest_ns,
                bytes: self.total_bytes,
                msgs: self.total_msgs,
            });
            if self.marks.len() > MAX_MARKS {
                self.thin();
            }
        }
        self.total_bytes += bytes;
        self.total_msgs += msgs;
        self.newest_ns = self.newest_ns.max(ts_ns);
        self.last_index = index;
    }

    /// Every other mark dropped (the first kept), the steps doubled.
    fn thin(&mut self) {
        let kept = self.marks.iter().copied().step_by(2).collect();
        // (A mark's newest before it is of everything before it: still so.)
        self.marks = kept;
        self.time_step_ms = self.time_step_ms.saturating_mul(2);
        self.byte_step = self.byte_step.saturating_mul(2);
    }

    /// Moves the start past what the bounds no longer keep, the group's
    /// clock at `now_ns`.
    pub(super) fn advance(&mut self, now_ns: i64) {
        let cutoff = (self.age_ms > 0)
            .then(|| now_ns.saturating_sub((self.age_ms as i64).saturating_mul(1_000_000)));
        if cutoff.is_some_and(|c| self.newest_ns < c) && !self.marks.is_empty() {
            // Every batch since the last mark is older than the age too.
            self.marks.clear();
            self.from = self.from.max(self.last_index + 1);
            return;
        }
        while self.marks.len() >= 2 {
            let next = self.marks[1];
            // Everything before the second mark is older than the age.
            let aged = cutoff.is_some_and(|c| next.newest_before < c);
            let over = self.bytes > 0 && self.total_bytes - next.bytes >= self.bytes;
            if !(aged || over) {
                break;
            }
            self.marks.pop_front();
            self.from = self.from.max(next.index);
        }
    }

    /// Where a scan of the log for the first batch published at or after
    /// `ts_ns` starts: the last mark at or before it, else the start.
    pub fn scan_from(&self, ts_ns: i64) -> u64 {
        self.marks
            .iter()
            .take_while(|m| m.ts_ns <= ts_ns)
            .last()
            .map_or(self.from, |m| m.index.max(self.from))
    }

    /// About how many messages and body bytes the kept part holds (from
    /// its first mark: a step's worth more at most), finished or not.
    pub fn kept(&self) -> (u64, u64) {
        match self.marks.front() {
            Some(m) => (self.total_msgs - m.msgs, self.total_bytes - m.bytes),
            None => (0, 0),
        }
    }

    /// The marks (for the image).
    pub fn marks(&self) -> impl Iterator<Item = &Mark> {
        self.marks.iter()
    }
}

impl TopicProgress {
    /// The topic's retention, if it has one.
    pub fn retention(&self) -> Option<&Retention> {
        self.retention.as_deref()
    }

    /// The first log index a reset may take a channel of the topic back
    /// to: the start of its kept part, or its oldest batch still needed if
    /// older (a batch some channel has not finished is in the log too, so
    /// `earliest` never skips a channel's backlog), or `next` (the index
    /// after the entry applied) when there is neither.
    pub fn kept_from(&self, next: u64) -> u64 {
        let needed = self.batches.keys().next().copied().unwrap_or(next);
        match &self.retention {
            Some(r) => r.from.min(needed).min(next),
            None => needed,
        }
    }

    /// `Retention` at `index`: both 0 ends it; a new one keeps from the
    /// oldest batch still needed (what is older may be purged already).
    pub(super) fn set_retention(&mut self, index: u64, age_ms: u64, bytes: u64) {
        if age_ms == 0 && bytes == 0 {
            self.retention = None;
            return;
        }
        let from = self.kept_from(index + 1);
        match &mut self.retention {
            Some(r) => r.set(age_ms, bytes),
            None => self.retention = Some(Box::new(Retention::new(age_ms, bytes, from))),
        }
    }

    /// Where `ChannelReset { to }` at `index` puts a channel: no further
    /// back than the kept part, no further on than the entry itself, and
    /// not into what the topic holds for channels to come.
    pub fn reset_target(&self, index: u64, to: u64) -> u64 {
        to.max(self.kept_from(index + 1))
            .min(index + 1)
            .min(self.limit())
    }

    /// `ChannelReset` of an existing channel at `index`: it has every batch
    /// from the target on again, none finished, none deferred.
    pub(super) fn reset_channel(&mut self, index: u64, name: &str, to: u64) -> Outcome {
        let target = self.reset_target(index, to);
        let limit = self.limit();
        let Some(c) = self.channels.get_mut(name) else {
            return Outcome::Skipped(Skip::UnknownChannel);
        };
        c.from = target;
        c.floor = target;
        c.finished.clear();
        c.due.clear();
        c.recount(&self.batches, limit);
        Outcome::Applied
    }
}

impl Progress {
    /// The highest log index a snapshot of this progress may claim: its
    /// last applied entry, or below the trim point or a retained topic's
    /// kept part if lower (the batches from there on must stay in the
    /// log). None before any entry.
    pub fn snapshot_index(&self) -> Option<u64> {
        let applied = self.applied?;
        let keep = self.trim_point().into_iter().chain(self.retained_from());
        Some(match keep.min() {
            Some(t) => applied.min(t.saturating_sub(1)),
            None => applied,
        })
    }

    /// The lowest log index any topic of the group still needs a message
    /// of: the log below it holds nothing a channel or a topic's hold will
    /// deliver again. None when nothing is needed. (Purging the log there
    /// also needs the rest of what the entries made — topics, channels,
    /// pauses — kept in a snapshot: the caller's part.)
    pub fn trim_point(&self) -> Option<u64> {
        self.topics
            .values()
            .filter_map(|t| t.batches.keys().next().copied())
            .min()
    }

    /// `ChannelReset` (made if missing; with `only_new`, an existing
    /// channel is left as it is).
    pub(super) fn apply_reset(&mut self, index: u64, entry: &super::Entry) -> Outcome {
        let super::Entry::ChannelReset {
            topic,
            channel,
            to,
            only_new,
        } = entry
        else {
            return Outcome::Skipped(Skip::NotProgress);
        };
        let Some(t) = self.topics.get_mut(topic.as_str()) else {
            return Outcome::Skipped(Skip::UnknownTopic);
        };
        if !replicated(channel) {
            return Outcome::Skipped(Skip::NotReplicated);
        }
        if t.channels.contains_key(channel.as_str()) && *only_new {
            return Outcome::Applied;
        }
        t.create_channel(index, channel);
        t.reset_channel(index, channel, *to)
    }

    /// The log indexes whose batches of `topic` a `ChannelReset` at
    /// `index` to `to` needs and this progress forgot: the server reads
    /// their ids back from the log ([`Progress::recall`]) before applying
    /// it. None when it needs none (an unknown topic, or `only_new` of a
    /// channel that exists).
    pub fn reset_needs(&self, index: u64, entry: &super::Entry) -> Option<std::ops::Range<u64>> {
        let super::Entry::ChannelReset {
            topic,
            channel,
            to,
            only_new,
        } = entry
        else {
            return None;
        };
        let t = self.topics.get(topic.as_str())?;
        if *only_new && t.channels.contains_key(channel.as_str()) {
            return None;
        }
        let start = (*to).max(t.kept_from(index + 1));
        let end = t.batches.keys().next().copied().unwrap_or(index).min(index);
        (start < end).then_some(start..end)
    }

    /// A batch of `topic` at `index` this progress forgot, read back from
    /// the log for a reset: its ids are known again (until every channel
    /// is past it again). One it has, or at or above the last index
    /// applied, changes nothing.
    pub fn recall(&mut self, topic: &str, index: u64, ids: Vec<MessageId>) {
        let Some(t) = self.topics.get_mut(topic) else {
            return;
        };
        if ids.is_empty()
            || t.batches.contains_key(&index)
            || self.applied.is_none_or(|a| index > a)
        {
            return;
        }
        for (k, id) in ids.iter().enumerate() {
            t.ids.entry(*id).or_insert((index, k as u32));
        }
        t.batches.insert(index, ids);
    }

    /// The group's clock goes on to `newest` (a publish's newest time), and
    /// the retained topics' kept parts follow it. It runs only while a
    /// topic has a retention (0 otherwise): an image without one need not
    /// hold it, and every member still agrees.
    pub(super) fn tick(&mut self, newest: Option<i64>) {
        let mut retained = self
            .topics
            .values_mut()
            .filter_map(|t| t.retention.as_mut())
            .peekable();
        if retained.peek().is_none() {
            self.clock_ns = 0;
            return;
        }
        let now = self.clock_ns.max(newest.unwrap_or(i64::MIN));
        for r in retained {
            r.advance(now);
        }
        self.clock_ns = now;
    }

    /// The lowest start of a retained topic's kept part: a snapshot claims
    /// nothing at or above it.
    pub(super) fn retained_from(&self) -> Option<u64> {
        self.topics
            .values()
            .filter_map(|t| t.retention.as_ref().map(|r| r.from))
            .min()
    }
}

#[cfg(test)]
#[path = "progress_retention_tests.rs"]
mod tests;

//! Each channel's progress through a replicated topic's log, as every
//! member of its group computes it from the entries it applied: which
//! messages of which batch are not finished on which channel, what the
//! topic itself holds for channels to come, each channel's cursor, and the
//! lowest log index the group still needs (the trim point). A member that
//! gains the group redelivers exactly what this says is unfinished, reading
//! the bodies back from the log. Owns those rules. Never: Raft, the log's
//! bytes, the clock or delivery (`crate::server` feeds it every applied
//! entry in log order and reads the bodies back; docs/replication.md,
//! "Channels on a replicated topic").
//!
//! **The group's image.** It also keeps the rest of what the entries made
//! (each topic's replicas, each channel's pause, where the group is
//! served), so that it is all a snapshot needs: [`Progress::image`]
//! encodes it, and the log below the trim point (and a retained topic's
//! kept part: `progress_retention.rs`) may then be purged
//! (`progress_image.rs`).
//!
//! **Ids only, never bodies.** Per message not yet finished on every
//! channel a member keeps its 16-byte id in its batch and again as the key
//! of the topic's id index (with its batch index and place: about 50 bytes
//! with the maps' overhead); per channel, one bit per message of each batch
//! it has finished out of order above its cursor. Batches below every
//! channel's cursor are forgotten, so memory follows the unfinished
//! messages, not the log.
//!
//! **Who gets a batch (NSQ's rules).** A channel gets the messages
//! published after it exists. A topic that is not handing messages to its
//! channels — it has none, or it is paused — holds what is published
//! meanwhile; when it hands them on again (a channel is made while it has
//! none and is not paused, or it is unpaused with channels) every channel
//! it has then gets all it held, a channel made during the hold included.
//! So the first channel of a topic that had none gets what was published
//! before it, a later one does not. `#ephemeral` channels are not the
//! group's (`core::channel_entries::replicates`) and count for nothing
//! here.
//!
//! **The cursor** of a channel is the log index of the oldest batch with a
//! message it has not finished; every member computes it from the ids it
//! applied, so all agree. The cursor in a `Finished` entry is the
//! proposer's view when it proposed (its channel may be ahead of the log:
//! FINs not yet committed), informational only: it is never applied.
//! `ChannelEmpty` counts from its own place in the log, not its `up_to`
//! (the proposer's applied index, a floor).
//!
//! **Idempotent.** A group applies its whole log again after a restart, so
//! applying an entry twice must leave what applying it once left: entries
//! at or below the last index applied are skipped (a restarted member
//! starts from a new `Progress` and applies the log from its start, which
//! ends where applying it once did: every rule depends on the entries and
//! their indexes alone).

use std::collections::BTreeMap;

use nsq_protocol::names::{is_ephemeral, is_valid_channel_name};
use nsq_protocol::MessageId;

use super::entry::Entry;
use crate::core::ids::IdMap;
use crate::core::limits::Limit;

/// One group's progress: its replicated topics by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Progress {
    topics: BTreeMap<String, TopicProgress>,
    /// The last log index applied (entries at or below it are skipped).
    applied: Option<u64>,
    /// The last `Serving` entry: the member that wrote it and where it
    /// serves consumers.
    serving: Option<(u64, String)>,
    /// The newest publish timestamp applied (ns): the clock retention ages
    /// by (`progress_retention.rs`).
    clock_ns: i64,
}

/// A replicated topic's batches still needed and its channels.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicProgress {
    /// By log index: the ids of each batch some channel, or the topic's
    /// hold, still needs.
    batches: BTreeMap<u64, Vec<MessageId>>,
    /// Where each id of `batches` is: batch index and place in it. Keyed
    /// with the core's id hasher: every FIN a channel commits is looked up
    /// here, and SipHash made this the largest cost of a replicated drain.
    ids: IdMap<MessageId, (u64, u32)>,
    channels: BTreeMap<String, ChannelProgress>,
    paused: bool,
    /// As its `TopicCreate` said.
    replicas: u8,
    /// Some(h) while the topic holds what is published (no channel, or
    /// paused): every batch at or above `h` is the topic's, no channel's
    /// yet. None while it hands batches to its channels.
    held_from: Option<u64>,
    /// Messages in the batches held.
    held: u64,
    /// The group's limit of what the topic holds (`progress_limits.rs`).
    limit: Limit,
    /// As its last `Retention` said (`progress_retention.rs`).
    retention: Option<Box<Retention>>,
}

/// One channel's progress through its topic's batches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChannelProgress {
    /// The first log index whose batch the channel gets.
    from: u64,
    /// Every batch below it is finished on the channel (at least `from`;
    /// the first batch at or above it that the channel has is not fully
    /// finished).
    floor: u64,
    /// Batches at or above `floor` with messages finished on the channel.
    finished: BTreeMap<u64, Bits>,
    /// Messages the channel has and has not finished.
    unfinished: u64,
    /// As its last `ChannelPause` said.
    paused: bool,
    /// Messages it has not finished that a consumer requeued with a delay
    /// (`Deferred`): when each is due, Unix ms.
    due: BTreeMap<MessageId, i64>,
    /// The group's limit of the channel, and what its `drop-oldest` dropped.
    limit: Limit,
    dropped: u64,
}

/// A batch to put again: its log index (to read it back and decode its
/// `Publish`) and which of its ids (only those, in the batch's order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub index: u64,
    pub ids: Vec<MessageId>,
}

/// What applying an entry did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Applied (which may change nothing, as for a FIN of an id already
    /// finished or a channel that exists).
    Applied,
    /// Not applied, and why.
    Skipped(Skip),
}

/// Why an entry was not applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// At or below the last index applied (a replay).
    AlreadyApplied,
    /// No progress in it (`Serving`).
    NotProgress,
    /// A topic the group never created, or deleted.
    UnknownTopic,
    /// A channel the topic does not have (a FIN or empty of it).
    UnknownChannel,
    /// An `#ephemeral` or invalid channel name: not the group's.
    NotReplicated,
}

impl Progress {
    pub fn new() -> Progress {
        Progress::default()
    }

    /// The last log index applied.
    pub fn applied(&self) -> Option<u64> {
        self.applied
    }

    /// Applies the committed `entry` at log `index`; entries come in log
    /// order, and one at or below the last applied is skipped.
    pub fn apply(&mut self, index: u64, entry: &Entry) -> Outcome {
        self.apply_dropping(index, entry, &mut Vec::new())
    }

    /// [`Progress::apply`], telling into `dropped` what a `Publish` made
    /// `drop-oldest` channels drop (`progress_limits.rs`).
    pub fn apply_dropping(
        &mut self,
        index: u64,
        entry: &Entry,
        dropped: &mut Vec<Dropped>,
    ) -> Outcome {
        if self.applied.is_some_and(|a| index <= a) {
            return Outcome::Skipped(Skip::AlreadyApplied);
        }
        self.applied = Some(index);
        let outcome = self.apply_new(index, entry);
        if let Entry::Publish { topic, .. } = entry {
            if let Some(t) = self.topics.get_mut(topic) {
                t.drop_oldest(topic, dropped);
            }
        }
        if let Some(t) = entry.topic().and_then(|n| self.topics.get_mut(n)) {
            t.forget();
        }
        outcome
    }

    fn apply_new(&mut self, index: u64, entry: &Entry) -> Outcome {
        if let Entry::Serving { node, address } = entry {
            // Not progress, but the group's image keeps it.
            self.serving = Some((*node, address.clone()));
            return Outcome::Skipped(Skip::NotProgress);
        }
        let Some(name) = entry.topic() else {
            return Outcome::Skipped(Skip::NotProgress);
        };
        if let Entry::TopicCreate { replicas, .. } = entry {
            // A topic created again keeps what it has (the group's first
            // create stands); a new one holds from here.
            self.topics
                .entry(name.to_string())
                .or_insert_with(|| TopicProgress {
                    held_from: Some(index + 1),
                    replicas: *replicas,
                    ..TopicProgress::default()
                });
            return Outcome::Applied;
        }
        if let Entry::ChannelReset { .. } = entry {
            return self.apply_reset(index, entry);
        }
        if let Entry::TopicDelete { .. } = entry {
            let removed = self.topics.remove(name);
            self.tick(None);
            return match removed {
                Some(_) => Outcome::Applied,
                None => Outcome::Skipped(Skip::UnknownTopic),
            };
        }
        let Some(t) = self.topics.get_mut(name) else {
            return Outcome::Skipped(Skip::UnknownTopic);
        };
        match entry {
            Entry::Publish { messages, .. } => {
                if let (Some(r), Some(first)) = (t.retention.as_mut(), messages.first()) {
                    let bytes = messages.iter().map(|m| m.body.len() as u64).sum();
                    r.published(index, first.timestamp, messages.len() as u64, bytes);
                }
                t.publish(index, messages.iter().map(|m| m.id).collect());
                let newest = messages.iter().map(|m| m.timestamp).max();
                self.tick(newest);
                Outcome::Applied
            }
            Entry::Retention { age_ms, bytes, .. } => {
                t.set_retention(index, *age_ms, *bytes);
                self.tick(None);
                Outcome::Applied
            }
            Entry::TopicPause { paused, .. } => {
                t.pause(index, *paused);
                Outcome::Applied
            }
            Entry::TopicEmpty { .. } => {
                t.empty_held();
                Outcome::Applied
            }
            Entry::ChannelCreate { channel, .. } | Entry::ChannelPause { channel, .. } => {
                if !replicated(channel) {
                    return Outcome::Skipped(Skip::NotReplicated);
                }
                // A pause names a channel its group has: made here if
                // missing, as the applier makes it.
                t.create_channel(index, channel);
                if let (Entry::ChannelPause { paused, .. }, Some(c)) =
                    (entry, t.channels.get_mut(channel.as_str()))
                {
                    c.paused = *paused;
                }
                Outcome::Applied
            }
            Entry::ChannelDelete { channel, .. } => {
                if !replicated(channel) {
                    return Outcome::Skipped(Skip::NotReplicated);
                }
                t.delete_channel(index, channel)
            }
            Entry::ChannelEmpty { channel, .. } => {
                if !replicated(channel) {
                    return Outcome::Skipped(Skip::NotReplicated);
                }
                t.empty_channel(index, channel)
            }
            Entry::Finished { channel, ids, .. } => {
                if !replicated(channel) {
                    return Outcome::Skipped(Skip::NotReplicated);
                }
                t.finish(channel, ids)
            }
            Entry::Deferred { channel, until, .. } => {
                if !replicated(channel) {
                    return Outcome::Skipped(Skip::NotReplicated);
                }
                t.defer(channel, until)
            }
            Entry::Limit { channel, limit, .. } => t.set_limit(channel.as_deref(), *limit),
            Entry::TopicCreate { .. }
            | Entry::TopicDelete { .. }
            | Entry::ChannelReset { .. }
            | Entry::Serving { .. } => Outcome::Skipped(Skip::NotProgress),
        }
    }

    /// The topic `name`'s progress.
    pub fn topic(&self, name: &str) -> Option<&TopicProgress> {
        self.topics.get(name)
    }

    /// The group's topics, by name.
    pub fn topics(&self) -> impl Iterator<Item = (&str, &TopicProgress)> {
        self.topics.iter().map(|(n, t)| (n.as_str(), t))
    }

    /// The last `Serving` entry applied: node and address.
    pub fn serving(&self) -> Option<(u64, &str)> {
        self.serving.as_ref().map(|(n, a)| (*n, a.as_str()))
    }

    /// What a member that gains the group puts into channel `channel` of
    /// `topic`: each batch with messages unfinished on it, oldest first,
    /// with those ids. None for a topic or channel the group does not have.
    pub fn unfinished(&self, topic: &str, channel: &str) -> Option<Vec<Pending>> {
        let t = self.topics.get(topic)?;
        let c = t.channels.get(channel)?;
        Some(
            within(&t.batches, c.floor, t.limit())
                .filter_map(|(&index, ids)| {
                    let done = c.finished.get(&index);
                    let ids: Vec<MessageId> = ids
                        .iter()
                        .enumerate()
                        .filter(|(k, _)| !done.is_some_and(|d| d.get(*k as u32)))
                        .map(|(_, id)| *id)
                        .collect();
                    (!ids.is_empty()).then_some(Pending { index, ids })
                })
                .collect(),
        )
    }

    /// What a member that gains the group puts into the topic itself (no
    /// channel has it yet: the topic has none, or is paused), oldest
    /// first. None for a topic the group does not have.
    pub fn held(&self, topic: &str) -> Option<Vec<Pending>> {
        let t = self.topics.get(topic)?;
        let Some(h) = t.held_from else {
            return Some(Vec::new());
        };
        Some(
            t.batches
                .range(h..)
                .map(|(&index, ids)| Pending {
                    index,
                    ids: ids.clone(),
                })
                .collect(),
        )
    }
}

impl TopicProgress {
    /// The channels, by name.
    pub fn channels(&self) -> impl Iterator<Item = (&str, &ChannelProgress)> {
        self.channels.iter().map(|(n, c)| (n.as_str(), c))
    }

    pub fn channel(&self, name: &str) -> Option<&ChannelProgress> {
        self.channels.get(name)
    }

    /// As its `TopicCreate` said.
    pub fn replicas(&self) -> u8 {
        self.replicas
    }

    /// Whether its last `TopicPause` paused it.
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Messages the topic holds for its channels to come (no channel has
    /// them yet).
    pub fn held(&self) -> u64 {
        self.held
    }

    /// Committed but not yet finished: what the topic holds plus the most
    /// any one channel has not finished. (Not the sum: every channel gets
    /// its own copy of a message, and "how far behind is this topic" is
    /// its slowest channel's count; the held messages are every channel's
    /// to come.)
    pub fn unfinished(&self) -> u64 {
        self.held
            + self
                .channels
                .values()
                .map(|c| c.unfinished)
                .max()
                .unwrap_or(0)
    }

    /// Messages whose ids this member keeps (the memory it spends).
    pub fn remembered(&self) -> usize {
        self.ids.len()
    }

    /// Where message `id` is kept: its batch's log index and its place in
    /// the batch. None for an id no batch still needed holds.
    pub fn place(&self, id: &MessageId) -> Option<(u64, u32)> {
        self.ids.get(id).copied()
    }

    /// When the messages of `channel` a consumer requeued with a delay are
    /// due (Unix ms); empty for a channel the group does not have.
    pub fn due(&self, channel: &str) -> BTreeMap<MessageId, i64> {
        self.channels
            .get(channel)
            .map(|c| c.due.clone())
            .unwrap_or_default()
    }

    /// The oldest batch a channel has unfinished, as the channel's cursor.
    pub fn cursor(&self, channel: &str) -> Option<u64> {
        let c = self.channels.get(channel)?;
        within(&self.batches, c.floor, self.limit())
            .next()
            .map(|(&i, _)| i)
    }

    /// The first index the topic's channels do not get yet (what it holds).
    fn limit(&self) -> u64 {
        self.held_from.unwrap_or(u64::MAX)
    }

    fn publish(&mut self, index: u64, ids: Vec<MessageId>) {
        if ids.is_empty() {
            return;
        }
        for (k, id) in ids.iter().enumerate() {
            self.ids.insert(*id, (index, k as u32));
        }
        let n = ids.len() as u64;
        self.batches.insert(index, ids);
        if self.held_from.is_some() {
            self.held += n;
        } else {
            for c in self.channels.values_mut() {
                c.unfinished += n;
            }
        }
    }

    fn pause(&mut self, index: u64, paused: bool) {
        self.paused = paused;
        if paused {
            if self.held_from.is_none() {
                self.held_from = Some(index + 1);
            }
        } else if !self.channels.is_empty() {
            self.hand_on();
        }
    }

    /// The hold ends: every channel now gets every batch the topic held.
    fn hand_on(&mut self) {
        if self.held_from.take().is_none() {
            return;
        }
        self.held = 0;
        for c in self.channels.values_mut() {
            c.recount(&self.batches, u64::MAX);
        }
    }

    /// `TopicEmpty`: what the topic holds is dropped (no channel had it).
    /// Its channels' messages are theirs: emptying a topic leaves them, as
    /// in NSQ.
    fn empty_held(&mut self) {
        let Some(h) = self.held_from else { return };
        let dropped = self.batches.split_off(&h);
        self.drop_ids(dropped);
        self.held = 0;
    }

    fn create_channel(&mut self, index: u64, name: &str) {
        if self.channels.contains_key(name) {
            return;
        }
        // Made during a hold it gets what the topic holds (when the hold
        // ends); made while the topic hands on, what comes after it.
        let from = self.held_from.unwrap_or(index + 1);
        let mut c = ChannelProgress {
            from,
            floor: from,
            ..ChannelProgress::default()
        };
        c.recount(&self.batches, self.limit());
        self.channels.insert(name.to_string(), c);
        if !self.paused {
            self.hand_on();
        }
    }

    fn delete_channel(&mut self, index: u64, name: &str) -> Outcome {
        if self.channels.remove(name).is_none() {
            return Outcome::Skipped(Skip::UnknownChannel);
        }
        if self.channels.is_empty() && self.held_from.is_none() {
            self.held_from = Some(index + 1);
        }
        Outcome::Applied
    }

    /// `ChannelEmpty` at `index`: everything the channel has at or below it
    /// is finished (not what the topic holds: no channel has that yet).
    fn empty_channel(&mut self, index: u64, name: &str) -> Outcome {
        let limit = self.limit();
        let Some(c) = self.channels.get_mut(name) else {
            return Outcome::Skipped(Skip::UnknownChannel);
        };
        c.floor = c.floor.max(index.saturating_add(1).min(limit));
        c.finished = c.finished.split_off(&c.floor);
        c.recount(&self.batches, limit);
        c.advance(&self.batches, limit);
        let (ids, floor) = (&self.ids, c.floor);
        c.due
            .retain(|id, _| ids.get(id).is_some_and(|&(i, _)| i >= floor));
        Outcome::Applied
    }

    /// `Deferred`: these messages are due on the channel at their times
    /// (the last `Deferred` of a message counts). One the channel does not
    /// have unfinished changes nothing.
    fn defer(&mut self, name: &str, until: &[(MessageId, i64)]) -> Outcome {
        let limit = self.limit();
        let Some(c) = self.channels.get_mut(name) else {
            return Outcome::Skipped(Skip::UnknownChannel);
        };
        for (id, due) in until {
            let Some(&(index, k)) = self.ids.get(id) else {
                continue;
            };
            let done = c.finished.get(&index).is_some_and(|b| b.get(k));
            if index >= c.floor && index < limit && !done {
                c.due.insert(*id, *due);
            }
        }
        Outcome::Applied
    }

    /// `Finished`: these ids are finished on the channel. An id it does not
    /// have (unknown, forgotten, below its cursor, held by the topic, of a
    /// batch before the channel) or already finished changes nothing.
    fn finish(&mut self, name: &str, ids: &[MessageId]) -> Outcome {
        let limit = self.limit();
        let Some(c) = self.channels.get_mut(name) else {
            return Outcome::Skipped(Skip::UnknownChannel);
        };
        let mut places = ids
            .iter()
            .filter_map(|id| self.ids.get(id))
            .filter(|&&(index, _)| index >= c.floor && index < limit)
            .peekable();
        // A FIN batch is mostly runs of one batch's ids: one map entry a run.
        while let Some(&(index, k)) = places.next() {
            let bits = c.finished.entry(index).or_default();
            let mut newly = u64::from(bits.set(k));
            while let Some(&(_, k)) = places.next_if(|p| p.0 == index) {
                newly += u64::from(bits.set(k));
            }
            c.unfinished = c.unfinished.saturating_sub(newly);
        }
        if !c.due.is_empty() {
            for id in ids {
                c.due.remove(id);
            }
        }
        c.advance(&self.batches, limit);
        Outcome::Applied
    }

    /// Drops the batches below every channel's cursor and the hold.
    fn forget(&mut self) {
        let limit = self.limit();
        let needed = self
            .channels
            .values()
            .filter_map(|c| {
                within(&self.batches, c.floor, limit)
                    .next()
                    .map(|(&i, _)| i)
            })
            .chain(self.held_from)
            .min()
            .unwrap_or(u64::MAX);
        let keep = self.batches.split_off(&needed);
        let dropped = std::mem::replace(&mut self.batches, keep);
        self.drop_ids(dropped);
    }

    /// Forgets the ids of dropped batches (an id also in a later batch,
    /// which a proposer never makes, stays that batch's).
    fn drop_ids(&mut self, dropped: BTreeMap<u64, Vec<MessageId>>) {
        for (index, ids) in dropped {
            for id in ids {
                // one lookup: put back in the rare case it was another's
                if let Some(place) = self.ids.remove(&id) {
                    if place.0 != index {
                        self.ids.insert(id, place);
                    }
                }
            }
        }
    }
}

fn replicated(channel: &str) -> bool {
    is_valid_channel_name(channel) && !is_ephemeral(channel)
}

#[cfg(test)]
#[path = "progress_tests.rs"]
mod tests;

#[path = "progress_channel.rs"]
mod channel;
use channel::{within, Bits};

#[path = "progress_image.rs"]
mod image;

#[path = "progress_retention.rs"]
pub mod retention;
pub use image::ImageError;

#[path = "progress_limits.rs"]
mod limits;
pub use limits::{limit_refusal, Dropped, GroupLimit};
use retention::Retention;

//! One channel's side of a group's progress (a child of `progress`): which
//! messages of each batch it finished (`Bits`), its count of unfinished
//! messages, and its floor moving past the batches it finished. Never: the
//! rules of which batches a channel gets (the topic's, in the parent).

use std::collections::BTreeMap;

use nsq_protocol::MessageId;

use super::ChannelProgress;

/// Which messages of a batch are finished on a channel.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Bits {
    pub(super) words: Vec<u64>,
    pub(super) count: u32,
}

impl Bits {
    /// Sets bit `k`; whether it was clear.
    pub(super) fn set(&mut self, k: u32) -> bool {
        let (w, b) = ((k / 64) as usize, k % 64);
        if self.words.len() <= w {
            self.words.resize(w + 1, 0);
        }
        let was = self.words[w] & (1 << b) != 0;
        self.words[w] |= 1 << b;
        if !was {
            self.count += 1;
        }
        !was
    }

    pub(super) fn get(&self, k: u32) -> bool {
        self.words
            .get((k / 64) as usize)
            .is_some_and(|w| w & (1 << (k % 64)) != 0)
    }
}

impl ChannelProgress {
    /// Messages the channel has and has not finished.
    pub fn unfinished(&self) -> u64 {
        self.unfinished
    }

    /// Whether its last `ChannelPause` paused it.
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Counts again what the channel has unfinished below `limit`.
    pub(super) fn recount(&mut self, batches: &BTreeMap<u64, Vec<MessageId>>, limit: u64) {
        self.unfinished = within(batches, self.floor, limit)
            .map(|(i, ids)| {
                let done = self.finished.get(i).map_or(0, |b| b.count);
                (ids.len() as u64).saturating_sub(u64::from(done))
            })
            .sum();
    }

    /// Moves the floor past the oldest batches fully finished.
    pub(super) fn advance(&mut self, batches: &BTreeMap<u64, Vec<MessageId>>, limit: u64) {
        let mut floor = self.floor;
        for (&i, ids) in within(batches, self.floor, limit) {
            match self.finished.get(&i) {
                Some(b) if b.count as usize >= ids.len() => floor = i + 1,
                _ => break,
            }
        }
        if floor != self.floor {
            self.floor = floor;
            self.finished = self.finished.split_off(&floor);
        }
    }
}

/// The batches of `from..to`; none when `to` is not above `from` (the
/// rules keep a channel's floor at or below its topic's hold, and a range
/// the other way round must not panic if they ever did not).
pub(super) fn within(
    batches: &BTreeMap<u64, Vec<MessageId>>,
    from: u64,
    to: u64,
) -> std::collections::btree_map::Range<'_, u64, Vec<MessageId>> {
    batches.range(from..to.max(from))
}

//! A channel's side of its backend (the disk queue the server owns): when
//! to ask for a refill, the confirmations of appends, the records a refill brought back, records
//! that became readable on their own, and, with durable acknowledgements,
//! which backend record each message waits on. A child of [`super`].
//!
//! Never: touches the disk; the server reports what it did.

use std::collections::hash_map::Entry;
use std::time::{Duration, Instant};

use nsq_protocol::{Message, MessageId};

use super::Channel;
use crate::core::queue::Refill;

impl Channel {
    /// Asks for a refill when memory ran dry while clients still have credit,
    /// or when the backend's records are owed a turn (`Queue::refill`).
    pub(super) fn request_refill(&mut self) {
        if self.effects.refill.is_none() && !self.paused && !self.exiting {
            let credit: i64 = self
                .ring
                .iter()
                .filter_map(|c| self.subscribers.get(c))
                .map(|s| (s.rdy - s.in_flight).max(0))
                .sum();
            if credit > 0 || self.queue.backend_turn_due() {
                self.effects.refill = self.queue.refill((credit as usize).min(super::REFILL_MAX));
            }
        }
    }

    /// The backend read number of message `id`, if the backend waits for
    /// its acknowledgement. Without durable acknowledgements the map is
    /// empty, and the hot path skips hashing the id.
    pub(super) fn take_unacked(&mut self, id: &MessageId) -> Option<u64> {
        if self.unacked.is_empty() {
            None
        } else {
            self.unacked.remove(id)
        }
    }

    /// An append from [`super::DiskWork`] is done (worked or not).
    pub fn appended(&mut self, now: Instant) {
        self.queue.appended();
        self.pump(now);
    }

    /// Records became readable in the backend without this channel writing
    /// them (a sync made them durable, with durable acknowledgements).
    pub fn backend_grew(&mut self, now: Instant) {
        self.queue.grew();
        self.pump(now);
    }

    /// The server put `n` records in the backend itself (a new leader of a
    /// replicated topic's group places there what the channel has not
    /// finished, to be read from the log when its turn comes): counted as
    /// the channel's messages and in its depth.
    pub fn backend_added(&mut self, n: u64, now: Instant) {
        if n == 0 || !self.queue.is_durable() {
            return;
        }
        self.backend_len += n;
        self.message_count += n;
        self.queue.grew();
        self.pump(now);
    }

    /// Records a refill brought back that are not due yet (a DPUB a new
    /// leader put back before its delay ran out): deferred for what is
    /// left of it.
    pub fn refilled_deferred(&mut self, msgs: Vec<(Message, Duration)>, now: Instant) {
        self.backend_len = self.backend_len.saturating_sub(msgs.len() as u64);
        for (msg, left) in msgs {
            self.defer(msg, now + left, now);
        }
    }

    /// A refill from [`super::DiskWork`] is done: its records (decoded), their
    /// read numbers when the backend waits for acknowledgements (else
    /// empty), and whether the backend has more.
    pub fn refilled(
        &mut self,
        req: Refill,
        msgs: Vec<Message>,
        reads: Vec<u64>,
        more: bool,
        now: Instant,
    ) {
        self.backend_len = self.backend_len.saturating_sub(msgs.len() as u64);
        let msgs = if reads.is_empty() {
            msgs
        } else {
            // A crash can bring back both the record a message was read
            // from and the one it was written back to (a requeue): the
            // channel keeps one copy, and the other record is done with.
            let mut kept = Vec::with_capacity(msgs.len());
            for (m, read) in msgs.into_iter().zip(reads) {
                match self.unacked.entry(m.id) {
                    Entry::Occupied(_) => self.effects.acks.push(read),
                    Entry::Vacant(e) => {
                        e.insert(read);
                        kept.push(m);
                    }
                }
            }
            kept
        };
        self.queue.refilled(req, msgs, more);
        self.pump(now);
    }
}

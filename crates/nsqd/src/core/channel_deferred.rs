//! A channel's deferred messages ([`crate::core::deferred`]): DPUBs, REQs
//! with a delay and refused dead letters go in, due ones go back into the
//! queue, and with spilling on (nsq-rs, `--deferred-spill`) the run files'
//! writes and loads are reported back here. A child of [`super`], so that
//! the timing of deferrals stays out of the delivery code.
//!
//! Never: delivers early. A spilled message is loaded up to
//! [`LOAD_AHEAD`](crate::core::deferred::LOAD_AHEAD) before it is due and
//! waits in memory for its time like any other.

use std::time::{Duration, Instant};

use nsq_protocol::{Message, MessageId};

use super::Channel;
use crate::core::deferred::SpillBatch;

/// How long a dead letter the dead-letter topic refused waits before the
/// next try.
pub const DEAD_LETTER_RETRY: Duration = Duration::from_secs(1);

impl Channel {
    /// Deferred messages, in memory and spilled.
    pub fn deferred_count(&self) -> usize {
        self.deferred.len()
    }

    /// Deferred messages held in memory (the rest are in run files).
    pub fn deferred_in_memory(&self) -> usize {
        self.deferred.memory_len()
    }

    /// Messages from the topic that must wait `delay` first (DPUB).
    pub fn put_deferred(&mut self, msgs: Vec<Message>, delay: Duration, now: Instant) {
        for msg in msgs {
            self.message_count += 1;
            self.defer(msg, now + delay, now);
        }
    }

    pub(super) fn defer(&mut self, msg: Message, due: Instant, now: Instant) {
        self.deferred.push(msg, due, now);
        self.schedule_deferred(now);
    }

    /// Wakes the timer for the next due message or run load, if earlier.
    fn schedule_deferred(&mut self, now: Instant) {
        if let Some(t) = self.deferred.next_due(now) {
            self.schedule(t);
        }
    }

    /// Due deferred messages back into the queue; loads of runs due soon.
    pub(super) fn release_due(&mut self, now: Instant) {
        let cutoff = self.expiry.cutoff(now);
        while let Some(msg) = self.deferred.pop_due(now) {
            if Self::is_expired(&msg, cutoff) {
                self.expire(msg);
            } else {
                self.enqueue(msg);
            }
        }
        self.deferred.plan_loads(now);
    }

    /// Dead letters the server could not publish (nsqd is exiting, the
    /// dead-letter topic was deleted): deferred for [`DEAD_LETTER_RETRY`],
    /// never lost, and tried again when due. Not queued at once: with
    /// nothing else to deliver they would come straight back (through the
    /// backend, with `--mem-queue-size=0`) in a busy loop.
    pub fn dead_letters_refused(
        &mut self,
        msgs: Vec<Message>,
        acks: Vec<(MessageId, u64)>,
        now: Instant,
    ) {
        // counted when they come back, as what they were: expired, or past
        // their attempts
        let cutoff = self.expiry.cutoff(now);
        let expired = msgs.iter().filter(|m| Self::is_expired(m, cutoff)).count() as u64;
        self.uncount_expired(expired);
        self.dead_letter_count = self
            .dead_letter_count
            .saturating_sub(msgs.len() as u64 - expired);
        self.unacked.extend(acks);
        for msg in msgs {
            self.defer(msg, now + DEAD_LETTER_RETRY, now);
        }
    }

    /// A [`SpillBatch`] of run `run` was written (`refused`: it was not,
    /// and its records stay in memory).
    pub fn spilled(&mut self, run: u64, refused: Vec<(Instant, Message)>, now: Instant) {
        self.deferred.spilled(run, refused);
        self.release_due(now);
        self.schedule_deferred(now);
        self.pump(now);
    }

    /// A load of run `run` is done: its records, due order, and the due
    /// time of the run's next record (None: nothing more to read).
    pub fn loaded(
        &mut self,
        run: u64,
        records: Vec<(Instant, Message)>,
        next: Option<Instant>,
        now: Instant,
    ) {
        self.deferred.loaded(run, records, next);
        self.release_due(now);
        self.schedule_deferred(now);
        self.pump(now);
    }

    /// Clean shutdown's deferred part: into `msgs` (for the backend, due
    /// times forgotten, as NSQ) or, with spilling on, a run of its own.
    pub(super) fn close_deferred(&mut self, msgs: &mut Vec<Message>) -> Option<SpillBatch> {
        let records = self.deferred.drain_in_order();
        if records.is_empty() {
            return None;
        }
        if self.deferred.spill_config().is_some() {
            return Some(self.deferred.closing_run(records));
        }
        msgs.extend(records.into_iter().map(|(_, m)| m));
        None
    }
}

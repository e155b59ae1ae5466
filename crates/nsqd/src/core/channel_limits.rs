//! A channel's side of its depth limit ([`crate::core::limits`]): the
//! depth it counts, whether it refuses a publish (`reject`), and which
//! messages it drops to make room (`drop-oldest`). A child of
//! [`super`], so that the rule stays out of the delivery code.
//!
//! A replicated channel's limit is its group's (`core::replicated`'s
//! `progress_limits.rs`): its own stays unset, and the leader's channel is
//! told which messages the group dropped, to skip them
//! ([`Channel::drop_for_group`]).
//!
//! Never: applies a limit to a message already accepted (a requeue, a
//! timeout, a due deferral): those always go back.

use nsq_protocol::{Message, MessageId};

use super::Channel;
use crate::core::ids::IdMap;
use crate::core::limits::{Admit, Limit};

impl Channel {
    pub fn limit(&self) -> Limit {
        self.limit
    }

    /// Applies to new messages from now on; what is queued stays.
    pub fn set_limit(&mut self, limit: Limit) {
        self.limit = limit;
    }

    /// `--mem-queue-size` for this channel (its topic's setting), also the
    /// deferred messages it keeps in memory before spilling; what is in
    /// memory beyond a smaller size stays there until it leaves.
    pub fn set_mem_queue_size(&mut self, size: usize) {
        self.queue.set_capacity(size);
        self.deferred.set_threshold(size);
    }

    /// The depth as `/stats` will show it once the disk work handed out is
    /// done.
    fn depth(&self) -> u64 {
        self.queue.memory_len() as u64 + self.backend_len
    }

    /// Whether a `reject` limit refuses `incoming` new messages (the topic
    /// asks every such channel before it accepts a publish).
    pub fn refuses(&self, incoming: usize) -> bool {
        self.limit.rejects() && self.limit.admit(self.depth(), incoming as u64) == Admit::Refuse
    }

    /// Under a `drop-oldest` limit, drops (and counts) the oldest waiting
    /// messages — memory first, the next in line, then the disk's — and if
    /// the batch alone is too large, its own oldest, so that `msgs` fits.
    pub(super) fn make_room(&mut self, mut msgs: Vec<Message>) -> Vec<Message> {
        if !self.limit.drops() {
            return msgs;
        }
        let Admit::Drop { old, new } = self.limit.admit(self.depth(), msgs.len() as u64) else {
            return msgs;
        };
        self.dropped_count += old + new;
        self.message_count += new;
        msgs.drain(..new as usize);
        let mut left = old;
        while left > 0 {
            let Some((msg, _)) = self.queue.pop() else {
                break;
            };
            if let Some(read) = self.take_unacked(&msg.id) {
                self.effects.acks.push(read);
            }
            left -= 1;
        }
        self.effects.skip += left;
        self.backend_len = self.backend_len.saturating_sub(left);
        msgs
    }

    /// Messages the channel's group dropped (a replicated channel's
    /// `drop-oldest`, which every member decides from the log): never
    /// delivered here from now on, wherever they are (waiting, coming from
    /// the backend or the topic, deferred or in flight: a requeue brings
    /// them back only to be skipped), and counted as dropped when reached.
    pub fn drop_for_group(&mut self, ids: &[MessageId]) {
        let mut ids: IdMap<MessageId, ()> = ids.iter().map(|id| (*id, ())).collect();
        // those waiting in memory go now, so a channel nobody reads does
        // not fill its memory with them
        for msg in self.queue.take_memory(|m| ids.remove(&m.id).is_some()) {
            self.dropped_count += 1;
            if let Some(read) = self.take_unacked(&msg.id) {
                self.effects.acks.push(read);
            }
        }
        self.group_dropped.extend(ids);
    }

    /// A FIN of message `id`: one the group dropped while it was in flight
    /// is done with.
    pub(super) fn finished_dropped(&mut self, id: &MessageId) {
        if !self.group_dropped.is_empty() {
            self.group_dropped.remove(id);
        }
    }

    /// Whether the group dropped message `id`, which is then done with.
    pub(super) fn dropped_by_group(&mut self, id: &MessageId) -> bool {
        if self.group_dropped.is_empty() || self.group_dropped.remove(id).is_none() {
            return false;
        }
        self.dropped_count += 1;
        if let Some(read) = self.take_unacked(id) {
            self.effects.acks.push(read);
        }
        true
    }
}

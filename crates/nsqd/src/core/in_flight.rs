//! Messages delivered and not yet finished, requeued or timed out: who has
//! each one and when it times out.
//!
//! Deadlines sit in a min-heap beside the map. FIN, REQ and TOUCH leave
//! their old heap entry behind rather than search for it; an entry whose
//! deadline no longer matches the map is skipped when it reaches the top,
//! and the heap is rebuilt when stale entries dominate, so it stays
//! proportional to what is really in flight.

use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::collections::BinaryHeap;
use std::time::Instant;

use nsq_protocol::{Message, MessageId};

use super::ids::{ClientId, IdMap};

/// Why FIN, REQ or TOUCH was refused (the client stays connected).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InFlightError {
    NotInFlight,
    NotOwner,
}

impl InFlightError {
    /// nsqd's wording, after `FIN <id> failed `.
    pub fn text(&self) -> &'static str {
        match self {
            InFlightError::NotInFlight => "ID not in flight",
            InFlightError::NotOwner => "client does not own message",
        }
    }
}

/// One delivered message.
#[derive(Debug)]
pub struct Delivery {
    pub msg: Message,
    pub client: ClientId,
    pub deadline: Instant,
    pub delivered: Instant,
}

#[derive(Debug, Default)]
pub struct InFlight {
    by_id: IdMap<MessageId, Delivery>,
    deadlines: BinaryHeap<Reverse<(Instant, MessageId)>>,
}

impl InFlight {
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    pub fn contains(&self, id: &MessageId) -> bool {
        self.by_id.contains_key(id)
    }

    pub fn insert(&mut self, d: Delivery) {
        self.deadlines.push(Reverse((d.deadline, d.msg.id)));
        self.by_id.insert(d.msg.id, d);
    }

    fn check(&self, client: ClientId, id: &MessageId) -> Result<(), InFlightError> {
        match self.by_id.get(id) {
            None => Err(InFlightError::NotInFlight),
            Some(d) if d.client != client => Err(InFlightError::NotOwner),
            Some(_) => Ok(()),
        }
    }

    /// Takes `client`'s message `id` out of flight (FIN, REQ), with one
    /// probe of the map (this is most of a FIN's work).
    pub fn take(&mut self, client: ClientId, id: &MessageId) -> Result<Delivery, InFlightError> {
        match self.by_id.entry(*id) {
            Entry::Occupied(e) if e.get().client == client => {
                let d = e.remove();
                self.compact();
                Ok(d)
            }
            Entry::Occupied(_) => Err(InFlightError::NotOwner),
            Entry::Vacant(_) => Err(InFlightError::NotInFlight),
        }
    }

    /// Moves the deadline of `client`'s message `id` (TOUCH) to what
    /// `deadline` computes from its delivery time; returns the new one.
    pub fn touch(
        &mut self,
        client: ClientId,
        id: &MessageId,
        deadline: impl FnOnce(&Delivery) -> Instant,
    ) -> Result<Instant, InFlightError> {
        self.check(client, id)?;
        let d = self.by_id.get_mut(id).ok_or(InFlightError::NotInFlight)?;
        d.deadline = deadline(d);
        let at = d.deadline;
        self.deadlines.push(Reverse((at, *id)));
        self.compact();
        Ok(at)
    }

    /// The next message whose deadline is at or before `now`.
    pub fn pop_expired(&mut self, now: Instant) -> Option<Delivery> {
        while let Some(Reverse((deadline, id))) = self.deadlines.peek().copied() {
            if deadline > now {
                return None;
            }
            self.deadlines.pop();
            if self.by_id.get(&id).is_some_and(|d| d.deadline == deadline) {
                return self.by_id.remove(&id);
            }
            // finished, requeued or touched since
        }
        None
    }

    /// The earliest deadline (possibly of an entry gone stale: waking for
    /// it early only costs a pass that finds nothing).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.peek().map(|Reverse((d, _))| *d)
    }

    /// Everything, oldest delivery first (shutdown persists them in that order).
    pub fn drain_by_delivery(&mut self) -> Vec<Message> {
        let mut all: Vec<Delivery> = self.by_id.drain().map(|(_, d)| d).collect();
        self.deadlines.clear();
        // ids grow with publish order, so they break ties of one instant
        all.sort_by_key(|d| (d.delivered, d.msg.id));
        all.into_iter().map(|d| d.msg).collect()
    }

    pub fn clear(&mut self) {
        self.by_id.clear();
        self.deadlines.clear();
    }

    /// Rebuilds the heap when stale entries outnumber live ones 4 to 1: a
    /// rebuild then costs a third of an entry per FIN, not one.
    fn compact(&mut self) {
        if self.deadlines.len() > 4 * self.by_id.len() + 4096 {
            self.deadlines = self
                .by_id
                .iter()
                .map(|(id, d)| Reverse((d.deadline, *id)))
                .collect();
        }
    }

    #[cfg(test)]
    pub fn heap_len(&self) -> usize {
        self.deadlines.len()
    }
}

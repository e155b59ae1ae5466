//! Messages delivered and not yet finished, requeued or timed out: who has
//! each one and when it times out.
//!
//! The deliveries themselves sit in a log in the order they were made,
//! each numbered; a small index maps a message id to its number. FIN,
//! REQ and timeouts leave a hole, and the holes at the front are dropped.
//! Consumers answer roughly in the order they were served, so a FIN reads
//! the log near its front, where the previous one did, and a delivery
//! writes at its back: only the index is probed at random, and its entries
//! are a fifth of a delivery's size. With one map of the deliveries
//! themselves (a probe of ~2 MB at random for each FIN and each delivery
//! with 10,000 in flight), four consumers of RDY 2500 cost nsqd far more
//! per message than one.
//!
//! Deadlines sit in a min-heap beside them, by number. FIN, REQ and TOUCH
//! leave their old heap entry behind rather than search for it; an entry
//! whose delivery is gone or whose deadline moved is skipped when it
//! reaches the top. A message held long at the front of the log (TOUCHed,
//! or a slow consumer) while others are answered would let holes pile up
//! behind it, and stale entries pile up in the heap: both are rebuilt from
//! the live deliveries when they outnumber them 4 to 1 (a third of a
//! delivery's work per FIN at most), so memory stays proportional to what
//! is really in flight.

use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::collections::{BinaryHeap, VecDeque};
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

/// Holes or stale heap entries allowed beyond 4 per live delivery before a
/// rebuild (so a nearly empty channel does not rebuild at every FIN).
const SLACK: usize = 1024;

#[derive(Debug, Default)]
pub struct InFlight {
    /// Deliveries by number, `head` first; None once answered or timed out.
    log: VecDeque<Option<Delivery>>,
    /// The number of `log`'s front.
    head: u64,
    /// Each message in flight's number.
    index: IdMap<MessageId, u64>,
    deadlines: BinaryHeap<Reverse<(Instant, u64)>>,
}

impl InFlight {
    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    pub fn contains(&self, id: &MessageId) -> bool {
        self.index.contains_key(id)
    }

    pub fn insert(&mut self, d: Delivery) {
        let seq = self.head + self.log.len() as u64;
        self.deadlines.push(Reverse((d.deadline, seq)));
        self.index.insert(d.msg.id, seq);
        self.log.push_back(Some(d));
    }

    /// The delivery numbered `seq`, if still in the log.
    fn slot(&mut self, seq: u64) -> Option<&mut Option<Delivery>> {
        let at = seq.checked_sub(self.head)?;
        self.log.get_mut(usize::try_from(at).ok()?)
    }

    /// Takes `client`'s message `id` out of flight (FIN, REQ), with one
    /// probe of the index (this is most of a FIN's work).
    pub fn take(&mut self, client: ClientId, id: &MessageId) -> Result<Delivery, InFlightError> {
        let Entry::Occupied(e) = self.index.entry(*id) else {
            return Err(InFlightError::NotInFlight);
        };
        let seq = *e.get();
        let at = (seq - self.head) as usize;
        match self.log.get(at) {
            Some(Some(d)) if d.client != client => return Err(InFlightError::NotOwner),
            Some(Some(_)) => {}
            // the index and the log always agree
            _ => return Err(InFlightError::NotInFlight),
        }
        e.remove();
        let d = self.log[at].take().ok_or(InFlightError::NotInFlight)?;
        self.trim();
        self.compact();
        Ok(d)
    }

    /// Moves the deadline of `client`'s message `id` (TOUCH) to what
    /// `deadline` computes from its delivery time; returns the new one.
    pub fn touch(
        &mut self,
        client: ClientId,
        id: &MessageId,
        deadline: impl FnOnce(&Delivery) -> Instant,
    ) -> Result<Instant, InFlightError> {
        let seq = *self.index.get(id).ok_or(InFlightError::NotInFlight)?;
        let Some(Some(d)) = self.slot(seq) else {
            return Err(InFlightError::NotInFlight);
        };
        if d.client != client {
            return Err(InFlightError::NotOwner);
        }
        d.deadline = deadline(d);
        let at = d.deadline;
        self.deadlines.push(Reverse((at, seq)));
        self.compact();
        Ok(at)
    }

    /// The next message whose deadline is at or before `now`.
    pub fn pop_expired(&mut self, now: Instant) -> Option<Delivery> {
        while let Some(Reverse((deadline, seq))) = self.deadlines.peek().copied() {
            if deadline > now {
                return None;
            }
            self.deadlines.pop();
            let live = matches!(self.slot(seq), Some(Some(d)) if d.deadline == deadline);
            if live {
                let d = self.slot(seq).and_then(Option::take)?;
                self.index.remove(&d.msg.id);
                self.trim();
                return Some(d);
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
        let log = std::mem::take(&mut self.log);
        self.head += log.len() as u64;
        self.clear();
        let mut all: Vec<Delivery> = log.into_iter().flatten().collect();
        // ids grow with publish order, so they break ties of one instant
        all.sort_by_key(|d| (d.delivered, d.msg.id));
        all.into_iter().map(|d| d.msg).collect()
    }

    pub fn clear(&mut self) {
        self.head += self.log.len() as u64;
        self.log.clear();
        self.index.clear();
        self.deadlines.clear();
    }

    /// Drops the holes at the log's front.
    fn trim(&mut self) {
        while let Some(None) = self.log.front() {
            self.log.pop_front();
            self.head += 1;
        }
    }

    /// Rebuilds the log and the heap from the live deliveries when holes or
    /// stale entries outnumber them 4 to 1. The live ones get new numbers
    /// past every old one, so no stale heap entry can match them.
    fn compact(&mut self) {
        let live = self.index.len();
        let bound = 4 * live + SLACK;
        if self.log.len() <= bound && self.deadlines.len() <= bound {
            return;
        }
        if self.log.len() > bound {
            self.head += self.log.len() as u64;
            let mut log = VecDeque::with_capacity(2 * live);
            for (seq, d) in (self.head..).zip(self.log.drain(..).flatten()) {
                if let Some(n) = self.index.get_mut(&d.msg.id) {
                    *n = seq;
                }
                log.push_back(Some(d));
            }
            self.log = log;
        }
        let head = self.head;
        self.deadlines = self
            .log
            .iter()
            .enumerate()
            .filter_map(|(i, d)| d.as_ref().map(|d| Reverse((d.deadline, head + i as u64))))
            .collect();
    }

    #[cfg(test)]
    pub fn heap_len(&self) -> usize {
        self.deadlines.len()
    }

    #[cfg(test)]
    pub fn log_len(&self) -> usize {
        self.log.len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;

    use super::*;

    fn delivery(n: u64, client: ClientId, at: Instant, timeout: Duration) -> Delivery {
        Delivery {
            msg: Message::new(MessageId::from_guid(n), 1, Bytes::from_static(b"b")),
            client,
            deadline: at + timeout,
            delivered: at,
        }
    }

    #[test]
    fn a_message_held_at_the_front_keeps_the_log_and_heap_bounded_and_its_own_deadline() {
        let t0 = Instant::now();
        let t = Duration::from_secs(60);
        let mut f = InFlight::default();
        // held first, then 100,000 delivered and finished behind it
        f.insert(delivery(0, 1, t0, Duration::from_secs(30)));
        for n in 1..100_000 {
            f.insert(delivery(n, 2, t0, t));
            let id = MessageId::from_guid(n);
            assert_eq!(f.take(1, &id).unwrap_err(), InFlightError::NotOwner);
            assert_eq!(f.take(2, &id).unwrap().msg.id, id);
            assert!(f.log_len() <= 4 + SLACK + 1 && f.heap_len() <= 2 * (4 + SLACK + 1));
        }
        assert_eq!(f.len(), 1);
        // still found, touched, and timed out at its own (touched) deadline
        let held = MessageId::from_guid(0);
        assert_eq!(
            f.touch(2, &held, |_| t0).unwrap_err(),
            InFlightError::NotOwner
        );
        let later = t0 + Duration::from_secs(45);
        assert_eq!(f.touch(1, &held, |d| d.delivered + t).unwrap(), t0 + t);
        assert!(f.pop_expired(later).is_none(), "touched past 45 s");
        assert_eq!(f.next_deadline(), Some(t0 + t));
        assert_eq!(f.pop_expired(t0 + t).unwrap().msg.id, held);
        assert!(f.is_empty() && f.pop_expired(t0 + 2 * t).is_none());
        assert_eq!(
            f.take(1, &held).unwrap_err(),
            InFlightError::NotInFlight,
            "gone once timed out"
        );
    }

    #[test]
    fn timeouts_come_in_deadline_order_across_clients_and_drain_in_delivery_order() {
        let t0 = Instant::now();
        let mut f = InFlight::default();
        // client 1 times out after 10 s, client 2 after 5 s
        for n in 0..6 {
            let (client, timeout) = if n % 2 == 0 { (1, 10) } else { (2, 5) };
            let at = t0 + Duration::from_millis(n);
            f.insert(delivery(n, client, at, Duration::from_secs(timeout)));
        }
        // one answered out of order
        f.take(1, &MessageId::from_guid(2)).unwrap();
        let mut due = Vec::new();
        while let Some(d) = f.pop_expired(t0 + Duration::from_secs(5) + Duration::from_millis(3)) {
            due.push(d.msg.id);
        }
        assert_eq!(due, [1, 3].map(MessageId::from_guid));
        let rest: Vec<MessageId> = f.drain_by_delivery().iter().map(|m| m.id).collect();
        assert_eq!(rest, [0, 4, 5].map(MessageId::from_guid));
        assert!(f.is_empty() && f.next_deadline().is_none());
        // numbering goes on after a drain
        f.insert(delivery(9, 1, t0, Duration::from_secs(1)));
        assert_eq!(f.take(1, &MessageId::from_guid(9)).unwrap().client, 1);
    }
}

//! The queue of a topic or channel: messages waiting to move on, in memory
//! up to `--mem-queue-size`, past that in the backend (the disk queue the
//! server owns; `#ephemeral` names have none and drop the overflow).
//!
//! Owns: the memory part, and the bookkeeping that lets the core reason
//! about a backend it never touches. Overflow leaves as records to append
//! (the server writes them with no core lock held, then calls
//! [`Queue::appended`]); records come back through a refill request (the
//! server reads up to `max`, then calls [`Queue::refilled`]). Between the
//! two, other calls go on, so the bookkeeping must stay exact when an
//! append lands while a refill is out:
//!
//! * `unread`: the backend may hold records nobody has read. A refill that
//!   finds the backend empty clears it, but only if no append was confirmed
//!   after that refill was asked for; otherwise the new records would sit
//!   unnoticed until the next overflow.
//! * `appending`: appends handed out but not confirmed. Until confirmed they
//!   count as "on disk" for the rule that new messages must not overtake
//!   the backend (a channel's hand-off past a full memory queue).
//! * `generation`: bumped when the queue is emptied or dropped; refills
//!   asked for before that are answered with records that no longer exist
//!   as far as the user is concerned, and are dropped.
//!
//! New messages go to memory whenever it has room, even while the backend
//! holds older ones (as in nsqd, whose pump picks between its memory and
//! disk channels at random). A refill is asked for when memory runs dry,
//! and also every [`FAIR_AFTER`] memory deliveries while the backend waits
//! (`streak`): otherwise a steady publish rate that keeps memory from ever
//! emptying would starve the backend's records (a disk overflow, or a
//! replicated topic's unfinished messages put back after a failover) for as
//! long as the publishing lasts.
//!
//! Never: touches the disk, reads the clock, decodes records.

use std::collections::VecDeque;

/// Memory deliveries after which records waiting in the backend get a turn
/// although memory is not empty.
pub const FAIR_AFTER: usize = 32;

/// A request to read up to `max` records from the backend and hand them to
/// [`Queue::refilled`] (decoded) with whether the backend still has more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refill {
    pub max: usize,
    /// Appends confirmed when this refill was asked for.
    confirmed_at: u32,
    generation: u32,
}

#[derive(Debug)]
pub struct Queue<T> {
    memory: VecDeque<T>,
    capacity: usize,
    /// How many items at the front of `memory` were refilled from the
    /// backend (a channel counts them apart from memory deliveries).
    from_backend: usize,
    /// Whether overflow is kept (a backend exists) or dropped.
    durable: bool,
    unread: bool,
    appending: u32,
    refilling: bool,
    /// Counts confirmed appends and clears; only compared for equality, so
    /// they may wrap.
    confirmed: u32,
    generation: u32,
    /// Items popped from memory since the backend last had a turn.
    streak: usize,
}

impl<T> Queue<T> {
    /// `backend_unread`: what the backend held at start (a restart).
    pub fn new(capacity: usize, durable: bool, backend_unread: bool) -> Queue<T> {
        Queue {
            memory: VecDeque::new(),
            capacity,
            from_backend: 0,
            durable,
            unread: durable && backend_unread,
            appending: 0,
            refilling: false,
            confirmed: 0,
            generation: 0,
            streak: 0,
        }
    }

    pub fn memory_len(&self) -> usize {
        self.memory.len()
    }

    /// A new memory bound (a topic's own `mem_queue_size`); items already
    /// past a smaller one stay until they leave.
    pub fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity;
    }

    pub fn has_room(&self) -> bool {
        self.memory.len() < self.capacity
    }

    /// Whether the backend holds (or is about to hold) unread records.
    pub fn backend_pending(&self) -> bool {
        self.unread || self.appending > 0
    }

    /// Nothing waits in memory or in the backend.
    pub fn is_empty(&self) -> bool {
        self.memory.is_empty() && !self.backend_pending()
    }

    /// Whether overflow is kept: false for `#ephemeral` names.
    pub fn is_durable(&self) -> bool {
        self.durable
    }

    pub fn push_memory(&mut self, item: T) {
        self.memory.push_back(item);
    }

    /// Overflow is on its way to the backend as one append (one call per
    /// batch, however many records it has).
    pub fn append_started(&mut self) {
        self.appending += 1;
    }

    /// The server finished an append (`append_started`). Whether or not the
    /// write worked, part of it may be on disk: the next refill finds out.
    pub fn appended(&mut self) {
        self.appending = self.appending.saturating_sub(1);
        self.unread = true;
        self.confirmed = self.confirmed.wrapping_add(1);
    }

    /// The backend has records to read that no append of ours announced
    /// (they became readable when a sync covered them).
    pub fn grew(&mut self) {
        if self.durable {
            self.unread = true;
            self.confirmed = self.confirmed.wrapping_add(1);
        }
    }

    /// The next item in memory, left there.
    pub fn front(&self) -> Option<&T> {
        self.memory.front()
    }

    /// The next item in memory, and whether it came from the backend.
    pub fn pop(&mut self) -> Option<(T, bool)> {
        let item = self.memory.pop_front()?;
        let refilled = self.from_backend > 0;
        if refilled {
            self.from_backend -= 1;
        } else if self.unread {
            self.streak += 1;
        }
        Some((item, refilled))
    }

    /// Whether the backend's records are owed a turn although memory is not
    /// empty (see the module's comment): a refill would be granted now.
    pub fn backend_turn_due(&self) -> bool {
        self.unread && !self.refilling && self.streak >= FAIR_AFTER && self.has_room()
    }

    /// A refill of up to `max` records, when the backend may have some, no
    /// refill is out already (two would read records out of order) and
    /// either memory is empty or the backend's turn is due; then it asks
    /// for as many as memory delivered meanwhile, within memory's room.
    pub fn refill(&mut self, max: usize) -> Option<Refill> {
        if !self.unread || self.refilling {
            return None;
        }
        let max = if self.memory.is_empty() {
            max
        } else if self.backend_turn_due() {
            max.max(self.streak).min(self.capacity - self.memory.len())
        } else {
            return None;
        };
        self.refilling = true;
        self.streak = 0;
        Some(Refill {
            max: max.max(1),
            confirmed_at: self.confirmed,
            generation: self.generation,
        })
    }

    /// A refill's records, oldest first. They go before anything that
    /// reached memory meanwhile: they were queued earlier. `more`: the
    /// backend still had unread records after the read. False when the
    /// records belong to a queue that was emptied since (dropped).
    pub fn refilled(&mut self, req: Refill, records: Vec<T>, more: bool) -> bool {
        if req.generation != self.generation {
            return false;
        }
        self.refilling = false;
        self.unread = more || self.confirmed != req.confirmed_at;
        self.from_backend += records.len();
        for r in records.into_iter().rev() {
            self.memory.push_front(r);
        }
        true
    }

    /// Forgets memory and the backend's records (the server empties the
    /// backend itself); answers to refills already out are dropped.
    pub fn clear(&mut self) {
        self.memory.clear();
        self.from_backend = 0;
        self.unread = false;
        self.refilling = false;
        self.streak = 0;
        self.generation = self.generation.wrapping_add(1);
    }

    /// Takes out of memory the items `pick` picks (a replicated channel's
    /// messages its group dropped), in order.
    pub fn take_memory(&mut self, mut pick: impl FnMut(&T) -> bool) -> Vec<T> {
        let mut kept = VecDeque::with_capacity(self.memory.len());
        let mut taken = Vec::new();
        let refilled = self.from_backend;
        for (k, item) in self.memory.drain(..).enumerate() {
            if !pick(&item) {
                kept.push_back(item);
            } else {
                if k < refilled {
                    self.from_backend -= 1;
                }
                taken.push(item);
            }
        }
        self.memory = kept;
        taken
    }

    /// Everything in memory, oldest first (shutdown writes it to the backend).
    pub fn drain_memory(&mut self) -> impl Iterator<Item = T> + '_ {
        self.from_backend = 0;
        self.memory.drain(..)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refilled_records_go_before_newer_memory_and_are_counted_as_backend() {
        let mut q: Queue<u32> = Queue::new(10, true, true);
        let r = q.refill(5).expect("backend has data");
        assert!(q.refill(5).is_none(), "one refill at a time");
        q.push_memory(9);
        assert!(q.refilled(r, vec![1, 2], false));
        let got: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(got, vec![(1, true), (2, true), (9, false)]);
        assert!(q.is_empty());
    }

    #[test]
    fn items_taken_out_of_memory_keep_the_others_order_and_backend_count() {
        let mut q: Queue<u32> = Queue::new(10, true, true);
        let r = q.refill(5).unwrap();
        q.push_memory(9);
        q.push_memory(10);
        q.refilled(r, vec![1, 2, 3], false);
        assert_eq!(q.take_memory(|&n| n == 2 || n == 9), vec![2, 9]);
        let got: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(got, vec![(1, true), (3, true), (10, false)]);
    }

    #[test]
    fn an_append_confirmed_during_an_empty_refill_keeps_the_backend_pending() {
        let mut q: Queue<u32> = Queue::new(0, true, true);
        let r = q.refill(5).unwrap();
        // the server's read found nothing; meanwhile an overflow was written
        q.append_started();
        q.appended();
        q.refilled(r, vec![], false);
        assert!(q.backend_pending());
        assert!(q.refill(5).is_some(), "the new record is asked for");
    }

    #[test]
    fn an_empty_refill_with_no_append_meanwhile_clears_pending() {
        let mut q: Queue<u32> = Queue::new(0, true, true);
        let r = q.refill(5).unwrap();
        q.refilled(r, vec![], false);
        assert!(!q.backend_pending());
        assert!(q.refill(5).is_none());
    }

    #[test]
    fn an_unconfirmed_append_counts_as_pending() {
        let mut q: Queue<u32> = Queue::new(0, true, false);
        assert!(!q.backend_pending());
        q.append_started();
        assert!(q.backend_pending() && !q.is_empty());
        assert!(
            q.refill(5).is_none(),
            "nothing to read until the write is confirmed"
        );
        q.appended();
        assert!(q.refill(5).is_some());
    }

    #[test]
    fn refills_asked_for_before_a_clear_are_dropped() {
        let mut q: Queue<u32> = Queue::new(10, true, true);
        let r = q.refill(5).unwrap();
        q.clear();
        assert!(!q.refilled(r, vec![1], true));
        assert!(q.pop().is_none());
        assert!(!q.backend_pending());
    }

    #[test]
    fn the_backend_gets_a_turn_while_memory_never_runs_dry() {
        let mut q: Queue<u32> = Queue::new(100, true, true);
        q.push_memory(0);
        for i in 1..=FAIR_AFTER as u32 {
            assert!(
                !q.backend_turn_due() && q.refill(1).is_none(),
                "memory first"
            );
            // a steady publisher: one in for each one out
            q.push_memory(i);
            assert_eq!(q.pop(), Some((i - 1, false)));
        }
        assert!(q.backend_turn_due());
        let r = q.refill(1).expect("the backend's turn");
        assert_eq!(r.max, FAIR_AFTER, "as many as memory delivered meanwhile");
        assert!(!q.backend_turn_due(), "one refill at a time");
        assert!(q.refilled(r, vec![100, 101], true));
        assert_eq!(q.pop(), Some((100, true)), "the older records go first");
        assert_eq!(q.pop(), Some((101, true)));
        assert_eq!(q.pop(), Some((FAIR_AFTER as u32, false)));
    }

    #[test]
    fn the_backends_turn_asks_for_no_more_than_memory_has_room_for() {
        let mut q: Queue<u32> = Queue::new(FAIR_AFTER + 3, true, true);
        for i in 0..FAIR_AFTER as u32 * 2 {
            q.push_memory(i);
        }
        for _ in 0..FAIR_AFTER {
            q.pop();
        }
        // FAIR_AFTER left in memory, room for 3
        assert_eq!(q.refill(1).map(|r| r.max), Some(3));
        let mut full: Queue<u32> = Queue::new(2, true, true);
        full.push_memory(1);
        full.push_memory(2);
        full.streak = FAIR_AFTER;
        assert!(!full.backend_turn_due(), "no room: memory drains first");
        let mut empty_backend: Queue<u32> = Queue::new(100, true, false);
        empty_backend.push_memory(1);
        for _ in 0..FAIR_AFTER * 2 {
            empty_backend.push_memory(2);
            empty_backend.pop();
        }
        assert!(!empty_backend.backend_turn_due(), "nothing waits there");
    }

    #[test]
    fn an_ephemeral_queue_never_has_a_backend() {
        let mut q: Queue<u32> = Queue::new(1, false, true);
        assert!(!q.is_durable() && !q.backend_pending());
        assert!(q.refill(5).is_none());
    }
}

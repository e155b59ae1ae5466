//! Messages held back until a due time: a REQ with a delay, or a DPUB.
//! Ordered by due time, then by arrival, so equal due times keep their order.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

use nsq_protocol::Message;

#[derive(Debug)]
struct Entry {
    due: Instant,
    seq: u64,
    msg: Message,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        (self.due, self.seq) == (o.due, o.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.due, self.seq).cmp(&(o.due, o.seq))
    }
}

#[derive(Debug, Default)]
pub struct Deferred {
    heap: BinaryHeap<Reverse<Entry>>,
    seq: u64,
}

impl Deferred {
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    pub fn push(&mut self, msg: Message, due: Instant) {
        self.seq += 1;
        self.heap.push(Reverse(Entry {
            due,
            seq: self.seq,
            msg,
        }));
    }

    /// The next message due at or before `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<Message> {
        if self.heap.peek().is_some_and(|Reverse(e)| e.due <= now) {
            return self.heap.pop().map(|Reverse(e)| e.msg);
        }
        None
    }

    pub fn next_due(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse(e)| e.due)
    }

    /// Everything, soonest due first (shutdown persists them in that order).
    pub fn drain_in_order(&mut self) -> Vec<Message> {
        let sorted = std::mem::take(&mut self.heap).into_sorted_vec();
        // sorted ascending by Reverse(..), i.e. latest due first
        sorted.into_iter().rev().map(|Reverse(e)| e.msg).collect()
    }

    pub fn clear(&mut self) {
        self.heap.clear();
    }
}

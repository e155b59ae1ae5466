//! Messages held back until a due time: a REQ with a delay, or a DPUB.
//! Ordered by due time, then by arrival, so equal due times keep their order.
//!
//! Beyond NSQ (opt-in, `--deferred-spill`): past `threshold` messages held
//! in memory, new deferrals *spill* to sorted run files on disk, and come
//! back shortly before they are due, so a million messages deferred for a
//! day cost disk, not memory. A run is appended to only in due order (a
//! record is never earlier than the run's last one), so reading it front to
//! back is reading it in due order; several runs are open at once for
//! interleaved delays (patience sorting), and their heads are merged here.
//! Runs written by an earlier process (`restored`) are loaded whether or not
//! spilling is on now, so turning the flag off loses nothing.
//!
//! Owns the decisions only — what spills to which run, when a run's next
//! block is loaded, when a run is done with — as effects ([`DeferredWork`])
//! that the server carries out and confirms ([`Deferred::spilled`],
//! [`Deferred::loaded`]). Never: touches the disk or reads the clock.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::time::{Duration, Instant};

use nsq_protocol::Message;

/// How long before a spilled message is due its block is loaded.
pub const LOAD_AHEAD: Duration = Duration::from_secs(1);

/// Most records one load of a run brings back.
pub const LOAD_MAX: usize = 1024;

/// Runs that accept appends at once; past that the oldest stops growing.
const MAX_OPEN_RUNS: usize = 8;

/// Extra bytes a record takes in a run file besides the message's
/// encoding (length, CRC, due time).
pub const RECORD_OVERHEAD: u64 = 16;

/// Spilling, as a channel is configured for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpillConfig {
    /// Deferred messages kept in memory before new ones spill (the
    /// channel's `mem_queue_size`).
    pub threshold: usize,
    /// Every spill-eligible deferral goes to disk whatever its delay: a
    /// DPUB is then acknowledged once durable with its due time
    /// (`--sync-every=1`).
    pub durable: bool,
    /// A run stops growing past this many bytes (`--max-bytes-per-file`),
    /// so that consumed runs free their disk as they go.
    pub max_run_bytes: u64,
}

/// A run file found at start: its number, unread records and first due time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestoredRun {
    pub id: u64,
    pub count: u64,
    pub head: Instant,
}

/// Records to append to run `run`, in due order (`new`: create its file).
#[derive(Debug, Clone, PartialEq)]
pub struct SpillBatch {
    pub run: u64,
    pub new: bool,
    pub records: Vec<(Instant, Message)>,
}

/// Read up to `max` records of run `run` whose due time is at or before
/// `until`, then report with [`Deferred::loaded`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Load {
    pub run: u64,
    pub max: usize,
    pub until: Instant,
}

/// What the server must do with run files.
#[derive(Debug, Default, PartialEq)]
pub struct DeferredWork {
    pub spill: Vec<SpillBatch>,
    pub load: Vec<Load>,
    /// Runs done with: every record was loaded and has left this heap.
    pub delete: Vec<u64>,
}

impl DeferredWork {
    pub fn is_empty(&self) -> bool {
        self.spill.is_empty() && self.load.is_empty() && self.delete.is_empty()
    }
}

#[derive(Debug)]
struct Entry {
    due: Instant,
    seq: u64,
    msg: Message,
    /// The run it was loaded from (it counts toward that run's `out`).
    run: Option<u64>,
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

#[derive(Debug)]
struct Run {
    /// Records on disk not yet loaded.
    unread: u64,
    /// Due time of the first unread record (at most it: an earlier guess
    /// only makes a load come early, never late).
    head: Option<Instant>,
    /// A load is out.
    loading: bool,
    /// Appends handed out and not yet confirmed; no load is asked for
    /// meanwhile, so a load sees every record counted in `unread`.
    writing: u32,
    /// Due time of the first record appended while a load was out (the
    /// load may not see it).
    late_head: Option<Instant>,
    /// Loaded records still in the heap.
    out: u64,
    /// Accepts appends (due at or after `tail`).
    open: bool,
    tail: Instant,
    bytes: u64,
}

#[derive(Debug, Default)]
pub struct Deferred {
    heap: BinaryHeap<Reverse<Entry>>,
    seq: u64,
    spill: Option<SpillConfig>,
    runs: BTreeMap<u64, Run>,
    next_run: u64,
    /// Heap entries not loaded from a run: the ones the threshold counts.
    own: usize,
    /// Unread records in all runs.
    spilled: u64,
    work: DeferredWork,
}

impl Deferred {
    /// `spill`: None keeps everything in memory, as NSQ; `restored` runs
    /// are loaded when due either way.
    pub fn new(spill: Option<SpillConfig>, restored: &[RestoredRun]) -> Deferred {
        let mut d = Deferred {
            spill,
            ..Deferred::default()
        };
        for r in restored.iter().filter(|r| r.count > 0) {
            d.spilled += r.count;
            d.next_run = d.next_run.max(r.id + 1);
            d.runs.insert(
                r.id,
                Run {
                    unread: r.count,
                    head: Some(r.head),
                    loading: false,
                    writing: 0,
                    late_head: None,
                    out: 0,
                    open: false,
                    tail: r.head,
                    bytes: 0,
                },
            );
        }
        // restored runs with nothing left are deleted at once
        d.work
            .delete
            .extend(restored.iter().filter(|r| r.count == 0).map(|r| r.id));
        d
    }

    /// Every deferred message, in memory and spilled.
    pub fn len(&self) -> usize {
        self.heap.len() + self.spilled as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Deferred messages held in memory.
    pub fn memory_len(&self) -> usize {
        self.heap.len()
    }

    /// Run files that exist or are being written.
    pub fn run_count(&self) -> usize {
        self.runs.len()
    }

    pub fn spill_config(&self) -> Option<SpillConfig> {
        self.spill
    }

    /// A new memory threshold (a topic's own `mem_queue_size`).
    pub fn set_threshold(&mut self, threshold: usize) {
        if let Some(s) = self.spill.as_mut() {
            s.threshold = threshold;
        }
    }

    /// Defers `msg` until `due`: into memory, or past the threshold onto
    /// a run (then `take_work` has it to write).
    pub fn push(&mut self, msg: Message, due: Instant, now: Instant) {
        let spills = self
            .spill
            .is_some_and(|s| self.own >= s.threshold && (s.durable || due > now + LOAD_AHEAD));
        if spills {
            self.spill_one(msg, due);
        } else {
            self.own += 1;
            self.insert(msg, due, None);
        }
    }

    fn insert(&mut self, msg: Message, due: Instant, run: Option<u64>) {
        self.seq += 1;
        self.heap.push(Reverse(Entry {
            due,
            seq: self.seq,
            msg,
            run,
        }));
    }

    fn spill_one(&mut self, msg: Message, due: Instant) {
        let max_run_bytes = self.spill.map_or(u64::MAX, |s| s.max_run_bytes);
        // the open run with the latest tail that `due` does not precede
        let pile = self
            .runs
            .iter()
            .filter(|(_, r)| r.open && r.tail <= due)
            .max_by_key(|(_, r)| r.tail)
            .map(|(&id, _)| id);
        let (id, new) = match pile {
            Some(id) => (id, false),
            None => {
                let open: Vec<u64> = self
                    .runs
                    .iter()
                    .filter(|(_, r)| r.open)
                    .map(|(&id, _)| id)
                    .collect();
                if open.len() >= MAX_OPEN_RUNS {
                    if let Some(r) = self.runs.get_mut(&open[0]) {
                        r.open = false;
                    }
                }
                let id = self.next_run;
                self.next_run += 1;
                self.runs.insert(
                    id,
                    Run {
                        unread: 0,
                        head: None,
                        loading: false,
                        writing: 0,
                        late_head: None,
                        out: 0,
                        open: true,
                        tail: due,
                        bytes: 0,
                    },
                );
                (id, true)
            }
        };
        let Some(run) = self.runs.get_mut(&id) else {
            return;
        };
        if run.loading && run.late_head.is_none() {
            run.late_head = Some(due);
        }
        if run.unread == 0 && !run.loading {
            run.head = Some(due);
        }
        run.unread += 1;
        run.tail = due;
        run.bytes += msg.encoded_len() as u64 + RECORD_OVERHEAD;
        if run.bytes >= max_run_bytes {
            run.open = false;
        }
        self.spilled += 1;
        match self.work.spill.last_mut() {
            Some(b) if b.run == id => b.records.push((due, msg)),
            _ => {
                run.writing += 1;
                self.work.spill.push(SpillBatch {
                    run: id,
                    new,
                    records: vec![(due, msg)],
                });
            }
        }
    }

    /// The next message due at or before `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<Message> {
        if self.heap.peek().is_none_or(|Reverse(e)| e.due > now) {
            return None;
        }
        let Reverse(e) = self.heap.pop()?;
        match e.run {
            Some(id) => {
                if let Some(r) = self.runs.get_mut(&id) {
                    r.out = r.out.saturating_sub(1);
                }
                self.maybe_done(id);
            }
            None => self.own -= 1,
        }
        Some(e.msg)
    }

    /// A run every record of which was loaded and has left the heap is
    /// deleted (its records are in the queue now, or beyond).
    fn maybe_done(&mut self, id: u64) {
        if self
            .runs
            .get(&id)
            .is_some_and(|r| r.unread == 0 && r.out == 0 && r.writing == 0 && !r.loading)
        {
            self.runs.remove(&id);
            self.work.delete.push(id);
        }
    }

    /// When the earliest message in memory is due, or a run must be loaded.
    /// A run [`Deferred::plan_loads`] left for want of budget is due for a
    /// load when its head is (then it loads anyway): never a time already
    /// past, which would spin the timer.
    pub fn next_due(&self, now: Instant) -> Option<Instant> {
        let heap = self.heap.peek().map(|Reverse(e)| e.due);
        let runs = self
            .runs
            .values()
            .filter(|r| !r.loading && r.writing == 0)
            .filter_map(|r| r.head)
            .map(|h| {
                let t = h.checked_sub(LOAD_AHEAD).unwrap_or(h);
                if t <= now {
                    h
                } else {
                    t
                }
            })
            .min();
        match (heap, runs) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Asks for the next block of every run whose head is due within
    /// [`LOAD_AHEAD`]. Loaded records wait in memory; while more of them
    /// wait than the threshold allows, only overdue heads are loaded.
    pub fn plan_loads(&mut self, now: Instant) {
        let budget = self.spill.map_or(LOAD_MAX, |s| s.threshold.max(LOAD_MAX));
        let mut waiting = self.heap.len() - self.own;
        for (&id, r) in self.runs.iter_mut() {
            let Some(head) = r.head else { continue };
            if r.loading || r.writing > 0 || r.unread == 0 || head > now + LOAD_AHEAD {
                continue;
            }
            if head > now && waiting >= budget {
                continue;
            }
            r.loading = true;
            r.late_head = None;
            waiting += LOAD_MAX;
            self.work.load.push(Load {
                run: id,
                max: LOAD_MAX,
                until: now + LOAD_AHEAD,
            });
        }
    }

    /// The server wrote a [`SpillBatch`] of run `run` (or failed to: then
    /// `refused` has its records back, and they stay in memory).
    pub fn spilled(&mut self, run: u64, refused: Vec<(Instant, Message)>) {
        let Some(r) = self.runs.get_mut(&run) else {
            return;
        };
        r.writing = r.writing.saturating_sub(1);
        if !refused.is_empty() {
            let n = refused.len() as u64;
            r.unread = r.unread.saturating_sub(n);
            r.open = false;
            if r.unread == 0 {
                r.head = None;
            }
            self.spilled = self.spilled.saturating_sub(n);
            for (due, msg) in refused {
                self.own += 1;
                self.insert(msg, due, None);
            }
        }
        self.maybe_done(run);
    }

    /// A [`Load`]'s records (due order) and the due time of the run's next
    /// unread record (None: none was there to read).
    pub fn loaded(&mut self, run: u64, records: Vec<(Instant, Message)>, next: Option<Instant>) {
        let Some(r) = self.runs.get_mut(&run) else {
            // the run was emptied meanwhile: its records are gone
            return;
        };
        r.loading = false;
        let n = records.len() as u64;
        r.unread = r.unread.saturating_sub(n);
        r.out += n;
        self.spilled = self.spilled.saturating_sub(n);
        r.head = match (r.unread, next) {
            (0, _) => None,
            (_, Some(h)) => Some(h),
            // what is unread was appended after the read: not seen yet
            (_, None) if r.late_head.is_some() => r.late_head,
            (left, None) => {
                // the file ended early (a damaged record): the rest is gone
                self.spilled = self.spilled.saturating_sub(left);
                r.unread = 0;
                None
            }
        };
        r.late_head = None;
        for (due, msg) in records {
            self.insert(msg, due, Some(run));
        }
        self.maybe_done(run);
    }

    /// Run file work left by the calls so far.
    pub fn take_work(&mut self) -> DeferredWork {
        std::mem::take(&mut self.work)
    }

    /// Whether run file work is waiting.
    pub fn has_work(&self) -> bool {
        !self.work.is_empty()
    }

    /// Clean shutdown: everything in memory, soonest due first, with due
    /// times; the runs stay on disk where they are.
    pub fn drain_in_order(&mut self) -> Vec<(Instant, Message)> {
        let sorted = std::mem::take(&mut self.heap).into_sorted_vec();
        self.own = 0;
        // sorted ascending by Reverse(..), i.e. latest due first
        sorted
            .into_iter()
            .rev()
            .map(|Reverse(e)| (e.due, e.msg))
            .collect()
    }

    /// Clean shutdown with spilling on: what memory held becomes a run of
    /// its own (`records` in due order, from [`Deferred::drain_in_order`]).
    pub fn closing_run(&mut self, records: Vec<(Instant, Message)>) -> SpillBatch {
        let run = self.next_run;
        self.next_run += 1;
        SpillBatch {
            run,
            new: true,
            records,
        }
    }

    /// Drops everything; the runs' files are deleted.
    pub fn clear(&mut self) {
        self.heap.clear();
        self.own = 0;
        self.spilled = 0;
        let ids: Vec<u64> = self.runs.keys().copied().collect();
        self.runs.clear();
        self.work.spill.clear();
        self.work.load.clear();
        self.work.delete.extend(ids);
    }
}

#[cfg(test)]
#[path = "deferred_tests.rs"]
mod tests;

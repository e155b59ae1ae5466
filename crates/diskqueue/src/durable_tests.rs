//! The acknowledgement under power cuts: the queue with
//! [`Options::durable_reads`] (nsqd with `--sync-every=1`) on [`SimFs`],
//! with fsyncs that fail while the machine lives on.
//!
//! The owner acknowledges a record once [`DiskQueue::durability`] says its
//! range is `Durable`, and answers an error once it says `Lost`. Checked
//! after every step, against random puts, reads, syncs (some of them
//! failing), kills and power cuts:
//!
//! * every acknowledged record is delivered, at least once, by the end —
//!   whatever power cuts happened after its acknowledgement;
//! * no record reported `Lost` is ever delivered (its publisher was told
//!   it failed);
//! * a record put in this process's life is delivered only once it is
//!   `Durable`: a reader never sees what a power cut could still take;
//! * every delivered record was put, byte for byte;
//! * with [`Options::acked_reads`] (nsqd's channels), every acknowledged
//!   record is *finished* by the end: a record read and not yet acked when
//!   the process is killed or the power goes is read again.
//!
//! `SIMFS_CASES=N` runs N cases instead of 512.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::RangeInclusive;

use proptest::prelude::*;

use super::*;
use crate::simfs::{Cut, NsModel, SimFs};

const NAME: &str = "dur:c";

fn data_dir() -> PathBuf {
    PathBuf::from("/sim/data")
}

fn opts(max_bytes: i64, acked_reads: bool) -> Options {
    Options {
        max_bytes_per_file: max_bytes,
        min_msg_size: 8,
        max_msg_size: 48,
        // nsqd's --sync-every=1, as it opens its queues
        sync_every: 1,
        sync_timeout: Duration::from_secs(2),
        defer_sync: true,
        durable_reads: true,
        acked_reads,
    }
}

fn record(id: u64, extra: usize) -> Vec<u8> {
    let mut v = id.to_be_bytes().to_vec();
    v.resize(8 + extra, (id % 251) as u8);
    v
}

#[derive(Debug, Clone)]
enum Op {
    Put(Vec<usize>),
    /// The owner's group commit: `sync()`.
    Sync,
    /// A `sync()` whose segment fsync fails (EIO, machine alive).
    FailingSync,
    /// A put that has to start a new segment while fsyncs fail.
    FailingPut(Vec<usize>),
    Read(usize, bool),
    /// The owner finishes some of the records it holds (`acked_reads`).
    Ack(u64),
    /// `close`, then open again.
    Restart,
    /// The process dies; the page cache survives.
    Kill,
    /// The machine loses power.
    PowerCut(u8, u64),
    /// The machine dies at the n-th filesystem change from now, in the
    /// middle of whatever the queue does then (revived by the next cut).
    Arm(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => prop::collection::vec(0usize..40, 1..6).prop_map(Op::Put),
        4 => Just(Op::Sync),
        1 => Just(Op::FailingSync),
        1 => prop::collection::vec(0usize..40, 1..6).prop_map(Op::FailingPut),
        5 => (1usize..8, any::<bool>()).prop_map(|(n, b)| Op::Read(n, b)),
        4 => any::<u64>().prop_map(Op::Ack),
        1 => Just(Op::Restart),
        1 => Just(Op::Kill),
        2 => (0u8..3, any::<u64>()).prop_map(|(k, s)| Op::PowerCut(k, s)),
        1 => (0u8..6).prop_map(Op::Arm),
    ]
}

struct World {
    fs: SimFs,
    q: Option<DiskQueue<SimFs>>,
    opts: Options,
    next_id: u64,
    payloads: BTreeMap<u64, Vec<u8>>,
    /// This life's puts not yet `Durable` or `Lost`.
    pending: Vec<(RangeInclusive<Seq>, Vec<u64>)>,
    /// Records put in an earlier life and not acknowledged: they may or may
    /// not still be there.
    earlier: BTreeSet<u64>,
    acked: BTreeSet<u64>,
    lost: BTreeSet<u64>,
    seen: BTreeSet<u64>,
    /// `acked_reads`: records read in this life and not yet finished.
    held: BTreeMap<ReadSeq, u64>,
    /// `acked_reads`: records the owner finished (acked).
    finished: BTreeSet<u64>,
}

impl World {
    fn new(model: NsModel, max_bytes: i64, acked_reads: bool) -> World {
        let fs = SimFs::new(&data_dir(), model);
        let opts = opts(max_bytes, acked_reads);
        let q = DiskQueue::open_with_fs(fs.clone(), NAME, &data_dir(), opts.clone()).expect("open");
        World {
            fs,
            q: Some(q),
            opts,
            next_id: 1,
            payloads: BTreeMap::new(),
            pending: Vec::new(),
            earlier: BTreeSet::new(),
            acked: BTreeSet::new(),
            lost: BTreeSet::new(),
            seen: BTreeSet::new(),
            held: BTreeMap::new(),
            finished: BTreeSet::new(),
        }
    }

    fn q(&self) -> &DiskQueue<SimFs> {
        self.q.as_ref().expect("queue open")
    }

    /// Decides what the owner would answer for each pending put.
    fn settle(&mut self) {
        let q = self.q.as_ref().expect("queue open");
        let mut still = Vec::new();
        for (range, ids) in self.pending.drain(..) {
            match q.durability(&range) {
                Durability::Durable => self.acked.extend(ids),
                // a dead machine could not discard them: after the cut they
                // may be there or not, as after any crash
                Durability::Lost if self.fs.is_dead() => self.earlier.extend(ids),
                Durability::Lost => self.lost.extend(ids),
                Durability::Pending => still.push((range, ids)),
            }
        }
        self.pending = still;
    }

    fn put(&mut self, sizes: &[usize]) -> Result<(), Error> {
        let ids: Vec<u64> = (0..sizes.len() as u64).map(|i| self.next_id + i).collect();
        self.next_id += sizes.len() as u64;
        let recs: Vec<Vec<u8>> = ids
            .iter()
            .zip(sizes)
            .map(|(&id, &x)| record(id, x))
            .collect();
        for (id, r) in ids.iter().zip(&recs) {
            self.payloads.insert(*id, r.clone());
        }
        let refs: Vec<&[u8]> = recs.iter().map(|r| &r[..]).collect();
        match self.q().put_batch(&refs) {
            Ok(range) => {
                self.pending.push((range, ids));
                Ok(())
            }
            Err(e) if self.fs.is_dead() => {
                // a crash in the middle: it may or may not be there after it
                self.earlier.extend(ids);
                Err(e)
            }
            Err(e) => {
                // the publisher is told it failed: none of it may show up
                self.lost.extend(ids);
                Err(e)
            }
        }
    }

    fn read(&mut self, n: usize, buffered: bool) -> Result<(), TestCaseError> {
        self.settle();
        let mut out = Vec::new();
        let first = self
            .q()
            .read_batch(n, &mut out, buffered)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        for (seq, rec) in (first..).zip(out) {
            let id = u64::from_be_bytes(rec[..8].try_into().expect("8-byte id"));
            prop_assert_eq!(
                self.payloads.get(&id).map(|p| &p[..]),
                Some(&rec[..]),
                "phantom or altered record {}",
                id
            );
            prop_assert!(
                !self.lost.contains(&id),
                "record {} was reported lost, yet delivered",
                id
            );
            prop_assert!(
                self.acked.contains(&id) || self.earlier.contains(&id),
                "record {} delivered before it was durable",
                id
            );
            self.seen.insert(id);
            if self.opts.acked_reads {
                self.held.insert(seq, id);
            }
        }
        Ok(())
    }

    /// Finishes a pseudo-random half of the held records (all if `all`).
    fn ack(&mut self, seed: u64, all: bool) {
        let mut rng = seed;
        let mut done = Vec::new();
        self.held.retain(|&seq, id| {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            if all || rng >> 63 == 1 {
                done.push(seq);
                self.finished.insert(*id);
                false
            } else {
                true
            }
        });
        self.q().ack(&done);
    }

    /// A new life: what was pending may or may not have survived.
    fn reopen(&mut self) {
        // what was held unfinished is forgotten with the process
        self.held.clear();
        for (_, ids) in self.pending.drain(..) {
            self.earlier.extend(ids);
        }
        if self.fs.is_dead() {
            // nothing runs on a dead machine until the power comes back
            self.fs.power_cut(Cut::KeepAll);
        }
        let q = DiskQueue::open_with_fs(self.fs.clone(), NAME, &data_dir(), self.opts.clone())
            .expect("reopen");
        self.q = Some(q);
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match op {
            Op::Put(sizes) => {
                if let Err(e) = self.put(sizes) {
                    prop_assert!(self.fs.is_dead(), "put failed on a live machine: {}", e);
                }
            }
            Op::Sync => {
                let res = self.q().sync();
                self.settle();
                match res {
                    Ok(_) => prop_assert!(
                        self.pending.is_empty(),
                        "a completed sync left puts pending"
                    ),
                    Err(e) => {
                        prop_assert!(self.fs.is_dead(), "sync failed on a live machine: {}", e)
                    }
                }
            }
            Op::FailingSync => {
                self.fs.fail_fsyncs(1);
                let res = self.q().sync();
                self.fs.fail_fsyncs(0);
                self.settle();
                if res.is_err() {
                    prop_assert!(self.pending.is_empty(), "a failed sync left puts undecided");
                }
            }
            Op::FailingPut(sizes) => {
                self.fs.fail_fsyncs(1);
                let _ = self.put(sizes);
                self.fs.fail_fsyncs(0);
                self.settle();
            }
            Op::Read(n, buffered) => {
                if !self.fs.is_dead() {
                    self.read(*n, *buffered)?;
                }
            }
            Op::Ack(seed) => {
                if !self.fs.is_dead() {
                    self.ack(*seed, false);
                }
            }
            Op::Arm(n) => self.fs.arm(u64::from(*n)),
            Op::Restart => {
                if self.fs.is_dead() {
                    self.q = None;
                    self.fs.power_cut(Cut::KeepAll);
                    self.reopen();
                    return Ok(());
                }
                let q = self.q.take().expect("queue open");
                // close syncs: what it covers is acknowledged as it would be
                let closed = q.close();
                if closed.is_ok() {
                    self.q = Some(q);
                    self.settle();
                    self.q = None;
                }
                self.reopen();
            }
            Op::Kill => {
                self.q = None;
                if self.fs.is_dead() {
                    // nothing can run on a dead machine but a power cut
                    self.fs.power_cut(Cut::KeepAll);
                }
                self.reopen();
            }
            Op::PowerCut(kind, seed) => {
                self.q = None;
                let cut = match kind {
                    0 => Cut::LoseAll,
                    1 => Cut::KeepAll,
                    _ => Cut::Random(*seed),
                };
                self.fs.power_cut(cut);
                self.reopen();
            }
        }
        Ok(())
    }

    /// Reads everything left and checks that nothing acknowledged is missing.
    fn finish(&mut self) -> Result<(), TestCaseError> {
        self.fs.disarm();
        if self.fs.is_dead() {
            self.q = None;
            self.fs.power_cut(Cut::KeepAll);
            self.reopen();
        }
        self.q()
            .sync()
            .map_err(|e| TestCaseError::fail(format!("final sync: {e}")))?;
        self.settle();
        for _ in 0..10_000 {
            let before = self.seen.len();
            self.read(64, false)?;
            self.ack(0, true);
            if self.seen.len() == before && !self.q().has_unread() {
                break;
            }
        }
        let done = if self.opts.acked_reads {
            &self.finished
        } else {
            &self.seen
        };
        let missing: Vec<&u64> = self.acked.difference(done).collect();
        prop_assert!(
            missing.is_empty(),
            "acknowledged records never delivered: {:?}",
            missing
        );
        Ok(())
    }
}

fn cases() -> u32 {
    std::env::var("SIMFS_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(512)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), max_shrink_iters: 2000, ..ProptestConfig::default() })]

    #[test]
    fn acknowledged_records_survive_power_cuts_and_lost_ones_are_never_delivered(
        ops in prop::collection::vec(op(), 1..80),
        strict in any::<bool>(),
        small_segments in any::<bool>(),
        acked_reads in any::<bool>(),
    ) {
        let model = if strict { NsModel::Strict } else { NsModel::Journaled };
        let mut w = World::new(model, if small_segments { 160 } else { 4096 }, acked_reads);
        for op in &ops {
            if std::env::var_os("SIMFS_DEBUG").is_some() {
                if let Some(q) = w.q.as_ref() {
                    let i = q.lock();
                    eprintln!("{:?}\n   written {} durable {} durable_end {:?} read ({},{}) write ({},{}) depth {} lost {:?} | acked {:?} lost {:?} pending {:?}",
                        op, i.written, i.durable, i.durable_end, i.read_file_num, i.read_pos, i.write_file_num, i.write_pos, i.depth, i.lost, w.acked, w.lost, w.pending);
                }
            }
            w.step(op)?;
        }
        w.finish()?;
    }
}

#[test]
fn reads_wait_for_the_sync_and_a_failed_sync_discards_what_it_did_not_cover() {
    let mut w = World::new(NsModel::Journaled, 4096, false);
    w.put(&[1, 2, 3]).unwrap();
    let mut out = Vec::new();
    w.q().read_batch(10, &mut out, false).unwrap();
    assert!(
        out.is_empty(),
        "nothing is readable before a sync covers it"
    );
    assert!(!w.q().has_unread());
    w.q().sync().unwrap();
    w.settle();
    assert_eq!(w.acked, BTreeSet::from([1, 2, 3]));
    w.put(&[4]).unwrap();
    w.fs.fail_fsyncs(1);
    assert!(w.q().sync().is_err());
    w.fs.fail_fsyncs(0);
    w.settle();
    assert_eq!(w.lost, BTreeSet::from([4]));
    assert_eq!(w.q().depth(), 3, "the discarded record is not counted");
    w.put(&[5]).unwrap();
    w.q().sync().unwrap();
    w.settle();
    w.read(10, false).unwrap();
    assert_eq!(w.seen, BTreeSet::from([1, 2, 3, 5]));
}

#[test]
fn a_record_read_and_not_acked_is_read_again_after_a_kill_and_a_power_cut() {
    let mut w = World::new(NsModel::Journaled, 160, true);
    w.put(&[1, 2, 3, 4, 5, 6]).unwrap();
    w.q().sync().unwrap();
    w.settle();
    w.read(6, false).unwrap();
    // finish 1, 2 and 4: the position persisted stops before 3
    let held: Vec<(ReadSeq, u64)> = w.held.iter().map(|(s, i)| (*s, *i)).collect();
    let done: Vec<ReadSeq> = held
        .iter()
        .filter(|(_, id)| [1, 2, 4].contains(id))
        .map(|(s, _)| *s)
        .collect();
    w.q().ack(&done);
    assert_eq!(w.q().unacked(), 4, "3 and everything read after it");
    w.q().sync().unwrap();
    w.fs.power_cut(Cut::LoseAll);
    w.q = None;
    w.seen.clear();
    w.reopen();
    w.read(10, false).unwrap();
    assert_eq!(
        w.seen,
        BTreeSet::from([3, 4, 5, 6]),
        "3, 5 and 6 unfinished; 4 again (at least once)"
    );
    w.ack(0, true);
    w.q().sync().unwrap();
    w.q = None;
    w.seen.clear();
    w.reopen();
    w.read(10, false).unwrap();
    assert!(
        w.seen.is_empty(),
        "all finished: nothing comes back, got {:?}",
        w.seen
    );
    let names = w.fs.file_names(&data_dir());
    assert!(
        names
            .iter()
            .filter(|n| n.ends_with(".dat") && !n.contains("meta"))
            .count()
            <= 1,
        "consumed segments deleted: {names:?}"
    );
}

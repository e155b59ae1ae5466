//! Power-cut tests: the queue on [`SimFs`], which forgets at a simulated
//! power cut whatever was not fsynced (see `simfs.rs` for the crash model),
//! checked against a model of what the queue promises (`simfs_model.rs`).
//!
//! # What is promised, and how the model knows it
//!
//! The queue makes state durable only by a *metadata commit*: it fsyncs the
//! segment being written, then replaces the metadata file and fsyncs the
//! directory. The test cannot see the queue's internal syncs (`sync_every`,
//! segment changes, recovery), but it can see their effect on the simulated
//! disk: `Stats::meta_renamed` numbers every replacement of the metadata
//! file and `Stats::meta_durable` says which of them a power cut can no
//! longer undo. A record's state in the model:
//!
//! * **Acked** — `put` returned `Ok`. A killed process (the kernel's page
//!   cache survives) must not lose it; a power cut may.
//! * **Durable** — a metadata commit happened after its `put` returned
//!   (every completed `sync()`/`close()` is one). Nothing may lose it until
//!   it is consumed.
//! * **Optional** — may or may not exist: an Acked record after a power
//!   cut, a record of a `put` that failed because the machine died, or a
//!   record caught in an `empty` that the crash interrupted.
//! * **Read** — delivered in this process's life. Once a metadata commit
//!   follows the read, it is consumed and must never be delivered again.
//!   If the process dies first it comes back to its earlier state: at-least-
//!   once, so a Durable record read but not committed as read *must* be
//!   delivered again. (If a newer metadata file reached the page cache but
//!   not the disk before a kill, whether the next life sees the read is
//!   open: Optional.)
//!
//! Reads check: every record delivered is one that was put, byte for byte,
//! not consumed, not already delivered in this life, and in FIFO order —
//! delivering record `x` skips every record before `x`, which is allowed
//! only for Optional ones. A read finding nothing likewise proves every
//! Durable and Acked record lost. Depth is never below the records that
//! must still come. It may count records a power cut took (the metadata
//! was written before the loss) until the reader catches up; outside such
//! a stretch it is never above all the records that may still come.
//!
//! With `defer_sync` (how nsqd opens its queues) the test also plays nsqd's
//! owner: it calls `sync()` when `sync_due()` says so and from a "timer"
//! when `needs_sync()` does, at random points, and checks that reads never
//! fsync, that a put fsyncs only when it starts a new segment, and that
//! `sync_due()` is raised after `sync_every` operations.
//!
//! `SIMFS_CASES=N` runs N cases per mode instead of 1024; `SIMFS_DEBUG=1`
//! prints the files, the metadata and the model before every step, for
//! replaying a shrunk failure.

use super::*;
use crate::simfs::{Cut, NsModel, Rng, SimFs, Stats};
use crate::simfs_model::{Dur, Model, Rec, St};
use proptest::prelude::*;

pub(crate) const NAME: &str = "pc:c";

pub(crate) fn data_dir() -> PathBuf {
    PathBuf::from("/sim/data")
}

pub(crate) fn opts(sync_every: i64, max_bytes: i64, defer_sync: bool) -> Options {
    Options {
        max_bytes_per_file: max_bytes,
        min_msg_size: 8,
        max_msg_size: 48,
        sync_every,
        sync_timeout: Duration::from_secs(2),
        defer_sync,
        durable_reads: false,
        acked_reads: false,
    }
}

/// Record `id` with `extra` filler bytes; 8..=48 bytes.
pub(crate) fn record(id: u64, extra: usize) -> Vec<u8> {
    let mut v = id.to_be_bytes().to_vec();
    v.resize(8 + extra, (id % 251) as u8);
    v
}

pub(crate) fn open(fs: &SimFs, o: &Options) -> Result<DiskQueue<SimFs>, Error> {
    DiskQueue::open_with_fs(fs.clone(), NAME, &data_dir(), o.clone())
}

fn meta_of(fs: &SimFs) -> Option<crate::meta::Meta> {
    let text = fs.contents(&data_dir().join(format!("{NAME}.diskqueue.meta.dat")))?;
    let (m, res) = crate::meta::parse(&text);
    res.ok().map(|()| m)
}

#[derive(Debug, Clone, Copy)]
enum CutKind {
    LoseAll,
    KeepAll,
    Random,
}

#[derive(Debug, Clone)]
enum Op {
    Put(usize),
    PutBatch(Vec<usize>),
    Read,
    /// `read_batch(n, buffered_only)`
    ReadBatch(usize, bool),
    /// An explicit `sync()`.
    Sync,
    /// nsqd's `kick_sync`: `sync()` if `sync_due()`.
    OwnerSync,
    /// nsqd's sync timer: `sync()` if `needs_sync()`.
    Timer,
    Empty,
    /// `close`, then open again.
    Restart,
    /// Dropped without `close`: the process dies, the page cache survives.
    Kill,
    /// The machine loses power; the queue is reopened afterwards.
    PowerCut(CutKind),
    /// The machine dies at the n-th filesystem change from now, in the
    /// middle of whatever the queue is doing then.
    Arm(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0usize..=40).prop_map(Op::Put),
        2 => prop::collection::vec(0usize..=40, 1..6).prop_map(Op::PutBatch),
        6 => Just(Op::Read),
        3 => (1usize..=6, any::<bool>()).prop_map(|(n, b)| Op::ReadBatch(n, b)),
        1 => Just(Op::Sync),
        3 => Just(Op::OwnerSync),
        1 => Just(Op::Timer),
        1 => Just(Op::Empty),
        1 => Just(Op::Restart),
        1 => Just(Op::Kill),
        3 => prop_oneof![
            1 => Just(CutKind::LoseAll),
            1 => Just(CutKind::KeepAll),
            3 => Just(CutKind::Random),
        ]
        .prop_map(Op::PowerCut),
        2 => (0u8..12).prop_map(Op::Arm),
    ]
}

struct Runner {
    fs: SimFs,
    o: Options,
    dq: Option<DiskQueue<SimFs>>,
    model: Model,
    rng: Rng,
    /// Records put plus records read since the last metadata write.
    ops_since_meta: i64,
    /// Something happened after which `.bad`/`.tmp` files may remain.
    lossy: bool,
}

impl Runner {
    fn dq(&self) -> &DiskQueue<SimFs> {
        self.dq.as_ref().expect("queue open")
    }

    /// Opens the queue, power-cycling as often as the machine dies during
    /// recovery.
    fn reopen(&mut self) -> Result<(), TestCaseError> {
        loop {
            let res = open(&self.fs, &self.o);
            if self.fs.is_dead() {
                drop(res);
                self.cut(CutKind::Random);
                continue;
            }
            self.dq = Some(res.map_err(|e| TestCaseError::fail(format!("open: {e}")))?);
            self.ops_since_meta = 0;
            self.model.observe(self.fs.stats());
            return Ok(());
        }
    }

    fn cut(&mut self, kind: CutKind) {
        self.dq = None;
        let cut = match kind {
            CutKind::LoseAll => Cut::LoseAll,
            CutKind::KeepAll => Cut::KeepAll,
            CutKind::Random => Cut::Random(self.rng.next_u64()),
        };
        let report = self.fs.power_cut(cut);
        if std::env::var_os("SIMFS_DEBUG").is_some() {
            eprintln!("  power cut {cut:?}: {report:?}");
        }
        self.model.power_cut(self.fs.stats());
        self.lossy = true;
    }

    fn check_depth(&self) -> Result<(), TestCaseError> {
        let depth = self.dq().depth();
        prop_assert!(depth >= 0);
        let lo = self.model.must_come() as i64;
        prop_assert!(
            depth >= lo,
            "depth {} below the {} records that must come",
            depth,
            lo
        );
        if self.model.depth_exact {
            let hi = self.model.may_come() as i64;
            prop_assert!(
                depth <= hi,
                "depth {} above the {} records that may come",
                depth,
                hi
            );
        }
        Ok(())
    }

    fn put(&mut self, extras: &[usize]) -> Result<(), TestCaseError> {
        let first = self.model.next_id;
        self.model.next_id += extras.len() as u64;
        let recs: Vec<Vec<u8>> = extras
            .iter()
            .enumerate()
            .map(|(i, &x)| record(first + i as u64, x))
            .collect();
        let refs: Vec<&[u8]> = recs.iter().map(|r| &r[..]).collect();
        let res = if refs.len() == 1 {
            self.dq().put(refs[0]).map(drop)
        } else {
            self.dq().put_batch(&refs).map(drop)
        };
        let dur = match res {
            Ok(()) => Dur::Acked,
            Err(_) if self.fs.is_dead() => Dur::Optional,
            Err(e) => return Err(TestCaseError::fail(format!("put failed: {e}"))),
        };
        let put_stamp = self.fs.stats().meta_renamed;
        for (i, &extra) in extras.iter().enumerate() {
            let rec = Rec {
                extra,
                st: St::Unread(dur),
                put_stamp,
            };
            self.model.recs.insert(first + i as u64, rec);
        }
        if dur == Dur::Acked {
            self.ops_since_meta += extras.len() as i64;
        }
        Ok(())
    }

    fn read(&mut self, n: usize, buffered_only: bool, single: bool) -> Result<(), TestCaseError> {
        let stamp = self.fs.stats().meta_renamed;
        let mut got = Vec::new();
        if single {
            got.extend(
                self.dq()
                    .read()
                    .map_err(|e| TestCaseError::fail(e.to_string()))?,
            );
        } else {
            self.dq()
                .read_batch(n, &mut got, buffered_only)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
        let n = if single { 1 } else { n };
        prop_assert!(got.len() <= n);
        for r in &got {
            self.model.check_read(r, stamp)?;
        }
        self.ops_since_meta += got.len() as i64;
        // A full read stops early only when nothing is left; if the machine
        // died under it, the reader may have given up on a dead disk.
        if got.len() < n && !buffered_only && !self.fs.is_dead() {
            self.model.check_dry()?;
        }
        Ok(())
    }

    fn sync(&mut self) -> Result<(), TestCaseError> {
        let before = self.fs.stats();
        match self.dq().sync() {
            // The directory fsync is best effort, so `Ok` from a machine that
            // died at it proves nothing; the crash handling takes over.
            Ok(_) if self.fs.is_dead() => {}
            Ok(_) => {
                let after = self.fs.stats();
                prop_assert!(
                    after.meta_durable > before.meta_renamed,
                    "sync() returned Ok without committing metadata: {:?} -> {:?}",
                    before,
                    after
                );
                prop_assert!(!self.dq().needs_sync() && !self.dq().sync_due());
            }
            Err(_) if self.fs.is_dead() => {}
            Err(e) => return Err(TestCaseError::fail(format!("sync failed: {e}"))),
        }
        Ok(())
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        if std::env::var_os("SIMFS_DEBUG").is_some() {
            // replaying a failure: the disk as the next operation finds it
            eprintln!(
                "{:?} meta {:?} depth {}",
                self.fs.file_names(&data_dir()),
                meta_of(&self.fs),
                self.dq().depth()
            );
            eprintln!("  model {:?}\n{op:?}", self.model.recs);
        }
        let before = self.fs.stats();
        let mut reopened = false;
        match op {
            Op::Put(x) => self.put(&[*x])?,
            Op::PutBatch(xs) => self.put(xs)?,
            Op::Read => self.read(1, false, true)?,
            Op::ReadBatch(n, b) => self.read(*n, *b, false)?,
            Op::Sync => self.sync()?,
            Op::OwnerSync => {
                if self.dq().sync_due() {
                    self.sync()?;
                }
            }
            Op::Timer => {
                if self.dq().needs_sync() {
                    self.sync()?;
                } else {
                    prop_assert!(!self.dq().sync_due(), "sync due but no sync needed");
                }
            }
            Op::Empty => {
                let res = self.dq().empty();
                if self.fs.is_dead() {
                    self.model.empty_interrupted();
                } else {
                    res.map_err(|e| TestCaseError::fail(format!("empty failed: {e}")))?;
                    let after = self.fs.stats();
                    prop_assert!(
                        after.meta_durable > before.meta_renamed,
                        "empty not committed"
                    );
                    self.model.recs.clear();
                    self.model.depth_exact = true;
                    prop_assert_eq!(self.dq().depth(), 0);
                }
            }
            Op::Restart => {
                let res = self.dq().close();
                if !self.fs.is_dead() {
                    res.map_err(|e| TestCaseError::fail(format!("close failed: {e}")))?;
                    self.dq = None;
                    self.model.kill(self.fs.stats());
                    self.reopen()?;
                    reopened = true;
                }
            }
            Op::Kill => {
                self.dq = None;
                self.model.kill(self.fs.stats());
                self.reopen()?;
                reopened = true;
            }
            Op::PowerCut(kind) => {
                self.cut(*kind);
                self.reopen()?;
                reopened = true;
            }
            Op::Arm(n) => self.fs.arm(u64::from(*n)),
        }

        if self.fs.is_dead() {
            self.cut(CutKind::Random);
            return self.reopen();
        }
        let after = self.fs.stats();
        self.model.observe(after);
        if self.model.depth_exact && after.meta_renamed != before.meta_renamed {
            // a read op syncs only after its reads, a put op never reads
            self.model.meta_depth_exact = true;
        }
        if !reopened {
            self.check_sync_policy(op, before, after)?;
        }
        self.check_depth()
    }

    /// What `defer_sync` and `sync_every` promise about who syncs when.
    fn check_sync_policy(
        &mut self,
        op: &Op,
        before: Stats,
        after: Stats,
    ) -> Result<(), TestCaseError> {
        let synced = after.meta_renamed != before.meta_renamed;
        if synced {
            self.ops_since_meta = 0;
        }
        let dq = self.dq.as_ref().expect("queue open");
        prop_assert!(
            !dq.sync_due() || dq.needs_sync(),
            "sync due but no sync needed"
        );
        let is_put = matches!(op, Op::Put(_) | Op::PutBatch(_));
        let is_read = matches!(op, Op::Read | Op::ReadBatch(..));
        if !self.o.defer_sync {
            if is_put || is_read {
                prop_assert!(!dq.sync_due(), "a put/read left its own sync undone");
            }
            return Ok(());
        }
        if is_read {
            prop_assert_eq!(
                before,
                after,
                "a deferred read touched the disk's durable state"
            );
        }
        if is_put && after.file_fsyncs != before.file_fsyncs {
            // Only a rollover syncs inline, and it persists the new segment
            // number with write position 0.
            let m = meta_of(&self.fs);
            prop_assert!(
                synced && matches!(m, Some(m) if m.write_pos == 0),
                "a deferred put synced outside a rollover (meta {:?})",
                m
            );
        }
        if self.ops_since_meta >= self.o.sync_every {
            prop_assert!(
                dq.sync_due(),
                "{} operations since the last sync and sync_due() is false",
                self.ops_since_meta
            );
        }
        Ok(())
    }

    /// Reads everything left, then checks a clean restart and the files.
    fn finish(&mut self) -> Result<(), TestCaseError> {
        self.fs.disarm();
        for _ in 0..10_000 {
            let stamp = self.fs.stats().meta_renamed;
            match self
                .dq()
                .read()
                .map_err(|e| TestCaseError::fail(e.to_string()))?
            {
                Some(r) => self.model.check_read(&r, stamp)?,
                None => {
                    self.model.check_dry()?;
                    break;
                }
            }
        }
        prop_assert_eq!(self.dq().depth(), 0);
        self.dq()
            .close()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        self.dq = None;
        let q = open(&self.fs, &self.o).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(q.depth(), 0);
        prop_assert_eq!(q.read().unwrap(), None);
        let m = meta_of(&self.fs).expect("metadata after close");
        drop(q);

        // Consumed segments are gone (none leaked by a crash); `.bad` and
        // `.tmp` files only after a power cut.
        let prefix = format!("{NAME}.diskqueue.");
        for name in self.fs.file_names(&data_dir()) {
            let Some(rest) = name.strip_prefix(&prefix) else {
                return Err(TestCaseError::fail(format!("stranger file {name}")));
            };
            if rest == "meta.dat" {
                continue;
            }
            if rest.ends_with(".bad") || rest.ends_with(".tmp") {
                prop_assert!(self.lossy, "{} without a power cut", name);
                continue;
            }
            let num: i64 = rest
                .strip_suffix(".dat")
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| TestCaseError::fail(format!("unexpected file {name}")))?;
            prop_assert_eq!(
                num,
                m.write_file_num,
                "segment {} left behind (meta {:?})",
                name,
                m
            );
        }
        Ok(())
    }
}

fn run(
    ops: &[Op],
    sync_every: i64,
    max_bytes: i64,
    defer_sync: bool,
    model: NsModel,
    seed: u64,
) -> Result<(), TestCaseError> {
    let fs = SimFs::new(&data_dir(), model);
    let o = opts(sync_every, max_bytes, defer_sync);
    let mut r = Runner {
        fs,
        o,
        dq: None,
        model: Model {
            depth_exact: true,
            meta_depth_exact: true,
            ..Model::default()
        },
        rng: Rng(seed),
        ops_since_meta: 0,
        lossy: false,
    };
    r.reopen()?;
    for op in ops {
        r.step(op)?;
    }
    r.finish()
}

/// 1024 cases per mode keep the suite fast; `SIMFS_CASES=100000` for a
/// long hunt.
fn cases() -> u32 {
    std::env::var("SIMFS_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// nsqd's mode: puts and reads never sync; the owner does.
    #[test]
    fn power_cuts_with_deferred_sync_match_model(
        ops in prop::collection::vec(op(), 1..100),
        sync_every in prop_oneof![Just(1i64), Just(4), Just(10_000)],
        max_bytes in prop_oneof![Just(40i64), Just(120), Just(1_000_000)],
        strict in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let model = if strict { NsModel::Strict } else { NsModel::Journaled };
        run(&ops, sync_every, max_bytes, true, model, seed)?;
    }

    /// Inline syncs (`defer_sync: false`, the crate's default).
    #[test]
    fn power_cuts_with_inline_sync_match_model(
        ops in prop::collection::vec(op(), 1..100),
        sync_every in prop_oneof![Just(1i64), Just(4), Just(10_000)],
        max_bytes in prop_oneof![Just(40i64), Just(120), Just(1_000_000)],
        strict in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let model = if strict { NsModel::Strict } else { NsModel::Journaled };
        run(&ops, sync_every, max_bytes, false, model, seed)?;
    }
}

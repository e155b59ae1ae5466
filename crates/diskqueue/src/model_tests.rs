//! Model test: random put/read/skip/empty/sync/restart/crash sequences against a
//! `VecDeque`.
//!
//! A crash is a drop without `close`. Everything `put` returned `Ok` for is
//! still there afterwards, but the metadata may predate some reads, so those
//! records can be delivered again. The model cannot know when the queue last
//! synced on its own (every `sync_every` ops, segment changes), only that it
//! did not happen before the last explicit sync/close/empty. So after a crash
//! the records read since then go back to the front of the model as a prefix
//! of which any leading part may be missing; the first read after the crash
//! tells which part. Depth must then lie between the two possible lengths,
//! and be exact otherwise.
//!
//! The same model also runs with `defer_sync`, as nsqd opens its queues:
//! the test then plays nsqd's owner, calling `sync()` when `sync_due()`
//! asks for it and from a "timer" when `needs_sync()` does, at random
//! points, and checks that a read never writes the metadata itself.

use super::*;
use proptest::prelude::*;
use std::collections::VecDeque;
use tempfile::TempDir;

#[derive(Debug, Clone)]
enum Op {
    Put(usize),
    Read,
    /// `read_batch(n, buffered_only)`
    ReadBatch(usize, bool),
    /// `skip_while` the records before the `k`th one the model expects
    /// next (by id: the first 8 bytes of each record).
    SkipBelow(usize),
    /// `take_while` the same: read whole, checked like reads.
    TakeBelow(usize),
    Empty,
    Sync,
    Restart,
    Crash,
    /// nsqd's `kick_sync` (after each put/read): `sync()` if `sync_due()`.
    OwnerSync,
    /// nsqd's sync timer: `sync()` if `needs_sync()`.
    Timer,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0usize..=40).prop_map(Op::Put),
        7 => Just(Op::Read),
        4 => (1usize..=6, any::<bool>()).prop_map(|(n, b)| Op::ReadBatch(n, b)),
        2 => (0usize..=8).prop_map(Op::SkipBelow),
        2 => (0usize..=8).prop_map(Op::TakeBelow),
        1 => Just(Op::Empty),
        1 => Just(Op::Sync),
        1 => Just(Op::Restart),
        2 => Just(Op::Crash),
    ]
}

/// `op()` plus the owner's syncs of `defer_sync` mode.
fn op_deferred() -> impl Strategy<Value = Op> {
    prop_oneof![
        20 => op(),
        4 => Just(Op::OwnerSync),
        1 => Just(Op::Timer),
    ]
}

/// Record `id` with `extra` filler bytes; 8..=48 bytes.
fn record(id: u64, extra: usize) -> Vec<u8> {
    let mut v = id.to_be_bytes().to_vec();
    v.resize(8 + extra, (id % 251) as u8);
    v
}

#[derive(Default)]
struct Model {
    /// (id, extra) of records expected, oldest first.
    queue: VecDeque<(u64, usize)>,
    /// How many leading entries of `queue` may legitimately be absent.
    maybe_gone: usize,
    /// Records taken since the last sync the model knows about.
    read_since_sync: Vec<(u64, usize)>,
    next_id: u64,
}

fn options(sync_every: i64, max_bytes: i64, defer_sync: bool) -> Options {
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

fn check_read(model: &mut Model, got: Option<Bytes>) -> Result<(), TestCaseError> {
    match got {
        None => {
            prop_assert_eq!(model.queue.len(), model.maybe_gone, "queue ran dry early");
            model.queue.clear();
            model.maybe_gone = 0;
        }
        Some(b) => {
            prop_assert!(b.len() >= 8);
            let id = u64::from_be_bytes(b[..8].try_into().unwrap());
            let idx = model.queue.iter().position(|&(i, _)| i == id);
            prop_assert!(
                matches!(idx, Some(i) if i <= model.maybe_gone),
                "read id {} but model front is {:?} (maybe_gone {})",
                id,
                model
                    .queue
                    .iter()
                    .take(model.maybe_gone + 1)
                    .collect::<Vec<_>>(),
                model.maybe_gone
            );
            let idx = idx.unwrap();
            let (_, extra) = model.queue[idx];
            prop_assert_eq!(&b[..], &record(id, extra)[..]);
            model.queue.drain(..=idx);
            model.maybe_gone = 0;
            model.read_since_sync.push((id, extra));
        }
    }
    Ok(())
}

fn check_depth(model: &Model, dq: &DiskQueue) -> Result<(), TestCaseError> {
    let depth = dq.depth();
    let hi = model.queue.len() as i64;
    let lo = hi - model.maybe_gone as i64;
    prop_assert!(depth >= 0);
    prop_assert!(
        lo <= depth && depth <= hi,
        "depth {} outside {}..={}",
        depth,
        lo,
        hi
    );
    Ok(())
}

/// What the owner of a `defer_sync` queue relies on: `sync_due` implies
/// `needs_sync`, and a sync clears both.
fn check_sync_flags(dq: &DiskQueue) -> Result<(), TestCaseError> {
    prop_assert!(
        !dq.sync_due() || dq.needs_sync(),
        "sync due but no sync needed"
    );
    Ok(())
}

fn owner_sync(dq: &DiskQueue, model: &mut Model) -> Result<(), TestCaseError> {
    dq.sync().unwrap();
    model.read_since_sync.clear();
    prop_assert!(
        !dq.sync_due() && !dq.needs_sync(),
        "flags still set after sync"
    );
    Ok(())
}

fn run(
    ops: Vec<Op>,
    sync_every: i64,
    max_bytes: i64,
    defer_sync: bool,
) -> Result<(), TestCaseError> {
    let dir = TempDir::new().unwrap();
    let o = options(sync_every, max_bytes, defer_sync);
    let meta_file = dir.path().join("m:c.diskqueue.meta.dat");
    let meta_text = || fs::read(&meta_file).ok();
    let open = || DiskQueue::open("m:c", dir.path(), o.clone()).unwrap();
    let mut dq = open();
    let mut model = Model::default();

    for op in ops {
        match op {
            Op::Put(extra) => {
                let id = model.next_id;
                model.next_id += 1;
                dq.put(&record(id, extra)).unwrap();
                model.queue.push_back((id, extra));
            }
            Op::Read => {
                let before = meta_text();
                let got = dq.read().unwrap();
                if defer_sync {
                    prop_assert!(meta_text() == before, "a deferred read wrote the metadata");
                }
                check_read(&mut model, got)?;
            }
            Op::ReadBatch(n, buffered_only) => {
                let before = meta_text();
                let mut got = Vec::new();
                dq.read_batch(n, &mut got, buffered_only).unwrap();
                if defer_sync {
                    prop_assert!(meta_text() == before, "a deferred read wrote the metadata");
                }
                prop_assert!(got.len() <= n);
                let short = got.len() < n;
                for r in got {
                    check_read(&mut model, Some(r))?;
                }
                if short && !buffered_only {
                    // a full read stops early only when nothing is left
                    check_read(&mut model, None)?;
                }
            }
            Op::SkipBelow(k) => {
                let below = model
                    .queue
                    .get(model.maybe_gone + k)
                    .map_or(model.next_id, |&(id, _)| id);
                let n = dq
                    .skip_while(usize::MAX, 8, |h| {
                        u64::from_be_bytes(h[..8].try_into().unwrap()) < below
                    })
                    .unwrap();
                let skipped: Vec<(u64, usize)> = model
                    .queue
                    .iter()
                    .copied()
                    .filter(|&(id, _)| id < below)
                    .collect();
                // the uncertain prefix after a crash may or may not be there
                prop_assert!(
                    n <= skipped.len() && n + model.maybe_gone >= skipped.len(),
                    "skipped {} of {} (maybe gone {})",
                    n,
                    skipped.len(),
                    model.maybe_gone
                );
                model.queue.retain(|&(id, _)| id >= below);
                model.maybe_gone = 0;
                // like reads: a crash before the next sync may bring them back
                model.read_since_sync.extend(skipped);
            }
            Op::TakeBelow(k) => {
                let below = model
                    .queue
                    .get(model.maybe_gone + k)
                    .map_or(model.next_id, |&(id, _)| id);
                let mut got = Vec::new();
                dq.take_while(usize::MAX, &mut got, |d| {
                    u64::from_be_bytes(d[..8].try_into().unwrap()) < below
                })
                .unwrap();
                for r in got {
                    check_read(&mut model, Some(r))?;
                }
                // it stopped at the first one not below, or ran dry
                if let Some(&(id, _)) = model.queue.get(model.maybe_gone) {
                    prop_assert!(id >= below, "take_while stopped early at {}", id);
                }
            }
            Op::Empty => {
                dq.empty().unwrap();
                model.queue.clear();
                model.maybe_gone = 0;
                model.read_since_sync.clear();
            }
            Op::Sync => {
                dq.sync().unwrap();
                model.read_since_sync.clear();
            }
            Op::Restart => {
                dq.close().unwrap();
                dq = open();
                model.read_since_sync.clear();
            }
            Op::Crash => {
                drop(dq);
                dq = open();
                // Any read resolves the uncertain prefix, so both cannot be set.
                prop_assert!(model.read_since_sync.is_empty() || model.maybe_gone == 0);
                for item in model.read_since_sync.drain(..).rev() {
                    model.queue.push_front(item);
                    model.maybe_gone += 1;
                }
            }
            Op::OwnerSync => {
                if dq.sync_due() {
                    owner_sync(&dq, &mut model)?;
                }
            }
            Op::Timer => {
                if dq.needs_sync() {
                    owner_sync(&dq, &mut model)?;
                }
            }
        }
        check_sync_flags(&dq)?;
        check_depth(&model, &dq)?;
    }

    loop {
        let got = dq.read().unwrap();
        let done = got.is_none();
        check_read(&mut model, got)?;
        check_depth(&model, &dq)?;
        if done {
            break;
        }
    }
    prop_assert_eq!(dq.depth(), 0);
    dq.close().unwrap();
    let dq = open();
    prop_assert_eq!(dq.depth(), 0);
    prop_assert_eq!(dq.read().unwrap(), None);

    for entry in fs::read_dir(dir.path()).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        prop_assert!(
            !name.ends_with(".bad") && !name.ends_with(".tmp"),
            "unexpected file {}",
            name
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn queue_matches_fifo_model(
        ops in prop::collection::vec(op(), 1..80),
        sync_every in prop_oneof![Just(1i64), Just(3), Just(10_000)],
        max_bytes in prop_oneof![Just(40i64), Just(120), Just(1_000_000)],
    ) {
        run(ops, sync_every, max_bytes, false)?;
    }

    /// nsqd's mode: puts and reads leave every sync but rollover's to the
    /// owner, which the test plays.
    #[test]
    fn deferred_sync_queue_matches_fifo_model(
        ops in prop::collection::vec(op_deferred(), 1..80),
        sync_every in prop_oneof![Just(1i64), Just(3), Just(10_000)],
        max_bytes in prop_oneof![Just(40i64), Just(120), Just(1_000_000)],
    ) {
        run(ops, sync_every, max_bytes, true)?;
    }
}

//! `nsq_replication::log::SegmentLog`: durable appends, each waited for
//! until the fsync that covers it returns (what a replicated publish waits
//! for on each replica before it counts towards the majority). Entries
//! carry a 226 B payload (a 200 B body plus the 26 B message header).
//!
//! - `append_200_fsynced`: one append of 200 entries, then its fsync.
//! - `append_1x64_group_commit`: 64 single-entry appends made back to back,
//!   then all waited for: group commit shares fsyncs among them. The
//!   fsyncs per append of the whole run are printed at the end (counted
//!   through the log's `Syncer` seam).

#![forbid(unsafe_code)]

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use nsq_benches::*;
use nsq_replication::log::sync::{Fsync, Syncer};
use nsq_replication::log::{LogOptions, SegmentLog};
use nsq_replication::{Entry, Payload};
use openraft::{CommittedLeaderId, EntryPayload, LogId};

const RECORD_LEN: usize = BODY_LEN + 26;

/// Real fsyncs, counted.
#[derive(Default)]
struct Counted(AtomicU64);

impl Syncer for Counted {
    fn sync_file(&self, f: &File) -> io::Result<()> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Fsync.sync_file(f)
    }

    fn sync_dir(&self, d: &Path) -> io::Result<()> {
        Fsync.sync_dir(d)
    }
}

fn entry(index: u64, payload: &Bytes) -> Entry {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(Payload(payload.clone())),
    }
}

fn bench_append(c: &mut Criterion) {
    let payload = body(RECORD_LEN);
    let mut g = c.benchmark_group("raftlog");
    g.sample_size(20);

    let dir = tempfile::tempdir().unwrap();
    let opts = LogOptions::default();
    let mut log = SegmentLog::open(dir.path(), opts).unwrap();
    g.throughput(Throughput::Elements(200));
    g.bench_function("append_200_fsynced", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let next = log.next_index();
                let batch: Vec<Entry> = (next..next + 200).map(|i| entry(i, &payload)).collect();
                let (tx, rx) = mpsc::channel();
                let t = Instant::now();
                log.append(&batch, Box::new(move |r| tx.send(r).unwrap()))
                    .unwrap();
                rx.recv().unwrap().unwrap();
                total += t.elapsed();
            }
            total
        })
    });
    drop(log);

    let dir = tempfile::tempdir().unwrap();
    let counted = Arc::new(Counted::default());
    let opts = LogOptions {
        syncer: counted.clone(),
        ..LogOptions::default()
    };
    let mut log = SegmentLog::open(dir.path(), opts).unwrap();
    let appends = AtomicU64::new(0);
    g.throughput(Throughput::Elements(64));
    g.bench_function("append_1x64_group_commit", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let (tx, rx) = mpsc::channel();
                let t = Instant::now();
                for _ in 0..64 {
                    let tx = tx.clone();
                    let e = entry(log.next_index(), &payload);
                    log.append(&[e], Box::new(move |r| tx.send(r).unwrap()))
                        .unwrap();
                }
                for _ in 0..64 {
                    rx.recv().unwrap().unwrap();
                }
                total += t.elapsed();
                appends.fetch_add(64, Ordering::Relaxed);
            }
            total
        })
    });
    g.finish();
    let n = appends.load(Ordering::Relaxed);
    let syncs = counted.0.load(Ordering::Relaxed);
    eprintln!(
        "append_1x64_group_commit: {n} appends, {syncs} fsyncs ({:.3} fsyncs per append)",
        syncs as f64 / n.max(1) as f64
    );
}

criterion_group!(benches, bench_append);
criterion_main!(benches);

//! `nsq_diskqueue::DiskQueue`: 200 records as one `put_batch` vs 200 `put`s,
//! and `read`. Records are 226 B (a 200 B body plus the 26 B message
//! header). `sync_every` is set out of reach so fsync (which measures the
//! disk, not the code) is not in the numbers; the queue is emptied outside
//! the timed region whenever it grows past ~64 MiB.

#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use nsq_benches::*;
use nsq_diskqueue::{DiskQueue, Options};

const BATCH: usize = 200;
const RECORD_LEN: usize = BODY_LEN + 26;
const MAX_DEPTH: i64 = 300_000;

fn open(dir: &tempfile::TempDir) -> DiskQueue {
    let opts = Options {
        sync_every: i64::MAX,
        ..Options::default()
    };
    DiskQueue::open("bench", dir.path(), opts).unwrap()
}

fn bench_put(c: &mut Criterion) {
    let rec = body(RECORD_LEN);
    let records: Vec<&[u8]> = vec![&rec[..]; BATCH];
    let mut g = c.benchmark_group("diskqueue");
    g.throughput(Throughput::Elements(BATCH as u64));

    let dir = tempfile::tempdir().unwrap();
    let q = open(&dir);
    g.bench_function("put_batch_200x226B", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let t = Instant::now();
                q.put_batch(black_box(&records)).unwrap();
                total += t.elapsed();
                if q.depth() > MAX_DEPTH {
                    q.empty().unwrap();
                }
            }
            total
        })
    });
    q.close().unwrap();

    let dir = tempfile::tempdir().unwrap();
    let q = open(&dir);
    g.bench_function("put_x200_226B", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let t = Instant::now();
                for r in &records {
                    q.put(black_box(r)).unwrap();
                }
                total += t.elapsed();
                if q.depth() > MAX_DEPTH {
                    q.empty().unwrap();
                }
            }
            total
        })
    });
    q.close().unwrap();

    let dir = tempfile::tempdir().unwrap();
    let q = open(&dir);
    g.bench_function("read_x200_226B", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                q.put_batch(&records).unwrap();
                let t = Instant::now();
                for _ in 0..BATCH {
                    black_box(q.read().unwrap().unwrap());
                }
                total += t.elapsed();
            }
            total
        })
    });
    q.close().unwrap();
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(WARM_UP).measurement_time(MEASURE);
    targets = bench_put
}
criterion_main!(benches);

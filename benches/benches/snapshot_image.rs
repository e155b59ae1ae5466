//! A replicated group's snapshot image (`nsqd::core::replicated::progress`): what a
//! snapshot costs to make and to read back when a group's channels have a
//! backlog. One topic with two channels, batches of 200 (MPUBs), one
//! channel half done (every other batch finished), the other untouched.
//!
//! - `image/{n}`: `Progress::image` with n unfinished messages (what the
//!   applier does, under the progress lock, before each snapshot).
//! - `from_image/{n}`: `Progress::from_image` (a member that starts from
//!   the snapshot, or is sent it).
//!
//! The image's size per message is printed at the end.

#![forbid(unsafe_code)]

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use nsq_protocol::MessageId;
use nsqd::core::replicated::entry::{Cursor, Entry, Published};
use nsqd::core::replicated::progress::Progress;

const BATCH: usize = 200;

fn id(n: u64) -> MessageId {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&n.to_be_bytes());
    MessageId(b)
}

/// A group with `n` messages published to topic `t`, channels `a` and `b`;
/// `a` finished every other batch.
fn backlog(n: usize) -> Progress {
    let mut p = Progress::new();
    let mut index = 0;
    let mut next = || {
        index += 1;
        index
    };
    p.apply(
        next(),
        &Entry::TopicCreate {
            topic: "t".into(),
            replicas: 3,
        },
    );
    for c in ["a", "b"] {
        p.apply(
            next(),
            &Entry::ChannelCreate {
                topic: "t".into(),
                channel: c.into(),
            },
        );
    }
    let body = Bytes::from_static(b"x");
    for b in 0..n / BATCH {
        let ids: Vec<MessageId> = (0..BATCH).map(|k| id((b * BATCH + k) as u64)).collect();
        p.apply(
            next(),
            &Entry::Publish {
                topic: "t".into(),
                messages: ids
                    .iter()
                    .map(|id| Published {
                        id: *id,
                        timestamp: 0,
                        defer_ms: 0,
                        body: body.clone(),
                    })
                    .collect(),
            },
        );
        if b % 2 == 1 {
            p.apply(
                next(),
                &Entry::Finished {
                    topic: "t".into(),
                    channel: "a".into(),
                    cursor: Cursor {
                        index: 0,
                        offset: 0,
                    },
                    ids,
                },
            );
        }
    }
    p
}

fn bench_image(c: &mut Criterion) {
    let mut g = c.benchmark_group("snapshot_image");
    g.sample_size(10);
    let mut sizes = Vec::new();
    for n in [100_000usize, 1_000_000] {
        let p = backlog(n);
        let image = p.image().expect("image");
        sizes.push((n, image.len()));
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::new("image", n), &p, |b, p| {
            b.iter(|| p.image().expect("image"))
        });
        g.bench_with_input(BenchmarkId::new("from_image", n), &image, |b, image| {
            b.iter(|| Progress::from_image(image.clone()).expect("progress"))
        });
    }
    g.finish();
    for (n, bytes) in sizes {
        println!(
            "image of {n} unfinished messages: {bytes} bytes ({:.1} per message)",
            bytes as f64 / n as f64
        );
    }
}

criterion_group!(benches, bench_image);
criterion_main!(benches);

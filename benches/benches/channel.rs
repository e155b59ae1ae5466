//! `nsqd::core::Channel` bookkeeping (memory only) with one subscribed
//! client: each call's frames go to the client's outbox (as the server's
//! channel does), which is drained as its writer would (one swap per call).

#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use nsq_benches::*;
use nsq_protocol::MessageId;
use nsqd::bench::Client;
use nsqd::bench::{Control, Outbox};
use nsqd::core::{Channel, ChannelConfig, ClientId};
use rand::seq::SliceRandom;
use rand::SeedableRng;

const MSG_TIMEOUT: Duration = Duration::from_secs(60);

struct Fixture {
    ch: Channel,
    cid: ClientId,
    client: Client,
    outbox: Arc<Outbox>,
    frames: BytesMut,
    controls: Vec<(usize, Control)>,
    now: Instant,
}

impl Fixture {
    /// A channel with one client at RDY `rdy`.
    fn new(mem_cap: usize, rdy: i64) -> Fixture {
        let now = Instant::now();
        let cfg = ChannelConfig {
            mem_queue_size: mem_cap,
            durable: false,
            backend_unread: false,
            backend_depth: 0,
            max_attempts: 0,
            hand_off: true,
            e2e: None,
            seed: 1,
            spill: None,
            restored_runs: Vec::new(),
        };
        let mut ch = Channel::new(cfg, now);
        let addr: SocketAddr = "127.0.0.1:4150".parse().unwrap();
        let (client, outbox) = Client::new(addr, 0);
        let cid = client.id;
        ch.add_client(cid, MSG_TIMEOUT, 0, 0).unwrap();
        ch.set_rdy(cid, rdy, now);
        let mut f = Fixture {
            ch,
            cid,
            client,
            outbox,
            frames: BytesMut::new(),
            controls: Vec::new(),
            now,
        };
        f.drain();
        f
    }

    /// The server's step after each call: frames to the outbox.
    fn flush(&mut self) {
        let client = &self.client;
        self.ch.flush_deliveries(|_, frames| {
            client.send_frames(frames);
        });
    }

    /// Bytes of frames the writer would write.
    fn drain(&mut self) -> usize {
        self.flush();
        self.outbox.take(&mut self.frames, &mut self.controls);
        let n = self.frames.len();
        self.frames.clear();
        n
    }

    /// Puts ids `first..first+n` (all delivered while credit lasts).
    fn fill(&mut self, first: u64, n: u64) -> Vec<MessageId> {
        let body = body(BODY_LEN);
        let ids: Vec<MessageId> = (first..first + n).map(MessageId::from_guid).collect();
        for i in first..first + n {
            self.ch.put(vec![message(i, &body)], self.now);
            self.flush();
        }
        self.drain();
        ids
    }
}

/// One message through the whole path: put → delivered to the client
/// (in-flight insert, outbound send) → FIN.
fn bench_put_deliver_finish(c: &mut Criterion) {
    let mut g = c.benchmark_group("channel");
    g.throughput(Throughput::Elements(1));
    let body = body(BODY_LEN);
    let mut f = Fixture::new(10_000, 2500);
    let mut n = 1u64;
    g.bench_function("put_deliver_fin", |b| {
        b.iter(|| {
            let msg = message(n, &body);
            let id = msg.id;
            n += 1;
            f.ch.put(vec![msg], f.now);
            f.flush();
            f.ch.finish(f.cid, &[id], f.now, 0, |_, _| unreachable!());
            black_box(f.drain())
        })
    });
    assert_eq!(f.ch.in_flight_count(), 0);

    // Steady state with 2500 in flight: FIN a random one, put a new one
    // (which is delivered into the freed credit).
    let mut f = Fixture::new(10_000, 2500);
    let mut live = f.fill(1, 2500);
    let mut next = 2501u64;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    g.bench_function("steady_2500_in_flight_fin_random_put", |b| {
        b.iter(|| {
            let k = rand::Rng::gen_range(&mut rng, 0..live.len());
            f.ch.finish(f.cid, &[live[k]], f.now, 0, |_, _| unreachable!());
            let msg = message(next, &body);
            live[k] = msg.id;
            next += 1;
            f.ch.put(vec![msg], f.now);
            black_box(f.drain())
        })
    });
    assert_eq!(f.ch.in_flight_count(), 2500);
    g.finish();
}

/// 2500 in flight, FIN all of them in random order (per-FIN cost).
fn bench_in_flight(c: &mut Criterion) {
    let mut g = c.benchmark_group("in_flight");
    g.throughput(Throughput::Elements(2500));
    let mut rng = rand::rngs::SmallRng::seed_from_u64(42);
    g.bench_function("fin_2500_random_order", |b| {
        b.iter_batched(
            || {
                let mut f = Fixture::new(10_000, 2500);
                let mut ids = f.fill(1, 2500);
                ids.shuffle(&mut rng);
                (f, ids)
            },
            |(mut f, ids)| {
                for id in &ids {
                    f.ch.finish(
                        f.cid,
                        std::slice::from_ref(id),
                        f.now,
                        0,
                        |_, _| unreachable!(),
                    );
                    f.flush();
                }
                debug_assert_eq!(f.ch.in_flight_count(), 0);
                f // dropped outside the timing
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

/// The timer pass with 10k in flight and nothing due: what every wake of an
/// idle-but-busy channel costs.
fn bench_process_timers_idle(c: &mut Criterion) {
    let mut g = c.benchmark_group("process_timers");
    let mut f = Fixture::new(20_000, 10_000);
    f.fill(1, 10_000);
    assert_eq!(f.ch.in_flight_count(), 10_000);
    let now = f.now + Duration::from_secs(1);
    g.bench_function("10k_in_flight_none_due", |b| {
        b.iter(|| f.ch.process_timers(black_box(now)))
    });
    assert_eq!(f.ch.in_flight_count(), 10_000);
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(WARM_UP).measurement_time(MEASURE);
    targets = bench_put_deliver_finish, bench_in_flight, bench_process_timers_idle
}
criterion_main!(benches);

//! Wire codec: command decode (PUB, MPUB, pipelined FIN), frame and message
//! encode, MPUB body parsing.

#![forbid(unsafe_code)]

use bytes::BytesMut;
use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use nsq_benches::*;
use nsq_protocol::command::{decode, parse_mpub_body};
use nsq_protocol::frame::{encode_frame, FrameType};
use nsq_protocol::{Command, Limits, Precheck, ProtocolError};

fn proceed(_: &[u8], _: &[&[u8]]) -> Result<Precheck, ProtocolError> {
    Ok(Precheck::Proceed)
}

fn bench_decode(c: &mut Criterion) {
    let limits = Limits::default();
    let body = body(BODY_LEN);
    let mut g = c.benchmark_group("decode");

    let pub_buf = pub_command("bench_topic", &body);
    g.throughput(Throughput::Elements(1));
    g.bench_function("pub_200B", |b| {
        b.iter_batched_ref(
            || pub_buf.clone(),
            |buf| {
                let cmd = decode(buf, &limits, proceed).unwrap().unwrap();
                debug_assert!(matches!(cmd, Command::Pub { .. }));
                cmd
            },
            BatchSize::SmallInput,
        )
    });

    let mpub_buf = mpub_command("bench_topic", 200, &body);
    g.throughput(Throughput::Elements(200));
    g.bench_function("mpub_200x200B", |b| {
        b.iter_batched_ref(
            || mpub_buf.clone(),
            |buf| {
                let cmd = decode(buf, &limits, proceed).unwrap().unwrap();
                debug_assert!(matches!(&cmd, Command::Mpub { bodies, .. } if bodies.len() == 200));
                cmd
            },
            BatchSize::SmallInput,
        )
    });

    let fins = fin_batch(1000);
    g.throughput(Throughput::Elements(1000));
    g.bench_function("fin_x1000_pipelined", |b| {
        b.iter_batched_ref(
            || fins.clone(),
            |buf| {
                let mut n = 0u32;
                while let Some(cmd) = decode(buf, &limits, proceed).unwrap() {
                    black_box(&cmd);
                    n += 1;
                }
                debug_assert_eq!(n, 1000);
                n
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

fn bench_encode(c: &mut Criterion) {
    let body = body(BODY_LEN);
    let msg = message(1, &body);
    let mut g = c.benchmark_group("encode");
    g.throughput(Throughput::Elements(1));

    let mut out = BytesMut::with_capacity(64 * 1024);
    g.bench_function("frame_response_200B", |b| {
        b.iter(|| {
            if out.len() > 60 * 1024 {
                out.clear();
            }
            encode_frame(&mut out, FrameType::Response, black_box(&body));
        })
    });

    let mut out = BytesMut::with_capacity(64 * 1024);
    g.bench_function("message_frame_200B", |b| {
        b.iter(|| {
            if out.len() > 60 * 1024 {
                out.clear();
            }
            black_box(&msg).encode_frame(&mut out);
        })
    });
    g.finish();
}

fn bench_parse_mpub_body(c: &mut Criterion) {
    let limits = Limits::default();
    let payload = mpub_body(200, &body(BODY_LEN));
    let mut g = c.benchmark_group("parse_mpub_body");
    g.throughput(Throughput::Elements(200));
    g.bench_function("200x200B", |b| {
        b.iter(|| parse_mpub_body(black_box(payload.clone()), &limits).unwrap())
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(WARM_UP).measurement_time(MEASURE);
    targets = bench_decode, bench_encode, bench_parse_mpub_body
}
criterion_main!(benches);

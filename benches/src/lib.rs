//! Fixtures shared by the micro-benchmarks in `benches/benches/`, and
//! (`broker`) what the load generators for other brokers share.
//!
//! Run them with `cargo bench -p nsq-benches` (see docs/performance.md,
//! "Micro-benchmarks"). `cargo test --workspace` only builds the bench
//! targets; it never runs them.

#![forbid(unsafe_code)]

pub mod broker;

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use nsq_protocol::{Message, MessageId};

/// Body size used throughout (a typical small NSQ message).
pub const BODY_LEN: usize = 200;

/// A `len`-byte body of printable filler.
pub fn body(len: usize) -> Bytes {
    Bytes::from((0..len).map(|i| b'a' + (i % 26) as u8).collect::<Vec<u8>>())
}

/// A message with id `n` and a `BODY_LEN`-byte body.
pub fn message(n: u64, body: &Bytes) -> Message {
    Message::new(
        MessageId::from_guid(n),
        1_700_000_000_000_000_000,
        body.clone(),
    )
}

/// `PUB <topic>\n<be32 size><body>`.
pub fn pub_command(topic: &str, body: &[u8]) -> BytesMut {
    let mut buf = BytesMut::new();
    nsq_protocol::command::encode_line(&mut buf, "PUB", &[topic]);
    nsq_protocol::command::encode_body(&mut buf, body);
    buf
}

/// A whole MPUB command of `n` copies of `body`.
pub fn mpub_command(topic: &str, n: usize, body: &[u8]) -> BytesMut {
    let bodies: Vec<&[u8]> = vec![body; n];
    let mut buf = BytesMut::new();
    nsq_protocol::command::encode_mpub(&mut buf, topic, &bodies);
    buf
}

/// An MPUB payload (what follows the body size word): `[be32 n]([be32 size][body])*`.
pub fn mpub_body(n: usize, body: &[u8]) -> Bytes {
    let mut buf = BytesMut::with_capacity(4 + n * (4 + body.len()));
    buf.put_i32(n as i32);
    for _ in 0..n {
        buf.put_i32(body.len() as i32);
        buf.put_slice(body);
    }
    buf.freeze()
}

/// `n` pipelined `FIN <id>\n` lines in one buffer.
pub fn fin_batch(n: usize) -> BytesMut {
    let mut buf = BytesMut::with_capacity(n * 21);
    for i in 0..n {
        buf.put_slice(b"FIN ");
        buf.put_slice(&MessageId::from_guid(i as u64 + 1).0);
        buf.put_u8(b'\n');
    }
    buf
}

/// Short criterion timings so the whole suite runs in a few minutes on a
/// small shared machine; `--warm-up-time` / `--measurement-time` on the
/// command line still override these.
pub const WARM_UP: Duration = Duration::from_secs(1);
pub const MEASURE: Duration = Duration::from_secs(2);

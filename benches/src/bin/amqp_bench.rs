//! amqp_bench: the load `nsq_bench` puts on nsqd, put on a RabbitMQ quorum
//! queue instead, so that a replicated topic can be compared with a quorum
//! queue in one run (scripts/replicated.sh RABBITMQ=1, docs/replication.md
//! "Cost"). It speaks AMQP 0-9-1 itself (the handshake, `queue.declare`
//! with `x-queue-type: quorum`, publisher confirms, `basic.consume` with
//! a prefetch and an ack per message), so the comparison needs no client
//! library.
//!
//! ```text
//! amqp_bench setup   --server ADDR --queue Q --replicas 3        declares quorum queue Q
//! amqp_bench pub     --server ADDR --queue Q --writers 2 --window 800 --size 200 --runfor 3s
//! amqp_bench sub     --server ADDR --queue Q --count N --batch 2500
//! amqp_bench latency --server ADDR --queue Q --rate 20000 --size 200 --runfor 3s
//! ```
//!
//! `pub` keeps `window` publishes per connection waiting for their
//! confirm (nsq_bench's MPUB 200 × 4 in flight is 800 messages; a quorum
//! queue confirms a message once a majority of its members has written it
//! to their log and fsynced it, batched); `sub` consumes with a prefetch
//! of `batch` and acks every message (as a consumer FINs every message);
//! `latency` publishes at a fixed rate and measures each message from its
//! send to its delivery (one clock). Each mode ends with a `RESULT {json}`
//! line on stdout, as nsq_bench's.

#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use nsq_benches::broker::{self, now_ns, Args};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::time::Instant;

// Frame types and the end-of-frame octet (AMQP 0-9-1, 4.2.3).
const METHOD: u8 = 1;
const HEADER: u8 = 2;
const BODY: u8 = 3;
const HEARTBEAT: u8 = 8;
const FRAME_END: u8 = 0xCE;
/// The largest frame this client accepts and sends (the server may lower it).
const FRAME_MAX: u32 = 131_072;

/// A method's class and method ids.
type Id = (u16, u16);
const CONNECTION_START: Id = (10, 10);
const CONNECTION_START_OK: Id = (10, 11);
const CONNECTION_TUNE: Id = (10, 30);
const CONNECTION_TUNE_OK: Id = (10, 31);
const CONNECTION_OPEN: Id = (10, 40);
const CONNECTION_OPEN_OK: Id = (10, 41);
const CONNECTION_CLOSE: Id = (10, 50);
const CHANNEL_OPEN: Id = (20, 10);
const CHANNEL_OPEN_OK: Id = (20, 11);
const CHANNEL_CLOSE: Id = (20, 40);
const QUEUE_DECLARE: Id = (50, 10);
const QUEUE_DECLARE_OK: Id = (50, 11);
const BASIC_QOS: Id = (60, 10);
const BASIC_QOS_OK: Id = (60, 11);
const BASIC_CONSUME: Id = (60, 20);
const BASIC_CONSUME_OK: Id = (60, 21);
const BASIC_PUBLISH: Id = (60, 40);
const BASIC_DELIVER: Id = (60, 60);
const BASIC_ACK: Id = (60, 80);
const BASIC_NACK: Id = (60, 120);
const CONFIRM_SELECT: Id = (85, 10);
const CONFIRM_SELECT_OK: Id = (85, 11);

/// Builds a method's arguments.
#[derive(Default)]
struct Args091(Vec<u8>);

impl Args091 {
    fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }
    fn u16(mut self, v: u16) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn short(mut self, s: &str) -> Self {
        self.0.push(s.len() as u8);
        self.0.extend_from_slice(s.as_bytes());
        self
    }
    fn long(mut self, s: &[u8]) -> Self {
        self.0.extend_from_slice(&(s.len() as u32).to_be_bytes());
        self.0.extend_from_slice(s);
        self
    }
    /// A field table of string and integer values.
    fn table(self, fields: &[(&str, Field)]) -> Self {
        let mut t = Vec::new();
        for (k, v) in fields {
            t.push(k.len() as u8);
            t.extend_from_slice(k.as_bytes());
            match v {
                Field::Str(s) => {
                    t.push(b'S');
                    t.extend_from_slice(&(s.len() as u32).to_be_bytes());
                    t.extend_from_slice(s.as_bytes());
                }
                Field::Int(i) => {
                    t.push(b'I');
                    t.extend_from_slice(&i.to_be_bytes());
                }
            }
        }
        self.long(&t)
    }
}

enum Field {
    Str(String),
    Int(i32),
}

/// Reads a method's arguments.
struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8]> {
        if self.0.len() < n {
            bail!("method arguments cut short");
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_be_bytes(self.take(2)?.try_into()?))
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_be_bytes(self.take(4)?.try_into()?))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_be_bytes(self.take(8)?.try_into()?))
    }
    fn short(&mut self) -> Result<String> {
        let n = self.u8()? as usize;
        Ok(String::from_utf8_lossy(self.take(n)?).into_owned())
    }
}

/// One frame as read.
struct Frame {
    kind: u8,
    channel: u16,
    payload: Vec<u8>,
}

impl Frame {
    fn method(&self) -> Result<(Id, Cursor<'_>)> {
        let mut c = Cursor(&self.payload);
        let id = (c.u16()?, c.u16()?);
        Ok((id, c))
    }
}

struct Reader {
    rd: BufReader<OwnedReadHalf>,
}

impl Reader {
    async fn frame(&mut self) -> Result<Frame> {
        let mut head = [0u8; 7];
        self.rd
            .read_exact(&mut head)
            .await
            .context("connection closed")?;
        let size = u32::from_be_bytes([head[3], head[4], head[5], head[6]]);
        if size > FRAME_MAX {
            bail!("frame of {size} bytes, over the {FRAME_MAX} agreed");
        }
        let mut payload = vec![0; size as usize + 1];
        self.rd.read_exact(&mut payload).await?;
        if payload.pop() != Some(FRAME_END) {
            bail!("frame without its end octet");
        }
        Ok(Frame {
            kind: head[0],
            channel: u16::from_be_bytes([head[1], head[2]]),
            payload,
        })
    }

    /// The next method frame, skipping heartbeats; a `close` from the
    /// server is an error with its reply text.
    async fn method(&mut self) -> Result<Frame> {
        loop {
            let f = self.frame().await?;
            match f.kind {
                METHOD => {
                    let (id, mut c) = f.method()?;
                    if id == CONNECTION_CLOSE || id == CHANNEL_CLOSE {
                        let code = c.u16()?;
                        let text = c.short()?;
                        bail!("server closed: {code} {text}");
                    }
                    return Ok(f);
                }
                HEARTBEAT => continue,
                k => bail!("unexpected frame type {k}"),
            }
        }
    }

    /// Waits for method `want`; returns its arguments' bytes.
    async fn expect(&mut self, want: Id) -> Result<Vec<u8>> {
        let f = self.method().await?;
        let (id, c) = f.method()?;
        if id != want {
            bail!("expected method {want:?}, got {id:?}");
        }
        Ok(c.0.to_vec())
    }
}

struct Writer {
    wr: BufWriter<OwnedWriteHalf>,
    frame_max: u32,
}

impl Writer {
    async fn frame(&mut self, kind: u8, channel: u16, payload: &[u8]) -> Result<()> {
        let mut head = [0u8; 7];
        head[0] = kind;
        head[1..3].copy_from_slice(&channel.to_be_bytes());
        head[3..7].copy_from_slice(&(payload.len() as u32).to_be_bytes());
        self.wr.write_all(&head).await?;
        self.wr.write_all(payload).await?;
        self.wr.write_all(&[FRAME_END]).await?;
        Ok(())
    }

    async fn method(&mut self, channel: u16, id: Id, args: Args091) -> Result<()> {
        let mut p = Vec::with_capacity(4 + args.0.len());
        p.extend_from_slice(&id.0.to_be_bytes());
        p.extend_from_slice(&id.1.to_be_bytes());
        p.extend_from_slice(&args.0);
        self.frame(METHOD, channel, &p).await
    }

    /// `basic.publish` of `body` to the default exchange, routed to
    /// `queue`, persistent (delivery mode 2).
    async fn publish(&mut self, queue: &str, body: &[u8]) -> Result<()> {
        self.method(
            1,
            BASIC_PUBLISH,
            Args091::default().u16(0).short("").short(queue).u8(0),
        )
        .await?;
        // Content header: class 60, weight 0, body size, flags with only
        // delivery-mode set.
        let header = Args091::default()
            .u16(60)
            .u16(0)
            .u64(body.len() as u64)
            .u16(0x1000)
            .u8(2);
        self.frame(HEADER, 1, &header.0).await?;
        let max = (self.frame_max - 8) as usize;
        for chunk in body.chunks(max) {
            self.frame(BODY, 1, chunk).await?;
        }
        Ok(())
    }

    async fn flush(&mut self) -> Result<()> {
        self.wr.flush().await?;
        Ok(())
    }
}

/// Connects as guest/guest (PLAIN) to vhost `/`, without heartbeats, and
/// opens channel 1.
async fn connect(server: &str) -> Result<(Reader, Writer)> {
    let s = TcpStream::connect(server)
        .await
        .with_context(|| format!("connecting to {server}"))?;
    s.set_nodelay(true)?;
    let (r, w) = s.into_split();
    let mut rd = Reader {
        rd: BufReader::with_capacity(1 << 20, r),
    };
    let mut wr = Writer {
        wr: BufWriter::with_capacity(1 << 20, w),
        frame_max: FRAME_MAX,
    };
    wr.wr.write_all(b"AMQP\x00\x00\x09\x01").await?;
    wr.flush().await?;
    rd.expect(CONNECTION_START).await?;
    wr.method(
        0,
        CONNECTION_START_OK,
        Args091::default()
            .table(&[("product", Field::Str("amqp_bench".into()))])
            .short("PLAIN")
            .long(b"\0guest\0guest")
            .short("en_US"),
    )
    .await?;
    wr.flush().await?;
    let tune = rd.expect(CONNECTION_TUNE).await?;
    let mut c = Cursor(&tune);
    let channel_max = c.u16()?;
    let frame_max = match c.u32()? {
        0 => FRAME_MAX,
        m => m.min(FRAME_MAX),
    };
    wr.frame_max = frame_max;
    wr.method(
        0,
        CONNECTION_TUNE_OK,
        Args091::default().u16(channel_max).u32(frame_max).u16(0),
    )
    .await?;
    wr.method(
        0,
        CONNECTION_OPEN,
        Args091::default().short("/").short("").u8(0),
    )
    .await?;
    wr.flush().await?;
    rd.expect(CONNECTION_OPEN_OK).await?;
    wr.method(1, CHANNEL_OPEN, Args091::default().short(""))
        .await?;
    wr.flush().await?;
    rd.expect(CHANNEL_OPEN_OK).await?;
    Ok((rd, wr))
}

/// Declares the durable quorum queue (idempotent: the same arguments).
async fn declare(rd: &mut Reader, wr: &mut Writer, a: &Args) -> Result<(u32, u32)> {
    wr.method(
        1,
        QUEUE_DECLARE,
        Args091::default()
            .u16(0)
            .short(&a.target)
            .u8(0x02) // durable
            .table(&[
                ("x-queue-type", Field::Str("quorum".into())),
                ("x-quorum-initial-group-size", Field::Int(a.replicas as i32)),
            ]),
    )
    .await?;
    wr.flush().await?;
    let ok = rd.expect(QUEUE_DECLARE_OK).await?;
    let mut c = Cursor(&ok);
    c.short()?;
    Ok((c.u32()?, c.u32()?))
}

async fn setup(a: &Args) -> Result<Value> {
    // The servers may still be starting.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = async {
            let (mut rd, mut wr) = connect(&a.server).await?;
            declare(&mut rd, &mut wr, a).await
        }
        .await;
        match r {
            Ok((messages, consumers)) => {
                return Ok(json!({"mode": "setup", "queue": a.target, "type": "quorum",
                    "replicas": a.replicas, "messages": messages, "consumers": consumers}))
            }
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

/// A connection in confirm mode whose confirms are counted by a reader
/// task: each confirm (or refusal, `basic.nack`) frees its place in
/// `window`.
async fn confirming(
    a: &Args,
    window: Arc<Semaphore>,
    acked: Arc<AtomicU64>,
    refused: Arc<AtomicU64>,
    clock: Option<Arc<broker::Acks>>,
) -> Result<(Writer, tokio::task::JoinHandle<Result<()>>)> {
    let (mut rd, mut wr) = connect(&a.server).await?;
    wr.method(1, CONFIRM_SELECT, Args091::default().u8(0))
        .await?;
    wr.flush().await?;
    rd.expect(CONFIRM_SELECT_OK).await?;
    let reader = tokio::spawn(async move {
        // Confirms come in order; `multiple` covers every tag up to it.
        let mut confirmed = 0u64;
        loop {
            let f = rd.method().await?;
            let (id, mut c) = f.method()?;
            if id != BASIC_ACK && id != BASIC_NACK {
                continue;
            }
            let tag = c.u64()?;
            let multiple = c.u8()? & 1 != 0;
            let n = if multiple {
                tag.saturating_sub(confirmed)
            } else {
                1
            };
            if let (Some(c), true) = (&clock, id == BASIC_ACK) {
                // delivery tags count publishes from 1
                for t in tag + 1 - n..=tag {
                    c.acked(t - 1);
                }
            }
            confirmed = confirmed.max(tag);
            if id == BASIC_ACK {
                acked.fetch_add(n, Ordering::Relaxed);
            } else {
                refused.fetch_add(n, Ordering::Relaxed);
            }
            window.add_permits(n as usize);
        }
    });
    Ok((wr, reader))
}

/// Publishes with up to `window` unconfirmed per connection, until
/// `deadline`; confirmed messages (and refusals) counted.
async fn publisher(
    a: Arc<Args>,
    deadline: Instant,
    acked: Arc<AtomicU64>,
    refused: Arc<AtomicU64>,
) -> Result<()> {
    let window = Arc::new(Semaphore::new(a.window));
    let (mut wr, reader) = confirming(&a, window.clone(), acked, refused, None).await?;
    let body = vec![b'x'; a.size];
    while Instant::now() < deadline {
        let permit = match window.try_acquire() {
            Ok(p) => p,
            Err(_) => {
                wr.flush().await?;
                match tokio::time::timeout_at(deadline, window.acquire()).await {
                    Ok(p) => p?,
                    Err(_) => break,
                }
            }
        };
        permit.forget();
        wr.publish(&a.target, &body).await?;
    }
    wr.flush().await?;
    // Wait for what is in flight.
    let _ = tokio::time::timeout(
        Duration::from_secs(10),
        window.acquire_many(a.window as u32),
    )
    .await;
    reader.abort();
    Ok(())
}

/// A consumer of the queue with a prefetch of `batch`, acking each
/// message; calls `on` with each body and the time it arrived, until it
/// returns false.
async fn consume(a: &Args, mut on: impl FnMut(&[u8], u64) -> bool) -> Result<()> {
    let (mut rd, mut wr) = connect(&a.server).await?;
    wr.method(
        1,
        BASIC_QOS,
        Args091::default().u32(0).u16(a.batch as u16).u8(0),
    )
    .await?;
    wr.flush().await?;
    rd.expect(BASIC_QOS_OK).await?;
    wr.method(
        1,
        BASIC_CONSUME,
        Args091::default()
            .u16(0)
            .short(&a.target)
            .short("amqp_bench")
            .u8(0)
            .table(&[]),
    )
    .await?;
    wr.flush().await?;
    rd.expect(BASIC_CONSUME_OK).await?;
    loop {
        let f = rd.method().await?;
        let (id, mut c) = f.method()?;
        if id != BASIC_DELIVER {
            continue;
        }
        c.short()?;
        let tag = c.u64()?;
        // The content header, then body frames up to its size.
        let h = rd.frame().await?;
        if h.kind != HEADER || h.channel != 1 {
            bail!("expected a content header, got frame type {}", h.kind);
        }
        let mut hc = Cursor(&h.payload);
        hc.u16()?;
        hc.u16()?;
        let size = hc.u64()? as usize;
        let mut body = Vec::with_capacity(size);
        while body.len() < size {
            let b = rd.frame().await?;
            if b.kind != BODY {
                bail!("expected a body frame, got frame type {}", b.kind);
            }
            body.extend_from_slice(&b.payload);
        }
        let more = on(&body, now_ns());
        wr.method(1, BASIC_ACK, Args091::default().u64(tag).u8(0))
            .await?;
        if !more {
            wr.flush().await?;
            return Ok(());
        }
        if rd.rd.buffer().is_empty() {
            wr.flush().await?;
        }
    }
}

async fn run_sub(a: Arc<Args>) -> Result<Value> {
    let start = Instant::now();
    let mut n = 0u64;
    let want = a.count;
    if want > 0 {
        consume(&a, |_, _| {
            n += 1;
            n < want
        })
        .await?;
    }
    Ok(broker::rate_result(
        "sub",
        n,
        start.elapsed().as_secs_f64(),
        json!({}),
    ))
}

async fn run_latency(a: Arc<Args>) -> Result<Value> {
    let total = (a.rate as f64 * a.runfor.as_secs_f64()) as u64;
    let consumer = {
        let a = a.clone();
        tokio::spawn(async move {
            let mut lat: Vec<u64> = Vec::with_capacity(total as usize);
            let r = tokio::time::timeout(
                a.runfor + Duration::from_secs(10),
                consume(&a, |body, at| {
                    lat.extend(broker::since_sent(body, at));
                    (lat.len() as u64) < total
                }),
            )
            .await;
            (r, lat)
        })
    };
    // Confirms are read (and the window never fills: it is as large as
    // the whole run), so the publisher is never held back by them.
    let window = Arc::new(Semaphore::new(total as usize + 1));
    let clock = Arc::new(broker::Acks::default());
    let (mut wr, reader) = confirming(
        &a,
        window,
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Some(clock.clone()),
    )
    .await?;
    let start = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    let mut sent = 0u64;
    let mut body = vec![b'x'; a.size];
    while sent < total {
        tick.tick().await;
        let due = ((start.elapsed().as_secs_f64() * a.rate as f64) as u64).min(total);
        while sent < due {
            broker::stamp(&mut body);
            wr.publish(&a.target, &body).await?;
            sent += 1;
        }
        clock.written(sent);
        wr.flush().await?;
    }
    let (r, lat) = consumer.await?;
    reader.abort();
    match r {
        Ok(r) => r?,
        Err(_) => eprintln!(
            "[amqp_bench] latency: {} of {total} received before the timeout",
            lat.len()
        ),
    }
    Ok(broker::latency_result(a.rate, sent, lat, clock.take()))
}

#[tokio::main]
async fn main() -> ExitCode {
    let a = match broker::parse("amqp_bench", "127.0.0.1:5672", "queue") {
        // AMQP's prefetch count is 16 bits.
        Ok(a) => Arc::new(Args {
            batch: a.batch.min(u16::MAX as u64),
            ..a
        }),
        Err(e) => {
            eprintln!("amqp_bench: {e}");
            return ExitCode::from(2);
        }
    };
    let r = match a.mode.as_str() {
        "setup" => setup(&a).await,
        "pub" => broker::run_pub(a.clone(), publisher).await,
        "sub" => run_sub(a.clone()).await,
        "latency" => run_latency(a.clone()).await,
        m => Err(anyhow!("unknown mode {m}: setup, pub, sub or latency")),
    };
    broker::finish("amqp_bench", r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_read_back_as_written() {
        let a = Args091::default()
            .u16(7)
            .short("bench")
            .u8(0x02)
            .u64(1 << 40)
            .table(&[("x-queue-type", Field::Str("quorum".into()))]);
        let mut c = Cursor(&a.0);
        assert_eq!(c.u16().unwrap(), 7);
        assert_eq!(c.short().unwrap(), "bench");
        assert_eq!(c.u8().unwrap(), 2);
        assert_eq!(c.u64().unwrap(), 1 << 40);
        // The table: its length, then key, type 'S' and a long string.
        let len = c.u32().unwrap() as usize;
        assert_eq!(len, 1 + 12 + 1 + 4 + 6);
        assert_eq!(c.short().unwrap(), "x-queue-type");
        assert_eq!(c.u8().unwrap(), b'S');
        assert_eq!(c.u32().unwrap(), 6);
        assert_eq!(c.take(6).unwrap(), b"quorum");
        assert!(c.u8().is_err(), "nothing after the table");
    }
}

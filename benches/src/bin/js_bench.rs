//! js_bench: the load `nsq_bench` puts on nsqd, put on a NATS JetStream
//! stream instead, so that a replicated topic can be compared with a
//! JetStream R3 stream in one run (scripts/replicated.sh, docs/replication.md
//! "Cost"). It speaks NATS's text protocol itself (CONNECT, PUB with a reply
//! inbox for JetStream's publish acknowledgement, a pull consumer with
//! explicit acks), so the comparison needs no client library.
//!
//! ```text
//! js_bench setup   --server ADDR --stream S --replicas 3        creates stream S (subject S) and consumer `ch`
//! js_bench pub     --server ADDR --stream S --writers 2 --window 800 --size 200 --runfor 3s
//! js_bench sub     --server ADDR --stream S --count N --batch 2500
//! js_bench latency --server ADDR --stream S --rate 20000 --size 200 --runfor 3s
//! ```
//!
//! `pub` keeps `window` publishes per connection waiting for their
//! acknowledgement (nsq_bench's MPUB 200 × 4 in flight is 800 messages);
//! `sub` pulls batches and acks every message (as a consumer FINs every
//! message); `latency` publishes at a fixed rate and measures each
//! message from its send to its receipt by a pull consumer (one clock).
//! Each mode ends with a `RESULT {json}` line on stdout, as nsq_bench's.

#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use nsq_benches::broker::{self, now_ns, Args};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// What arrives on a connection.
enum In {
    Msg {
        subject: String,
        reply: Option<String>,
        /// The status line of a header block (`NATS/1.0 404 ...`), if any.
        status: Option<String>,
        payload: Vec<u8>,
    },
    Err(String),
    Other,
}

struct Reader {
    rd: BufReader<OwnedReadHalf>,
    line: String,
    /// The server's PINGs read so far (answered by the writer: a server
    /// drops a connection that leaves two unanswered).
    pings: Arc<AtomicU64>,
}

struct Writer {
    wr: BufWriter<OwnedWriteHalf>,
    pings: Arc<AtomicU64>,
    ponged: u64,
}

impl Reader {
    async fn next(&mut self) -> Result<In> {
        self.line.clear();
        if self.rd.read_line(&mut self.line).await? == 0 {
            bail!("connection closed");
        }
        let parts: Vec<&str> = self.line.split_whitespace().collect();
        match parts.first().copied() {
            Some("MSG") => {
                let (reply, len) = match parts.len() {
                    4 => (None, parts[3]),
                    5 => (Some(parts[3].to_string()), parts[4]),
                    _ => bail!("bad MSG line {:?}", self.line),
                };
                let len: usize = len.parse()?;
                let subject = parts[1].to_string();
                let payload = self.body(len).await?;
                Ok(In::Msg {
                    subject,
                    reply,
                    status: None,
                    payload,
                })
            }
            Some("HMSG") => {
                let (reply, hlen, tlen) = match parts.len() {
                    5 => (None, parts[3], parts[4]),
                    6 => (Some(parts[3].to_string()), parts[4], parts[5]),
                    _ => bail!("bad HMSG line {:?}", self.line),
                };
                let (hlen, tlen): (usize, usize) = (hlen.parse()?, tlen.parse()?);
                let subject = parts[1].to_string();
                let mut all = self.body(tlen).await?;
                let payload = all.split_off(hlen.min(all.len()));
                let head = String::from_utf8_lossy(&all);
                let status = head
                    .lines()
                    .next()
                    .map(|l| l.trim_start_matches("NATS/1.0").trim().to_string())
                    .filter(|s| !s.is_empty());
                Ok(In::Msg {
                    subject,
                    reply,
                    status,
                    payload,
                })
            }
            Some("-ERR") => Ok(In::Err(self.line.trim().to_string())),
            Some("PING") => {
                self.pings.fetch_add(1, Ordering::Relaxed);
                Ok(In::Other)
            }
            _ => Ok(In::Other),
        }
    }

    async fn body(&mut self, len: usize) -> Result<Vec<u8>> {
        let mut b = vec![0; len + 2];
        self.rd.read_exact(&mut b).await?;
        b.truncate(len);
        Ok(b)
    }
}

impl Writer {
    /// Answers the PINGs read so far, then sends what is buffered.
    async fn flush(&mut self) -> Result<()> {
        let pings = self.pings.load(Ordering::Relaxed);
        while self.ponged < pings {
            self.wr.write_all(b"PONG\r\n").await?;
            self.ponged += 1;
        }
        self.wr.flush().await?;
        Ok(())
    }

    async fn pub_msg(&mut self, subject: &str, reply: &str, body: &[u8]) -> Result<()> {
        let head = if reply.is_empty() {
            format!("PUB {subject} {}\r\n", body.len())
        } else {
            format!("PUB {subject} {reply} {}\r\n", body.len())
        };
        self.wr.write_all(head.as_bytes()).await?;
        self.wr.write_all(body).await?;
        self.wr.write_all(b"\r\n").await?;
        Ok(())
    }
}

/// Connects, answers the server's INFO with CONNECT, and subscribes to
/// this connection's inbox (`_INBOX.<id>.*`, sid 1). PINGs from the server
/// are answered by the reader loops (`pong`).
async fn connect(server: &str, id: &str) -> Result<(Reader, Writer, String)> {
    let s = TcpStream::connect(server)
        .await
        .with_context(|| format!("connecting to {server}"))?;
    s.set_nodelay(true)?;
    let (r, w) = s.into_split();
    let pings = Arc::new(AtomicU64::new(0));
    let mut rd = Reader {
        rd: BufReader::with_capacity(1 << 20, r),
        line: String::new(),
        pings: pings.clone(),
    };
    let mut wr = Writer {
        wr: BufWriter::with_capacity(1 << 20, w),
        pings,
        ponged: 0,
    };
    rd.line.clear();
    rd.rd.read_line(&mut rd.line).await?;
    if !rd.line.starts_with("INFO") {
        bail!("expected INFO, got {:?}", rd.line);
    }
    let inbox = format!("_INBOX.{id}");
    let hello = format!(
        "CONNECT {{\"verbose\":false,\"pedantic\":false,\"headers\":true,\"no_responders\":true,\"protocol\":1,\"name\":\"js_bench\"}}\r\nSUB {inbox}.* 1\r\nPING\r\n"
    );
    wr.wr.write_all(hello.as_bytes()).await?;
    wr.flush().await?;
    loop {
        rd.line.clear();
        rd.rd.read_line(&mut rd.line).await?;
        match rd.line.trim() {
            "PONG" => break,
            l if l.starts_with("-ERR") => bail!("{l}"),
            _ => {}
        }
    }
    Ok((rd, wr, inbox))
}

/// A JetStream API request and its JSON answer.
async fn request(
    rd: &mut Reader,
    wr: &mut Writer,
    inbox: &str,
    subject: &str,
    body: Value,
) -> Result<Value> {
    let reply = format!("{inbox}.api");
    wr.pub_msg(subject, &reply, body.to_string().as_bytes())
        .await?;
    wr.flush().await?;
    loop {
        match rd.next().await? {
            In::Msg {
                subject,
                payload,
                status,
                ..
            } if subject == reply => {
                if let Some(s) = status {
                    bail!("{subject}: {s}");
                }
                return Ok(serde_json::from_slice(&payload)?);
            }
            In::Err(e) => bail!("{e}"),
            _ => wr.flush().await?,
        }
    }
}

async fn setup(a: &Args) -> Result<Value> {
    // The servers may still be starting, and the meta leader is elected
    // some time after they have.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut rd, mut wr, inbox) = loop {
        match connect(&a.server, "setup").await {
            Ok(c) => break c,
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    let s = &a.target;
    let created = loop {
        // A request made while the cluster forms can go unanswered: each
        // try waits 5 s, then asks again on a new connection.
        let r = tokio::time::timeout(
            Duration::from_secs(5),
            request(
                &mut rd,
                &mut wr,
                &inbox,
                &format!("$JS.API.STREAM.CREATE.{s}"),
                json!({"name": s, "subjects": [s], "retention": "limits", "storage": "file",
                       "num_replicas": a.replicas, "discard": "old"}),
            ),
        )
        .await;
        match r {
            Ok(Ok(v)) if v.get("error").is_none() => break v,
            Ok(Ok(v)) if Instant::now() >= deadline => bail!("stream create: {v}"),
            Ok(Err(e)) if Instant::now() >= deadline => return Err(e),
            Err(_) if Instant::now() >= deadline => bail!("stream create: no answer"),
            Err(_) => (rd, wr, _) = connect(&a.server, "setup").await?,
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    };
    let consumer = request(
        &mut rd,
        &mut wr,
        &inbox,
        &format!("$JS.API.CONSUMER.DURABLE.CREATE.{s}.ch"),
        json!({"stream_name": s, "config": {"durable_name": "ch", "ack_policy": "explicit",
               "deliver_policy": "all", "max_ack_pending": 100000, "ack_wait": 30_000_000_000u64}}),
    )
    .await?;
    if let Some(e) = consumer.get("error") {
        bail!("consumer create: {e}");
    }
    Ok(
        json!({"mode": "setup", "stream": created["config"]["name"], "replicas": created["config"]["num_replicas"],
              "leader": created["cluster"]["leader"]}),
    )
}

/// Publishes with up to `window` unacknowledged per connection, until
/// `deadline`; acknowledged messages (and refusals) counted.
async fn publisher(
    a: Arc<Args>,
    deadline: Instant,
    acked: Arc<AtomicU64>,
    refused: Arc<AtomicU64>,
) -> Result<()> {
    // Each publisher's own inbox for the acknowledgements.
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let (mut rd, mut wr, inbox) = connect(&a.server, &format!("pub{id}")).await?;
    let window = Arc::new(Semaphore::new(a.window));
    let w2 = window.clone();
    let reader = tokio::spawn(async move {
        loop {
            let next: Result<In> = rd.next().await;
            match next {
                Ok(In::Msg {
                    payload, status, ..
                }) => {
                    if status.is_some() || payload.windows(7).any(|w| w == b"\"error\"") {
                        refused.fetch_add(1, Ordering::Relaxed);
                    } else {
                        acked.fetch_add(1, Ordering::Relaxed);
                    }
                    w2.add_permits(1);
                }
                Ok(In::Err(e)) => return Err::<(), _>(anyhow!("{e}")),
                Ok(In::Other) => {}
                Err(e) => return Err(e),
            }
        }
    });
    let body = vec![b'x'; a.size];
    let mut n = 0u64;
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
        wr.pub_msg(&a.target, &format!("{inbox}.{n}"), &body)
            .await?;
        n += 1;
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

/// A pull consumer of `ch`: asks for `batch` messages whenever half of the
/// last batch arrived, acks each; calls `on` with each body and the time
/// it arrived, until it returns false.
async fn pull(a: &Args, id: &str, mut on: impl FnMut(&[u8], u64) -> bool) -> Result<()> {
    let (mut rd, mut wr, inbox) = connect(&a.server, id).await?;
    let next = format!("$JS.API.CONSUMER.MSG.NEXT.{}.ch", a.target);
    let ask = json!({"batch": a.batch, "expires": 1_000_000_000u64}).to_string();
    let reply = format!("{inbox}.pull");
    wr.pub_msg(&next, &reply, ask.as_bytes()).await?;
    wr.flush().await?;
    let mut outstanding = a.batch;
    loop {
        match rd.next().await? {
            In::Msg {
                reply: Some(ack),
                status: None,
                payload,
                ..
            } => {
                let more = on(&payload, now_ns());
                wr.pub_msg(&ack, "", b"").await?;
                outstanding = outstanding.saturating_sub(1);
                if !more {
                    wr.flush().await?;
                    return Ok(());
                }
                if outstanding <= a.batch / 2 {
                    wr.pub_msg(&next, &reply, ask.as_bytes()).await?;
                    outstanding += a.batch;
                }
                if rd.rd.buffer().is_empty() {
                    wr.flush().await?;
                }
            }
            // 404 no messages, 408 the request expired: ask again.
            In::Msg {
                status: Some(_), ..
            } => {
                outstanding = 0;
                wr.pub_msg(&next, &reply, ask.as_bytes()).await?;
                outstanding += a.batch;
                wr.flush().await?;
            }
            In::Err(e) => bail!("{e}"),
            _ => wr.flush().await?,
        }
    }
}

async fn run_sub(a: Arc<Args>) -> Result<Value> {
    let start = Instant::now();
    let mut n = 0u64;
    let want = a.count;
    if want > 0 {
        pull(&a, "sub", |_, _| {
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
                pull(&a, "lat", |body, at| {
                    lat.extend(broker::since_sent(body, at));
                    (lat.len() as u64) < total
                }),
            )
            .await;
            (r, lat)
        })
    };
    let (mut rd, mut wr, inbox) = connect(&a.server, "latpub").await?;
    let clock = Arc::new(broker::Acks::default());
    let acked = clock.clone();
    let acks = tokio::spawn(async move {
        // Each publish's reply subject ends with its number.
        while let Ok(m) = rd.next().await {
            if let In::Msg {
                subject,
                status,
                payload,
                ..
            } = m
            {
                let n = subject.rsplit('.').next().and_then(|n| n.parse().ok());
                let refused = status.is_some() || payload.windows(7).any(|w| w == b"\"error\"");
                if let (Some(n), false) = (n, refused) {
                    acked.acked(n);
                }
            }
        }
    });
    let start = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    let mut sent = 0u64;
    let mut body = vec![b'x'; a.size];
    while sent < total {
        tick.tick().await;
        let due = ((start.elapsed().as_secs_f64() * a.rate as f64) as u64).min(total);
        while sent < due {
            broker::stamp(&mut body);
            wr.pub_msg(&a.target, &format!("{inbox}.{sent}"), &body)
                .await?;
            sent += 1;
        }
        clock.written(sent);
        wr.flush().await?;
    }
    let (r, lat) = consumer.await?;
    acks.abort();
    match r {
        Ok(r) => r?,
        Err(_) => eprintln!(
            "[js_bench] latency: {} of {total} received before the timeout",
            lat.len()
        ),
    }
    Ok(broker::latency_result(a.rate, sent, lat, clock.take()))
}

#[tokio::main]
async fn main() -> ExitCode {
    let a = match broker::parse("js_bench", "127.0.0.1:4222", "stream") {
        Ok(a) => Arc::new(a),
        Err(e) => {
            eprintln!("js_bench: {e}");
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
    broker::finish("js_bench", r)
}

//! `latency` mode: fixed-rate publishing on one connection, one consumer
//! with default IDENTIFY settings, publish-to-delivery latency =
//! receipt time − the message's timestamp field (same machine clock), and
//! each publish's acknowledgement latency (its `OK` − when it was written).

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use bytes::BytesMut;
use nsq_protocol::command::{encode_body, encode_line, encode_mpub};
use nsq_protocol::frame::{FrameType, HEARTBEAT, OK};
use nsq_protocol::message::Message;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use crate::conn::{read_frame_from, resolve, show, Conn};
use crate::workers::{consume, unix_ns, ConsumeCtl};
use crate::{print_result, r3, Errors, Flags};

/// Body header: magic, run nonce, sequence number, client send time (ns).
const MAGIC: &[u8; 4] = b"NSQB";
const HDR: usize = 28;

struct LatState {
    nonce: u64,
    seen: Vec<u64>,
    cap: u64,
    unique: Arc<AtomicU64>,
    dups: u64,
    foreign: u64,
    untracked: u64,
    max_samples: usize,
    lat: Vec<i64>,
    client_lat: Vec<i64>,
    /// Deliveries slower than [`SLOW_NS`]: when their messages were sent
    /// (ns since `t0`), to tell a stall from a spread.
    slow: Slow,
}

/// A delivery this slow is counted, with when its message was sent.
const SLOW_NS: i64 = 50_000_000;

/// The deliveries slower than [`SLOW_NS`].
#[derive(Default)]
struct Slow {
    /// The unix time (ns) offsets count from: about when publishing began.
    t0: i64,
    count: u64,
    first: Option<i64>,
    last: Option<i64>,
}

impl Slow {
    fn record(&mut self, sent: i64, latency: i64) {
        if latency < SLOW_NS {
            return;
        }
        let at = sent - self.t0;
        self.count += 1;
        self.first = Some(self.first.map_or(at, |f| f.min(at)));
        self.last = Some(self.last.map_or(at, |l| l.max(at)));
    }

    fn json(&self) -> Value {
        let s = |ns: Option<i64>| ns.map(|n| r3(n as f64 / 1e9));
        json!({
            "over_ms": SLOW_NS / 1_000_000,
            "count": self.count,
            "first_sent_s": s(self.first),
            "last_sent_s": s(self.last),
        })
    }
}

impl LatState {
    fn on_msg(&mut self, m: &Message, now: i64) {
        let b = &m.body;
        if b.len() < HDR
            || &b[0..4] != MAGIC
            || u64::from_be_bytes(b[4..12].try_into().unwrap_or([0; 8])) != self.nonce
        {
            self.foreign += 1;
            return;
        }
        let seq = u64::from_be_bytes(b[12..20].try_into().unwrap_or([0; 8]));
        let sent = i64::from_be_bytes(b[20..28].try_into().unwrap_or([0; 8]));
        if seq >= self.cap {
            self.untracked += 1;
        } else {
            let (w, bit) = ((seq / 64) as usize, 1u64 << (seq % 64));
            if self.seen[w] & bit != 0 {
                self.dups += 1;
                return;
            }
            self.seen[w] |= bit;
        }
        self.unique.fetch_add(1, Ordering::Relaxed);
        self.slow.record(sent, now - m.timestamp);
        if self.lat.len() < self.max_samples {
            self.lat.push(now - m.timestamp);
            self.client_lat.push(now - sent);
        }
    }
}

/// Percentile summary in microseconds.
fn summary(v: &mut [i64]) -> Value {
    if v.is_empty() {
        return json!({"samples": 0});
    }
    v.sort_unstable();
    let n = v.len();
    let pct = |q: f64| -> f64 {
        let idx = ((q * n as f64).ceil() as usize).clamp(1, n) - 1;
        r3(v[idx] as f64 / 1e3)
    };
    let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n as f64;
    json!({
        "samples": n,
        "min_us": r3(v[0] as f64 / 1e3),
        "mean_us": r3(mean / 1e3),
        "p50_us": pct(0.50),
        "p90_us": pct(0.90),
        "p99_us": pct(0.99),
        "p999_us": pct(0.999),
        "max_us": r3(v[n - 1] as f64 / 1e3),
    })
}

fn fmt_ms(v: &Value, k: &str) -> String {
    v.get(k)
        .and_then(Value::as_f64)
        .map(|us| format!("{:.3}ms", us / 1e3))
        .unwrap_or_else(|| "-".into())
}

pub async fn run(a: &Flags) -> Result<ExitCode> {
    let c = a;
    crate::check_names(&c.topic, Some(&a.channel))?;
    let size = c.size as usize;
    if size < HDR {
        bail!("--size must be at least {HDR} for latency mode (the body carries a sequence number and send time)");
    }
    let addr = resolve(&c.nsqd_tcp_address, c.allow_remote).await?;

    // Consumer first: default IDENTIFY (feature_negotiation only), SUB.
    let mut cconn = Conn::connect(addr, c.io_timeout).await?;
    cconn.identify("latency-reader").await?;
    cconn.subscribe(&c.topic, &a.channel).await?;
    let mut pconn = Conn::connect(addr, c.io_timeout).await?;
    pconn.identify("latency-writer").await?;

    let nonce = (unix_ns() as u64) ^ ((std::process::id() as u64) << 40);
    let expected =
        (a.rate as f64 * c.runfor.as_secs_f64() * 1.1) as u64 + a.max_batch as u64 + 1024;
    let cap = expected.min(1 << 31);
    let unique = Arc::new(AtomicU64::new(0));
    let mut state = LatState {
        nonce,
        seen: vec![0u64; cap.div_ceil(64) as usize],
        cap,
        unique: unique.clone(),
        dups: 0,
        foreign: 0,
        untracked: 0,
        max_samples: a.max_samples,
        lat: Vec::with_capacity((expected as usize).min(a.max_samples)),
        client_lat: Vec::with_capacity((expected as usize).min(a.max_samples)),
        slow: Slow {
            t0: unix_ns(),
            ..Slow::default()
        },
    };
    let ctl = ConsumeCtl {
        stop: CancellationToken::new(),
        total: Arc::new(AtomicU64::new(0)),
        limit: None,
    };
    let (rdy, cctl) = (a.rdy, ctl.clone());
    let consumer = tokio::spawn(async move {
        let (o, _) = consume(cconn, rdy, cctl, |m, now| state.on_msg(m, now)).await;
        (o, state)
    });

    let tick = Duration::from_secs_f64(1.0 / a.rate as f64)
        .max(a.min_interval)
        .max(Duration::from_micros(1));
    eprintln!(
        "[nsq_bench] latency: {} msgs/s for {:?} ({} per {:?} tick, {} bytes) -> {addr} {:?}/{:?}",
        a.rate,
        c.runfor,
        r3(a.rate as f64 * tick.as_secs_f64()),
        tick,
        size,
        c.topic,
        a.channel
    );

    // Publisher: writer here, response reader in its own task.
    let io_timeout = c.io_timeout;
    let Conn { stream, rbuf, .. } = pconn;
    let (mut rd, mut wr) = stream.into_split();
    // Each PUB/MPUB's count and when it was written: nsqd answers them in
    // order, so the `OK`s give each one's acknowledgement latency.
    let (tx, mut rx) = mpsc::channel::<(u64, Instant)>(1 << 16);
    let acked = Arc::new(AtomicU64::new(0));
    let nop_due = Arc::new(AtomicBool::new(false));
    let (racked, rnop) = (acked.clone(), nop_due.clone());
    let reader = tokio::spawn(async move {
        let mut rbuf = rbuf;
        let mut ack_lat: Vec<i64> = Vec::new();
        while let Some((n, written)) = rx.recv().await {
            loop {
                let f = read_frame_from(&mut rd, &mut rbuf, io_timeout).await?;
                match f.frame_type {
                    FrameType::Response if &f.data[..] == OK => {
                        racked.fetch_add(n, Ordering::Relaxed);
                        // per message, as the other brokers' benches count
                        let took = written.elapsed().as_nanos() as i64;
                        ack_lat.extend(std::iter::repeat_n(took, n as usize));
                        break;
                    }
                    FrameType::Response if f.data == HEARTBEAT => {
                        rnop.store(true, Ordering::Relaxed)
                    }
                    FrameType::Response => {
                        bail!("unexpected response to PUB/MPUB: {:?}", show(&f.data))
                    }
                    FrameType::Error => bail!("publish failed: {}", show(&f.data)),
                    FrameType::Message => {
                        bail!("unexpected message frame on the publishing connection")
                    }
                }
            }
        }
        Ok::<Vec<i64>, anyhow::Error>(ack_lat)
    });

    let mut errors = Errors::default();
    let mut template = vec![b'x'; size];
    template[0..4].copy_from_slice(MAGIC);
    template[4..12].copy_from_slice(&nonce.to_be_bytes());
    let mut wbuf = BytesMut::with_capacity(64 * 1024);
    let mut sent: u64 = 0;
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let start = Instant::now();
    let write_result: Result<()> = async {
        loop {
            interval.tick().await;
            let elapsed = start.elapsed();
            if elapsed >= c.runfor {
                return Ok(());
            }
            let target = (elapsed.as_nanos() * a.rate as u128 / 1_000_000_000) as u64;
            let n = target.saturating_sub(sent).min(a.max_batch as u64);
            if n == 0 {
                continue;
            }
            if nop_due.swap(false, Ordering::Relaxed) {
                encode_line(&mut wbuf, "NOP", &[]);
            }
            let now = unix_ns();
            let bodies: Vec<Vec<u8>> = (sent..sent + n)
                .map(|seq| {
                    let mut b = template.clone();
                    b[12..20].copy_from_slice(&seq.to_be_bytes());
                    b[20..28].copy_from_slice(&now.to_be_bytes());
                    b
                })
                .collect();
            if n == 1 {
                encode_line(&mut wbuf, "PUB", &[&c.topic]);
                encode_body(&mut wbuf, &bodies[0]);
            } else {
                encode_mpub(&mut wbuf, &c.topic, &bodies);
            }
            tokio::time::timeout(io_timeout, wr.write_all(&wbuf))
                .await
                .context("writing to nsqd: timed out")?
                .context("writing to nsqd")?;
            wbuf.clear();
            tx.send((n, Instant::now()))
                .await
                .context("publish response reader stopped")?;
            sent += n;
        }
    }
    .await;
    drop(tx);
    if let Err(e) = write_result {
        errors.add("publisher", format!("{e:#}"));
    }
    let mut ack_lat = match reader.await {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            errors.add("publisher", format!("{e:#}"));
            Vec::new()
        }
        Err(e) => {
            errors.add("publisher", format!("response reader failed: {e}"));
            Vec::new()
        }
    };
    let pub_secs = start.elapsed().as_secs_f64();
    let acked = acked.load(Ordering::Relaxed);

    // Let the consumer receive everything that was acknowledged.
    let drain_deadline = Instant::now() + a.drain_timeout;
    while unique.load(Ordering::Relaxed) < acked
        && Instant::now() < drain_deadline
        && !consumer.is_finished()
    {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    ctl.stop.cancel();
    let (co, mut st) = match consumer.await {
        Ok(v) => v,
        Err(e) => bail!("consumer task failed: {e}"),
    };
    if let Some(e) = co.error {
        errors.add("consumer", e);
    }
    let received = unique.load(Ordering::Relaxed);
    let lost = acked.saturating_sub(received);
    let lat = summary(&mut st.lat);
    let client_lat = summary(&mut st.client_lat);
    let ack = summary(&mut ack_lat);

    eprintln!(
        "[nsq_bench] latency @ {} msgs/s: published {acked} (acknowledged; {:.1} msgs/s), received {received}, missing {lost}, duplicates {}, foreign {}",
        a.rate,
        acked as f64 / pub_secs,
        st.dups,
        st.foreign
    );
    eprintln!(
        "[nsq_bench] latency (receipt - message timestamp): p50 {} p99 {} p99.9 {} max {} (min {}, mean {})",
        fmt_ms(&lat, "p50_us"),
        fmt_ms(&lat, "p99_us"),
        fmt_ms(&lat, "p999_us"),
        fmt_ms(&lat, "max_us"),
        fmt_ms(&lat, "min_us"),
        fmt_ms(&lat, "mean_us")
    );
    eprintln!(
        "[nsq_bench] latency over {} ms: {} messages, sent from {:?} s to {:?} s into the run",
        SLOW_NS / 1_000_000,
        st.slow.count,
        st.slow.first.map(|n| r3(n as f64 / 1e9)),
        st.slow.last.map(|n| r3(n as f64 / 1e9)),
    );
    eprintln!(
        "[nsq_bench] latency (receipt - client send time): p50 {} p99 {} p99.9 {} max {}",
        fmt_ms(&client_lat, "p50_us"),
        fmt_ms(&client_lat, "p99_us"),
        fmt_ms(&client_lat, "p999_us"),
        fmt_ms(&client_lat, "max_us")
    );
    eprintln!(
        "[nsq_bench] publish acknowledged (OK - written): p50 {} p99 {} p99.9 {} max {}",
        fmt_ms(&ack, "p50_us"),
        fmt_ms(&ack, "p99_us"),
        fmt_ms(&ack, "p999_us"),
        fmt_ms(&ack, "max_us")
    );
    if lost > 0 {
        errors.add(
            "consumer",
            format!(
                "{lost} acknowledged messages not received within --drain-timeout {:?}",
                a.drain_timeout
            ),
        );
    }

    let mut v = json!({
        "mode": "latency",
        "topic": c.topic,
        "channel": a.channel,
        "rate": a.rate,
        "size": size,
        "tick_us": r3(tick.as_secs_f64() * 1e6),
        "secs": r3(pub_secs),
        "sent": sent,
        "published": acked,
        "pub_msgs_per_sec": r3(acked as f64 / pub_secs),
        "received": received,
        "missing": lost,
        "duplicates": st.dups,
        "foreign": st.foreign,
        "untracked": st.untracked,
        "server_error_frames": co.server_errors,
        "requeued_at_close": co.requeued,
        "latency": lat,
        "ack_latency": ack,
        "client_latency": client_lat,
        "slow": st.slow.json(),
    });
    for k in ["p50_us", "p99_us", "p999_us", "max_us"] {
        v[k] = v["latency"].get(k).cloned().unwrap_or(Value::Null);
    }
    if let Some(h) = a.stats_address() {
        match crate::http::channel_depth(h, &c.topic, &a.channel, c.allow_remote).await {
            Ok(s) => v["stats"] = s,
            Err(e) => errors.add("stats", format!("{e:#}")),
        }
    }
    Ok(print_result(v, &errors))
}

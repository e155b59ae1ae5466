//! nsq_bench: a load generator for any nsqd speaking the standard V2 TCP
//! protocol, modelled on NSQ's bench/bench_writer and bench/bench_reader.
//! Every mode ends with one machine-readable line `RESULT {json}` on stdout.

mod conn;
mod http;
mod latency;
mod workers;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use bytes::BytesMut;
use clap::{Args, Parser, Subcommand};
use nsq_protocol::command::encode_mpub;
use serde_json::{json, Value};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::conn::{resolve, Conn};
use crate::workers::{consume, publish_loop, ConsumeCtl, Outcome};

#[derive(Parser, Debug)]
#[command(
    name = "nsq_bench",
    version,
    about = "Load generator for nsqd (bench_writer / bench_reader shapes, plus pubsub and latency modes)"
)]
struct Cli {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand, Debug)]
enum Mode {
    /// N connections publishing pipelined MPUB batches for --runfor (bench_writer shape)
    Pub(PubArgs),
    /// M connections consuming (SUB, RDY, FIN everything) for --runfor or --count (bench_reader shape)
    Sub(SubArgs),
    /// publishers and consumers at the same time; reports both rates and the final channel depth
    Pubsub(PubsubArgs),
    /// fixed-rate publishing on one connection, one default-settings consumer; publish-to-delivery latency percentiles
    Latency(latency::LatencyArgs),
}

fn go_duration(s: &str) -> Result<Duration, String> {
    nsq_protocol::duration::parse(s)
}

#[derive(Args, Debug, Clone)]
pub struct Common {
    /// <addr>:<port> of nsqd's TCP listener
    #[arg(long = "nsqd-tcp-address", default_value = "127.0.0.1:4150")]
    pub nsqd_tcp_address: String,
    /// topic to publish to / consume from
    #[arg(long, default_value = "sub_bench")]
    pub topic: String,
    /// size of each message body in bytes
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
    pub size: u32,
    /// duration of the run (Go duration syntax: 10s, 1m30s, 500ms)
    #[arg(long, default_value = "10s", value_parser = go_duration)]
    pub runfor: Duration,
    /// give up on a connection when nsqd sends nothing (or accepts no writes) for this long while a reply is due
    #[arg(long = "io-timeout", default_value = "30s", value_parser = go_duration)]
    pub io_timeout: Duration,
    /// allow non-loopback nsqd addresses (by default only 127.0.0.0/8 and ::1 are used)
    #[arg(long = "allow-remote")]
    pub allow_remote: bool,
}

#[derive(Args, Debug, Clone)]
struct PubOpts {
    /// messages per MPUB
    #[arg(long = "batch-size", default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
    batch_size: u32,
    /// publishing connections (default: number of cores)
    #[arg(long)]
    writers: Option<usize>,
    /// MPUBs in flight (sent, OK not yet read) per connection; 1 = bench_writer's strict request/response
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pipeline: u32,
}

#[derive(Args, Debug, Clone)]
struct SubOpts {
    /// channel to consume from
    #[arg(long, default_value = "ch")]
    channel: String,
    /// consuming connections (default: number of cores)
    #[arg(long)]
    readers: Option<usize>,
    /// RDY count of each consuming connection
    #[arg(long, default_value_t = 2500, value_parser = clap::value_parser!(u32).range(1..))]
    rdy: u32,
}

#[derive(Args, Debug)]
struct PubArgs {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    p: PubOpts,
}

#[derive(Args, Debug)]
struct SubArgs {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    s: SubOpts,
    /// stop once this many messages were received in total (default: run for --runfor)
    #[arg(long)]
    count: Option<u64>,
    /// <addr>:<port> of nsqd's HTTP listener; if given, the final channel depth is read from /stats
    #[arg(long = "nsqd-http-address")]
    nsqd_http_address: Option<String>,
}

#[derive(Args, Debug)]
struct PubsubArgs {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    p: PubOpts,
    #[command(flatten)]
    s: SubOpts,
    /// <addr>:<port> of nsqd's HTTP listener; if given, the final channel depth is read from /stats
    #[arg(long = "nsqd-http-address")]
    nsqd_http_address: Option<String>,
}

pub fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Rounds for readable JSON.
pub fn r3(v: f64) -> f64 {
    if v.is_finite() {
        (v * 1000.0).round() / 1000.0
    } else {
        0.0
    }
}

pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1024.0 / 1024.0
}

/// Errors collected from the connections of a run.
#[derive(Default)]
pub struct Errors {
    pub list: Vec<String>,
}

impl Errors {
    pub fn add(&mut self, who: &str, e: impl std::fmt::Display) {
        let s = format!("{who}: {e}");
        eprintln!("[nsq_bench] error: {s}");
        self.list.push(s);
    }
    pub fn json(&self) -> (Value, Value) {
        (
            json!(self.list.len()),
            self.list.first().map(|s| json!(s)).unwrap_or(Value::Null),
        )
    }
}

/// Sum of the outcomes of a group of connections.
#[derive(Default)]
pub struct Totals {
    pub msgs: u64,
    pub bytes: u64,
    pub server_errors: u64,
    pub requeued: u64,
    /// Latest end of the measured part among the connections.
    pub ended: Option<Instant>,
}

impl Totals {
    /// Seconds from `start` to the end of the measured part (or to now).
    pub fn secs_since(&self, start: Instant) -> f64 {
        self.ended
            .unwrap_or_else(Instant::now)
            .saturating_duration_since(start)
            .as_secs_f64()
    }
}

pub async fn join_all(handles: Vec<JoinHandle<Outcome>>, who: &str, errors: &mut Errors) -> Totals {
    let mut t = Totals::default();
    for (i, h) in handles.into_iter().enumerate() {
        match h.await {
            Ok(o) => {
                t.msgs += o.msgs;
                t.bytes += o.bytes;
                t.server_errors += o.server_errors;
                t.requeued += o.requeued;
                t.ended = t.ended.max(o.ended);
                if let Some(e) = o.error {
                    errors.add(&format!("{who} {i}"), e);
                }
            }
            Err(e) => errors.add(&format!("{who} {i}"), format!("task failed: {e}")),
        }
    }
    t
}

fn check_names(topic: &str, channel: Option<&str>) -> Result<()> {
    if !nsq_protocol::names::is_valid_topic_name(topic) {
        bail!("invalid topic name {topic:?}");
    }
    if let Some(c) = channel {
        if !nsq_protocol::names::is_valid_channel_name(c) {
            bail!("invalid channel name {c:?}");
        }
    }
    Ok(())
}

async fn open_publishers(addr: SocketAddr, n: usize, io_timeout: Duration) -> Result<Vec<Conn>> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let mut c = Conn::connect(addr, io_timeout).await?;
        c.identify("writer").await?;
        v.push(c);
    }
    Ok(v)
}

async fn open_consumers(
    addr: SocketAddr,
    n: usize,
    io_timeout: Duration,
    topic: &str,
    channel: &str,
) -> Result<Vec<Conn>> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let mut c = Conn::connect(addr, io_timeout).await?;
        c.identify("reader").await?;
        c.subscribe(topic, channel).await?;
        v.push(c);
    }
    Ok(v)
}

/// One MPUB command of `batch` bodies of `size` bytes, encoded once and reused.
fn mpub_command(topic: &str, size: usize, batch: usize) -> bytes::Bytes {
    let body = vec![b'x'; size];
    let bodies = vec![&body[..]; batch];
    let mut cmd = BytesMut::new();
    encode_mpub(&mut cmd, topic, &bodies);
    cmd.freeze()
}

fn spawn_publishers(
    conns: Vec<Conn>,
    common: &Common,
    p: &PubOpts,
    deadline: Instant,
) -> Vec<JoinHandle<Outcome>> {
    let (size, batch) = (common.size as usize, p.batch_size as usize);
    let cmd = mpub_command(&common.topic, size, batch);
    conns
        .into_iter()
        .map(|c| {
            tokio::spawn(publish_loop(
                c,
                cmd.clone(),
                batch as u64,
                (batch * size) as u64,
                p.pipeline as usize,
                deadline,
            ))
        })
        .collect()
}

fn spawn_consumers(conns: Vec<Conn>, rdy: u32, ctl: &ConsumeCtl) -> Vec<JoinHandle<Outcome>> {
    conns
        .into_iter()
        .map(|c| {
            let ctl = ctl.clone();
            tokio::spawn(async move { consume(c, rdy, ctl, |_, _| {}).await.0 })
        })
        .collect()
}

/// Cancels `stop` after `d` (unless something else cancels it first).
fn cancel_after(stop: &CancellationToken, d: Duration) {
    let s = stop.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = tokio::time::sleep(d) => s.cancel(),
            _ = s.cancelled() => {}
        }
    });
}

fn rates(msgs: u64, bytes: u64, secs: f64) -> Value {
    json!({
        "msgs": msgs,
        "bytes": bytes,
        "secs": r3(secs),
        "msgs_per_sec": r3(msgs as f64 / secs),
        "mb_per_sec": r3(mib(bytes) / secs),
    })
}

/// bench_writer / bench_reader's summary line.
fn human(label: &str, msgs: u64, bytes: u64, secs: f64) {
    let us_per_op = if msgs > 0 {
        secs * 1e6 / msgs as f64
    } else {
        0.0
    };
    eprintln!(
        "[nsq_bench] {label}: duration: {} - {:.3}mb/s - {:.3}ops/s - {:.3}us/op ({msgs} msgs)",
        nsq_protocol::duration::format(Duration::from_secs_f64(secs)),
        mib(bytes) / secs,
        msgs as f64 / secs,
        us_per_op
    );
}

pub fn print_result(mut v: Value, errors: &Errors) -> ExitCode {
    let (n, first) = errors.json();
    if let Some(o) = v.as_object_mut() {
        o.insert("errors".into(), n);
        o.insert("first_error".into(), first);
    }
    println!("RESULT {v}");
    if errors.list.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn merge(mut a: Value, b: Value) -> Value {
    if let (Some(ao), Value::Object(bo)) = (a.as_object_mut(), b) {
        ao.extend(bo);
    }
    a
}

async fn run_pub(a: PubArgs) -> Result<ExitCode> {
    let c = &a.common;
    check_names(&c.topic, None)?;
    let addr = resolve(&c.nsqd_tcp_address, c.allow_remote).await?;
    let writers = a.p.writers.unwrap_or_else(cores).max(1);
    let conns = open_publishers(addr, writers, c.io_timeout).await?;
    eprintln!(
        "[nsq_bench] pub: {writers} writers, batch {} x {} bytes, pipeline {}, runfor {:?} -> {addr} topic {:?}",
        a.p.batch_size, c.size, a.p.pipeline, c.runfor, c.topic
    );
    let start = Instant::now();
    let handles = spawn_publishers(conns, c, &a.p, start + c.runfor);
    let mut errors = Errors::default();
    let t = join_all(handles, "writer", &mut errors).await;
    let secs = start.elapsed().as_secs_f64();
    human("pub", t.msgs, t.bytes, secs);
    let v = json!({"mode": "pub", "topic": c.topic, "writers": writers, "batch_size": a.p.batch_size, "size": c.size, "pipeline": a.p.pipeline});
    Ok(print_result(
        merge(v, rates(t.msgs, t.bytes, secs)),
        &errors,
    ))
}

async fn run_sub(a: SubArgs) -> Result<ExitCode> {
    let c = &a.common;
    check_names(&c.topic, Some(&a.s.channel))?;
    let addr = resolve(&c.nsqd_tcp_address, c.allow_remote).await?;
    let readers = a.s.readers.unwrap_or_else(cores).max(1);
    let conns = open_consumers(addr, readers, c.io_timeout, &c.topic, &a.s.channel).await?;
    eprintln!(
        "[nsq_bench] sub: {readers} readers, rdy {}, runfor {:?}, count {:?} <- {addr} {:?}/{:?}",
        a.s.rdy, c.runfor, a.count, c.topic, a.s.channel
    );
    let ctl = ConsumeCtl {
        stop: CancellationToken::new(),
        total: Arc::new(AtomicU64::new(0)),
        limit: a.count,
    };
    let start = Instant::now();
    cancel_after(&ctl.stop, c.runfor);
    let handles = spawn_consumers(conns, a.s.rdy, &ctl);
    let mut errors = Errors::default();
    let t = join_all(handles, "reader", &mut errors).await;
    let secs = t.secs_since(start);
    ctl.stop.cancel();
    human("sub", t.msgs, t.bytes, secs);
    let mut v = json!({"mode": "sub", "topic": c.topic, "channel": a.s.channel, "readers": readers, "rdy": a.s.rdy, "count_limit": a.count, "server_error_frames": t.server_errors, "requeued_at_close": t.requeued});
    if let Some(h) = &a.nsqd_http_address {
        match http::channel_depth(h, &c.topic, &a.s.channel, c.allow_remote).await {
            Ok(s) => v["stats"] = s,
            Err(e) => errors.add("stats", format!("{e:#}")),
        }
    }
    Ok(print_result(
        merge(v, rates(t.msgs, t.bytes, secs)),
        &errors,
    ))
}

async fn run_pubsub(a: PubsubArgs) -> Result<ExitCode> {
    let c = &a.common;
    check_names(&c.topic, Some(&a.s.channel))?;
    let addr = resolve(&c.nsqd_tcp_address, c.allow_remote).await?;
    let writers = a.p.writers.unwrap_or_else(cores).max(1);
    let readers = a.s.readers.unwrap_or_else(cores).max(1);
    // Consumers subscribe first so the channel exists before the first publish.
    let sconns = open_consumers(addr, readers, c.io_timeout, &c.topic, &a.s.channel).await?;
    let pconns = open_publishers(addr, writers, c.io_timeout).await?;
    eprintln!(
        "[nsq_bench] pubsub: {writers} writers (batch {} x {} bytes, pipeline {}), {readers} readers (rdy {}), runfor {:?} on {addr} {:?}/{:?}",
        a.p.batch_size, c.size, a.p.pipeline, a.s.rdy, c.runfor, c.topic, a.s.channel
    );
    let ctl = ConsumeCtl {
        stop: CancellationToken::new(),
        total: Arc::new(AtomicU64::new(0)),
        limit: None,
    };
    let start = Instant::now();
    cancel_after(&ctl.stop, c.runfor);
    let shandles = spawn_consumers(sconns, a.s.rdy, &ctl);
    let phandles = spawn_publishers(pconns, c, &a.p, start + c.runfor);
    let mut errors = Errors::default();
    let pt = join_all(phandles, "writer", &mut errors).await;
    let psecs = start.elapsed().as_secs_f64();
    let st = join_all(shandles, "reader", &mut errors).await;
    let ssecs = st.secs_since(start);
    human("pubsub publish", pt.msgs, pt.bytes, psecs);
    human("pubsub consume", st.msgs, st.bytes, ssecs);
    let mut v = json!({
        "mode": "pubsub", "topic": c.topic, "channel": a.s.channel,
        "writers": writers, "readers": readers, "batch_size": a.p.batch_size, "size": c.size,
        "pipeline": a.p.pipeline, "rdy": a.s.rdy,
        "pub": rates(pt.msgs, pt.bytes, psecs),
        "sub": rates(st.msgs, st.bytes, ssecs),
        "backlog": pt.msgs as i64 - st.msgs as i64,
        "server_error_frames": st.server_errors,
        "requeued_at_close": st.requeued,
    });
    if let Some(h) = &a.nsqd_http_address {
        match http::channel_depth(h, &c.topic, &a.s.channel, c.allow_remote).await {
            Ok(s) => {
                eprintln!("[nsq_bench] pubsub: final stats {s}");
                v["stats"] = s;
            }
            Err(e) => errors.add("stats", format!("{e:#}")),
        }
    }
    Ok(print_result(v, &errors))
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.mode {
        Mode::Pub(a) => run_pub(a).await,
        Mode::Sub(a) => run_sub(a).await,
        Mode::Pubsub(a) => run_pubsub(a).await,
        Mode::Latency(a) => latency::run(a).await,
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("[nsq_bench] fatal: {e:#}");
            ExitCode::from(2)
        }
    }
}

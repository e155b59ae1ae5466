//! nsq_bench: a load generator for any nsqd speaking the standard V2 TCP
//! protocol, modelled on NSQ's bench/bench_writer and bench/bench_reader.
//! Every mode ends with one machine-readable line `RESULT {json}` on stdout.

#![forbid(unsafe_code)]

mod conn;
mod defer;
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
use nsq_protocol::command::encode_mpub;
use serde_json::{json, Value};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::conn::{resolve, Conn};
use crate::workers::{consume, publish_loop, ConsumeCtl, Outcome};

nsq_cli::flags! {
    /// nsq_bench's flags, shared by its modes (each mode reads those it needs).
    pub struct Flags {
        /// <addr>:<port> of nsqd's TCP listener
        nsqd_tcp_address: String = "127.0.0.1:4150";
        /// topic to publish to / consume from
        topic: String = "sub_bench";
        /// size of each message body in bytes
        size: u32 = 200;
        /// duration of the run (Go duration syntax: 10s, 1m30s, 500ms)
        runfor: Duration = "10s";
        /// give up on a connection when nsqd sends nothing (or accepts no writes) for this long while a reply is due
        io_timeout: Duration = "30s";
        /// allow non-loopback nsqd addresses (by default only 127.0.0.0/8 and ::1 are used)
        allow_remote: bool = false;
        /// pub, pubsub: messages per MPUB
        batch_size: u32 = 200;
        /// pub, pubsub: publishing connections (0: the number of cores)
        writers: usize = 0;
        /// pub, pubsub: MPUBs in flight (sent, OK not yet read) per connection; 1 = bench_writer's strict request/response
        pipeline: u32 = 4;
        /// sub, pubsub, latency: channel to consume from
        channel: String = "ch";
        /// sub, pubsub: consuming connections (0: the number of cores)
        readers: usize = 0;
        /// sub, pubsub, latency: RDY count of each consuming connection
        rdy: u32 = 2500;
        /// sub: stop once this many messages were received in total (0: run for --runfor); defer: messages to DPUB (0: 100000)
        count: u64 = 0;
        /// sub, pubsub, latency: <addr>:<port> of nsqd's HTTP listener; if given, the final channel depth is read from /stats
        nsqd_http_address: String = "";
        /// defer: the delay of every DPUB
        defer: Duration = "60s";
        /// defer: sample this process's peak RSS (nsqd's pid; 0: none)
        watch_pid: u32 = 0;
        /// defer: sample this directory's peak size (nsqd's --data-path; empty: none)
        watch_dir: String = "";
        /// latency: messages per second to publish, spread evenly over --runfor
        rate: u64 = 1000;
        /// latency: shortest interval between two publish commands; when 1/rate is shorter, the messages due are sent as one MPUB per interval
        min_interval: Duration = "1ms";
        /// latency: largest MPUB sent (a publisher that falls behind catches up in batches up to this size)
        max_batch: u32 = 1000;
        /// latency: after publishing stops, wait at most this long for the consumer to receive every acknowledged message; defer: that long past the last due time
        drain_timeout: Duration = "5s";
        /// latency: latency samples kept (memory bound)
        max_samples: usize = 20000000;
    }
}

impl Flags {
    /// The ranges the modes need.
    fn check(&self) -> Result<()> {
        for (name, v, min, max) in [
            ("size", u64::from(self.size), 1, u64::from(u32::MAX)),
            (
                "batch-size",
                u64::from(self.batch_size),
                1,
                u64::from(u32::MAX),
            ),
            ("pipeline", u64::from(self.pipeline), 1, 1024),
            ("rdy", u64::from(self.rdy), 1, u64::from(u32::MAX)),
            ("rate", self.rate, 1, 10_000_000),
            (
                "max-batch",
                u64::from(self.max_batch),
                1,
                u64::from(u32::MAX),
            ),
        ] {
            if !(min..=max).contains(&v) {
                bail!("--{name} must be in [{min}, {max}]");
            }
        }
        Ok(())
    }

    fn writers(&self) -> usize {
        if self.writers == 0 {
            cores()
        } else {
            self.writers
        }
    }

    fn readers(&self) -> usize {
        if self.readers == 0 {
            cores()
        } else {
            self.readers
        }
    }

    /// `--count`, if given.
    fn count_limit(&self) -> Option<u64> {
        (self.count > 0).then_some(self.count)
    }

    /// `--nsqd-http-address`, if given.
    pub fn stats_address(&self) -> Option<&str> {
        (!self.nsqd_http_address.is_empty()).then_some(self.nsqd_http_address.as_str())
    }
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

pub(crate) async fn open_consumers(
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

fn spawn_publishers(conns: Vec<Conn>, f: &Flags, deadline: Instant) -> Vec<JoinHandle<Outcome>> {
    let (size, batch) = (f.size as usize, f.batch_size as usize);
    let cmd = mpub_command(&f.topic, size, batch);
    conns
        .into_iter()
        .map(|c| {
            tokio::spawn(publish_loop(
                c,
                cmd.clone(),
                batch as u64,
                (batch * size) as u64,
                f.pipeline as usize,
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

async fn run_pub(f: &Flags) -> Result<ExitCode> {
    let c = f;
    check_names(&c.topic, None)?;
    let addr = resolve(&c.nsqd_tcp_address, c.allow_remote).await?;
    let writers = f.writers();
    let conns = open_publishers(addr, writers, c.io_timeout).await?;
    eprintln!(
        "[nsq_bench] pub: {writers} writers, batch {} x {} bytes, pipeline {}, runfor {:?} -> {addr} topic {:?}",
        f.batch_size, c.size, f.pipeline, c.runfor, c.topic
    );
    let start = Instant::now();
    let handles = spawn_publishers(conns, f, start + c.runfor);
    let mut errors = Errors::default();
    let t = join_all(handles, "writer", &mut errors).await;
    let secs = start.elapsed().as_secs_f64();
    human("pub", t.msgs, t.bytes, secs);
    let v = json!({"mode": "pub", "topic": c.topic, "writers": writers, "batch_size": f.batch_size, "size": c.size, "pipeline": f.pipeline});
    Ok(print_result(
        merge(v, rates(t.msgs, t.bytes, secs)),
        &errors,
    ))
}

async fn run_sub(f: &Flags) -> Result<ExitCode> {
    let c = f;
    check_names(&c.topic, Some(&f.channel))?;
    let addr = resolve(&c.nsqd_tcp_address, c.allow_remote).await?;
    let readers = f.readers();
    let conns = open_consumers(addr, readers, c.io_timeout, &c.topic, &f.channel).await?;
    eprintln!(
        "[nsq_bench] sub: {readers} readers, rdy {}, runfor {:?}, count {:?} <- {addr} {:?}/{:?}",
        f.rdy,
        c.runfor,
        f.count_limit(),
        c.topic,
        f.channel
    );
    let ctl = ConsumeCtl {
        stop: CancellationToken::new(),
        total: Arc::new(AtomicU64::new(0)),
        limit: f.count_limit(),
    };
    let start = Instant::now();
    cancel_after(&ctl.stop, c.runfor);
    let handles = spawn_consumers(conns, f.rdy, &ctl);
    let mut errors = Errors::default();
    let t = join_all(handles, "reader", &mut errors).await;
    let secs = t.secs_since(start);
    ctl.stop.cancel();
    human("sub", t.msgs, t.bytes, secs);
    let mut v = json!({"mode": "sub", "topic": c.topic, "channel": f.channel, "readers": readers, "rdy": f.rdy, "count_limit": f.count_limit(), "server_error_frames": t.server_errors, "requeued_at_close": t.requeued});
    if let Some(h) = f.stats_address() {
        match http::channel_depth(h, &c.topic, &f.channel, c.allow_remote).await {
            Ok(s) => v["stats"] = s,
            Err(e) => errors.add("stats", format!("{e:#}")),
        }
    }
    Ok(print_result(
        merge(v, rates(t.msgs, t.bytes, secs)),
        &errors,
    ))
}

async fn run_pubsub(f: &Flags) -> Result<ExitCode> {
    let c = f;
    check_names(&c.topic, Some(&f.channel))?;
    let addr = resolve(&c.nsqd_tcp_address, c.allow_remote).await?;
    let writers = f.writers();
    let readers = f.readers();
    // Consumers subscribe first so the channel exists before the first publish.
    let sconns = open_consumers(addr, readers, c.io_timeout, &c.topic, &f.channel).await?;
    let pconns = open_publishers(addr, writers, c.io_timeout).await?;
    eprintln!(
        "[nsq_bench] pubsub: {writers} writers (batch {} x {} bytes, pipeline {}), {readers} readers (rdy {}), runfor {:?} on {addr} {:?}/{:?}",
        f.batch_size, c.size, f.pipeline, f.rdy, c.runfor, c.topic, f.channel
    );
    let ctl = ConsumeCtl {
        stop: CancellationToken::new(),
        total: Arc::new(AtomicU64::new(0)),
        limit: None,
    };
    let start = Instant::now();
    cancel_after(&ctl.stop, c.runfor);
    let shandles = spawn_consumers(sconns, f.rdy, &ctl);
    let phandles = spawn_publishers(pconns, f, start + c.runfor);
    let mut errors = Errors::default();
    let pt = join_all(phandles, "writer", &mut errors).await;
    let psecs = start.elapsed().as_secs_f64();
    let st = join_all(shandles, "reader", &mut errors).await;
    let ssecs = st.secs_since(start);
    human("pubsub publish", pt.msgs, pt.bytes, psecs);
    human("pubsub consume", st.msgs, st.bytes, ssecs);
    let mut v = json!({
        "mode": "pubsub", "topic": c.topic, "channel": f.channel,
        "writers": writers, "readers": readers, "batch_size": f.batch_size, "size": c.size,
        "pipeline": f.pipeline, "rdy": f.rdy,
        "pub": rates(pt.msgs, pt.bytes, psecs),
        "sub": rates(st.msgs, st.bytes, ssecs),
        "backlog": pt.msgs as i64 - st.msgs as i64,
        "server_error_frames": st.server_errors,
        "requeued_at_close": st.requeued,
    });
    if let Some(h) = f.stats_address() {
        match http::channel_depth(h, &c.topic, &f.channel, c.allow_remote).await {
            Ok(s) => {
                eprintln!("[nsq_bench] pubsub: final stats {s}");
                v["stats"] = s;
            }
            Err(e) => errors.add("stats", format!("{e:#}")),
        }
    }
    Ok(print_result(v, &errors))
}

const MODES: &str = "<pub|sub|pubsub|latency|defer>";

#[tokio::main]
async fn main() -> ExitCode {
    let argv = nsq_cli::flags::args();
    let name = format!("nsq_bench {MODES}");
    let mode = argv.get(1).cloned().unwrap_or_default();
    let rest = argv.get(2..).unwrap_or_default();
    let f = match mode.as_str() {
        "pub" | "sub" | "pubsub" | "latency" | "defer" => {
            nsq_cli::flags::parse::<Flags>(&name, rest).unwrap_or_else(|e| e.exit())
        }
        "-h" | "-help" | "--help" => {
            nsq_cli::flags::Exit::Help(nsq_cli::flags::usage::<Flags>(&name)).exit()
        }
        m => nsq_cli::flags::Exit::Error(format!(
            "unknown mode {m:?}: {MODES}\n{}",
            nsq_cli::flags::usage::<Flags>(&name)
        ))
        .exit(),
    }
    .flags;
    let r = match f.check() {
        Err(e) => Err(e),
        Ok(()) => match mode.as_str() {
            "pub" => run_pub(&f).await,
            "sub" => run_sub(&f).await,
            "pubsub" => run_pubsub(&f).await,
            "defer" => defer::run(&f).await,
            _ => latency::run(&f).await,
        },
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("[nsq_bench] fatal: {e:#}");
            ExitCode::from(2)
        }
    }
}

//! `defer` mode: `--count` messages DPUBed with `--defer` into one channel
//! (its consumers subscribed first, so every copy waits in the channel),
//! then consumed as they come due. Checks that each is delivered once and
//! none before its due time, and reports how late they were and when the
//! last arrived; with `--watch-pid` / `--watch-dir` also nsqd's peak RSS
//! and the data directory's peak size (the "day of deferrals" measurement
//! of `--deferred-spill`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Result};
use bytes::BytesMut;
use nsq_protocol::command::{encode_body, encode_line};
use nsq_protocol::frame::{FrameType, HEARTBEAT, OK};
use nsq_protocol::message::Message;
use serde_json::json;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::conn::{resolve, show, Conn};
use crate::workers::{consume, unix_ns, ConsumeCtl};
use crate::{open_consumers, print_result, r3, Errors, Flags};

/// Body header: sequence number, due time (Unix ns).
const HDR: usize = 16;

/// What the consumers saw.
#[derive(Default)]
struct Seen {
    seen: Vec<bool>,
    unique: u64,
    dups: u64,
    early: u64,
    foreign: u64,
    /// Receipt minus due time, in ms, per delivery.
    late_ms: Vec<f64>,
    last_receipt: i64,
}

impl Seen {
    fn on_msg(&mut self, m: &Message, now: i64) {
        let b = &m.body;
        let (Some(seq), Some(due)) = (
            b.get(0..8)
                .and_then(|s| s.try_into().ok())
                .map(u64::from_be_bytes),
            b.get(8..16)
                .and_then(|s| s.try_into().ok())
                .map(i64::from_be_bytes),
        ) else {
            self.foreign += 1;
            return;
        };
        let Some(slot) = self.seen.get_mut(seq as usize) else {
            self.foreign += 1;
            return;
        };
        if *slot {
            self.dups += 1;
            return;
        }
        *slot = true;
        self.unique += 1;
        if now < due {
            self.early += 1;
        }
        self.late_ms.push((now - due) as f64 / 1e6);
        self.last_receipt = self.last_receipt.max(now);
    }
}

/// Peak RSS (KiB) of a process and peak size (bytes) of a directory.
#[derive(Default, Clone, Copy)]
struct Peaks {
    rss_kib: u64,
    dir_bytes: u64,
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// Samples every 100 ms until `stop`.
fn watch(
    pid: Option<u32>,
    dir: Option<PathBuf>,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<Peaks> {
    tokio::spawn(async move {
        let mut p = Peaks::default();
        loop {
            if let Some(pid) = pid {
                p.rss_kib = p.rss_kib.max(rss_kib(pid));
            }
            if let Some(d) = &dir {
                p.dir_bytes = p.dir_bytes.max(dir_bytes(d));
            }
            tokio::select! {
                _ = stop.cancelled() => return p,
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
    })
}

/// DPUBs `count` messages on one connection with `pipeline` in flight.
async fn publish(mut conn: Conn, f: &Flags, count: u64) -> Result<u64> {
    let defer_ms = f.defer.as_millis() as i64;
    let defer_arg = defer_ms.to_string();
    let size = (f.size as usize).max(HDR);
    let mut body = vec![b'x'; size];
    let (mut sent, mut acked, mut outstanding) = (0u64, 0u64, 0usize);
    loop {
        while sent < count && outstanding < f.pipeline as usize {
            let due = unix_ns() + defer_ms * 1_000_000;
            body[0..8].copy_from_slice(&sent.to_be_bytes());
            body[8..16].copy_from_slice(&due.to_be_bytes());
            let buf: &mut BytesMut = &mut conn.wbuf;
            encode_line(buf, "DPUB", &[&f.topic, &defer_arg]);
            encode_body(buf, &body);
            sent += 1;
            outstanding += 1;
        }
        conn.flush().await?;
        if outstanding == 0 {
            return Ok(acked);
        }
        let fr = conn.read_frame().await?;
        match fr.frame_type {
            FrameType::Response if &fr.data[..] == OK => {
                outstanding -= 1;
                acked += 1;
            }
            FrameType::Response if fr.data == HEARTBEAT => {
                encode_line(&mut conn.wbuf, "NOP", &[]);
            }
            FrameType::Response => bail!("unexpected response to DPUB: {:?}", show(&fr.data)),
            FrameType::Error => bail!("DPUB failed: {}", show(&fr.data)),
            FrameType::Message => bail!("unexpected message frame on a publishing connection"),
        }
    }
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

pub async fn run(f: &Flags) -> Result<ExitCode> {
    let count = f.count_limit().unwrap_or(100_000);
    let addr = resolve(&f.nsqd_tcp_address, f.allow_remote).await?;
    let stop_watch = CancellationToken::new();
    let watcher = watch(
        (f.watch_pid > 0).then_some(f.watch_pid),
        (!f.watch_dir.is_empty()).then(|| PathBuf::from(&f.watch_dir)),
        stop_watch.clone(),
    );
    let readers = f.readers();
    let conns = open_consumers(addr, readers, f.io_timeout, &f.topic, &f.channel).await?;
    let ctl = ConsumeCtl {
        stop: CancellationToken::new(),
        total: Arc::new(AtomicU64::new(0)),
        limit: Some(count),
    };
    let seen = Arc::new(Mutex::new(Seen {
        seen: vec![false; count as usize],
        late_ms: Vec::with_capacity(count as usize),
        ..Seen::default()
    }));
    let mut handles = Vec::new();
    for c in conns {
        let seen = seen.clone();
        handles.push(tokio::spawn(consume(
            c,
            f.rdy,
            ctl.clone(),
            move |m, now| {
                seen.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .on_msg(m, now)
            },
        )));
    }
    let start = Instant::now();
    let start_ns = unix_ns();
    let mut pconn = Conn::connect(addr, f.io_timeout).await?;
    pconn.identify("writer").await?;
    let mut errors = Errors::default();
    let acked = match publish(pconn, f, count).await {
        Ok(n) => n,
        Err(e) => {
            errors.add("publisher", format!("{e:#}"));
            0
        }
    };
    let pub_secs = start.elapsed().as_secs_f64();
    eprintln!("[nsq_bench] defer: {acked} DPUBs acknowledged in {pub_secs:.1} s");
    // the last message is due --defer after the last publish; give up
    // --drain-timeout after that
    let give_up = f.defer + f.drain_timeout;
    let stop = ctl.stop.clone();
    tokio::select! {
        _ = stop.cancelled() => {}
        _ = tokio::time::sleep(give_up) => {
            errors.add("consumer", format!("not every message arrived within {give_up:?} of the last publish"));
            stop.cancel();
        }
    }
    for h in handles {
        match h.await {
            Ok((o, _)) => {
                if let Some(e) = o.error {
                    errors.add("consumer", e);
                }
            }
            Err(e) => errors.add("consumer", format!("task failed: {e}")),
        }
    }
    stop_watch.cancel();
    let peaks = watcher.await.unwrap_or_default();
    let mut s = std::mem::take(&mut *seen.lock().unwrap_or_else(|e| e.into_inner()));
    if s.unique < acked {
        errors.add(
            "consumer",
            format!("{} of {acked} acknowledged messages delivered", s.unique),
        );
    }
    if s.early > 0 {
        errors.add(
            "consumer",
            format!("{} messages delivered before they were due", s.early),
        );
    }
    s.late_ms
        .sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let all_secs = (s.last_receipt - start_ns) as f64 / 1e9;
    eprintln!(
        "[nsq_bench] defer: {} delivered ({} duplicates, {} early), all by {all_secs:.1} s; late p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; peak RSS {} KiB, peak data dir {:.1} MiB",
        s.unique,
        s.dups,
        s.early,
        percentile(&s.late_ms, 0.5),
        percentile(&s.late_ms, 0.99),
        s.late_ms.last().copied().unwrap_or(0.0),
        peaks.rss_kib,
        peaks.dir_bytes as f64 / 1048576.0
    );
    let v = json!({
        "mode": "defer", "topic": f.topic, "channel": f.channel, "count": count,
        "defer_ms": f.defer.as_millis() as u64, "size": f.size, "pipeline": f.pipeline,
        "readers": readers, "rdy": f.rdy,
        "acknowledged": acked, "publish_secs": r3(pub_secs),
        "delivered": s.unique, "duplicates": s.dups, "early": s.early, "foreign": s.foreign,
        "all_delivered_secs": r3(all_secs),
        "late_ms": {"min": r3(s.late_ms.first().copied().unwrap_or(0.0)), "p50": r3(percentile(&s.late_ms, 0.5)), "p99": r3(percentile(&s.late_ms, 0.99)), "max": r3(s.late_ms.last().copied().unwrap_or(0.0))},
        "peak_rss_kib": peaks.rss_kib, "peak_data_dir_bytes": peaks.dir_bytes,
    });
    Ok(print_result(v, &errors))
}

//! The two connection loops shared by the modes: a pipelined MPUB publisher
//! (bench_writer shape) and a FIN-everything consumer (bench_reader shape).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use bytes::Bytes;
use nsq_protocol::command::encode_line;
use nsq_protocol::frame::{decode_frame, FrameType, CLOSE_WAIT, HEARTBEAT, OK};
use nsq_protocol::message::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::conn::{id_str, read_frame_from, show, Conn, MAX_FRAME, READ_CHUNK};

/// What one connection achieved, and how it ended.
#[derive(Debug, Default)]
pub struct Outcome {
    pub msgs: u64,
    pub bytes: u64,
    /// Error frames that did not end the connection (e.g. E_FIN_FAILED).
    pub server_errors: u64,
    /// The last error frame received.
    pub last_server_error: Option<String>,
    /// Messages that arrived after the stop and were handed back with REQ.
    pub requeued: u64,
    /// When the measured part ended (before the graceful close).
    pub ended: Option<Instant>,
    pub error: Option<String>,
}

/// Publishes the pre-encoded command `cmd` (carrying `per_cmd` messages of
/// `per_cmd_bytes` body bytes) with at most `pipeline` commands awaiting
/// their OK, until `deadline`; then waits for the outstanding OKs. Only
/// acknowledged messages are counted.
pub async fn publish_loop(
    mut conn: Conn,
    cmd: Bytes,
    per_cmd: u64,
    per_cmd_bytes: u64,
    pipeline: usize,
    deadline: Instant,
) -> Outcome {
    let mut out = Outcome::default();
    let r = publish_inner(
        &mut conn,
        &cmd,
        per_cmd,
        per_cmd_bytes,
        pipeline,
        deadline,
        &mut out,
    )
    .await;
    if let Err(e) = r {
        out.error = Some(match conn.pending_error().await {
            Some(frame) => format!("{e:#} (nsqd sent: {frame})"),
            None => format!("{e:#}"),
        });
    }
    out
}

async fn publish_inner(
    conn: &mut Conn,
    cmd: &[u8],
    per_cmd: u64,
    per_cmd_bytes: u64,
    pipeline: usize,
    deadline: Instant,
    out: &mut Outcome,
) -> Result<()> {
    let mut outstanding = 0usize;
    loop {
        if Instant::now() < deadline {
            while outstanding < pipeline {
                conn.wbuf.extend_from_slice(cmd);
                outstanding += 1;
            }
            conn.flush().await?;
        }
        if outstanding == 0 {
            return Ok(());
        }
        let f = conn.read_frame().await?;
        match f.frame_type {
            FrameType::Response if &f.data[..] == OK => {
                outstanding -= 1;
                out.msgs += per_cmd;
                out.bytes += per_cmd_bytes;
            }
            FrameType::Response if f.data == HEARTBEAT => {
                encode_line(&mut conn.wbuf, "NOP", &[]);
                conn.flush().await?;
            }
            FrameType::Response => bail!("unexpected response to MPUB: {:?}", show(&f.data)),
            FrameType::Error => bail!("MPUB failed: {}", show(&f.data)),
            FrameType::Message => bail!("unexpected message frame on a publishing connection"),
        }
    }
}

/// Shared stop conditions of a group of consumers.
#[derive(Clone)]
pub struct ConsumeCtl {
    pub stop: CancellationToken,
    /// Messages received by the whole group.
    pub total: Arc<AtomicU64>,
    /// Cancel `stop` once `total` reaches this.
    pub limit: Option<u64>,
}

/// Sends `RDY rdy`, then reads until `ctl.stop`: every message is FINed
/// (all FINs of one read go out in one write), heartbeats get a NOP.
/// `on_msg(msg, receipt_unix_ns)` sees each message. Returns the callback
/// so callers can take back its state.
pub async fn consume<F: FnMut(&Message, i64)>(
    mut conn: Conn,
    rdy: u32,
    ctl: ConsumeCtl,
    mut on_msg: F,
) -> (Outcome, F) {
    let mut out = Outcome::default();
    let mut r = consume_inner(&mut conn, rdy, &ctl, &mut on_msg, &mut out).await;
    out.ended = Some(Instant::now());
    if r.is_ok() {
        r = close_gracefully(&mut conn, &mut out).await;
    }
    if let Err(e) = r {
        out.error = Some(match &out.last_server_error {
            Some(frame) => format!("{e:#} (last error frame: {frame})"),
            None => format!("{e:#}"),
        });
    }
    (out, on_msg)
}

pub fn unix_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

async fn consume_inner<F: FnMut(&Message, i64)>(
    conn: &mut Conn,
    rdy: u32,
    ctl: &ConsumeCtl,
    on_msg: &mut F,
    out: &mut Outcome,
) -> Result<()> {
    encode_line(&mut conn.wbuf, "RDY", &[&rdy.to_string()]);
    conn.flush().await?;
    let stop = &ctl.stop;
    loop {
        conn.rbuf.reserve(READ_CHUNK);
        let n = tokio::select! {
            biased;
            _ = stop.cancelled() => return Ok(()),
            r = conn.stream.read_buf(&mut conn.rbuf) => r.map_err(|e| anyhow!("reading from nsqd: {e}"))?,
        };
        if n == 0 {
            bail!("nsqd closed the connection");
        }
        let now = unix_ns();
        let mut batch = 0u64;
        while let Some(f) = decode_frame(&mut conn.rbuf, MAX_FRAME)
            .map_err(|e| anyhow!("bad frame from nsqd: {e}"))?
        {
            match f.frame_type {
                FrameType::Message => {
                    let m = Message::decode(f.data)
                        .map_err(|e| anyhow!("bad message from nsqd: {e}"))?;
                    encode_line(&mut conn.wbuf, "FIN", &[id_str(m.id.as_bytes())?]);
                    batch += 1;
                    out.bytes += m.body.len() as u64;
                    on_msg(&m, now);
                }
                FrameType::Response if f.data == HEARTBEAT => {
                    encode_line(&mut conn.wbuf, "NOP", &[])
                }
                FrameType::Response => {} // OK / CLOSE_WAIT
                FrameType::Error => {
                    out.server_errors += 1;
                    if out.server_errors <= 3 {
                        eprintln!("[nsq_bench] consumer got error frame: {}", show(&f.data));
                    }
                    out.last_server_error = Some(show(&f.data));
                }
            }
        }
        // Every counted message gets its FIN, even when stopping.
        conn.flush().await?;
        out.msgs += batch;
        let prev = ctl.total.fetch_add(batch, Ordering::Relaxed);
        if let Some(limit) = ctl.limit {
            if prev + batch >= limit {
                stop.cancel();
            }
        }
    }
}

/// Ends a consuming connection without leaving messages stranded in flight:
/// `CLS`, then until `CLOSE_WAIT` (at most 2 s) and for 20 ms of quiet after
/// it, every message still arriving is given back with `REQ <id> 0`. Then
/// the write side is shut down.
async fn close_gracefully(conn: &mut Conn, out: &mut Outcome) -> Result<()> {
    encode_line(&mut conn.wbuf, "CLS", &[]);
    conn.flush().await?;
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut close_wait = false;
    loop {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        let wait = if close_wait {
            Duration::from_millis(20)
        } else {
            deadline - now
        };
        let f = match tokio::time::timeout(
            wait,
            read_frame_from(&mut conn.stream, &mut conn.rbuf, wait),
        )
        .await
        {
            Ok(Ok(f)) => f,
            Ok(Err(_)) | Err(_) => break,
        };
        match f.frame_type {
            FrameType::Message => {
                let m =
                    Message::decode(f.data).map_err(|e| anyhow!("bad message from nsqd: {e}"))?;
                encode_line(&mut conn.wbuf, "REQ", &[id_str(m.id.as_bytes())?, "0"]);
                out.requeued += 1;
            }
            FrameType::Response if f.data == CLOSE_WAIT => close_wait = true,
            FrameType::Response if f.data == HEARTBEAT => encode_line(&mut conn.wbuf, "NOP", &[]),
            FrameType::Response => {}
            FrameType::Error => {
                out.server_errors += 1;
                out.last_server_error = Some(show(&f.data));
            }
        }
        conn.flush().await?;
    }
    let _ = conn.stream.shutdown().await;
    Ok(())
}

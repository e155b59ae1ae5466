//! The writer: one task per connection that takes everything queued in
//! its client's outbox (frames already encoded by whoever queued them) and
//! writes it with one syscall, as soon as it is woken; what arrives
//! meanwhile is the next batch. So a busy client gets large batched writes
//! and an idle one gets each message at once; Go nsqd's
//! `output_buffer_timeout` (250 ms) is never waited for, and
//! `output_buffer_size` only sizes the writer's first buffer. It also sends
//! the heartbeats, and carries out the outbox's controls (new settings, the
//! TLS hand-over, compression, close) at their place in the stream.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use nsq_protocol::compress::Encoder;
use nsq_protocol::frame::{encode_frame, FrameType, HEARTBEAT};
use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;

use crate::server::outbox::{Control, Outbox, WriterSettings};
use crate::server::transport::{self, Writer};

/// The writer's output stage: the plain frames of a batch go out as they
/// are, or through the compressor (one compressed batch) once negotiated.
struct Output {
    wire: BytesMut,
    encoder: Option<Encoder>,
    /// The socket, to make its close abortive when a write times out.
    fd: std::os::fd::RawFd,
}

impl Output {
    /// One write of `data` (compressed as one batch), bounded by the
    /// heartbeat interval as nsqd's write deadline. False if the client is
    /// gone or too slow.
    async fn write(&mut self, wr: &mut Writer, data: &[u8], heartbeat_ms: Option<i64>) -> bool {
        if data.is_empty() {
            return true;
        }
        let data: &[u8] = match self.encoder.as_mut() {
            None => data,
            Some(e) => {
                self.wire.clear();
                if let Err(err) = e.encode(data, &mut self.wire) {
                    tracing::error!(error = %err, "compression failed");
                    return false;
                }
                &self.wire
            }
        };
        let write = async {
            wr.write_all(data).await?;
            // TLS may hold the last record until flushed.
            wr.flush().await
        };
        match heartbeat_ms {
            Some(ms) => match tokio::time::timeout(Duration::from_millis(ms as u64), write).await {
                Ok(r) => r.is_ok(),
                Err(_) => {
                    // a client that stopped reading: reset, don't linger
                    transport::abort_on_close(self.fd);
                    false
                }
            },
            None => write.await.is_ok(),
        }
    }
}

/// Writes frames for one client; see the module docs for the flush rule.
pub async fn write_loop(
    wr: Writer,
    fd: std::os::fd::RawFd,
    outbox: Arc<Outbox>,
    settings: WriterSettings,
    closer: CancellationToken,
) {
    write_batches(wr, fd, &outbox, settings, &closer).await;
    outbox.writer_gone();
    closer.cancel();
}

async fn write_batches(
    mut wr: Writer,
    fd: std::os::fd::RawFd,
    outbox: &Outbox,
    mut settings: WriterSettings,
    closer: &CancellationToken,
) {
    let mut out = Output {
        wire: BytesMut::new(),
        encoder: None,
        fd,
    };
    let mut frames = BytesMut::with_capacity(settings.output_buffer_size.max(4096));
    let mut controls = Vec::new();
    let mut heartbeat = new_heartbeat(settings.heartbeat_ms);
    loop {
        let tick = async {
            match heartbeat.as_mut() {
                Some(h) => {
                    h.tick().await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            _ = closer.cancelled() => return,
            _ = outbox.ready() => {}
            _ = tick => {
                let mut hb = BytesMut::with_capacity(8 + HEARTBEAT.len());
                encode_frame(&mut hb, FrameType::Response, HEARTBEAT);
                if !out.write(&mut wr, &hb, settings.heartbeat_ms).await {
                    return;
                }
                continue;
            }
        }
        let taken = outbox.take(&mut frames, &mut controls);
        let mut pos = 0;
        for (at, control) in controls.drain(..) {
            if !out
                .write(&mut wr, &frames[pos..at], settings.heartbeat_ms)
                .await
            {
                return;
            }
            pos = at;
            match control {
                Control::Settings(s) => {
                    if s.heartbeat_ms != settings.heartbeat_ms {
                        heartbeat = new_heartbeat(s.heartbeat_ms);
                    }
                    settings = s;
                }
                // The reader upgrades the socket; nothing is written until
                // it hands the new half back.
                Control::Detach { give, take } => {
                    if give.send(wr).is_err() {
                        return;
                    }
                    match take.await {
                        Ok(w) => wr = w,
                        Err(_) => return,
                    }
                }
                Control::Compress(e) => out.encoder = Some(*e),
                Control::Close => {
                    let _ = wr.shutdown().await;
                    return;
                }
            }
        }
        if !out
            .write(&mut wr, &frames[pos..], settings.heartbeat_ms)
            .await
        {
            return;
        }
        frames.clear();
        if frames.capacity() > MAX_IDLE_BUFFER {
            // a burst for a slow reader grew it; don't keep that per client
            frames = BytesMut::with_capacity(settings.output_buffer_size.max(4096));
        }
        if taken.last {
            let _ = wr.shutdown().await;
            return;
        }
    }
}

/// Largest output buffer a writer keeps between batches.
const MAX_IDLE_BUFFER: usize = 1 << 20;

fn new_heartbeat(ms: Option<i64>) -> Option<tokio::time::Interval> {
    ms.map(|ms| {
        let period = Duration::from_millis(ms.max(1) as u64);
        let mut i = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        i
    })
}

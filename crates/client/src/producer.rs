//! [`Producer`]: publishes to one nsqd over one TCP connection.
//!
//! Callers may publish concurrently. Every request goes to the connection's
//! task through a queue; the task writes it and remembers its reply slot in a
//! FIFO. nsqd answers commands strictly in order, so each `OK` or error frame
//! completes the oldest outstanding request. Heartbeats are answered with
//! `NOP`. When the connection fails, every outstanding request fails with
//! [`PublishError::Disconnected`] and the next publish dials again (go-nsq
//! behaves the same way).
//!
//! The producer never SUBscribes, so a message frame on its connection is a
//! protocol violation and drops the connection.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use nsq_protocol::command::{encode_body, encode_line, encode_mpub};
use nsq_protocol::frame::{FrameType, HEARTBEAT};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::conn::{self, Handshake};
use crate::error::PublishError;

type Reply = oneshot::Sender<Result<(), PublishError>>;

/// One command for the connection task; `reply` is `None` for commands nsqd
/// does not answer (NOP).
struct Request {
    cmd: Bytes,
    reply: Option<Reply>,
}

/// The live connection, as seen by publishers.
struct ConnHandle {
    tx: mpsc::Sender<Request>,
    cancel: CancellationToken,
}

struct Inner {
    addr: String,
    config: Config,
    /// Held across a connect so concurrent publishers dial once.
    conn: tokio::sync::Mutex<Option<ConnHandle>>,
    stopped: AtomicBool,
}

/// A publisher bound to one nsqd TCP address. Cheap to clone; clones share
/// the connection. The connection is opened by the first publish (or
/// [`Producer::ping`]).
#[derive(Clone)]
pub struct Producer {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("addr", &self.inner.addr)
            .finish()
    }
}

impl Producer {
    /// A producer for nsqd's TCP address `addr` (`host:port`). Does not connect yet.
    pub fn new(
        addr: impl Into<String>,
        config: Config,
    ) -> Result<Producer, crate::config::ConfigError> {
        config.validate()?;
        Ok(Producer {
            inner: Arc::new(Inner {
                addr: addr.into(),
                config,
                conn: tokio::sync::Mutex::new(None),
                stopped: AtomicBool::new(false),
            }),
        })
    }

    /// The nsqd address this producer publishes to.
    pub fn addr(&self) -> &str {
        &self.inner.addr
    }

    /// `PUB`: publishes one message and waits for nsqd's `OK`.
    pub async fn publish(&self, topic: &str, body: impl AsRef<[u8]>) -> Result<(), PublishError> {
        let body = body.as_ref();
        let mut buf = BytesMut::with_capacity(16 + topic.len() + body.len());
        encode_line(&mut buf, "PUB", &[topic]);
        encode_body(&mut buf, body);
        self.request(buf.freeze()).await
    }

    /// `MPUB`: publishes several messages atomically (all or none).
    pub async fn multi_publish<B: AsRef<[u8]>>(
        &self,
        topic: &str,
        bodies: &[B],
    ) -> Result<(), PublishError> {
        let mut buf = BytesMut::new();
        encode_mpub(&mut buf, topic, bodies);
        self.request(buf.freeze()).await
    }

    /// `DPUB`: publishes one message that becomes visible after `delay`
    /// (millisecond resolution, truncated like go-nsq).
    pub async fn deferred_publish(
        &self,
        topic: &str,
        delay: Duration,
        body: impl AsRef<[u8]>,
    ) -> Result<(), PublishError> {
        let body = body.as_ref();
        let ms = delay.as_millis().to_string();
        let mut buf = BytesMut::with_capacity(24 + topic.len() + body.len());
        encode_line(&mut buf, "DPUB", &[topic, &ms]);
        encode_body(&mut buf, body);
        self.request(buf.freeze()).await
    }

    /// Connects if needed and sends `NOP` (no answer is expected).
    pub async fn ping(&self) -> Result<(), PublishError> {
        let tx = self.sender().await?;
        tx.send(Request {
            cmd: conn::line("NOP", &[]),
            reply: None,
        })
        .await
        .map_err(|_| PublishError::Disconnected("connection closed".into()))
    }

    /// Closes the connection; outstanding and later publishes fail with
    /// [`PublishError::Stopped`].
    pub async fn stop(&self) {
        self.inner.stopped.store(true, Ordering::SeqCst);
        if let Some(h) = self.inner.conn.lock().await.take() {
            h.cancel.cancel();
        }
        tracing::info!(nsqd = %self.inner.addr, "producer stopped");
    }

    async fn request(&self, cmd: Bytes) -> Result<(), PublishError> {
        let tx = self.sender().await?;
        let (reply, answer) = oneshot::channel();
        tx.send(Request {
            cmd,
            reply: Some(reply),
        })
        .await
        .map_err(|_| PublishError::Disconnected("connection closed".into()))?;
        answer
            .await
            .unwrap_or_else(|_| Err(PublishError::Disconnected("connection closed".into())))
    }

    /// The live connection's queue, dialling first when there is none.
    async fn sender(&self) -> Result<mpsc::Sender<Request>, PublishError> {
        if self.inner.stopped.load(Ordering::SeqCst) {
            return Err(PublishError::Stopped);
        }
        let mut guard = self.inner.conn.lock().await;
        if self.inner.stopped.load(Ordering::SeqCst) {
            return Err(PublishError::Stopped);
        }
        if let Some(h) = guard.as_ref() {
            if !h.tx.is_closed() {
                return Ok(h.tx.clone());
            }
        }
        tracing::info!(nsqd = %self.inner.addr, "producer connecting");
        let hs = conn::connect(&self.inner.addr, &self.inner.config).await?;
        let (tx, rx) = mpsc::channel(1024);
        let cancel = CancellationToken::new();
        tokio::spawn(run_conn(
            hs,
            rx,
            self.inner.config.clone(),
            self.inner.addr.clone(),
            cancel.clone(),
        ));
        *guard = Some(ConnHandle {
            tx: tx.clone(),
            cancel,
        });
        Ok(tx)
    }
}

/// The connection task: writes requests, matches replies in order, answers
/// heartbeats, and fails everything outstanding when it ends.
///
/// Every error nsqd can answer a PUB/MPUB/DPUB with is fatal (nsqd closes
/// the socket after it), so an error frame ends the connection here too:
/// the queue is closed *before* the caller learns the error, so its next
/// publish dials a new connection instead of racing the dying one.
async fn run_conn(
    mut hs: Handshake,
    mut rx: mpsc::Receiver<Request>,
    cfg: Config,
    addr: String,
    cancel: CancellationToken,
) {
    let mut pending: VecDeque<Reply> = VecDeque::new();
    let mut read_deadline = Instant::now() + cfg.read_timeout;
    let mut out = BytesMut::new();
    // Why the connection ends, and the request whose error frame ended it.
    let (why, failed): (PublishError, Option<(Reply, String)>) = loop {
        tokio::select! {
            _ = cancel.cancelled() => break (PublishError::Stopped, None),
            _ = tokio::time::sleep_until(read_deadline) => {
                break (PublishError::Disconnected(format!("no data from nsqd for {:?}", cfg.read_timeout)), None);
            }
            req = rx.recv() => {
                let Some(first) = req else { break (PublishError::Stopped, None) };
                // Batch whatever else is queued into one write.
                out.clear();
                let mut next = Some(first);
                while let Some(r) = next {
                    out.extend_from_slice(&r.cmd);
                    // Queued before the write so a failed write fails them too.
                    pending.extend(r.reply);
                    next = if out.len() < 256 * 1024 { rx.try_recv().ok() } else { None };
                }
                if let Err(e) = conn::write_all(&mut hs.writer, &out, cfg.write_timeout).await {
                    break (PublishError::Disconnected(format!("write: {e}")), None);
                }
            }
            frame = hs.reader.next() => {
                let frame = match frame {
                    Ok(f) => f,
                    Err(e) => break (PublishError::Disconnected(e.to_string()), None),
                };
                read_deadline = Instant::now() + cfg.read_timeout;
                let text = String::from_utf8_lossy(&frame.data).into_owned();
                match frame.frame_type {
                    FrameType::Response if frame.data[..] == *HEARTBEAT => {
                        if let Err(e) = conn::write_all(&mut hs.writer, b"NOP\n", cfg.write_timeout).await {
                            break (PublishError::Disconnected(format!("write: {e}")), None);
                        }
                    }
                    FrameType::Response => match pending.pop_front() {
                        Some(reply) => {
                            let _ = reply.send(Ok(()));
                        }
                        None => {
                            tracing::error!(nsqd = %addr, frame = %text, "response with nothing outstanding");
                            break (PublishError::Disconnected(format!("unexpected response: {text}")), None);
                        }
                    },
                    FrameType::Error => match pending.pop_front() {
                        Some(reply) => {
                            break (PublishError::Disconnected(format!("nsqd error: {text}")), Some((reply, text)));
                        }
                        None => {
                            tracing::error!(nsqd = %addr, frame = %text, "error with nothing outstanding");
                            break (PublishError::Disconnected(format!("nsqd error: {text}")), None);
                        }
                    },
                    FrameType::Message => {
                        tracing::error!(nsqd = %addr, "message frame on a producer connection");
                        break (PublishError::Disconnected("unexpected message frame".into()), None);
                    }
                }
            }
        }
    };
    rx.close();
    tracing::info!(nsqd = %addr, reason = %why, outstanding = pending.len(), "producer connection closed");
    if let Some((reply, text)) = failed {
        let _ = reply.send(Err(PublishError::Protocol(text)));
    }
    let fail = |reply: Reply| {
        let e = match &why {
            PublishError::Stopped => PublishError::Stopped,
            PublishError::Disconnected(reason) => PublishError::Disconnected(reason.clone()),
            other => PublishError::Disconnected(other.to_string()),
        };
        let _ = reply.send(Err(e));
    };
    pending.into_iter().for_each(fail);
    while let Ok(r) = rx.try_recv() {
        if let Some(reply) = r.reply {
            fail(reply);
        }
    }
}

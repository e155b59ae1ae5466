//! A member's connection to one peer, shared by all of its groups: calls
//! are framed with a request id, written by one writer task and paired
//! with their answers by one reader task. Never: Raft logic or listening.
//!
//! The connection is opened by the first call and again by the first call
//! after it broke; a broken connection fails the calls waiting on it at
//! once (openraft retries and backs off). A new connection carries the
//! member's hello first (`hello.rs`); a peer that refuses it is never
//! sent anything else.

use std::collections::HashMap;
use std::io;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::io::AsyncRead;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use super::frame::{self, Frame, Reply, Rpc};
use super::hello::{Greeting, Probed, Speaks};
use super::stream::{read_frames, write_frames, Io};
use crate::GroupId;

/// Why a call got no answer.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("connecting to {addr}: {err}")]
    Connect { addr: String, err: io::Error },
    #[error("no answer from {0} within {1:?}")]
    Timeout(String, Duration),
    #[error("connection to {0} closed before the answer")]
    Closed(String),
    #[error("encoding the request: {0}")]
    Encode(#[from] frame::FrameError),
    #[error("peer has no group {0}")]
    NoGroup(GroupId),
    #[error("{addr} refused this member: {why}")]
    Refused { addr: String, why: String },
    #[error("{0}")]
    Abstained(String),
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Frame>>>>;

struct Conn {
    frames: mpsc::UnboundedSender<Bytes>,
    pending: Pending,
    broken: Arc<AtomicBool>,
}

/// One peer, by address.
pub struct Peer {
    addr: String,
    tls: Option<Arc<rustls::ClientConfig>>,
    connect_timeout: Duration,
    greeting: Arc<Greeting>,
    conn: tokio::sync::Mutex<Option<Arc<Conn>>>,
    next_id: AtomicU64,
}

impl Peer {
    pub fn new(
        addr: String,
        tls: Option<Arc<rustls::ClientConfig>>,
        connect_timeout: Duration,
        greeting: Arc<Greeting>,
    ) -> Peer {
        Peer {
            addr,
            tls,
            connect_timeout,
            greeting,
            conn: tokio::sync::Mutex::new(None),
            next_id: AtomicU64::new(1),
        }
    }

    /// Sends `rpc` for `group` and waits up to `timeout` for its answer.
    pub async fn call(
        &self,
        group: GroupId,
        rpc: &Rpc,
        timeout: Duration,
    ) -> Result<Reply, CallError> {
        let conn = tokio::time::timeout(timeout, self.conn())
            .await
            .map_err(|_| CallError::Timeout(self.addr.clone(), timeout))??;
        let answer = self.send(&conn, group, rpc, &[], timeout).await?;
        frame::body::<Reply>(&answer).map_err(CallError::Encode)
    }

    /// Sends `rpc` (then `trailer`) on `conn` and waits up to `timeout`
    /// for its answer's frame.
    async fn send(
        &self,
        conn: &Conn,
        group: GroupId,
        rpc: &Rpc,
        trailer: &[u8],
        timeout: Duration,
    ) -> Result<Frame, CallError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut buf = BytesMut::new();
        frame::encode_with_trailer(group, id, rpc, trailer, &mut buf)?;
        let (tx, rx) = oneshot::channel();
        conn.pending.lock().insert(id, tx);
        if conn.frames.send(buf.freeze()).is_err() {
            conn.pending.lock().remove(&id);
            return Err(CallError::Closed(self.addr.clone()));
        }
        let answer = match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(f)) => f,
            Ok(Err(_)) => return Err(CallError::Closed(self.addr.clone())),
            Err(_) => {
                conn.pending.lock().remove(&id);
                return Err(CallError::Timeout(self.addr.clone(), timeout));
            }
        };
        Ok(answer)
    }

    /// The hello on a new connection: Ok once the peer accepted it.
    async fn greet(&self, conn: &Conn) -> Result<(), CallError> {
        let hello = Rpc::Hello(self.greeting.hello(&self.addr));
        let refused = |why: String| {
            if self.greeting.refusals.refused(&self.addr, &why) {
                tracing::error!(peer = %self.addr, "REPLICATION: refused by peer {}: {why}", self.addr);
            }
            CallError::Refused {
                addr: self.addr.clone(),
                why,
            }
        };
        let answer = self
            .send(
                conn,
                0,
                &hello,
                &self.greeting.trailer(),
                self.connect_timeout,
            )
            .await?;
        let (reply, trailer) =
            frame::body_and_trailer::<Reply>(&answer).map_err(CallError::Encode)?;
        match reply {
            Reply::Hello(Ok(welcome)) => {
                if let Some(theirs) = Speaks::map(trailer) {
                    self.greeting.take_map(&theirs);
                }
                let Some(peer) = self.greeting.node_at(&self.addr) else {
                    return Err(refused(
                        "it is not a member in this member's cluster map".into(),
                    ));
                };
                self.greeting
                    .identity
                    .met(peer, welcome.incarnation, welcome.knew)
                    .map_err(refused)?;
                self.greeting
                    .welcomed(peer, &welcome, Speaks::read(trailer));
                self.greeting.refusals.accepted(&self.addr);
                Ok(())
            }
            Reply::Hello(Err(why)) => Err(refused(why)),
            _ => Err(refused(
                "it answered the hello with a reply of another kind".into(),
            )),
        }
    }

    async fn conn(&self) -> Result<Arc<Conn>, CallError> {
        let mut slot = self.conn.lock().await;
        if let Some(c) = slot.as_ref() {
            if !c.broken.load(Ordering::Acquire) {
                return Ok(c.clone());
            }
        }
        *slot = None;
        let io = connect_io(&self.addr, self.tls.as_ref(), self.connect_timeout).await?;
        let (rd, wr) = tokio::io::split(io);
        let (tx, rx) = mpsc::unbounded_channel();
        let conn = Arc::new(Conn {
            frames: tx,
            pending: Arc::new(Mutex::new(HashMap::new())),
            broken: Arc::new(AtomicBool::new(false)),
        });
        tokio::spawn(write_frames(wr, rx, conn.broken.clone()));
        tokio::spawn(read_answers(
            rd,
            conn.pending.clone(),
            conn.broken.clone(),
            self.addr.clone(),
        ));
        if let Err(e) = self.greet(&conn).await {
            // dropping `conn` ends its writer; the peer sees it close
            conn.broken.store(true, Ordering::Release);
            return Err(e);
        }
        *slot = Some(conn.clone());
        Ok(conn)
    }

    /// Opens the connection (and so greets the peer) unless it is open.
    pub async fn greet_once(&self) -> Result<(), CallError> {
        self.conn().await.map(drop)
    }

    /// Drops the connection: its writer ends, the peer sees it close.
    pub fn close(&self) {
        if let Ok(mut slot) = self.conn.try_lock() {
            if let Some(c) = slot.take() {
                c.broken.store(true, Ordering::Release);
                c.pending.lock().clear();
            }
        }
    }
}

/// A connection to `addr`, over TLS when `tls` is set.
async fn connect_io(
    addr: &str,
    tls: Option<&Arc<rustls::ClientConfig>>,
    timeout: Duration,
) -> Result<Box<dyn Io>, CallError> {
    let connect = |err| CallError::Connect {
        addr: addr.to_string(),
        err,
    };
    let tcp = tokio::time::timeout(timeout, TcpStream::connect(addr))
        .await
        .map_err(|_| connect(io::ErrorKind::TimedOut.into()))?
        .map_err(connect)?;
    let _ = tcp.set_nodelay(true);
    Ok(match tls {
        None => Box::new(tcp),
        Some(cfg) => {
            let host = addr
                .rsplit_once(':')
                .map_or(addr, |(h, _)| h)
                .trim_start_matches('[')
                .trim_end_matches(']');
            let name = rustls::pki_types::ServerName::try_from(host.to_string())
                .map_err(|e| connect(io::Error::new(io::ErrorKind::InvalidInput, e)))?;
            let tls = tokio_rustls::TlsConnector::from(cfg.clone());
            let s = tokio::time::timeout(timeout, tls.connect(name, tcp))
                .await
                .map_err(|_| connect(io::ErrorKind::TimedOut.into()))?
                .map_err(connect)?;
            Box::new(s)
        }
    })
}

/// Asks the member at `addr` who it is, on a connection of its own
/// (closed after the answer), within `timeout`.
pub async fn probe(
    addr: &str,
    tls: Option<&Arc<rustls::ClientConfig>>,
    timeout: Duration,
) -> Result<Probed, CallError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ask = async {
        let mut io = connect_io(addr, tls, timeout).await?;
        let mut out = BytesMut::new();
        frame::encode(0, 1, &Rpc::Probe, &mut out)?;
        let closed = |_| CallError::Closed(addr.to_string());
        io.write_all(&out).await.map_err(closed)?;
        io.flush().await.map_err(closed)?;
        let mut buf = BytesMut::with_capacity(256);
        loop {
            if let Some(f) = frame::decode(&mut buf)? {
                return match frame::body::<Reply>(&f)? {
                    Reply::Probe(p) => Ok(p),
                    Reply::Hello(Err(why)) => Err(CallError::Refused {
                        addr: addr.to_string(),
                        why,
                    }),
                    _ => Err(CallError::Refused {
                        addr: addr.to_string(),
                        why: "it answered a probe with a reply of another kind".into(),
                    }),
                };
            }
            if io.read_buf(&mut buf).await.map_err(closed)? == 0 {
                return Err(CallError::Closed(addr.to_string()));
            }
        }
    };
    tokio::time::timeout(timeout, ask)
        .await
        .map_err(|_| CallError::Timeout(addr.to_string(), timeout))?
}

async fn read_answers(
    rd: impl AsyncRead + Unpin,
    pending: Pending,
    broken: Arc<AtomicBool>,
    addr: String,
) {
    let read = read_frames(rd, |f| {
        if let Some(tx) = pending.lock().remove(&f.id) {
            let _ = tx.send(f);
        }
        if broken.load(Ordering::Acquire) {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })
    .await;
    if let Err(e) = read {
        tracing::warn!(peer = %addr, error = %e, "bad frame from a replication peer; connection dropped");
    }
    broken.store(true, Ordering::Release);
    // Waiting calls fail now rather than at their timeout.
    pending.lock().clear();
}

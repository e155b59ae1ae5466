//! A connected V2 client as the rest of nsqd sees it: an id, a queue of
//! frames to write (the connection's writer task drains it), its identity
//! for `/stats`, and a token that disconnects it.
//!
//! The per-channel counters of a subscribed client (RDY, in flight,
//! finished...) live in the channel's own state, beside the in-flight
//! messages they count, so one lock covers a delivery decision.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use nsq_protocol::Message;
use parking_lot::Mutex;

use nsq_protocol::compress::Encoder;
use crate::transport::Writer;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

pub type ClientId = u64;

static NEXT_CLIENT_ID: AtomicU64 = AtomicU64::new(1);

pub fn next_client_id() -> ClientId {
    NEXT_CLIENT_ID.fetch_add(1, Ordering::Relaxed)
}

/// Connection states as `/stats` numbers them.
pub const STATE_INIT: i32 = 0;
pub const STATE_SUBSCRIBED: i32 = 3;
pub const STATE_CLOSING: i32 = 4;

/// Settings the writer needs after IDENTIFY.
#[derive(Debug, Clone, Copy)]
pub struct WriterSettings {
    pub heartbeat_ms: Option<i64>,
    pub output_buffer_size: usize,
    pub output_buffer_timeout_ms: i64,
}

/// What a connection's writer task is asked to write, in order.
#[derive(Debug)]
pub enum Outbound {
    /// A message frame; buffered.
    Message(Message),
    /// A response frame (type 0); flushed at once.
    Response(Bytes),
    /// An error frame (type 1); flushed at once.
    Error(Bytes),
    Settings(WriterSettings),
    /// Flush what is queued, hand the write half to the reader (`give`) for
    /// a TLS upgrade, and wait for the upgraded one (`take`); no frame may
    /// be written in between.
    Detach {
        give: oneshot::Sender<Writer>,
        take: oneshot::Receiver<Writer>,
    },
    /// Flush what is queued, then compress everything after it. Boxed: a
    /// Snappy encoder is kilobytes, and every queued message pays for the
    /// largest variant.
    Compress(Box<Encoder>),
    /// Flush what is queued, then close the socket.
    Close,
}

#[derive(Debug, Clone, Default)]
pub struct ClientInfo {
    pub client_id: String,
    pub hostname: String,
    pub user_agent: String,
    pub state: i32,
    pub sample_rate: i32,
    pub deflate: bool,
    pub snappy: bool,
    pub tls: bool,
    pub tls_cipher_suite: String,
    pub tls_version: String,
    pub tls_negotiated_protocol: String,
    pub topology_zone: String,
    pub topology_region: String,
    pub authed: bool,
    pub auth_identity: String,
    pub auth_identity_url: String,
    /// Messages published per topic, in first-published order.
    pub pub_counts: Vec<(String, u64)>,
}

#[derive(Debug)]
pub struct ClientConn {
    pub id: ClientId,
    tx: mpsc::UnboundedSender<Outbound>,
    pub remote_addr: SocketAddr,
    pub connect_ts: i64,
    pub info: Mutex<ClientInfo>,
    /// Cancelled to disconnect the client (channel deleted, nsqd exiting).
    pub closer: CancellationToken,
    /// The channel it subscribed to, where its delivery counters live.
    /// Weak: the channel already holds the client; this only finds it back.
    pub channel: Mutex<Option<std::sync::Weak<crate::channel::Channel>>>,
}

impl ClientConn {
    pub fn new(remote_addr: SocketAddr, connect_ts: i64) -> (ClientConn, mpsc::UnboundedReceiver<Outbound>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let ip = remote_addr.ip().to_string();
        let info = ClientInfo { client_id: ip.clone(), hostname: ip, ..Default::default() };
        let conn = ClientConn {
            id: next_client_id(),
            tx,
            remote_addr,
            connect_ts,
            info: Mutex::new(info),
            closer: CancellationToken::new(),
            channel: Mutex::new(None),
        };
        (conn, rx)
    }

    /// Queues a frame for the writer. False when the connection is gone (a
    /// message then stays in flight and times out, as in nsqd).
    pub fn send(&self, o: Outbound) -> bool {
        self.tx.send(o).is_ok()
    }

    pub fn record_pub(&self, topic: &str, n: u64) {
        let mut info = self.info.lock();
        match info.pub_counts.iter_mut().find(|(t, _)| t == topic) {
            Some((_, c)) => *c += n,
            None => info.pub_counts.push((topic.to_string(), n)),
        }
    }
}

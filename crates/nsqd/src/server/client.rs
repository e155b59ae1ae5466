//! A connected V2 client as the rest of nsqd sees it: an id, its outbox of
//! frames to write (the connection's writer task drains it), its identity
//! for `/stats`, and a token that disconnects it.
//!
//! The outbox holds frames already encoded: a channel delivering a message
//! appends the frame right there, under its own lock, so the hot path moves
//! no `Message` between tasks, clones no body (no reference-count traffic
//! on a cache line other threads own) and allocates nothing per message.
//! The writer swaps the whole buffer out and writes it in one go.
//!
//! The per-channel counters of a subscribed client (RDY, in flight,
//! finished...) live in the channel's own state, beside the in-flight
//! messages they count, so one lock covers a delivery decision.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use std::sync::Arc;

use bytes::BytesMut;
use nsq_protocol::frame::{encode_frame, FrameType};
use nsq_protocol::Message;
use parking_lot::Mutex;

use nsq_protocol::compress::Encoder;
use crate::transport::Writer;
use tokio::sync::{oneshot, Notify};
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

/// A step for the writer that is not a frame; it runs once the frames
/// queued before it are written.
#[derive(Debug)]
pub enum Control {
    Settings(WriterSettings),
    /// Write what is queued, hand the write half to the reader (`give`) for
    /// a TLS upgrade, and wait for the upgraded one (`take`); no frame may
    /// be written in between.
    Detach {
        give: oneshot::Sender<Writer>,
        take: oneshot::Receiver<Writer>,
    },
    /// Compress everything after this point (boxed: a Snappy encoder is
    /// kilobytes).
    Compress(Box<Encoder>),
    /// Close the socket.
    Close,
}

/// Frames waiting for a connection's writer, shared by whoever queues them
/// (the client's reader, channels delivering to it) and the writer.
#[derive(Debug, Default)]
pub struct Outbox {
    state: Mutex<OutboxState>,
    ready: Notify,
}

#[derive(Debug, Default)]
struct OutboxState {
    frames: BytesMut,
    /// Controls, each tagged with the length of `frames` when it was queued.
    controls: Vec<(usize, Control)>,
    /// The writer has stopped: nothing queued will be written.
    writer_gone: bool,
    /// The connection has gone: nothing more will be queued.
    senders_gone: bool,
}

impl OutboxState {
    fn is_empty(&self) -> bool {
        self.frames.is_empty() && self.controls.is_empty()
    }
}

/// What [`Outbox::take`] handed the writer.
pub struct Taken {
    /// Nothing more will ever be queued (the batch may still hold frames).
    pub last: bool,
}

impl Outbox {
    /// Appends under the lock; wakes the writer only on the empty→queued
    /// edge (a non-empty outbox means a wake-up is already pending).
    fn push(&self, f: impl FnOnce(&mut OutboxState)) -> bool {
        let mut st = self.state.lock();
        if st.writer_gone {
            return false;
        }
        let was_empty = st.is_empty();
        f(&mut st);
        drop(st);
        if was_empty {
            self.ready.notify_one();
        }
        true
    }

    /// Waits until something was queued since the last `take`.
    pub async fn ready(&self) {
        self.ready.notified().await
    }

    /// Swaps everything queued into `frames` (which must be empty; its
    /// capacity goes back to the outbox for the next batch) and `controls`.
    pub fn take(&self, frames: &mut BytesMut, controls: &mut Vec<(usize, Control)>) -> Taken {
        let mut st = self.state.lock();
        std::mem::swap(&mut st.frames, frames);
        std::mem::swap(&mut st.controls, controls);
        Taken { last: st.senders_gone }
    }

    /// The writer has stopped; later sends fail and queued frames are dropped.
    pub fn writer_gone(&self) {
        let mut st = self.state.lock();
        st.writer_gone = true;
        st.frames = BytesMut::new();
        st.controls.clear();
    }

    fn senders_gone(&self) {
        self.state.lock().senders_gone = true;
        self.ready.notify_one();
    }
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
    outbox: Arc<Outbox>,
    pub remote_addr: SocketAddr,
    pub connect_ts: i64,
    pub info: Mutex<ClientInfo>,
    /// Cancelled to disconnect the client (channel deleted, nsqd exiting).
    pub closer: CancellationToken,
    /// The channel it subscribed to, where its delivery counters live.
    /// Weak: the channel already holds the client; this only finds it back.
    pub channel: Mutex<Option<std::sync::Weak<crate::channel::Channel>>>,
}

impl Drop for ClientConn {
    fn drop(&mut self) {
        self.outbox.senders_gone();
    }
}

impl ClientConn {
    /// The connection and the outbox its writer task drains.
    pub fn new(remote_addr: SocketAddr, connect_ts: i64) -> (ClientConn, Arc<Outbox>) {
        let outbox = Arc::new(Outbox::default());
        let ip = remote_addr.ip().to_string();
        let info = ClientInfo { client_id: ip.clone(), hostname: ip, ..Default::default() };
        let conn = ClientConn {
            id: next_client_id(),
            outbox: outbox.clone(),
            remote_addr,
            connect_ts,
            info: Mutex::new(info),
            closer: CancellationToken::new(),
            channel: Mutex::new(None),
        };
        (conn, outbox)
    }

    /// Queues a message frame. False when the connection is gone (the
    /// message then stays in flight and times out, as in nsqd).
    pub fn send_message(&self, msg: &Message) -> bool {
        self.outbox.push(|st| msg.encode_frame(&mut st.frames))
    }

    /// Queues frames already encoded (a channel's deliveries of one pass).
    pub fn send_frames(&self, frames: &[u8]) -> bool {
        self.outbox.push(|st| st.frames.extend_from_slice(frames))
    }

    /// Queues a response frame (type 0).
    pub fn send_response(&self, data: &[u8]) -> bool {
        self.outbox.push(|st| encode_frame(&mut st.frames, FrameType::Response, data))
    }

    /// Queues an error frame (type 1).
    pub fn send_error(&self, data: &[u8]) -> bool {
        self.outbox.push(|st| encode_frame(&mut st.frames, FrameType::Error, data))
    }

    /// Queues a writer step, to run after the frames queued before it.
    pub fn send_control(&self, control: Control) -> bool {
        self.outbox.push(|st| {
            let at = st.frames.len();
            st.controls.push((at, control));
        })
    }

    /// Frames queued and not yet taken by a writer (unit tests).
    #[cfg(test)]
    pub fn queued_frames(&self) -> BytesMut {
        self.outbox.state.lock().frames.split()
    }

    pub fn record_pub(&self, topic: &str, n: u64) {
        let mut info = self.info.lock();
        match info.pub_counts.iter_mut().find(|(t, _)| t == topic) {
            Some((_, c)) => *c += n,
            None => info.pub_counts.push((topic.to_string(), n)),
        }
    }
}

//! A connected V2 client as the rest of nsqd sees it: an id, the outbox its
//! writer drains, what it told us about itself (IDENTIFY, TLS, AUTH) and
//! what it published, for `/stats`, and a token that disconnects it.
//!
//! Its per-channel counters (RDY, in flight, finished...) live in the
//! channel's state machine beside the messages they count
//! ([`crate::core::Subscriber`]), so one lock covers a delivery decision;
//! the client only remembers which channel that is, by name.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::BytesMut;
use nsq_protocol::frame::{encode_frame, FrameType};
use nsq_protocol::stats::{ClientStats, PubCount};
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use super::outbox::{Control, Outbox};
use crate::core::{ClientId, Subscriber};

static NEXT_CLIENT_ID: AtomicU64 = AtomicU64::new(1);

#[derive(Debug)]
pub struct Client {
    pub id: ClientId,
    pub remote_addr: SocketAddr,
    outbox: Arc<Outbox>,
    /// Cancelled to disconnect the client (channel deleted, nsqd exiting).
    pub closer: CancellationToken,
    /// Its `/stats` entry as far as the connection knows it (the channel
    /// counters are filled in from the channel).
    info: Mutex<ClientStats>,
    /// `(topic, channel)` once subscribed.
    subscription: Mutex<Option<(String, String)>>,
}

impl Drop for Client {
    fn drop(&mut self) {
        self.outbox.senders_gone();
    }
}

impl Client {
    /// A new client and the outbox its writer task drains.
    pub fn new(remote_addr: SocketAddr, connect_ts: i64) -> (Client, Arc<Outbox>) {
        let outbox = Arc::new(Outbox::default());
        let ip = remote_addr.ip().to_string();
        let info = ClientStats {
            client_id: ip.clone(),
            hostname: ip,
            version: "V2".into(),
            remote_address: remote_addr.to_string(),
            connect_ts,
            ..ClientStats::default()
        };
        let client = Client {
            id: NEXT_CLIENT_ID.fetch_add(1, Ordering::Relaxed),
            remote_addr,
            outbox: outbox.clone(),
            closer: CancellationToken::new(),
            info: Mutex::new(info),
            subscription: Mutex::new(None),
        };
        (client, outbox)
    }

    /// Queues frames already encoded (a channel's deliveries of one pass).
    /// An empty outbox takes `frames` whole and gives its own (empty)
    /// buffer back in its place: no copy of the bodies a second time. False
    /// when the connection is gone (the messages then stay in flight and
    /// time out, as in nsqd).
    pub fn send_frames(&self, frames: &mut BytesMut) -> bool {
        self.outbox.push(|st| {
            if st.frames.is_empty() {
                // controls queued before sit at 0: they still go first
                std::mem::swap(&mut st.frames, frames);
            } else {
                st.frames.extend_from_slice(frames);
            }
        })
    }

    /// Queues a response frame (type 0).
    pub fn send_response(&self, data: &[u8]) -> bool {
        self.outbox
            .push(|st| encode_frame(&mut st.frames, FrameType::Response, data))
    }

    /// Queues an error frame (type 1).
    pub fn send_error(&self, data: &[u8]) -> bool {
        self.outbox
            .push(|st| encode_frame(&mut st.frames, FrameType::Error, data))
    }

    /// Queues a writer step, to run after the frames queued before it.
    pub fn send_control(&self, control: Control) -> bool {
        self.outbox.push_control(control)
    }

    /// Updates what `/stats` reports of this connection.
    pub fn update_info(&self, f: impl FnOnce(&mut ClientStats)) {
        f(&mut self.info.lock())
    }

    pub fn record_pub(&self, topic: &str, n: u64) {
        let mut info = self.info.lock();
        match info.pub_counts.iter_mut().find(|p| p.topic == topic) {
            Some(p) => p.count += n,
            None => info.pub_counts.push(PubCount {
                topic: topic.to_string(),
                count: n,
            }),
        }
    }

    pub fn has_published(&self) -> bool {
        !self.info.lock().pub_counts.is_empty()
    }

    pub fn set_subscription(&self, topic: &str, channel: &str) {
        *self.subscription.lock() = Some((topic.to_string(), channel.to_string()));
    }

    pub fn subscription(&self) -> Option<(String, String)> {
        self.subscription.lock().clone()
    }

    /// Its `/stats` entry, with the counters of its channel when subscribed.
    pub fn stats(&self, counters: Option<&Subscriber>) -> ClientStats {
        let mut s = self.info.lock().clone();
        // nsqd 1.3 reports only the first topic a client published to
        s.pub_counts.truncate(1);
        // Go reports this deprecated field as always true on a TLS connection.
        s.tls_negotiated_protocol_is_mutual = s.tls;
        if let Some(c) = counters {
            s.ready_count = c.rdy;
            s.in_flight_count = c.in_flight;
            s.message_count = c.message_count;
            s.finish_count = c.finish_count;
            s.requeue_count = c.requeue_count;
        }
        s
    }

    /// Every topic it published to with its count, in first-published order.
    pub fn pub_counts(&self) -> Vec<PubCount> {
        self.info.lock().pub_counts.clone()
    }
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;

    use super::Client;
    use crate::server::outbox::{Control, WriterSettings};

    fn take(outbox: &crate::server::outbox::Outbox) -> (Vec<u8>, Vec<usize>) {
        let mut frames = BytesMut::new();
        let mut controls = Vec::new();
        outbox.take(&mut frames, &mut controls);
        (
            frames.to_vec(),
            controls.iter().map(|(at, _)| *at).collect(),
        )
    }

    #[test]
    fn frames_for_an_empty_outbox_are_taken_whole_and_keep_their_order() {
        let (client, outbox) = Client::new("127.0.0.1:1".parse().unwrap(), 0);
        let settings = WriterSettings {
            heartbeat_ms: None,
            output_buffer_size: 16384,
        };
        assert!(client.send_control(Control::Settings(settings)));

        // empty outbox: the buffer itself moves in, an empty one comes back
        let mut a = BytesMut::with_capacity(64);
        a.extend_from_slice(b"first");
        let ptr = a.as_ptr();
        assert!(client.send_frames(&mut a));
        assert!(a.is_empty());
        // then appended after what is queued
        let mut b = BytesMut::from(&b"second"[..]);
        assert!(client.send_frames(&mut b));
        assert_eq!(b, &b"second"[..], "a copy leaves the caller's buffer alone");

        let mut frames = BytesMut::new();
        let mut controls = Vec::new();
        outbox.take(&mut frames, &mut controls);
        assert_eq!(frames.as_ptr(), ptr, "not copied");
        assert_eq!(&frames[..], b"firstsecond");
        // the control queued before both still runs before them
        assert_eq!(controls.iter().map(|(at, _)| *at).collect::<Vec<_>>(), [0]);

        let mut c = BytesMut::from(&b"third"[..]);
        assert!(client.send_frames(&mut c));
        assert_eq!(take(&outbox), (b"third".to_vec(), vec![]));
    }
}

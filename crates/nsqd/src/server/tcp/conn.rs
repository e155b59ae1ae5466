//! What a connection's reader carries from command to command: the
//! session, the client as the rest of nsqd sees it, its subscription, the
//! topics it publishes to, and the reading side of the socket. The command
//! files take it; the reader owns it.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use nsq_protocol::command::{pending_len, Limits};
use nsq_protocol::compress::Decoder;
use nsq_protocol::{MessageId, ProtocolError};
use tokio::io::AsyncReadExt;
use tokio::sync::oneshot;

use super::session::Session;
use crate::server::backend::Ticket;
use crate::server::channel::Channel;
use crate::server::client::Client;
use crate::server::nsqd::NsqdInner;
use crate::server::topic::Topic;
use crate::server::transport::Reader;

/// The topic and channel a connection subscribed to.
pub struct Subscription {
    pub topic: Arc<Topic>,
    pub channel: Arc<Channel>,
}

pub struct Conn {
    pub nsqd: Arc<NsqdInner>,
    pub client: Arc<Client>,
    pub session: Session,
    pub subscription: Option<Subscription>,
    /// Topics this connection published to, so a PUB skips the global map.
    pub topics: HashMap<String, Arc<Topic>>,
    /// The time of the latest read: commands of one read batch share it, so
    /// a pipelined burst of FINs costs one clock read, not one each.
    pub now: Instant,
    /// FINs decoded from the current read, not yet carried out.
    pub pending_fins: Vec<MessageId>,
    /// Answers waiting for publishes to become durable.
    pub replies: Replies,
    /// The client missed its heartbeats: its socket is reset, not closed
    /// gracefully (see `tcp::handle`).
    pub unresponsive: bool,
}

impl Conn {
    pub fn send_error(&mut self, e: &ProtocolError) {
        tracing::debug!(addr = %self.client.remote_addr, error = %e.payload_lossy(), fatal = e.fatal, "client error");
        if self.replies.queue.is_empty() {
            self.client.send_error(&e.payload());
        } else {
            self.replies.queue.push_back(Reply::Error(e.payload()));
        }
    }

    pub fn respond(&mut self, data: &[u8]) {
        if self.replies.queue.is_empty() {
            self.client.send_response(data);
        } else {
            self.replies.queue.push_back(Reply::Response(data.to_vec()));
        }
    }

    /// Answers a publish once `tickets` are durable (`--sync-every=1`), in
    /// its turn among the other answers; `failed` if they are not.
    pub fn respond_when_durable(&mut self, tickets: Vec<Ticket>, failed: ProtocolError) {
        // every queue's fsync starts now, before any is waited for
        for t in &tickets {
            t.request();
        }
        self.replies
            .queue
            .push_back(Reply::Publish { tickets, failed });
    }

    /// Answers a replicated publish once its group committed it (`rx`), in
    /// its turn among the other answers.
    pub fn respond_when_committed(&mut self, rx: oneshot::Receiver<Result<(), ProtocolError>>) {
        self.replies.queue.push_back(Reply::Committing(rx));
    }

    /// Waits for every answer still held back, sending each in its turn; a
    /// publish that did not become durable ends it with its fatal error.
    /// Gives up if the client is being disconnected.
    pub async fn flush_replies(&mut self) {
        while !self.replies.queue.is_empty() {
            tokio::select! {
                r = self.replies.settle(&self.client) => if let Err(e) = r {
                    self.client.send_error(&e.payload());
                    return;
                },
                _ = self.client.closer.cancelled() => return,
            }
        }
    }
}

/// Answers held back behind a publish that waits for its records to become
/// durable, so that answers keep the order of the commands.
#[derive(Default)]
pub struct Replies {
    queue: VecDeque<Reply>,
}

enum Reply {
    Publish {
        tickets: Vec<Ticket>,
        failed: ProtocolError,
    },
    /// A replicated publish: its commit's outcome (a failure is the
    /// publish's non-fatal error).
    Committing(oneshot::Receiver<Result<(), ProtocolError>>),
    Response(Vec<u8>),
    Error(Vec<u8>),
}

impl Replies {
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Waits for the publish at the head to become durable, answers it and
    /// every answer behind it up to the next publish. A publish that did not
    /// become durable is its fatal error (the caller sends it and closes).
    /// Cancel-safe: nothing is taken off the queue before its tickets are
    /// durable.
    pub async fn settle(&mut self, client: &Client) -> Result<(), ProtocolError> {
        if let Some(Reply::Publish { tickets, failed }) = self.queue.front() {
            for t in tickets {
                if let Err(e) = t.durable().await {
                    tracing::error!(addr = %client.remote_addr, error = %e, "publish not durable");
                    return Err(failed.clone());
                }
            }
            client.send_response(nsq_protocol::frame::OK);
            self.queue.pop_front();
        } else if let Some(Reply::Committing(rx)) = self.queue.front_mut() {
            match rx.await {
                Ok(Ok(())) => {
                    client.send_response(nsq_protocol::frame::OK);
                }
                Ok(Err(e)) if !e.fatal => {
                    client.send_error(&e.payload());
                }
                Ok(Err(e)) => return Err(e),
                // The commit's task ended without an answer (nsqd exiting).
                Err(_) => {
                    return Err(ProtocolError::fatal(
                        "E_PUB_FAILED",
                        "PUB failed exiting".to_string(),
                    ))
                }
            }
            self.queue.pop_front();
        }
        while let Some(reply) = self.queue.front() {
            match reply {
                Reply::Publish { .. } | Reply::Committing(_) => break,
                Reply::Response(data) => client.send_response(data),
                Reply::Error(data) => client.send_error(data),
            };
            self.queue.pop_front();
        }
        Ok(())
    }
}

/// The reading side of the connection: the transport, the compressed bytes
/// not yet decoded once a compression layer is on, and the plain bytes not
/// yet parsed into commands.
pub struct Inbound {
    pub rd: Reader,
    pub raw: BytesMut,
    pub decoder: Option<Decoder>,
    pub buf: BytesMut,
}

impl Inbound {
    pub fn new(rd: Reader) -> Inbound {
        Inbound {
            rd,
            raw: BytesMut::new(),
            decoder: None,
            buf: BytesMut::with_capacity(4096),
        }
    }

    /// Reads once and appends the plain bytes to `buf`; false at end of stream.
    pub async fn fill(&mut self, limits: &Limits) -> std::io::Result<bool> {
        let buf = &mut self.buf;
        match &mut self.decoder {
            None => {
                // room for the whole pending body at once (an MPUB is often
                // tens of KiB), else the usual 8 KiB
                let want = pending_len(buf, limits).map_or(0, |n| n.saturating_sub(buf.len()));
                if buf.capacity() - buf.len() < want.max(1024) {
                    buf.reserve(want.max(8192));
                }
                Ok(self.rd.read_buf(buf).await? > 0)
            }
            Some(d) => {
                if self.raw.capacity() - self.raw.len() < 1024 {
                    self.raw.reserve(8192);
                }
                if self.rd.read_buf(&mut self.raw).await? == 0 {
                    return Ok(false);
                }
                d.decode(&mut self.raw, buf)
                    .map_err(std::io::Error::other)?;
                Ok(true)
            }
        }
    }
}

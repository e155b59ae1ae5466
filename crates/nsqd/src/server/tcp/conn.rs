//! What a connection's reader carries from command to command: the
//! session, the client as the rest of nsqd sees it, its subscription, the
//! topics it publishes to, and the reading side of the socket. The command
//! files take it; the reader owns it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use nsq_protocol::command::{pending_len, Limits};
use nsq_protocol::compress::Decoder;
use nsq_protocol::{MessageId, ProtocolError};
use tokio::io::AsyncReadExt;

use super::session::Session;
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
}

impl Conn {
    pub fn send_error(&self, e: &ProtocolError) {
        tracing::debug!(addr = %self.client.remote_addr, error = %e.payload_lossy(), fatal = e.fatal, "client error");
        self.client.send_error(&e.payload());
    }

    pub fn respond(&self, data: &[u8]) {
        self.client.send_response(data);
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

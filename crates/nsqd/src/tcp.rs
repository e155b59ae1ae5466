//! The TCP V2 server: accepts connections, checks the magic, and runs one
//! reader (commands, in order) and one writer (frames, batched) per client.
//!
//! The writer drains whatever is queued for its client into one buffer and
//! writes it with one syscall as soon as nothing more is immediately ready,
//! or when the buffer reaches the negotiated `output_buffer_size`. So a busy
//! client gets large batched writes and an idle one gets each message at
//! once; Go nsqd's `output_buffer_timeout` (250 ms) is never waited for.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use nsq_protocol::command::{decode, Command, DecodeError, Precheck};
use nsq_protocol::error::*;
use nsq_protocol::frame::{encode_frame, FrameType, CLOSE_WAIT, HEARTBEAT, MAGIC_V2, OK};
use nsq_protocol::identify::{negotiate, IdentifyRequest, IdentifyResponse};
use nsq_protocol::ProtocolError;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

use crate::channel::{Channel, InFlightError, SubError};
use crate::client::*;
use crate::nsqd::NsqdInner;
use crate::topic::{PutError, Topic};

/// Accepts clients until nsqd shuts down.
pub async fn serve(listener: TcpListener, nsqd: Arc<NsqdInner>) {
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, addr)) => {
                    let n = nsqd.clone();
                    nsqd.tasks.spawn(async move { handle(stream, addr, n).await });
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off, don't spin.
                    tracing::error!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = nsqd.cancel.cancelled() => break,
        }
    }
    tracing::info!("TCP: closing listener");
}

async fn handle(mut stream: TcpStream, addr: SocketAddr, nsqd: Arc<NsqdInner>) {
    let _ = stream.set_nodelay(true);
    let mut magic = [0u8; 4];
    let got = tokio::select! {
        r = stream.read_exact(&mut magic) => r.is_ok(),
        _ = nsqd.cancel.cancelled() => false,
    };
    if !got {
        return;
    }
    if &magic != MAGIC_V2 {
        let mut b = BytesMut::new();
        encode_frame(&mut b, FrameType::Error, E_BAD_PROTOCOL.as_bytes());
        let _ = stream.write_all(&b).await;
        tracing::debug!(%addr, "bad protocol magic");
        return;
    }
    let (rd, wr) = stream.into_split();
    let (conn, rx) = ClientConn::new(addr, crate::now_unix_ns() / 1_000_000_000);
    let conn = Arc::new(conn);
    nsqd.add_client(conn.clone());
    let hb = nsqd.features.default_heartbeat_ms;
    let settings = WriterSettings {
        heartbeat_ms: Some(hb),
        output_buffer_size: nsqd.features.default_output_buffer_size as usize,
        output_buffer_timeout_ms: nsqd.features.default_output_buffer_timeout_ms,
    };
    let writer = tokio::spawn(write_loop(wr, rx, settings, conn.closer.clone()));
    let mut client = Client {
        nsqd: nsqd.clone(),
        conn: conn.clone(),
        state: STATE_INIT,
        heartbeat_ms: Some(hb),
        msg_timeout: nsqd.opts.msg_timeout,
        sample_rate: 0,
        topic: None,
        channel: None,
        topics: HashMap::new(),
    };
    client.read_loop(rd).await;
    if let (Some(topic), Some(ch)) = (client.topic.take(), client.channel.take()) {
        let remaining = ch.with(|s| s.remove_client(conn.id));
        topic.client_left(&ch, remaining);
    }
    conn.send(Outbound::Close);
    let _ = writer.await;
    nsqd.remove_client(conn.id);
}

struct Client {
    nsqd: Arc<NsqdInner>,
    conn: Arc<ClientConn>,
    state: i32,
    heartbeat_ms: Option<i64>,
    msg_timeout: Duration,
    sample_rate: i32,
    topic: Option<Arc<Topic>>,
    channel: Option<Arc<Channel>>,
    /// Topics this connection published to, so a PUB skips the global map.
    topics: HashMap<String, Arc<Topic>>,
}

impl Client {
    async fn read_loop(&mut self, mut rd: OwnedReadHalf) {
        let mut buf = BytesMut::with_capacity(4096);
        let mut deadline = self.read_deadline();
        loop {
            loop {
                let limits = self.nsqd.limits;
                let r = decode(&mut buf, &limits, |name, params| self.precheck(name, params));
                match r {
                    Ok(Some(cmd)) => {
                        let result = self.exec(cmd);
                        // after exec: IDENTIFY may have changed the interval
                        deadline = self.read_deadline();
                        if let Err(e) = result {
                            self.send_error(&e);
                            if e.fatal {
                                return;
                            }
                        }
                    }
                    Ok(None) => break,
                    Err(DecodeError::LineTooLong) => {
                        tracing::debug!(addr = %self.conn.remote_addr, "command line too long, closing");
                        return;
                    }
                    Err(DecodeError::Protocol(e)) => {
                        self.send_error(&e);
                        return;
                    }
                }
            }
            if buf.capacity() - buf.len() < 1024 {
                buf.reserve(8192);
            }
            let timeout = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = rd.read_buf(&mut buf) => match r {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                },
                _ = timeout => {
                    tracing::info!(addr = %self.conn.remote_addr, "client missed heartbeats, closing");
                    return;
                }
                _ = self.conn.closer.cancelled() => return,
            }
        }
    }

    /// nsqd closes a client that sends nothing for two heartbeat intervals.
    fn read_deadline(&self) -> Option<Instant> {
        self.heartbeat_ms.map(|h| Instant::now() + Duration::from_millis(2 * h as u64))
    }

    fn send_error(&self, e: &ProtocolError) {
        tracing::debug!(addr = %self.conn.remote_addr, error = %e.payload_lossy(), fatal = e.fatal, "client error");
        self.conn.send(Outbound::Error(Bytes::from(e.payload())));
    }

    fn respond(&self, data: &'static [u8]) {
        self.conn.send(Outbound::Response(Bytes::from_static(data)));
    }

    /// State checks nsqd makes before it parses a command's parameters.
    fn precheck(&self, name: &[u8], params: &[&[u8]]) -> Result<Precheck, ProtocolError> {
        let cannot = |cmd: &str| Err(ProtocolError::invalid(format!("cannot {cmd} in current state")));
        match name {
            b"IDENTIFY" if self.state != STATE_INIT => cannot("IDENTIFY"),
            b"AUTH" if self.state != STATE_INIT => cannot("AUTH"),
            b"SUB" if self.state != STATE_INIT => cannot("SUB"),
            b"SUB" if self.heartbeat_ms.is_none() => Err(ProtocolError::invalid("cannot SUB with heartbeats disabled")),
            b"RDY" if self.state == STATE_CLOSING => Ok(Precheck::Ignore),
            b"RDY" if self.state != STATE_SUBSCRIBED => cannot("RDY"),
            b"FIN" | b"REQ" | b"TOUCH" if self.state != STATE_SUBSCRIBED && self.state != STATE_CLOSING => {
                cannot(std::str::from_utf8(name).unwrap_or("?"))
            }
            b"CLS" if self.state != STATE_SUBSCRIBED => cannot("CLS"),
            b"MPUB" => {
                // nsqd creates the topic before it reads (and validates) the body.
                if let Some(t) = params.first().and_then(|t| std::str::from_utf8(t).ok()) {
                    if nsq_protocol::names::is_valid_topic_name(t) {
                        self.nsqd.get_or_create_topic(t);
                    }
                }
                Ok(Precheck::Proceed)
            }
            _ => Ok(Precheck::Proceed),
        }
    }

    fn exec(&mut self, cmd: Command) -> Result<(), ProtocolError> {
        match cmd {
            Command::Nop | Command::Ignored => Ok(()),
            Command::Identify(body) => self.identify(&body),
            Command::Auth(_) => Err(ProtocolError::fatal(E_AUTH_DISABLED, "AUTH disabled")),
            Command::Sub { topic, channel } => self.sub(&topic, &channel),
            Command::Rdy(n) => {
                let id = self.conn.id;
                self.channel()?.with(|s| s.set_rdy(id, n, Instant::now()));
                Ok(())
            }
            Command::Fin(msg_id) => {
                let id = self.conn.id;
                self.channel()?
                    .with(|s| s.finish(id, &msg_id, Instant::now(), crate::now_unix_ns()))
                    .map_err(|e| in_flight_error(E_FIN_FAILED, "FIN", &msg_id, e))
            }
            Command::Req { id: msg_id, timeout_ms } => {
                let max = self.nsqd.opts.max_req_timeout;
                let delay = Duration::from_millis(timeout_ms.max(0) as u64).min(max);
                let id = self.conn.id;
                self.channel()?
                    .with(|s| s.requeue(id, &msg_id, delay, Instant::now()))
                    .map_err(|e| in_flight_error(E_REQ_FAILED, "REQ", &msg_id, e))
            }
            Command::Touch(msg_id) => {
                let max = self.nsqd.opts.max_msg_timeout;
                let id = self.conn.id;
                self.channel()?
                    .with(|s| s.touch(id, &msg_id, Instant::now(), max))
                    .map_err(|e| in_flight_error(E_TOUCH_FAILED, "TOUCH", &msg_id, e))
            }
            Command::Cls => {
                let id = self.conn.id;
                self.channel()?.with(|s| s.set_rdy(id, 0, Instant::now()));
                self.state = STATE_CLOSING;
                self.conn.info.lock().state = STATE_CLOSING;
                self.respond(CLOSE_WAIT);
                Ok(())
            }
            Command::Pub { topic, body } => self.publish(&topic, vec![body], None, "PUB", E_PUB_FAILED),
            Command::Mpub { topic, bodies } => self.publish(&topic, bodies, None, "MPUB", E_MPUB_FAILED),
            Command::Dpub { topic, defer_ms, body } => {
                let d = Duration::from_millis(defer_ms as u64);
                self.publish(&topic, vec![body], Some(d), "DPUB", E_DPUB_FAILED)
            }
        }
    }

    fn channel(&self) -> Result<&Arc<Channel>, ProtocolError> {
        // precheck guarantees a subscription for these commands
        self.channel.as_ref().ok_or_else(|| ProtocolError::invalid("not subscribed"))
    }

    fn identify(&mut self, body: &[u8]) -> Result<(), ProtocolError> {
        let req = IdentifyRequest::parse(body)?;
        let n = negotiate(&req, &self.nsqd.features)?;
        {
            let mut info = self.conn.info.lock();
            info.client_id = n.client_id.clone();
            info.hostname = n.hostname.clone();
            info.user_agent = n.user_agent.clone();
            info.sample_rate = n.sample_rate;
            info.topology_region = n.topology_region.clone();
            info.topology_zone = n.topology_zone.clone();
        }
        self.heartbeat_ms = n.heartbeat_ms;
        self.msg_timeout = Duration::from_millis(n.msg_timeout_ms as u64);
        self.sample_rate = n.sample_rate;
        self.conn.send(Outbound::Settings(WriterSettings {
            heartbeat_ms: n.heartbeat_ms,
            output_buffer_size: n.output_buffer_size.max(1) as usize,
            output_buffer_timeout_ms: n.output_buffer_timeout_ms,
        }));
        if !n.feature_negotiation {
            self.respond(OK);
            return Ok(());
        }
        let resp = IdentifyResponse::new(&n, &self.nsqd.features);
        let json = serde_json::to_vec(&resp).map_err(|e| ProtocolError::fatal(E_IDENTIFY_FAILED, format!("IDENTIFY failed {e}")))?;
        self.conn.send(Outbound::Response(Bytes::from(json)));
        Ok(())
    }

    fn sub(&mut self, topic_name: &str, channel_name: &str) -> Result<(), ProtocolError> {
        let exiting = || ProtocolError::fatal(E_SUB_FAILED, "SUB failed exiting");
        // An ephemeral channel may be going away under us as its last client
        // leaves; nsqd retries once before giving up.
        for attempt in 0..2 {
            let topic = self.nsqd.get_or_create_topic(topic_name).ok_or_else(exiting)?;
            let ch = match topic.get_or_create_channel(channel_name) {
                Ok(ch) => ch,
                Err(_) if attempt == 0 => continue,
                Err(_) => return Err(ProtocolError::fatal(E_SUB_FAILED, "SUB failed to deleted topic/channel")),
            };
            let max = self.nsqd.opts.max_channel_consumers;
            let (conn, timeout, rate) = (self.conn.clone(), self.msg_timeout, self.sample_rate);
            match ch.with(|s| s.add_client(conn, timeout, rate, max)) {
                Ok(()) => {}
                Err(SubError::TooManyConsumers) => {
                    return Err(ProtocolError::fatal(
                        E_SUB_FAILED,
                        format!("SUB failed consumers for {topic_name}:{channel_name} exceeds limit of {max}"),
                    ))
                }
                Err(SubError::Exiting) if attempt == 0 => continue,
                Err(SubError::Exiting) => return Err(ProtocolError::fatal(E_SUB_FAILED, "SUB failed to deleted topic/channel")),
            }
            self.state = STATE_SUBSCRIBED;
            self.conn.info.lock().state = STATE_SUBSCRIBED;
            *self.conn.channel.lock() = Some(Arc::downgrade(&ch));
            self.topic = Some(topic);
            self.channel = Some(ch);
            self.respond(OK);
            return Ok(());
        }
        Err(exiting())
    }

    fn publish(&mut self, topic_name: &str, bodies: Vec<Bytes>, defer: Option<Duration>, cmd: &str, code: &'static str) -> Result<(), ProtocolError> {
        let n = bodies.len() as u64;
        let cached = self.topics.get(topic_name).filter(|t| !t.cancel.is_cancelled()).cloned();
        let topic = match cached {
            Some(t) => t,
            None => {
                let t = self.nsqd.get_or_create_topic(topic_name).ok_or_else(|| ProtocolError::fatal(code, format!("{cmd} failed exiting")))?;
                self.topics.insert(topic_name.to_string(), t.clone());
                t
            }
        };
        match topic.put(bodies, defer) {
            Ok(()) => {}
            Err(PutError::Exiting) => return Err(ProtocolError::fatal(code, format!("{cmd} failed exiting"))),
            Err(PutError::Backend(e)) => return Err(ProtocolError::fatal(code, format!("{cmd} failed {e}"))),
        }
        self.conn.record_pub(topic_name, n);
        self.respond(OK);
        Ok(())
    }
}

fn in_flight_error(code: &'static str, cmd: &str, id: &nsq_protocol::MessageId, e: InFlightError) -> ProtocolError {
    ProtocolError::non_fatal(code, format!("{cmd} {id} failed {}", e.text()))
}

/// Writes frames for one client; see the module docs for the flush rule.
async fn write_loop(mut wr: OwnedWriteHalf, mut rx: UnboundedReceiver<Outbound>, mut settings: WriterSettings, closer: CancellationToken) {
    let mut buf = BytesMut::with_capacity(settings.output_buffer_size.max(4096));
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
        let mut close = false;
        tokio::select! {
            biased;
            _ = closer.cancelled() => break,
            item = rx.recv() => {
                let Some(item) = item else { break };
                close = encode_outbound(item, &mut buf, &mut settings, &mut heartbeat);
                while !close {
                    if buf.len() >= settings.output_buffer_size {
                        if !flush(&mut wr, &mut buf, settings.heartbeat_ms).await {
                            closer.cancel();
                            return;
                        }
                    }
                    match rx.try_recv() {
                        Ok(item) => close = encode_outbound(item, &mut buf, &mut settings, &mut heartbeat),
                        Err(_) => break,
                    }
                }
            }
            _ = tick => encode_frame(&mut buf, FrameType::Response, HEARTBEAT),
        }
        if !flush(&mut wr, &mut buf, settings.heartbeat_ms).await || close {
            let _ = wr.shutdown().await;
            break;
        }
    }
    closer.cancel();
}

fn new_heartbeat(ms: Option<i64>) -> Option<tokio::time::Interval> {
    ms.map(|ms| {
        let period = Duration::from_millis(ms.max(1) as u64);
        let mut i = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        i
    })
}

/// Appends one item; true when it asks to close.
fn encode_outbound(item: Outbound, buf: &mut BytesMut, settings: &mut WriterSettings, heartbeat: &mut Option<tokio::time::Interval>) -> bool {
    match item {
        Outbound::Message(m) => m.encode_frame(buf),
        Outbound::Response(d) => encode_frame(buf, FrameType::Response, &d),
        Outbound::Error(d) => encode_frame(buf, FrameType::Error, &d),
        Outbound::Settings(s) => {
            if s.heartbeat_ms != settings.heartbeat_ms {
                *heartbeat = new_heartbeat(s.heartbeat_ms);
            }
            *settings = s;
        }
        Outbound::Close => return true,
    }
    false
}

/// One write of everything buffered, bounded by the heartbeat interval as
/// nsqd's write deadline. False if the client is gone or too slow.
async fn flush(wr: &mut OwnedWriteHalf, buf: &mut BytesMut, heartbeat_ms: Option<i64>) -> bool {
    if buf.is_empty() {
        return true;
    }
    let ok = match heartbeat_ms {
        Some(ms) => matches!(tokio::time::timeout(Duration::from_millis(ms as u64), wr.write_all(buf)).await, Ok(Ok(()))),
        None => wr.write_all(buf).await.is_ok(),
    };
    buf.clear();
    ok
}

//! The TCP V2 server: accepts connections, checks the magic, and runs one
//! reader (commands, in order) and one writer (frames, batched) per client.
//! The reader also carries out what IDENTIFY negotiates — the TLS upgrade and
//! the compression layers, in nsqd's order and with its `OK` after each — and
//! AUTH's query to the auth servers, so only this client waits for them.
//!
//! The writer takes everything queued in its client's outbox (frames
//! already encoded by whoever queued them) and writes it with one syscall,
//! as soon as it is woken; what arrives meanwhile is the next batch. So a
//! busy client gets large batched writes and an idle one gets each message
//! at once; Go nsqd's `output_buffer_timeout` (250 ms) is never waited for,
//! and `output_buffer_size` only sizes the writer's first buffer.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use nsq_protocol::command::{decode, pending_len, Command, DecodeError, Limits, Precheck};
use nsq_protocol::error::*;
use nsq_protocol::frame::{encode_frame, FrameType, CLOSE_WAIT, HEARTBEAT, MAGIC_V2, OK};
use nsq_protocol::identify::{negotiate, IdentifyRequest, IdentifyResponse, Negotiated};
use nsq_protocol::{MessageId, ProtocolError};
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::auth::{AuthQuery, AuthState};
use crate::channel::{Channel, InFlightError, SubError};
use crate::client::*;
use crate::nsqd::NsqdInner;
use crate::options::TLS_NOT_REQUIRED;
use crate::tls::TlsInfo;
use crate::topic::{PutError, Topic};
use crate::transport::{self, Prefixed, Reader, Writer};
use nsq_protocol::compress::{
    Decoder, DeflateDecoder, DeflateEncoder, Encoder, SnappyDecoder, SnappyEncoder,
};

/// nsqd's deadline for the TLS handshake after IDENTIFY.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

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
    let fd = std::os::fd::AsRawFd::as_raw_fd(&stream);
    let (rd, wr) = transport::split_tcp(stream);
    let (conn, outbox) = ClientConn::new(addr, crate::now_unix_ns() / 1_000_000_000);
    let conn = Arc::new(conn);
    nsqd.add_client(conn.clone());
    let hb = nsqd.features.default_heartbeat_ms;
    let settings = WriterSettings {
        heartbeat_ms: Some(hb),
        output_buffer_size: nsqd.features.default_output_buffer_size as usize,
        output_buffer_timeout_ms: nsqd.features.default_output_buffer_timeout_ms,
    };
    let writer = tokio::spawn(write_loop(wr, fd, outbox, settings, conn.closer.clone()));
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
        now: Instant::now(),
        wants_e2e: !nsqd.opts.e2e_processing_latency_percentiles.is_empty(),
        tls: None,
        compressed: false,
        auth: None,
        auth_secret: String::new(),
        auth_refreshed: false,
        auth_refresh_failed: false,
        pending_fins: Vec::new(),
    };
    let mut inbound = Inbound {
        rd,
        raw: BytesMut::new(),
        decoder: None,
    };
    client.read_loop(&mut inbound).await;
    if let (Some(topic), Some(ch)) = (client.topic.take(), client.channel.take()) {
        let remaining = ch.with(|s| s.remove_client(conn.id));
        topic.client_left(&ch, remaining);
    }
    conn.send_control(Control::Close);
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
    /// The time of the latest read: commands of one read batch share it, so
    /// a pipelined burst of FINs costs one clock read, not one each.
    now: Instant,
    /// Whether FIN needs the wall clock (E2E latency percentiles configured).
    wants_e2e: bool,
    /// Set once the TLS upgrade is done.
    tls: Option<TlsInfo>,
    compressed: bool,
    /// What AUTH got from the auth server (even with no authorizations).
    auth: Option<AuthState>,
    auth_secret: String,
    /// The expired authorizations were queried again (so an empty answer is
    /// "unauthorized", not "AUTH first").
    auth_refreshed: bool,
    /// Querying again failed: the next check is `E_AUTH_FAILED`.
    auth_refresh_failed: bool,
    /// FINs decoded from the current read, not yet carried out.
    pending_fins: Vec<MessageId>,
}

/// The reading side of the connection: the transport, and the compressed
/// bytes not yet decoded once a compression layer is on.
struct Inbound {
    rd: Reader,
    raw: BytesMut,
    decoder: Option<Decoder>,
}

impl Inbound {
    /// Reads once and appends the plain bytes to `buf`; false at end of stream.
    async fn fill(&mut self, buf: &mut BytesMut, limits: &Limits) -> std::io::Result<bool> {
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

/// Work a command leaves for the reader to await before the next one.
enum Followup {
    Done,
    /// IDENTIFY negotiated TLS and/or compression.
    Upgrade(Negotiated),
    /// AUTH with this secret.
    Auth(Bytes),
}

/// The AUTH response; field order is the wire order.
#[derive(Serialize)]
struct AuthResponse<'a> {
    identity: &'a str,
    identity_url: &'a str,
    permission_count: usize,
}

impl Client {
    async fn read_loop(&mut self, inbound: &mut Inbound) {
        let mut buf = BytesMut::with_capacity(4096);
        let mut deadline = self.read_deadline();
        loop {
            loop {
                if self.auth_needs_refresh(&buf) {
                    self.refresh_auth().await;
                }
                let limits = self.nsqd.limits;
                let r = decode(&mut buf, &limits, |name, params| {
                    self.precheck(name, params)
                });
                let r = match r {
                    Ok(Some(Command::Fin(id))) if self.channel.is_some() => {
                        // carried out together with the FINs after it
                        self.pending_fins.push(id);
                        continue;
                    }
                    other => other,
                };
                self.flush_fins();
                match r {
                    Ok(Some(cmd)) => {
                        let result = match self.exec(cmd) {
                            Ok(Followup::Done) => Ok(()),
                            Ok(Followup::Upgrade(n)) => self.upgrade(&n, inbound, &mut buf).await,
                            Ok(Followup::Auth(secret)) => self.auth(&secret).await,
                            Err(e) => Err(e),
                        };
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
            let timeout = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = inbound.fill(&mut buf, &self.nsqd.limits) => match r {
                    Ok(true) => self.now = Instant::now(),
                    Ok(false) => return,
                    Err(e) => {
                        tracing::debug!(addr = %self.conn.remote_addr, error = %e, "failed to read command");
                        return;
                    }
                },
                _ = timeout => {
                    tracing::info!(addr = %self.conn.remote_addr, "client missed heartbeats, closing");
                    return;
                }
                _ = self.conn.closer.cancelled() => return,
            }
        }
    }

    /// Carries out the FINs collected from this read (see `read_loop`):
    /// one channel lock and one delivery pass for all of them, instead of a
    /// lock round trip per FIN between the cores.
    fn flush_fins(&mut self) {
        if self.pending_fins.is_empty() {
            return;
        }
        let fins = std::mem::take(&mut self.pending_fins);
        if let Some(ch) = self.channel.clone() {
            let (id, now) = (self.conn.id, self.now);
            let wall = if self.wants_e2e { crate::now_unix_ns() } else { 0 };
            let mut errors = Vec::new();
            ch.with(|s| s.finish_many(id, &fins, now, wall, |m, e| errors.push(in_flight_error(E_FIN_FAILED, "FIN", m, e))));
            for e in &errors {
                self.send_error(e);
            }
        }
        self.pending_fins = fins;
        self.pending_fins.clear();
    }

    /// nsqd closes a client that sends nothing for two heartbeat intervals.
    fn read_deadline(&self) -> Option<Instant> {
        self.heartbeat_ms
            .map(|h| self.now + Duration::from_millis(2 * h as u64))
    }

    fn send_error(&self, e: &ProtocolError) {
        tracing::debug!(addr = %self.conn.remote_addr, error = %e.payload_lossy(), fatal = e.fatal, "client error");
        self.conn.send_error(&e.payload());
    }

    fn respond(&self, data: &'static [u8]) {
        self.conn.send_response(data);
    }

    /// State checks nsqd makes before it parses a command's parameters.
    fn precheck(&mut self, name: &[u8], params: &[&[u8]]) -> Result<Precheck, ProtocolError> {
        if name != b"IDENTIFY"
            && self.nsqd.opts.tls_required != TLS_NOT_REQUIRED
            && self.tls.is_none()
        {
            let mut desc = b"cannot ".to_vec();
            desc.extend_from_slice(name);
            desc.extend_from_slice(b" in current state (TLS required)");
            return Err(ProtocolError::invalid(desc));
        }
        let cannot = |cmd: &str| {
            Err(ProtocolError::invalid(format!(
                "cannot {cmd} in current state"
            )))
        };
        match name {
            b"IDENTIFY" if self.state != STATE_INIT => cannot("IDENTIFY"),
            b"AUTH" if self.state != STATE_INIT => cannot("AUTH"),
            b"SUB" if self.state != STATE_INIT => cannot("SUB"),
            b"SUB" if self.heartbeat_ms.is_none() => Err(ProtocolError::invalid(
                "cannot SUB with heartbeats disabled",
            )),
            b"RDY" if self.state == STATE_CLOSING => Ok(Precheck::Ignore),
            b"RDY" if self.state != STATE_SUBSCRIBED => cannot("RDY"),
            b"FIN" | b"REQ" | b"TOUCH"
                if self.state != STATE_SUBSCRIBED && self.state != STATE_CLOSING =>
            {
                cannot(std::str::from_utf8(name).unwrap_or("?"))
            }
            b"CLS" if self.state != STATE_SUBSCRIBED => cannot("CLS"),
            b"MPUB" => {
                // nsqd checks authorization, then creates the topic, before
                // it reads (and validates) the body; a bad or missing topic
                // is reported by the decoder.
                if let Some(t) = params.first().and_then(|t| std::str::from_utf8(t).ok()) {
                    if nsq_protocol::names::is_valid_topic_name(t) {
                        self.check_auth("MPUB", t, "")?;
                        self.nsqd.get_or_create_topic(t);
                    }
                }
                Ok(Precheck::Proceed)
            }
            _ => Ok(Precheck::Proceed),
        }
    }

    fn exec(&mut self, cmd: Command) -> Result<Followup, ProtocolError> {
        if let Command::Identify(body) = cmd {
            return self.identify(&body);
        }
        if let Command::Auth(secret) = cmd {
            if self.has_authorizations() {
                return Err(ProtocolError::invalid("AUTH already set"));
            }
            if self.nsqd.auth.is_none() {
                return Err(ProtocolError::fatal(E_AUTH_DISABLED, "AUTH disabled"));
            }
            return Ok(Followup::Auth(secret));
        }
        self.exec_simple(cmd).map(|()| Followup::Done)
    }

    fn exec_simple(&mut self, cmd: Command) -> Result<(), ProtocolError> {
        match cmd {
            Command::Nop | Command::Ignored | Command::Identify(_) | Command::Auth(_) => Ok(()),
            Command::Sub { topic, channel } => {
                self.check_auth("SUB", &topic, &channel)?;
                self.sub(&topic, &channel)
            }
            Command::Rdy(n) => {
                let id = self.conn.id;
                let now = self.now;
                self.channel()?.with(|s| s.set_rdy(id, n, now));
                Ok(())
            }
            Command::Fin(msg_id) => {
                let (id, now) = (self.conn.id, self.now);
                let wall = if self.wants_e2e {
                    crate::now_unix_ns()
                } else {
                    0
                };
                self.channel()?
                    .with(|s| s.finish(id, &msg_id, now, wall))
                    .map_err(|e| in_flight_error(E_FIN_FAILED, "FIN", &msg_id, e))
            }
            Command::Req {
                id: msg_id,
                timeout_ms,
            } => {
                let max = self.nsqd.opts.max_req_timeout;
                let delay = Duration::from_millis(timeout_ms.max(0) as u64).min(max);
                let (id, now) = (self.conn.id, self.now);
                self.channel()?
                    .with(|s| s.requeue(id, &msg_id, delay, now))
                    .map_err(|e| in_flight_error(E_REQ_FAILED, "REQ", &msg_id, e))
            }
            Command::Touch(msg_id) => {
                let max = self.nsqd.opts.max_msg_timeout;
                let (id, now) = (self.conn.id, self.now);
                self.channel()?
                    .with(|s| s.touch(id, &msg_id, now, max))
                    .map_err(|e| in_flight_error(E_TOUCH_FAILED, "TOUCH", &msg_id, e))
            }
            Command::Cls => {
                let id = self.conn.id;
                let now = self.now;
                self.channel()?.with(|s| s.set_rdy(id, 0, now));
                self.state = STATE_CLOSING;
                self.conn.info.lock().state = STATE_CLOSING;
                self.respond(CLOSE_WAIT);
                Ok(())
            }
            Command::Pub { topic, body } => {
                self.check_auth("PUB", &topic, "")?;
                self.publish(&topic, vec![body], None, "PUB", E_PUB_FAILED)
            }
            Command::Mpub { topic, bodies } => {
                self.publish(&topic, bodies, None, "MPUB", E_MPUB_FAILED)
            }
            Command::Dpub {
                topic,
                defer_ms,
                body,
            } => {
                self.check_auth("DPUB", &topic, "")?;
                let d = Duration::from_millis(defer_ms as u64);
                self.publish(&topic, vec![body], Some(d), "DPUB", E_DPUB_FAILED)
            }
        }
    }

    fn channel(&self) -> Result<&Arc<Channel>, ProtocolError> {
        // precheck guarantees a subscription for these commands
        self.channel
            .as_ref()
            .ok_or_else(|| ProtocolError::invalid("not subscribed"))
    }

    fn identify(&mut self, body: &[u8]) -> Result<Followup, ProtocolError> {
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
        self.conn.send_control(Control::Settings(WriterSettings {
            heartbeat_ms: n.heartbeat_ms,
            output_buffer_size: n.output_buffer_size.max(1) as usize,
            output_buffer_timeout_ms: n.output_buffer_timeout_ms,
        }));
        if !n.feature_negotiation {
            self.respond(OK);
            return Ok(Followup::Done);
        }
        let resp = IdentifyResponse::new(&n, &self.nsqd.features);
        let json = serde_json::to_vec(&resp)
            .map_err(|e| ProtocolError::fatal(E_IDENTIFY_FAILED, format!("IDENTIFY failed {e}")))?;
        self.conn.send_response(&json);
        if n.tls_v1 || n.snappy || n.deflate {
            return Ok(Followup::Upgrade(n));
        }
        Ok(Followup::Done)
    }

    /// nsqd's upgrade sequence after the IDENTIFY JSON: TLS, then snappy or
    /// deflate, each followed by an `OK` sent through the new layer.
    async fn upgrade(
        &mut self,
        n: &Negotiated,
        inbound: &mut Inbound,
        buf: &mut BytesMut,
    ) -> Result<(), ProtocolError> {
        let failed = |e: &dyn std::fmt::Display| {
            ProtocolError::fatal(E_IDENTIFY_FAILED, format!("IDENTIFY failed {e}"))
        };
        // Bytes the client sent right after IDENTIFY already belong to the
        // new layer; they are replayed into it.
        let mut leftover = buf.split().freeze();
        if n.tls_v1 {
            // A second IDENTIFY cannot wrap TLS in TLS (Go nsqd would try,
            // and fail the handshake); say so instead.
            if self.tls.is_some() || self.compressed {
                return Err(failed(&"connection already upgraded"));
            }
            let Some(cfg) = self.nsqd.tls.clone() else {
                return Err(failed(&"TLS not configured"));
            };
            tracing::info!(addr = %self.conn.remote_addr, "upgrading connection to TLS");
            let (give_tx, give_rx) = oneshot::channel();
            let (take_tx, take_rx) = oneshot::channel();
            self.conn.send_control(Control::Detach {
                give: give_tx,
                take: take_rx,
            });
            // The writer first flushes the JSON: the client starts its
            // handshake only after reading it.
            let wr = give_rx.await.map_err(|_| failed(&"connection closed"))?;
            let rd = std::mem::replace(&mut inbound.rd, Reader::Detached);
            let tcp = transport::reunite(rd, wr).map_err(|e| failed(&e))?;
            let io = Prefixed::new(std::mem::take(&mut leftover), tcp);
            let accept = tokio_rustls::TlsAcceptor::from(cfg)
                .accept(io)
                .into_fallible();
            let handshake = tokio::select! {
                r = tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, accept) => r,
                // nsqd is shutting down: the socket goes with the handshake.
                _ = self.conn.closer.cancelled() => return Err(failed(&"connection closed")),
            };
            match handshake {
                Ok(Ok(tls)) => {
                    let info = TlsInfo::of(tls.get_ref().1);
                    {
                        let mut ci = self.conn.info.lock();
                        ci.tls = true;
                        ci.tls_cipher_suite = info.cipher_suite.clone();
                        ci.tls_version = info.version.clone();
                        ci.tls_negotiated_protocol = info.negotiated_protocol.clone();
                    }
                    let (r, w) = transport::split_tls(tls);
                    inbound.rd = r;
                    let _ = take_tx.send(w);
                    self.tls = Some(info);
                    self.respond(OK);
                }
                Ok(Err((e, io))) => {
                    // The error frame goes out in plain text, as from nsqd.
                    let (r, w) = transport::split_tcp(io.into_inner());
                    inbound.rd = r;
                    let _ = take_tx.send(w);
                    return Err(failed(&e));
                }
                // The socket went down with the handshake; the writer sees
                // `take` dropped and closes.
                Err(_) => return Err(failed(&"TLS handshake timed out")),
            }
        }
        if n.snappy || n.deflate {
            if self.compressed {
                return Err(failed(&"connection already compressed"));
            }
            let (enc, dec) = if n.snappy {
                tracing::info!(addr = %self.conn.remote_addr, "upgrading connection to snappy");
                self.conn.info.lock().snappy = true;
                (
                    Encoder::Snappy(SnappyEncoder::new()),
                    Decoder::Snappy(SnappyDecoder::new()),
                )
            } else {
                tracing::info!(addr = %self.conn.remote_addr, level = n.deflate_level, "upgrading connection to deflate");
                self.conn.info.lock().deflate = true;
                (
                    Encoder::Deflate(DeflateEncoder::new(n.deflate_level as u32)),
                    Decoder::Deflate(DeflateDecoder::new()),
                )
            };
            self.compressed = true;
            self.conn.send_control(Control::Compress(Box::new(enc)));
            self.respond(OK);
            inbound.raw.extend_from_slice(&leftover);
            let mut dec = dec;
            dec.decode(&mut inbound.raw, buf).map_err(|e| failed(&e))?;
            inbound.decoder = Some(dec);
        }
        Ok(())
    }

    fn has_authorizations(&self) -> bool {
        self.auth
            .as_ref()
            .is_some_and(|a| !a.authorizations.is_empty())
    }

    fn auth_query(&self) -> AuthQuery {
        AuthQuery {
            remote_ip: self.conn.remote_addr.ip().to_string(),
            tls: self.tls.is_some(),
            common_name: self
                .tls
                .as_ref()
                .map(|t| t.common_name.clone())
                .unwrap_or_default(),
            secret: self.auth_secret.clone(),
        }
    }

    /// AUTH: asks the auth servers; this client's reader waits, no one else.
    async fn auth(&mut self, secret: &[u8]) -> Result<(), ProtocolError> {
        let Some(cfg) = self.nsqd.auth.clone() else {
            return Err(ProtocolError::fatal(E_AUTH_DISABLED, "AUTH disabled"));
        };
        self.auth_secret = String::from_utf8_lossy(secret).into_owned();
        let q = self.auth_query();
        let result = tokio::select! {
            r = crate::auth::query_any(&cfg, &q) => r,
            _ = self.conn.closer.cancelled() => return Err(ProtocolError::fatal(E_AUTH_FAILED, "AUTH failed")),
        };
        let state = match result {
            Ok(s) => s,
            Err(e) => {
                // Auth server trouble is for the log, not for untrusted clients.
                tracing::warn!(addr = %self.conn.remote_addr, error = %e, "AUTH failed");
                return Err(ProtocolError::fatal(E_AUTH_FAILED, "AUTH failed"));
            }
        };
        self.set_auth(state);
        let Some(state) = self.auth.as_ref().filter(|a| !a.authorizations.is_empty()) else {
            return Err(ProtocolError::fatal(
                E_UNAUTHORIZED,
                "AUTH no authorizations found",
            ));
        };
        let resp = AuthResponse {
            identity: &state.identity,
            identity_url: &state.identity_url,
            permission_count: state.authorizations.len(),
        };
        let json = serde_json::to_vec(&resp)
            .map_err(|e| ProtocolError::fatal(E_AUTH_ERROR, format!("AUTH error {e}")))?;
        self.conn.send_response(&json);
        Ok(())
    }

    fn set_auth(&mut self, state: AuthState) {
        {
            let mut ci = self.conn.info.lock();
            ci.authed = !state.authorizations.is_empty();
            ci.auth_identity = state.identity.clone();
            ci.auth_identity_url = state.identity_url.clone();
        }
        self.auth = Some(state);
    }

    /// Expired authorizations are queried again before the command that
    /// needs them is parsed (the check itself must stay synchronous); the
    /// outcome is kept for that check, so errors still come in nsqd's order.
    fn auth_needs_refresh(&self, buf: &[u8]) -> bool {
        if self.nsqd.auth.is_none() || self.auth_refresh_failed || !self.has_authorizations() {
            return false;
        }
        if !self
            .auth
            .as_ref()
            .is_some_and(|a| a.is_expired(Instant::now()))
        {
            return false;
        }
        let scan = &buf[..buf.len().min(nsq_protocol::command::MAX_LINE_LEN)];
        let Some(nl) = scan.iter().position(|&b| b == b'\n') else {
            return false;
        };
        let name = scan[..nl]
            .split(|&b| b == b' ' || b == b'\r')
            .next()
            .unwrap_or(&[]);
        matches!(name, b"SUB" | b"PUB" | b"MPUB" | b"DPUB")
    }

    async fn refresh_auth(&mut self) {
        let Some(cfg) = self.nsqd.auth.clone() else {
            return;
        };
        let q = self.auth_query();
        let result = tokio::select! {
            r = crate::auth::query_any(&cfg, &q) => r,
            _ = self.conn.closer.cancelled() => {
                self.auth_refresh_failed = true;
                return;
            }
        };
        match result {
            Ok(state) => {
                self.auth_refreshed = true;
                self.set_auth(state);
            }
            Err(e) => {
                tracing::warn!(addr = %self.conn.remote_addr, error = %e, "AUTH failed");
                self.auth_refresh_failed = true;
            }
        }
    }

    /// nsqd's authorization check for SUB (channel set) and publishes
    /// (channel ""), when auth is enabled.
    fn check_auth(&self, cmd: &str, topic: &str, channel: &str) -> Result<(), ProtocolError> {
        if self.nsqd.auth.is_none() {
            return Ok(());
        }
        if !self.has_authorizations() && !self.auth_refreshed {
            return Err(ProtocolError::fatal(
                E_AUTH_FIRST,
                format!("AUTH required before {cmd}"),
            ));
        }
        if self.auth_refresh_failed {
            return Err(ProtocolError::fatal(E_AUTH_FAILED, "AUTH failed"));
        }
        if !self
            .auth
            .as_ref()
            .is_some_and(|a| a.is_allowed(topic, channel))
        {
            return Err(ProtocolError::fatal(
                E_UNAUTHORIZED,
                format!(
                    "AUTH failed for {cmd} on {} {}",
                    nsq_protocol::error::go_quote(topic),
                    nsq_protocol::error::go_quote(channel)
                ),
            ));
        }
        Ok(())
    }

    fn sub(&mut self, topic_name: &str, channel_name: &str) -> Result<(), ProtocolError> {
        let exiting = || ProtocolError::fatal(E_SUB_FAILED, "SUB failed exiting");
        // An ephemeral channel may be going away under us as its last client
        // leaves; nsqd retries once before giving up.
        for attempt in 0..2 {
            let topic = self
                .nsqd
                .get_or_create_topic(topic_name)
                .ok_or_else(exiting)?;
            let ch = match topic.get_or_create_channel(channel_name) {
                Ok(ch) => ch,
                Err(_) if attempt == 0 => continue,
                Err(_) => {
                    return Err(ProtocolError::fatal(
                        E_SUB_FAILED,
                        "SUB failed to deleted topic/channel",
                    ))
                }
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

    fn publish(
        &mut self,
        topic_name: &str,
        bodies: Vec<Bytes>,
        defer: Option<Duration>,
        cmd: &str,
        code: &'static str,
    ) -> Result<(), ProtocolError> {
        let n = bodies.len() as u64;
        let cached = self
            .topics
            .get(topic_name)
            .filter(|t| !t.cancel.is_cancelled())
            .cloned();
        let topic = match cached {
            Some(t) => t,
            None => {
                let t = self
                    .nsqd
                    .get_or_create_topic(topic_name)
                    .ok_or_else(|| ProtocolError::fatal(code, format!("{cmd} failed exiting")))?;
                self.topics.insert(topic_name.to_string(), t.clone());
                t
            }
        };
        match topic.put(bodies, defer) {
            Ok(()) => {}
            Err(PutError::Exiting) => {
                return Err(ProtocolError::fatal(code, format!("{cmd} failed exiting")))
            }
            Err(PutError::Backend(e)) => {
                return Err(ProtocolError::fatal(code, format!("{cmd} failed {e}")))
            }
        }
        self.conn.record_pub(topic_name, n);
        self.respond(OK);
        Ok(())
    }
}

fn in_flight_error(
    code: &'static str,
    cmd: &str,
    id: &nsq_protocol::MessageId,
    e: InFlightError,
) -> ProtocolError {
    ProtocolError::non_fatal(code, format!("{cmd} {id} failed {}", e.text()))
}

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
async fn write_loop(wr: Writer, fd: std::os::fd::RawFd, outbox: Arc<Outbox>, settings: WriterSettings, closer: CancellationToken) {
    write_batches(wr, fd, &outbox, settings, &closer).await;
    outbox.writer_gone();
    closer.cancel();
}

async fn write_batches(mut wr: Writer, fd: std::os::fd::RawFd, outbox: &Outbox, mut settings: WriterSettings, closer: &CancellationToken) {
    let mut out = Output { wire: BytesMut::new(), encoder: None, fd };
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
            if !out.write(&mut wr, &frames[pos..at], settings.heartbeat_ms).await {
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
        if !out.write(&mut wr, &frames[pos..], settings.heartbeat_ms).await {
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


//! nsqd's side of discovery: one connection per `--lookupd-tcp-address`
//! that identifies, registers every topic and channel, sends REGISTER and
//! UNREGISTER as they come and go, PINGs every 15 s, and reconnects (with a
//! full re-registration) as soon as a command finds it down, retrying that
//! command on the new connection. The same loop
//! persists `nsqd.dat` after topics or channels change, as nsqd's does.
//!
//! nsq-rs: a replicated topic is registered only by the member that leads
//! its group (`core::serving`): the decision is made when a command is
//! sent, and a change of leadership re-sends the topic's registrations or
//! removes them (`Event::Reregister`, from `leadership.rs`).
//!
//! nsq-rs: a `tls://host:port` address is dialled over TLS from the first
//! byte (a lookupd with `--tls-required`), its certificate verified for
//! `host` against `--tls-root-ca-file` or the system's CAs; nsqd presents
//! its `--tls-cert` to a lookupd that asks for a client certificate.

use std::sync::Arc;
use std::time::Duration;

use nsq_http::stream::Stream;
use nsq_protocol::lookupd::{Identify, LookupdInfo, Request};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc::UnboundedReceiver;

use super::context::Event;
use super::nsqd::NsqdInner;
use super::topic::Topic;

/// nsqd's fixed lookupd heartbeat.
const PING_INTERVAL: Duration = Duration::from_secs(15);
/// Every dial, read and write to a lookupd is bounded by this (as in nsqd).
const IO_TIMEOUT: Duration = Duration::from_secs(1);
/// Largest response we accept from a lookupd.
const MAX_RESPONSE: usize = 5 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("timed out")]
    Timeout,
    #[error("bad response: {0}")]
    BadResponse(String),
    #[error("TLS: {0}")]
    Tls(String),
}

/// The `tls://` scheme of a lookupd address: TLS from the first byte.
const TLS_SCHEME: &str = "tls://";

/// The host of `host:port` or `[v6]:port`, as a certificate names it.
fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

struct Peer {
    addr: String,
    conn: Option<Stream>,
    /// `broadcast_address:http_port` the lookupd told us, once identified.
    http_addr: Option<String>,
}

async fn io<T>(f: impl std::future::Future<Output = std::io::Result<T>>) -> Result<T, PeerError> {
    tokio::time::timeout(IO_TIMEOUT, f)
        .await
        .map_err(|_| PeerError::Timeout)?
        .map_err(PeerError::Io)
}

impl Peer {
    fn new(addr: String) -> Peer {
        Peer {
            addr,
            conn: None,
            http_addr: None,
        }
    }

    /// Sends one command (line and optional body) and reads its response.
    async fn roundtrip(conn: &mut Stream, cmd: &[u8]) -> Result<Vec<u8>, PeerError> {
        io(conn.write_all(cmd)).await?;
        // TLS buffers what it encrypts (a no-op on plain TCP).
        io(conn.flush()).await?;
        let mut size = [0u8; 4];
        io(conn.read_exact(&mut size)).await?;
        let size = i32::from_be_bytes(size);
        if size < 0 || size as usize > MAX_RESPONSE {
            return Err(PeerError::BadResponse(format!("size {size}")));
        }
        let mut data = vec![0u8; size as usize];
        io(conn.read_exact(&mut data)).await?;
        Ok(data)
    }

    async fn connect(&mut self, nsqd: &NsqdInner) -> Result<(), PeerError> {
        tracing::info!(lookupd = %self.addr, "LOOKUP connecting");
        let mut conn = self.dial(nsqd).await?;
        io(conn.write_all(nsq_protocol::lookupd::MAGIC_V1)).await?;
        let identify = Identify {
            broadcast_address: nsqd.opts().broadcast_address.clone(),
            hostname: nsq_cli::hostname().unwrap_or_default(),
            http_port: nsqd.http_port.load(std::sync::atomic::Ordering::Relaxed),
            tcp_port: nsqd.tcp_port.load(std::sync::atomic::Ordering::Relaxed),
            topology_region: nsqd.opts().topology_region.clone(),
            topology_zone: nsqd.opts().topology_zone.clone(),
            version: nsq_protocol::VERSION.to_string(),
        };
        let cmd = Request::Identify(&identify).encode();
        let resp = Self::roundtrip(&mut conn, &cmd).await?;
        let info: LookupdInfo = serde_json::from_slice(&resp)
            .map_err(|_| PeerError::BadResponse(String::from_utf8_lossy(&resp).into_owned()))?;
        self.http_addr = Some(format!("{}:{}", info.broadcast_address, info.http_port));
        tracing::info!(
            lookupd = %self.addr,
            http = self.http_addr.as_deref().unwrap_or(""),
            "LOOKUPD identified"
        );
        // Bring the lookupd up to date: everything we serve, channels or
        // bare topics.
        for topic in nsqd.topics() {
            if !nsqd.registers(&topic) {
                continue;
            }
            for l in registrations(&topic) {
                Self::roundtrip(&mut conn, &l).await?;
            }
        }
        self.conn = Some(conn);
        Ok(())
    }

    /// The TCP connection, over TLS for a `tls://` address. The CA file is
    /// read at each dial, so a replaced one is used on the next reconnect.
    async fn dial(&self, nsqd: &NsqdInner) -> Result<Stream, PeerError> {
        let Some(addr) = self.addr.strip_prefix(TLS_SCHEME) else {
            let conn = io(TcpStream::connect(&self.addr)).await?;
            let _ = conn.set_nodelay(true);
            return Ok(Stream::Plain(conn));
        };
        let name = rustls::pki_types::ServerName::try_from(host_of(addr).to_string())
            .map_err(|e| PeerError::Tls(e.to_string()))?;
        let cfg = super::tls::lookupd_client_config(nsqd.opts())
            .map_err(|e| PeerError::Tls(e.to_string()))?;
        let conn = io(TcpStream::connect(addr)).await?;
        let _ = conn.set_nodelay(true);
        let tls = tokio::time::timeout(
            IO_TIMEOUT,
            tokio_rustls::TlsConnector::from(cfg).connect(name, conn),
        )
        .await
        .map_err(|_| PeerError::Timeout)?
        .map_err(|e| PeerError::Tls(e.to_string()))?;
        Ok(Stream::Tls(Box::new(tls.into())))
    }

    /// Runs a command, (re)connecting first if needed. Errors drop the
    /// connection; the next command reconnects and re-registers.
    async fn command(&mut self, nsqd: &NsqdInner, cmd: &[u8]) -> Result<Vec<u8>, PeerError> {
        if self.conn.is_none() {
            self.connect(nsqd).await?;
        }
        let Some(conn) = self.conn.as_mut() else {
            return Err(PeerError::Timeout);
        };
        match Self::roundtrip(conn, cmd).await {
            Ok(r) => Ok(r),
            Err(e) => {
                self.conn = None;
                Err(e)
            }
        }
    }

    async fn run(&mut self, nsqd: &NsqdInner, cmd: &[u8]) {
        let was_connected = self.conn.is_some();
        let mut result = self.command(nsqd, cmd).await;
        if result.is_err() && was_connected {
            // A connection that went stale (the lookupd restarted) is only
            // noticed when used: reconnect and re-register now, not at the
            // next PING 15 s later (where Go nsqd would).
            result = self.command(nsqd, cmd).await;
        }
        if let Err(e) = result {
            self.conn = None;
            tracing::warn!(lookupd = %self.addr, cmd = %String::from_utf8_lossy(cmd).trim_end(), error = %e, "LOOKUPD command failed");
        }
    }
}

/// What registers `topic` and its channels: `REGISTER t c` per channel
/// (which registers the topic too), or `REGISTER t` for a topic without.
fn registrations(topic: &Topic) -> Vec<Vec<u8>> {
    let channels = topic.channel_names();
    if channels.is_empty() {
        return vec![Request::Register(&topic.name, None).encode()];
    }
    channels
        .iter()
        .map(|c| Request::Register(&topic.name, Some(c)).encode())
        .collect()
}

/// What removes them: each channel's, then the topic's (a topic's alone
/// would remove the channels too, with a warning in the lookupd's log).
fn unregistrations(topic: &Topic) -> Vec<Vec<u8>> {
    let mut cmds: Vec<Vec<u8>> = topic
        .channel_names()
        .iter()
        .map(|c| Request::Unregister(&topic.name, Some(c)).encode())
        .collect();
    cmds.push(Request::Unregister(&topic.name, None).encode());
    cmds
}

/// The commands for one event: NSQ's for an unreplicated topic; for a
/// replicated one, registrations only while this member serves it, decided
/// now, so an event that waited behind a change of leadership is not
/// stale. Removals are always sent (a lookupd ignores what it lacks).
fn commands_for(nsqd: &NsqdInner, ev: &Event) -> Vec<Vec<u8>> {
    let served = |name: &str| match nsqd.get_topic(name) {
        Some(t) => nsqd.registers(&t),
        // Gone already: NSQ registers it anyway, its removal follows.
        None => true,
    };
    match ev {
        Event::TopicCreated(t) if served(t.as_str()) => vec![Request::Register(t, None).encode()],
        Event::ChannelCreated(t, c) if served(t.as_str()) => {
            vec![Request::Register(t, Some(c)).encode()]
        }
        Event::TopicCreated(_) | Event::ChannelCreated(..) => Vec::new(),
        Event::TopicDeleted(t) => vec![Request::Unregister(t, None).encode()],
        Event::ChannelDeleted(t, c) => vec![Request::Unregister(t, Some(c)).encode()],
        Event::Reregister(t) => match nsqd.get_topic(t) {
            Some(topic) if nsqd.registers(&topic) => registrations(&topic),
            Some(topic) => unregistrations(&topic),
            None => Vec::new(),
        },
    }
}

fn touches_metadata(ev: &Event) -> bool {
    match ev {
        Event::TopicCreated(t) | Event::TopicDeleted(t) => !nsq_protocol::names::is_ephemeral(t),
        Event::ChannelCreated(t, c) | Event::ChannelDeleted(t, c) => {
            !nsq_protocol::names::is_ephemeral(t) && !nsq_protocol::names::is_ephemeral(c)
        }
        Event::Reregister(_) => false,
    }
}

fn publish_http_addrs(nsqd: &NsqdInner, peers: &[Peer]) {
    let addrs = peers.iter().filter_map(|p| p.http_addr.clone()).collect();
    nsqd.lookupd_http_addresses.send_replace(Some(addrs));
}

/// The lookup loop; see the module docs.
pub async fn run(nsqd: Arc<NsqdInner>, mut events: UnboundedReceiver<Event>) {
    let mut peers: Vec<Peer> = Vec::new();
    let mut ticker =
        tokio::time::interval_at(tokio::time::Instant::now() + PING_INTERVAL, PING_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    sync_peers(&nsqd, &mut peers).await;
    loop {
        tokio::select! {
            ev = events.recv() => {
                let Some(ev) = ev else { return };
                let mut batch = vec![ev];
                while let Ok(e) = events.try_recv() {
                    batch.push(e);
                }
                for ev in &batch {
                    for cmd in commands_for(&nsqd, ev) {
                        for p in peers.iter_mut() {
                            p.run(&nsqd, &cmd).await;
                        }
                    }
                }
                publish_http_addrs(&nsqd, &peers);
                if batch.iter().any(touches_metadata) {
                    let n = nsqd.clone();
                    if let Ok(Err(e)) = tokio::task::spawn_blocking(move || n.persist_metadata()).await {
                        tracing::error!(error = %e, "failed to persist metadata");
                    }
                }
            }
            _ = ticker.tick() => {
                for p in peers.iter_mut() {
                    p.run(&nsqd, &Request::Ping.encode()).await;
                }
                publish_http_addrs(&nsqd, &peers);
            }
            _ = nsqd.lookupd_changed.notified() => sync_peers(&nsqd, &mut peers).await,
            _ = nsqd.ctx.cancel.cancelled() => return,
        }
    }
}

/// Matches the peers to the configured addresses: closes removed ones,
/// connects new ones.
async fn sync_peers(nsqd: &NsqdInner, peers: &mut Vec<Peer>) {
    let wanted: Vec<String> = nsqd.lookupd_tcp_addresses.lock().clone();
    peers.retain(|p| {
        let keep = wanted.contains(&p.addr);
        if !keep {
            tracing::info!(lookupd = %p.addr, "LOOKUP removing peer");
        }
        keep
    });
    for addr in wanted {
        if !peers.iter().any(|p| p.addr == addr) {
            let mut p = Peer::new(addr);
            if let Err(e) = p.connect(nsqd).await {
                tracing::warn!(lookupd = %p.addr, error = %e, "LOOKUPD connect failed");
                p.conn = None;
            }
            peers.push(p);
        }
    }
    publish_http_addrs(nsqd, peers);
}

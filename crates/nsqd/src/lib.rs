//! nsqd: receives, queues and delivers messages.
//!
//! The path of one message, by module: [`tcp`] (or [`http`]) decodes a PUB
//! and calls [`topic::Topic::put`]; the topic stamps an id ([`guid`]) and
//! hands a copy — same body — to each [`channel::Channel`]; the channel
//! queues it (memory, then [`backend`]) and pushes it to a subscribed
//! [`client`] with RDY credit, marking it in flight; the client's writer in
//! [`tcp`] batches it onto the socket; FIN (or REQ, or the channel's timer)
//! takes it out of flight. [`nsqd`] owns the topics, the metadata file and
//! shutdown; [`stats`] reports on all of it.
//!
//! Around that path: [`transport`] and [`nsq_protocol::compress`] are the bytes under a
//! TCP client after IDENTIFY's upgrades, [`tls`] configures TLS for TCP
//! and HTTPS, [`auth`] asks the auth servers what a client may do, and
//! [`statsd`] and [`metrics`] push or expose the numbers of [`stats`].

#![forbid(unsafe_op_in_unsafe_fn)]

pub mod auth;
pub mod backend;
pub mod channel;
pub mod client;
pub mod e2e;
pub mod guid;
pub mod http;
pub mod lookup;
pub mod metrics;
pub mod nsqd;
pub mod options;
pub mod stats;
pub mod statsd;
pub mod tcp;
pub mod tls;
pub mod topic;
pub mod transport;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use nsqd::{Error, Event, NsqdInner};
pub use nsq_protocol::VERSION;
pub use options::Options;

/// Wall-clock time in Unix nanoseconds (message timestamps, E2E latency).
pub fn now_unix_ns() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0)
}

/// The OS hostname (nsqd's default broadcast address and node id seed).
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into our buffer.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    if r != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// A started nsqd: data path locked, listeners bound, metadata loaded.
pub struct Nsqd {
    inner: Arc<NsqdInner>,
    tcp: TcpListener,
    http: Option<TcpListener>,
    https: Option<TcpListener>,
}

async fn bind(addr: &str) -> Result<TcpListener, Error> {
    TcpListener::bind(addr).await.map_err(|err| Error::Listen { addr: addr.to_string(), err })
}

impl Nsqd {
    /// nsqd's startup order: validate, lock the data path, bind, load and
    /// re-persist the metadata.
    pub async fn new(opts: Options) -> Result<Nsqd, Error> {
        let inner = NsqdInner::new(opts)?;
        let tcp = bind(&inner.opts.tcp_address).await?;
        let http = if inner.opts.http_address.is_empty() { None } else { Some(bind(&inner.opts.http_address).await?) };
        let https = match (&inner.tls, inner.opts.https_address.is_empty()) {
            (Some(_), false) => Some(bind(&inner.opts.https_address).await?),
            _ => None,
        };
        if let Some(h) = &https {
            inner.https_port.store(local_port(h), Ordering::Relaxed);
        }
        inner.tcp_port.store(
            if inner.opts.broadcast_tcp_port != 0 { inner.opts.broadcast_tcp_port } else { local_port(&tcp) },
            Ordering::Relaxed,
        );
        if let Some(h) = &http {
            inner.http_port.store(
                if inner.opts.broadcast_http_port != 0 { inner.opts.broadcast_http_port } else { local_port(h) },
                Ordering::Relaxed,
            );
        }
        {
            let http_port = inner.http_port.load(Ordering::Relaxed);
            let host_key = format!("{}:{}", inner.opts.broadcast_address, http_port).replace(['.', ':'], "_");
            *inner.statsd_prefix.lock() = statsd_prefix(&inner.opts.statsd_prefix, &host_key);
        }
        inner.load_metadata()?;
        inner.persist_metadata()?;
        Ok(Nsqd { inner, tcp, http, https })
    }

    pub fn inner(&self) -> Arc<NsqdInner> {
        self.inner.clone()
    }

    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        self.tcp.local_addr().ok()
    }

    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http.as_ref().and_then(|h| h.local_addr().ok())
    }

    pub fn https_addr(&self) -> Option<SocketAddr> {
        self.https.as_ref().and_then(|h| h.local_addr().ok())
    }

    /// Serves until `shutdown` is cancelled, then shuts down cleanly:
    /// listeners closed, clients disconnected, everything persisted.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), Error> {
        let Nsqd { inner, tcp, http, https } = self;
        tracing::info!(version = nsq_protocol::VERSION, "nsqd (nsq-rs) starting");
        tracing::info!(addr = ?tcp.local_addr().ok(), "TCP: listening");
        let tcp_task = tokio::spawn(tcp::serve(tcp, inner.clone()));
        let http_task = http.map(|h| {
            tracing::info!(addr = ?h.local_addr().ok(), "HTTP: listening");
            tokio::spawn(http::serve(h, inner.clone()))
        });
        let https_task = match (https, inner.tls.clone()) {
            (Some(h), Some(cfg)) => {
                tracing::info!(addr = ?h.local_addr().ok(), "HTTPS: listening");
                Some(tokio::spawn(http::serve_tls(h, cfg, inner.clone())))
            }
            _ => None,
        };
        if !inner.opts.statsd_address.is_empty() {
            inner.tasks.spawn(statsd::run(inner.clone()));
        }
        if let Some(rx) = inner.take_events() {
            inner.tasks.spawn(lookup::run(inner.clone(), rx));
        }
        inner.tasks.spawn(sync_loop(inner.clone()));
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = inner.cancel.cancelled() => {}
        }
        tracing::info!("nsqd: shutting down");
        inner.cancel.cancel();
        let _ = tcp_task.await;
        if let Some(h) = http_task {
            let _ = h.await;
        }
        if let Some(h) = https_task {
            let _ = h.await;
        }
        inner.shutdown().await;
        tracing::info!("nsqd: stopped");
        Ok(())
    }
}

/// nsqd's processed statsd prefix: `%s` → host key, then a trailing `.`.
pub fn statsd_prefix(raw: &str, host_key: &str) -> String {
    if raw.is_empty() {
        return String::new();
    }
    let mut p = raw.replace("%s", host_key);
    if !p.ends_with('.') {
        p.push('.');
    }
    p
}

fn local_port(l: &TcpListener) -> u16 {
    l.local_addr().map(|a| a.port()).unwrap_or(0)
}

/// fsyncs disk queues with unsynced writes every `--sync-timeout`.
async fn sync_loop(nsqd: Arc<NsqdInner>) {
    let mut tick = tokio::time::interval(nsqd.opts.sync_timeout.max(std::time::Duration::from_millis(10)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = nsqd.cancel.cancelled() => return,
        }
        let n = nsqd.clone();
        let _ = tokio::task::spawn_blocking(move || n.sync_all()).await;
    }
}

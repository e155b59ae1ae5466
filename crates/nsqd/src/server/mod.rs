//! nsqd's server: everything that does I/O around the [`crate::core`].
//!
//! [`tcp`] (or [`http`]) decodes a publish and calls [`topic::Topic::publish`];
//! the topic ([`topic`]) runs the core's fan-out under its lock and each
//! [`channel::Channel`] runs its core the same way: under the lock, the
//! core's frames go to the subscribed [`client::Client`]s' [`outbox`]es;
//! unlocked, the disk work it asked for goes to the [`backend`]. The
//! connection's writer ([`tcp::writer`]) batches the frames onto the
//! socket; FIN (or REQ, or the channel's timer) takes a message out of
//! flight. [`nsqd`] owns the topics by name, [`metadata`] the `nsqd.dat`
//! file, [`context`] what topics and channels share (health, events, the
//! shutdown token); [`lookup`] registers with the lookupds and
//! [`precreate`] asks them which channels a new topic has.
//!
//! Around that path: [`tls`] configures TLS for TCP and HTTPS (the auth
//! servers are asked through `nsq_http::auth`), and
//! [`stats`], [`statsd`] and [`metrics`] report on all of it.
//!
//! Replicated topics (nsq-rs, opt-in) are a wing of their own,
//! [`replicated`], which this module starts with the replication flags;
//! the plain server meets it only through [`cluster`], the one seam that
//! says what is decided about a replicated topic and by whom.

pub mod backend;
pub mod channel;
pub mod client;
pub mod clock;
pub mod cluster;
pub mod context;
pub mod disk;
pub mod health;
pub mod http;
pub mod lookup;
pub mod metadata;
pub mod metrics;
pub mod nsqd;
pub mod outbox;
pub mod precreate;
pub mod replicated;
pub mod spill;
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

use self::nsqd::{Error, NsqdInner};
use crate::options::Options;

/// A started nsqd: data path locked, listeners bound, metadata loaded.
pub struct Nsqd {
    inner: Arc<NsqdInner>,
    tcp: TcpListener,
    http: Option<TcpListener>,
    https: Option<TcpListener>,
}

async fn bind(addr: &str) -> Result<TcpListener, Error> {
    TcpListener::bind(addr).await.map_err(|err| Error::Listen {
        addr: addr.to_string(),
        err,
    })
}

impl Nsqd {
    /// nsqd's startup order: validate, lock the data path, bind, load and
    /// re-persist the metadata.
    pub fn new(opts: Options) -> nsq_cli::DaemonFuture<Result<Nsqd, Error>> {
        Box::pin(Self::start(opts))
    }

    async fn start(opts: Options) -> Result<Nsqd, Error> {
        let inner = NsqdInner::new(opts)?;
        let tcp = bind(&inner.opts().tcp_address).await?;
        let http = if inner.opts().http_address.is_empty() {
            None
        } else {
            Some(bind(&inner.opts().http_address).await?)
        };
        let https = match (&inner.tls, inner.opts().https_address.is_empty()) {
            (Some(_), false) => Some(bind(&inner.opts().https_address).await?),
            _ => None,
        };
        if let Some(h) = &https {
            inner.https_port.store(local_port(h), Ordering::Relaxed);
        }
        inner.tcp_port.store(
            if inner.opts().broadcast_tcp_port != 0 {
                inner.opts().broadcast_tcp_port
            } else {
                local_port(&tcp)
            },
            Ordering::Relaxed,
        );
        if let Some(h) = &http {
            inner.http_port.store(
                if inner.opts().broadcast_http_port != 0 {
                    inner.opts().broadcast_http_port
                } else {
                    local_port(h)
                },
                Ordering::Relaxed,
            );
        }
        {
            let http_port = inner.http_port.load(Ordering::Relaxed);
            let host_key = format!("{}:{}", inner.opts().broadcast_address, http_port)
                .replace(['.', ':'], "_");
            *inner.statsd_prefix.lock() = statsd_prefix(&inner.opts().statsd_prefix, &host_key);
        }
        let member = if inner.opts().replication_enabled() {
            let about = inner.tcp_broadcast_address();
            let m = replicated::Member::start(&inner, about)
                .await
                .map_err(|e| Error::Replication(Box::new(e)))?;
            let m = Arc::new(m);
            inner.set_cluster(m.clone());
            Some(m)
        } else {
            None
        };
        inner.load_metadata()?;
        inner.persist_metadata()?;
        // After the topics nsqd.dat restores: the groups' entries, applied
        // again from their logs, then find the topics they made.
        if let Some(m) = member {
            m.spawn(&inner);
        }
        Ok(Nsqd {
            inner,
            tcp,
            http,
            https,
        })
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
    pub fn run(self, shutdown: CancellationToken) -> nsq_cli::DaemonFuture<Result<(), Error>> {
        Box::pin(self.serve(shutdown))
    }

    async fn serve(self, shutdown: CancellationToken) -> Result<(), Error> {
        let Nsqd {
            inner,
            tcp,
            http,
            https,
        } = self;
        tracing::info!(version = nsq_protocol::VERSION, "nsqd (nsq-rs) starting");
        tracing::info!("TCP: listening on {}", shown(tcp.local_addr()));
        let tcp_task = tokio::spawn(tcp::serve(tcp, inner.clone()));
        let http_task = http.map(|h| {
            tracing::info!("HTTP: listening on {}", shown(h.local_addr()));
            tokio::spawn(http::serve(h, None, inner.clone()))
        });
        let https_task = match (https, inner.tls.clone()) {
            (Some(h), Some(cfg)) => {
                tracing::info!("HTTPS: listening on {}", shown(h.local_addr()));
                Some(tokio::spawn(http::serve(h, Some(cfg), inner.clone())))
            }
            _ => None,
        };
        if !inner.opts().statsd_address.is_empty() {
            inner.ctx.tasks.spawn(statsd::run(inner.clone()));
        }
        if let Some(rx) = inner.take_events() {
            inner.ctx.tasks.spawn(lookup::run(inner.clone(), rx));
        }
        inner.ctx.tasks.spawn(sync_loop(inner.clone()));
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = inner.ctx.cancel.cancelled() => {}
        }
        tracing::info!("nsqd: shutting down");
        inner.ctx.cancel.cancel();
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
    let mut tick = tokio::time::interval(
        nsqd.opts()
            .sync_timeout
            .max(std::time::Duration::from_millis(10)),
    );
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = nsqd.ctx.cancel.cancelled() => return,
        }
        let n = nsqd.clone();
        let _ = tokio::task::spawn_blocking(move || n.sync_all()).await;
    }
}

/// A listener's address for a log line, as NSQ prints it.
fn shown(addr: std::io::Result<std::net::SocketAddr>) -> String {
    addr.map_or_else(|e| format!("? ({e})"), |a| a.to_string())
}

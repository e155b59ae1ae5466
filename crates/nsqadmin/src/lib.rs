//! nsqadmin for nsq-rs: a web UI and a JSON API over a running NSQ cluster.
//!
//! nsqadmin keeps no state of its own: every `/api` answer is aggregated on
//! request from nsqlookupd (`/topics`, `/lookup`, `/nodes`, …) and from every
//! nsqd's `/stats` and `/info`, fetched concurrently with timeouts; admin
//! actions are forwarded to nsqlookupd and nsqd and announced to
//! `--notification-http-endpoint`. It speaks to the cluster over HTTP only
//! (never linking nsqd or nsqlookupd code), so it works against any NSQ.
//! Beyond NSQ 1.3.0 it keeps the last 30 minutes of depth and message rates
//! in memory ([`history`]) and charts them.
//!
//! Modules, following a request: [`http`] (routing, V1 responses, handlers)
//! → [`cluster`] (discovery, fan-out, aggregation, actions) → `nsq_http`'s
//! client. [`options`] holds the flags; [`notify`] the notifications;
//! [`semver`] the version order behind `out_of_date`.

#![forbid(unsafe_code)]

pub mod cidr;
pub mod cluster;
pub mod error;
pub mod history;
pub mod http;
pub mod notify;
pub mod options;
pub mod semver;

use std::net::SocketAddr;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use error::StartError;
pub use options::Options;

use cluster::{ClusterInfo, Upstreams};
use history::History;
use notify::Notifier;

/// The NSQ version nsqadmin reports.
pub const VERSION: &str = nsq_protocol::VERSION;
/// What the UI and the upstream client call themselves.
pub const USER_AGENT: &str = "nsqadmin/v1.3.0";

/// Changes the process log level (`PUT /config/log_level`); set by the binary.
pub type LevelSetter = nsq_cli::log::LevelSetter;

/// State shared by the HTTP handlers and background tasks.
pub struct Shared {
    opts: RwLock<Arc<Options>>,
    log_level_hook: Mutex<Option<LevelSetter>>,
    pub ci: ClusterInfo,
    /// For graphite: the same settings as `ci`'s, without `--http-secret`
    /// (which is for the daemons only).
    pub graphite_client: nsq_http::Client,
    pub history: History,
    pub notifier: Notifier,
    /// This machine's host name (notifications' `via`).
    pub hostname: String,
}

impl Shared {
    /// The current options (a snapshot; `PUT /config` swaps in a new one).
    pub fn options(&self) -> Arc<Options> {
        self.opts.read().clone()
    }

    pub fn update_options(&self, f: impl FnOnce(&mut Options)) {
        let mut guard = self.opts.write();
        let mut o = (**guard).clone();
        f(&mut o);
        *guard = Arc::new(o);
    }

    /// Where to find the cluster right now.
    pub fn upstreams(&self) -> Upstreams {
        let o = self.options();
        Upstreams {
            lookupds: o.nsqlookupd_http_addresses.clone(),
            nsqds: o.nsqd_http_addresses.clone(),
        }
    }

    pub fn set_log_level(&self, level: nsq_cli::LogLevel) {
        if let Some(f) = self.log_level_hook.lock().as_ref() {
            f(level);
        }
    }
}

/// A validated, listening nsqadmin, ready to [`run`](Nsqadmin::run).
pub struct Nsqadmin {
    shared: Arc<Shared>,
    listener: TcpListener,
    /// Stops the tasks started by `new` (the notification sender).
    shutdown: CancellationToken,
}

impl Nsqadmin {
    /// Validates `opts` (nsqadmin's startup checks) and binds `--http-address`.
    pub fn new(opts: Options) -> nsq_cli::DaemonFuture<Result<Nsqadmin, StartError>> {
        Box::pin(Self::start(opts))
    }

    async fn start(mut opts: Options) -> Result<Nsqadmin, StartError> {
        opts.validate().await?;
        let listener = TcpListener::bind(&opts.http_address)
            .await
            .map_err(|source| StartError::Listen {
                addr: opts.http_address.clone(),
                source,
            })?;
        let client_options = nsq_http::ClientOptions::new(
            opts.http_client_connect_timeout,
            opts.http_client_request_timeout,
        )
        .user_agent(USER_AGENT)
        .tls(opts.http_client_tls()?);
        // the daemons' secret goes to the lookupds and nsqds only, never to
        // graphite or the notification endpoint
        let daemons = nsq_http::Client::new(client_options.clone().secret(&opts.http_secret));
        let client = nsq_http::Client::new(client_options);
        let shutdown = CancellationToken::new();
        let notifier = Notifier::start(
            opts.notification_http_endpoint.clone(),
            client.clone(),
            shutdown.child_token(),
        );
        let shared = Arc::new(Shared {
            history: History::new(history::INTERVAL, history::WINDOW),
            opts: RwLock::new(Arc::new(opts)),
            log_level_hook: Mutex::new(None),
            ci: ClusterInfo::new(daemons),
            graphite_client: client,
            notifier,
            hostname: nsq_cli::hostname().unwrap_or_default(),
        });
        Ok(Nsqadmin {
            shared,
            listener,
            shutdown,
        })
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Lets `PUT /config/log_level` change the process's log level.
    pub fn set_log_level_hook(&self, f: LevelSetter) {
        *self.shared.log_level_hook.lock() = Some(f);
    }

    /// Serves the UI and API and runs the history poller until `shutdown` is
    /// cancelled; then stops accepting, finishes in-flight requests, and stops
    /// the poller and the notification sender.
    pub fn run(self, shutdown: CancellationToken) -> nsq_cli::DaemonFuture<Result<(), StartError>> {
        Box::pin(self.serve(shutdown))
    }

    async fn serve(self, shutdown: CancellationToken) -> Result<(), StartError> {
        let Nsqadmin {
            shared,
            listener,
            shutdown: background,
        } = self;
        tracing::info!("nsqadmin v{VERSION} (nsq-rs)");
        if let Ok(a) = listener.local_addr() {
            tracing::info!("HTTP: listening on {a}");
        }
        let poller = tokio::spawn(history::run_poller(
            shared.clone(),
            shared.ci.clone(),
            shutdown.child_token(),
        ));
        http::serve(shared, listener, shutdown.clone()).await;
        shutdown.cancel();
        background.cancel();
        let _ = poller.await;
        tracing::info!("HTTP: closing");
        Ok(())
    }
}

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
//! → [`shared`] (what the handlers and the history poller share) →
//! [`cluster`] (discovery, fan-out, aggregation, actions) → `nsq_http`'s
//! client. [`options`] holds the flags; [`notify`] the notifications;
//! [`semver`] the version order behind `out_of_date`. This file starts and
//! stops the daemon: the listener, the HTTP server, the history poller.

#![forbid(unsafe_code)]

pub mod cidr;
pub mod cluster;
pub mod error;
pub mod history;
pub mod http;
pub mod notify;
pub mod options;
mod poller;
pub mod semver;
pub mod shared;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use error::StartError;
pub use options::Options;

use notify::Notifier;
use shared::Shared;

/// The NSQ version nsqadmin reports.
pub const VERSION: &str = nsq_protocol::VERSION;
/// What the UI and the upstream client call themselves.
pub const USER_AGENT: &str = "nsqadmin/v1.3.0";

/// Changes the process log level (`PUT /config/log_level`); set by the binary.
pub type LevelSetter = nsq_cli::log::LevelSetter;

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
        let shared = Arc::new(Shared::new(opts, daemons, client, notifier));
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
        self.shared.set_log_level_hook(f);
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
        let poller = tokio::spawn(poller::run_poller(
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

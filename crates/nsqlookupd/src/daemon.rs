//! The daemon: nsqlookupd's options, its listeners and the one shutdown
//! path (everything the `server` feature adds to the registry and the V1
//! protocol's logic). [`NsqLookupd::bind`] opens both listeners (so callers
//! can learn the bound ports, e.g. with port 0), [`NsqLookupd::serve`] runs
//! until the [`CancellationToken`] fires and all connection tasks have
//! ended; [`run`] does both.

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::context::{Context, WallClock};
use crate::registration::RegistrationDb;
use crate::{http, tcp, VERSION};
use nsq_protocol::gofmt::listen_error;
use nsq_protocol::lookupd::LookupdInfo;

nsq_cli::flags! {
    /// nsqlookupd's options, one per flag of NSQ 1.3.0's nsqlookupd (names,
    /// types and defaults), also read from the `--config` file.
    pub struct Options {
        /// path to a TOML config file (its keys are the flag names with _ for -)
        config: String = "", cfg = "";
        /// print the version and exit
        version: bool = false, cfg = "";
        /// log level: debug, info, warn, error or fatal
        log_level: nsq_cli::LogLevel = "info";
        /// text at the start of every log line
        log_prefix: String = "[nsqlookupd] ";
        /// nsq-rs: log line format: nsq (NSQ's lines) or json (one object per line, for log pipelines)
        log_format: String = "nsq";
        /// deprecated; use --log-level
        verbose: bool = false;
        /// <addr>:<port> to listen on for nsqd's TCP connections (:<port> for all interfaces)
        tcp_address: String = "0.0.0.0:4160";
        /// <addr>:<port> to listen on for the HTTP API (nsq-rs: empty for none, with --https-address)
        http_address: String = "0.0.0.0:4161";
        /// nsq-rs: <addr>:<port> to listen on for the HTTP API over HTTPS (needs --tls-cert and --tls-key)
        https_address: String = "";
        /// nsq-rs: the TCP listener speaks TLS from the first byte (nsqd then needs tls:// in --lookupd-tcp-address)
        tls_required: bool = false;
        /// nsq-rs: path to the certificate file of --https-address and --tls-required
        tls_cert: String = "";
        /// nsq-rs: path to the key file of --tls-cert
        tls_key: String = "";
        /// nsq-rs: client certificate auth policy ('require' or 'require-verify')
        tls_client_auth_policy: String = "";
        /// nsq-rs: minimum TLS version: tls1.0 (taken as tls1.2), tls1.1, tls1.2 or tls1.3
        tls_min_version: nsq_cli::flags::TlsMinVersion = "tls1.0";
        /// the address this node gives nsqd in its IDENTIFY answer; the host's name when not set
        broadcast_address: String = nsq_cli::hostname().unwrap_or_default();
        /// how long a producer not heard from (IDENTIFY or PING) stays listed
        inactive_producer_timeout: Duration = "5m0s";
        /// how long /topic/tombstone hides a producer of the topic
        tombstone_lifetime: Duration = "45s";
        /// nsq-rs: every HTTP request but /ping needs a secret (Authorization: Bearer <secret>) that --auth-http-address grants the endpoint's permission (docs/features/http-auth.md)
        http_auth_required: bool = false;
        /// nsq-rs: with --http-auth-required, the most connections the HTTP listener keeps open (0: no cap)
        http_max_connections: i64 = 1024;
        /// nsq-rs: auth server as <addr>:<port> or a full URL, for --http-auth-required (may be given several times)
        auth_http_addresses: Vec<String> = "", flag = "auth-http-address";
        /// nsq-rs: HTTP method of auth server requests: get or post
        auth_http_request_method: String = "get";
        /// nsq-rs: how long a request to the auth server may take to connect
        http_client_connect_timeout: Duration = "2s";
        /// nsq-rs: how long a request to the auth server may take in all
        http_client_request_timeout: Duration = "5s";
        /// nsq-rs: PEM file of the CAs that may sign an https:// auth server's certificate and, with --tls-client-auth-policy=require-verify, a client's (default: the system's)
        tls_root_ca_file: String = "";
    }
}

impl Options {
    /// Checks made at startup; the message is what follows `FATAL: `.
    pub fn validate(&self) -> Result<(), String> {
        nsq_http::guard::check_flags(
            &self.auth_http_request_method,
            self.http_auth_required,
            !self.auth_http_addresses.is_empty(),
            self.http_max_connections,
        )?;
        if self.http_address.is_empty() && self.https_address.is_empty() {
            return Err("--http-address or --https-address required".into());
        }
        self.server_tls().map(drop)?;
        self.http_guard().map(drop)
    }

    /// The TLS listeners' config: `None` when none is asked for. Bad
    /// combinations and unreadable files are refused here, at startup.
    fn server_tls(&self) -> Result<Option<Arc<rustls::ServerConfig>>, String> {
        let serves_tls = self.tls_required || !self.https_address.is_empty();
        let has_cert = !self.tls_cert.is_empty() || !self.tls_key.is_empty();
        if !serves_tls {
            if has_cert {
                return Err("--tls-cert/--tls-key given but nothing serves TLS: set --https-address or --tls-required".into());
            }
            return Ok(None);
        }
        if self.tls_cert.is_empty() || self.tls_key.is_empty() {
            return Err("--https-address and --tls-required need --tls-cert and --tls-key".into());
        }
        let policy = self.tls_client_auth_policy.as_str();
        if nsq_http::tls::ClientAuth::parse(policy).is_none() {
            return Err(format!(
                "--tls-client-auth-policy must be require or require-verify, not {}",
                nsq_protocol::gofmt::quote(policy)
            ));
        }
        nsq_http::tls::ServerTls {
            cert_file: &self.tls_cert,
            key_file: &self.tls_key,
            root_ca_file: &self.tls_root_ca_file,
            client_auth_policy: policy,
            min_version: self.tls_min_version.0,
        }
        .config()
        .map_err(|e| format!("failed to load TLS config - {}", e.naming_file()))
    }

    /// The HTTP access control, with `--http-auth-required`; the auth
    /// server verified as nsqd verifies it (`--tls-root-ca-file`, else the
    /// system's CAs).
    fn http_guard(&self) -> Result<Option<Arc<nsq_http::guard::Guard>>, String> {
        if !self.http_auth_required || self.auth_http_addresses.is_empty() {
            return Ok(None);
        }
        let tls = nsq_http::tls::ClientTls {
            root_ca_file: &self.tls_root_ca_file,
            ..Default::default()
        }
        .config()
        .map_err(|e| format!("{e} (--tls-root-ca-file={})", self.tls_root_ca_file))?;
        let client = nsq_http::Client::new(
            nsq_http::ClientOptions::new(
                self.http_client_connect_timeout,
                self.http_client_request_timeout,
            )
            .tls(tls),
        );
        let auth = nsq_http::auth::AuthConfig {
            addresses: self.auth_http_addresses.clone(),
            post: self.auth_http_request_method == "post",
            client,
        };
        let max = usize::try_from(self.http_max_connections).unwrap_or(0);
        Ok(Some(Arc::new(nsq_http::guard::Guard::new(auth, max))))
    }
}

/// Startup failures. Once serving, nsqlookupd does not fail.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Same text as NSQ: `listen (<addr>) failed - listen tcp <addr>: bind: ...`.
    #[error("listen ({addr}) failed - {}", listen_error(.addr, .source))]
    Listen {
        addr: String,
        #[source]
        source: io::Error,
    },
    #[error("unable to get hostname {0}")]
    Hostname(#[source] io::Error),
    /// A bad option (normally caught by [`Options::validate`] first).
    #[error("{0}")]
    Config(String),
}

/// A bound, not yet serving, nsqlookupd.
pub struct NsqLookupd {
    tcp: TcpListener,
    http: Option<TcpListener>,
    https: Option<TcpListener>,
    /// `--tls-required`: the TCP listener's handshake.
    tcp_tls: Option<TlsAcceptor>,
    https_tls: Option<TlsAcceptor>,
    ctx: Arc<Context>,
}

impl NsqLookupd {
    /// Opens the TCP then the HTTP (then the HTTPS) listener, NSQ's order,
    /// and prepares state.
    pub fn bind(opts: Options) -> nsq_cli::DaemonFuture<Result<Self, Error>> {
        Box::pin(Self::open(opts))
    }

    async fn open(opts: Options) -> Result<Self, Error> {
        let tls = opts.server_tls().map_err(Error::Config)?;
        let tcp = listen(&opts.tcp_address).await?;
        let http = match opts.http_address.as_str() {
            "" => None,
            addr => Some(listen(addr).await?),
        };
        let https = match opts.https_address.as_str() {
            "" => None,
            addr => Some(listen(addr).await?),
        };
        let acceptor = tls.map(TlsAcceptor::from);
        let tcp_tls = acceptor.clone().filter(|_| opts.tls_required);
        let https_tls = acceptor.filter(|_| https.is_some());
        let local_port = |l: &TcpListener| l.local_addr().map(|a| a.port()).unwrap_or_default();
        // An HTTPS-only lookupd tells nsqds its HTTPS port.
        let http_port = http
            .as_ref()
            .or(https.as_ref())
            .map(local_port)
            .unwrap_or_default();
        let hostname = nsq_cli::hostname().map_err(Error::Hostname)?;
        let ctx = Context {
            db: Mutex::new(RegistrationDb::new(
                opts.inactive_producer_timeout,
                opts.tombstone_lifetime,
            )),
            identify_response: Bytes::from(nsq_protocol::gofmt::to_json(&LookupdInfo {
                broadcast_address: opts.broadcast_address.clone(),
                hostname: hostname.clone(),
                http_port,
                tcp_port: local_port(&tcp),
                version: VERSION.to_string(),
            })),
            clock: WallClock::now(),
            http_guard: opts.http_guard().map_err(Error::Config)?,
        };
        Ok(Self {
            tcp,
            http,
            https,
            tcp_tls,
            https_tls,
            ctx: Arc::new(ctx),
        })
    }

    /// The bound TCP address (useful with port 0).
    pub fn tcp_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.local_addr()
    }

    /// The bound HTTP address (useful with port 0); an error when there is
    /// no HTTP listener.
    pub fn http_addr(&self) -> io::Result<SocketAddr> {
        match &self.http {
            Some(l) => l.local_addr(),
            None => Err(io::Error::new(io::ErrorKind::NotFound, "no HTTP listener")),
        }
    }

    /// Serves both protocols until `shutdown` is cancelled, then closes the
    /// listeners and every client connection and returns once all connection
    /// tasks have finished.
    pub fn serve(self, shutdown: CancellationToken) -> nsq_cli::DaemonFuture<Result<(), Error>> {
        Box::pin(self.serve_until(shutdown))
    }

    async fn serve_until(self, shutdown: CancellationToken) -> Result<(), Error> {
        let http = async {
            if let Some(l) = self.http {
                http::serve(l, None, self.ctx.clone(), shutdown.clone()).await;
            }
        };
        let https = async {
            if let Some(l) = self.https {
                http::serve(l, self.https_tls, self.ctx.clone(), shutdown.clone()).await;
            }
        };
        tokio::join!(
            tcp::serve(self.tcp, self.tcp_tls, self.ctx.clone(), shutdown.clone()),
            http,
            https,
        );
        Ok(())
    }
}

/// Binds and serves until `shutdown` is cancelled.
pub async fn run(opts: Options, shutdown: CancellationToken) -> Result<(), Error> {
    NsqLookupd::bind(opts).await?.serve(shutdown).await
}

/// Binds like Go's `net.Listen("tcp", addr)`: an empty host means every
/// interface (IPv6 dual-stack when available).
async fn listen(addr: &str) -> Result<TcpListener, Error> {
    let err = |source| Error::Listen {
        addr: addr.to_owned(),
        source,
    };
    if let Some(port) = addr.strip_prefix(':') {
        let v6 = format!("[::]:{port}");
        return match TcpListener::bind(v6.as_str()).await {
            Ok(l) => Ok(l),
            Err(_) => TcpListener::bind(format!("0.0.0.0:{port}").as_str())
                .await
                .map_err(err),
        };
    }
    TcpListener::bind(addr).await.map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn binds_port_zero_and_shuts_down() {
        let opts = Options {
            tcp_address: "127.0.0.1:0".into(),
            http_address: "127.0.0.1:0".into(),
            broadcast_address: "b".into(),
            ..Options::default()
        };
        let d = NsqLookupd::bind(opts).await.unwrap();
        assert_ne!(d.tcp_addr().unwrap().port(), 0);
        assert_ne!(d.http_addr().unwrap().port(), 0);
        let token = CancellationToken::new();
        let task = tokio::spawn(d.serve(token.clone()));
        token.cancel();
        task.await.unwrap().unwrap();
    }
}

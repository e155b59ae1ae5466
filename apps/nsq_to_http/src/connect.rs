//! How the HTTP client reaches an endpoint: a TCP connection (hyper-util's
//! `HttpConnector`, with its connect timeout and keep-alive settings), and
//! for `https://` URLs a TLS session on top of it.
//!
//! Certificates are checked as Go's `crypto/x509` does on Linux: against
//! the file named by `SSL_CERT_FILE` (else the first system bundle found)
//! plus the certificates in `SSL_CERT_DIR` (else `/etc/ssl/certs` and
//! `/etc/pki/tls/certs` when no bundle file exists). The roots are loaded
//! on the first `https://` request, so plain-HTTP users never pay for it;
//! a failure to load them fails each HTTPS request (and so REQueues).
//! TLS 1.2 and 1.3 only (Go's client default minimum is 1.2 as well).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use hyper::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::RootCertStore;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Where Go looks for the system CA bundle on Linux, in order.
const SYSTEM_CA_FILES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/pki/tls/cacert.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/cert.pem",
];
const SYSTEM_CA_DIRS: &[&str] = &["/etc/ssl/certs", "/etc/pki/tls/certs"];

/// A plain or TLS connection to an endpoint.
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Connection for Stream {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// The connector handed to hyper's pooled client.
#[derive(Clone)]
pub struct Connector {
    http: HttpConnector,
    tls: Arc<OnceLock<Result<TlsConnector, String>>>,
}

impl Connector {
    pub fn new(mut http: HttpConnector) -> Connector {
        http.enforce_http(false);
        Connector {
            http,
            tls: Arc::new(OnceLock::new()),
        }
    }
}

impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<Stream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.http.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let mut http = self.http.clone();
        let tls = self.tls.clone();
        Box::pin(async move {
            let https = uri.scheme_str() == Some("https");
            let host = uri
                .host()
                .unwrap_or_default()
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string();
            let tcp = http.call(uri).await?.into_inner();
            if !https {
                return Ok(TokioIo::new(Stream::Plain(tcp)));
            }
            let connector = tls
                .get_or_init(|| tls_connector().map_err(|e| format!("tls: {e}")))
                .clone()?;
            let name = ServerName::try_from(host.clone())
                .map_err(|_| format!("tls: invalid server name {host:?}"))?;
            let s = connector.connect(name, tcp).await?;
            Ok(TokioIo::new(Stream::Tls(Box::new(s))))
        })
    }
}

fn tls_connector() -> Result<TlsConnector, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| e.to_string())?
        .with_root_certificates(system_roots()?)
        .with_no_client_auth();
    Ok(TlsConnector::from(Arc::new(cfg)))
}

/// Go's `loadSystemRoots` for Linux.
fn system_roots() -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    let env_file = std::env::var("SSL_CERT_FILE")
        .ok()
        .filter(|s| !s.is_empty());
    let files: Vec<String> = match &env_file {
        Some(f) => vec![f.clone()],
        None => SYSTEM_CA_FILES.iter().map(|s| s.to_string()).collect(),
    };
    let mut found_file = false;
    for f in &files {
        if let Ok(pem) = std::fs::read(f) {
            add_pem(&mut roots, &pem);
            found_file = true;
            break;
        }
    }
    let dirs: Vec<String> = match std::env::var("SSL_CERT_DIR").ok().filter(|s| !s.is_empty()) {
        Some(d) => d.split(':').map(str::to_string).collect(),
        None if !found_file => SYSTEM_CA_DIRS.iter().map(|s| s.to_string()).collect(),
        None => Vec::new(),
    };
    for d in dirs {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            if let Ok(pem) = std::fs::read(e.path()) {
                add_pem(&mut roots, &pem);
            }
        }
    }
    if roots.is_empty() {
        return Err("x509: failed to load system roots and no roots provided".into());
    }
    Ok(roots)
}

fn add_pem(roots: &mut RootCertStore, pem: &[u8]) {
    for cert in CertificateDer::pem_slice_iter(pem).flatten() {
        let _ = roots.add(cert);
    }
}

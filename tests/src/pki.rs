//! Certificates made at test time for the TLS tests (nsqd_security.rs,
//! tls_cluster.rs, http_access.rs): a CA, a server certificate for
//! localhost/127.0.0.1 signed by it, client certificates, rustls configs
//! that trust the CA, and one HTTPS request through them. rcgen and rustls
//! only: the servers are checked against other implementations than their
//! own.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use crate::{build_http_request, parse_http_response, HttpResponse};

/// A CA, a server certificate for localhost/127.0.0.1 signed by it, and the
/// PEM files nsqd is pointed at.
pub struct Pki {
    dir: tempfile::TempDir,
    pub ca: rcgen::Certificate,
    ca_key: rcgen::KeyPair,
    cert_der: CertificateDer<'static>,
    key_der: Vec<u8>,
}

impl Pki {
    // Each call makes a new CA: not a "default" value.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        p.distinguished_name
            .push(rcgen::DnType::CommonName, "nsq-rs test CA");
        p.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let ca = p.self_signed(&ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let mut sp = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        sp.subject_alt_names
            .push(rcgen::SanType::IpAddress("127.0.0.1".parse().unwrap()));
        sp.distinguished_name
            .push(rcgen::DnType::CommonName, "localhost");
        // A client certificate too: nsqd presents it to a lookupd that asks.
        sp.extended_key_usages = vec![
            rcgen::ExtendedKeyUsagePurpose::ServerAuth,
            rcgen::ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let cert = sp.signed_by(&key, &ca, &ca_key).unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
        std::fs::write(dir.path().join("cert.pem"), cert.pem()).unwrap();
        std::fs::write(dir.path().join("key.pem"), key.serialize_pem()).unwrap();
        Pki {
            dir,
            ca,
            ca_key,
            cert_der: cert.der().clone(),
            key_der: key.serialize_der(),
        }
    }

    pub fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    pub fn flags(&self) -> Vec<String> {
        vec![
            format!("--tls-cert={}", self.path("cert.pem")),
            format!("--tls-key={}", self.path("key.pem")),
        ]
    }

    /// A client certificate with this CN, signed by the CA.
    pub fn client_cert(&self, cn: &str) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(vec!["client.local".to_string()]).unwrap();
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let cert = p.signed_by(&key, &self.ca, &self.ca_key).unwrap();
        let der = PrivateKeyDer::try_from(key.serialize_der()).unwrap();
        (vec![cert.der().clone()], der)
    }

    /// The server certificate as a rustls server config (for the test's own
    /// HTTPS auth server).
    pub fn server_config(&self) -> Arc<rustls::ServerConfig> {
        let key = PrivateKeyDer::try_from(self.key_der.clone()).unwrap();
        let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![self.cert_der.clone()], key)
        .unwrap();
        Arc::new(cfg)
    }

    pub fn client_config(
        &self,
        client_cert: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
    ) -> Arc<rustls::ClientConfig> {
        self.client_config_with(rustls::crypto::ring::default_provider(), client_cert)
    }

    pub fn client_config_with(
        &self,
        provider: rustls::crypto::CryptoProvider,
        client_cert: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
    ) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca.der().clone()).unwrap();
        let b = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        Arc::new(match client_cert {
            Some((chain, key)) => b.with_client_auth_cert(chain, key).unwrap(),
            None => b.with_no_client_auth(),
        })
    }
}

/// One HTTPS/1.1 request (Connection: close), answer parsed; panics on
/// any failure.
pub fn https_request(
    addr: &str,
    cfg: Arc<rustls::ClientConfig>,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
) -> HttpResponse {
    try_https_request(addr, cfg, method, path, body)
        .unwrap_or_else(|e| panic!("HTTPS {method} {path}: {e}"))
}

/// [`https_request`], with connection and TLS failures returned.
pub fn try_https_request(
    addr: &str,
    cfg: Arc<rustls::ClientConfig>,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
) -> io::Result<HttpResponse> {
    let tcp = TcpStream::connect(addr)?;
    tcp.set_read_timeout(Some(Duration::from_secs(5)))?;
    let name = ServerName::try_from("localhost").map_err(io::Error::other)?;
    let conn = rustls::ClientConnection::new(cfg, name).map_err(io::Error::other)?;
    let mut s = rustls::StreamOwned::new(conn, tcp);
    s.write_all(&build_http_request(method, path, addr, &[], body))?;
    s.flush()?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16384];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(_) if !buf.is_empty() => break,
            Err(e) => return Err(e),
        }
    }
    parse_http_response(&buf)
}

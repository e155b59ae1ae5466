//! The certificates Go trusts when a program names none: Go's
//! `loadSystemRoots` for Linux, which the HTTP client uses for `https://`
//! URLs and nsqd for verifying peers when `--tls-root-ca-file` is unset.
//!
//! The file named by `SSL_CERT_FILE` (else the first system bundle found),
//! plus the certificates in the directories of `SSL_CERT_DIR` (else
//! `/etc/ssl/certs` and `/etc/pki/tls/certs`, read only when no bundle file
//! exists). TLS 1.2 and 1.3 only (Go's client default minimum is 1.2 too).
//! The daemons' server side (their `--tls-*` flags) is [`ServerTls`].

mod server;

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::RootCertStore;

pub use server::{ClientAuth, ServerTls, TlsError};

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

/// The system's CA certificates as Go finds them (possibly none).
pub fn system_roots() -> RootCertStore {
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
    roots
}

/// Adds every certificate of a PEM bundle; returns how many were added.
pub fn add_pem(roots: &mut RootCertStore, pem: &[u8]) -> usize {
    CertificateDer::pem_slice_iter(pem)
        .flatten()
        .filter(|c| roots.add(c.clone()).is_ok())
        .count()
}

/// The ring provider every TLS config of the workspace uses.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Go's default client TLS: the system roots, TLS 1.2 and 1.3, no client
/// certificate.
pub fn default_client_config() -> Result<Arc<rustls::ClientConfig>, String> {
    let roots = system_roots();
    if roots.is_empty() {
        return Err("x509: failed to load system roots and no roots provided".into());
    }
    let cfg = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(cfg))
}

/// A client's TLS settings as NSQ's tools take them from flags (Go's
/// `tls.Config{RootCAs, Certificates, InsecureSkipVerify}`); empty paths
/// mean "not given".
#[derive(Debug, Clone, Default)]
pub struct ClientTls<'a> {
    pub root_ca_file: &'a str,
    pub cert_file: &'a str,
    pub key_file: &'a str,
    pub insecure_skip_verify: bool,
}

impl ClientTls<'_> {
    /// The configuration, or `None` when nothing was given (Go's defaults).
    pub fn config(&self) -> Result<Option<Arc<rustls::ClientConfig>>, String> {
        if self.root_ca_file.is_empty() && self.cert_file.is_empty() && !self.insecure_skip_verify {
            return Ok(None);
        }
        let read = |path: &str| std::fs::read(path).map_err(|e| format!("open {path}: {e}"));
        let builder = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| e.to_string())?;
        let builder = if self.insecure_skip_verify {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyServerCert(provider())))
        } else {
            let roots = if self.root_ca_file.is_empty() {
                system_roots()
            } else {
                let mut roots = RootCertStore::empty();
                if add_pem(&mut roots, &read(self.root_ca_file)?) == 0 {
                    return Err("failed to append certificate to pool".into());
                }
                roots
            };
            builder.with_root_certificates(roots)
        };
        let cfg = if self.cert_file.is_empty() {
            builder.with_no_client_auth()
        } else {
            let chain: Vec<CertificateDer<'static>> =
                CertificateDer::pem_slice_iter(&read(self.cert_file)?)
                    .filter_map(Result::ok)
                    .collect();
            if chain.is_empty() {
                return Err("tls: failed to find any PEM data in certificate input".into());
            }
            let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(&read(self.key_file)?)
                .map_err(|_| "tls: failed to find any PEM data in key input".to_string())?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| e.to_string())?
        };
        Ok(Some(Arc::new(cfg)))
    }
}

/// `InsecureSkipVerify`: any server certificate is accepted (signatures
/// are still checked, so the session is encrypted to whoever answered).
#[derive(Debug)]
struct AnyServerCert(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyServerCert {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

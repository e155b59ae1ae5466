//! The server side of TLS as NSQ's daemons take it from flags
//! (`--tls-cert`, `--tls-key`, `--tls-client-auth-policy`,
//! `--tls-root-ca-file`, `--tls-min-version`): nsqd's `tls_v1` upgrade and
//! HTTPS listener, nsqlookupd's TLS listeners, and the client config with
//! which a daemon verifies the servers it calls. Never: sockets or
//! handshakes (the listeners and connections own those).
//!
//! rustls speaks only TLS 1.2 and 1.3, so `--tls-min-version=tls1.0` or
//! `tls1.1` (Go's default is tls1.0) admits TLS 1.2 and up: no client can
//! negotiate an older protocol than a Go daemon would allow it, only the
//! obsolete ones are gone.

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};

use super::{add_pem, provider, system_roots};

/// A certificate, key or CA file that cannot be used; the texts are Go's,
/// and [`TlsError::naming_file`] adds the flag and the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("open {path}: {err}")]
    Read {
        flag: &'static str,
        path: String,
        err: String,
    },
    #[error("tls: failed to find any PEM data in certificate input")]
    NoCert { path: String },
    #[error("tls: failed to find any PEM data in key input")]
    NoKey { path: String },
    #[error("failed to append certificate to pool")]
    BadCa { path: String },
    #[error("{0}")]
    Rustls(#[from] rustls::Error),
    #[error("{0}")]
    Verifier(String),
}

const CERT_FLAG: &str = "--tls-cert";
const KEY_FLAG: &str = "--tls-key";
const CA_FLAG: &str = "--tls-root-ca-file";

impl TlsError {
    /// The flag and the file the error is about, where it is about one.
    pub fn file(&self) -> Option<(&'static str, &str)> {
        match self {
            TlsError::Read { flag, path, .. } => Some((flag, path)),
            TlsError::NoCert { path } => Some((CERT_FLAG, path)),
            TlsError::NoKey { path } => Some((KEY_FLAG, path)),
            TlsError::BadCa { path } => Some((CA_FLAG, path)),
            TlsError::Rustls(_) | TlsError::Verifier(_) => None,
        }
    }

    /// Go's words, then the flag and the file they are about (Go's name
    /// neither: a file that is not PEM would leave the operator guessing
    /// which of three flags to fix), e.g. `tls: failed to find any PEM
    /// data in certificate input (--tls-cert=/etc/nsq/cert.pem)`.
    pub fn naming_file(&self) -> String {
        match self.file() {
            Some((flag, path)) => format!("{self} ({flag}={path})"),
            None => self.to_string(),
        }
    }
}

static TLS13_ONLY: [&rustls::SupportedProtocolVersion; 1] = [&rustls::version::TLS13];
static TLS12_UP: [&rustls::SupportedProtocolVersion; 2] =
    [&rustls::version::TLS13, &rustls::version::TLS12];

fn versions(min: u16) -> &'static [&'static rustls::SupportedProtocolVersion] {
    if min >= 0x0304 {
        &TLS13_ONLY
    } else {
        &TLS12_UP
    }
}

fn read(flag: &'static str, path: &str) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| TlsError::Read {
        flag,
        path: path.to_string(),
        err: e.to_string(),
    })
}

/// What `--tls-client-auth-policy` asks of a connecting client: the one
/// place its values are named, for the config and for the daemons that
/// refuse a value they do not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// `""`: no client certificate is asked for (Go's default).
    None,
    /// `require`: a certificate must be sent, checked against no CA
    /// (Go's `tls.RequireAnyClientCert`).
    Require,
    /// `require-verify`: a certificate must be sent and verify against the
    /// root CA file, else the system's CAs.
    RequireVerify,
}

impl ClientAuth {
    /// The policy a flag value names; `None` for a value that names none.
    pub fn parse(policy: &str) -> Option<ClientAuth> {
        match policy {
            "" => Some(ClientAuth::None),
            "require" => Some(ClientAuth::Require),
            "require-verify" => Some(ClientAuth::RequireVerify),
            _ => None,
        }
    }
}

/// A daemon's TLS flags; empty paths mean "not given".
#[derive(Debug, Clone, Copy, Default)]
pub struct ServerTls<'a> {
    pub cert_file: &'a str,
    pub key_file: &'a str,
    pub root_ca_file: &'a str,
    /// `require`, `require-verify`, or anything else for none (Go's
    /// default): see [`ClientAuth`].
    pub client_auth_policy: &'a str,
    /// The TLS protocol number of `--tls-min-version` (0x0301 is tls1.0).
    pub min_version: u16,
}

impl ServerTls<'_> {
    /// The CA bundle: the root CA file, else the system's (may be empty).
    fn roots(&self) -> Result<RootCertStore, TlsError> {
        if self.root_ca_file.is_empty() {
            return Ok(system_roots());
        }
        let mut store = RootCertStore::empty();
        if add_pem(&mut store, &read(CA_FLAG, self.root_ca_file)?) == 0 {
            return Err(TlsError::BadCa {
                path: self.root_ca_file.to_string(),
            });
        }
        Ok(store)
    }

    /// The certificate chain and key of the cert and key files.
    fn identity(&self) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
        let cert_pem = read(CERT_FLAG, self.cert_file)?;
        let key_pem = read(KEY_FLAG, self.key_file)?;
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
            .filter_map(Result::ok)
            .collect();
        if chain.is_empty() {
            return Err(TlsError::NoCert {
                path: self.cert_file.to_string(),
            });
        }
        let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|_| TlsError::NoKey {
            path: self.key_file.to_string(),
        })?;
        Ok((chain, key))
    }

    /// The server config, or None when neither cert nor key is given.
    pub fn config(&self) -> Result<Option<Arc<rustls::ServerConfig>>, TlsError> {
        if self.cert_file.is_empty() && self.key_file.is_empty() {
            return Ok(None);
        }
        let (chain, key) = self.identity()?;
        let provider = provider();
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(versions(self.min_version))?;
        // Go's daemons take a policy they do not know as none.
        let builder = match ClientAuth::parse(self.client_auth_policy).unwrap_or(ClientAuth::None) {
            ClientAuth::Require => {
                builder.with_client_cert_verifier(Arc::new(AnyClientCert { provider }))
            }
            ClientAuth::RequireVerify => {
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(self.roots()?), provider)
                        .build()
                        .map_err(|e| TlsError::Verifier(e.to_string()))?;
                builder.with_client_cert_verifier(verifier)
            }
            ClientAuth::None => builder.with_no_client_auth(),
        };
        Ok(Some(Arc::new(builder.with_single_cert(chain, key)?)))
    }

    /// The client side for the daemon's own outgoing connections: verifies
    /// the server against the root CA file or the system bundle, sends no
    /// certificate.
    pub fn client_config(&self) -> Result<Arc<rustls::ClientConfig>, TlsError> {
        let cfg = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(versions(self.min_version))?
            .with_root_certificates(self.roots()?)
            .with_no_client_auth();
        Ok(Arc::new(cfg))
    }

    /// [`ServerTls::client_config`] that also presents the daemon's own
    /// certificate when one is configured, for servers that ask for a
    /// client certificate (nsqd to a lookupd with
    /// `--tls-client-auth-policy`).
    pub fn client_config_with_identity(&self) -> Result<Arc<rustls::ClientConfig>, TlsError> {
        let builder = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(versions(self.min_version))?
            .with_root_certificates(self.roots()?);
        if self.cert_file.is_empty() && self.key_file.is_empty() {
            return Ok(Arc::new(builder.with_no_client_auth()));
        }
        let (chain, key) = self.identity()?;
        Ok(Arc::new(builder.with_client_auth_cert(chain, key)?))
    }
}

/// `--tls-client-auth-policy=require`: a client certificate must be sent
/// (and its key proven), but it is not checked against any CA — Go's
/// `tls.RequireAnyClientCert`.
#[derive(Debug)]
struct AnyClientCert {
    provider: Arc<CryptoProvider>,
}

impl ClientCertVerifier for AnyClientCert {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_auth_policies_are_the_empty_one_require_and_require_verify() {
        assert_eq!(ClientAuth::parse(""), Some(ClientAuth::None));
        assert_eq!(ClientAuth::parse("require"), Some(ClientAuth::Require));
        assert_eq!(
            ClientAuth::parse("require-verify"),
            Some(ClientAuth::RequireVerify)
        );
        for unknown in ["maybe", "Require", "require-verify "] {
            assert_eq!(ClientAuth::parse(unknown), None, "{unknown}");
        }
    }
}

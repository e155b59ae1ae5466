//! TLS as nsqd configures it: the server config behind IDENTIFY's `tls_v1`
//! upgrade and the HTTPS listener (`--tls-cert`, `--tls-key`,
//! `--tls-client-auth-policy`, `--tls-root-ca-file`, `--tls-min-version`),
//! the client config for outgoing HTTPS (auth servers), and the names
//! `/stats` gives a connection's TLS parameters.
//!
//! The configs are built by `nsq_http::tls::ServerTls`, shared with
//! nsqlookupd; this module only maps nsqd's options onto it.

use std::sync::Arc;

use rustls::ServerConnection;

use crate::options::Options;

/// The certificate and key files and the CA bundle failed to load.
pub use nsq_http::tls::TlsError;

/// The daemons' TLS flags as nsq-http takes them (also the replication
/// listener's and its peer connections', verified both ways).
pub fn daemon_tls(opts: &Options) -> nsq_http::tls::ServerTls<'_> {
    nsq_http::tls::ServerTls {
        cert_file: &opts.tls_cert,
        key_file: &opts.tls_key,
        root_ca_file: &opts.tls_root_ca_file,
        client_auth_policy: &opts.tls_client_auth_policy,
        min_version: opts.tls_min_version.0,
    }
}

/// The server side, or None when no cert/key is configured (then IDENTIFY
/// never offers `tls_v1` and there is no HTTPS listener).
pub fn server_config(opts: &Options) -> Result<Option<Arc<rustls::ServerConfig>>, TlsError> {
    daemon_tls(opts).config()
}

/// The client side for outgoing HTTPS (auth servers): verifies the server against `--tls-root-ca-file` or the
/// system bundle.
pub fn client_config(opts: &Options) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    daemon_tls(opts).client_config()
}

/// The client side of a `tls://` lookupd connection: verified as
/// [`client_config`], presenting `--tls-cert` when nsqd has one (a lookupd
/// with `--tls-client-auth-policy` asks for it).
pub fn lookupd_client_config(opts: &Options) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    daemon_tls(opts).client_config_with_identity()
}

/// What `/stats` and the auth query need to know about a TLS connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsInfo {
    pub cipher_suite: String,
    pub version: String,
    pub negotiated_protocol: String,
    /// The client certificate's subject CN (auth's `common_name`), or "".
    pub common_name: String,
}

impl TlsInfo {
    pub fn of(conn: &ServerConnection) -> TlsInfo {
        TlsInfo {
            cipher_suite: conn
                .negotiated_cipher_suite()
                .map(|s| cipher_suite_name(u16::from(s.suite())))
                .unwrap_or_default(),
            version: conn
                .protocol_version()
                .map(|v| version_name(u16::from(v)))
                .unwrap_or_default(),
            negotiated_protocol: conn
                .alpn_protocol()
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .unwrap_or_default(),
            common_name: conn
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(|c| subject_common_name(c))
                .unwrap_or_default(),
        }
    }
}

/// Go nsqd's names: the suites its table knows, `Unknown <n>` for the rest
/// (which includes every TLS 1.3 suite).
pub fn cipher_suite_name(id: u16) -> String {
    let name = match id {
        0x0005 => "TLS_RSA_WITH_RC4_128_SHA",
        0x000a => "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
        0x002f => "TLS_RSA_WITH_AES_128_CBC_SHA",
        0x0035 => "TLS_RSA_WITH_AES_256_CBC_SHA",
        0xc007 => "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
        0xc009 => "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
        0xc00a => "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
        0xc011 => "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
        0xc012 => "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
        0xc013 => "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
        0xc014 => "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
        0xc02f => "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        0xc02b => "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        _ => return format!("Unknown {id}"),
    };
    name.to_string()
}

pub fn version_name(v: u16) -> String {
    match v {
        0x0301 => "TLS1.0".into(),
        0x0302 => "TLS1.1".into(),
        0x0303 => "TLS1.2".into(),
        0x0304 => "TLS1.3".into(),
        v => format!("Unknown {v}"),
    }
}

/// One DER TLV: (tag, contents, rest). None on malformed input.
fn der(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        first as usize
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let mut l = 0usize;
        for &b in &rest[..n] {
            l = (l << 8) | b as usize;
        }
        rest = &rest[n..];
        l
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

/// The subject CN of an X.509 certificate, read with a minimal DER walk
/// (Certificate → tbsCertificate → subject → first commonName).
pub fn subject_common_name(cert: &[u8]) -> Option<String> {
    const SEQ: u8 = 0x30;
    let (tag, certificate, _) = der(cert)?;
    if tag != SEQ {
        return None;
    }
    let (tag, tbs, _) = der(certificate)?;
    if tag != SEQ {
        return None;
    }
    let mut fields = tbs;
    // [0] version is optional
    let (tag, _, rest) = der(fields)?;
    if tag == 0xa0 {
        fields = rest;
    }
    // serialNumber, signature, issuer, validity, then subject
    for _ in 0..4 {
        fields = der(fields)?.2;
    }
    let (tag, mut rdns, _) = der(fields)?;
    if tag != SEQ {
        return None;
    }
    const CN: &[u8] = &[0x55, 0x04, 0x03];
    while !rdns.is_empty() {
        let (_, set, rest) = der(rdns)?;
        rdns = rest;
        let mut atvs = set;
        while !atvs.is_empty() {
            let (_, atv, rest) = der(atvs)?;
            atvs = rest;
            let (tag, oid, value) = der(atv)?;
            if tag == 0x06 && oid == CN {
                let (_, s, _) = der(value)?;
                return Some(String::from_utf8_lossy(s).into_owned());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_go() {
        assert_eq!(
            cipher_suite_name(0xc02f),
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"
        );
        assert_eq!(cipher_suite_name(0x1301), "Unknown 4865");
        assert_eq!(version_name(0x0304), "TLS1.3");
        assert_eq!(version_name(0x0303), "TLS1.2");
    }

    #[test]
    fn der_walk_survives_garbage() {
        assert_eq!(subject_common_name(&[]), None);
        assert_eq!(subject_common_name(&[0x30, 0x82, 0xff]), None);
        assert_eq!(subject_common_name(&[0x30, 0x03, 0x30, 0x01, 0x00]), None);
    }

    #[test]
    fn common_name_of_a_real_certificate() {
        let mut p = rcgen::CertificateParams::new(vec!["client.example".to_string()]).unwrap();
        p.distinguished_name
            .push(rcgen::DnType::OrganizationName, "nsq-rs");
        p.distinguished_name
            .push(rcgen::DnType::CommonName, "worker-7");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = p.self_signed(&key).unwrap();
        assert_eq!(subject_common_name(cert.der()).as_deref(), Some("worker-7"));
        let p = rcgen::CertificateParams::new(vec!["x".to_string()]).unwrap();
        let mut p = p;
        p.distinguished_name = rcgen::DistinguishedName::new();
        let cert = p.self_signed(&key).unwrap();
        assert_eq!(subject_common_name(cert.der()), None);
    }

    #[test]
    fn server_config_from_pem_files() {
        let dir = tempfile::tempdir().unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let (c, k) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        let mut o = Options {
            tls_cert: c.display().to_string(),
            tls_key: k.display().to_string(),
            ..Options::default()
        };
        assert!(server_config(&o).unwrap().is_some());
        o.tls_client_auth_policy = "require-verify".into();
        o.tls_root_ca_file = c.display().to_string();
        assert!(server_config(&o).unwrap().is_some());
        o.tls_root_ca_file = k.display().to_string();
        assert_eq!(
            server_config(&o).unwrap_err().to_string(),
            "failed to append certificate to pool"
        );
    }

    #[test]
    fn no_cert_no_tls() {
        assert!(server_config(&Options::default()).unwrap().is_none());
        let o = Options {
            tls_cert: "/nonexistent/cert.pem".into(),
            tls_key: "/nonexistent/key.pem".into(),
            ..Options::default()
        };
        assert!(server_config(&o).is_err());
    }
}

//! nsqlookupd discovery: `GET /lookup?topic=<t>` with `nsq_http`'s client,
//! and the nsqd TCP addresses its answer lists.
//!
//! Both answer shapes are accepted: the current `{"producers":[...]}` and
//! the pre-1.0 wrapper `{"status_code":200,"data":{"producers":[...]}}`
//! (`nsq_protocol::lookupd::decode_v1`). Each producer becomes
//! `broadcast_address:tcp_port`.
//!
//! An `https://` address is asked over TLS, the lookupd's certificate
//! verified as nsqd's is (`tls_root_ca_file`, `tls_insecure_skip_verify`).
//!
//! The polling schedule and the connect/drop decisions live in the consumer;
//! this module only asks and parses.

use nsq_protocol::lookupd::Lookup;

use crate::error::LookupError;

/// Where one nsqlookupd's `/lookup` lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookupdEndpoint {
    /// `http` or `https`.
    pub scheme: &'static str,
    /// `host:port` to dial (and send as `Host`).
    pub host_port: String,
    /// Path to query, `/lookup` unless the address named another.
    pub path: String,
}

impl LookupdEndpoint {
    /// Accepts `host:port`, `http://host:port[/path]` and
    /// `https://host:port[/path]` (like go-nsq; the port is required).
    pub fn parse(addr: &str) -> Result<LookupdEndpoint, LookupError> {
        let bad = || LookupError::BadAddress(addr.to_string());
        let (scheme, rest) = match addr.split_once("://") {
            Some(("http", rest)) => ("http", rest),
            Some(("https", rest)) => ("https", rest),
            Some(_) => return Err(bad()),
            None => ("http", addr),
        };
        let (host_port, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let port = host_port.rsplit_once(':').map(|(_, p)| p).ok_or_else(bad)?;
        if port.is_empty()
            || !port.bytes().all(|b| b.is_ascii_digit())
            || host_port.starts_with(':')
        {
            return Err(bad());
        }
        let path = if path.is_empty() || path == "/" {
            "/lookup"
        } else {
            path
        };
        Ok(LookupdEndpoint {
            scheme,
            host_port: host_port.to_string(),
            path: path.to_string(),
        })
    }

    /// The request target for `topic` (the topic is form-encoded: `#` → `%23`).
    pub fn target(&self, topic: &str) -> String {
        let q = form_urlencoded::Serializer::new(String::new())
            .append_pair("topic", topic)
            .finish();
        let sep = if self.path.contains('?') { '&' } else { '?' };
        format!("{}{}{}", self.path, sep, q)
    }
}

/// The HTTP client a consumer asks its lookupds with; `https://` ones are
/// verified with the TLS settings that verify nsqd (an unreadable CA file
/// is an error here, before any lookupd is asked).
pub fn client(cfg: &crate::config::Config) -> Result<nsq_http::Client, LookupError> {
    let tls = nsq_http::tls::ClientTls {
        root_ca_file: cfg.tls_root_ca_file.as_deref().unwrap_or_default(),
        insecure_skip_verify: cfg.tls_insecure_skip_verify,
        ..Default::default()
    }
    .config()
    .map_err(LookupError::Tls)?;
    Ok(nsq_http::Client::new(
        nsq_http::ClientOptions::new(cfg.dial_timeout, cfg.lookupd_poll_timeout)
            .user_agent(crate::config::USER_AGENT)
            .secret(cfg.http_secret.as_deref().unwrap_or_default())
            .tls(tls),
    ))
}

/// Queries one nsqlookupd for `topic` and returns the nsqd TCP addresses it lists.
pub async fn query(
    client: &nsq_http::Client,
    ep: &LookupdEndpoint,
    topic: &str,
) -> Result<Vec<String>, LookupError> {
    let url = format!("{}://{}{}", ep.scheme, ep.host_port, ep.target(topic));
    let lookup: Lookup = client
        .get_v1(&url)
        .await
        .map_err(|source| LookupError::Http {
            addr: ep.host_port.clone(),
            source,
        })?;
    Ok(lookup
        .producers
        .iter()
        .filter(|p| !p.broadcast_address.is_empty() && p.tcp_port != 0)
        .map(|p| p.tcp_address())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_forms() {
        let e = LookupdEndpoint::parse("127.0.0.1:4161").unwrap();
        assert_eq!(
            (e.host_port.as_str(), e.path.as_str()),
            ("127.0.0.1:4161", "/lookup")
        );
        assert_eq!(e.target("t#ephemeral"), "/lookup?topic=t%23ephemeral");
        let e = LookupdEndpoint::parse("http://h:1/").unwrap();
        assert_eq!(e.path, "/lookup");
        let e = LookupdEndpoint::parse("http://h:1/custom?x=1").unwrap();
        assert_eq!(e.target("t"), "/custom?x=1&topic=t");
        assert!(LookupdEndpoint::parse("h").is_err());
        let e = LookupdEndpoint::parse("https://h:1").unwrap();
        assert_eq!((e.scheme, e.host_port.as_str()), ("https", "h:1"));
        assert_eq!(LookupdEndpoint::parse("h:1").unwrap().scheme, "http");
        assert!(LookupdEndpoint::parse("ftp://h:1").is_err());
        assert!(LookupdEndpoint::parse("h:").is_err());
    }
}

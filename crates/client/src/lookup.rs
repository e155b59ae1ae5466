//! nsqlookupd discovery: `GET /lookup?topic=<t>` with `nsq_http`'s client,
//! and the nsqd TCP addresses its answer lists.
//!
//! Both answer shapes are accepted: the current `{"producers":[...]}` and
//! the pre-1.0 wrapper `{"status_code":200,"data":{"producers":[...]}}`
//! (`nsq_protocol::lookupd::decode_v1`). Each producer becomes
//! `broadcast_address:tcp_port`.
//!
//! The polling schedule and the connect/drop decisions live in the consumer;
//! this module only asks and parses.

use nsq_protocol::lookupd::Lookup;

use crate::error::LookupError;

/// Where one nsqlookupd's `/lookup` lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookupdEndpoint {
    /// `host:port` to dial (and send as `Host`).
    pub host_port: String,
    /// Path to query, `/lookup` unless the address named another.
    pub path: String,
}

impl LookupdEndpoint {
    /// Accepts `host:port`, `http://host:port` and `http://host:port/path`
    /// (like go-nsq; the port is required).
    pub fn parse(addr: &str) -> Result<LookupdEndpoint, LookupError> {
        let bad = || LookupError::BadAddress(addr.to_string());
        let rest = match addr.split_once("://") {
            Some(("http", rest)) => rest,
            Some(_) => return Err(bad()),
            None => addr,
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

/// The HTTP client a consumer asks its lookupds with.
pub fn client(cfg: &crate::Config) -> nsq_http::Client {
    nsq_http::Client::new(
        nsq_http::ClientOptions::new(cfg.dial_timeout, cfg.lookupd_poll_timeout)
            .user_agent(crate::config::USER_AGENT)
            .secret(cfg.http_secret.as_deref().unwrap_or_default()),
    )
}

/// Queries one nsqlookupd for `topic` and returns the nsqd TCP addresses it lists.
pub async fn query(
    client: &nsq_http::Client,
    ep: &LookupdEndpoint,
    topic: &str,
) -> Result<Vec<String>, LookupError> {
    let url = format!("http://{}{}", ep.host_port, ep.target(topic));
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
        assert!(LookupdEndpoint::parse("https://h:1").is_err());
        assert!(LookupdEndpoint::parse("h:").is_err());
    }
}

//! nsqlookupd discovery: `GET /lookup?topic=<t>` over a minimal HTTP/1.0
//! client, and the parsing of its answer into nsqd TCP addresses.
//!
//! Both answer shapes are accepted: the current `{"producers":[...]}` and
//! the pre-1.0 wrapper `{"status_code":200,"data":{"producers":[...]}}`
//! (go-nsq picks by the `X-NSQ-Content-Type` header; looking at the body is
//! equivalent and also covers servers that omit the header). Each producer
//! becomes `broadcast_address:tcp_port`.
//!
//! The polling schedule and the connect/drop decisions live in the consumer;
//! this module only asks and parses.

use std::time::Duration;

use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::error::LookupError;

/// Largest `/lookup` answer read.
const MAX_RESPONSE: usize = 16 * 1024 * 1024;

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

/// One producer as `/lookup` lists it (only the fields a consumer needs).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct LookupProducer {
    #[serde(default)]
    pub broadcast_address: String,
    #[serde(default)]
    pub tcp_port: u16,
    #[serde(default)]
    pub http_port: u16,
    #[serde(default)]
    pub hostname: String,
}

impl LookupProducer {
    /// `broadcast_address:tcp_port`, with brackets for IPv6 literals.
    pub fn tcp_address(&self) -> String {
        if self.broadcast_address.contains(':') && !self.broadcast_address.starts_with('[') {
            format!("[{}]:{}", self.broadcast_address, self.tcp_port)
        } else {
            format!("{}:{}", self.broadcast_address, self.tcp_port)
        }
    }
}

/// Parses a `/lookup` body in either shape. An empty body means no producers.
pub fn parse_lookup_body(body: &[u8]) -> Result<Vec<LookupProducer>, String> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Vec::new());
    }
    let v: serde_json::Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let producers = match v.get("producers") {
        Some(p) => p,
        None => match v.get("data").and_then(|d| d.get("producers")) {
            Some(p) => p,
            None => return Ok(Vec::new()),
        },
    };
    if producers.is_null() {
        return Ok(Vec::new());
    }
    serde_json::from_value(producers.clone()).map_err(|e| e.to_string())
}

/// Splits a complete HTTP/1.x response into status and body (de-chunking
/// if needed).
pub fn parse_http_response(raw: &[u8]) -> Result<(u16, Vec<u8>), String> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no end of headers")?;
    let head = std::str::from_utf8(&raw[..end]).map_err(|_| "headers are not UTF-8")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.") {
        return Err(format!("bad status line {status_line:?}"));
    }
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let mut chunked = false;
    let mut length: Option<usize> = None;
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
            if k == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked") {
                chunked = true;
            } else if k == "content-length" {
                length = v.parse().ok();
            }
        }
    }
    let body = &raw[end + 4..];
    if chunked {
        return dechunk(body).map(|b| (status, b));
    }
    match length {
        Some(n) if body.len() < n => Err(format!("body truncated: {} of {n} bytes", body.len())),
        Some(n) => Ok((status, body[..n].to_vec())),
        None => Ok((status, body.to_vec())),
    }
}

fn dechunk(mut b: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let eol = b
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("bad chunk header")?;
        let size_txt = std::str::from_utf8(&b[..eol]).map_err(|_| "bad chunk size")?;
        let size_txt = size_txt.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_txt, 16)
            .map_err(|_| format!("bad chunk size {size_txt:?}"))?;
        b = &b[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        if b.len() < size + 2 {
            return Err("chunk truncated".into());
        }
        out.extend_from_slice(&b[..size]);
        b = &b[size + 2..];
    }
}

/// Queries one nsqlookupd for `topic` and returns the nsqd TCP addresses it lists.
pub async fn query(
    ep: &LookupdEndpoint,
    topic: &str,
    dial_timeout: Duration,
    timeout: Duration,
) -> Result<Vec<String>, LookupError> {
    let addr = ep.host_port.clone();
    let io = |source| LookupError::Io {
        addr: addr.clone(),
        source,
    };
    let mut stream =
        match tokio::time::timeout(dial_timeout, TcpStream::connect(&ep.host_port)).await {
            Err(_) => return Err(LookupError::Timeout(addr.clone())),
            Ok(r) => r.map_err(io)?,
        };
    let req = format!(
        "GET {} HTTP/1.0\r\nHost: {}\r\nAccept: application/vnd.nsq; version=1.0\r\nUser-Agent: {}\r\n\r\n",
        ep.target(topic),
        ep.host_port,
        crate::config::USER_AGENT
    );
    let exchange = async {
        stream.write_all(req.as_bytes()).await?;
        let mut raw = Vec::new();
        (&mut stream)
            .take(MAX_RESPONSE as u64)
            .read_to_end(&mut raw)
            .await?;
        Ok::<_, std::io::Error>(raw)
    };
    let raw = match tokio::time::timeout(timeout, exchange).await {
        Err(_) => return Err(LookupError::Timeout(addr.clone())),
        Ok(r) => r.map_err(io)?,
    };
    let (status, body) = parse_http_response(&raw).map_err(|reason| LookupError::Http {
        addr: addr.clone(),
        reason,
    })?;
    if status != 200 {
        let body = String::from_utf8_lossy(&body).chars().take(200).collect();
        return Err(LookupError::Status { addr, status, body });
    }
    let producers = parse_lookup_body(&body).map_err(|reason| LookupError::Json {
        addr: addr.clone(),
        reason,
    })?;
    Ok(producers
        .iter()
        .filter(|p| !p.broadcast_address.is_empty() && p.tcp_port != 0)
        .map(LookupProducer::tcp_address)
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

    #[test]
    fn both_body_shapes() {
        let current = br#"{"channels":["c"],"producers":[{"remote_address":"1.2.3.4:5","hostname":"h","broadcast_address":"h1","tcp_port":4150,"http_port":4151,"version":"1.3.0","topology_zone":"","topology_region":""}]}"#;
        let p = parse_lookup_body(current).unwrap();
        assert_eq!(p[0].tcp_address(), "h1:4150");
        let legacy = br#"{"status_code":200,"status_txt":"OK","data":{"channels":[],"producers":[{"broadcast_address":"::1","tcp_port":4150}]}}"#;
        assert_eq!(
            parse_lookup_body(legacy).unwrap()[0].tcp_address(),
            "[::1]:4150"
        );
        assert_eq!(parse_lookup_body(b"").unwrap(), vec![]);
        assert_eq!(parse_lookup_body(br#"{"producers":null}"#).unwrap(), vec![]);
        assert!(parse_lookup_body(b"{oops").is_err());
    }

    #[test]
    fn http_responses() {
        let r = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-NSQ-Content-Type: nsq; version=1.0\r\n\r\n{}";
        assert_eq!(parse_http_response(r).unwrap(), (200, b"{}".to_vec()));
        let r = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"p\r\n4\r\n\":1}\r\n0\r\n\r\n";
        assert_eq!(
            parse_http_response(r).unwrap(),
            (200, b"{\"p\":1}".to_vec())
        );
        let r = b"HTTP/1.0 404 Not Found\r\n\r\n{\"message\":\"TOPIC_NOT_FOUND\"}";
        assert_eq!(parse_http_response(r).unwrap().0, 404);
        assert!(parse_http_response(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}").is_err());
        assert!(parse_http_response(b"garbage").is_err());
    }
}

//! The HTTP/1.1 client nsqadmin uses to talk to nsqlookupd, nsqd, graphite and
//! the notification endpoint.
//!
//! One connection per request (admin traffic is light), a connect timeout and
//! an overall request timeout, chunked and length-delimited bodies (hyper does
//! the framing). Errors read like Go's `net/http` errors, because nsqadmin
//! shows them to operators verbatim (`Get "http://h:4161/topics": dial tcp
//! h:4161: connect: connection refused`), and a non-200 answer becomes
//! `got response 404 Not Found "<body>"`.
//!
//! Only `http://` is spoken; an `https://` URL (or an nsqd answering 403 with an
//! `https_port`, i.e. `--tls-required`) is an error that says so.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;
use tokio::net::TcpStream;

use crate::gofmt;

/// Largest upstream body read (a `/stats` of a very busy nsqd is a few MB).
const MAX_BODY: usize = 64 << 20;

/// An upstream request failed; the text is what nsqadmin reports.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UpstreamError(pub String);

/// A complete upstream answer.
#[derive(Debug, Clone)]
pub struct RawResponse {
    pub status: StatusCode,
    pub headers: hyper::HeaderMap,
    pub body: Bytes,
}

/// A parsed `http://[user:pass@]host[:port]/path?query`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    pub userinfo: Option<String>,
    /// `host:port` as written (port defaulted to 80).
    pub authority: String,
    /// Host header value (as written, port included if given).
    pub host_header: String,
    /// Path and query, always starting with `/`.
    pub path_and_query: String,
}

impl Url {
    pub fn parse(s: &str) -> Result<Url, UpstreamError> {
        let rest = if let Some(r) = s.strip_prefix("http://") {
            r
        } else if s.starts_with("https://") {
            return Err(UpstreamError(format!(
                "{s}: https is not supported by this nsqadmin"
            )));
        } else {
            return Err(UpstreamError(format!(
                "unsupported protocol scheme in {s:?}"
            )));
        };
        let (auth_part, path) = match rest.find(['/', '?']) {
            Some(i) if rest.as_bytes()[i] == b'/' => (&rest[..i], rest[i..].to_string()),
            Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
            None => (rest, "/".to_string()),
        };
        let (userinfo, hostport) = match auth_part.rsplit_once('@') {
            Some((u, h)) => (Some(u.to_string()), h),
            None => (None, auth_part),
        };
        if hostport.is_empty() {
            return Err(UpstreamError(format!("http: no Host in request URL {s:?}")));
        }
        let has_port = if hostport.starts_with('[') {
            hostport.contains("]:")
        } else {
            hostport.contains(':')
        };
        let authority = if has_port {
            hostport.to_string()
        } else {
            format!("{hostport}:80")
        };
        Ok(Url {
            userinfo,
            authority,
            host_header: hostport.to_string(),
            path_and_query: path,
        })
    }
}

/// The upstream client; cheap to clone.
#[derive(Debug, Clone)]
pub struct Client {
    connect_timeout: Duration,
    request_timeout: Duration,
}

fn method_word(m: &Method) -> &'static str {
    match *m {
        Method::GET => "Get",
        Method::POST => "Post",
        Method::PUT => "Put",
        Method::DELETE => "Delete",
        _ => "Request",
    }
}

/// How Go words the socket errors operators are used to reading.
fn go_io_error(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => "connect: connection refused".into(),
        io::ErrorKind::TimedOut => "i/o timeout".into(),
        io::ErrorKind::ConnectionReset => "connection reset by peer".into(),
        io::ErrorKind::HostUnreachable => "connect: no route to host".into(),
        io::ErrorKind::NetworkUnreachable => "connect: network is unreachable".into(),
        _ => {
            let s = e.to_string();
            // Drop Rust's " (os error N)" suffix.
            match s.find(" (os error") {
                Some(i) => s[..i].to_lowercase(),
                None => s,
            }
        }
    }
}

impl Client {
    pub fn new(connect_timeout: Duration, request_timeout: Duration) -> Client {
        Client {
            connect_timeout,
            request_timeout,
        }
    }

    /// `GET` with nsq's `Accept` header; 200 → body parsed as JSON into `T`.
    pub async fn get_v1<T: DeserializeOwned>(&self, url: &str) -> Result<T, UpstreamError> {
        let r = self.v1(Method::GET, url).await?;
        serde_json::from_slice(&r.body).map_err(|e| UpstreamError(e.to_string()))
    }

    /// `POST` without a body, with nsq's `Accept` header; any 200 is success.
    pub async fn post_v1(&self, url: &str) -> Result<(), UpstreamError> {
        self.v1(Method::POST, url).await.map(|_| ())
    }

    async fn v1(&self, method: Method, url: &str) -> Result<RawResponse, UpstreamError> {
        let headers = [("accept", "application/vnd.nsq; version=1.0")];
        let r = self.request(method, url, &headers, None).await?;
        if r.status == StatusCode::OK {
            return Ok(r);
        }
        if r.status == StatusCode::FORBIDDEN {
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&r.body) {
                if let Some(port) = v.get("https_port").and_then(|p| p.as_i64()) {
                    return Err(UpstreamError(format!("{url} requires TLS (https port {port}); https upstreams are not supported by this nsqadmin")));
                }
            }
        }
        Err(UpstreamError(format!(
            "got response {} {}",
            status_line(r.status),
            nsq_protocol::gofmt::quote_bytes(&r.body)
        )))
    }

    /// One request; the whole exchange (connect, send, read body) is bounded
    /// by the request timeout, the connect by the connect timeout.
    pub async fn request(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, &str)],
        body: Option<Bytes>,
    ) -> Result<RawResponse, UpstreamError> {
        let word = method_word(&method);
        let wrap = |msg: String| {
            UpstreamError(format!("{word} {}: {msg}", nsq_protocol::gofmt::quote(url)))
        };
        let parsed = Url::parse(url).map_err(|e| wrap(e.0))?;
        match tokio::time::timeout(
            self.request_timeout,
            self.exchange(method, &parsed, headers, body),
        )
        .await
        {
            Ok(r) => r.map_err(wrap),
            Err(_) => Err(wrap(
                "context deadline exceeded (Client.Timeout exceeded while awaiting headers)".into(),
            )),
        }
    }

    async fn connect(&self, authority: &str) -> Result<TcpStream, String> {
        let addrs: Vec<SocketAddr> = match tokio::net::lookup_host(authority).await {
            Ok(a) => a.collect(),
            Err(e) => {
                let host = authority.rsplit_once(':').map_or(authority, |(h, _)| h);
                return Err(format!("dial tcp: lookup {host}: {}", go_io_error(&e)));
            }
        };
        let mut last = format!("dial tcp: lookup {authority}: no such host");
        for addr in addrs {
            match tokio::time::timeout(self.connect_timeout, TcpStream::connect(addr)).await {
                Ok(Ok(s)) => {
                    let _ = s.set_nodelay(true);
                    return Ok(s);
                }
                Ok(Err(e)) => last = format!("dial tcp {addr}: {}", go_io_error(&e)),
                Err(_) => last = format!("dial tcp {addr}: i/o timeout"),
            }
        }
        Err(last)
    }

    async fn exchange(
        &self,
        method: Method,
        url: &Url,
        headers: &[(&str, &str)],
        body: Option<Bytes>,
    ) -> Result<RawResponse, String> {
        let stream = self.connect(&url.authority).await?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
        let conn_task = tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "upstream connection ended with an error");
            }
        });
        let mut req = Request::builder()
            .method(method.clone())
            .uri(&url.path_and_query);
        let host = HeaderValue::from_str(&url.host_header).map_err(|e| e.to_string())?;
        req = req.header(hyper::header::HOST, host);
        req = req.header(hyper::header::USER_AGENT, crate::USER_AGENT);
        if let Some(u) = &url.userinfo {
            let decoded = gofmt::percent_decode(u);
            req = req.header(
                hyper::header::AUTHORIZATION,
                format!("Basic {}", base64(&decoded)),
            );
        }
        for (k, v) in headers {
            let name = HeaderName::from_bytes(k.as_bytes()).map_err(|e| e.to_string())?;
            let value = HeaderValue::from_str(v).map_err(|e| e.to_string())?;
            req = req.header(name, value);
        }
        let body = body.unwrap_or_default();
        if method == Method::POST || method == Method::PUT || !body.is_empty() {
            req = req.header(hyper::header::CONTENT_LENGTH, body.len());
        }
        let req = req.body(Full::new(body)).map_err(|e| e.to_string())?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| hyper_error(&e))?;
        let (parts, incoming) = resp.into_parts();
        let body = Limited::new(incoming, MAX_BODY)
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        drop(sender);
        conn_task.abort();
        Ok(RawResponse {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    }
}

fn hyper_error(e: &hyper::Error) -> String {
    if e.is_incomplete_message() || e.is_closed() {
        return "EOF".into();
    }
    e.to_string()
}

/// `200 OK`, `404 Not Found`, … as Go's `resp.Status` prints it.
pub fn status_line(s: StatusCode) -> String {
    format!("{} {}", s.as_u16(), s.canonical_reason().unwrap_or(""))
}

/// Standard base64 (for the graphite proxy's basic auth).
pub fn base64(input: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        out.push(T[(n >> 18) as usize & 63] as char);
        out.push(T[(n >> 12) as usize & 63] as char);
        out.push(if chunk.len() > 1 {
            T[(n >> 6) as usize & 63] as char
        } else {
            '='
        });
        out.push(if chunk.len() > 2 {
            T[n as usize & 63] as char
        } else {
            '='
        });
    }
    out
}

/// Decodes standard base64 (for reading a request's basic-auth user).
pub fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let s = s.as_bytes();
    if s.chunks(4).any(|c| c.len() != 4) {
        return None;
    }
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    for chunk in s.chunks(4) {
        let pad = chunk.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 {
            return None;
        }
        let mut n = 0u32;
        for &c in &chunk[..4 - pad] {
            n = (n << 6) | val(c)?;
        }
        n <<= 6 * pad as u32;
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = Url::parse("http://127.0.0.1:4161/lookup?topic=a").unwrap();
        assert_eq!(
            (u.authority.as_str(), u.path_and_query.as_str()),
            ("127.0.0.1:4161", "/lookup?topic=a")
        );
        let u = Url::parse("http://user:pw@graphite").unwrap();
        assert_eq!(
            (
                u.userinfo.as_deref(),
                u.authority.as_str(),
                u.path_and_query.as_str()
            ),
            (Some("user:pw"), "graphite:80", "/")
        );
        let u = Url::parse("http://[::1]:80?x").unwrap();
        assert_eq!(
            (u.authority.as_str(), u.path_and_query.as_str()),
            ("[::1]:80", "/?x")
        );
        assert!(Url::parse("https://h/").is_err());
    }

    #[test]
    fn base64_roundtrip() {
        for s in ["", "a", "ab", "abc", "user:pass", "ÿþ"] {
            assert_eq!(base64_decode(&base64(s.as_bytes())).unwrap(), s.as_bytes());
        }
        assert_eq!(base64(b"user:pass"), "dXNlcjpwYXNz");
    }

    #[tokio::test]
    async fn refused_reads_like_go() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        let c = Client::new(Duration::from_secs(2), Duration::from_secs(5));
        let e = c
            .get_v1::<serde_json::Value>(&format!("http://{addr}/topics"))
            .await
            .unwrap_err();
        assert_eq!(
            e.0,
            format!("Get \"http://{addr}/topics\": dial tcp {addr}: connect: connection refused")
        );
    }
}

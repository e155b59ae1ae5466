//! The HTTP side of nsq_to_http: one GET or POST per message, behaving
//! like the Go `http.Client` NSQ builds (`http_api.NewDeadlineTransport`):
//!
//! * connect timeout `--http-client-connect-timeout`; the whole exchange
//!   (redirects and reading the answer included) bounded by
//!   `--http-client-request-timeout`;
//! * keep-alive with at most 2 idle connections per host, idle ones closed
//!   after 90 s (Go's transport defaults);
//! * redirects followed, at most 10 requests: 301/302/303 turn a POST into a
//!   body-less GET, 307/308 repeat the request;
//! * headers: `User-Agent: nsq_to_http v1.3.0`, `Content-Type` on POST,
//!   then each `--header` replacing any earlier value, `Accept-Encoding:
//!   gzip` unless set; names written in Go's canonical case.
//!
//! Built on hyper's pooled client (hyper-util `client-legacy`) rather than
//! a hand-written one: connection reuse, chunked answers, pipelined
//! keep-alive edge cases and pool expiry are exactly what a hand-rolled
//! client gets wrong, and both crates are already in the workspace.
//! `http://` and `https://` URLs are served (TLS in [`crate::connect`]).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderName, HeaderValue, ACCEPT_ENCODING, CONTENT_TYPE, LOCATION, USER_AGENT};
use hyper::{Method, Request, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::time::Instant;

use crate::connect::Connector;

pub const USER_AGENT_VALUE: &str = "nsq_to_http v1.3.0";

/// Go's `http.Client` stops after 10 requests in one redirect chain.
const MAX_REQUESTS: usize = 10;

pub struct HttpClient {
    client: Client<Connector, Full<Bytes>>,
    request_timeout: Duration,
    content_type: String,
    /// `--header` values, in order (a later one with the same name wins).
    headers: Vec<(String, String)>,
}

impl HttpClient {
    pub fn new(
        connect_timeout: Duration,
        request_timeout: Duration,
        content_type: String,
        headers: Vec<(String, String)>,
    ) -> HttpClient {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(connect_timeout));
        connector.set_keepalive(Some(Duration::from_secs(30)));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(2)
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_timer(TokioTimer::new())
            .http1_title_case_headers(true)
            .build(Connector::new(connector));
        HttpClient {
            client,
            request_timeout,
            content_type,
            headers,
        }
    }

    /// GET `url`; the status of the final answer.
    pub async fn get(&self, url: &str) -> Result<u16, String> {
        self.send(Method::GET, url, None).await
    }

    /// POST `body` to `url`; the status of the final answer.
    pub async fn post(&self, url: &str, body: Bytes) -> Result<u16, String> {
        self.send(Method::POST, url, Some(body)).await
    }

    /// One request with redirects, within the request timeout. Errors are
    /// worded like Go's `*url.Error`: `Post "http://h/p": <reason>`.
    async fn send(&self, method: Method, url: &str, body: Option<Bytes>) -> Result<u16, String> {
        let op = if method == Method::GET { "Get" } else { "Post" };
        let deadline = Instant::now() + self.request_timeout;
        let mut current = url.to_string();
        let mut method = method;
        let mut body = body;
        let mut sent = 0;
        let first_host = authority_of(url);
        loop {
            let uri: Uri = current
                .parse()
                .map_err(|e| format!("parse {current:?}: {e}"))?;
            match uri.scheme_str() {
                Some("http" | "https") => {}
                Some(s) => {
                    return Err(format!(
                        "{op} {current:?}: unsupported protocol scheme {s:?}"
                    ))
                }
                None => {
                    return Err(format!(
                        "{op} {current:?}: unsupported protocol scheme \"\""
                    ))
                }
            }
            let same_host = authority_of(&current) == first_host;
            let req = self
                .build(&method, uri, body.clone(), same_host)
                .map_err(|e| format!("{op} {current:?}: {e}"))?;
            sent += 1;
            let resp = match tokio::time::timeout_at(deadline, self.client.request(req)).await {
                Err(_) => {
                    return Err(format!("{op} {current:?}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)"))
                }
                Ok(Err(e)) => return Err(format!("{op} {current:?}: {}", error_chain(&e))),
                Ok(Ok(r)) => r,
            };
            let status = resp.status().as_u16();
            let location = resp
                .headers()
                .get(LOCATION)
                .and_then(|l| l.to_str().ok())
                .map(str::to_string);
            // Read and discard the answer (errors ignored, as io.Copy's are).
            let _ = tokio::time::timeout_at(deadline, resp.into_body().collect()).await;
            let redirect = matches!(status, 301 | 302 | 303 | 307 | 308);
            let Some(location) = location.filter(|l| redirect && !l.is_empty()) else {
                return Ok(status);
            };
            let next = resolve(&current, &location);
            if sent >= MAX_REQUESTS {
                return Err(format!("{op} {next:?}: stopped after 10 redirects"));
            }
            if matches!(status, 301..=303) && method != Method::GET && method != Method::HEAD {
                method = Method::GET;
                body = None;
            }
            current = next;
        }
    }

    fn build(
        &self,
        method: &Method,
        uri: Uri,
        body: Option<Bytes>,
        same_host: bool,
    ) -> Result<Request<Full<Bytes>>, String> {
        let is_post = body.is_some();
        let mut req = Request::builder()
            .method(method.clone())
            .uri(uri)
            .body(Full::new(body.unwrap_or_default()))
            .map_err(|e| e.to_string())?;
        let h = req.headers_mut();
        h.insert(USER_AGENT, HeaderValue::from_static(USER_AGENT_VALUE));
        if is_post {
            h.insert(
                CONTENT_TYPE,
                header_value("Content-Type", &self.content_type)?,
            );
        }
        for (k, v) in &self.headers {
            let name = HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| format!("net/http: invalid header field name {k:?}"))?;
            // Go drops credentials when a redirect leaves the original host.
            if !same_host
                && matches!(
                    name.as_str(),
                    "authorization" | "www-authenticate" | "cookie" | "cookie2"
                )
            {
                continue;
            }
            h.insert(name, header_value(k, v)?);
        }
        if !h.contains_key(ACCEPT_ENCODING) {
            h.insert(ACCEPT_ENCODING, HeaderValue::from_static("gzip"));
        }
        Ok(req)
    }
}

fn header_value(name: &str, v: &str) -> Result<HeaderValue, String> {
    HeaderValue::from_str(v)
        .map_err(|_| format!("net/http: invalid header field value for {name:?}"))
}

/// hyper's error and its causes, innermost last (`client error (Connect):
/// tcp connect error: Connection refused (os error 111)`).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

fn authority_of(url: &str) -> String {
    url.parse::<Uri>()
        .ok()
        .and_then(|u| u.authority().map(|a| a.as_str().to_ascii_lowercase()))
        .unwrap_or_default()
}

/// Resolves a `Location` against the URL that answered (RFC 3986 §5.2 for
/// the forms servers send: absolute, `//authority/...`, `/path`, `?query`,
/// relative path). Fragments are dropped.
pub fn resolve(base: &str, location: &str) -> String {
    let location = location.split('#').next().unwrap_or_default();
    if let Some(i) = location.find("://") {
        if location[..i]
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
            && i > 0
        {
            return location.to_string();
        }
    }
    let (scheme, rest) = base.split_once("://").unwrap_or(("http", base));
    if let Some(auth_path) = location.strip_prefix("//") {
        return format!("{scheme}://{auth_path}");
    }
    let auth_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..auth_end];
    let path_query = &rest[auth_end..];
    let (base_path, _) = path_query.split_once('?').unwrap_or((path_query, ""));
    if location.starts_with('/') {
        let (p, q) = split_query(location);
        return format!("{scheme}://{authority}{}{q}", remove_dot_segments(p));
    }
    if location.starts_with('?') {
        return format!("{scheme}://{authority}{base_path}{location}");
    }
    if location.is_empty() {
        return format!("{scheme}://{authority}{path_query}");
    }
    let dir = match base_path.rfind('/') {
        Some(i) => &base_path[..=i],
        None => "/",
    };
    let (p, q) = split_query(location);
    format!(
        "{scheme}://{authority}{}{q}",
        remove_dot_segments(&format!("{dir}{p}"))
    )
}

fn split_query(s: &str) -> (&str, &str) {
    match s.find('?') {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, ""),
    }
}

fn remove_dot_segments(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    let segs: Vec<&str> = path.split('/').collect();
    for (i, seg) in segs.iter().enumerate() {
        let last = i == segs.len() - 1;
        match *seg {
            "." => {
                if last {
                    out.push("");
                }
            }
            ".." => {
                if out.len() > 1 {
                    out.pop();
                }
                if last {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    let joined = out.join("/");
    if joined.starts_with('/') {
        joined
    } else {
        format!("/{joined}")
    }
}

/// Go's `url.QueryEscape`: everything but `A-Z a-z 0-9 - _ . ~` is
/// `%XX`-escaped, and space becomes `+`.
pub fn query_escape(b: &[u8]) -> String {
    let mut out = String::with_capacity(b.len() * 3);
    for &c in b {
        match c {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(c as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{c:02X}")),
        }
    }
    out
}

/// Go's `fmt.Sprintf(template, arg)` with one string argument, which is
/// how `--get` templates are filled: `%s`/`%v` take the argument (with
/// width, precision and `-` honoured), `%%` is a percent sign, `%q`/`%x`/`%X`
/// format it, and Go's `%!verb(MISSING)` / `%!(EXTRA ...)` / `%!verb(string=...)`
/// markers appear where Go would put them.
pub fn sprintf_one(template: &str, arg: &str) -> String {
    let mut out = String::new();
    let mut used = false;
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut minus = false;
        while let Some(&f) = chars.peek() {
            if "+-# 0".contains(f) {
                minus |= f == '-';
                chars.next();
            } else {
                break;
            }
        }
        let mut width = String::new();
        while let Some(&d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            width.push(d);
            chars.next();
        }
        let mut precision: Option<usize> = None;
        if chars.peek() == Some(&'.') {
            chars.next();
            let mut p = String::new();
            while let Some(&d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                p.push(d);
                chars.next();
            }
            precision = Some(p.parse().unwrap_or(0));
        }
        let Some(verb) = chars.next() else {
            out.push_str("%!(NOVERB)");
            break;
        };
        if verb == '%' {
            out.push('%');
            continue;
        }
        if used {
            out.push_str(&format!("%!{verb}(MISSING)"));
            continue;
        }
        used = true;
        let text = match verb {
            's' | 'v' => match precision {
                Some(p) => arg.chars().take(p).collect(),
                None => arg.to_string(),
            },
            'q' => nsq_protocol::gofmt::quote(arg),
            'x' => arg.bytes().map(|b| format!("{b:02x}")).collect(),
            'X' => arg.bytes().map(|b| format!("{b:02X}")).collect(),
            other => {
                out.push_str(&format!("%!{other}(string={arg})"));
                continue;
            }
        };
        let w: usize = width.parse().unwrap_or(0);
        let pad = w.saturating_sub(text.chars().count());
        if minus {
            out.push_str(&text);
            out.push_str(&" ".repeat(pad));
        } else {
            out.push_str(&" ".repeat(pad));
            out.push_str(&text);
        }
    }
    if !used {
        out.push_str(&format!("%!(EXTRA string={arg})"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_escape_is_gos() {
        assert_eq!(query_escape(b"a b&c=d/e~f*g"), "a+b%26c%3Dd%2Fe~f%2Ag");
        assert_eq!(query_escape("é".as_bytes()), "%C3%A9");
    }

    #[test]
    fn sprintf_like_go() {
        assert_eq!(sprintf_one("http://h/?m=%s", "x+y"), "http://h/?m=x+y");
        assert_eq!(sprintf_one("http://h/%%/?m=%s", "x"), "http://h/%/?m=x");
        assert_eq!(sprintf_one("%s-%s", "x"), "x-%!s(MISSING)");
        assert_eq!(sprintf_one("%%s", "x"), "%s%!(EXTRA string=x)");
        assert_eq!(sprintf_one("[%5s|%-3s]", "ab"), "[   ab|%!s(MISSING)]");
        assert_eq!(sprintf_one("%d", "ab"), "%!d(string=ab)");
    }

    /// An HTTPS endpoint whose certificate is trusted through `SSL_CERT_FILE`
    /// (as Go's client would trust it); a redirect to plain HTTP is followed.
    #[tokio::test]
    async fn https_with_roots_from_ssl_cert_file() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, cert.pem()).unwrap();
        std::env::set_var("SSL_CERT_FILE", &ca);

        let plain = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let plain_port = plain.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut s, _) = plain.accept().await.unwrap();
            let mut buf = vec![0; 4096];
            let n = s.read(&mut buf).await.unwrap();
            assert!(
                buf[..n].starts_with(b"GET /final HTTP/1.1\r\n"),
                "{:?}",
                String::from_utf8_lossy(&buf[..n])
            );
            s.write_all(b"HTTP/1.1 204 No Content\r\n\r\n")
                .await
                .unwrap();
        });

        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let server_cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(server_cfg));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut s = acceptor.accept(tcp).await.unwrap();
            let mut buf = vec![0; 4096];
            let n = s.read(&mut buf).await.unwrap();
            let req = String::from_utf8_lossy(&buf[..n]).to_string();
            assert!(
                req.starts_with("POST /in HTTP/1.1\r\n") && req.ends_with("\r\n\r\nhello"),
                "{req:?}"
            );
            let resp = format!("HTTP/1.1 303 See Other\r\nLocation: http://127.0.0.1:{plain_port}/final\r\nContent-Length: 0\r\n\r\n");
            s.write_all(resp.as_bytes()).await.unwrap();
            s.flush().await.unwrap();
        });

        let c = HttpClient::new(
            Duration::from_secs(2),
            Duration::from_secs(5),
            "text/plain".into(),
            vec![],
        );
        let status = c
            .post(
                &format!("https://localhost:{port}/in"),
                Bytes::from_static(b"hello"),
            )
            .await;
        assert_eq!(status, Ok(204));
        // A certificate nobody vouches for is refused.
        std::env::set_var("SSL_CERT_FILE", dir.path().join("missing.pem"));
        std::env::set_var("SSL_CERT_DIR", dir.path());
        let c = HttpClient::new(
            Duration::from_secs(2),
            Duration::from_secs(5),
            "text/plain".into(),
            vec![],
        );
        let err = c
            .get(&format!("https://localhost:{port}/in"))
            .await
            .unwrap_err();
        assert!(
            err.starts_with(&format!("Get \"https://localhost:{port}/in\": ")),
            "{err}"
        );
    }

    #[test]
    fn location_resolution() {
        assert_eq!(resolve("http://h:1/a/b?x", "http://o/p"), "http://o/p");
        assert_eq!(resolve("http://h:1/a/b?x", "//o:2/p"), "http://o:2/p");
        assert_eq!(resolve("http://h:1/a/b?x", "/c?d"), "http://h:1/c?d");
        assert_eq!(resolve("http://h:1/a/b?x", "c"), "http://h:1/a/c");
        assert_eq!(resolve("http://h:1/a/b?x", "../c"), "http://h:1/c");
        assert_eq!(resolve("http://h:1/a/b?x", "?y"), "http://h:1/a/b?y");
        assert_eq!(resolve("http://h:1", "c"), "http://h:1/c");
    }
}

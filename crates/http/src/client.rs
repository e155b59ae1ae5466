//! The HTTP client of every nsq-rs daemon and app, behaving like the Go
//! `http.Client` NSQ builds (`http_api.NewClient` on
//! `NewDeadlineTransport`):
//!
//! * a connect timeout, and the whole exchange (redirects and reading the
//!   answer included) bounded by the request timeout;
//! * keep-alive with at most 2 idle connections per host, idle ones closed
//!   after 90 s (NSQ's transport settings);
//! * redirects followed, at most 10 requests: 301/302/303 turn a POST into
//!   a body-less GET, 307/308 repeat the request, credentials are dropped
//!   when a redirect leaves the first host;
//! * `Accept-Encoding: gzip` added (and the answer decompressed) unless the
//!   caller asked for an encoding; `user:password@` in a URL becomes basic
//!   authentication; header names go out in Go's canonical case;
//! * `https://` with the caller's TLS configuration, or Go's default CA
//!   certificates ([`crate::tls`]), loaded at the first `https://` request;
//! * errors worded as Go words them, because the apps print them and
//!   nsqadmin shows them to operators verbatim (`Get
//!   "http://h:4161/topics": dial tcp h:4161: connect: connection refused`).
//!
//! NSQ's "V1" requests ([`Client::v1`], [`Client::get_v1`]) add the V1
//! `Accept` header, follow an nsqd's `403` naming its `https_port` once (as
//! NSQ's `GETV1`/`POSTV1` do) and turn any other non-200 answer into `got
//! response 404 Not Found "<body>"`.
//!
//! Built on hyper's pooled client (hyper-util `client-legacy`): connection
//! reuse, chunked answers and pool expiry are what a hand-written client
//! gets wrong. Our connector dials, so dial errors keep Go's words.

use std::future::Future;
use std::io::Read;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{
    HeaderMap, HeaderName, HeaderValue, ACCEPT_ENCODING, AUTHORIZATION, CONTENT_ENCODING,
    CONTENT_LENGTH, LOCATION, USER_AGENT,
};
use hyper::{Method, StatusCode, Uri};
use hyper_util::client::legacy::Client as Pooled;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use nsq_protocol::gofmt::{quote, quote_bytes};
use rustls::pki_types::ServerName;
use serde::de::DeserializeOwned;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;

use crate::stream::Stream;

/// The `Accept` header of NSQ's "V1" requests.
pub const V1_ACCEPT: &str = "application/vnd.nsq; version=1.0";

/// Go's default `User-Agent`.
const GO_USER_AGENT: &str = "Go-http-client/1.1";

/// Go's `http.Client` stops after 10 requests in one redirect chain.
const MAX_REQUESTS: usize = 10;

/// Largest answer read (a `/stats` of a very busy nsqd is a few MB).
const MAX_BODY: usize = 64 << 20;

/// How a [`Client`] connects and how long it waits.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    /// The `User-Agent` of every request; Go's default when `None`.
    pub user_agent: Option<String>,
    /// TLS for `https://` URLs; Go's defaults (the system's CA
    /// certificates) when `None`.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// nsq-rs: the secret sent as `Authorization: Bearer <secret>` to
    /// daemons started with `--http-auth-required` (`--http-secret`).
    pub secret: Option<String>,
}

impl ClientOptions {
    pub fn new(connect_timeout: Duration, request_timeout: Duration) -> ClientOptions {
        ClientOptions {
            connect_timeout,
            request_timeout,
            user_agent: None,
            tls: None,
            secret: None,
        }
    }

    /// Sends `secret` (if not empty) with every request as `Authorization:
    /// Bearer <secret>`, except after a redirect to another host.
    pub fn secret(mut self, secret: &str) -> ClientOptions {
        self.secret = (!secret.is_empty()).then(|| secret.to_string());
        self
    }

    pub fn user_agent(mut self, ua: impl Into<String>) -> ClientOptions {
        self.user_agent = Some(ua.into());
        self
    }

    /// TLS for `https://` URLs (`None`: Go's defaults).
    pub fn tls(mut self, cfg: Option<Arc<rustls::ClientConfig>>) -> ClientOptions {
        self.tls = cfg;
        self
    }
}

/// A request that failed, or a V1 answer that was not what NSQ expects.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Go's `*url.Error`: `Get "http://h/p": <reason>`.
    #[error("{op} {}: {reason}", quote(url))]
    Request {
        op: String,
        url: String,
        reason: String,
    },
    /// A V1 request answered with another status than 200.
    #[error("got response {status} {}", quote_bytes(body))]
    Status { status: String, body: Bytes },
    /// A V1 answer whose JSON is not the expected shape (serde's words).
    #[error("{0}")]
    Json(String),
}

impl Error {
    /// The status code of a [`Error::Status`].
    pub fn status_code(&self) -> Option<u16> {
        match self {
            Error::Status { status, .. } => status.split(' ').next()?.parse().ok(),
            _ => None,
        }
    }
}

/// A complete answer.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Response {
    /// `200 OK`, `404 Not Found`, … as Go's `resp.Status` prints it.
    pub fn status_text(&self) -> String {
        status_text(self.status)
    }
}

/// `200 OK`, `404 Not Found`, … as Go's `resp.Status` prints it.
pub fn status_text(s: StatusCode) -> String {
    format!("{} {}", s.as_u16(), s.canonical_reason().unwrap_or(""))
}

/// The client; cheap to clone (clones share the connection pool).
#[derive(Clone)]
pub struct Client {
    pool: Pooled<Connector, Full<Bytes>>,
    request_timeout: Duration,
    user_agent: String,
    /// `Bearer <secret>`, from [`ClientOptions::secret`].
    bearer: Option<String>,
}

impl Client {
    pub fn new(opts: ClientOptions) -> Client {
        let pool = Pooled::builder(TokioExecutor::new())
            .pool_max_idle_per_host(2)
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_timer(TokioTimer::new())
            .http1_title_case_headers(true)
            .build(Connector {
                connect_timeout: opts.connect_timeout,
                tls: opts.tls,
                default_tls: Arc::new(OnceLock::new()),
            });
        Client {
            pool,
            request_timeout: opts.request_timeout,
            user_agent: opts.user_agent.unwrap_or_else(|| GO_USER_AGENT.into()),
            bearer: opts.secret.map(|s| format!("Bearer {s}")),
        }
    }

    /// `GET url`.
    pub async fn get(&self, url: &str) -> Result<Response, Error> {
        self.request(Method::GET, url, &[], None).await
    }

    /// One request, redirects followed, within the request timeout.
    /// `headers` are added in order (a later one of the same name replaces
    /// an earlier one); `body` is sent with a `Content-Length`.
    pub async fn request(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, &str)],
        body: Option<Bytes>,
    ) -> Result<Response, Error> {
        let deadline = Instant::now() + self.request_timeout;
        let mut current = url.to_string();
        let mut method = method;
        let mut body = body;
        let first_host = authority_of(url);
        let mut sent = 0;
        loop {
            let fail = |m: &Method, url: &str, reason: String| Error::Request {
                op: op_word(m),
                url: url.to_string(),
                reason,
            };
            let uri: Uri = current
                .parse()
                .map_err(|e| fail(&method, &current, format!("parse {}: {e}", quote(&current))))?;
            match uri.scheme_str() {
                Some("http" | "https") => {}
                other => {
                    let scheme = other.unwrap_or_default();
                    return Err(fail(
                        &method,
                        &current,
                        format!("unsupported protocol scheme {}", quote(scheme)),
                    ));
                }
            }
            let same_host = authority_of(&current) == first_host;
            let (req, asked_gzip) = self
                .build(&method, uri, headers, body.clone(), same_host)
                .map_err(|e| fail(&method, &current, e))?;
            sent += 1;
            let resp = match tokio::time::timeout_at(deadline, self.pool.request(req)).await {
                Err(_) => return Err(fail(&method, &current, timeout_text())),
                Ok(Err(e)) => return Err(fail(&method, &current, describe(&e))),
                Ok(Ok(r)) => r,
            };
            let status = resp.status();
            let location = resp
                .headers()
                .get(LOCATION)
                .and_then(|l| l.to_str().ok())
                .map(str::to_string);
            let redirect = matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308);
            let Some(location) = location.filter(|l| redirect && !l.is_empty()) else {
                let (parts, incoming) = resp.into_parts();
                let read = Limited::new(incoming, MAX_BODY).collect();
                let mut body = match tokio::time::timeout_at(deadline, read).await {
                    Err(_) => return Err(fail(&method, &current, timeout_text())),
                    Ok(Err(e)) => return Err(fail(&method, &current, describe(&*e))),
                    Ok(Ok(b)) => b.to_bytes(),
                };
                let mut headers = parts.headers;
                if asked_gzip && is_gzip(&headers) {
                    body = gunzip(&body).map_err(|e| fail(&method, &current, e))?;
                    headers.remove(CONTENT_ENCODING);
                    headers.remove(CONTENT_LENGTH);
                }
                return Ok(Response {
                    status,
                    headers,
                    body,
                });
            };
            // The answer to a redirect is read and dropped, as Go does.
            let _ = tokio::time::timeout_at(deadline, resp.into_body().collect()).await;
            let next = crate::url::resolve(&current, &location);
            if sent >= MAX_REQUESTS {
                return Err(fail(&method, &next, "stopped after 10 redirects".into()));
            }
            if matches!(status.as_u16(), 301..=303)
                && method != Method::GET
                && method != Method::HEAD
            {
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
        headers: &[(&str, &str)],
        body: Option<Bytes>,
        same_host: bool,
    ) -> Result<(hyper::Request<Full<Bytes>>, bool), String> {
        let userinfo = uri
            .authority()
            .and_then(|a| a.as_str().rsplit_once('@'))
            .map(|(u, _)| u.to_string());
        let uri = match &userinfo {
            Some(_) => strip_userinfo(&uri)?,
            None => uri,
        };
        let body_len = body.as_ref().map_or(0, Bytes::len);
        let mut req = hyper::Request::builder()
            .method(method.clone())
            .uri(uri)
            .body(Full::new(body.unwrap_or_default()))
            .map_err(|e| e.to_string())?;
        let h = req.headers_mut();
        h.insert(USER_AGENT, header_value("User-Agent", &self.user_agent)?);
        if let Some(u) = userinfo {
            let basic = format!(
                "Basic {}",
                crate::url::base64(&crate::url::percent_decode(&u))
            );
            h.insert(AUTHORIZATION, header_value("Authorization", &basic)?);
        }
        if let (Some(bearer), true) = (&self.bearer, same_host) {
            if !h.contains_key(AUTHORIZATION) {
                h.insert(AUTHORIZATION, header_value("Authorization", bearer)?);
            }
        }
        for (k, v) in headers {
            let name = HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| format!("net/http: invalid header field name {}", quote(k)))?;
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
        if *method == Method::POST || *method == Method::PUT || body_len > 0 {
            h.insert(CONTENT_LENGTH, HeaderValue::from(body_len));
        }
        let asked_gzip = !h.contains_key(ACCEPT_ENCODING) && *method != Method::HEAD;
        if asked_gzip {
            h.insert(ACCEPT_ENCODING, HeaderValue::from_static("gzip"));
        }
        Ok((req, asked_gzip))
    }

    /// An NSQ "V1" request: the V1 `Accept` header, a JSON body (if any)
    /// with its `Content-Type`, one retry on HTTPS when an nsqd answers
    /// `403` with its `https_port`; any other status than 200 is an
    /// [`Error::Status`]. Returns the body.
    pub async fn v1(&self, method: Method, url: &str, json: Option<Bytes>) -> Result<Bytes, Error> {
        let mut headers = vec![("Accept", V1_ACCEPT)];
        if json.is_some() {
            headers.push(("Content-Type", "application/json"));
        }
        let mut url = url.to_string();
        let mut retried = false;
        loop {
            let r = self
                .request(method.clone(), &url, &headers, json.clone())
                .await?;
            if r.status == StatusCode::OK {
                return Ok(r.body);
            }
            if r.status == StatusCode::FORBIDDEN && !retried && !url.starts_with("https") {
                if let Some(https) = https_endpoint(&url, &r.body) {
                    url = https;
                    retried = true;
                    continue;
                }
            }
            return Err(Error::Status {
                status: r.status_text(),
                body: r.body,
            });
        }
    }

    /// `GET` as a V1 request, its JSON decoded into `T`
    /// ([`nsq_protocol::lookupd::decode_v1`]: the pre-1.0 envelope too).
    pub async fn get_v1<T: DeserializeOwned + Default>(&self, url: &str) -> Result<T, Error> {
        let body = self.v1(Method::GET, url, None).await?;
        nsq_protocol::lookupd::decode_v1(&body).map_err(|e| Error::Json(e.to_string()))
    }
}

/// `Get`, `Post`, … (Go's `urlErrorOp`).
fn op_word(m: &Method) -> String {
    let s = m.as_str();
    let mut out = s[..1].to_string();
    out.push_str(&s[1..].to_ascii_lowercase());
    out
}

fn timeout_text() -> String {
    "context deadline exceeded (Client.Timeout exceeded while awaiting headers)".into()
}

fn header_value(name: &str, v: &str) -> Result<HeaderValue, String> {
    HeaderValue::from_str(v)
        .map_err(|_| format!("net/http: invalid header field value for {}", quote(name)))
}

fn authority_of(url: &str) -> String {
    url.parse::<Uri>()
        .ok()
        .and_then(|u| u.authority().map(|a| a.as_str().to_ascii_lowercase()))
        .unwrap_or_default()
}

fn strip_userinfo(uri: &Uri) -> Result<Uri, String> {
    let authority = uri.authority().map(|a| a.as_str()).unwrap_or_default();
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let pq = uri.path_and_query().map_or("/", |p| p.as_str());
    format!("{}://{host}{pq}", uri.scheme_str().unwrap_or("http"))
        .parse()
        .map_err(|e: hyper::http::uri::InvalidUri| e.to_string())
}

fn is_gzip(h: &HeaderMap) -> bool {
    h.get(CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("gzip"))
}

fn gunzip(body: &[u8]) -> Result<Bytes, String> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(body)
        .take(MAX_BODY as u64)
        .read_to_end(&mut out)
        .map_err(|e| format!("gzip: {e}"))?;
    Ok(Bytes::from(out))
}

/// NSQ's `httpsEndpoint`: an nsqd refusing plain HTTP names its HTTPS port.
fn https_endpoint(url: &str, body: &[u8]) -> Option<String> {
    let port = serde_json::from_slice::<serde_json::Value>(body)
        .ok()?
        .get("https_port")?
        .as_u64()?;
    let uri: Uri = url.parse().ok()?;
    let host = uri.host()?;
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    let pq = uri.path_and_query().map_or("/", |p| p.as_str());
    Some(format!("https://{host}:{port}{pq}"))
}

/// Why a request failed, in Go's words where we know them.
fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = Some(e);
    while let Some(c) = cur {
        if let Some(d) = c.downcast_ref::<DialError>() {
            return d.0.clone();
        }
        if let Some(h) = c.downcast_ref::<hyper::Error>() {
            if h.is_incomplete_message() || h.is_closed() {
                return "EOF".into();
            }
        }
        cur = c.source();
    }
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

/// A dial failure, already in Go's words (`dial tcp h:1: connect: connection refused`).
#[derive(Debug)]
struct DialError(String);

impl std::fmt::Display for DialError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DialError {}

/// How Go words the socket errors users are used to reading.
pub fn go_io_error(e: &std::io::Error) -> String {
    use std::io::ErrorKind;
    match e.kind() {
        ErrorKind::ConnectionRefused => "connect: connection refused".into(),
        ErrorKind::TimedOut => "i/o timeout".into(),
        ErrorKind::ConnectionReset => "connection reset by peer".into(),
        ErrorKind::HostUnreachable => "connect: no route to host".into(),
        ErrorKind::NetworkUnreachable => "connect: network is unreachable".into(),
        _ => nsq_protocol::gofmt::errno_text(e),
    }
}

/// Dials for the pool: every address of the host in turn within the
/// connect timeout, then TLS for `https://`.
#[derive(Clone)]
struct Connector {
    connect_timeout: Duration,
    tls: Option<Arc<rustls::ClientConfig>>,
    /// Go's default TLS, built at the first `https://` request.
    default_tls: Arc<OnceLock<Result<Arc<rustls::ClientConfig>, String>>>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl Connector {
    async fn dial(self, uri: Uri) -> Result<TokioIo<Stream>, BoxError> {
        let https = uri.scheme_str() == Some("https");
        let host = uri
            .host()
            .unwrap_or_default()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let addrs: Vec<std::net::SocketAddr> =
            match tokio::net::lookup_host((host.as_str(), port)).await {
                Ok(a) => a.collect(),
                Err(_) => {
                    return Err(Box::new(DialError(format!(
                        "dial tcp: lookup {host}: no such host"
                    ))))
                }
            };
        let mut last = format!("dial tcp: lookup {host}: no such host");
        let mut tcp = None;
        for addr in addrs {
            match tokio::time::timeout(self.connect_timeout, TcpStream::connect(addr)).await {
                Ok(Ok(s)) => {
                    tcp = Some(s);
                    break;
                }
                Ok(Err(e)) => last = format!("dial tcp {addr}: {}", go_io_error(&e)),
                Err(_) => last = format!("dial tcp {addr}: i/o timeout"),
            }
        }
        let Some(tcp) = tcp else {
            return Err(Box::new(DialError(last)));
        };
        let _ = tcp.set_nodelay(true);
        if !https {
            return Ok(TokioIo::new(Stream::Plain(tcp)));
        }
        let cfg = match &self.tls {
            Some(c) => c.clone(),
            None => self
                .default_tls
                .get_or_init(crate::tls::default_client_config)
                .clone()
                .map_err(DialError)?,
        };
        let name = ServerName::try_from(host.clone())
            .map_err(|_| DialError(format!("tls: invalid server name {}", quote(&host))))?;
        let s = TlsConnector::from(cfg)
            .connect(name, tcp)
            .await
            .map_err(|e| DialError(e.to_string()))?;
        Ok(TokioIo::new(Stream::Tls(Box::new(s.into()))))
    }
}

impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<Stream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        Box::pin(self.clone().dial(uri))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn client() -> Client {
        Client::new(ClientOptions::new(
            Duration::from_secs(2),
            Duration::from_secs(5),
        ))
    }

    /// A server answering each connection's first request with `answer`;
    /// returns its address and the requests it read.
    async fn server(
        answers: Vec<Vec<u8>>,
    ) -> (String, tokio::sync::mpsc::UnboundedReceiver<String>) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            for answer in answers {
                let (mut s, _) = l.accept().await.unwrap();
                let mut buf = vec![0; 4096];
                let n = s.read(&mut buf).await.unwrap();
                let _ = tx.send(String::from_utf8_lossy(&buf[..n]).into_owned());
                s.write_all(&answer).await.unwrap();
                s.shutdown().await.unwrap();
            }
        });
        (addr, rx)
    }

    #[tokio::test]
    async fn refused_reads_like_go() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        let e = client()
            .get_v1::<serde_json::Value>(&format!("http://{addr}/topics"))
            .await
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("Get \"http://{addr}/topics\": dial tcp {addr}: connect: connection refused")
        );
        let e = client().get("ftp://h/").await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "Get \"ftp://h/\": unsupported protocol scheme \"ftp\""
        );
    }

    #[tokio::test]
    async fn v1_requests_and_status_errors() {
        let (addr, mut seen) = server(vec![
            b"HTTP/1.1 200 OK\r\nContent-Length: 16\r\n\r\n{\"topics\":[\"a\"]}".to_vec(),
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 29\r\n\r\n{\"message\":\"TOPIC_NOT_FOUND\"}".to_vec(),
        ])
        .await;
        let c = Client::new(
            ClientOptions::new(Duration::from_secs(2), Duration::from_secs(5)).user_agent("t/1"),
        );
        let t: nsq_protocol::lookupd::Topics =
            c.get_v1(&format!("http://{addr}/topics")).await.unwrap();
        assert_eq!(t.topics, ["a"]);
        let req = seen.recv().await.unwrap();
        assert!(req.starts_with("GET /topics HTTP/1.1\r\n"), "{req}");
        for h in [
            "\r\nAccept: application/vnd.nsq; version=1.0\r\n",
            "\r\nUser-Agent: t/1\r\n",
            "\r\nAccept-Encoding: gzip\r\n",
            &format!("\r\nHost: {addr}\r\n"),
        ] {
            assert!(req.contains(h), "{h:?} in {req}");
        }
        let e = c
            .v1(Method::POST, &format!("http://{addr}/x?u:p@"), None)
            .await
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"got response 404 Not Found "{\"message\":\"TOPIC_NOT_FOUND\"}""#
        );
        assert_eq!(e.status_code(), Some(404));
        let req = seen.recv().await.unwrap();
        assert!(req.starts_with("POST /x?u:p@ HTTP/1.1\r\n"), "{req}");
        assert!(req.contains("\r\nContent-Length: 0\r\n"), "{req}");
    }

    #[tokio::test]
    async fn redirects_gzip_and_basic_auth() {
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(b"ok").unwrap();
        let gz = gz.finish().unwrap();
        let mut answer = format!(
            "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\n\r\n",
            gz.len()
        )
        .into_bytes();
        answer.extend_from_slice(&gz);
        let (final_addr, mut seen_final) = server(vec![answer]).await;
        let first = format!(
            "HTTP/1.1 303 See Other\r\nLocation: http://{final_addr}/final\r\nContent-Length: 0\r\n\r\n"
        );
        let (addr, mut seen) = server(vec![first.into_bytes()]).await;
        let r = client()
            .request(
                Method::POST,
                &format!("http://us%20er:pw@{addr}/in"),
                &[("Content-Type", "text/plain")],
                Some(Bytes::from_static(b"hello")),
            )
            .await
            .unwrap();
        assert_eq!((r.status.as_u16(), &r.body[..]), (200, &b"ok"[..]));
        let req = seen.recv().await.unwrap();
        assert!(req.starts_with("POST /in HTTP/1.1\r\n"), "{req}");
        assert!(
            req.contains("\r\nAuthorization: Basic dXMgZXI6cHc=\r\n"),
            "{req}"
        );
        assert!(req.ends_with("\r\n\r\nhello"), "{req}");
        let req = seen_final.recv().await.unwrap();
        assert!(req.starts_with("GET /final HTTP/1.1\r\n"), "{req}");
        assert!(!req.contains("Authorization"), "{req}");
    }

    /// An HTTPS endpoint whose certificate is trusted through
    /// `SSL_CERT_FILE`, as Go's client would trust it; one nobody vouches
    /// for is refused.
    #[tokio::test]
    async fn https_with_roots_from_ssl_cert_file() {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, cert.pem()).unwrap();
        std::env::set_var("SSL_CERT_FILE", &ca);

        let server_cfg = rustls::ServerConfig::builder_with_provider(crate::tls::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_cfg));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let Ok(mut s) = acceptor.accept(tcp).await else {
                    continue;
                };
                let mut buf = vec![0; 4096];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(b"HTTP/1.1 204 No Content\r\n\r\n").await;
                let _ = s.shutdown().await;
            }
        });
        let url = format!("https://localhost:{port}/in");
        assert_eq!(client().get(&url).await.unwrap().status.as_u16(), 204);
        std::env::set_var("SSL_CERT_FILE", dir.path().join("missing.pem"));
        std::env::set_var("SSL_CERT_DIR", dir.path().join("none"));
        let err = client().get(&url).await.unwrap_err().to_string();
        assert!(err.starts_with(&format!("Get \"{url}\": ")), "{err}");
    }
}

//! The server side of the daemons' HTTP APIs: one accept loop for HTTP and
//! HTTPS, hyper's HTTP/1.1 connection builder writing header names in Go's
//! canonical case (`Content-Type`, `X-Nsq-Content-Type`), httprouter's
//! routing rules ([`crate::router`]) in front of the daemon's axum
//! [`Router`], answering in NSQ's response conventions ([`reply`]).
//!
//! Owns: sockets, the TLS handshake, hyper, redirects, `Allow`, 404/405,
//! the request log line and connection shutdown. Never: what an endpoint
//! does (the daemon's axum handlers).
//!
//! A request is decoded (`%XX` in the path, as Go's `URL.Path`) and routed
//! by the table; only a route the table resolves reaches the axum router,
//! with its path re-escaped segment by segment so axum's matching and `Path`
//! extraction see the same segments httprouter would. Handlers can read the
//! peer's address through axum's `ConnectInfo<SocketAddr>`.
//!
//! A site given a [`Guard`] (`--http-auth-required`) checks each routed
//! request against the route's [`Access`] class before its handler runs,
//! and each of its listeners keeps at most the guard's number of
//! connections open (the next waits in the kernel's accept queue), closing
//! those that send no request headers for [`GUARDED_HEADER_TIMEOUT`].
//! Without one, the only cost is a `None` check per request.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::response::Response;
use axum::Router;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, CONNECTION, LOCATION};
use hyper::server::conn::http1;
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower_service::Service as _;

use crate::guard::{Access, Guard};
/// The daemons' handlers reach the response conventions here too.
pub use crate::reply;
use crate::router::{Routed, Routes};

/// How long an open connection may take to finish its request after
/// shutdown began; a TLS handshake may take this long too.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// On a guarded listener, a connection whose next request's headers do not
/// arrive within this long is closed, so that idle or slow connections
/// cannot hold the connection cap's places.
const GUARDED_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// What one listener serves: the route table, the axum router with the
/// endpoints' handlers, and the level of the per-request log line.
pub struct Site<E> {
    routes: Routes<E>,
    app: Router,
    /// Every request goes to `app` (no routing table), e.g. a listener
    /// that refuses everything.
    pass_through: bool,
    log_level: tracing::Level,
    finish: Option<Finish>,
    guard: Option<(Arc<Guard>, Classify<E>)>,
}

/// A daemon's permission class for each of its endpoints.
pub type Classify<E> = fn(E) -> Access;

/// A last step for every response of a site, whatever answered it (a
/// handler, a redirect, a 404), given the request's headers.
pub type Finish = Box<
    dyn Fn(
            hyper::HeaderMap,
            Response,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Response> + Send>>
        + Send
        + Sync,
>;

impl<E: Copy + Send + Sync + 'static> Site<E> {
    /// `routes` decides; `handler` builds each route's axum handler for
    /// its endpoint and method (`axum::routing::on(filter, handler)`).
    pub fn new(
        routes: Routes<E>,
        handler: impl Fn(E, axum::routing::MethodFilter) -> axum::routing::MethodRouter,
    ) -> Site<E> {
        let mut app = Router::new();
        for (method, path, endpoint) in routes.iter() {
            app = app.route(path, handler(endpoint, method_filter(method)));
        }
        Site {
            routes,
            app,
            pass_through: false,
            log_level: tracing::Level::INFO,
            finish: None,
            guard: None,
        }
    }

    /// Every request, whatever its method and path, to `app`.
    pub fn pass_through(app: Router) -> Site<E> {
        Site {
            routes: Routes::new(),
            app,
            pass_through: true,
            log_level: tracing::Level::INFO,
            finish: None,
            guard: None,
        }
    }

    /// Runs `f` on every response (nsqadmin compresses them all).
    pub fn finish(mut self, f: Finish) -> Site<E> {
        self.finish = Some(f);
        self
    }

    /// Checks every routed request against `classify(endpoint)` with `guard`.
    pub fn guard(mut self, guard: Arc<Guard>, classify: Classify<E>) -> Site<E> {
        self.guard = Some((guard, classify));
        self
    }

    /// The level of the `200 GET /ping (ip:port) 1.2ms` line (INFO by default).
    pub fn log_level(mut self, level: tracing::Level) -> Site<E> {
        self.log_level = level;
        self
    }
}

fn method_filter(method: &str) -> axum::routing::MethodFilter {
    use axum::routing::MethodFilter;
    match method {
        "GET" => MethodFilter::GET,
        "POST" => MethodFilter::POST,
        "PUT" => MethodFilter::PUT,
        "DELETE" => MethodFilter::DELETE,
        "PATCH" => MethodFilter::PATCH,
        "HEAD" => MethodFilter::HEAD,
        "OPTIONS" => MethodFilter::OPTIONS,
        _ => MethodFilter::TRACE,
    }
}

/// Accepts connections until `shutdown`, serving `site` over plain HTTP or,
/// with `tls`, HTTPS; then lets open connections finish their current
/// request (at most [`DRAIN_TIMEOUT`]) and returns.
pub async fn serve<E: Copy + Send + Sync + 'static>(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    site: Arc<Site<E>>,
    shutdown: CancellationToken,
) {
    let limit = site
        .guard
        .as_ref()
        .and_then(|(g, _)| g.max_connections())
        .map(|n| Arc::new(tokio::sync::Semaphore::new(n)));
    accept_loop_limited(listener, shutdown.clone(), limit, move |stream, remote| {
        connection(stream, remote, tls.clone(), site.clone(), shutdown.clone())
    })
    .await;
}

/// Accepts connections until `shutdown`, runs `handle` for each on its own
/// task, then waits for those tasks (each must end on `shutdown` itself).
/// A failing accept (out of file descriptors, say) backs off rather than
/// spins, as Go's servers do.
pub async fn accept_loop<F, Fut>(listener: TcpListener, shutdown: CancellationToken, handle: F)
where
    F: FnMut(TcpStream, SocketAddr) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    accept_loop_limited(listener, shutdown, None, handle).await;
}

/// [`accept_loop`] holding one of `limit`'s permits per open connection:
/// with all taken, nothing is accepted until one closes.
async fn accept_loop_limited<F, Fut>(
    listener: TcpListener,
    shutdown: CancellationToken,
    limit: Option<Arc<tokio::sync::Semaphore>>,
    mut handle: F,
) where
    F: FnMut(TcpStream, SocketAddr) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let tracker = TaskTracker::new();
    let mut backoff = Duration::from_millis(5);
    loop {
        let permit = match &limit {
            None => None,
            Some(sem) => tokio::select! {
                _ = shutdown.cancelled() => break,
                p = sem.clone().acquire_owned() => p.ok(),
            },
        };
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, remote)) => {
                backoff = Duration::from_millis(5);
                let conn = handle(stream, remote);
                tracker.spawn(async move {
                    conn.await;
                    drop(permit);
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "temporary Accept() failure");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
    }
    drop(listener);
    tracker.close();
    tracker.wait().await;
}

/// The server side of a TLS handshake on an accepted connection, bounded
/// by [`HANDSHAKE_TIMEOUT`]; `None` (logged at debug) when it fails.
pub async fn accept_tls(
    acceptor: &TlsAcceptor,
    stream: TcpStream,
    remote: SocketAddr,
) -> Option<crate::stream::Stream> {
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(s)) => Some(crate::stream::Stream::Tls(Box::new(s.into()))),
        Ok(Err(e)) => {
            tracing::debug!(%remote, error = %e, "TLS handshake failed");
            None
        }
        Err(_) => {
            tracing::debug!(%remote, "TLS handshake timed out");
            None
        }
    }
}

async fn connection<E: Copy + Send + Sync + 'static>(
    stream: TcpStream,
    remote: SocketAddr,
    tls: Option<TlsAcceptor>,
    site: Arc<Site<E>>,
    shutdown: CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    let io = match tls {
        None => crate::stream::Stream::Plain(stream),
        Some(acceptor) => match accept_tls(&acceptor, stream, remote).await {
            Some(s) => s,
            None => return,
        },
    };
    let is_tls = matches!(io, crate::stream::Stream::Tls(_));
    let guarded = site.guard.is_some();
    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
        let site = site.clone();
        async move { Ok::<_, Infallible>(respond(&site, req, remote, is_tls).await) }
    });
    let mut builder = http1::Builder::new();
    builder.title_case_headers(true);
    if guarded {
        builder
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(GUARDED_HEADER_TIMEOUT);
    }
    let conn = builder.serve_connection(TokioIo::new(io), svc);
    let mut conn = std::pin::pin!(conn);
    let res = tokio::select! {
        res = conn.as_mut() => res,
        _ = shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            match tokio::time::timeout(DRAIN_TIMEOUT, conn.as_mut()).await {
                Ok(res) => res,
                Err(_) => return,
            }
        }
    };
    if let Err(e) = res {
        tracing::debug!(%remote, error = %e, "http connection error");
    }
}

/// One request → one response, logged as NSQ's `http_api.Log` does.
async fn respond<E: Copy + Send + Sync + 'static>(
    site: &Site<E>,
    req: Request<Incoming>,
    remote: SocketAddr,
    tls: bool,
) -> Response {
    let start = Instant::now();
    let method = req.method().clone();
    let request_uri = req
        .uri()
        .path_and_query()
        .map_or_else(|| "/".to_string(), |pq| pq.as_str().to_string());
    let headers = site.finish.as_ref().map(|_| req.headers().clone());
    let resp = route(site, req, remote, tls).await;
    let status = resp.status().as_u16();
    let elapsed = start.elapsed();
    let remote = go_addr(remote);
    if site.log_level == tracing::Level::DEBUG {
        tracing::debug!("{status} {method} {request_uri} ({remote}) {elapsed:?}");
    } else {
        tracing::info!("{status} {method} {request_uri} ({remote}) {elapsed:?}");
    }
    match (&site.finish, headers) {
        (Some(finish), Some(headers)) => finish(headers, resp).await,
        _ => resp,
    }
}

async fn route<E: Copy + Send + Sync + 'static>(
    site: &Site<E>,
    req: Request<Incoming>,
    remote: SocketAddr,
    tls: bool,
) -> Response {
    let (mut parts, body) = req.into_parts();
    parts.extensions.insert(ConnectInfo(remote));
    if !site.pass_through {
        let Ok(path) = crate::url::unescape_path(parts.uri.path()) else {
            // Go's net/http rejects such a request line before routing.
            let mut r = reply::plain(StatusCode::BAD_REQUEST, reply::TEXT, "400 Bad Request");
            r.headers_mut()
                .insert(CONNECTION, HeaderValue::from_static("close"));
            return r;
        };
        let query = parts.uri.query().map(str::to_string);
        match site.routes.route(parts.method.as_str(), &path) {
            Routed::Handle(endpoint) => {
                if let Some((guard, classify)) = &site.guard {
                    let checked = guard
                        .check(
                            classify(endpoint),
                            &parts.headers,
                            parts.uri.query(),
                            remote.ip(),
                            tls,
                        )
                        .await;
                    match checked {
                        Ok(Some(grant)) => {
                            parts.extensions.insert(grant);
                        }
                        Ok(None) => {}
                        Err(refusal) => return refusal,
                    }
                }
                let escaped = escape_path(&path);
                if escaped != parts.uri.path() {
                    let pq = match &query {
                        Some(q) => format!("{escaped}?{q}"),
                        None => escaped,
                    };
                    if let Ok(uri) = pq.parse() {
                        parts.uri = uri;
                    }
                }
            }
            Routed::Redirect { status, path } => {
                return redirect(status, &path, query.as_deref(), &parts.method);
            }
            Routed::Options { allow } => {
                let mut r = reply::plain(StatusCode::OK, "", "");
                set_allow(&mut r, &allow);
                return r;
            }
            Routed::MethodNotAllowed { allow } => {
                let mut r = reply::v1_error(StatusCode::METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED");
                set_allow(&mut r, &allow);
                return r;
            }
            Routed::NotFound => return reply::v1_error(StatusCode::NOT_FOUND, "NOT_FOUND"),
        }
    }
    let req = Request::from_parts(parts, Body::new(body));
    match site.app.clone().call(req).await {
        Ok(r) => r,
        Err(never) => match never {},
    }
}

/// A socket address as Go prints it: IPv4-mapped IPv6 addresses in dotted
/// form, IPv6 in brackets.
pub fn go_addr(addr: SocketAddr) -> String {
    match addr {
        SocketAddr::V4(a) => a.to_string(),
        SocketAddr::V6(a) => match a.ip().to_ipv4_mapped() {
            Some(v4) => format!("{v4}:{}", a.port()),
            None => format!("[{}]:{}", a.ip(), a.port()),
        },
    }
}

fn set_allow(resp: &mut Response, allow: &str) {
    if let Ok(v) = HeaderValue::from_str(allow) {
        resp.headers_mut().insert(ALLOW, v);
    }
}

/// `path` with every byte outside RFC 3986's unreserved set and the path's
/// sub-delimiters `%XX`-escaped, `/` kept (Go's `URL.EscapedPath`).
pub fn escape_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for &b in path.as_bytes() {
        match b {
            b'A'..=b'Z'
            | b'a'..=b'z'
            | b'0'..=b'9'
            | b'-'
            | b'_'
            | b'.'
            | b'~'
            | b'/'
            | b'!'
            | b'$'
            | b'&'
            | b'\''
            | b'('
            | b')'
            | b'*'
            | b'+'
            | b','
            | b';'
            | b'='
            | b':'
            | b'@' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Go's `http.Redirect` for a request whose path became `path`; the query
/// is kept. GET gets a short HTML body (and HEAD its `Content-Type`).
fn redirect(status: u16, path: &str, query: Option<&str>, method: &hyper::Method) -> Response {
    let url = match query {
        Some(q) => format!("{}?{q}", escape_path(path)),
        None => escape_path(path),
    };
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::MOVED_PERMANENTLY);
    let mut resp = match *method {
        hyper::Method::GET => {
            let body = format!(
                "<a href=\"{}\">{}</a>.\n\n",
                html_escape(&url),
                code.canonical_reason().unwrap_or("")
            );
            reply::plain(code, reply::HTML, body)
        }
        hyper::Method::HEAD => reply::plain(code, reply::HTML, ""),
        _ => reply::plain(code, "", ""),
    };
    if let Ok(v) = HeaderValue::from_str(&url) {
        resp.headers_mut().insert(LOCATION, v);
    }
    resp
}

/// Go's `html.EscapeString` as used by `http.Redirect`.
fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '\'' => out.push_str("&#39;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&#34;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirect_like_go() {
        let r = redirect(301, "/lookup", Some("topic=a&b=<c>"), &hyper::Method::GET);
        assert_eq!(r.status(), 301);
        assert_eq!(r.headers()[LOCATION], "/lookup?topic=a&b=<c>");
        assert_eq!(r.headers()[hyper::header::CONTENT_TYPE], reply::HTML);
        let r = redirect(307, "/topic/create", None, &hyper::Method::POST);
        assert_eq!(r.headers()[LOCATION], "/topic/create");
        assert!(r.headers().get(hyper::header::CONTENT_TYPE).is_none());
        assert_eq!(
            html_escape("/a?b=1&c='\"<>"),
            "/a?b=1&amp;c=&#39;&#34;&lt;&gt;"
        );
        assert_eq!(
            escape_path("/api/nodes/h:1/a b/é"),
            "/api/nodes/h:1/a%20b/%C3%A9"
        );
    }

    #[test]
    fn addresses_print_like_go() {
        assert_eq!(go_addr("127.0.0.1:5".parse().unwrap()), "127.0.0.1:5");
        assert_eq!(
            go_addr("[::ffff:127.0.0.1]:5".parse().unwrap()),
            "127.0.0.1:5"
        );
        assert_eq!(go_addr("[::1]:5".parse().unwrap()), "[::1]:5");
    }
}

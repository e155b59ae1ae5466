//! nsqd's HTTP API: publishing, stats, topic/channel administration and
//! runtime config, with nsqd's status codes, bodies and headers.
//!
//! Routing is done by hand rather than with axum's router because NSQ's
//! router (httprouter) has observable habits clients and tests see: exact
//! paths, 301/307 redirects to the canonical path for a trailing slash,
//! wrong case or unclean path, `OPTIONS` answered with `Allow`, and 405 with
//! `Allow` for a known path and the wrong method.
//!
//! The same routes are served on `--http-address` and, with TLS configured,
//! on `--https-address`; with `--tls-required=true` the plain listener
//! answers every request `403 TLS_REQUIRED` naming the HTTPS port.

// Handlers return a ready error `Response` as their `Err`, as axum's do;
// its size does not matter on this path.
#![allow(clippy::result_large_err)]

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue, Method, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use nsq_protocol::stats::NsqdInfo;
use tokio::net::TcpListener;

mod admin;
mod config;
mod publish;

use crate::server::nsqd::NsqdInner;
use crate::server::stats::{self, StatsQuery};

const NSQ_CONTENT_TYPE: &str = "nsq; version=1.0";

/// Every route: path and the methods it answers.
const ROUTES: &[(&str, &[&str])] = &[
    ("/ping", &["GET"]),
    ("/info", &["GET"]),
    ("/pub", &["POST"]),
    ("/mpub", &["POST"]),
    // simplequeue-compatible aliases (dropped by NSQ 1.x, kept by nsq-rs
    // for users migrating from simplequeue/pubsub)
    ("/put", &["POST"]),
    ("/mput", &["POST"]),
    ("/stats", &["GET"]),
    ("/topic/create", &["POST"]),
    ("/topic/delete", &["POST"]),
    ("/topic/empty", &["POST"]),
    ("/topic/pause", &["POST"]),
    ("/topic/unpause", &["POST"]),
    ("/channel/create", &["POST"]),
    ("/channel/delete", &["POST"]),
    ("/channel/empty", &["POST"]),
    ("/channel/pause", &["POST"]),
    ("/channel/unpause", &["POST"]),
    // nsq-rs addition: per-channel max_attempts and dead-letter topic
    ("/channel/config", &["GET", "POST"]),
    // nsq-rs addition: Prometheus text format (Go nsqd: 404)
    ("/metrics", &["GET"]),
];

/// The plain HTTP listener.
pub async fn serve(listener: TcpListener, nsqd: Arc<NsqdInner>) {
    let n = nsqd.clone();
    let tls_required = nsqd.opts().tls_required == crate::options::TLS_REQUIRED;
    let app = axum::Router::new().fallback(move |req: Request<Body>| {
        let n = n.clone();
        async move {
            if tls_required {
                return tls_required_response(&n);
            }
            route(n, req).await
        }
    });
    let cancel = nsqd.ctx.cancel.clone();
    if let Err(e) = axum::serve(listener, app.into_make_service())
        .with_graceful_shutdown(async move { cancel.cancelled().await })
        .await
    {
        tracing::error!(error = %e, "HTTP server failed");
    }
    tracing::info!("HTTP: closing listener");
}

/// nsqd's hand-formatted refusal on the plain listener under
/// `--tls-required=true` (note the spaces, unlike every other JSON body).
fn tls_required_response(nsqd: &NsqdInner) -> Response {
    let port = nsqd.https_port.load(std::sync::atomic::Ordering::Relaxed);
    json_response(
        StatusCode::FORBIDDEN,
        format!("{{\"message\": \"TLS_REQUIRED\", \"https_port\": {port}}}").into_bytes(),
    )
}

/// The HTTPS listener: TLS with nsqd's server config (including its client
/// certificate policy), then the same routes over HTTP/1.1.
pub async fn serve_tls(
    listener: TcpListener,
    cfg: Arc<rustls::ServerConfig>,
    nsqd: Arc<NsqdInner>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(cfg);
    let conns = tokio_util::task::TaskTracker::new();
    loop {
        let (stream, addr) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::error!(error = %e, "HTTPS accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = nsqd.ctx.cancel.cancelled() => break,
        };
        let (acceptor, n) = (acceptor.clone(), nsqd.clone());
        conns.spawn(async move {
            let tls = match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream))
                .await
            {
                Ok(Ok(t)) => t,
                Ok(Err(e)) => {
                    tracing::debug!(%addr, error = %e, "HTTPS: TLS handshake failed");
                    return;
                }
                Err(_) => return,
            };
            let cancel = n.ctx.cancel.clone();
            let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let n = n.clone();
                async move { Ok::<_, std::convert::Infallible>(route(n, req.map(Body::new)).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(tls), svc);
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = cancel.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(Duration::from_secs(5), conn).await;
                }
            }
        });
    }
    conns.close();
    conns.wait().await;
    tracing::info!("HTTPS: closing listener");
}

/// A V1-convention error: `{"message":...}` with NSQ's headers.
pub(crate) fn err(status: StatusCode, message: &str) -> Response {
    json_response(
        status,
        format!(
            "{{\"message\":{}}}",
            serde_json::Value::String(message.into())
        )
        .into_bytes(),
    )
}

pub(crate) fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    let mut r = (status, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    r.headers_mut().insert(
        "X-NSQ-Content-Type",
        HeaderValue::from_static(NSQ_CONTENT_TYPE),
    );
    r
}

/// A V1-convention string result (possibly empty).
pub(crate) fn ok_text(body: impl Into<Vec<u8>>) -> Response {
    let body = body.into();
    let mut r = (StatusCode::OK, body.clone()).into_response();
    if body.is_empty() {
        r.headers_mut().remove(header::CONTENT_TYPE);
    } else {
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
    }
    r.headers_mut().insert(
        "X-NSQ-Content-Type",
        HeaderValue::from_static(NSQ_CONTENT_TYPE),
    );
    r
}

fn plain(status: StatusCode, body: String) -> Response {
    let mut r = (status, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

fn allow_for(methods: &[&str]) -> String {
    let mut m: Vec<&str> = methods.to_vec();
    m.push("OPTIONS");
    m.sort_unstable();
    m.join(", ")
}

fn lookup(path: &str) -> Option<&'static [&'static str]> {
    if path.starts_with("/config/")
        && path.len() > "/config/".len()
        && !path["/config/".len()..].contains('/')
    {
        return Some(&["GET", "PUT"]);
    }
    ROUTES.iter().find(|(p, _)| *p == path).map(|(_, m)| *m)
}

/// httprouter's path repair: clean the path, then try with and without a
/// trailing slash, case-insensitively.
fn canonical(path: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for seg in path.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    let cleaned = format!("/{}", parts.join("/"));
    let lower = cleaned.to_lowercase();
    if let Some((p, _)) = ROUTES.iter().find(|(p, _)| *p == lower) {
        return Some(p.to_string());
    }
    if let Some(opt) = lower.strip_prefix("/config/") {
        if !opt.is_empty() && !opt.contains('/') {
            return Some(format!("/config/{}", &cleaned["/config/".len()..]));
        }
    }
    None
}

async fn route(nsqd: Arc<NsqdInner>, req: Request<Body>) -> Response {
    let path = req.uri().path().to_string();
    let started = std::time::Instant::now();
    let method = req.method().clone();
    let uri = req.uri().to_string();
    let resp = dispatch(nsqd, req, &path).await;
    tracing::debug!(status = resp.status().as_u16(), %method, %uri, elapsed = ?started.elapsed(), "http request");
    resp
}

async fn dispatch(nsqd: Arc<NsqdInner>, req: Request<Body>, path: &str) -> Response {
    let Some(methods) = lookup(path) else {
        if let Some(fixed) = canonical(path).filter(|f| f != path) {
            let code = if req.method() == Method::GET {
                StatusCode::MOVED_PERMANENTLY
            } else {
                StatusCode::TEMPORARY_REDIRECT
            };
            let location = match req.uri().query() {
                Some(q) => format!("{fixed}?{q}"),
                None => fixed,
            };
            let body = if req.method() == Method::GET {
                format!(
                    "<a href=\"{location}\">{}</a>.\n\n",
                    code.canonical_reason().unwrap_or("")
                )
            } else {
                String::new()
            };
            let mut r = (code, body).into_response();
            r.headers_mut().insert(
                header::LOCATION,
                HeaderValue::from_str(&location).unwrap_or(HeaderValue::from_static("/")),
            );
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            );
            return r;
        }
        return err(StatusCode::NOT_FOUND, "NOT_FOUND");
    };
    let method = req.method().as_str().to_string();
    if method == "OPTIONS" {
        let mut r = StatusCode::OK.into_response();
        r.headers_mut().insert(
            header::ALLOW,
            HeaderValue::from_str(&allow_for(methods))
                .unwrap_or(HeaderValue::from_static("OPTIONS")),
        );
        return r;
    }
    if !methods.contains(&method.as_str()) {
        let mut r = err(StatusCode::METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED");
        r.headers_mut().insert(
            header::ALLOW,
            HeaderValue::from_str(&allow_for(methods))
                .unwrap_or(HeaderValue::from_static("OPTIONS")),
        );
        return r;
    }
    let query = Query::parse(req.uri().query().unwrap_or(""));
    let headers = req.headers().clone();
    let body = req.into_body();
    match path {
        "/ping" => ping(&nsqd),
        "/info" => info(&nsqd),
        "/pub" | "/put" => publish::publish(&nsqd, &query, &headers, body).await,
        "/mpub" | "/mput" => publish::mpublish(&nsqd, &query, &headers, body).await,
        "/stats" => stats_handler(&nsqd, &query),
        "/metrics" => metrics_handler(&nsqd),
        "/topic/create" | "/topic/delete" | "/topic/empty" | "/topic/pause" | "/topic/unpause" => {
            admin::topic_action(&nsqd, path, &query)
        }
        "/channel/config" => admin::channel_config(&nsqd, &query, method == "POST"),
        p if p.starts_with("/channel/") => admin::channel_action(&nsqd, p, &query),
        p => {
            let opt = &p["/config/".len()..];
            if method == "PUT" {
                config::put(&nsqd, opt, body).await
            } else {
                config::get(&nsqd, opt)
            }
        }
    }
}

/// Query parameters; only the first value of a repeated one counts.
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(q: &str) -> Query {
        Query(
            form_urlencoded::parse(q.as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }
    fn get(&self, k: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    }
}

fn ping(nsqd: &NsqdInner) -> Response {
    if nsqd.is_healthy() {
        plain(StatusCode::OK, "OK".into())
    } else {
        plain(StatusCode::INTERNAL_SERVER_ERROR, nsqd.health())
    }
}

fn info(nsqd: &NsqdInner) -> Response {
    let o = nsqd.opts();
    let tcp = nsqd.tcp_port.load(std::sync::atomic::Ordering::Relaxed) as i64;
    let http = nsqd.http_port.load(std::sync::atomic::Ordering::Relaxed) as i64;
    let info = NsqdInfo {
        version: nsq_protocol::VERSION.into(),
        broadcast_address: o.broadcast_address.clone(),
        hostname: crate::options::hostname(),
        http_port: http,
        tcp_port: tcp,
        start_time: nsqd.start_time,
        max_heartbeat_interval: o.max_heartbeat_interval.as_nanos() as i64,
        max_output_buffer_size: o.max_output_buffer_size,
        max_output_buffer_timeout: o.max_output_buffer_timeout.as_nanos() as i64,
        max_deflate_level: o.max_deflate_level,
        topology_zone: o.topology_zone.clone(),
        topology_region: o.topology_region.clone(),
    };
    json_response(
        StatusCode::OK,
        serde_json::to_vec(&info).unwrap_or_default(),
    )
}

/// Reads at most `limit + 1` bytes: `Err(true)` when the body is larger than
/// `limit`, `Err(false)` on a read error.
pub(crate) async fn read_limited(body: Body, limit: usize) -> Result<Bytes, bool> {
    use http_body_util::BodyExt;
    let mut body = body;
    let mut out = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| false)?;
        if let Ok(data) = frame.into_data() {
            out.extend_from_slice(&data);
            if out.len() > limit {
                return Err(true);
            }
        }
    }
    Ok(out.freeze())
}

fn stats_handler(nsqd: &Arc<NsqdInner>, q: &Query) -> Response {
    let flag = |k: &str| !matches!(q.get(k), Some("false") | Some("0"));
    // an empty filter is no filter, as in nsqd
    let filter = |k: &str| q.get(k).filter(|v| !v.is_empty());
    let sq = StatsQuery {
        topic: filter("topic"),
        channel: filter("channel"),
        include_clients: flag("include_clients"),
        include_mem: flag("include_mem"),
    };
    let s = stats::collect(nsqd, &sq);
    if q.get("format") == Some("json") {
        json_response(StatusCode::OK, serde_json::to_vec(&s).unwrap_or_default())
    } else {
        ok_text(stats::text(&s))
    }
}

fn metrics_handler(nsqd: &Arc<NsqdInner>) -> Response {
    let sq = StatsQuery {
        topic: None,
        channel: None,
        include_clients: false,
        include_mem: true,
    };
    let s = stats::collect(nsqd, &sq);
    let body = crate::server::metrics::render(&s, nsqd.clients().len());
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(crate::server::metrics::CONTENT_TYPE),
    );
    r
}

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

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, HeaderValue, Method, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use nsq_protocol::command::parse_mpub_body;
use nsq_protocol::mpub_text::split_mpub_text;
use nsq_protocol::names::{is_valid_channel_name, is_valid_topic_name};
use nsq_protocol::stats::NsqdInfo;
use tokio::net::TcpListener;

use crate::nsqd::NsqdInner;
use crate::stats::{self, StatsQuery};

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
    // nsq-rs addition: Prometheus text format (Go nsqd: 404)
    ("/metrics", &["GET"]),
];

/// The plain HTTP listener.
pub async fn serve(listener: TcpListener, nsqd: Arc<NsqdInner>) {
    let n = nsqd.clone();
    let tls_required = nsqd.opts.tls_required == crate::options::TLS_REQUIRED;
    let app = axum::Router::new().fallback(move |req: Request<Body>| {
        let n = n.clone();
        async move {
            if tls_required {
                return tls_required_response(&n);
            }
            route(n, req).await
        }
    });
    let cancel = nsqd.cancel.clone();
    if let Err(e) = axum::serve(listener, app.into_make_service()).with_graceful_shutdown(async move { cancel.cancelled().await }).await {
        tracing::error!(error = %e, "HTTP server failed");
    }
    tracing::info!("HTTP: closing listener");
}

/// nsqd's hand-formatted refusal on the plain listener under
/// `--tls-required=true` (note the spaces, unlike every other JSON body).
fn tls_required_response(nsqd: &NsqdInner) -> Response {
    let port = nsqd.https_port.load(std::sync::atomic::Ordering::Relaxed);
    json_response(StatusCode::FORBIDDEN, format!("{{\"message\": \"TLS_REQUIRED\", \"https_port\": {port}}}").into_bytes())
}

/// The HTTPS listener: TLS with nsqd's server config (including its client
/// certificate policy), then the same routes over HTTP/1.1.
pub async fn serve_tls(listener: TcpListener, cfg: Arc<rustls::ServerConfig>, nsqd: Arc<NsqdInner>) {
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
            _ = nsqd.cancel.cancelled() => break,
        };
        let (acceptor, n) = (acceptor.clone(), nsqd.clone());
        conns.spawn(async move {
            let tls = match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream)).await {
                Ok(Ok(t)) => t,
                Ok(Err(e)) => {
                    tracing::debug!(%addr, error = %e, "HTTPS: TLS handshake failed");
                    return;
                }
                Err(_) => return,
            };
            let cancel = n.cancel.clone();
            let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let n = n.clone();
                async move { Ok::<_, std::convert::Infallible>(route(n, req.map(Body::new)).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new().serve_connection(hyper_util::rt::TokioIo::new(tls), svc);
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
fn err(status: StatusCode, message: &str) -> Response {
    json_response(status, format!("{{\"message\":{}}}", serde_json::Value::String(message.into())).into_bytes())
}

fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    let mut r = (status, body).into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json; charset=utf-8"));
    r.headers_mut().insert("X-NSQ-Content-Type", HeaderValue::from_static(NSQ_CONTENT_TYPE));
    r
}

/// A V1-convention string result (possibly empty).
fn ok_text(body: impl Into<Vec<u8>>) -> Response {
    let body = body.into();
    let mut r = (StatusCode::OK, body.clone()).into_response();
    if body.is_empty() {
        r.headers_mut().remove(header::CONTENT_TYPE);
    } else {
        r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    }
    r.headers_mut().insert("X-NSQ-Content-Type", HeaderValue::from_static(NSQ_CONTENT_TYPE));
    r
}

fn plain(status: StatusCode, body: String) -> Response {
    let mut r = (status, body).into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

fn allow_for(methods: &[&str]) -> String {
    let mut m: Vec<&str> = methods.to_vec();
    m.push("OPTIONS");
    m.sort_unstable();
    m.join(", ")
}

fn lookup(path: &str) -> Option<&'static [&'static str]> {
    if path.starts_with("/config/") && path.len() > "/config/".len() && !path["/config/".len()..].contains('/') {
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
            let code = if req.method() == Method::GET { StatusCode::MOVED_PERMANENTLY } else { StatusCode::TEMPORARY_REDIRECT };
            let location = match req.uri().query() {
                Some(q) => format!("{fixed}?{q}"),
                None => fixed,
            };
            let body = if req.method() == Method::GET {
                format!("<a href=\"{location}\">{}</a>.\n\n", code.canonical_reason().unwrap_or(""))
            } else {
                String::new()
            };
            let mut r = (code, body).into_response();
            r.headers_mut().insert(header::LOCATION, HeaderValue::from_str(&location).unwrap_or(HeaderValue::from_static("/")));
            r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
            return r;
        }
        return err(StatusCode::NOT_FOUND, "NOT_FOUND");
    };
    let method = req.method().as_str().to_string();
    if method == "OPTIONS" {
        let mut r = StatusCode::OK.into_response();
        r.headers_mut().insert(header::ALLOW, HeaderValue::from_str(&allow_for(methods)).unwrap_or(HeaderValue::from_static("OPTIONS")));
        return r;
    }
    if !methods.contains(&method.as_str()) {
        let mut r = err(StatusCode::METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED");
        r.headers_mut().insert(header::ALLOW, HeaderValue::from_str(&allow_for(methods)).unwrap_or(HeaderValue::from_static("OPTIONS")));
        return r;
    }
    let query = Query::parse(req.uri().query().unwrap_or(""));
    let headers = req.headers().clone();
    let body = req.into_body();
    match path {
        "/ping" => ping(&nsqd),
        "/info" => info(&nsqd),
        "/pub" | "/put" => publish(&nsqd, &query, &headers, body).await,
        "/mpub" | "/mput" => mpublish(&nsqd, &query, &headers, body).await,
        "/stats" => stats_handler(&nsqd, &query),
        "/metrics" => metrics_handler(&nsqd),
        "/topic/create" | "/topic/delete" | "/topic/empty" | "/topic/pause" | "/topic/unpause" => topic_action(&nsqd, path, &query),
        p if p.starts_with("/channel/") => channel_action(&nsqd, p, &query),
        p => {
            let opt = &p["/config/".len()..];
            if method == "PUT" {
                config_put(&nsqd, opt, body).await
            } else {
                config_get(&nsqd, opt)
            }
        }
    }
}

/// Query parameters; only the first value of a repeated one counts.
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(q: &str) -> Query {
        Query(form_urlencoded::parse(q.as_bytes()).map(|(k, v)| (k.into_owned(), v.into_owned())).collect())
    }
    fn get(&self, k: &str) -> Option<&str> {
        self.0.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str())
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
    let o = &nsqd.opts;
    let tcp = nsqd.tcp_port.load(std::sync::atomic::Ordering::Relaxed) as i64;
    let http = nsqd.http_port.load(std::sync::atomic::Ordering::Relaxed) as i64;
    let info = NsqdInfo {
        version: nsq_protocol::VERSION.into(),
        broadcast_address: o.broadcast_address.clone(),
        hostname: crate::hostname(),
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
    json_response(StatusCode::OK, serde_json::to_vec(&info).unwrap_or_default())
}

/// Reads at most `limit + 1` bytes: `Err(true)` when the body is larger than
/// `limit`, `Err(false)` on a read error.
async fn read_limited(body: Body, limit: usize) -> Result<Bytes, bool> {
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

fn content_length(h: &HeaderMap) -> Option<i64> {
    h.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok())
}

/// The `topic` parameter for /pub, /mpub and /topic/*.
fn topic_param<'a>(q: &'a Query, invalid: &str) -> Result<&'a str, Response> {
    let t = q.get("topic").ok_or_else(|| err(StatusCode::BAD_REQUEST, "MISSING_ARG_TOPIC"))?;
    if !is_valid_topic_name(t) {
        return Err(err(StatusCode::BAD_REQUEST, invalid));
    }
    Ok(t)
}

async fn publish(nsqd: &Arc<NsqdInner>, q: &Query, h: &HeaderMap, body: Body) -> Response {
    let max = nsqd.opts.max_msg_size;
    if content_length(h).is_some_and(|l| l > max) {
        return err(StatusCode::PAYLOAD_TOO_LARGE, "MSG_TOO_BIG");
    }
    let body = match read_limited(body, max as usize).await {
        Ok(b) => b,
        Err(true) => return err(StatusCode::PAYLOAD_TOO_LARGE, "MSG_TOO_BIG"),
        Err(false) => return err(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR"),
    };
    if body.is_empty() {
        return err(StatusCode::BAD_REQUEST, "MSG_EMPTY");
    }
    let name = match topic_param(q, "INVALID_TOPIC") {
        Ok(t) => t,
        Err(r) => return r,
    };
    let Some(topic) = nsqd.get_or_create_topic(name) else { return err(StatusCode::SERVICE_UNAVAILABLE, "EXITING") };
    let defer = match q.get("defer") {
        None => None,
        Some(d) => match d.parse::<i64>() {
            Ok(ms) if ms >= 0 && ms <= nsqd.opts.max_req_timeout.as_millis() as i64 => Some(Duration::from_millis(ms as u64)),
            _ => return err(StatusCode::BAD_REQUEST, "INVALID_DEFER"),
        },
    };
    match topic.put(vec![body], defer) {
        Ok(()) => ok_text("OK"),
        Err(_) => err(StatusCode::SERVICE_UNAVAILABLE, "EXITING"),
    }
}

async fn mpublish(nsqd: &Arc<NsqdInner>, q: &Query, h: &HeaderMap, body: Body) -> Response {
    let max_body = nsqd.opts.max_body_size;
    if content_length(h).is_some_and(|l| l > max_body) {
        return err(StatusCode::PAYLOAD_TOO_LARGE, "BODY_TOO_BIG");
    }
    let name = match topic_param(q, "INVALID_TOPIC") {
        Ok(t) => t,
        Err(r) => return r,
    };
    let Some(topic) = nsqd.get_or_create_topic(name) else { return err(StatusCode::SERVICE_UNAVAILABLE, "EXITING") };
    let binary = !matches!(q.get("binary"), None | Some("false") | Some("0"));
    let body = match read_limited(body, max_body as usize).await {
        Ok(b) => b,
        Err(true) => return err(StatusCode::PAYLOAD_TOO_LARGE, "BODY_TOO_BIG"),
        Err(false) => return err(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR"),
    };
    let bodies = if binary {
        match parse_mpub_body(body, &nsqd.limits) {
            Ok(b) => b,
            Err(e) => return err(StatusCode::PAYLOAD_TOO_LARGE, e.http_code()),
        }
    } else {
        // one message per line (nsqd's doMPUB text mode); `body` is at most
        // max_body bytes here, so only MSG_TOO_BIG can come back
        match split_mpub_text(body, nsqd.opts.max_msg_size, max_body) {
            Ok(b) => b,
            Err(e) => return err(StatusCode::PAYLOAD_TOO_LARGE, e.http_code()),
        }
    };
    if bodies.is_empty() {
        return ok_text("OK");
    }
    match topic.put(bodies, None) {
        Ok(()) => ok_text("OK"),
        Err(_) => err(StatusCode::SERVICE_UNAVAILABLE, "EXITING"),
    }
}

fn stats_handler(nsqd: &Arc<NsqdInner>, q: &Query) -> Response {
    let flag = |k: &str| !matches!(q.get(k), Some("false") | Some("0"));
    // an empty filter is no filter, as in nsqd
    let filter = |k: &str| q.get(k).filter(|v| !v.is_empty());
    let sq = StatsQuery { topic: filter("topic"), channel: filter("channel"), include_clients: flag("include_clients"), include_mem: flag("include_mem") };
    let s = stats::collect(nsqd, &sq);
    if q.get("format") == Some("json") {
        json_response(StatusCode::OK, serde_json::to_vec(&s).unwrap_or_default())
    } else {
        ok_text(stats::text(&s))
    }
}

fn metrics_handler(nsqd: &Arc<NsqdInner>) -> Response {
    let sq = StatsQuery { topic: None, channel: None, include_clients: false, include_mem: true };
    let s = stats::collect(nsqd, &sq);
    let body = crate::metrics::render(&s, nsqd.clients().len());
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(crate::metrics::CONTENT_TYPE));
    r
}

fn persist(nsqd: &NsqdInner) -> Result<(), Response> {
    nsqd.persist_metadata().map_err(|e| {
        tracing::error!(error = %e, "failed to persist metadata");
        err(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR")
    })
}

fn topic_action(nsqd: &Arc<NsqdInner>, path: &str, q: &Query) -> Response {
    let action = &path["/topic/".len()..];
    let Some(name) = q.get("topic") else { return err(StatusCode::BAD_REQUEST, "MISSING_ARG_TOPIC") };
    if matches!(action, "create" | "empty") && !is_valid_topic_name(name) {
        return err(StatusCode::BAD_REQUEST, "INVALID_TOPIC");
    }
    if action == "create" {
        return match nsqd.get_or_create_topic(name) {
            Some(_) => ok_text(""),
            None => err(StatusCode::SERVICE_UNAVAILABLE, "EXITING"),
        };
    }
    if action == "delete" {
        if !nsqd.delete_topic(name) {
            return err(StatusCode::NOT_FOUND, "TOPIC_NOT_FOUND");
        }
        return match persist(nsqd) {
            Ok(()) => ok_text(""),
            Err(r) => r,
        };
    }
    let Some(topic) = nsqd.get_topic(name) else { return err(StatusCode::NOT_FOUND, "TOPIC_NOT_FOUND") };
    match action {
        "empty" => match topic.empty() {
            Ok(()) => ok_text(""),
            Err(_) => err(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR"),
        },
        _ => {
            topic.set_paused(!action.contains("unpause"));
            match persist(nsqd) {
                Ok(()) => ok_text(""),
                Err(r) => r,
            }
        }
    }
}

fn channel_action(nsqd: &Arc<NsqdInner>, path: &str, q: &Query) -> Response {
    let action = &path["/channel/".len()..];
    let Some(tname) = q.get("topic") else { return err(StatusCode::BAD_REQUEST, "MISSING_ARG_TOPIC") };
    if !is_valid_topic_name(tname) {
        return err(StatusCode::BAD_REQUEST, "INVALID_ARG_TOPIC");
    }
    let Some(cname) = q.get("channel") else { return err(StatusCode::BAD_REQUEST, "MISSING_ARG_CHANNEL") };
    if !is_valid_channel_name(cname) {
        return err(StatusCode::BAD_REQUEST, "INVALID_ARG_CHANNEL");
    }
    let Some(topic) = nsqd.get_topic(tname) else { return err(StatusCode::NOT_FOUND, "TOPIC_NOT_FOUND") };
    if action == "create" {
        return match topic.get_or_create_channel(cname) {
            Ok(_) => ok_text(""),
            Err(_) => err(StatusCode::SERVICE_UNAVAILABLE, "EXITING"),
        };
    }
    if action == "delete" {
        if !topic.delete_channel(cname) {
            return err(StatusCode::NOT_FOUND, "CHANNEL_NOT_FOUND");
        }
        return match persist(nsqd) {
            Ok(()) => ok_text(""),
            Err(r) => r,
        };
    }
    let Some(ch) = topic.get_channel(cname) else { return err(StatusCode::NOT_FOUND, "CHANNEL_NOT_FOUND") };
    match action {
        "empty" => match ch.with(|s| s.empty()) {
            Ok(()) => ok_text(""),
            Err(_) => err(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR"),
        },
        _ => {
            let paused = !action.contains("unpause");
            ch.with(|s| {
                s.paused = paused;
                if !paused {
                    s.pump(std::time::Instant::now());
                }
            });
            match persist(nsqd) {
                Ok(()) => ok_text(""),
                Err(r) => r,
            }
        }
    }
}

/// A config value: JSON, or a raw string (nsqd returns strings unquoted).
enum ConfigValue {
    Json(serde_json::Value),
    Raw(String),
}

fn level_num(l: &str) -> i64 {
    match l {
        "debug" => 1,
        "info" => 2,
        "warn" => 3,
        "error" => 4,
        "fatal" => 5,
        _ => 2,
    }
}

fn config_value(nsqd: &NsqdInner, opt: &str) -> Option<ConfigValue> {
    use serde_json::json;
    use ConfigValue::*;
    let o = &nsqd.opts;
    let ns = |d: Duration| Json(json!(d.as_nanos() as i64));
    Some(match opt {
        "id" => Json(json!(o.node_id)),
        "log_level" => Json(json!(level_num(&nsqd.log_level.lock()))),
        "log_prefix" => Raw(o.log_prefix.clone()),
        "tcp_address" => Raw(o.tcp_address.clone()),
        "http_address" => Raw(o.http_address.clone()),
        "https_address" => Raw(o.https_address.clone()),
        "broadcast_address" => Raw(o.broadcast_address.clone()),
        "broadcast_tcp_port" => Json(json!(o.broadcast_tcp_port)),
        "broadcast_http_port" => Json(json!(o.broadcast_http_port)),
        "nsqlookupd_tcp_addresses" => Json(json!(nsqd.lookupd_tcp_addresses.lock().clone())),
        "auth_http_addresses" => Json(json!(o.auth_http_addresses)),
        "auth_http_request_method" => Raw(o.auth_http_request_method.clone()),
        "http_client_connect_timeout" => ns(o.http_client_connect_timeout),
        "http_client_request_timeout" => ns(o.http_client_request_timeout),
        "topology_region" => Raw(o.topology_region.clone()),
        "topology_zone" => Raw(o.topology_zone.clone()),
        "data_path" => Raw(o.data_path.clone()),
        "mem_queue_size" => Json(json!(o.mem_queue_size)),
        "max_bytes_per_file" => Json(json!(o.max_bytes_per_file)),
        "sync_every" => Json(json!(o.sync_every)),
        "sync_timeout" => ns(o.sync_timeout),
        "queue_scan_worker_pool_max" => Json(json!(o.queue_scan_worker_pool_max)),
        "queue_scan_selection_count" => Json(json!(o.queue_scan_selection_count)),
        "msg_timeout" => ns(o.msg_timeout),
        "max_msg_timeout" => ns(o.max_msg_timeout),
        "max_msg_size" => Json(json!(o.max_msg_size)),
        "max_req_timeout" => ns(o.max_req_timeout),
        "max_body_size" => Json(json!(o.max_body_size)),
        "max_heartbeat_interval" => ns(o.max_heartbeat_interval),
        "max_rdy_count" => Json(json!(o.max_rdy_count)),
        "max_output_buffer_size" => Json(json!(o.max_output_buffer_size)),
        "max_output_buffer_timeout" => ns(o.max_output_buffer_timeout),
        "min_output_buffer_timeout" => ns(o.min_output_buffer_timeout),
        "output_buffer_timeout" => ns(o.output_buffer_timeout),
        "max_channel_consumers" => Json(json!(o.max_channel_consumers)),
        "statsd_address" => Raw(o.statsd_address.clone()),
        "statsd_prefix" => Raw(nsqd.statsd_prefix.lock().clone()),
        "statsd_interval" => ns(o.statsd_interval),
        "statsd_mem_stats" => Json(json!(o.statsd_mem_stats)),
        "statsd_udp_packet_size" => Json(json!(o.statsd_udp_packet_size)),
        "statsd_exclude_ephemeral" => Json(json!(o.statsd_exclude_ephemeral)),
        "e2e_processing_latency_window_time" => ns(o.e2e_processing_latency_window_time),
        "e2e_processing_latency_percentiles" => Json(json!(o.e2e_processing_latency_percentiles)),
        "tls_cert" => Raw(o.tls_cert.clone()),
        "tls_key" => Raw(o.tls_key.clone()),
        "tls_client_auth_policy" => Raw(o.tls_client_auth_policy.clone()),
        "tls_root_ca_file" => Raw(o.tls_root_ca_file.clone()),
        "tls_required" => Json(json!(o.tls_required)),
        "tls_min_version" => Json(json!(o.tls_min_version)),
        "deflate" => Json(json!(o.deflate)),
        "max_deflate_level" => Json(json!(o.max_deflate_level)),
        "snappy" => Json(json!(o.snappy)),
        "enable_experiment" => Json(json!(o.enable_experiment)),
        _ => return None,
    })
}

fn config_get(nsqd: &NsqdInner, opt: &str) -> Response {
    match config_value(nsqd, opt) {
        None => err(StatusCode::BAD_REQUEST, "INVALID_OPTION"),
        Some(ConfigValue::Raw(s)) => ok_text(s),
        Some(ConfigValue::Json(v)) => json_response(StatusCode::OK, serde_json::to_vec(&v).unwrap_or_default()),
    }
}

async fn config_put(nsqd: &Arc<NsqdInner>, opt: &str, body: Body) -> Response {
    let body = match read_limited(body, nsqd.opts.max_msg_size as usize).await {
        Ok(b) if !b.is_empty() => b,
        Ok(_) | Err(true) => return err(StatusCode::PAYLOAD_TOO_LARGE, "INVALID_VALUE"),
        Err(false) => return err(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR"),
    };
    match opt {
        "nsqlookupd_tcp_addresses" => {
            let Ok(addrs) = serde_json::from_slice::<Vec<String>>(&body) else { return err(StatusCode::BAD_REQUEST, "INVALID_VALUE") };
            *nsqd.lookupd_tcp_addresses.lock() = addrs;
            nsqd.lookupd_changed.notify_one();
        }
        "log_level" => {
            let level = String::from_utf8_lossy(&body).trim().to_lowercase();
            if !matches!(level.as_str(), "debug" | "info" | "warn" | "error" | "fatal") {
                return err(StatusCode::BAD_REQUEST, "INVALID_VALUE");
            }
            if let Some(hook) = nsqd.log_level_hook.lock().as_ref() {
                if !hook(&level) {
                    return err(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR");
                }
            }
            *nsqd.log_level.lock() = level;
        }
        _ => return err(StatusCode::BAD_REQUEST, "INVALID_OPTION"),
    }
    config_get(nsqd, opt)
}

//! nsqadmin's HTTP server: one axum fallback that routes with [`routes`]
//! (nsqadmin's router rules), answers with nsq's "V1" conventions, logs each
//! request like nsqadmin (`200 GET /api/topics (ip:port) 1.2ms`) and
//! compresses every response the client accepts compressed.
//!
//! Handlers live in `api` (reads), `actions` (admin actions), `config`
//! (`/config/:opt`) and `ui` (the page, static assets, graphite proxy).

mod actions;
mod api;
mod compress;
mod config;
pub mod routes;
mod ui;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::header::{
    HeaderMap, HeaderValue, ALLOW, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, LOCATION, VARY,
};
use hyper::{Method, StatusCode};
use serde::Serialize;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::Shared;
use routes::{Decision, Route, Router};

/// Request bodies are read up to this many bytes (`/config` PUT allows 1 MiB).
const MAX_BODY: usize = (1 << 20) + 1;

pub const JSON_CT: &str = "application/json; charset=utf-8";
pub const TEXT_CT: &str = "text/plain; charset=utf-8";
const X_NSQ: &str = "X-NSQ-Content-Type";
const X_NSQ_V1: &str = "nsq; version=1.0";

/// One request as handlers see it (body already read).
#[derive(Debug)]
pub struct Req {
    pub method: Method,
    /// Path as received (not decoded).
    pub path: String,
    /// Raw query string (without `?`), `""` if none.
    pub query: String,
    pub headers: HeaderMap,
    pub remote: SocketAddr,
    pub body: Bytes,
}

impl Req {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// First value of a query parameter.
    pub fn param(&self, name: &str) -> Option<String> {
        form_urlencoded::parse(self.query.as_bytes())
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    }
}

/// A V1 error answer: `{"message":"<text>"}` with status `code`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiErr {
    pub code: u16,
    pub text: String,
}

impl ApiErr {
    pub fn new(code: u16, text: impl Into<String>) -> ApiErr {
        ApiErr {
            code,
            text: text.into(),
        }
    }
}

pub type ApiResult = Result<Response, ApiErr>;

fn with_headers(status: u16, headers: &[(&'static str, &str)], body: Bytes) -> Response {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    for (k, v) in headers {
        if let Ok(v) = HeaderValue::from_str(v) {
            r.headers_mut().insert(*k, v);
        }
    }
    r
}

/// 200 with a JSON body, V1 headers.
pub fn v1_json<T: Serialize + ?Sized>(v: &T) -> Response {
    with_headers(
        200,
        &[("content-type", JSON_CT), (X_NSQ, X_NSQ_V1)],
        Bytes::from(nsq_protocol::gofmt::to_json(v)),
    )
}

/// 200 with a raw string body (how nsq answers string-valued results).
pub fn v1_text(s: &str) -> Response {
    let mut h = vec![(X_NSQ, X_NSQ_V1)];
    if !s.is_empty() {
        h.push(("content-type", TEXT_CT));
    }
    with_headers(200, &h, Bytes::from(s.to_string()))
}

pub fn v1_error(code: u16, text: &str) -> Response {
    let body = nsq_protocol::gofmt::to_json(&serde_json::json!({ "message": text }));
    with_headers(
        code,
        &[("content-type", JSON_CT), (X_NSQ, X_NSQ_V1)],
        Bytes::from(body),
    )
}

/// A body without nsq's headers (`/ping`, static assets).
pub fn plain(code: u16, content_type: &str, body: impl Into<Bytes>) -> Response {
    with_headers(code, &[("content-type", content_type)], body.into())
}

/// `"WARNING: a; b"`, or `""` with no warnings.
pub fn warning(msgs: &[String]) -> String {
    if msgs.is_empty() {
        String::new()
    } else {
        format!("WARNING: {}", msgs.join("; "))
    }
}

/// Serves until `shutdown` is cancelled.
pub async fn serve(
    shared: Arc<Shared>,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let opts = shared.options();
    let router = Arc::new(Router::new(&opts.base_path, opts.proxy_graphite));
    let app = axum::Router::new().fallback(
        move |ConnectInfo(remote): ConnectInfo<SocketAddr>, req: Request| {
            let shared = shared.clone();
            let router = router.clone();
            async move { handle(shared, router, remote, req).await }
        },
    );
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown.cancelled_owned())
    .await
}

async fn read_body(body: Body) -> Result<Bytes, String> {
    let mut body = body;
    let mut buf = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| e.to_string())?;
        if let Ok(data) = frame.into_data() {
            buf.extend_from_slice(&data);
            if buf.len() >= MAX_BODY {
                buf.truncate(MAX_BODY);
                break;
            }
        }
    }
    Ok(buf.freeze())
}

async fn handle(
    shared: Arc<Shared>,
    router: Arc<Router>,
    remote: SocketAddr,
    req: Request,
) -> Response {
    let start = Instant::now();
    let (parts, body) = req.into_parts();
    let uri = parts.uri.to_string();
    let req = Req {
        method: parts.method.clone(),
        path: parts.uri.path().to_string(),
        query: parts.uri.query().unwrap_or("").to_string(),
        headers: parts.headers,
        remote,
        body: Bytes::new(),
    };
    let accept_encoding = req.header("accept-encoding").to_string();
    let resp = match read_body(body).await {
        Ok(b) => dispatch(&shared, &router, Req { body: b, ..req }).await,
        Err(e) => v1_error(500, &format!("failed to read request body - {e}")),
    };
    tracing::info!(
        "{} {} {} ({}) {:?}",
        resp.status().as_u16(),
        parts.method,
        uri,
        remote,
        start.elapsed()
    );
    match compress::negotiate(&accept_encoding) {
        Some(enc) => compress_response(resp, enc).await,
        None => resp,
    }
}

async fn compress_response(resp: Response, enc: compress::Encoding) -> Response {
    let (mut parts, body) = resp.into_parts();
    let bytes = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            tracing::error!(error = %e, "failed to buffer response for compression");
            return v1_error(500, "INTERNAL_ERROR");
        }
    };
    match compress::compress(enc, &bytes) {
        Ok(z) => {
            if !bytes.is_empty() && !parts.headers.contains_key(CONTENT_TYPE) {
                parts
                    .headers
                    .insert(CONTENT_TYPE, HeaderValue::from_static(TEXT_CT));
            }
            parts.headers.remove(CONTENT_LENGTH);
            parts
                .headers
                .insert(CONTENT_ENCODING, HeaderValue::from_static(enc.name()));
            parts
                .headers
                .append(VARY, HeaderValue::from_static("Accept-Encoding"));
            Response::from_parts(parts, Body::from(z))
        }
        Err(e) => {
            tracing::error!(error = %e, "compression failed");
            Response::from_parts(parts, Body::from(bytes))
        }
    }
}

async fn dispatch(s: &Arc<Shared>, router: &Router, req: Req) -> Response {
    let decision = router.resolve(req.method.as_str(), &req.path);
    let route = match decision {
        Decision::Found(r) => r,
        Decision::Redirect(to) => {
            let to = if req.query.is_empty() {
                to
            } else {
                format!("{to}?{}", req.query)
            };
            let code = if req.method == Method::GET || req.method == Method::HEAD {
                301
            } else {
                307
            };
            let mut r = plain(code, "text/html; charset=utf-8", Bytes::new());
            if let Ok(v) = HeaderValue::from_str(&to) {
                r.headers_mut().insert(LOCATION, v);
            }
            return r;
        }
        Decision::MethodNotAllowed(allow) => {
            let mut r = v1_error(405, "METHOD_NOT_ALLOWED");
            if let Ok(v) = HeaderValue::from_str(&allow) {
                r.headers_mut().insert(ALLOW, v);
            }
            return r;
        }
        Decision::Options(allow) => {
            let mut r = Response::new(Body::empty());
            if let Ok(v) = HeaderValue::from_str(&allow) {
                r.headers_mut().insert(ALLOW, v);
            }
            return r;
        }
        Decision::NotFound => return v1_error(404, "NOT_FOUND"),
    };
    let result = match route {
        Route::Index => Ok(ui::index(s, &req)),
        Route::Ping => Ok(plain(200, TEXT_CT, "OK")),
        Route::Static(asset) => Ok(ui::asset(s, &asset)),
        Route::Render => Ok(ui::render_proxy(s, &req).await),
        Route::Topics => api::topics(s, &req).await,
        Route::Topic(t) => api::topic(s, &t).await,
        Route::Channel(t, c) => api::channel(s, &t, &c).await,
        Route::Nodes => api::nodes(s).await,
        Route::Node(n) => api::node(s, &n).await,
        Route::Counter => api::counter(s).await,
        Route::Graphite => api::graphite(s, &req).await,
        Route::History => api::history(s, &req),
        Route::HistoryTopic(t) => api::history_topic(s, &req, &t),
        Route::HistoryChannel(t, c) => api::history_channel(s, &req, &t, &c),
        Route::CreateTopicChannel => actions::create_topic_channel(s, &req).await,
        Route::TopicAction(t) => actions::topic_channel_action(s, &req, &t, "").await,
        Route::ChannelAction(t, c) => actions::topic_channel_action(s, &req, &t, &c).await,
        Route::TombstoneNode(n) => actions::tombstone_node(s, &req, &n).await,
        Route::DeleteTopic(t) => actions::delete_topic(s, &req, &t).await,
        Route::DeleteChannel(t, c) => actions::delete_channel(s, &req, &t, &c).await,
        Route::ConfigGet(opt) | Route::ConfigPut(opt) => config::handle(s, &req, &opt),
    };
    result.unwrap_or_else(|e| v1_error(e.code, &e.text))
}

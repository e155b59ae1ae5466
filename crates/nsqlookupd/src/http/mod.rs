//! The HTTP server shell: accepts connections, serves HTTP/1.1 with hyper,
//! and turns routing decisions and endpoint [`api::Reply`]s into responses
//! with NSQ's header conventions (spec nsqd.md §7.1, nsqlookupd.md §3).
//!
//! Owns: sockets, hyper, headers, redirects, `Allow`, the request log line,
//! and shutdown of HTTP connections. Never: endpoint logic ([`api`]), routing
//! rules ([`router`]) or URL decoding rules ([`query`]).
//!
//! Header names go out in Go's canonical case (`X-Nsq-Content-Type`,
//! `Content-Type`) because hyper is told to title-case them, so a raw dump
//! of a response looks like Go's.

pub(crate) mod api;
pub(crate) mod query;
pub(crate) mod router;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE, LOCATION};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, error, info, warn};

use crate::Context;
use api::Reply;
use router::Routed;

const JSON: &str = "application/json; charset=utf-8";
const TEXT: &str = "text/plain; charset=utf-8";
const HTML: &str = "text/html; charset=utf-8";
const NSQ_CONTENT_TYPE: &str = "x-nsq-content-type";
const NSQ_V1: &str = "nsq; version=1.0";

/// Request bodies are read (NSQ's handlers read them) up to this size; no
/// nsqlookupd endpoint uses a body.
const MAX_BODY: usize = 1024 * 1024;

/// How long an HTTP connection may take to finish its current request after
/// shutdown (Go's nsqlookupd simply exits).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);

/// Accepts HTTP clients until `shutdown`, then waits for open connections to
/// finish their current request.
pub(crate) async fn serve(listener: TcpListener, ctx: Arc<Context>, shutdown: CancellationToken) {
    let local = listener
        .local_addr()
        .map(crate::go_addr)
        .unwrap_or_default();
    info!("HTTP: listening on {local}");
    let tracker = TaskTracker::new();
    let mut backoff = Duration::from_millis(5);
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, remote)) => {
                backoff = Duration::from_millis(5);
                tracker.spawn(connection(stream, remote, ctx.clone(), shutdown.clone()));
            }
            Err(e) => {
                warn!(error = %e, "http: Accept error");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
    }
    drop(listener);
    tracker.close();
    tracker.wait().await;
    info!("HTTP: closing {local}");
}

async fn connection(
    stream: TcpStream,
    remote: SocketAddr,
    ctx: Arc<Context>,
    shutdown: CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    let remote = crate::go_addr(remote);
    let svc = service_fn(move |req| {
        let ctx = ctx.clone();
        let remote = remote.clone();
        async move { Ok::<_, Infallible>(respond(&ctx, req, &remote).await) }
    });
    let mut builder = http1::Builder::new();
    builder.title_case_headers(true);
    let conn = builder.serve_connection(TokioIo::new(stream), svc);
    let mut conn = std::pin::pin!(conn);
    let done = tokio::select! {
        res = conn.as_mut() => Some(res),
        _ = shutdown.cancelled() => None,
    };
    let res = match done {
        Some(res) => res,
        None => {
            conn.as_mut().graceful_shutdown();
            match tokio::time::timeout(DRAIN_TIMEOUT, conn.as_mut()).await {
                Ok(res) => res,
                Err(_) => return,
            }
        }
    };
    if let Err(e) = res {
        debug!(error = %e, "http connection error");
    }
}

/// One request → one response.
async fn respond(ctx: &Context, req: Request<Incoming>, remote: &str) -> Response<Body> {
    let start = Instant::now();
    let method = req.method().as_str().to_owned();
    let uri = req.uri().clone();
    // NSQ's handlers read the whole body (and ignore it); reading it also
    // keeps the connection reusable.
    let _ = axum::body::to_bytes(Body::new(req.into_body()), MAX_BODY).await;

    let Ok(path) = query::unescape_path(uri.path()) else {
        // Go's net/http rejects such a request line before routing.
        let mut resp = response(
            StatusCode::BAD_REQUEST,
            Some(TEXT),
            b"400 Bad Request".to_vec(),
        );
        resp.headers_mut()
            .insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
        return resp;
    };
    let query = uri.query();
    let request_uri = uri.path_and_query().map(|pq| pq.as_str()).unwrap_or("/");
    let log = |status: u16| {
        info!(
            "{status} {method} {request_uri} ({remote}) {:?}",
            start.elapsed()
        )
    };

    match router::route(&method, &path) {
        Routed::Handle(endpoint) => {
            let handled = catch_unwind(AssertUnwindSafe(|| {
                let mut db = ctx.db();
                api::handle(endpoint, query, &mut db, Instant::now(), &ctx.clock)
            }));
            let reply = handled.unwrap_or_else(|_| {
                error!("panic in HTTP handler");
                Reply::Error {
                    status: 500,
                    message: "INTERNAL_ERROR",
                }
            });
            if !matches!(endpoint, router::Endpoint::Pprof(_)) {
                log(reply.status());
            }
            reply_response(reply)
        }
        Routed::Redirect { status, path } => redirect(status, path, query),
        Routed::Options { allow } => {
            let mut resp = response(StatusCode::OK, None, Vec::new());
            set_allow(&mut resp, &allow);
            resp
        }
        Routed::MethodNotAllowed { allow } => {
            log(405);
            let mut resp = reply_response(Reply::Error {
                status: 405,
                message: "METHOD_NOT_ALLOWED",
            });
            set_allow(&mut resp, &allow);
            resp
        }
        Routed::NotFound => {
            log(404);
            reply_response(Reply::Error {
                status: 404,
                message: "NOT_FOUND",
            })
        }
    }
}

/// Applies NSQ's "V1" / "PlainText" conventions to a reply.
fn reply_response(reply: Reply) -> Response<Body> {
    let status = StatusCode::from_u16(reply.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let (mut resp, v1) = match reply {
        Reply::Plain(text) => (
            response(status, Some(TEXT), text.as_bytes().to_vec()),
            false,
        ),
        Reply::Empty => (response(status, None, Vec::new()), true),
        Reply::Json(body) => (response(status, Some(JSON), body), true),
        Reply::Error { message, .. } => (
            response(status, Some(JSON), Reply::error_body(message)),
            true,
        ),
        Reply::Raw {
            content_type, body, ..
        } => (response(status, Some(content_type), body), false),
    };
    if v1 {
        resp.headers_mut()
            .insert(NSQ_CONTENT_TYPE, HeaderValue::from_static(NSQ_V1));
    }
    resp
}

fn response(
    status: StatusCode,
    content_type: Option<&'static str>,
    body: Vec<u8>,
) -> Response<Body> {
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = status;
    if let Some(ct) = content_type {
        resp.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static(ct));
    }
    resp
}

fn set_allow(resp: &mut Response<Body>, allow: &str) {
    if let Ok(v) = HeaderValue::from_str(allow) {
        resp.headers_mut().insert(ALLOW, v);
    }
}

/// Go's `http.Redirect` for a request URL whose path became `path` (always a
/// clean, ASCII route path, so no escaping applies); the query is kept.
fn redirect(status: u16, path: &str, query: Option<&str>) -> Response<Body> {
    let url = match query {
        Some(q) => format!("{path}?{q}"),
        None => path.to_owned(),
    };
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::MOVED_PERMANENTLY);
    // Go writes a short HTML body only for GET, i.e. only for 301 here.
    let mut resp = if code == StatusCode::MOVED_PERMANENTLY {
        let body = format!(
            "<a href=\"{}\">Moved Permanently</a>.\n\n",
            html_escape(&url)
        );
        response(code, Some(HTML), body.into_bytes())
    } else {
        response(code, None, Vec::new())
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
        let r = redirect(301, "/lookup", Some("topic=a&b=<c>"));
        assert_eq!(r.status(), 301);
        assert_eq!(r.headers()[LOCATION], "/lookup?topic=a&b=<c>");
        assert_eq!(r.headers()[CONTENT_TYPE], HTML);
        let r = redirect(307, "/topic/create", None);
        assert_eq!(r.headers()[LOCATION], "/topic/create");
        assert!(r.headers().get(CONTENT_TYPE).is_none());
        assert_eq!(
            html_escape("/a?b=1&c='\"<>"),
            "/a?b=1&amp;c=&#39;&#34;&lt;&gt;"
        );
    }

    #[test]
    fn v1_headers() {
        let r = reply_response(Reply::Empty);
        assert_eq!(r.headers()[NSQ_CONTENT_TYPE], NSQ_V1);
        assert!(r.headers().get(CONTENT_TYPE).is_none());
        let r = reply_response(Reply::Plain("OK"));
        assert!(r.headers().get(NSQ_CONTENT_TYPE).is_none());
        assert_eq!(r.headers()[CONTENT_TYPE], TEXT);
        let r = reply_response(Reply::Error {
            status: 404,
            message: "NOT_FOUND",
        });
        assert_eq!(r.status(), 404);
        assert_eq!(r.headers()[CONTENT_TYPE], JSON);
        assert_eq!(r.headers()[NSQ_CONTENT_TYPE], NSQ_V1);
    }
}

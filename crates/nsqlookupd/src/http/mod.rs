//! nsqlookupd's HTTP API on `nsq_http`'s server: the route table (NSQ's
//! routes, in its registration order) and one axum handler that runs an
//! endpoint of [`api`] and answers with NSQ's "V1" or "PlainText"
//! convention (spec nsqlookupd.md §3).
//!
//! Owns: which path is which endpoint, and turning an [`api::Reply`] into a
//! response. Never: endpoint logic ([`api`]), routing rules, sockets or
//! headers' spelling (`nsq_http`).

pub(crate) mod api;

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::response::Response;
use axum::routing::{on, MethodFilter, MethodRouter};
use axum::Extension;
use hyper::StatusCode;
use nsq_http::guard::{Access, Grant};
use nsq_http::reply;
use nsq_http::router::Routes;
use nsq_http::server::Site;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use crate::context::Context;
use api::Reply;

/// Request bodies are read (NSQ's handlers read them) up to this size; no
/// nsqlookupd endpoint uses a body.
const MAX_BODY: usize = 1024 * 1024;

/// What a route runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Ping,
    Info,
    Debug,
    Lookup,
    Topics,
    Channels,
    Nodes,
    TopicCreate,
    TopicDelete,
    TopicTombstone,
    ChannelCreate,
    ChannelDelete,
    /// Prometheus text exposition (nsq-rs addition; Go nsqlookupd has none).
    Metrics,
    /// Go's `net/http/pprof`; the name is the profile (`""` for the index).
    Pprof(&'static str),
}

/// nsqlookupd's routes, in NSQ's registration order.
fn routes() -> Routes<Endpoint> {
    use Endpoint::*;
    Routes::new()
        .add("GET", "/ping", Ping)
        .add("GET", "/info", Info)
        .add("GET", "/debug", Debug)
        .add("GET", "/lookup", Lookup)
        .add("GET", "/topics", Topics)
        .add("GET", "/channels", Channels)
        .add("GET", "/nodes", Nodes)
        .add("POST", "/topic/create", TopicCreate)
        .add("POST", "/topic/delete", TopicDelete)
        .add("POST", "/channel/create", ChannelCreate)
        .add("POST", "/channel/delete", ChannelDelete)
        .add("POST", "/topic/tombstone", TopicTombstone)
        .add("GET", "/metrics", Metrics)
        .add("GET", "/debug/pprof", Pprof(""))
        .add("GET", "/debug/pprof/cmdline", Pprof("cmdline"))
        .add("GET", "/debug/pprof/symbol", Pprof("symbol"))
        .add("POST", "/debug/pprof/symbol", Pprof("symbol"))
        .add("GET", "/debug/pprof/profile", Pprof("profile"))
        .add("GET", "/debug/pprof/heap", Pprof("heap"))
        .add("GET", "/debug/pprof/goroutine", Pprof("goroutine"))
        .add("GET", "/debug/pprof/block", Pprof("block"))
        .add("GET", "/debug/pprof/threadcreate", Pprof("threadcreate"))
}

/// What each endpoint needs under `--http-auth-required`.
fn access(e: Endpoint) -> Access {
    use Endpoint::*;
    match e {
        Ping => Access::Open,
        Info | Topics | Nodes | Metrics => Access::Known,
        Lookup | Channels => Access::SeeTopic,
        TopicCreate | TopicDelete | TopicTombstone => Access::Admin { channel: false },
        ChannelCreate | ChannelDelete => Access::Admin { channel: true },
        Debug | Pprof(_) => Access::NodeAdmin,
    }
}

/// Every endpoint has the same handler: run it against the database.
fn handler(endpoint: Endpoint, method: MethodFilter, ctx: Arc<Context>) -> MethodRouter {
    on(
        method,
        move |State(ctx): State<Arc<Context>>,
              RawQuery(query): RawQuery,
              grant: Option<Extension<Grant>>,
              body: Body| async move {
            // NSQ's handlers read the whole body (and ignore it); reading it
            // also keeps the connection reusable.
            let _ = axum::body::to_bytes(body, MAX_BODY).await;
            let reply = {
                let mut db = ctx.db();
                api::handle(
                    endpoint,
                    query.as_deref(),
                    &mut db,
                    Instant::now(),
                    &ctx.clock,
                    api::Sees(grant.as_ref().map(|g| &g.0)),
                )
            };
            response(reply)
        },
    )
    .with_state(ctx)
}

/// Accepts HTTP clients until `shutdown`, then waits for open connections to
/// finish their current request.
pub(crate) async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    ctx: Arc<Context>,
    shutdown: CancellationToken,
) {
    let local = listener
        .local_addr()
        .map(nsq_http::server::go_addr)
        .unwrap_or_default();
    let proto = if tls.is_some() { "HTTPS" } else { "HTTP" };
    info!("{proto}: listening on {local}");
    let site = Site::new(routes(), |e, m| handler(e, m, ctx.clone()));
    let site = match &ctx.http_guard {
        Some(guard) => site.guard(guard.clone(), access),
        None => site,
    };
    nsq_http::server::serve(listener, tls, Arc::new(site), shutdown).await;
    info!("{proto}: closing {local}");
}

/// Applies NSQ's "V1" / "PlainText" conventions to a reply.
fn response(reply: Reply) -> Response {
    let status = StatusCode::from_u16(reply.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    match reply {
        Reply::Plain(text) => reply::plain(status, reply::TEXT, text),
        Reply::Empty => reply::v1_text(""),
        Reply::Json(body) => reply::v1_json_bytes(status, body),
        Reply::Error { message, .. } => {
            if status == StatusCode::INTERNAL_SERVER_ERROR {
                error!(message, "HTTP handler failed");
            }
            reply::v1_error(status, message)
        }
        Reply::Raw {
            content_type, body, ..
        } => reply::plain(status, content_type, body),
    }
}

//! nsqd's HTTP API: publishing, stats, topic/channel administration and
//! runtime config, with nsqd's status codes, bodies and headers, served by
//! `nsq_http`'s server (httprouter's routing rules, HTTP and HTTPS on one
//! path, Go's header case).
//!
//! The same routes are served on `--http-address` and, with TLS configured,
//! on `--https-address`; with `--tls-required=true` the plain listener
//! answers every request `403 TLS_REQUIRED` naming the HTTPS port.

// Handlers return a ready error `Response` as their `Err`, as axum's do;
// its size does not matter on this path.
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::{on, MethodFilter, MethodRouter};
use axum::Extension;
use nsq_http::guard::{Access, Grant};
use nsq_http::router::Routes;
use nsq_http::server::{reply, Site};
use nsq_protocol::stats::NsqdInfo;
use tokio::net::TcpListener;

mod admin;
mod config;
mod members;
mod publish;
mod replay;

use crate::server::nsqd::NsqdInner;
use crate::server::stats::{self, StatsQuery};

pub(crate) use reply::{v1_error as err, v1_json_bytes as json_response, v1_text as ok_text};

/// What a route runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Endpoint {
    Ping,
    Info,
    Pub,
    Mpub,
    Stats,
    Topic(admin::Action),
    Channel(admin::Action),
    /// nsq-rs addition: a channel's `max_attempts` and dead-letter topic
    /// (`GET` shows, `POST` sets).
    ChannelConfig {
        set: bool,
    },
    /// nsq-rs addition: a topic's `mem_queue_size` and depth limit.
    TopicConfig {
        set: bool,
    },
    /// nsq-rs addition: a replicated topic's channel moved back to replay
    /// what its topic retains (or on, to skip).
    ChannelReset,
    ConfigGet,
    ConfigPut,
    /// nsq-rs addition: Prometheus text format (Go nsqd: 404).
    Metrics,
    /// nsq-rs addition, only on a member of a replication cluster (404
    /// otherwise, as NSQ): the cluster as this member sees it.
    Replication,
    /// nsq-rs addition, only on a member: a member added to (`add`) or
    /// removed from the cluster online.
    ReplicationMembers {
        add: bool,
    },
}

fn routes(replication: bool) -> Routes<Endpoint> {
    use admin::Action::*;
    use Endpoint::*;
    let routes = Routes::new()
        .add("GET", "/ping", Ping)
        .add("GET", "/info", Info)
        .add("POST", "/pub", Pub)
        .add("POST", "/mpub", Mpub)
        // simplequeue-compatible aliases (dropped by NSQ 1.x, kept by nsq-rs
        // for users migrating from simplequeue/pubsub)
        .add("POST", "/put", Pub)
        .add("POST", "/mput", Mpub)
        .add("GET", "/stats", Stats)
        .add("POST", "/topic/create", Topic(Create))
        .add("POST", "/topic/delete", Topic(Delete))
        .add("POST", "/topic/empty", Topic(Empty))
        .add("POST", "/topic/pause", Topic(Pause))
        .add("POST", "/topic/unpause", Topic(Unpause))
        .add("POST", "/channel/create", Channel(Create))
        .add("POST", "/channel/delete", Channel(Delete))
        .add("POST", "/channel/empty", Channel(Empty))
        .add("POST", "/channel/pause", Channel(Pause))
        .add("POST", "/channel/unpause", Channel(Unpause))
        // nsq-rs addition: replay of a replicated topic's channel
        .add("POST", "/channel/reset", ChannelReset)
        // nsq-rs addition: per-channel max_attempts and dead-letter topic
        .add("GET", "/channel/config", ChannelConfig { set: false })
        .add("POST", "/channel/config", ChannelConfig { set: true })
        // nsq-rs addition: per-topic mem_queue_size and depth limit
        .add("GET", "/topic/config", TopicConfig { set: false })
        .add("POST", "/topic/config", TopicConfig { set: true })
        .add("GET", "/config/:opt", ConfigGet)
        .add("PUT", "/config/:opt", ConfigPut)
        .add("GET", "/metrics", Metrics);
    if replication {
        routes
            .add("GET", "/replication", Replication)
            .add(
                "POST",
                "/replication/members/add",
                ReplicationMembers { add: true },
            )
            .add(
                "POST",
                "/replication/members/remove",
                ReplicationMembers { add: false },
            )
    } else {
        routes
    }
}

/// What each endpoint needs under `--http-auth-required`.
fn access(e: Endpoint) -> Access {
    use admin::Action::*;
    match e {
        Endpoint::Ping => Access::Open,
        Endpoint::Info
        | Endpoint::Stats
        | Endpoint::Metrics
        | Endpoint::ConfigGet
        | Endpoint::Replication => Access::Known,
        Endpoint::Pub | Endpoint::Mpub => Access::Publish,
        Endpoint::Topic(Create | Delete | Empty | Pause | Unpause) => {
            Access::Admin { channel: false }
        }
        Endpoint::Channel(Create | Delete | Empty | Pause | Unpause) => {
            Access::Admin { channel: true }
        }
        Endpoint::ChannelConfig { set: false } => Access::SeeTopic,
        Endpoint::ChannelConfig { set: true } | Endpoint::ChannelReset => {
            Access::Admin { channel: true }
        }
        Endpoint::TopicConfig { set: false } => Access::SeeTopic,
        Endpoint::TopicConfig { set: true } => Access::Admin { channel: false },
        Endpoint::ConfigPut | Endpoint::ReplicationMembers { .. } => Access::NodeAdmin,
    }
}

type Nsqd = State<Arc<NsqdInner>>;

fn query(q: Option<String>) -> Query {
    Query::parse(q.as_deref().unwrap_or(""))
}

/// The axum handler of each endpoint.
fn handler(e: Endpoint, m: MethodFilter, nsqd: Arc<NsqdInner>) -> MethodRouter {
    let r = match e {
        Endpoint::Ping => on(m, |State(n): Nsqd| async move { ping(&n) }),
        Endpoint::Info => on(m, |State(n): Nsqd| async move { info(&n) }),
        Endpoint::Pub => on(
            m,
            |State(n): Nsqd, RawQuery(q): RawQuery, h: HeaderMap, body: Body| async move {
                publish::publish(&n, &query(q), &h, body).await
            },
        ),
        Endpoint::Mpub => on(
            m,
            |State(n): Nsqd, RawQuery(q): RawQuery, h: HeaderMap, body: Body| async move {
                publish::mpublish(&n, &query(q), &h, body).await
            },
        ),
        Endpoint::Stats => on(
            m,
            |State(n): Nsqd, RawQuery(q): RawQuery, g: Option<Extension<Grant>>| async move {
                stats_handler(&n, &query(q), g.map(|g| g.0))
            },
        ),
        Endpoint::Topic(a) => on(m, move |State(n): Nsqd, RawQuery(q): RawQuery| async move {
            admin::topic_action(&n, a, &query(q)).await
        }),
        Endpoint::Channel(a) => on(m, move |State(n): Nsqd, RawQuery(q): RawQuery| async move {
            admin::channel_action(&n, a, &query(q)).await
        }),
        Endpoint::ChannelConfig { set } => {
            on(m, move |State(n): Nsqd, RawQuery(q): RawQuery| async move {
                admin::channel_config(&n, &query(q), set).await
            })
        }
        Endpoint::TopicConfig { set } => {
            on(m, move |State(n): Nsqd, RawQuery(q): RawQuery| async move {
                admin::topic_config(&n, &query(q), set).await
            })
        }
        Endpoint::ChannelReset => on(m, move |State(n): Nsqd, RawQuery(q): RawQuery| async move {
            replay::channel_reset(&n, &query(q)).await
        }),
        Endpoint::ConfigGet => on(m, |State(n): Nsqd, Path(opt): Path<String>| async move {
            config::get(&n, &opt)
        }),
        Endpoint::ConfigPut => on(
            m,
            |State(n): Nsqd, Path(opt): Path<String>, body: Body| async move {
                config::put(&n, &opt, body).await
            },
        ),
        Endpoint::Metrics => on(
            m,
            |State(n): Nsqd, g: Option<Extension<Grant>>| async move {
                metrics_handler(&n, g.map(|g| g.0))
            },
        ),
        Endpoint::ReplicationMembers { add } => {
            on(m, move |State(n): Nsqd, RawQuery(q): RawQuery| async move {
                members::change(&n, add, &query(q)).await
            })
        }
        Endpoint::Replication => on(m, |State(n): Nsqd| async move {
            match n.cluster().stats() {
                Some(s) => reply::v1_json(&s),
                None => err(StatusCode::NOT_FOUND, "NOT_FOUND"),
            }
        }),
    };
    r.with_state(nsqd)
}

/// Serves the API on `listener` (HTTPS with `tls`) until nsqd shuts down.
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    nsqd: Arc<NsqdInner>,
) {
    let plain_refused = tls.is_none() && nsqd.opts().tls_required == crate::options::TLS_REQUIRED;
    let site = if plain_refused {
        let n = nsqd.clone();
        Site::pass_through(
            axum::Router::new().fallback(move || async move { tls_required_response(&n) }),
        )
    } else {
        let site = Site::new(routes(nsqd.opts().replication_enabled()), |e, m| {
            handler(e, m, nsqd.clone())
        });
        match &nsqd.http_guard {
            Some(guard) => site.guard(guard.clone(), access),
            None => site,
        }
    };
    let site = Arc::new(site.log_level(tracing::Level::DEBUG));
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let name = if acceptor.is_some() { "HTTPS" } else { "HTTP" };
    nsq_http::server::serve(listener, acceptor, site, nsqd.ctx.cancel.clone()).await;
    tracing::info!("{name}: closing listener");
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
        reply::plain(StatusCode::OK, reply::TEXT, "OK")
    } else {
        reply::plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            reply::TEXT,
            nsqd.health(),
        )
    }
}

fn info(nsqd: &NsqdInner) -> Response {
    let o = nsqd.opts();
    let tcp = nsqd.tcp_port.load(std::sync::atomic::Ordering::Relaxed) as i64;
    let http = nsqd.http_port.load(std::sync::atomic::Ordering::Relaxed) as i64;
    let info = NsqdInfo {
        version: nsq_protocol::VERSION.into(),
        broadcast_address: o.broadcast_address.clone(),
        hostname: nsq_cli::hostname().unwrap_or_default(),
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
    reply::v1_json(&info)
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

fn stats_handler(nsqd: &Arc<NsqdInner>, q: &Query, grant: Option<Grant>) -> Response {
    let flag = |k: &str| !matches!(q.get(k), Some("false") | Some("0"));
    // an empty filter is no filter, as in nsqd
    let filter = |k: &str| q.get(k).filter(|v| !v.is_empty());
    let sq = StatsQuery {
        topic: filter("topic"),
        channel: filter("channel"),
        include_clients: flag("include_clients"),
        include_mem: flag("include_mem"),
    };
    let mut s = stats::collect(nsqd, &sq);
    if let Some(g) = grant {
        stats::retain_visible(&mut s, &g);
    }
    if q.get("format") == Some("json") {
        reply::v1_json(&s)
    } else {
        ok_text(stats::text(&s))
    }
}

fn metrics_handler(nsqd: &Arc<NsqdInner>, grant: Option<Grant>) -> Response {
    let sq = StatsQuery {
        topic: None,
        channel: None,
        include_clients: false,
        include_mem: true,
    };
    let mut s = stats::collect(nsqd, &sq);
    if let Some(g) = grant {
        stats::retain_visible(&mut s, &g);
    }
    let body = crate::server::metrics::render(&s, nsqd.clients().len());
    reply::plain(StatusCode::OK, crate::server::metrics::CONTENT_TYPE, body)
}

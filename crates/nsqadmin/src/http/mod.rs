//! nsqadmin's HTTP server on `nsq_http`'s: the route table ([`routes`]),
//! one axum handler per endpoint, answers in nsq's "V1" conventions, each
//! request logged like nsqadmin (`200 GET /api/topics (ip:port) 1.2ms`) and
//! every response compressed when the client accepts it.
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

use axum::body::Body;
use axum::extract::{ConnectInfo, FromRequest, Path, Request, State};
use axum::response::Response;
use axum::routing::{on, MethodFilter, MethodRouter};
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::header::{HeaderMap, HeaderValue, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, VARY};
use hyper::{Method, StatusCode};
use nsq_http::reply;
use nsq_http::server::Site;
use serde::Serialize;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::shared::Shared;
use routes::Endpoint;

/// Request bodies are read up to this many bytes (`/config` PUT allows 1 MiB).
const MAX_BODY: usize = (1 << 20) + 1;

pub const JSON_CT: &str = reply::JSON;
pub const TEXT_CT: &str = reply::TEXT;

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

#[axum::async_trait]
impl<S: Send + Sync> FromRequest<S> for Req {
    type Rejection = Response;

    async fn from_request(req: Request, _: &S) -> Result<Req, Response> {
        let (parts, body) = req.into_parts();
        let remote = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0)
            .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
        let body = read_body(body)
            .await
            .map_err(|e| v1_error(500, &format!("failed to read request body - {e}")))?;
        Ok(Req {
            method: parts.method,
            path: parts.uri.path().to_string(),
            query: parts.uri.query().unwrap_or("").to_string(),
            headers: parts.headers,
            remote,
            body,
        })
    }
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

fn status(code: u16) -> StatusCode {
    StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// 200 with a JSON body, V1 headers.
pub fn v1_json<T: Serialize + ?Sized>(v: &T) -> Response {
    reply::v1_json(v)
}

/// 200 with a raw string body (how nsq answers string-valued results).
pub fn v1_text(s: &str) -> Response {
    reply::v1_text(s)
}

pub fn v1_error(code: u16, text: &str) -> Response {
    reply::v1_error(status(code), text)
}

/// A body without nsq's headers (`/ping`, static assets).
pub fn plain(code: u16, content_type: &str, body: impl Into<Bytes>) -> Response {
    reply::plain(status(code), content_type, Body::from(body.into()))
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
pub async fn serve(shared: Arc<Shared>, listener: TcpListener, shutdown: CancellationToken) {
    let opts = shared.options();
    let routes = routes::routes(&opts.base_path, opts.proxy_graphite);
    let site = Site::new(routes, |e, m| handler(e, m, shared.clone())).finish(Box::new(
        |headers: HeaderMap, resp: Response| {
            Box::pin(async move {
                let accept = headers
                    .get("accept-encoding")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("");
                match compress::negotiate(accept) {
                    Some(enc) => compress_response(resp, enc).await,
                    None => resp,
                }
            })
        },
    ));
    nsq_http::server::serve(listener, None, Arc::new(site), shutdown).await;
}

type Shared_ = State<Arc<Shared>>;

fn answer(r: ApiResult) -> Response {
    r.unwrap_or_else(|e| v1_error(e.code, &e.text))
}

/// The axum handler of each endpoint.
fn handler(e: Endpoint, m: MethodFilter, shared: Arc<Shared>) -> MethodRouter {
    use Endpoint::*;
    type One = Path<String>;
    type Two = Path<(String, String)>;
    let r = match e {
        Index => on(m, |State(s): Shared_, req: Req| async move {
            ui::index(&s, &req)
        }),
        Ping => on(m, || async { plain(200, TEXT_CT, "OK") }),
        Static => on(m, |State(s): Shared_, Path(a): One| async move {
            ui::asset(&s, &a)
        }),
        Render => on(m, |State(s): Shared_, req: Req| async move {
            ui::render_proxy(&s, &req).await
        }),
        Topics => on(m, |State(s): Shared_, req: Req| async move {
            answer(api::topics(&s, &req).await)
        }),
        Topic => on(m, |State(s): Shared_, Path(t): One| async move {
            answer(api::topic(&s, &t).await)
        }),
        Channel => on(m, |State(s): Shared_, Path((t, c)): Two| async move {
            answer(api::channel(&s, &t, &c).await)
        }),
        Nodes => on(m, |State(s): Shared_| async move {
            answer(api::nodes(&s).await)
        }),
        Node => on(m, |State(s): Shared_, Path(n): One| async move {
            answer(api::node(&s, &n).await)
        }),
        Counter => on(m, |State(s): Shared_| async move {
            answer(api::counter(&s).await)
        }),
        Replication => on(m, |State(s): Shared_| async move {
            answer(api::replication(&s).await)
        }),
        ReplicationAction => on(m, |State(s): Shared_, req: Req| async move {
            answer(actions::replication_action(&s, &req).await)
        }),
        Graphite => on(m, |State(s): Shared_, req: Req| async move {
            answer(api::graphite(&s, &req).await)
        }),
        History => on(m, |State(s): Shared_, req: Req| async move {
            answer(api::history(&s, &req))
        }),
        HistoryTopic => on(m, |State(s): Shared_, Path(t): One, req: Req| async move {
            answer(api::history_topic(&s, &req, &t))
        }),
        HistoryChannel => on(
            m,
            |State(s): Shared_, Path((t, c)): Two, req: Req| async move {
                answer(api::history_channel(&s, &req, &t, &c))
            },
        ),
        CreateTopicChannel => on(m, |State(s): Shared_, req: Req| async move {
            answer(actions::create_topic_channel(&s, &req).await)
        }),
        TopicAction => on(m, |State(s): Shared_, Path(t): One, req: Req| async move {
            answer(actions::topic_channel_action(&s, &req, &t, "").await)
        }),
        ChannelAction => on(
            m,
            |State(s): Shared_, Path((t, c)): Two, req: Req| async move {
                answer(actions::topic_channel_action(&s, &req, &t, &c).await)
            },
        ),
        TombstoneNode => on(m, |State(s): Shared_, Path(n): One, req: Req| async move {
            answer(actions::tombstone_node(&s, &req, &n).await)
        }),
        DeleteTopic => on(m, |State(s): Shared_, Path(t): One, req: Req| async move {
            answer(actions::delete_topic(&s, &req, &t).await)
        }),
        DeleteChannel => on(
            m,
            |State(s): Shared_, Path((t, c)): Two, req: Req| async move {
                answer(actions::delete_channel(&s, &req, &t, &c).await)
            },
        ),
        Config => on(
            m,
            |State(s): Shared_, Path(opt): One, req: Req| async move {
                answer(config::handle(&s, &req, &opt))
            },
        ),
    };
    r.with_state(shared)
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

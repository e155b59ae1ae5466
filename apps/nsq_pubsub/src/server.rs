//! The HTTP server: accepts connections, routes `/sub`, `/stats` and
//! `/ping`, and shuts down in order.
//!
//! Each connection is served by hyper over a [`Wire`], whose ledger the
//! `/sub` handler shares, so a subscriber's messages are finished exactly
//! when its connection flushes them (see [`crate::wire`]).
//!
//! Shutdown: stop accepting; end every stream (each requeues what it has
//! not written, the rest is finished by the final flush); give connections
//! [`DRAIN_TIMEOUT`] to complete, then drop them (requeueing what they still
//! hold); wait for every consumer to stop (CLS, all in-flight answered).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::stats::Table;
use crate::subscriber::{self, Delivery, Setup, Stream, SubscribeError};
use crate::wire::{Ledger, Wire};

/// How long connections get to finish their responses at shutdown.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Where subscribers' consumers connect, and how many messages each may hold.
#[derive(Debug, Clone)]
pub struct Options {
    pub nsqd_tcp_addresses: Vec<String>,
    pub lookupd_http_addresses: Vec<String>,
    pub max_in_flight: i64,
    /// For the lookupds' HTTP API (`--http-secret`; empty: none).
    pub http_secret: String,
}

/// Serves `listener` until `shutdown` is cancelled, then drains (see the module docs).
pub async fn run(listener: TcpListener, opts: Options, shutdown: CancellationToken) {
    let setup = Arc::new(Setup {
        nsqd_tcp_addresses: opts.nsqd_tcp_addresses,
        lookupd_http_addresses: opts.lookupd_http_addresses,
        max_in_flight: opts.max_in_flight,
        http_secret: opts.http_secret,
        table: Arc::new(Table::default()),
        stops: TaskTracker::new(),
        shutdown: shutdown.clone(),
    });
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((sock, peer)) => {
                    conns.spawn(serve_connection(setup.clone(), sock, peer, shutdown.clone()));
                }
                Err(e) => {
                    // e.g. out of file descriptors: back off rather than spin.
                    tracing::error!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(listener);
    tracing::info!(connections = conns.len(), "closing HTTP connections");
    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
        while conns.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            connections = conns.len(),
            "HTTP clients not reading, dropping their connections"
        );
        conns.abort_all();
        while conns.join_next().await.is_some() {}
    }
    setup.stops.close();
    tracing::info!(consumers = setup.stops.len(), "stopping consumers");
    setup.stops.wait().await;
}

/// One HTTP connection, until it closes or the server drains it.
async fn serve_connection(
    setup: Arc<Setup>,
    sock: TcpStream,
    peer: SocketAddr,
    shutdown: CancellationToken,
) {
    let _ = sock.set_nodelay(true);
    let ledger: Arc<Ledger<Delivery>> = Arc::new(Ledger::default());
    let io = TokioIo::new(Wire::new(sock, ledger.clone()));
    let remote = peer.to_string();
    let service = hyper::service::service_fn(move |req| {
        let (setup, ledger, remote) = (setup.clone(), ledger.clone(), remote.clone());
        async move { Ok::<_, Infallible>(route(&setup, ledger, &remote, req).await) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .serve_connection(io, service);
    tokio::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        _ = shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        tracing::debug!(%peer, error = %e, "HTTP connection ended");
    }
}

async fn route(
    setup: &Setup,
    ledger: Arc<Ledger<Delivery>>,
    remote: &str,
    req: Request<Incoming>,
) -> Response<ResponseBody> {
    let path = req.uri().path();
    if !matches!(path, "/ping" | "/stats" | "/sub") {
        return text(StatusCode::NOT_FOUND, "NOT_FOUND\n");
    }
    if req.method() != Method::GET {
        return text(StatusCode::METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED\n");
    }
    match path {
        "/ping" => text(StatusCode::OK, "OK"),
        "/stats" => {
            let body = serde_json::to_vec(&setup.table.stats()).unwrap_or_default();
            respond(
                StatusCode::OK,
                "application/json; charset=utf-8",
                ResponseBody::Full(Some(Bytes::from(body))),
            )
        }
        _ => sub(setup, ledger, remote, req.uri().query().unwrap_or("")).await,
    }
}

/// `GET /sub?topic=T[&channel=C]`: 200 and a stream once subscribed.
async fn sub(
    setup: &Setup,
    ledger: Arc<Ledger<Delivery>>,
    remote: &str,
    query: &str,
) -> Response<ResponseBody> {
    let (topic, channel) = match subscriber::sub_args(query) {
        Ok(tc) => tc,
        Err(e) => return text(StatusCode::BAD_REQUEST, &format!("{}\n", e.code())),
    };
    if setup.shutdown.is_cancelled() {
        return text(StatusCode::SERVICE_UNAVAILABLE, "EXITING\n");
    }
    match subscriber::subscribe(setup, &topic, &channel, remote, ledger).await {
        Ok(stream) => respond(
            StatusCode::OK,
            "text/plain; charset=utf-8",
            ResponseBody::Stream(Box::new(stream)),
        ),
        Err(SubscribeError::Consumer(e)) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("INTERNAL_ERROR {e}\n"),
        ),
        Err(SubscribeError::Connect(e)) => {
            text(StatusCode::BAD_GATEWAY, &format!("NSQD_UNAVAILABLE {e}\n"))
        }
    }
}

fn text(status: StatusCode, body: &str) -> Response<ResponseBody> {
    respond(
        status,
        "text/plain; charset=utf-8",
        ResponseBody::Full(Some(Bytes::copy_from_slice(body.as_bytes()))),
    )
}

fn respond(
    status: StatusCode,
    content_type: &'static str,
    body: ResponseBody,
) -> Response<ResponseBody> {
    let mut r = Response::new(body);
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// A whole body (with a Content-Length) or a subscriber's stream (chunked).
pub enum ResponseBody {
    Full(Option<Bytes>),
    Stream(Box<Stream>),
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            ResponseBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            ResponseBody::Stream(s) => Pin::new(&mut **s).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ResponseBody::Full(b) => b.is_none(),
            ResponseBody::Stream(s) => s.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ResponseBody::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            ResponseBody::Stream(s) => s.size_hint(),
        }
    }
}

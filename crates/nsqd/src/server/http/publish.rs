//! `/pub` and `/mpub` (and simplequeue's `/put`, `/mput`): nsqd's size
//! checks in nsqd's order, then the topic's publish (a replicated topic's
//! through its Raft group). A replication member not caught up since it
//! started creates no topic: 503 `REPLICATION_CATCHING_UP`.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;
use nsq_protocol::command::parse_mpub_body;
use nsq_protocol::mpub_text::split_mpub_text;
use nsq_protocol::names::is_valid_topic_name;

use super::{err, ok_text, read_limited, Query};
use crate::server::backend::Ticket;
use crate::server::cluster::Refused;
use crate::server::nsqd::{NoTopic, NsqdInner};
use crate::server::topic::{PutError, Topic};

fn content_length(h: &HeaderMap) -> Option<i64> {
    h.get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

/// The `topic` parameter for /pub, /mpub and /topic/*.
fn topic_param<'a>(q: &'a Query, invalid: &str) -> Result<&'a str, Response> {
    let t = q
        .get("topic")
        .ok_or_else(|| err(StatusCode::BAD_REQUEST, "MISSING_ARG_TOPIC"))?;
    if !is_valid_topic_name(t) {
        return Err(err(StatusCode::BAD_REQUEST, invalid));
    }
    Ok(t)
}

pub(super) async fn publish(
    nsqd: &Arc<NsqdInner>,
    q: &Query,
    h: &HeaderMap,
    body: Body,
) -> Response {
    let max = nsqd.opts().max_msg_size;
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
    let topic = match nsqd.topic_to_publish(name) {
        Ok(t) => t,
        Err(NoTopic::Exiting) => return err(StatusCode::SERVICE_UNAVAILABLE, "EXITING"),
        Err(NoTopic::CatchingUp) => {
            return err(StatusCode::SERVICE_UNAVAILABLE, "REPLICATION_CATCHING_UP")
        }
    };
    let defer = match q.get("defer") {
        None => None,
        Some(d) => match d.parse::<i64>() {
            Ok(ms) if ms >= 0 && ms <= nsqd.opts().max_defer_timeout().as_millis() as i64 => {
                Some(Duration::from_millis(ms as u64))
            }
            _ => return err(StatusCode::BAD_REQUEST, "INVALID_DEFER"),
        },
    };
    if topic.replicas().is_some() {
        return replicated(nsqd, &topic, vec![body], defer).await;
    }
    match topic.publish(vec![body], defer) {
        Ok(tickets) => durable_ok(tickets).await,
        Err(e) => put_error(&e),
    }
}

pub(super) async fn mpublish(
    nsqd: &Arc<NsqdInner>,
    q: &Query,
    h: &HeaderMap,
    body: Body,
) -> Response {
    let max_body = nsqd.opts().max_body_size;
    if content_length(h).is_some_and(|l| l > max_body) {
        return err(StatusCode::PAYLOAD_TOO_LARGE, "BODY_TOO_BIG");
    }
    let name = match topic_param(q, "INVALID_TOPIC") {
        Ok(t) => t,
        Err(r) => return r,
    };
    let topic = match nsqd.topic_to_publish(name) {
        Ok(t) => t,
        Err(NoTopic::Exiting) => return err(StatusCode::SERVICE_UNAVAILABLE, "EXITING"),
        Err(NoTopic::CatchingUp) => {
            return err(StatusCode::SERVICE_UNAVAILABLE, "REPLICATION_CATCHING_UP")
        }
    };
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
        match split_mpub_text(body, nsqd.opts().max_msg_size, max_body) {
            Ok(b) => b,
            Err(e) => return err(StatusCode::PAYLOAD_TOO_LARGE, e.http_code()),
        }
    };
    if bodies.is_empty() {
        return ok_text("OK");
    }
    if topic.replicas().is_some() {
        return replicated(nsqd, &topic, bodies, None).await;
    }
    match topic.publish(bodies, None) {
        Ok(tickets) => durable_ok(tickets).await,
        Err(e) => put_error(&e),
    }
}

/// A replicated topic's publish, committed by its cluster: `OK` once its
/// Raft group committed the batch (a majority has it on disk), else a 503
/// naming why (`REPLICATION_NO_LEADER`, `REPLICATION_TIMEOUT`,
/// `REPLICATION_FAILED`, `REPLICATION_NOT_ENABLED`). The limits of this
/// member's topic and channels are checked before it is proposed.
async fn replicated(
    nsqd: &NsqdInner,
    topic: &Topic,
    bodies: Vec<Bytes>,
    defer: Option<Duration>,
) -> Response {
    let commit = match nsqd.cluster().publish(topic, bodies, defer) {
        Ok(c) => c,
        Err(e) => return put_error(&e),
    };
    match commit.await {
        Ok(()) => ok_text("OK"),
        // refused by the group's leader, which counts the group's depth
        Err(Refused::Full(why)) => {
            tracing::debug!(error = %why, "publish refused");
            err(StatusCode::SERVICE_UNAVAILABLE, "MAX_DEPTH_REACHED")
        }
        Err(e) => err(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    }
}

/// nsqd's 503 `EXITING` for a publish that failed; a `reject` limit's
/// refusal (nsq-rs, opt-in) is a 503 too, `MAX_DEPTH_REACHED`: nothing of
/// the request was published. A `defer` that reaches the topic's
/// `max_age` (nsq-rs, opt-in) is a 400, `DEFER_PAST_MAX_AGE`.
fn put_error(e: &PutError) -> Response {
    match e {
        PutError::Full(f) => {
            tracing::debug!(error = %f, "publish refused");
            err(StatusCode::SERVICE_UNAVAILABLE, "MAX_DEPTH_REACHED")
        }
        PutError::DeferPastMaxAge(_) => err(StatusCode::BAD_REQUEST, "DEFER_PAST_MAX_AGE"),
        _ => err(StatusCode::SERVICE_UNAVAILABLE, "EXITING"),
    }
}

/// `OK`, once every copy written to a disk queue is durable (the tickets
/// come only with `--sync-every=1`); a 500 if the fsync failed (the
/// messages were discarded and will never be delivered).
async fn durable_ok(tickets: Vec<Ticket>) -> Response {
    for t in &tickets {
        t.request();
    }
    for t in &tickets {
        if let Err(e) = t.durable().await {
            tracing::error!(error = %e, "publish not durable");
            return err(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR");
        }
    }
    ok_text("OK")
}

//! Retention and replay over HTTP (nsq-rs; docs/features/replay.md):
//! `POST /channel/reset?topic=T&channel=C&to=earliest|latest|<RFC 3339>`,
//! a `/channel/create`'s `start=` and a `/topic/config`'s `retention=`.
//! Owns the requests' checks that need no cluster (the names, which topic
//! may be replayed at all) and the answers; the cluster checks the values
//! and commits (`crate::server::cluster`). Only a replicated topic keeps
//! its finished messages, in its group's log: an unreplicated topic's
//! channel is refused, saying why and what to do instead.

use axum::http::StatusCode;
use axum::response::Response;
use nsq_protocol::names::{is_ephemeral, is_valid_channel_name, is_valid_topic_name};

use super::{err, json_response, ok_text, Query};
use crate::server::cluster::{Change, Refused, Reset, ResetAnswer};
use crate::server::nsqd::NsqdInner;

/// The 400 of a replay asked of a topic that keeps nothing to replay.
fn not_replicated(topic: &str) -> Response {
    err(
        StatusCode::BAD_REQUEST,
        &format!(
            "REPLAY_NOT_REPLICATED topic {topic} is not replicated: like NSQ it deletes a message once every channel finished it, so there is nothing to replay. Publish to a replicated topic with a retention instead (POST /topic/create?topic=NAME&replicas=3, then POST /topic/config?topic=NAME&retention=24h)"
        ),
    )
}

fn refused(r: Refused) -> Response {
    match r {
        Refused::Invalid(why) => err(StatusCode::BAD_REQUEST, &why),
        Refused::NotFound(what) => err(StatusCode::NOT_FOUND, what),
        Refused::Unavailable(why) | Refused::Full(why) => {
            err(StatusCode::SERVICE_UNAVAILABLE, &why)
        }
    }
}

/// The topic and channel named, checked: (topic, channel) or the 4xx.
fn names(q: &Query) -> Result<(&str, &str), Response> {
    let topic = q
        .get("topic")
        .ok_or_else(|| err(StatusCode::BAD_REQUEST, "MISSING_ARG_TOPIC"))?;
    if !is_valid_topic_name(topic) {
        return Err(err(StatusCode::BAD_REQUEST, "INVALID_ARG_TOPIC"));
    }
    let channel = q
        .get("channel")
        .ok_or_else(|| err(StatusCode::BAD_REQUEST, "MISSING_ARG_CHANNEL"))?;
    if !is_valid_channel_name(channel) {
        return Err(err(StatusCode::BAD_REQUEST, "INVALID_ARG_CHANNEL"));
    }
    Ok((topic, channel))
}

/// Whether the topic's channel may be replayed: (replicated, not
/// `#ephemeral`), else the 400 (or 404 for no topic).
fn replayable(nsqd: &NsqdInner, topic: &str, channel: &str) -> Result<(), Response> {
    let t = nsqd
        .get_topic(topic)
        .ok_or_else(|| err(StatusCode::NOT_FOUND, "TOPIC_NOT_FOUND"))?;
    if t.replicas().is_none() {
        return Err(not_replicated(topic));
    }
    if is_ephemeral(channel) {
        return Err(err(
            StatusCode::BAD_REQUEST,
            "REPLAY_EPHEMERAL an #ephemeral channel is this nsqd's alone, not its group's: it cannot be replayed",
        ));
    }
    Ok(())
}

/// `POST /channel/reset`: the channel's position moves to `to`, committed
/// through its topic's group; answered with where it went, as JSON.
pub(super) async fn channel_reset(nsqd: &NsqdInner, q: &Query) -> Response {
    let (topic, channel) = match names(q) {
        Ok(n) => n,
        Err(r) => return r,
    };
    let Some(to) = q.get("to") else {
        return err(StatusCode::BAD_REQUEST, "MISSING_ARG_TO");
    };
    if let Err(r) = replayable(nsqd, topic, channel) {
        return r;
    }
    if nsqd
        .get_topic(topic)
        .is_some_and(|t| t.get_channel(channel).is_none())
    {
        return err(StatusCode::NOT_FOUND, "CHANNEL_NOT_FOUND");
    }
    let reset = Reset {
        topic: topic.to_string(),
        channel: channel.to_string(),
        to: to.to_string(),
        only_new: false,
    };
    match nsqd.cluster().reset(reset).await {
        Ok(a) => answer(&a),
        Err(r) => refused(r),
    }
}

/// The JSON of a committed reset: the first message's publish time the
/// channel goes back to (null: none, it gets what is published next), and
/// whether the time asked was before the oldest retained message.
fn answer(a: &ResetAnswer) -> Response {
    let from = a.from_ns.map(|ns| {
        let secs = ns.div_euclid(1_000_000_000);
        nsq_protocol::duration::rfc3339(secs)
    });
    let mut body = serde_json::json!({
        "from": from,
        "before_retention": a.before_retention,
    });
    if a.before_retention {
        body["message"] = serde_json::Value::String(format!(
            "the time asked is before the oldest retained message (published {}): replaying from it, the earliest",
            from.as_deref().unwrap_or("-")
        ));
    }
    json_response(StatusCode::OK, body.to_string().into_bytes())
}

/// A `/channel/create`'s `start=` on a replicated topic: the channel is
/// made at that position (one that exists is left as it is). None when
/// there is none or it is `latest` (NSQ's create, the caller's).
pub(super) async fn create_start(nsqd: &NsqdInner, q: &Query) -> Option<Response> {
    let start = q.get("start").filter(|s| *s != "latest")?;
    let (topic, channel) = match names(q) {
        Ok(n) => n,
        Err(r) => return Some(r),
    };
    if let Err(r) = replayable(nsqd, topic, channel) {
        return Some(r);
    }
    let reset = Reset {
        topic: topic.to_string(),
        channel: channel.to_string(),
        to: start.to_string(),
        only_new: true,
    };
    Some(match nsqd.cluster().reset(reset).await {
        Ok(_) => ok_text(""),
        Err(r) => refused(r),
    })
}

/// A `/topic/config`'s `retention=`: committed through the replicated
/// topic's group before anything else of the request changes (refused, it
/// changes nothing). Ok when there is none.
pub(super) async fn set_retention(nsqd: &NsqdInner, q: &Query) -> Result<(), Response> {
    let (Some(retention), Some(topic)) = (q.get("retention"), q.get("topic")) else {
        return Ok(());
    };
    let Some(t) = nsqd.get_topic(topic) else {
        return Err(err(StatusCode::NOT_FOUND, "TOPIC_NOT_FOUND"));
    };
    if t.replicas().is_none() {
        return Err(err(
            StatusCode::BAD_REQUEST,
            &format!("RETENTION_NOT_REPLICATED topic {topic} is not replicated: only a replicated topic's group log can keep finished messages (POST /topic/create?topic=NAME&replicas=3)"),
        ));
    }
    let change = Change::Retention {
        topic: topic.to_string(),
        retention: retention.to_string(),
    };
    nsqd.cluster().change(change).await.map_err(refused)
}

/// What `/topic/config` shows of a replicated topic's retention (`0`:
/// none); None for an unreplicated topic.
pub(super) fn retention_shown(nsqd: &NsqdInner, topic: &str) -> Option<String> {
    let t = nsqd.get_topic(topic)?;
    let replicas = t.replicas()?;
    let stats = nsqd.cluster().topic_stats(topic, replicas);
    Some(
        stats
            .and_then(|s| s.retention)
            .unwrap_or_else(|| "0".into()),
    )
}

//! `/topic/*` and `/channel/*`: create, delete, empty, pause, unpause;
//! the changes `nsqd.dat` records are persisted before the answer. A
//! replicated topic is created, deleted, paused, unpaused and emptied by
//! its cluster (`crate::server::cluster`: through its Raft group), and so
//! are its channels (all but `#ephemeral` ones) and the depth limits of
//! both (`/topic/config`, `/channel/config`: the group's, shown with the
//! depth the group counts).

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::Response;
use nsq_protocol::names::{is_valid_channel_name, is_valid_topic_name};

use super::{err, json_response, ok_text, Query};
use crate::core::channel::replicates;
use crate::core::{Limit, Policy};
pub(super) use crate::server::cluster::Action;
use crate::server::cluster::{Change, GroupLimit, Refused};
use crate::server::nsqd::NsqdInner;
use crate::server::topic::Topic;

fn persist(nsqd: &NsqdInner) -> Result<(), Response> {
    nsqd.persist_metadata().map_err(|e| {
        tracing::error!(error = %e, "failed to persist metadata");
        err(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR")
    })
}

/// A change of a replicated topic or its channels (or the creation of
/// one), carried out by the cluster: committed to the topic's Raft group
/// (through its leader when this member does not lead it), which every
/// member applies. An empty 200 once committed (and, unless the 5 s ran
/// out first, applied here); a 400 naming what is wrong with the request
/// (nothing changed), a 404 for a channel that is not here, a 503 naming
/// why the group could not commit it (no leader, no commit in time).
async fn replicated(nsqd: &NsqdInner, change: Change) -> Response {
    match nsqd.cluster().change(change).await {
        Ok(()) => ok_text(""),
        Err(Refused::Invalid(why)) => err(StatusCode::BAD_REQUEST, &why),
        Err(Refused::NotFound(what)) => err(StatusCode::NOT_FOUND, what),
        Err(Refused::Unavailable(why) | Refused::Full(why)) => {
            err(StatusCode::SERVICE_UNAVAILABLE, &why)
        }
    }
}

/// An empty 200 once `nsqd.dat` has the change, else the 500.
fn persisted(nsqd: &NsqdInner) -> Response {
    persist(nsqd).map_or_else(|r| r, |()| ok_text(""))
}

pub(super) async fn topic_action(nsqd: &Arc<NsqdInner>, action: Action, q: &Query) -> Response {
    let Some(name) = q.get("topic") else {
        return err(StatusCode::BAD_REQUEST, "MISSING_ARG_TOPIC");
    };
    if matches!(action, Action::Create | Action::Empty) && !is_valid_topic_name(name) {
        return err(StatusCode::BAD_REQUEST, "INVALID_TOPIC");
    }
    if action == Action::Create {
        if let Some(replicas) = q.get("replicas") {
            let change = Change::CreateTopic {
                topic: name.to_string(),
                replicas: replicas.to_string(),
            };
            return replicated(nsqd, change).await;
        }
        return match nsqd.get_or_create_topic(name) {
            Some(_) => ok_text(""),
            None => err(StatusCode::SERVICE_UNAVAILABLE, "EXITING"),
        };
    }
    if action == Action::Delete {
        if nsqd.get_topic(name).is_some_and(|t| t.replicas().is_some()) {
            let change = Change::Topic {
                topic: name.to_string(),
                action,
            };
            return replicated(nsqd, change).await;
        }
        if !nsqd.delete_topic(name) {
            return err(StatusCode::NOT_FOUND, "TOPIC_NOT_FOUND");
        }
        return persisted(nsqd);
    }
    let Some(topic) = nsqd.get_topic(name) else {
        return err(StatusCode::NOT_FOUND, "TOPIC_NOT_FOUND");
    };
    if topic.replicas().is_some() {
        let change = Change::Topic {
            topic: name.to_string(),
            action,
        };
        return replicated(nsqd, change).await;
    }
    match action {
        Action::Empty => match topic.empty() {
            Ok(()) => ok_text(""),
            Err(_) => err(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR"),
        },
        _ => {
            topic.set_paused(action == Action::Pause);
            persisted(nsqd)
        }
    }
}

pub(super) async fn channel_action(nsqd: &Arc<NsqdInner>, action: Action, q: &Query) -> Response {
    let Some(tname) = q.get("topic") else {
        return err(StatusCode::BAD_REQUEST, "MISSING_ARG_TOPIC");
    };
    if !is_valid_topic_name(tname) {
        return err(StatusCode::BAD_REQUEST, "INVALID_ARG_TOPIC");
    }
    let Some(cname) = q.get("channel") else {
        return err(StatusCode::BAD_REQUEST, "MISSING_ARG_CHANNEL");
    };
    if !is_valid_channel_name(cname) {
        return err(StatusCode::BAD_REQUEST, "INVALID_ARG_CHANNEL");
    }
    let Some(topic) = nsqd.get_topic(tname) else {
        return err(StatusCode::NOT_FOUND, "TOPIC_NOT_FOUND");
    };
    if action == Action::Create {
        if let Some(r) = super::replay::create_start(nsqd, q).await {
            return r;
        }
    }
    if replicates(topic.replicas(), cname) {
        let change = Change::Channel {
            topic: tname.to_string(),
            channel: cname.to_string(),
            action,
        };
        return replicated(nsqd, change).await;
    }
    if action == Action::Create {
        return match topic.get_or_create_channel(cname) {
            Ok(_) => ok_text(""),
            Err(_) => err(StatusCode::SERVICE_UNAVAILABLE, "EXITING"),
        };
    }
    if action == Action::Delete {
        if !nsqd.delete_channel(&topic, cname) {
            return err(StatusCode::NOT_FOUND, "CHANNEL_NOT_FOUND");
        }
        return persisted(nsqd);
    }
    let Some(ch) = topic.get_channel(cname) else {
        return err(StatusCode::NOT_FOUND, "CHANNEL_NOT_FOUND");
    };
    match action {
        Action::Empty => match ch.empty() {
            Ok(()) => ok_text(""),
            Err(_) => err(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR"),
        },
        _ => {
            ch.set_paused(action == Action::Pause);
            persisted(nsqd)
        }
    }
}

/// `max_age` (nsq-rs expiry) from a `/topic/config` or `/channel/config`
/// POST, in Go's duration syntax (`90s`, `1h`; `0`: never, which for a
/// channel means none of its own); empty: back to the default (the flag's
/// for a topic, its topic's for a channel); absent: `current` kept.
fn max_age_param(q: &Query, current: Option<Duration>) -> Result<Option<Duration>, Response> {
    match q.get("max_age") {
        None => Ok(current),
        Some("") => Ok(None),
        Some(v) => match nsq_protocol::duration::parse_signed(v) {
            Ok(ns) if ns >= 0 => Ok(Some(Duration::from_nanos(ns as u64))),
            _ => Err(err(StatusCode::BAD_REQUEST, "INVALID_ARG_MAX_AGE")),
        },
    }
}

/// `max_depth` and `max_depth_policy` from a `/topic/config` or
/// `/channel/config` POST, each absent one kept from `current`; every
/// value is checked before anything is changed.
fn limit_param(q: &Query, current: Limit) -> Result<Limit, Response> {
    let max_depth = match q.get("max_depth") {
        None => current.max_depth,
        Some(v) => v
            .parse::<u64>()
            .map_err(|_| err(StatusCode::BAD_REQUEST, "INVALID_ARG_MAX_DEPTH"))?,
    };
    let policy = match q.get("max_depth_policy") {
        None => current.policy,
        Some(v) => v
            .parse::<Policy>()
            .map_err(|_| err(StatusCode::BAD_REQUEST, "INVALID_ARG_MAX_DEPTH_POLICY"))?,
    };
    Ok(Limit { max_depth, policy })
}

/// `/topic/config` (nsq-rs): `GET` shows a topic's `mem_queue_size` (its
/// own, or `--mem-queue-size`'s), `max_depth` (0: unlimited) and
/// `max_depth_policy`; `POST` sets any of them (`mem_queue_size=` empty:
/// back to the flag's) and persists them in `nsqd.dat`. The topic's
/// `mem_queue_size` is its channels' too. A replicated topic's
/// `retention` (nsq-rs replay) is its group's, committed first
/// (`replay.rs`) and shown with the rest.
pub(super) async fn topic_config(nsqd: &Arc<NsqdInner>, q: &Query, set: bool) -> Response {
    let Some(name) = q.get("topic") else {
        return err(StatusCode::BAD_REQUEST, "MISSING_ARG_TOPIC");
    };
    if !is_valid_topic_name(name) {
        return err(StatusCode::BAD_REQUEST, "INVALID_ARG_TOPIC");
    }
    let Some(topic) = nsqd.get_topic(name) else {
        return err(StatusCode::NOT_FOUND, "TOPIC_NOT_FOUND");
    };
    let group = group_limit(nsqd, &topic, None);
    if set {
        let limit = match limit_param(q, group.map_or(topic.limit(), |g| g.limit)) {
            Ok(l) => l,
            Err(r) => return r,
        };
        let mem_queue_size = match q.get("mem_queue_size") {
            None => topic.mem_queue_size(),
            Some("") => None,
            Some(v) => match v.parse::<usize>() {
                Ok(n) => Some(n),
                Err(_) => return err(StatusCode::BAD_REQUEST, "INVALID_ARG_MEM_QUEUE_SIZE"),
            },
        };
        let max_age = match max_age_param(q, topic.max_age().0) {
            Ok(m) => m,
            Err(r) => return r,
        };
        if let Err(r) = super::replay::set_retention(nsqd, q).await {
            return r;
        }
        let own = match topic.replicas() {
            Some(_) if changes_limit(q) => {
                let change = Change::Limit {
                    topic: name.to_string(),
                    channel: None,
                    limit,
                };
                if let Some(r) = replicated_limit(nsqd, change).await {
                    return r;
                }
                topic.limit()
            }
            Some(_) => topic.limit(),
            None => limit,
        };
        topic.configure(own, mem_queue_size);
        topic.set_max_age(max_age);
        if let Err(r) = persist(nsqd) {
            return r;
        }
    }
    let mut body = serde_json::json!({
        "mem_queue_size": topic.mem_queue_size().unwrap_or(nsqd.ctx.mem_queue_size()),
        "max_age": nsq_protocol::duration::format(topic.max_age().1),
    });
    limit_fields(&mut body, topic.limit(), group_limit(nsqd, &topic, None));
    if let Some(retention) = super::replay::retention_shown(nsqd, name) {
        body["retention"] = serde_json::Value::String(retention);
    }
    json_response(StatusCode::OK, body.to_string().into_bytes())
}

/// Whether a `/topic/config` or `/channel/config` POST sets the limit.
fn changes_limit(q: &Query) -> bool {
    q.get("max_depth").is_some() || q.get("max_depth_policy").is_some()
}

/// The group's limit of a replicated topic (`channel` None) or channel, as
/// this member applied it: None for an unreplicated one, and the default
/// (none) before the group set one or where this member does not hold the
/// group.
fn group_limit(nsqd: &NsqdInner, topic: &Topic, channel: Option<&str>) -> Option<GroupLimit> {
    let replicas = topic.replicas()?;
    Some(
        nsqd.cluster()
            .group_limit(&topic.name, replicas, channel)
            .unwrap_or_default(),
    )
}

/// A replicated topic's or channel's limit, committed through its group:
/// None once committed, else the answer (400 for a limit the group cannot
/// keep, 404, 503: [`replicated`]).
async fn replicated_limit(nsqd: &NsqdInner, change: Change) -> Option<Response> {
    let r = replicated(nsqd, change).await;
    (r.status() != StatusCode::OK).then_some(r)
}

/// `max_depth` and `max_depth_policy` of a config's answer: the group's
/// for a replicated topic or channel, with the depth it counts
/// (`group_depth`) and what it dropped (`group_dropped_count`).
fn limit_fields(body: &mut serde_json::Value, own: Limit, group: Option<GroupLimit>) {
    let limit = group.map_or(own, |g| g.limit);
    body["max_depth"] = limit.max_depth.into();
    body["max_depth_policy"] = limit.policy.as_str().into();
    if let Some(g) = group {
        body["group_depth"] = g.depth.into();
        body["group_dropped_count"] = g.dropped.into();
    }
}

/// `/channel/config` (nsq-rs): `GET` shows a channel's `max_attempts`,
/// dead-letter topic, `max_depth` (0: unlimited) and `max_depth_policy`;
/// `POST` with `max_attempts=N` (0: unlimited), `dead_letter_topic=T`
/// (empty: back to the default name), `max_depth=N` and/or
/// `max_depth_policy=reject|drop-oldest` sets them and persists them in
/// `nsqd.dat`.
pub(super) async fn channel_config(nsqd: &Arc<NsqdInner>, q: &Query, set: bool) -> Response {
    let Some(tname) = q.get("topic") else {
        return err(StatusCode::BAD_REQUEST, "MISSING_ARG_TOPIC");
    };
    if !is_valid_topic_name(tname) {
        return err(StatusCode::BAD_REQUEST, "INVALID_ARG_TOPIC");
    }
    let Some(cname) = q.get("channel") else {
        return err(StatusCode::BAD_REQUEST, "MISSING_ARG_CHANNEL");
    };
    if !is_valid_channel_name(cname) {
        return err(StatusCode::BAD_REQUEST, "INVALID_ARG_CHANNEL");
    }
    let Some(topic) = nsqd.get_topic(tname) else {
        return err(StatusCode::NOT_FOUND, "TOPIC_NOT_FOUND");
    };
    let Some(ch) = topic.get_channel(cname) else {
        return err(StatusCode::NOT_FOUND, "CHANNEL_NOT_FOUND");
    };
    let replicated = replicates(topic.replicas(), cname);
    if set {
        let max_attempts = match q.get("max_attempts") {
            None => ch.max_attempts(),
            Some(v) => match v.parse::<u16>() {
                Ok(n) => n,
                Err(_) => return err(StatusCode::BAD_REQUEST, "INVALID_ARG_MAX_ATTEMPTS"),
            },
        };
        let dead_letter_topic = match q.get("dead_letter_topic") {
            None => ch.settings().dead_letter_topic,
            Some("") => None,
            // its own topic would feed the poison messages back to the
            // channel that gave up on them
            Some(t) if !is_valid_topic_name(t) || t == tname => {
                return err(StatusCode::BAD_REQUEST, "INVALID_ARG_DEAD_LETTER_TOPIC")
            }
            Some(t) => Some(t.to_string()),
        };
        let group = group_limit(nsqd, &topic, Some(cname)).filter(|_| replicated);
        let limit = match limit_param(q, group.map_or(ch.limit(), |g| g.limit)) {
            Ok(l) => l,
            Err(r) => return r,
        };
        let max_age = match max_age_param(q, ch.own_max_age()) {
            Ok(m) => m,
            Err(r) => return r,
        };
        if replicated && changes_limit(q) {
            let change = Change::Limit {
                topic: tname.to_string(),
                channel: Some(cname.to_string()),
                limit,
            };
            if let Some(r) = replicated_limit(nsqd, change).await {
                return r;
            }
        }
        ch.configure(max_attempts, dead_letter_topic);
        ch.set_max_age(max_age);
        if !replicated {
            topic.set_channel_limit(&ch, limit);
        }
        if let Err(r) = persist(nsqd) {
            return r;
        }
    }
    let mut body = serde_json::json!({
        "max_attempts": ch.max_attempts(),
        "dead_letter_topic": ch.dead_letter_topic(),
        "max_age": nsq_protocol::duration::format(ch.max_age()),
    });
    let group = group_limit(nsqd, &topic, Some(cname)).filter(|_| replicated);
    limit_fields(&mut body, ch.limit(), group);
    json_response(StatusCode::OK, body.to_string().into_bytes())
}

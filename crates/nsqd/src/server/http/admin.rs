//! `/topic/*` and `/channel/*`: create, delete, empty, pause, unpause;
//! the changes `nsqd.dat` records are persisted before the answer. A
//! replicated topic is created, deleted, paused, unpaused and emptied
//! through its Raft group, and so are its channels (all but `#ephemeral`
//! ones).

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::Response;
use nsq_protocol::names::{is_ephemeral, is_valid_channel_name, is_valid_topic_name};

use super::{err, json_response, ok_text, Query};
use crate::core::channel_entries::replicates;
use crate::core::replicas::{check_replicas, CreateContext, Existing, Granted, ReplicasError};
use crate::core::replicated::Entry;
use crate::core::{Limit, Policy};
use crate::server::nsqd::NsqdInner;
use crate::server::replication::Committed;
use crate::server::topic::Topic;

/// What `/topic/<action>` and `/channel/<action>` do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Action {
    Create,
    Delete,
    Empty,
    Pause,
    Unpause,
}

fn persist(nsqd: &NsqdInner) -> Result<(), Response> {
    nsqd.persist_metadata().map_err(|e| {
        tracing::error!(error = %e, "failed to persist metadata");
        err(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR")
    })
}

/// `POST /topic/create?replicas=N`: checked against the cluster and the
/// topic (a 400 naming what is wrong, nothing changed), then committed to
/// the topic's Raft group as a `TopicCreate` (through its leader when this
/// member does not lead it); 200 once committed and applied here, 503 when
/// the group has no leader or does not commit within 5 s. Creating a
/// replicated topic again with the same replicas is a 200 that changes
/// nothing.
async fn create_replicated(nsqd: &NsqdInner, name: &str, replicas: &str) -> Response {
    let existing = |nsqd: &NsqdInner| match nsqd.get_topic(name) {
        None => Existing::None,
        Some(t) => t
            .replicas()
            .map_or(Existing::Unreplicated, Existing::Replicated),
    };
    let ctx = CreateContext {
        cluster_size: nsqd.replication().map(|r| r.cluster_size()),
        ephemeral: is_ephemeral(name),
        existing: existing(nsqd),
    };
    let n = match check_replicas(replicas, ctx) {
        Err(e) => return err(StatusCode::BAD_REQUEST, &e.to_string()),
        Ok(Granted::Exists(_)) => return ok_text(""),
        Ok(Granted::Propose(n)) => n,
    };
    let Some(r) = nsqd.replication() else {
        return err(StatusCode::BAD_REQUEST, "REPLICATION_NOT_ENABLED");
    };
    let entry = Entry::TopicCreate {
        topic: name.to_string(),
        replicas: n,
    };
    match r.commit(n, &entry).await {
        Err(e) => {
            tracing::warn!(topic = %name, error = e.detail(), "replicated topic not created");
            err(StatusCode::SERVICE_UNAVAILABLE, &e.to_string())
        }
        // Another create of the topic with other replicas was committed
        // first: that one stands (every member applies the first).
        Ok(Committed::Applied) if existing(nsqd) != Existing::Replicated(n) => err(
            StatusCode::BAD_REQUEST,
            &ReplicasError::ExistsWithOtherReplicas.to_string(),
        ),
        Ok(_) => ok_text(""),
    }
}

/// A change to a replicated topic or its channels, committed to the
/// topic's group (through its leader when this member does not lead it),
/// which every member applies: an empty 200 once committed (and, unless
/// the 5 s ran out first, applied here), 503 naming why when the group has
/// no leader or does not commit in time. `what` names the change in the
/// log.
async fn commit_change(nsqd: &NsqdInner, entry: Entry, what: &str) -> Response {
    let Some(r) = nsqd.replication() else {
        // kept from a start with the flags: nothing here can commit it
        return err(StatusCode::SERVICE_UNAVAILABLE, "REPLICATION_NOT_ENABLED");
    };
    let replicas = entry.topic().map_or(u8::MAX, |t| nsqd.replicas_of(t));
    match r.commit(replicas, &entry).await {
        Err(e) => {
            tracing::warn!(
                topic = entry.topic(),
                change = what,
                error = e.detail(),
                "replicated {what} not committed"
            );
            err(StatusCode::SERVICE_UNAVAILABLE, &e.to_string())
        }
        Ok(_) => ok_text(""),
    }
}

/// `POST /topic/delete` of a replicated topic: a `TopicDelete`, which every
/// member applies. Deleting it on one member only would leave the others
/// serving it, and its group would bring it back here at the next restart.
async fn delete_replicated(nsqd: &NsqdInner, name: &str) -> Response {
    let entry = Entry::TopicDelete {
        topic: name.to_string(),
    };
    commit_change(nsqd, entry, "topic delete").await
}

/// `/topic/pause`, `/topic/unpause` and `/topic/empty` of a replicated
/// topic: a `TopicPause` (every member pauses it, so a new leader still
/// does) or a `TopicEmpty` (the leader, which holds its messages, drops
/// them).
async fn topic_replicated(nsqd: &NsqdInner, name: &str, action: Action) -> Response {
    let topic = name.to_string();
    let (entry, what) = match action {
        Action::Empty => (Entry::TopicEmpty { topic }, "topic empty"),
        _ => (
            Entry::TopicPause {
                topic,
                paused: action == Action::Pause,
            },
            "topic pause",
        ),
    };
    commit_change(nsqd, entry, what).await
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
            return create_replicated(nsqd, name, replicas).await;
        }
        return match nsqd.get_or_create_topic(name) {
            Some(_) => ok_text(""),
            None => err(StatusCode::SERVICE_UNAVAILABLE, "EXITING"),
        };
    }
    if action == Action::Delete {
        if nsqd.get_topic(name).is_some_and(|t| t.replicas().is_some()) {
            return delete_replicated(nsqd, name).await;
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
        return topic_replicated(nsqd, name, action).await;
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

/// `/channel/<action>` on a channel of a replicated topic: its `Channel*`
/// entry, committed as [`commit_change`] does. A channel this member does
/// not have is a 404 as in NSQ, except for a create, and except on a
/// member outside the topic's group, which has none of its channels: the
/// group's members apply what they have.
async fn channel_replicated(
    nsqd: &NsqdInner,
    topic: &Topic,
    action: Action,
    channel: &str,
) -> Response {
    let Some(r) = nsqd.replication() else {
        // kept from a start with the flags: nothing here can commit it
        return err(StatusCode::SERVICE_UNAVAILABLE, "REPLICATION_NOT_ENABLED");
    };
    let group = r.group_of(&topic.name, topic.replicas().unwrap_or(u8::MAX));
    if action != Action::Create && topic.get_channel(channel).is_none() && r.votes_in(group) {
        return err(StatusCode::NOT_FOUND, "CHANNEL_NOT_FOUND");
    }
    let (t, c) = (topic.name.clone(), channel.to_string());
    let entry = match action {
        Action::Create => Entry::ChannelCreate {
            topic: t,
            channel: c,
        },
        Action::Delete => Entry::ChannelDelete {
            topic: t,
            channel: c,
        },
        Action::Pause | Action::Unpause => Entry::ChannelPause {
            topic: t,
            channel: c,
            paused: action == Action::Pause,
        },
        // What this member has applied is a floor of what the entry
        // empties: applied on the leader, it drops everything the channel
        // holds then, which is every publish committed before it.
        Action::Empty => Entry::ChannelEmpty {
            up_to: r.applied(group),
            topic: t,
            channel: c,
        },
    };
    let what = format!("{action:?} of channel {channel}");
    commit_change(nsqd, entry, &what).await
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
    if replicates(topic.replicas(), cname) {
        return channel_replicated(nsqd, &topic, action, cname).await;
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
/// `mem_queue_size` is its channels' too.
pub(super) fn topic_config(nsqd: &Arc<NsqdInner>, q: &Query, set: bool) -> Response {
    let Some(name) = q.get("topic") else {
        return err(StatusCode::BAD_REQUEST, "MISSING_ARG_TOPIC");
    };
    if !is_valid_topic_name(name) {
        return err(StatusCode::BAD_REQUEST, "INVALID_ARG_TOPIC");
    }
    let Some(topic) = nsqd.get_topic(name) else {
        return err(StatusCode::NOT_FOUND, "TOPIC_NOT_FOUND");
    };
    if set {
        let limit = match limit_param(q, topic.limit()) {
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
        topic.configure(limit, mem_queue_size);
        if let Err(r) = persist(nsqd) {
            return r;
        }
    }
    let limit = topic.limit();
    let body = serde_json::json!({
        "mem_queue_size": topic.mem_queue_size().unwrap_or(nsqd.ctx.mem_queue_size()),
        "max_depth": limit.max_depth,
        "max_depth_policy": limit.policy.as_str(),
    });
    json_response(StatusCode::OK, body.to_string().into_bytes())
}

/// `/channel/config` (nsq-rs): `GET` shows a channel's `max_attempts`,
/// dead-letter topic, `max_depth` (0: unlimited) and `max_depth_policy`;
/// `POST` with `max_attempts=N` (0: unlimited), `dead_letter_topic=T`
/// (empty: back to the default name), `max_depth=N` and/or
/// `max_depth_policy=reject|drop-oldest` sets them and persists them in
/// `nsqd.dat`.
pub(super) fn channel_config(nsqd: &Arc<NsqdInner>, q: &Query, set: bool) -> Response {
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
    if set {
        let max_attempts = match q.get("max_attempts") {
            None => ch.max_attempts(),
            Some(v) => match v.parse::<u16>() {
                Ok(n) => n,
                Err(_) => return err(StatusCode::BAD_REQUEST, "INVALID_ARG_MAX_ATTEMPTS"),
            },
        };
        let dead_letter_topic = match q.get("dead_letter_topic") {
            None => ch.settings().1,
            Some("") => None,
            // its own topic would feed the poison messages back to the
            // channel that gave up on them
            Some(t) if !is_valid_topic_name(t) || t == tname => {
                return err(StatusCode::BAD_REQUEST, "INVALID_ARG_DEAD_LETTER_TOPIC")
            }
            Some(t) => Some(t.to_string()),
        };
        let limit = match limit_param(q, ch.limit()) {
            Ok(l) => l,
            Err(r) => return r,
        };
        ch.configure(max_attempts, dead_letter_topic);
        topic.set_channel_limit(&ch, limit);
        if let Err(r) = persist(nsqd) {
            return r;
        }
    }
    let limit = ch.limit();
    let body = serde_json::json!({
        "max_attempts": ch.max_attempts(),
        "dead_letter_topic": ch.dead_letter_topic(),
        "max_depth": limit.max_depth,
        "max_depth_policy": limit.policy.as_str(),
    });
    json_response(StatusCode::OK, body.to_string().into_bytes())
}

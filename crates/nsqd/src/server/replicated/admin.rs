//! Administrative changes of replicated topics and their channels
//! (`/topic/*`, `/channel/*` on any member): each is checked here, then
//! committed to the topic's Raft group as its entry (through the leader
//! when this member does not lead it), which every member applies
//! (`apply.rs`). Answered once committed and, unless the 5 s ran out
//! first, applied here; refused with why the group could not (no leader,
//! no commit in time). Creating a replicated topic checks its `replicas=`
//! against the cluster and the topic first (`core::replicated::replicas`);
//! a depth limit, that the group can keep it (`progress_limits.rs`).

use nsq_protocol::names::is_ephemeral;

use super::groups::{CommitError, Committed, Groups};
use super::topics::replicas_of;
use crate::core::replicated::entry::Entry;
use crate::core::replicated::progress::limit_refusal;
use crate::core::replicated::replicas::{
    check_replicas, CreateContext, Existing, Granted, ReplicasError,
};
use crate::server::cluster::{Action, Change, Refused};
use crate::server::nsqd::NsqdInner;

/// The topic of that name here, as a `TopicCreate` sees it.
fn existing(nsqd: &NsqdInner, name: &str) -> Existing {
    match nsqd.get_topic(name) {
        None => Existing::None,
        Some(t) => t
            .replicas()
            .map_or(Existing::Unreplicated, Existing::Replicated),
    }
}

fn unavailable(e: CommitError) -> Refused {
    Refused::Unavailable(e.to_string())
}

/// Carries out `change` (see the module docs).
pub async fn change(nsqd: &NsqdInner, r: &Groups, change: Change) -> Result<(), Refused> {
    let (entry, what) = match change {
        Change::CreateTopic { topic, replicas } => {
            return create_topic(nsqd, r, &topic, &replicas).await
        }
        Change::Topic { topic, action } => topic_entry(topic, action),
        Change::Limit {
            topic,
            channel,
            limit,
        } => {
            if let Some(why) = limit_refusal(channel.as_deref(), &limit) {
                return Err(Refused::Invalid(why.to_string()));
            }
            let group = r.group_of(&topic, replicas_of(nsqd, &topic));
            let here = channel.as_deref().is_none_or(|c| {
                nsqd.get_topic(&topic)
                    .is_some_and(|t| t.get_channel(c).is_some())
            });
            if !here && r.votes_in(group) {
                return Err(Refused::NotFound("CHANNEL_NOT_FOUND"));
            }
            let what = format!("max_depth of {}", channel.as_deref().unwrap_or("the topic"));
            (
                Entry::Limit {
                    topic,
                    channel,
                    limit,
                },
                what,
            )
        }
        Change::Retention { topic, retention } => (
            super::reset::retention_entry(topic, &retention)?,
            "retention".to_string(),
        ),
        Change::Channel {
            topic,
            channel,
            action,
        } => {
            let group = r.group_of(&topic, replicas_of(nsqd, &topic));
            // A member outside the topic's group has none of its channels:
            // the group's members apply what they have.
            let here = nsqd
                .get_topic(&topic)
                .is_some_and(|t| t.get_channel(&channel).is_some());
            if action != Action::Create && !here && r.votes_in(group) {
                return Err(Refused::NotFound("CHANNEL_NOT_FOUND"));
            }
            let what = format!("{action:?} of channel {channel}");
            (channel_entry(r, group, topic, channel, action), what)
        }
    };
    let replicas = entry.topic().map_or(u8::MAX, |t| replicas_of(nsqd, t));
    match r.commit(replicas, &entry).await {
        Err(e) => {
            tracing::warn!(
                topic = entry.topic(),
                change = %what,
                error = e.detail(),
                "replicated {what} not committed"
            );
            Err(unavailable(e))
        }
        Ok(_) => Ok(()),
    }
}

/// `POST /topic/create?replicas=N`: checked against the cluster and the
/// topic (nothing changed when refused), then a `TopicCreate`. Creating a
/// replicated topic again with the same replicas changes nothing.
async fn create_topic(
    nsqd: &NsqdInner,
    r: &Groups,
    name: &str,
    replicas: &str,
) -> Result<(), Refused> {
    let ctx = CreateContext {
        cluster_size: Some(r.cluster_size()),
        ephemeral: is_ephemeral(name),
        existing: existing(nsqd, name),
    };
    let n = match check_replicas(replicas, ctx) {
        Err(e) => return Err(Refused::Invalid(e.to_string())),
        Ok(Granted::Exists(_)) => return Ok(()),
        Ok(Granted::Propose(n)) => n,
    };
    let entry = Entry::TopicCreate {
        topic: name.to_string(),
        replicas: n,
    };
    match r.commit(n, &entry).await {
        Err(e) => {
            tracing::warn!(topic = %name, error = e.detail(), "replicated topic not created");
            Err(unavailable(e))
        }
        // Another create of the topic with other replicas was committed
        // first: that one stands (every member applies the first).
        Ok(Committed::Applied) if existing(nsqd, name) != Existing::Replicated(n) => Err(
            Refused::Invalid(ReplicasError::ExistsWithOtherReplicas.to_string()),
        ),
        Ok(_) => Ok(()),
    }
}

/// A topic's change: a `TopicDelete` (deleting it on one member only would
/// leave the others serving it, and its group would bring it back here at
/// the next restart), a `TopicPause` (every member pauses it, so a new
/// leader still does) or a `TopicEmpty` (the leader, which holds its
/// messages, drops them).
fn topic_entry(topic: String, action: Action) -> (Entry, String) {
    let (entry, what) = match action {
        Action::Delete => (Entry::TopicDelete { topic }, "topic delete"),
        Action::Empty => (Entry::TopicEmpty { topic }, "topic empty"),
        _ => (
            Entry::TopicPause {
                topic,
                paused: action == Action::Pause,
            },
            "topic pause",
        ),
    };
    (entry, what.to_string())
}

/// A channel's change: its `Channel*` entry.
fn channel_entry(
    r: &Groups,
    group: nsq_replication::GroupId,
    topic: String,
    channel: String,
    action: Action,
) -> Entry {
    match action {
        Action::Create => Entry::ChannelCreate { topic, channel },
        Action::Delete => Entry::ChannelDelete { topic, channel },
        Action::Pause | Action::Unpause => Entry::ChannelPause {
            topic,
            channel,
            paused: action == Action::Pause,
        },
        // What this member has applied is a floor of what the entry
        // empties: applied on the leader, it drops everything the channel
        // holds then, which is every publish committed before it.
        Action::Empty => Entry::ChannelEmpty {
            up_to: r.applied(group),
            topic,
            channel,
        },
    }
}

//! Making and deleting replicated topics on this member as their group
//! decided: a committed `TopicCreate` or `TopicDelete` (the applier), or
//! a snapshot's image that lists or omits a topic (`snapshots.rs`). The
//! rule of what a create does to a topic already here is the core's
//! (`core::replicated::replicas::on_topic_create`); `nsqd.dat` has each
//! change before the caller goes on.

use nsq_protocol::names::{is_ephemeral, is_valid_topic_name};

use super::groups::Groups;
use super::leadership::reconsider;
use crate::core::replicated::replicas::{on_topic_create, Existing, OnCreate};
use crate::server::nsqd::NsqdInner;

/// A committed `TopicCreate`: the topic exists here, replicated, and
/// `nsqd.dat` says so.
pub fn topic_create(nsqd: &NsqdInner, r: &Groups, name: &str, replicas: u8) {
    // The proposer checked both; an entry that breaks them came from
    // elsewhere, and no topic is better than an invalid one.
    if !is_valid_topic_name(name) || is_ephemeral(name) || replicas == 0 {
        tracing::warn!(topic = %name, replicas, "REPLICATION: invalid TopicCreate skipped");
        return;
    }
    let existing = match nsqd.get_topic(name) {
        None => Existing::None,
        Some(t) => t
            .replicas()
            .map_or(Existing::Unreplicated, Existing::Replicated),
    };
    match on_topic_create(existing) {
        OnCreate::Keep => return,
        OnCreate::MakeReplicated => tracing::warn!(
            topic = %name,
            replicas,
            "REPLICATION: topic created here unreplicated becomes replicated (its group committed it)"
        ),
        OnCreate::Create => {}
    }
    // Created with its replicas already set, so it is never announced to
    // the lookupds as an unreplicated topic.
    let Some(topic) = nsqd.get_or_create_replicated_topic(name, replicas) else {
        return;
    };
    topic.set_replicas(replicas);
    // One made here unreplicated was registered and may have consumers:
    // only the group's leader keeps either.
    reconsider(nsqd, r, &topic);
    tracing::info!(topic = %name, replicas, "REPLICATION: replicated topic created");
    if let Err(e) = nsqd.persist_metadata() {
        tracing::error!(topic = %name, error = %e, "failed to persist metadata");
    }
}

/// A committed `TopicDelete`: the replicated topic is gone here, with its
/// channels and queues, and `nsqd.dat` says so. An unreplicated topic of
/// the same name is not the group's to delete.
pub fn topic_delete(nsqd: &NsqdInner, name: &str) {
    match nsqd.get_topic(name).map(|t| t.replicas().is_some()) {
        None => return,
        Some(false) => {
            tracing::warn!(topic = %name, "REPLICATION: TopicDelete of a topic unreplicated here; kept");
            return;
        }
        Some(true) => {}
    }
    if nsqd.delete_topic(name) {
        tracing::info!(topic = %name, "REPLICATION: replicated topic deleted");
        if let Err(e) = nsqd.persist_metadata() {
            tracing::error!(topic = %name, error = %e, "failed to persist metadata");
        }
    }
}

/// The replicas of topic `name` here, for placing its entries: the most
/// there are for a topic this member does not have replicated (its group
/// is then the whole cluster's, where its `TopicCreate` and `TopicDelete`
/// go).
pub fn replicas_of(nsqd: &NsqdInner, name: &str) -> u8 {
    nsqd.get_topic(name)
        .and_then(|t| t.replicas())
        .unwrap_or(u8::MAX)
}

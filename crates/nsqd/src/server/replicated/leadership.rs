//! Following the leadership of this member's Raft groups: one task per
//! group watches openraft's reports of its vote and state, and when this
//! member gains a group (`core::serving::change`) the group's replicated
//! topics are registered with the lookupds with their channels; when it
//! loses one they are unregistered and their consumers' connections
//! closed, so the clients look the topic up again and find the new leader.
//! A member that gains a group also commits a `Serving` entry to it with
//! the TCP address it serves consumers at, which the others name in a
//! SUB's refusal.
//! Never: the lookupd connections themselves (`lookup.rs` sends what
//! `Event::Reregister` asks, deciding from the leadership at that moment)
//! or the rules (`core::serving`). Without the replication flags nothing
//! here runs.

use std::sync::Arc;

use nsq_replication::{GroupId, NodeId};
use tokio::sync::watch;

use super::groups::{seen, Groups, ServerMetrics};
use crate::core::replicated::entry::Entry;
use crate::core::replicated::serving::{change, Change, Leader, Seen};
use crate::server::context::Event;
use crate::server::nsqd::NsqdInner;
use crate::server::topic::Topic;

/// Starts one watcher per group of the member (nothing without one).
pub fn spawn_watchers(nsqd: &Arc<NsqdInner>, r: &Arc<Groups>) {
    let me = r.node_id();
    for (group, rx) in r.leadership_watches() {
        nsqd.ctx
            .tasks
            .spawn(watch_group(nsqd.clone(), r.clone(), me, group, rx));
    }
}

async fn watch_group(
    nsqd: Arc<NsqdInner>,
    r: Arc<Groups>,
    me: NodeId,
    group: GroupId,
    mut rx: watch::Receiver<ServerMetrics>,
) {
    let cancel = nsqd.ctx.cancel.clone();
    let mut before: Option<Seen> = None;
    loop {
        let (now, leader) = seen(me, &rx.borrow_and_update());
        if let Some(c) = change(before, now) {
            let was_leading = before.is_some_and(|b| b.leads);
            on_change(&nsqd, &r, group, c, leader, was_leading);
        }
        before = Some(now);
        tokio::select! {
            _ = cancel.cancelled() => return,
            changed = rx.changed() => if changed.is_err() {
                // The group stopped (nsqd's shutdown stops the member last).
                return;
            },
        }
    }
}

fn on_change(
    nsqd: &Arc<NsqdInner>,
    r: &Arc<Groups>,
    group: GroupId,
    c: Change,
    leader: Leader,
    was_leading: bool,
) {
    if c == Change::Gained {
        nsqd.ctx
            .tasks
            .spawn(announce_serving(nsqd.clone(), r.clone(), group));
    }
    let topics = topics_of(nsqd, r, group);
    match c {
        Change::Gained => tracing::info!(
            group,
            topics = topics.len(),
            "REPLICATION: leading group {group}; registering its replicated topics"
        ),
        Change::Lost if was_leading => tracing::info!(
            group,
            topics = topics.len(),
            "REPLICATION: no longer leading group {group} (now {leader}); unregistering its replicated topics"
        ),
        Change::Lost => {}
    }
    for topic in topics {
        nsqd.ctx.emit(Event::Reregister(topic.name.clone()));
        if c == Change::Lost {
            close_consumers(&topic, leader);
        }
    }
}

/// How many times a member that gained a group tries to commit its
/// `Serving` entry while it still leads: a proposal can time out in the
/// first moments of a term; one that timed out may still commit, and a
/// second copy changes nothing.
const ANNOUNCE_ATTEMPTS: u32 = 3;

/// Commits a `Serving` entry to a group this member just gained: its
/// broadcast address and TCP port (what it registers with the lookupds),
/// so the other members name that address when they refuse a SUB to the
/// group's topics. Carried in the group's log rather than configured
/// because every member already knows its own, and the entry follows a
/// change of it with the next election.
async fn announce_serving(nsqd: Arc<NsqdInner>, r: Arc<Groups>, group: GroupId) {
    let entry = Entry::Serving {
        node: r.node_id(),
        address: nsqd.tcp_broadcast_address(),
    };
    for attempt in 1..=ANNOUNCE_ATTEMPTS {
        if !r.leads(group) || nsqd.ctx.cancel.is_cancelled() {
            return;
        }
        match r.commit_to(group, &entry).await {
            Ok(_) => return,
            Err(e) => tracing::warn!(
                group,
                attempt,
                error = e.detail(),
                "REPLICATION: where this member serves group {group} not committed"
            ),
        }
    }
}

/// A replicated topic whose serving here may have changed outside a change
/// of leadership (a topic made here unreplicated that its group's
/// `TopicCreate` made replicated): its registrations follow, and its
/// consumers are closed unless this member serves it.
pub fn reconsider(nsqd: &NsqdInner, r: &Groups, topic: &Topic) {
    nsqd.ctx.emit(Event::Reregister(topic.name.clone()));
    if !nsqd.registers(topic) {
        let replicas = topic.replicas().unwrap_or(u8::MAX);
        close_consumers(topic, r.topic_leader(&topic.name, replicas));
    }
}

/// This member's replicated topics placed in `group`.
pub(super) fn topics_of(nsqd: &NsqdInner, r: &Groups, group: GroupId) -> Vec<Arc<Topic>> {
    nsqd.topics()
        .into_iter()
        .filter(|t| {
            t.replicas()
                .is_some_and(|n| r.group_of(&t.name, n) == group)
        })
        .collect()
}

/// Closes the connection of every consumer of `topic` here: a member that
/// does not lead the topic's group delivers nothing of it, and a closed
/// connection is what makes go-nsq, pynsq and nsqjs look it up again.
fn close_consumers(topic: &Topic, leader: Leader) {
    for ch in topic.channels() {
        for c in ch.clients() {
            tracing::info!(
                client = %c.remote_addr,
                topic = %topic.name,
                channel = %ch.name,
                "REPLICATION: closing consumer {}: this member no longer leads topic {} (now {leader})",
                c.remote_addr,
                topic.name
            );
            c.closer.cancel();
        }
    }
}

//! The replication wing: nsqd as a member of a replication cluster
//! (nsq-rs, opt-in with `--replication-address`; docs/replication.md).
//! The plain server meets it only through its seam, `super::cluster`,
//! which [`Member`] implements; nothing of the plain server imports this
//! module but `super::Nsqd`'s start, which starts it.
//!
//! The rooms, each with what it owns:
//! - [`groups`]: the Raft groups this member votes in (openraft through
//!   `nsq_replication`): start, commit, who leads, reports, stop.
//! - `apply.rs`: one task per group applies its committed entries to the
//!   topics here, in log order; `topics.rs` makes and deletes replicated
//!   topics as those entries (or a snapshot) say.
//! - `leadership.rs`: follows who leads each group; the leader registers
//!   the group's topics with the lookupds, the others close their
//!   consumers.
//! - `redeliver.rs`: a member that gains a group puts back what the group
//!   has not finished; `store.rs`: past memory, a replicated topic's
//!   queues keep only places in the group's log (a backend [`Keeper`]).
//! - `finisher.rs`: the leader's FINs and REQ delays reach the group.
//! - `snapshots.rs`: snapshots of each group's progress, so its log is
//!   purged.
//! - `admin.rs`: `/topic/*` and `/channel/*` of replicated topics, as
//!   entries; `limits.rs`: the group's depth limits checked here, before a
//!   publish is proposed or a forwarded one written; `channels.rs`: a SUB's channel proposed to the group.
//! - `reset.rs`: retention and replay: a channel's reset resolved,
//!   committed and applied.
//!
//! The rules all of them follow are the core's
//! (`crate::core::replicated`); Raft itself is the replication crate's.
//!
//! [`Keeper`]: crate::server::backend::Keeper

mod admin;
mod apply;
mod channels;
mod finisher;
pub mod groups;
mod leadership;
mod limits;
mod members;
mod redeliver;
mod reset;
mod snapshots;
mod store;
mod topics;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use nsq_protocol::stats::{ReplicationStats, TopicReplication};

use self::channels::Proposals;
use self::groups::{CommitError, Groups, ReplicationError};
use self::store::LogSource;
use crate::core::replicated::entry::{Entry, Published};
use crate::core::replicated::progress::GroupLimit;
use crate::core::replicated::serving::{self, Leader};
use crate::server::backend::OpenKeeper;
use crate::server::channel::Channel;
use crate::server::cluster::{
    Change, Cluster, Commit, MemberChange, MembersCommit, Refused, Reset, ResetCommit,
};
use crate::server::nsqd::NsqdInner;
use crate::server::topic::{PutError, Topic};

/// This nsqd as a member of a replication cluster.
pub struct Member {
    groups: Arc<Groups>,
    /// The nsqd whose topics the groups' entries change; weak, since the
    /// nsqd holds its member.
    nsqd: Weak<NsqdInner>,
    proposals: Arc<Proposals>,
}

impl Member {
    /// Starts the member's groups with `nsqd`'s flags (see
    /// [`Groups::start`]); `about`: the TCP address this nsqd serves
    /// consumers at, told to its peers.
    pub async fn start(nsqd: &Arc<NsqdInner>, about: String) -> Result<Member, ReplicationError> {
        let groups = Groups::start(nsqd.opts(), &nsqd.data_dir(), about).await?;
        Ok(Member {
            groups: Arc::new(groups),
            nsqd: Arc::downgrade(nsqd),
            proposals: Arc::default(),
        })
    }

    /// Starts what follows the groups, once the topics `nsqd.dat` restores
    /// exist: the appliers (which apply the groups' entries again from
    /// their logs, then find the topics they made), the leadership
    /// watchers and the finisher.
    pub fn spawn(&self, nsqd: &Arc<NsqdInner>) {
        apply::spawn_appliers(nsqd, &self.groups);
        leadership::spawn_watchers(nsqd, &self.groups);
        finisher::spawn(nsqd, &self.groups);
    }
}

/// The `Publish` entry of a batch for a replicated topic, stamped here so
/// every replica holds the same ids and timestamps; refused whole, before
/// anything is proposed, by a `reject` limit of this member's topic or
/// channels, as an unreplicated publish is (a check, not a reservation:
/// publishes taken at the same moment may together pass the limit).
///
/// The `reject` limits that count are the group's (`progress_limits.rs`:
/// what the group holds unfinished, as this member applied it), so every
/// member, and a new leader, refuses at the same depth.
fn publish_entry(
    groups: &Groups,
    topic: &Topic,
    bodies: Vec<Bytes>,
    defer: Option<Duration>,
) -> Result<Entry, PutError> {
    if let Some(full) = topic.replicas().and_then(|replicas| {
        let progress = groups.progress(groups.group_of(&topic.name, replicas))?;
        limits::refusal(progress, &topic.name, bodies.len() as u64)
    }) {
        return Err(PutError::Full(full));
    }
    topic.admits(bodies.len(), defer)?;
    let defer_ms = defer.map_or(0, |d| d.as_millis() as u64);
    Ok(Entry::Publish {
        topic: topic.name.clone(),
        messages: topic
            .stamp(bodies)
            .into_iter()
            .map(|m| Published {
                id: m.id,
                timestamp: m.timestamp,
                defer_ms,
                body: m.body,
            })
            .collect(),
    })
}

impl Cluster for Member {
    fn caught_up(&self) -> bool {
        self.groups.caught_up()
    }

    /// A replicated topic's queues keep their overflow as places in its
    /// group's log, when this member votes in the group.
    fn keeper(&self, topic: &str, replicas: u8) -> Option<OpenKeeper> {
        let r = &self.groups;
        let group = r.group_of(topic, replicas);
        let source = LogSource::new(
            topic,
            r.progress(group)?.clone(),
            r.committed_log(group)?.clone(),
        );
        Some(source.opener())
    }

    fn registers(&self, topic: &str, replicas: u8) -> bool {
        serving::registers(Some(replicas), self.groups.topic_leader(topic, replicas))
    }

    fn sub_refusal(&self, topic: &str, replicas: u8) -> Option<String> {
        let r = &self.groups;
        let leader = r.topic_leader(topic, replicas);
        let address = match leader {
            Leader::Node(n) => r.serving_address(r.group_of(topic, replicas), n),
            _ => None,
        };
        serving::sub_refusal(topic, Some(replicas), leader, address.as_deref())
    }

    fn subscribed(&self, topic: &Topic, channel: &Channel) {
        let (Some(replicas), Some(nsqd)) = (topic.replicas(), self.nsqd.upgrade()) else {
            return;
        };
        channels::subscribed(
            &self.groups,
            &self.proposals,
            &nsqd.ctx,
            &topic.name,
            replicas,
            &channel.name,
        );
    }

    fn publish(
        &self,
        topic: &Topic,
        bodies: Vec<Bytes>,
        defer: Option<Duration>,
    ) -> Result<Commit, PutError> {
        let entry = publish_entry(&self.groups, topic, bodies, defer)?;
        let replicas = topic.replicas().unwrap_or(u8::MAX);
        let groups = self.groups.clone();
        Ok(Box::pin(async move {
            groups
                .commit(replicas, &entry)
                .await
                .map(drop)
                .map_err(|e| match e {
                    CommitError::Refused(why) => Refused::Full(why),
                    e => {
                        tracing::warn!(
                            topic = entry.topic(),
                            error = e.detail(),
                            "replicated publish failed"
                        );
                        Refused::Unavailable(e.to_string())
                    }
                })
        }))
    }

    fn change(&self, change: Change) -> Commit {
        let (groups, nsqd) = (self.groups.clone(), self.nsqd.clone());
        Box::pin(async move {
            let nsqd = nsqd
                .upgrade()
                .ok_or_else(|| Refused::Unavailable("EXITING".into()))?;
            admin::change(&nsqd, &groups, change).await
        })
    }

    fn reset(&self, reset: Reset) -> ResetCommit {
        let (groups, nsqd) = (self.groups.clone(), self.nsqd.clone());
        Box::pin(async move {
            let nsqd = nsqd
                .upgrade()
                .ok_or_else(|| Refused::Unavailable("EXITING".into()))?;
            reset::propose(&nsqd, &groups, reset).await
        })
    }

    fn topic_stats(&self, topic: &str, replicas: u8) -> Option<TopicReplication> {
        Some(self.groups.topic_stats(topic, replicas))
    }

    fn stats(&self) -> Option<ReplicationStats> {
        Some(self.groups.stats())
    }

    fn members(&self, change: MemberChange) -> MembersCommit {
        let groups = self.groups.clone();
        Box::pin(async move { members::change(&groups, change).await })
    }

    fn group_limit(&self, topic: &str, replicas: u8, channel: Option<&str>) -> Option<GroupLimit> {
        let progress = self
            .groups
            .progress(self.groups.group_of(topic, replicas))?;
        let p = progress.lock();
        p.topic(topic)?.group_limit(channel)
    }

    fn shutdown(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(self.groups.shutdown())
    }
}

//! The one seam between NSQ's path and replicated topics (nsq-rs, opt-in;
//! docs/replication.md). A topic whose `replicas()` is set is replicated:
//! the plain server hands every decision about it that NSQ does not make
//! to the nsqd's [`Cluster`] — where its queues keep what memory does not
//! hold, whether it is registered and served here, how a publish or an
//! administrative change of it is committed, what `/stats` shows of it.
//! Nothing else of the plain server knows that a Raft group exists.
//!
//! Implemented by the replication wing (`super::replicated::Member`) on an
//! nsqd started with `--replication-address`; every other nsqd answers as
//! [`NotMember`] (NSQ's behaviour for every unreplicated topic; a
//! replicated topic kept in `nsqd.dat` by an earlier start with the flags
//! is neither registered nor served, and every change of it is refused).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use nsq_protocol::names::is_ephemeral;
use nsq_protocol::stats::{ReplicationStats, TopicReplication};

use super::backend::OpenKeeper;
use super::channel::Channel;
use super::topic::{PutError, Topic};
use crate::core::limits::Limit;
pub use crate::core::replicated::progress::GroupLimit;
use crate::core::replicated::replicas::{check_replicas, CreateContext, Existing};
use crate::core::replicated::serving::{self, Leader};

/// What `/topic/<action>` and `/channel/<action>` do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Create,
    Delete,
    Empty,
    Pause,
    Unpause,
}

/// An administrative change of a replicated topic or of one of its
/// channels, or the creation of one (`POST /topic/create?replicas=N`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    CreateTopic {
        topic: String,
        /// As the request gave it: the cluster checks it.
        replicas: String,
    },
    /// Delete, empty, pause or unpause.
    Topic { topic: String, action: Action },
    Channel {
        topic: String,
        channel: String,
        action: Action,
    },
    /// The group's depth limit of the topic (`channel` None) or of one of
    /// its channels (`/topic/config`, `/channel/config`).
    Limit {
        topic: String,
        channel: Option<String>,
        limit: Limit,
    },
    /// `POST /topic/config?retention=` (nsq-rs): as the request gave it,
    /// the cluster checks it.
    Retention { topic: String, retention: String },
}

/// `POST /channel/reset?to=` or `/channel/create?start=` (nsq-rs replay)
/// of a replicated topic's channel; `to` as the request gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reset {
    pub topic: String,
    pub channel: String,
    pub to: String,
    /// A `/channel/create`: a channel that exists is left as it is.
    pub only_new: bool,
}

/// Where a committed reset put the channel, as the member that proposed it
/// resolved `to` (the group may have moved it on to its kept part).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResetAnswer {
    /// The log index the channel goes back to (the first message it gets
    /// again is the first published there or after).
    pub index: u64,
    /// When the first message from there was published (Unix ns), if any.
    pub from_ns: Option<i64>,
    /// The time asked for is before the oldest message the topic retains:
    /// the channel goes back to that one (the earliest) instead.
    pub before_retention: bool,
}

/// A reset under way: the answer once the cluster has it.
pub type ResetCommit = Pin<Box<dyn Future<Output = Result<ResetAnswer, Refused>> + Send + 'static>>;

/// Why the cluster did not carry out a publish or a change: nothing of it
/// was done (a commit that timed out may still be applied later). Display
/// is the error text in NSQ's style (the HTTP message; a PUB's error after
/// `PUB failed `).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The request does not fit the topic or the cluster (HTTP 400).
    #[error("{0}")]
    Invalid(String),
    /// The channel is not here (HTTP 404).
    #[error("{0}")]
    NotFound(&'static str),
    /// A publish the group's leader refused by a `reject` depth limit
    /// (what `PutError::Full` says where the publish was taken; HTTP 503
    /// `MAX_DEPTH_REACHED`, a PUB's non-fatal error).
    #[error("{0}")]
    Full(String),
    /// Not committed now: no leader, no commit in time, or no member here
    /// (HTTP 503; a PUB's non-fatal error, the producer may retry).
    #[error("{0}")]
    Unavailable(String),
}

/// `POST /replication/members/add` or `/remove` (nsq-rs): the node id
/// and address as the request gave them; the cluster checks them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberChange {
    Add { id: String, address: String },
    Remove { id: String },
}

/// Why a membership change was not made: the cluster is unchanged.
/// Display is the HTTP message (a code, then what to do).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MemberRefused {
    /// Bad input, or an address that does not answer as that member
    /// (HTTP 400).
    #[error("{0}")]
    Invalid(String),
    /// No such member (HTTP 404).
    #[error("{0}")]
    NotFound(String),
    /// Not now, or not in this cluster: an existing id, the last voter of
    /// a group, a change in progress (HTTP 409).
    #[error("{0}")]
    Conflict(String),
    /// Not committed now, or a member of an older build (HTTP 503).
    #[error("{0}")]
    Unavailable(String),
}

/// A membership change under way: the member's view once it is made
/// (the groups then carry it out; `change` in `GET /replication`).
pub type MembersCommit =
    Pin<Box<dyn Future<Output = Result<ReplicationStats, MemberRefused>> + Send + 'static>>;

/// A commit under way: `Ok` once the cluster has it.
pub type Commit = Pin<Box<dyn Future<Output = Result<(), Refused>> + Send + 'static>>;

/// What nsqd asks about its replicated topics; see the module docs.
pub trait Cluster: Send + Sync {
    /// Whether a publish may create a topic now: not on a member that has
    /// not caught up with its groups since it started (the name may be a
    /// replicated topic whose creation it has not applied yet).
    fn caught_up(&self) -> bool;

    /// Where a new replicated topic's queues (its own and its channels')
    /// keep what memory does not hold; None: disk queues, as for any topic.
    fn keeper(&self, topic: &str, replicas: u8) -> Option<OpenKeeper>;

    /// Whether this nsqd registers the replicated topic with the lookupds.
    fn registers(&self, topic: &str, replicas: u8) -> bool;

    /// Why a SUB to the replicated topic is refused here (the text after
    /// `E_SUB_FAILED `), or None when it is served here.
    fn sub_refusal(&self, topic: &str, replicas: u8) -> Option<String>;

    /// A client subscribed to a channel of a replicated topic here.
    fn subscribed(&self, topic: &Topic, channel: &Channel);

    /// A publish to the replicated topic: refused at once (a `reject`
    /// limit, nsqd exiting), or the commit the publisher's answer waits
    /// for.
    fn publish(
        &self,
        topic: &Topic,
        bodies: Vec<Bytes>,
        defer: Option<Duration>,
    ) -> Result<Commit, PutError>;

    /// An administrative change, answered once committed.
    fn change(&self, change: Change) -> Commit;

    /// A replicated channel's reset (replay), answered once committed.
    fn reset(&self, reset: Reset) -> ResetCommit;

    /// What `/stats` shows of the replicated topic here, if anything.
    fn topic_stats(&self, topic: &str, replicas: u8) -> Option<TopicReplication>;

    /// The group's depth limit of the replicated topic (`channel` None) or
    /// of its channel, as this member applied it; None when it does not
    /// hold the group (or the channel).
    fn group_limit(&self, topic: &str, replicas: u8, channel: Option<&str>) -> Option<GroupLimit>;

    /// What `/stats` and `GET /replication` show of the member.
    fn stats(&self) -> Option<ReplicationStats>;

    /// A member added to or removed from the cluster, answered once the
    /// cluster map has it.
    fn members(&self, change: MemberChange) -> MembersCommit;

    /// Stops the member (nsqd's shutdown, once the topics are closed).
    fn shutdown(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}

/// An nsqd that is not a member of a replication cluster.
pub struct NotMember;

/// The answer to every change a non-member cannot make.
fn not_enabled() -> Refused {
    Refused::Unavailable("REPLICATION_NOT_ENABLED".into())
}

impl Cluster for NotMember {
    fn caught_up(&self) -> bool {
        true
    }

    fn keeper(&self, _topic: &str, _replicas: u8) -> Option<OpenKeeper> {
        None
    }

    fn registers(&self, _topic: &str, replicas: u8) -> bool {
        serving::registers(Some(replicas), Leader::NotMember)
    }

    fn sub_refusal(&self, topic: &str, replicas: u8) -> Option<String> {
        serving::sub_refusal(topic, Some(replicas), Leader::NotMember, None)
    }

    fn subscribed(&self, _topic: &Topic, _channel: &Channel) {}

    fn publish(
        &self,
        _topic: &Topic,
        _bodies: Vec<Bytes>,
        _defer: Option<Duration>,
    ) -> Result<Commit, PutError> {
        Ok(Box::pin(std::future::ready(Err(not_enabled()))))
    }

    fn change(&self, change: Change) -> Commit {
        let refused = match change {
            // the value is checked first, as on a member
            Change::CreateTopic { topic, replicas } => {
                let ctx = CreateContext {
                    cluster_size: None,
                    ephemeral: is_ephemeral(&topic),
                    existing: Existing::None,
                };
                match check_replicas(&replicas, ctx) {
                    Err(e) => Refused::Invalid(e.to_string()),
                    Ok(_) => Refused::Invalid("REPLICATION_NOT_ENABLED".into()),
                }
            }
            Change::Topic { .. }
            | Change::Channel { .. }
            | Change::Limit { .. }
            | Change::Retention { .. } => not_enabled(),
        };
        Box::pin(std::future::ready(Err(refused)))
    }

    fn reset(&self, _reset: Reset) -> ResetCommit {
        Box::pin(std::future::ready(Err(not_enabled())))
    }

    fn topic_stats(&self, _topic: &str, _replicas: u8) -> Option<TopicReplication> {
        None
    }

    fn group_limit(&self, _: &str, _: u8, _: Option<&str>) -> Option<GroupLimit> {
        None
    }

    fn stats(&self) -> Option<ReplicationStats> {
        None
    }

    fn members(&self, _change: MemberChange) -> MembersCommit {
        Box::pin(async { Err(MemberRefused::Unavailable("REPLICATION_NOT_ENABLED".into())) })
    }

    fn shutdown(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(std::future::ready(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_non_member_serves_no_replicated_topic_and_commits_nothing() {
        let n = NotMember;
        assert!(n.caught_up());
        assert!(n.keeper("t", 3).is_none());
        assert!(!n.registers("t", 3));
        assert_eq!(
            n.sub_refusal("t", 3).as_deref(),
            Some("SUB topic t is replicated and this nsqd is not a replication member")
        );
        let create = |replicas: &str| Change::CreateTopic {
            topic: "t".into(),
            replicas: replicas.into(),
        };
        assert_eq!(
            n.change(create("x")).await.unwrap_err(),
            Refused::Invalid("INVALID_ARG_REPLICAS".into())
        );
        assert_eq!(
            n.change(create("3")).await.unwrap_err(),
            Refused::Invalid("REPLICATION_NOT_ENABLED".into())
        );
        let pause = Change::Topic {
            topic: "t".into(),
            action: Action::Pause,
        };
        assert_eq!(n.change(pause).await.unwrap_err(), not_enabled());
    }
}

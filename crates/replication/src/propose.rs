//! Proposing a payload to a group from any member: written by the group's
//! Raft when this member leads it, otherwise forwarded to the leader over
//! the cluster connection (`Rpc::Forward`), and answered once committed —
//! or refused once the time given has passed. A member that does not vote
//! in the group forwards to the leader its peers' pulses name. Never: what a payload means,
//! or retrying a proposal that may have reached the log (a caller that
//! retries after a timeout may get it committed twice: at-least-once).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use openraft::error::{ClientWriteError, RaftError};
use tokio::time::Instant;

use crate::answer::ForwardError;
use crate::maps::Maps;
use crate::network::frame::{Reply, Rpc};
use crate::network::peer::CallError;
use crate::network::Peers;
use crate::pulse::Pulses;
use crate::{GroupId, NodeId, Payload, Raft};

/// How long a member waits before asking again when its group has no
/// leader yet, or the leader it forwarded to no longer leads.
const RETRY: Duration = Duration::from_millis(50);
/// What a forwarding member keeps of its time for the leader's answer to
/// travel back: the leader gives up this much earlier.
const REPLY_MARGIN: Duration = Duration::from_millis(100);

/// Why a proposal was not committed (as far as the proposer knows: after a
/// timeout it may still be).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProposeError {
    #[error("group {0} has no leader")]
    NoLeader(GroupId),
    #[error("group {0} did not commit within {1:?}")]
    Timeout(GroupId, Duration),
    /// Forwarded, and the group's leader changed before the answer came:
    /// the proposal may still be committed by the next leader.
    #[error("group {0} changed leader before answering (the proposal may still commit)")]
    LeaderChanged(GroupId),
    #[error("this member has no group {0}")]
    NoGroup(GroupId),
    #[error("group {group}: {reason}")]
    Failed { group: GroupId, reason: String },
    /// The leader's check refused it ([`crate::group::ClusterMember::check_forwarded`]):
    /// nothing was written.
    #[error("group {group}: refused by its leader: {reason}")]
    Refused { group: GroupId, reason: String },
}

/// Proposes payloads to the groups of one member, and through their
/// leaders to the groups it does not vote in (cheap to clone).
#[derive(Clone)]
pub struct Proposer {
    groups: Arc<HashMap<GroupId, Raft>>,
    peers: Arc<Peers>,
    others: Others,
}

/// What a member needs to reach the groups it does not vote in.
#[derive(Clone)]
pub(crate) struct Others {
    /// Which groups there are, and every member's cluster address.
    pub maps: Maps,
    pub pulses: Pulses,
}

/// What one forwarding attempt came to.
enum Forwarded {
    Committed(u64),
    /// Nothing reached the log through this attempt: ask again.
    Again,
    Failed(ProposeError),
}

impl Proposer {
    pub(crate) fn new(
        groups: HashMap<GroupId, Raft>,
        peers: Arc<Peers>,
        others: Others,
    ) -> Proposer {
        Proposer {
            groups: Arc::new(groups),
            peers,
            others,
        }
    }

    /// Proposes `payload` to `group` and waits for it to be committed (and
    /// applied on the leader): its log index. Gives up after `timeout`;
    /// a group without a leader until then is [`ProposeError::NoLeader`].
    pub async fn propose(
        &self,
        group: GroupId,
        payload: Bytes,
        timeout: Duration,
    ) -> Result<u64, ProposeError> {
        let deadline = Instant::now() + timeout;
        let Some(raft) = self.groups.get(&group) else {
            if self.others.maps.placement().size_of(group).is_none() {
                return Err(ProposeError::NoGroup(group));
            }
            return self
                .propose_elsewhere(group, payload, deadline, timeout)
                .await;
        };
        let mut led = false;
        loop {
            if let Some(e) = expired(group, timeout, deadline, led) {
                return Err(e);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let written =
                tokio::time::timeout(left, raft.client_write(Payload(payload.clone()))).await;
            match written {
                // Appended here as the leader: it may still commit.
                Err(_) => return Err(ProposeError::Timeout(group, timeout)),
                Ok(Ok(r)) => return Ok(r.log_id.index),
                Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f)))) => {
                    if let Some(node) = f.leader_node {
                        led = true;
                        let changed = leader_changed(raft);
                        match self
                            .forward(&node.addr, group, &payload, deadline, changed)
                            .await
                        {
                            Forwarded::Committed(i) => return Ok(i),
                            Forwarded::Failed(e) => return Err(e),
                            Forwarded::Again => {}
                        }
                    }
                }
                Ok(Err(e)) => {
                    return Err(ProposeError::Failed {
                        group,
                        reason: e.to_string(),
                    })
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            tokio::time::sleep(RETRY.min(left)).await;
        }
    }

    /// [`Proposer::propose`] to a group this member does not vote in:
    /// forwarded to the leader its peers' pulses name, once there is one.
    async fn propose_elsewhere(
        &self,
        group: GroupId,
        payload: Bytes,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<u64, ProposeError> {
        let mut led = false;
        loop {
            if let Some(e) = expired(group, timeout, deadline, led) {
                return Err(e);
            }
            let leader = self.others.pulses.leader(group);
            let addr = leader.and_then(|(node, _)| {
                self.others
                    .maps
                    .get()
                    .and_then(|m| m.members.get(&node).cloned())
            });
            if let Some(addr) = addr.as_ref() {
                led = true;
                let changed = heard_leader_changed(self.others.pulses.clone(), group, leader);
                match self.forward(addr, group, &payload, deadline, changed).await {
                    Forwarded::Committed(i) => return Ok(i),
                    Forwarded::Failed(e) => return Err(e),
                    Forwarded::Again => {}
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            tokio::time::sleep(RETRY.min(left)).await;
        }
    }

    /// Forwards to the leader at `addr`. A leader that stops answering
    /// (paused, cut off) would hold the proposer until its deadline: once
    /// `changed` says another leader or a new term was seen, the attempt
    /// ends with [`ProposeError::LeaderChanged`], so its caller can try
    /// again against the new one (never this proposer: the payload may
    /// already be in the old leader's log).
    async fn forward(
        &self,
        addr: &str,
        group: GroupId,
        payload: &Bytes,
        deadline: Instant,
        changed: impl Future<Output = ()>,
    ) -> Forwarded {
        let left = deadline.saturating_duration_since(Instant::now());
        let rpc = Rpc::Forward {
            payload: Payload(payload.clone()),
            timeout_ms: left.saturating_sub(REPLY_MARGIN).as_millis() as u64,
        };
        let timeout_err = || Forwarded::Failed(ProposeError::Timeout(group, left));
        let peer = self.peers.get(addr);
        let reply = tokio::select! {
            r = peer.call(group, &rpc, left) => r,
            () = changed => return Forwarded::Failed(ProposeError::LeaderChanged(group)),
        };
        match reply {
            Ok(Reply::Forward(Ok(index))) => Forwarded::Committed(index),
            Ok(Reply::Forward(Err(ForwardError::NotLeader))) => Forwarded::Again,
            Ok(Reply::Forward(Err(ForwardError::Timeout))) => timeout_err(),
            Ok(Reply::Forward(Err(ForwardError::Failed(reason)))) => {
                Forwarded::Failed(match reason.strip_prefix(crate::answer::REFUSED) {
                    Some(why) => ProposeError::Refused {
                        group,
                        reason: why.to_string(),
                    },
                    None => ProposeError::Failed { group, reason },
                })
            }
            Ok(Reply::NoGroup(g)) => Forwarded::Failed(ProposeError::Failed {
                group,
                reason: format!("the leader at {addr} has no group {g}"),
            }),
            Ok(_) => Forwarded::Failed(ProposeError::Failed {
                group,
                reason: format!("the leader at {addr} answered a forward with another reply"),
            }),
            // Never sent: the leader may have gone; ask who leads now.
            Err(CallError::Connect { .. }) => Forwarded::Again,
            Err(CallError::Timeout(..)) => timeout_err(),
            Err(e) => Forwarded::Failed(ProposeError::Failed {
                group,
                reason: e.to_string(),
            }),
        }
    }
}

/// Why a proposal gives up once `deadline` has passed: a timeout when a
/// leader was tried (the payload may still commit), else no leader.
fn expired(
    group: GroupId,
    timeout: Duration,
    deadline: Instant,
    led: bool,
) -> Option<ProposeError> {
    (Instant::now() >= deadline).then_some(if led {
        ProposeError::Timeout(group, timeout)
    } else {
        ProposeError::NoLeader(group)
    })
}

/// Ends once this member's Raft of the group sees a new term or another
/// leader.
fn leader_changed(raft: &Raft) -> impl Future<Output = ()> {
    let mut metrics = raft.metrics();
    let seen = {
        let m = metrics.borrow();
        (m.current_term, m.current_leader)
    };
    async move {
        if metrics
            .wait_for(|m| (m.current_term, m.current_leader) != seen)
            .await
            .is_err()
        {
            // The group is shutting down: the call ends on its own.
            std::future::pending::<()>().await;
        }
    }
}

/// Ends once the peers' pulses name a leader of `group` other than `seen`
/// (another member, or a later term). Pulses that name none (stale, or an
/// election under way) change nothing: the forward's own timeout bounds
/// that.
async fn heard_leader_changed(pulses: Pulses, group: GroupId, seen: Option<(NodeId, u64)>) {
    loop {
        tokio::time::sleep(RETRY).await;
        if pulses.leader(group).is_some_and(|l| Some(l) != seen) {
            return;
        }
    }
}

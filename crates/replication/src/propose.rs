//! Proposing a payload to a group from any member: written by the group's
//! Raft when this member leads it, otherwise forwarded to the leader over
//! the cluster connection (`Rpc::Forward`), and answered once committed —
//! or refused once the time given has passed. Never: what a payload means,
//! or retrying a proposal that may have reached the log (a caller that
//! retries after a timeout may get it committed twice: at-least-once).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use openraft::error::{ClientWriteError, RaftError};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::network::frame::{Reply, Rpc};
use crate::network::peer::CallError;
use crate::network::Peers;
use crate::{GroupId, Payload, Raft};

/// How long a member waits before asking again when its group has no
/// leader yet, or the leader it forwarded to no longer leads.
const RETRY: Duration = Duration::from_millis(50);
/// What a forwarding member keeps of its time for the leader's answer to
/// travel back: the leader gives up this much earlier.
const REPLY_MARGIN: Duration = Duration::from_millis(100);
/// The longest a leader works on one forwarded proposal, whatever the
/// request asks (a bound on the tasks a broken peer can leave waiting).
const MAX_FORWARD: Duration = Duration::from_secs(60);

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
}

/// A forwarded proposal's failure, as the leader answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ForwardError {
    /// The member asked does not lead the group (any more).
    NotLeader,
    /// Not committed within the time the request gave.
    Timeout,
    Failed(String),
}

/// Proposes payloads to the groups of one member (cheap to clone).
#[derive(Clone)]
pub struct Proposer {
    groups: Arc<HashMap<GroupId, Raft>>,
    peers: Arc<Peers>,
}

/// What one forwarding attempt came to.
enum Forwarded {
    Committed(u64),
    /// Nothing reached the log through this attempt: ask again.
    Again,
    Failed(ProposeError),
}

impl Proposer {
    pub(crate) fn new(groups: HashMap<GroupId, Raft>, peers: Arc<Peers>) -> Proposer {
        Proposer {
            groups: Arc::new(groups),
            peers,
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
        let raft = self
            .groups
            .get(&group)
            .ok_or(ProposeError::NoGroup(group))?;
        let deadline = Instant::now() + timeout;
        let mut led = false;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(if led {
                    ProposeError::Timeout(group, timeout)
                } else {
                    ProposeError::NoLeader(group)
                });
            }
            let written =
                tokio::time::timeout(left, raft.client_write(Payload(payload.clone()))).await;
            match written {
                // Appended here as the leader: it may still commit.
                Err(_) => return Err(ProposeError::Timeout(group, timeout)),
                Ok(Ok(r)) => return Ok(r.log_id.index),
                Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f)))) => {
                    if let Some(node) = f.leader_node {
                        led = true;
                        match self
                            .forward(raft, &node.addr, group, &payload, deadline)
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

    /// Forwards to the leader at `addr`. A leader that stops answering
    /// (paused, cut off) would hold the proposer until its deadline: once
    /// this member sees a new term or another leader, the attempt ends
    /// with [`ProposeError::LeaderChanged`], so its caller can try again
    /// against the new one (never this proposer: the payload may already
    /// be in the old leader's log).
    async fn forward(
        &self,
        raft: &Raft,
        addr: &str,
        group: GroupId,
        payload: &Bytes,
        deadline: Instant,
    ) -> Forwarded {
        let left = deadline.saturating_duration_since(Instant::now());
        let rpc = Rpc::Forward {
            payload: Payload(payload.clone()),
            timeout_ms: left.saturating_sub(REPLY_MARGIN).as_millis() as u64,
        };
        let timeout_err = || Forwarded::Failed(ProposeError::Timeout(group, left));
        let mut metrics = raft.metrics();
        let seen = {
            let m = metrics.borrow();
            (m.current_term, m.current_leader)
        };
        let changed = async move {
            if metrics
                .wait_for(|m| (m.current_term, m.current_leader) != seen)
                .await
                .is_err()
            {
                // The group is shutting down: the call ends on its own.
                std::future::pending::<()>().await;
            }
        };
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
                Forwarded::Failed(ProposeError::Failed { group, reason })
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

/// The leader's side of a forwarded proposal: written by this member's
/// Raft of the group if it leads it, never forwarded again (a member that
/// no longer leads answers `NotLeader` and the proposer asks again).
pub(crate) async fn answer_forward(
    raft: &Raft,
    payload: Payload,
    timeout: Duration,
) -> Result<u64, ForwardError> {
    match tokio::time::timeout(timeout.min(MAX_FORWARD), raft.client_write(payload)).await {
        Err(_) => Err(ForwardError::Timeout),
        Ok(Ok(r)) => Ok(r.log_id.index),
        Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_)))) => {
            Err(ForwardError::NotLeader)
        }
        Ok(Err(e)) => Err(ForwardError::Failed(e.to_string())),
    }
}

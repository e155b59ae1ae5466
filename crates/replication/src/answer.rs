//! What a member answers its peers besides openraft's RPCs: a pulse, with
//! what it knows of each of its groups (the pulse task, `pulse.rs`, asks),
//! and a proposal forwarded to it, written by its Raft of the group
//! (`propose.rs` forwards). The cluster listener calls these for each such
//! request. Never: the connection (`network`) or the asking side.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use serde::{Deserialize, Serialize};

use crate::quiet::GroupPulse;
use crate::{GroupId, Payload, Raft};

/// A forwarded proposal's failure, as the leader answers it
/// (`Reply::Forward`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ForwardError {
    /// The member asked does not lead the group (any more).
    NotLeader,
    /// Not committed within the time the request gave.
    Timeout,
    Failed(String),
}

/// A leader's check of a proposal forwarded to it, before it writes it
/// (nsqd: a publish past its group's depth limit, as the leader counts
/// it): `Err(why)` refuses it and nothing is written. What a payload
/// means is the subscriber's; the crate only carries the refusal back.
pub type ForwardCheck = Arc<dyn Fn(GroupId, &[u8]) -> Result<(), String> + Send + Sync>;

/// Set once by the member's subscriber ([`crate::group::ClusterMember::check_forwarded`]).
pub type ForwardChecks = Arc<OnceLock<ForwardCheck>>;

/// How a refusal travels in [`ForwardError::Failed`]: a peer of an earlier
/// build, which knows no other variant, reads it as a failure.
pub(crate) const REFUSED: &str = "refused: ";

/// The answer to a peer's pulse: what this member knows of each group.
pub(crate) fn pulse(groups: &HashMap<GroupId, Raft>) -> Vec<GroupPulse> {
    let n = groups.keys().max().map_or(0, |g| *g as usize + 1);
    let mut out = vec![GroupPulse::default(); n];
    for (g, raft) in groups {
        let m = raft.metrics();
        let m = m.borrow();
        out[*g as usize] = GroupPulse {
            leading: m.state == openraft::ServerState::Leader,
            leader: m.current_leader,
            term: m.current_term,
            last_index: m.last_log_index.unwrap_or(0),
            applied: m.last_applied.map_or(0, |l| l.index),
        };
    }
    out
}

/// The longest a leader works on one forwarded proposal, whatever the
/// request asks (a bound on the tasks a broken peer can leave waiting).
const MAX_FORWARD: Duration = Duration::from_secs(60);

/// The leader's side of a forwarded proposal: written by this member's
/// Raft of the group if it leads it, never forwarded again (a member that
/// no longer leads answers `NotLeader` and the proposer asks again).
pub(crate) async fn forward(
    raft: &Raft,
    group: GroupId,
    check: Option<&ForwardCheck>,
    payload: Payload,
    timeout: Duration,
) -> Result<u64, ForwardError> {
    if let Some(Err(why)) = check.map(|c| c(group, &payload.0)) {
        return Err(ForwardError::Failed(format!("{REFUSED}{why}")));
    }
    match tokio::time::timeout(timeout.min(MAX_FORWARD), raft.client_write(payload)).await {
        Err(_) => Err(ForwardError::Timeout),
        Ok(Ok(r)) => Ok(r.log_id.index),
        Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_)))) => {
            Err(ForwardError::NotLeader)
        }
        Ok(Err(e)) => Err(ForwardError::Failed(e.to_string())),
    }
}

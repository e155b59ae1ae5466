//! Members added and removed while the cluster runs: a change asked of
//! any member ([`Membership::change`]: checked, the new member's address
//! probed, then committed to the cluster map through group 0), and each
//! group's openraft membership made what the map says by the group's
//! leader ([`run`]: the new member a learner first, a voter once it holds
//! everything up to the entry that made it a learner, so it holds what
//! the group committed; a removed one dropped), which then reports the
//! group done (`Update::Converged`). Never: the rules of the map
//! (`cluster_map.rs`), or which topics live where.
//!
//! One change at a time, cluster-wide: the map refuses a change while one
//! is pending, and the commit through group 0 orders two asked at once on
//! different members (the second is refused as stale). Within a group,
//! openraft refuses a membership change while another is in flight; the
//! leader tries again at its next round.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use openraft::ChangeMembers;
use parking_lot::Mutex;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::cluster_map::{Change, ClusterMap, Refusal, Update};
use crate::maps::Maps;
use crate::network::hello::{Abouts, MAP_PROTOCOL};
use crate::network::peer::{self, CallError};
use crate::propose::{ProposeError, Proposer};
use crate::{GroupId, Member, NodeId, Raft};

/// Between a leader's rounds over its groups.
const ROUND: Duration = Duration::from_millis(200);
/// How long one step of a group's change (a learner catching up, a
/// membership change committed) may take before the next round tries
/// again.
const STEP: Duration = Duration::from_secs(30);
/// How long a probe of a new member's address may take.
const PROBE: Duration = Duration::from_secs(3);

/// Why a change was not made; the cluster map is unchanged.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    /// The map's rules refuse it (an existing id, the last voter of a
    /// group, a change in progress, ...).
    #[error("{0}")]
    Refused(Refusal),
    /// The new member's address does not answer as that member.
    #[error("{0}")]
    Unreachable(String),
    /// Some member speaks a protocol without the cluster map.
    #[error("{0}")]
    UpgradePending(String),
    /// This member has no map (it waits to be added itself).
    #[error("this member is not a member of a cluster yet")]
    NoMap,
    /// Not committed (no leader of group 0, a timeout).
    #[error("{0}")]
    Commit(#[from] ProposeError),
}

/// Clears the flag of a change being asked when dropped.
struct Asking(Arc<Mutex<bool>>);

impl Drop for Asking {
    fn drop(&mut self) {
        *self.0.lock() = false;
    }
}

/// A member's side of membership changes (cheap to clone).
#[derive(Clone)]
pub struct Membership {
    pub(crate) me: NodeId,
    pub(crate) maps: Maps,
    pub(crate) proposer: Proposer,
    pub(crate) abouts: Abouts,
    pub(crate) tls: Option<Arc<rustls::ClientConfig>>,
    /// A change asked of this member and not answered yet.
    pub(crate) asking: Arc<Mutex<bool>>,
}

impl Membership {
    /// The map this member holds.
    pub fn map(&self) -> Option<Arc<ClusterMap>> {
        self.maps.get()
    }

    /// Makes `change`: checks it against the map, probes a new member's
    /// address, commits it through group 0 within `timeout` and waits
    /// until this member applied it. The map it made (the change then
    /// pending until every group's leader has carried it out).
    pub async fn change(
        &self,
        change: Change,
        timeout: Duration,
    ) -> Result<Arc<ClusterMap>, ChangeError> {
        let map = self.maps.get().ok_or(ChangeError::NoMap)?;
        map.check(&change).map_err(ChangeError::Refused)?;
        {
            let mut asking = self.asking.lock();
            if *asking {
                return Err(ChangeError::Refused(Refusal::InProgress {
                    change,
                    done: 0,
                    groups: map.groups().len(),
                }));
            }
            *asking = true;
        }
        // cleared however this ends (an HTTP client that goes away drops
        // the future mid-way)
        let _asking = Asking(self.asking.clone());
        self.make(map, change, timeout).await
    }

    async fn make(
        &self,
        map: Arc<ClusterMap>,
        change: Change,
        timeout: Duration,
    ) -> Result<Arc<ClusterMap>, ChangeError> {
        for (&id, _) in map.members.iter().filter(|(id, _)| **id != self.me) {
            let p = self.abouts.protocol(id).unwrap_or(1);
            if p < MAP_PROTOCOL {
                return Err(ChangeError::UpgradePending(format!(
                    "node {id} speaks replication protocol {p}; a membership change needs {MAP_PROTOCOL} on every member: upgrade every member first"
                )));
            }
        }
        if let Change::Add { id, addr } = &change {
            let probed = peer::probe(addr, self.tls.as_ref(), PROBE)
                .await
                .map_err(|e| {
                    ChangeError::Unreachable(match e {
                        CallError::Refused { why, .. } => format!(
                            "the member at {addr} does not answer a probe (an older build?): {why}"
                        ),
                        e => format!("{addr} is not reachable: {e}"),
                    })
                })?;
            if probed.node != *id {
                return Err(ChangeError::Unreachable(format!(
                    "{addr} is node {}, not node {id}",
                    probed.node
                )));
            }
            if probed.groups != map.per_set {
                return Err(ChangeError::Unreachable(format!(
                    "node {id} at {addr} was started with --replication-groups={}; the cluster has {}",
                    probed.groups, map.per_set
                )));
            }
            if probed.member {
                return Err(ChangeError::Unreachable(format!(
                    "node {id} at {addr} is already a member of a cluster (its data directory has a cluster map): start it on an empty one"
                )));
            }
        }
        let update = Update::Change {
            change: change.clone(),
            base: map.version,
        };
        let deadline = Instant::now() + timeout;
        let index = self
            .proposer
            .propose(0, update.encode().into(), timeout)
            .await?;
        // Applied here too before the answer, so it is what this member
        // shows next.
        loop {
            if let Some((at, outcome)) = self.maps.last_outcome() {
                if at == index {
                    return match outcome {
                        Ok(_) => self.maps.get().ok_or(ChangeError::NoMap),
                        Err(why) => Err(ChangeError::Refused(why)),
                    };
                }
                if at > index {
                    break;
                }
            }
            if Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // applied past it, or not yet: the map says whether it was made
        let now = self.maps.get().ok_or(ChangeError::NoMap)?;
        match &now.pending {
            Some(p) if p.change == change && p.at == map.version + 1 => Ok(now),
            _ if now.version > map.version => Err(ChangeError::Refused(Refusal::Stale {
                base: map.version,
                now: now.version,
            })),
            _ => Err(ChangeError::Commit(ProposeError::Timeout(0, timeout))),
        }
    }
}

/// Runs until `shutdown`: every round, for each group this member leads
/// whose membership is not yet what the pending change of the map says,
/// the next step of it, on a task of its own (one per group at a time).
pub async fn run(
    me: NodeId,
    maps: Maps,
    groups: Vec<(GroupId, Raft)>,
    proposer: Proposer,
    shutdown: CancellationToken,
) {
    let busy: Arc<Mutex<HashSet<GroupId>>> = Arc::default();
    let mut tick = tokio::time::interval(ROUND);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut was_member = true;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let Some(map) = maps.get() else { continue };
        let member = map.members.contains_key(&me);
        if was_member && !member {
            tracing::warn!(
                "REPLICATION: this member (node {me}) was removed from the cluster: its groups go on without it; stop this nsqd"
            );
        }
        was_member = member;
        let Some(pending) = map.pending.clone() else {
            continue;
        };
        for (g, raft) in &groups {
            if pending.converged.contains(g) || busy.lock().contains(g) {
                continue;
            }
            let leads = raft.metrics().borrow().current_leader == Some(me);
            let Some(want) = map.voters(*g) else { continue };
            if !leads {
                continue;
            }
            busy.lock().insert(*g);
            let (g, raft, map, proposer, busy) = (
                *g,
                raft.clone(),
                map.clone(),
                proposer.clone(),
                busy.clone(),
            );
            tokio::spawn(async move {
                let at = pending.at;
                match step(g, &raft, &map, &want).await {
                    Ok(true) => {
                        let u = Update::Converged { at, group: g };
                        if let Err(e) = proposer.propose(0, u.encode().into(), STEP).await {
                            tracing::info!(group = g, error = %e, "REPLICATION: group's membership change not reported yet");
                        }
                    }
                    Ok(false) => {}
                    Err(e) => {
                        tracing::info!(
                            group = g,
                            "REPLICATION: membership change: {e}; trying again"
                        )
                    }
                }
                busy.lock().remove(&g);
            });
        }
    }
}

/// The next step of making `group`'s membership `want`, on its leader:
/// true once it is.
async fn step(
    group: GroupId,
    raft: &Raft,
    map: &ClusterMap,
    want: &BTreeSet<NodeId>,
) -> Result<bool, String> {
    let m = raft.metrics().borrow().clone();
    let membership = m.membership_config.membership().clone();
    if membership.get_joint_config().len() > 1 {
        // a change in flight (this leader's, or a former one's, which this
        // one finishes by changing again)
        let r = tokio::time::timeout(
            STEP,
            raft.change_membership(ChangeMembers::ReplaceAllVoters(want.clone()), false),
        )
        .await;
        return r.map(|_| false).map_err(|_| "timed out".into());
    }
    let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
    let nodes: BTreeSet<NodeId> = membership.nodes().map(|(id, _)| *id).collect();
    if voters == *want && nodes == *want {
        return Ok(true);
    }
    // learners first: each new voter holds the log up to the entry that
    // made it a learner (after everything committed before) before it votes
    for id in want.difference(&nodes) {
        let Some(addr) = map.members.get(id) else {
            return Err(format!("node {id} has no address in the map"));
        };
        let added = raft
            .add_learner(*id, Member::new(addr.clone()), false)
            .await
            .map_err(|e| format!("node {id} not added as a learner of group {group}: {e}"))?;
        tracing::info!(
            group,
            "REPLICATION: node {id} is a learner of group {group}; voting once it holds the log up to {}",
            added.log_id.index
        );
    }
    for id in want.difference(&voters) {
        let upto = (*raft.metrics().borrow().membership_config.log_id()).map(|l| l.index);
        let caught_up = raft
            .wait(Some(STEP))
            .metrics(
                |m| {
                    m.replication
                        .as_ref()
                        .and_then(|r| r.get(id).copied().flatten())
                        .map(|l| Some(l.index) >= upto)
                        .unwrap_or(false)
                },
                "learner caught up",
            )
            .await;
        if caught_up.is_err() {
            return Err(format!("node {id} has not caught up on group {group} yet"));
        }
    }
    // learners not wanted (an add abandoned) go first
    let stale: BTreeSet<NodeId> = nodes
        .iter()
        .filter(|n| !want.contains(n) && !voters.contains(n))
        .copied()
        .collect();
    let change = if stale.is_empty() {
        ChangeMembers::ReplaceAllVoters(want.clone())
    } else {
        ChangeMembers::RemoveNodes(stale)
    };
    let r = tokio::time::timeout(STEP, raft.change_membership(change, false)).await;
    match r {
        Ok(Ok(_)) => {
            tracing::info!(
                group,
                "REPLICATION: group {group}'s voters are now {want:?}"
            );
            Ok(false)
        }
        Ok(Err(e)) => Err(format!("group {group}: {e}")),
        Err(_) => Err(format!("group {group}: membership change timed out")),
    }
}

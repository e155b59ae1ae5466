//! The cluster map: who the members are (node id and address), which
//! groups exist and who votes in each, and the one membership change under
//! way, if any. Every member derives its placement (`placement.rs`) from
//! it, so all of them place a topic in the same group and count the same
//! voters. Never: I/O, or carrying a change out (`membership.rs` does:
//! the rules here only say what the map becomes).
//!
//! A cluster formed with `--replication-peer` starts from the map those
//! flags give ([`ClusterMap::formed`], version 0: the placement every
//! earlier build derived from the flags). From then on the map changes
//! only by an [`Update`] committed in group 0 (every member votes in it),
//! applied in log order by every member with these rules, so every member
//! that applied the same entries holds the same map; its version counts
//! the updates applied. A member that missed some (down across a change
//! and sent a snapshot instead of the entries, or a member being added)
//! takes a newer map from a peer's hello or welcome, since a map is only
//! ever the result of committed updates.
//!
//! What a change does to the groups:
//! * the **whole set** (ids `0..per_set`) always has every member as a
//!   voter: an added member joins each of its groups, a removed one
//!   leaves them;
//! * a group of a **smaller set** keeps its voters: a removed member
//!   leaves a vacancy, and the next member added fills one vacancy of
//!   each such group (a replacement takes the place of the member it
//!   replaces);
//! * the sets themselves, and so which group a topic is in, never change:
//!   a topic stays where it was created (a cluster that grows offers no
//!   new group sizes; docs/replication.md).
//!
//! One change at a time: while a change is pending (until the leader of
//! every group has made the group's openraft membership what the map says
//! and committed [`Update::Converged`] for it), another is refused, but
//! for the removal of a member being added (its nsqd never came up: the
//! add is undone the same way a member is removed).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{GroupId, NodeId};

/// The first byte of a payload that is an [`Update`] of the map rather
/// than one of the subscriber's entries (nsqd's start with their version,
/// 1): the state machine applies it to the map and never hands it on.
pub const MAP_ENTRY: u8 = 0xF0;

/// A set of groups of one size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Set {
    /// Its first group id; it has `per_set` ids from there.
    pub first: GroupId,
    /// Its voters per group when the cluster was formed.
    pub size: usize,
    /// Every member votes in each of its groups (the first set).
    pub whole: bool,
}

/// A membership change an operator asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Change {
    /// A new member, by node id and the address of its cluster listener.
    Add { id: NodeId, addr: String },
    /// A member leaves every group.
    Remove { id: NodeId },
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::Add { id, addr } => write!(f, "add node {id} at {addr}"),
            Change::Remove { id } => write!(f, "remove node {id}"),
        }
    }
}

/// A change being carried out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    pub change: Change,
    /// The map version the change made.
    pub at: u64,
    /// The groups whose openraft membership is already what the map says.
    pub converged: BTreeSet<GroupId>,
}

/// What is committed in group 0 to change the map.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Update {
    /// `change`, asked of the map at version `base` (refused if the map
    /// moved on since: another change was made first).
    Change { change: Change, base: u64 },
    /// `group`'s membership is what the map at version `at` says.
    Converged { at: u64, group: GroupId },
}

impl Update {
    /// The payload that carries it.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![MAP_ENTRY];
        out.extend(postcard::to_stdvec(self).unwrap_or_default());
        out
    }

    /// The update in a payload, if it is one.
    pub fn decode(payload: &[u8]) -> Option<Update> {
        match payload.split_first() {
            Some((&MAP_ENTRY, rest)) => postcard::from_bytes(rest).ok(),
            _ => None,
        }
    }
}

/// Whether a payload is a map update (never one of the subscriber's).
pub fn is_map_entry(payload: &[u8]) -> bool {
    payload.first() == Some(&MAP_ENTRY)
}

/// Why a change is refused; Display is what the operator reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("node {0} is already a member")]
    AlreadyMember(NodeId),
    #[error("address {addr} is already node {id}'s")]
    AddressInUse { addr: String, id: NodeId },
    #[error("node {0} is not a member")]
    NotMember(NodeId),
    #[error("node {0} is the last member")]
    LastMember(NodeId),
    #[error("node {id} is the last voter of group {group}")]
    LastVoter { id: NodeId, group: GroupId },
    #[error("a change is in progress ({change}; {done} of {groups} groups done)")]
    InProgress {
        change: Change,
        done: usize,
        groups: usize,
    },
    #[error("another change was made first (the map is at version {now}, not {base})")]
    Stale { base: u64, now: u64 },
}

/// The cluster map (see the module doc).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterMap {
    pub version: u64,
    /// Groups per set (`--replication-groups`).
    pub per_set: u32,
    /// Every member's cluster listener address.
    pub members: BTreeMap<NodeId, String>,
    /// The sets, the whole set first.
    pub sets: Vec<Set>,
    /// The voters of each group of a smaller set (the whole set's are
    /// every member).
    pub voters: BTreeMap<GroupId, BTreeSet<NodeId>>,
    pub pending: Option<Pending>,
}

impl ClusterMap {
    /// The map of a cluster formed from `peers` with `per_set` groups per
    /// size: the sizes offered are the cluster's and every odd size from 3
    /// below it; group `i` of size `s` has the `s` members in a row of the
    /// sorted node ids starting at the `(i mod members)`-th.
    pub fn formed(peers: &BTreeMap<NodeId, String>, per_set: u32) -> ClusterMap {
        let per_set = per_set.max(1);
        let ids: Vec<NodeId> = peers.keys().copied().collect();
        let n = ids.len().max(1);
        let mut sizes = vec![n];
        let mut s = (n - 1).saturating_sub(n % 2);
        while s >= 3 {
            sizes.push(s);
            s -= 2;
        }
        let sets: Vec<Set> = sizes
            .iter()
            .map(|&size| Set {
                first: (n - size) as u32 * per_set,
                size,
                whole: size == n,
            })
            .collect();
        let mut voters = BTreeMap::new();
        for set in sets.iter().filter(|s| !s.whole) {
            for g in set.first..set.first + per_set {
                let start = (g % per_set) as usize % ids.len().max(1);
                let v = (0..set.size).map(|k| ids[(start + k) % ids.len()]);
                voters.insert(g, v.collect());
            }
        }
        ClusterMap {
            version: 0,
            per_set,
            members: peers.clone(),
            sets,
            voters,
            pending: None,
        }
    }

    /// Every group, by id.
    pub fn groups(&self) -> Vec<GroupId> {
        self.sets
            .iter()
            .flat_map(|s| s.first..s.first + self.per_set)
            .collect()
    }

    /// The set `group` belongs to.
    pub fn set_of(&self, group: GroupId) -> Option<&Set> {
        self.sets
            .iter()
            .find(|s| (s.first..s.first + self.per_set).contains(&group))
    }

    /// The voters of `group`, if it is a group of this cluster.
    pub fn voters(&self, group: GroupId) -> Option<BTreeSet<NodeId>> {
        let set = self.set_of(group)?;
        if set.whole {
            return Some(self.members.keys().copied().collect());
        }
        self.voters.get(&group).cloned()
    }

    /// The member at `addr`.
    pub fn node_at(&self, addr: &str) -> Option<NodeId> {
        self.members
            .iter()
            .find(|(_, a)| a.as_str() == addr)
            .map(|(id, _)| *id)
    }

    /// Whether `change` may be made now: why not, if not.
    pub fn check(&self, change: &Change) -> Result<(), Refusal> {
        // An add not carried out yet (its member never came up) may be
        // undone by removing that member; nothing else while pending.
        let undoes = |p: &Pending| matches!((&p.change, change), (Change::Add { id: a, .. }, Change::Remove { id: r }) if a == r);
        if let Some(p) = self.pending.as_ref().filter(|p| !undoes(p)) {
            return Err(Refusal::InProgress {
                change: p.change.clone(),
                done: p.converged.len(),
                groups: self.groups().len(),
            });
        }
        match change {
            Change::Add { id, addr } => {
                if self.members.contains_key(id) {
                    return Err(Refusal::AlreadyMember(*id));
                }
                if let Some(other) = self.node_at(addr) {
                    return Err(Refusal::AddressInUse {
                        addr: addr.clone(),
                        id: other,
                    });
                }
            }
            Change::Remove { id } => {
                if !self.members.contains_key(id) {
                    return Err(Refusal::NotMember(*id));
                }
                if self.members.len() == 1 {
                    return Err(Refusal::LastMember(*id));
                }
                if let Some((group, _)) = self
                    .voters
                    .iter()
                    .find(|(_, v)| v.len() == 1 && v.contains(id))
                {
                    return Err(Refusal::LastVoter {
                        id: *id,
                        group: *group,
                    });
                }
            }
        }
        Ok(())
    }

    /// Applies a committed update: Ok(true) if the map changed (its
    /// version then moved on by one), Ok(false) if there was nothing to do
    /// (a group reported twice, or for a change already done), Err if a
    /// change is refused (the map is unchanged).
    pub fn apply(&mut self, update: &Update) -> Result<bool, Refusal> {
        match update {
            Update::Change { change, base } => {
                if *base != self.version {
                    return Err(Refusal::Stale {
                        base: *base,
                        now: self.version,
                    });
                }
                self.check(change)?;
                match change {
                    Change::Add { id, addr } => {
                        self.members.insert(*id, addr.clone());
                        for set in self.sets.iter().filter(|s| !s.whole) {
                            for g in set.first..set.first + self.per_set {
                                let v = self.voters.entry(g).or_default();
                                if v.len() < set.size {
                                    v.insert(*id);
                                }
                            }
                        }
                    }
                    Change::Remove { id } => {
                        self.members.remove(id);
                        for v in self.voters.values_mut() {
                            v.remove(id);
                        }
                    }
                }
                self.version += 1;
                self.pending = Some(Pending {
                    change: change.clone(),
                    at: self.version,
                    converged: BTreeSet::new(),
                });
                Ok(true)
            }
            Update::Converged { at, group } => {
                let all = self.groups();
                let Some(p) = self.pending.as_mut() else {
                    return Ok(false);
                };
                if p.at != *at || !all.contains(group) || !p.converged.insert(*group) {
                    return Ok(false);
                }
                if all.iter().all(|g| p.converged.contains(g)) {
                    self.pending = None;
                }
                self.version += 1;
                Ok(true)
            }
        }
    }
}

#[cfg(test)]
#[path = "cluster_map_tests.rs"]
mod tests;

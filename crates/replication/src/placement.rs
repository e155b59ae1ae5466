//! Which members vote in which Raft group, and which group a topic's index
//! is in, as the cluster map says (`cluster_map.rs`). Never: I/O, or which
//! topic goes where (nsqd's core hashes a topic's name to an index; this
//! says which group that index is for a topic's `replicas`, and who its
//! voters are).
//!
//! Groups come in sets, one set per group size the cluster offered when it
//! was formed, each set with the same number of groups
//! (`--replication-groups`). The set of the cluster's size comes first and
//! has ids `0..per_set`: every member votes in all of them (the members
//! added since too), as before sets existed, so a cluster whose data came
//! from an earlier build finds its groups where it left them. Smaller sets
//! follow, each group's voters `size` members in a row of the sorted
//! member list starting at a different member, so a set's groups (and
//! their leaders and logs) spread over the whole cluster.
//!
//! The sizes offered are the cluster's and every odd size from 3 below
//! it: 5 members offer groups of 5 and 3, 7 offer 7, 5 and 3. An odd group
//! loses no more to a majority than the even size above it (3 and 4 both
//! survive one lost member), and 1 or 2 voters survive none, so a topic
//! that asks for a size not offered gets the next larger one. A topic's
//! group never changes with the membership: the sets are those of the
//! formed cluster, and a topic asking for more than the smaller sets
//! offer is in the whole set, whatever its size now.

use std::collections::{BTreeMap, BTreeSet};

use crate::cluster_map::ClusterMap;
use crate::{GroupId, NodeId};

/// The groups of a cluster and their voters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    map: ClusterMap,
    /// Every member, sorted.
    members: Vec<NodeId>,
}

impl Placement {
    /// The placement of a cluster formed of `members` with `per_set`
    /// groups per size.
    pub fn new(members: impl IntoIterator<Item = NodeId>, per_set: u32) -> Placement {
        let peers: BTreeMap<NodeId, String> =
            members.into_iter().map(|m| (m, String::new())).collect();
        Placement::from_map(&ClusterMap::formed(&peers, per_set))
    }

    /// The placement `map` gives.
    pub fn from_map(map: &ClusterMap) -> Placement {
        Placement {
            members: map.members.keys().copied().collect(),
            map: map.clone(),
        }
    }

    /// Groups per size.
    pub fn per_set(&self) -> u32 {
        self.map.per_set
    }

    /// The members, sorted.
    pub fn members(&self) -> &[NodeId] {
        &self.members
    }

    /// The group sizes offered, largest first (the whole set's is the
    /// cluster's size now).
    pub fn sizes(&self) -> Vec<usize> {
        self.map
            .sets
            .iter()
            .map(|s| if s.whole { self.cluster() } else { s.size })
            .collect()
    }

    fn cluster(&self) -> usize {
        self.members.len().max(1)
    }

    /// The set a topic of `replicas` replicas is in: the smallest of the
    /// smaller sets that is at least `replicas`, else the whole set.
    fn set_for(&self, replicas: u8) -> Option<&crate::cluster_map::Set> {
        let want = usize::from(replicas.max(1));
        self.map
            .sets
            .iter()
            .rev()
            .find(|s| !s.whole && s.size >= want)
            .or_else(|| self.map.sets.iter().find(|s| s.whole))
    }

    /// The size a topic of `replicas` replicas gets.
    pub fn size_for(&self, replicas: u8) -> usize {
        match self.set_for(replicas) {
            Some(s) if !s.whole => s.size,
            _ => self.cluster(),
        }
    }

    /// The group at `index` (taken modulo the groups per set) of the set
    /// a topic of `replicas` replicas gets.
    pub fn group(&self, replicas: u8, index: u32) -> GroupId {
        self.set_for(replicas).map_or(0, |s| s.first) + index % self.per_set()
    }

    /// The group at `index` of the cluster-wide set: every member votes in
    /// it.
    pub fn whole(&self, index: u32) -> GroupId {
        index % self.per_set()
    }

    /// The size of `group`'s set, if it is a group of this cluster.
    pub fn size_of(&self, group: GroupId) -> Option<usize> {
        let set = self.map.set_of(group)?;
        Some(if set.whole { self.cluster() } else { set.size })
    }

    /// The voters of `group`, if it is a group of this cluster.
    pub fn voters(&self, group: GroupId) -> Option<BTreeSet<NodeId>> {
        self.map.voters(group)
    }

    /// Every group of the cluster, by id.
    pub fn groups(&self) -> Vec<GroupId> {
        self.map.groups()
    }

    /// The groups `member` votes in, by id.
    pub fn groups_of(&self, member: NodeId) -> Vec<GroupId> {
        self.groups()
            .into_iter()
            .filter(|g| self.voters(*g).is_some_and(|v| v.contains(&member)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_members_offer_one_set_numbered_as_before() {
        let p = Placement::new([3, 1, 2], 4);
        assert_eq!(p.sizes(), vec![3]);
        assert_eq!(p.groups(), vec![0, 1, 2, 3]);
        for r in 1..=5 {
            assert_eq!(p.group(r, 6), 2, "replicas={r}");
        }
        assert_eq!(p.voters(2), Some(BTreeSet::from([1, 2, 3])));
        assert_eq!(p.groups_of(2), vec![0, 1, 2, 3]);
        assert_eq!(p.voters(4), None);
    }

    #[test]
    fn five_members_offer_groups_of_five_and_of_three() {
        let p = Placement::new([10, 20, 30, 40, 50], 4);
        assert_eq!(p.sizes(), vec![5, 3]);
        assert_eq!(p.groups(), vec![0, 1, 2, 3, 8, 9, 10, 11]);
        assert_eq!(p.size_for(1), 3);
        assert_eq!(p.size_for(3), 3);
        assert_eq!(p.size_for(4), 5);
        assert_eq!(p.size_for(9), 5);
        assert_eq!(p.group(3, 1), 9);
        assert_eq!(p.group(5, 1), 1);
        assert_eq!(p.whole(9), 1);
        assert_eq!(p.size_of(9), Some(3));
        assert_eq!(p.size_of(5), None);
        assert_eq!(p.voters(8), Some(BTreeSet::from([10, 20, 30])));
        assert_eq!(p.voters(11), Some(BTreeSet::from([40, 50, 10])));
        assert_eq!(p.voters(1), Some(BTreeSet::from([10, 20, 30, 40, 50])));
        // Every member votes in the whole set and in some of the others.
        assert_eq!(p.groups_of(10), vec![0, 1, 2, 3, 8, 11]);
        assert_eq!(p.groups_of(30), vec![0, 1, 2, 3, 8, 9, 10]);
    }

    #[test]
    fn sets_spread_their_groups_over_every_member() {
        for n in 1..=9u64 {
            let p = Placement::new(1..=n, 16);
            for size in p.sizes() {
                assert!(size % 2 == 1 || size == n as usize);
                let mut counts = vec![0; n as usize];
                for g in p
                    .groups()
                    .into_iter()
                    .filter(|g| p.size_of(*g) == Some(size))
                {
                    let v = p.voters(g).unwrap();
                    assert_eq!(v.len(), size, "n={n} group {g}");
                    for m in v {
                        counts[(m - 1) as usize] += 1;
                    }
                }
                let (lo, hi) = (counts.iter().min(), counts.iter().max());
                assert!(
                    hi.unwrap() - lo.unwrap() <= size,
                    "n={n} size={size} {counts:?}"
                );
            }
        }
    }

    #[test]
    fn seven_members_offer_seven_five_and_three() {
        let p = Placement::new(1..=7, 2);
        assert_eq!(p.sizes(), vec![7, 5, 3]);
        assert_eq!(p.groups(), vec![0, 1, 4, 5, 8, 9]);
        assert_eq!(p.group(2, 0), 8);
        assert_eq!(p.group(4, 0), 4);
        assert_eq!(p.group(6, 1), 1);
        let p = Placement::new(1..=4, 2);
        assert_eq!(p.sizes(), vec![4, 3]);
        assert_eq!(p.group(3, 1), 3);
    }
}

//! Which members vote in which Raft group. Never: I/O, or which topic goes
//! where (nsqd's core hashes a topic's name to an index; this says which
//! group that index is for a group size, and who its voters are).
//!
//! Groups come in sets, one set per group size the cluster offers, each set
//! with the same number of groups (`--replication-groups`). The set of the
//! cluster's size comes first and has ids `0..per_set`: every member votes
//! in all of them, as before sets existed, so a cluster whose data came
//! from an earlier build finds its groups where it left them. Smaller sets
//! follow, each group's voters `size` members in a row of the sorted
//! member list starting at a different member, so a set's groups (and
//! their leaders and logs) spread over the whole cluster.
//!
//! The sizes offered are the cluster's size and every odd size from 3
//! below it: 5 members offer groups of 5 and 3, 7 offer 7, 5 and 3. An odd
//! group loses no more to a majority than the even size above it (3 and 4
//! both survive one lost member), and 1 or 2 voters survive none, so a
//! topic that asks for a size not offered gets the next larger one.
//!
//! The ids depend only on the member count and `per_set`, which every
//! member must agree on (the hello checks both: `network/hello.rs`).

use std::collections::BTreeSet;

use crate::{GroupId, NodeId};

/// The groups of a cluster and their voters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Every member, sorted.
    members: Vec<NodeId>,
    per_set: u32,
    /// The group sizes offered, the largest (the cluster's) first.
    sizes: Vec<usize>,
}

impl Placement {
    /// The placement of a cluster of `members` with `per_set` groups per
    /// size.
    pub fn new(members: impl IntoIterator<Item = NodeId>, per_set: u32) -> Placement {
        let members: Vec<NodeId> = members
            .into_iter()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let n = members.len().max(1);
        let mut sizes = vec![n];
        // the largest odd size below the cluster's
        let mut s = (n - 1).saturating_sub(n % 2);
        while s >= 3 {
            sizes.push(s);
            s -= 2;
        }
        Placement {
            members,
            per_set: per_set.max(1),
            sizes,
        }
    }

    /// Groups per size.
    pub fn per_set(&self) -> u32 {
        self.per_set
    }

    /// The members, sorted.
    pub fn members(&self) -> &[NodeId] {
        &self.members
    }

    /// The group sizes offered, largest first.
    pub fn sizes(&self) -> &[usize] {
        &self.sizes
    }

    fn cluster(&self) -> usize {
        self.members.len().max(1)
    }

    /// The size a topic of `replicas` replicas gets: the smallest offered
    /// that is at least `replicas` (the cluster's when it asks for more).
    pub fn size_for(&self, replicas: u8) -> usize {
        let want = usize::from(replicas.max(1));
        self.sizes
            .iter()
            .rev()
            .copied()
            .find(|&s| s >= want)
            .unwrap_or_else(|| self.cluster())
    }

    /// The group at `index` (taken modulo the groups per set) of the set
    /// a topic of `replicas` replicas gets.
    pub fn group(&self, replicas: u8, index: u32) -> GroupId {
        let size = self.size_for(replicas);
        (self.cluster() - size) as u32 * self.per_set + index % self.per_set
    }

    /// The group at `index` of the cluster-wide set: every member votes in
    /// it.
    pub fn whole(&self, index: u32) -> GroupId {
        index % self.per_set
    }

    /// The size of `group`'s set, if it is a group of this cluster.
    pub fn size_of(&self, group: GroupId) -> Option<usize> {
        let below = (group / self.per_set) as usize;
        let size = self.cluster().checked_sub(below)?;
        self.sizes.contains(&size).then_some(size)
    }

    /// The voters of `group`, if it is a group of this cluster.
    pub fn voters(&self, group: GroupId) -> Option<BTreeSet<NodeId>> {
        let size = self.size_of(group)?;
        let n = self.members.len();
        if size >= n {
            return Some(self.members.iter().copied().collect());
        }
        let start = (group % self.per_set) as usize % n;
        Some((0..size).map(|k| self.members[(start + k) % n]).collect())
    }

    /// Every group of the cluster, by id.
    pub fn groups(&self) -> Vec<GroupId> {
        let n = self.cluster();
        self.sizes
            .iter()
            .flat_map(|&s| {
                let first = (n - s) as u32 * self.per_set;
                first..first + self.per_set
            })
            .collect()
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
        assert_eq!(p.sizes(), &[3]);
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
        assert_eq!(p.sizes(), &[5, 3]);
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
            for &size in p.sizes() {
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
        assert_eq!(p.sizes(), &[7, 5, 3]);
        assert_eq!(p.groups(), vec![0, 1, 4, 5, 8, 9]);
        assert_eq!(p.group(2, 0), 8);
        assert_eq!(p.group(4, 0), 4);
        assert_eq!(p.group(6, 1), 1);
        let p = Placement::new(1..=4, 2);
        assert_eq!(p.sizes(), &[4, 3]);
        assert_eq!(p.group(3, 1), 3);
    }
}

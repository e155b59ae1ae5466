//! What a member shows of a replicated topic's group, per replica: how far
//! each replica's log is known to match the leader's, and how many entries
//! it is behind. Owns the rules: who knows what (only the group's leader
//! tracks every replica's matched index; a follower knows its own log and
//! nothing of the others') and how lag is counted from those numbers.
//! Never: Raft or its metrics (`crate::server::replication` reads
//! openraft's and passes the numbers in). Design: docs/replication.md,
//! "What a member shows".

use std::collections::BTreeMap;

use nsq_protocol::stats::ReplicaStats;

/// The numbers a member has about its group, taken from one look at its
/// Raft metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupView {
    /// This member's node id.
    pub me: u64,
    /// The group's voters.
    pub voters: Vec<u64>,
    /// Whether this member leads the group now.
    pub leads: bool,
    /// The last index of this member's log (None: empty).
    pub last_log_index: Option<u64>,
    /// On the leader only: each replica's matched index as the leader
    /// tracks it (None inside: nothing known to match yet). Its own entry
    /// is its own flushed log.
    pub matched: Option<BTreeMap<u64, Option<u64>>>,
}

/// Entries a replica is behind a leader whose log ends at `leader_last`,
/// when the leader knows the replica has matched up to `matched`. Unknown
/// (None) when the leader knows of no match: the replica may be down, or
/// not yet heard from since the election, and counting the whole log
/// against it would be a guess. An empty leader log has nothing to lag.
pub fn lag(leader_last: Option<u64>, matched: Option<u64>) -> Option<u64> {
    match (leader_last, matched) {
        (None, _) => Some(0),
        (Some(last), Some(m)) => Some(last.saturating_sub(m)),
        (Some(_), None) => None,
    }
}

/// Every replica of the group (voters, and any other node the leader
/// replicates to), in node id order, with what this member knows of it.
pub fn replicas(v: &GroupView) -> Vec<ReplicaStats> {
    let mut nodes = v.voters.clone();
    if let (Some(m), true) = (&v.matched, v.leads) {
        nodes.extend(m.keys().copied());
    }
    nodes.sort_unstable();
    nodes.dedup();
    nodes
        .into_iter()
        .map(|node_id| match (&v.matched, v.leads) {
            (Some(m), true) => {
                let matched_index = m.get(&node_id).copied().flatten();
                ReplicaStats {
                    node_id,
                    matched_index,
                    lag: lag(v.last_log_index, matched_index),
                }
            }
            // A follower (or a member between leaders) knows its own log;
            // how far behind the leader it is, it does not know.
            _ if node_id == v.me => ReplicaStats {
                node_id,
                matched_index: v.last_log_index,
                lag: None,
            },
            _ => ReplicaStats {
                node_id,
                ..ReplicaStats::default()
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(node_id: u64, matched_index: Option<u64>, lag: Option<u64>) -> ReplicaStats {
        ReplicaStats {
            node_id,
            matched_index,
            lag,
        }
    }

    #[test]
    fn lag_counts_entries_behind_the_leaders_last() {
        assert_eq!(lag(Some(10), Some(10)), Some(0));
        assert_eq!(lag(Some(10), Some(7)), Some(3));
        // Matched past the leader's last (a report between two looks).
        assert_eq!(lag(Some(10), Some(12)), Some(0));
        assert_eq!(lag(Some(10), None), None);
        assert_eq!(lag(None, None), Some(0));
    }

    #[test]
    fn the_leader_knows_every_replica() {
        let v = GroupView {
            me: 1,
            voters: vec![3, 1, 2],
            leads: true,
            last_log_index: Some(20),
            matched: Some(BTreeMap::from([(1, Some(20)), (2, Some(18)), (3, None)])),
        };
        assert_eq!(
            replicas(&v),
            vec![
                r(1, Some(20), Some(0)),
                r(2, Some(18), Some(2)),
                r(3, None, None)
            ]
        );
    }

    #[test]
    fn a_leader_lists_a_voter_it_does_not_track_and_a_learner_it_does() {
        let v = GroupView {
            me: 1,
            voters: vec![1, 2],
            leads: true,
            last_log_index: Some(5),
            matched: Some(BTreeMap::from([(1, Some(5)), (4, Some(1))])),
        };
        assert_eq!(
            replicas(&v),
            vec![
                r(1, Some(5), Some(0)),
                r(2, None, None),
                r(4, Some(1), Some(4))
            ]
        );
    }

    #[test]
    fn a_follower_knows_only_its_own_log() {
        let v = GroupView {
            me: 2,
            voters: vec![1, 2, 3],
            leads: false,
            last_log_index: Some(17),
            matched: None,
        };
        assert_eq!(
            replicas(&v),
            vec![r(1, None, None), r(2, Some(17), None), r(3, None, None)]
        );
        // Matched numbers left over from a leadership just lost are not
        // shown as the leader's knowledge.
        let stale = GroupView {
            matched: Some(BTreeMap::from([(1, Some(3))])),
            ..v
        };
        assert_eq!(replicas(&stale)[1], r(2, Some(17), None));
        assert_eq!(replicas(&stale)[0], r(1, None, None));
    }
}

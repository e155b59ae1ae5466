//! nsq-rs replicated topics as nsqadmin shows them: what each nsqd's
//! `/stats` says of a replicated topic (its `replicas` and its group:
//! the leader, its address, each replica's lag), passed through per node
//! and for the cluster view, and which nodes' numbers count in the
//! cluster totals.
//!
//! Every member of a replicated topic's group holds the topic, so summing
//! the members as for an unreplicated topic would count a message once per
//! member as soon as followers hold copies. The totals are the leader's:
//! the node whose own report says it leads the group. When none says so
//! (an election, a member unreachable, or an nsqd that is no member), the
//! nodes are summed as for any topic. Unreplicated topics (no such keys in
//! `/stats`, as from every NSQ) are untouched.
//!
//! Nothing here does I/O.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

pub use nsq_protocol::stats::TopicReplication;

/// A topic's replication keys, read from an nsqd's `/stats` and answered
/// in nsqadmin's topic objects; both absent on an unreplicated topic.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Replicated {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replication: Option<TopicReplication>,
}

impl Replicated {
    fn leads(&self) -> bool {
        self.replication.as_ref().is_some_and(|r| r.is_leader)
    }
}

/// Which of a topic's per-node entries counts in its totals: the first
/// that says it leads the topic's group, or None (sum them all). Two that
/// say so (an old leader that has not yet heard of the new one) still
/// count once.
pub fn counted(per_node: &[&Replicated]) -> Option<usize> {
    per_node.iter().position(|r| r.leads())
}

/// For the per-node entries of many topics (as one `/stats` fan-out
/// gives them), whether each counts in its topic's totals (`counted`
/// applied per topic name).
pub fn counts_in<T>(
    all: &[T],
    name: impl Fn(&T) -> &str,
    replicated: impl Fn(&T) -> &Replicated,
) -> Vec<bool> {
    // One pass: the first entry per topic that leads (a fan-out over 1,000
    // topics on 3 nsqds has 3,000 entries; comparing each with every other
    // would be 9 million name comparisons per page).
    let mut first_leader: HashMap<&str, usize> = HashMap::new();
    for (i, t) in all.iter().enumerate() {
        if replicated(t).leads() {
            first_leader.entry(name(t)).or_insert(i);
        }
    }
    all.iter()
        .enumerate()
        .map(|(i, t)| first_leader.get(name(t)).is_none_or(|&l| l == i))
        .collect()
}

/// What the cluster view of a topic shows of its replication: the
/// counted node's, else the first node's that reports a group (replicas
/// from any node that has them).
pub fn cluster_view(per_node: &[&Replicated]) -> Replicated {
    let from = counted(per_node)
        .or_else(|| per_node.iter().position(|r| r.replication.is_some()))
        .map(|i| per_node[i].clone())
        .unwrap_or_default();
    Replicated {
        replicas: from
            .replicas
            .or_else(|| per_node.iter().find_map(|r| r.replicas)),
        ..from
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(is_leader: bool, leader: Option<u64>) -> Replicated {
        Replicated {
            replicas: Some(3),
            replication: Some(TopicReplication {
                group: 2,
                leader,
                is_leader,
                ..Default::default()
            }),
        }
    }

    #[test]
    fn the_leader_counts_once() {
        let (a, b, c) = (
            member(false, Some(2)),
            member(true, Some(2)),
            member(true, Some(2)),
        );
        assert_eq!(counted(&[&a, &b, &c]), Some(1));
        assert_eq!(cluster_view(&[&a, &b, &c]), b);
    }

    #[test]
    fn per_topic_in_a_mixed_list() {
        let plain = Replicated::default();
        let (f, l) = (member(false, Some(2)), member(true, Some(2)));
        let all = [
            ("r", &f),
            ("plain", &plain),
            ("r", &l),
            ("plain", &plain),
            ("s", &f),
        ];
        assert_eq!(
            counts_in(&all, |t| t.0, |t| t.1),
            vec![false, true, true, true, true]
        );
    }

    #[test]
    fn without_a_leader_every_node_counts() {
        let (a, b) = (member(false, None), member(false, None));
        assert_eq!(counted(&[&a, &b]), None);
        assert_eq!(cluster_view(&[&a, &b]), a);
        let plain = Replicated::default();
        assert_eq!(counted(&[&plain, &plain]), None);
        assert_eq!(cluster_view(&[&plain]), plain);
        assert_eq!(
            serde_json::to_string(&plain).unwrap(),
            "{}",
            "nothing of it on an unreplicated topic"
        );
    }
}

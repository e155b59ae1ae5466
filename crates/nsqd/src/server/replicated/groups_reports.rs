//! What a member's groups report: the member and each of its groups for
//! `/stats`, `/metrics` and `GET /replication`, and a replicated topic's
//! group as this member sees it. A child of `groups.rs` (it reads the
//! groups' openraft metrics); the lag rule is the core's
//! (`core::replicated::replica_lag`).

use std::sync::atomic::Ordering;

use nsq_protocol::stats::{
    ReplicationChange, ReplicationGroup, ReplicationPeer, ReplicationStats, TopicReplication,
};
use nsq_replication::network::hello::PROTOCOL;

use super::Groups;
use crate::core::replicated::replay::RetentionSpec;
use crate::core::replicated::replica_lag::{self, GroupView};
use crate::core::replicated::serving::Leader;

impl Groups {
    /// What `/stats` and `GET /replication` show.
    pub fn stats(&self) -> ReplicationStats {
        let map = self.map();
        ReplicationStats {
            node_id: self.node_id,
            address: self.address.clone(),
            peers: self
                .members()
                .iter()
                .map(|(id, addr)| ReplicationPeer {
                    node_id: *id,
                    address: addr.clone(),
                    protocol: if *id == self.node_id {
                        Some(PROTOCOL)
                    } else {
                        self.peer_protocol(*id)
                    },
                })
                .collect(),
            standing: self.standing.borrow().name().to_string(),
            protocol: self.cluster_protocol(),
            groups: self
                .local
                .iter()
                .map(|(id, l)| {
                    let m = l.raft.metrics().borrow().clone();
                    ReplicationGroup {
                        group: *id,
                        leader: m.current_leader,
                        term: m.current_term,
                        state: format!("{:?}", m.state).to_lowercase(),
                        last_log_index: m.last_log_index,
                        last_applied: m.last_applied.map(|l| l.index),
                        snapshot: m.snapshot.map(|l| l.index),
                        purged: m.purged.map(|l| l.index),
                        quiet: self
                            .quiet
                            .get(*id as usize)
                            .is_some_and(|q| q.load(Ordering::Relaxed)),
                    }
                })
                .collect(),
            map_version: map.as_ref().map_or(0, |m| m.version),
            change: map.as_ref().and_then(|m| {
                m.pending.as_ref().map(|p| ReplicationChange {
                    change: p.change.to_string(),
                    groups_done: p.converged.len(),
                    groups: m.groups().len(),
                })
            }),
        }
    }

    /// What `/stats` shows of replicated topic `topic` (of `replicas`
    /// replicas): its group as this member sees it. The leader and its
    /// address are those a SUB refused here names; each replica's lag is
    /// known on the leader alone (`core::replica_lag`), and a member that
    /// does not vote in the group knows only who its voters are.
    pub fn topic_stats(&self, topic: &str, replicas: u8) -> TopicReplication {
        let group = self.group_of(topic, replicas);
        let leader = match self.leader(group) {
            Leader::Here => Some(self.node_id),
            Leader::Node(n) => Some(n),
            Leader::None | Leader::NotMember => None,
        };
        let Some(l) = self.local.get(&group) else {
            let view = GroupView {
                me: self.node_id,
                voters: self
                    .placement()
                    .voters(group)
                    .map(|v| v.into_iter().collect())
                    .unwrap_or_default(),
                leads: false,
                last_log_index: None,
                matched: None,
            };
            return TopicReplication {
                group,
                leader,
                leader_address: leader.and_then(|n| self.serving_address(group, n)),
                replicas: replica_lag::replicas(&view),
                ..TopicReplication::default()
            };
        };
        let view = {
            let m = l.raft.metrics();
            let m = m.borrow();
            GroupView {
                me: self.node_id,
                voters: m.membership_config.membership().voter_ids().collect(),
                leads: leader == Some(self.node_id),
                last_log_index: m.last_log_index,
                matched: m.replication.as_ref().map(|r| {
                    r.iter()
                        .map(|(node, log_id)| (*node, log_id.map(|l| l.index)))
                        .collect()
                }),
            }
        };
        TopicReplication {
            group,
            leader,
            leader_address: leader.and_then(|n| self.serving_address(group, n)),
            is_leader: view.leads,
            replicas: replica_lag::replicas(&view),
            last_log_index: view.last_log_index,
            committed_index: *l.committed.borrow(),
            unfinished: self
                .progress(group)
                .and_then(|p| p.lock().topic(topic).map(|t| t.unfinished()))
                .unwrap_or(0),
            put_back: self.put_back.lock().get(topic).copied().unwrap_or(0),
            ..self.retention_stats(group, topic)
        }
    }

    /// A topic's retention as `/stats` shows it (nothing without one).
    fn retention_stats(&self, group: nsq_replication::GroupId, topic: &str) -> TopicReplication {
        let Some(p) = self.progress(group) else {
            return TopicReplication::default();
        };
        let p = p.lock();
        let Some(r) = p.topic(topic).and_then(|t| t.retention()) else {
            return TopicReplication::default();
        };
        let (retained_messages, retained_bytes) = r.kept();
        let spec = RetentionSpec {
            age_ms: r.age_ms,
            bytes: r.bytes,
        };
        TopicReplication {
            retention: Some(spec.to_string()),
            retained_messages,
            retained_bytes,
            ..TopicReplication::default()
        }
    }
}

//! nsqd as a member of a replication cluster (`--replication-address`,
//! `--replication-peer`, `--replication-groups`): starts the
//! `nsq_replication` member on `<data-path>/raft/`, initialises a new
//! cluster from the lowest node id, reports the groups for `/stats`,
//! `/metrics` and `GET /replication`, and stops the member on nsqd's one
//! shutdown path. Never: what an entry means (the core decides that) or
//! Raft itself (the replication crate). Without the flags nothing here
//! runs. Design: docs/replication.md, "nsqd integration".

use std::collections::BTreeMap;
use std::path::Path;

use nsq_protocol::stats::{ReplicationGroup, ReplicationPeer, ReplicationStats};
use nsq_replication::group::{ClusterMember, MemberError, MemberOptions};
use nsq_replication::log::LogOptions;
use nsq_replication::network::ClusterTls;
use nsq_replication::{GroupId, NodeId, Raft};
use parking_lot::Mutex;

use crate::options::Options;

/// Why nsqd could not become a member.
#[derive(Debug, thiserror::Error)]
pub enum ReplicationError {
    #[error("replication TLS - {0}")]
    Tls(#[from] nsq_http::tls::TlsError),
    #[error("replication - {0}")]
    Member(#[from] MemberError),
}

/// Applied entries a group may have waiting for nsqd before applying waits.
const APPLIED_CAPACITY: usize = 4096;

/// The running member, as nsqd holds it.
pub struct Replication {
    node_id: NodeId,
    address: String,
    peers: BTreeMap<NodeId, String>,
    /// Each group's Raft handle, for reports (the member keeps its own).
    groups: Vec<(GroupId, Raft)>,
    /// Taken by [`Replication::shutdown`].
    member: Mutex<Option<ClusterMember>>,
}

impl Replication {
    /// Starts the member with nsqd's flags, under `data_dir/raft/`. The
    /// member with the lowest node id initialises the groups when it has
    /// no Raft state yet (a new cluster); every other start joins by
    /// being a configured voter. Restarts keep their state and never
    /// initialise again.
    pub async fn start(opts: &Options, data_dir: &Path) -> Result<Replication, ReplicationError> {
        let node_id = opts.node_id as NodeId;
        let peers = opts.replication_peers.0.clone();
        let fresh = !data_dir.join("raft").exists();
        let tls = ClusterTls::from_flags(super::tls::daemon_tls(opts))?;
        let election = opts.replication_election_timeout.as_millis().max(50) as u64;
        let raft = openraft::Config {
            cluster_name: "nsq-rs".into(),
            heartbeat_interval: (election / 5).max(10),
            election_timeout_min: election,
            election_timeout_max: election * 2,
            ..Default::default()
        };
        let member = ClusterMember::start(MemberOptions {
            node_id,
            listen: opts.replication_address.clone(),
            peers: peers.clone(),
            data_dir: data_dir.to_path_buf(),
            groups: opts.replication_groups.clamp(1, 1024) as u32,
            raft,
            tls,
            log: LogOptions::default(),
            applied_capacity: APPLIED_CAPACITY,
        })
        .await?;
        tracing::info!(
            node_id,
            groups = member.groups.len(),
            "REPLICATION: listening on {}",
            member.local_addr
        );
        let lowest = peers.keys().next().copied();
        if fresh && lowest == Some(node_id) {
            // openraft answers NotAllowed (treated as done) when the log
            // already holds a membership.
            if let Err(e) = member.initialize().await {
                tracing::error!(error = %e, "REPLICATION: failed to initialise the cluster");
            } else {
                tracing::info!(
                    members = peers.len(),
                    "REPLICATION: initialised a new cluster"
                );
            }
        }
        Ok(Replication {
            node_id,
            address: member.local_addr.to_string(),
            peers,
            groups: member
                .groups
                .iter()
                .map(|g| (g.id, g.raft.clone()))
                .collect(),
            member: Mutex::new(Some(member)),
        })
    }

    /// Members of the cluster, this one included.
    pub fn cluster_size(&self) -> usize {
        self.peers.len()
    }

    /// What `/stats` and `GET /replication` show.
    pub fn stats(&self) -> ReplicationStats {
        ReplicationStats {
            node_id: self.node_id,
            address: self.address.clone(),
            peers: self
                .peers
                .iter()
                .map(|(id, addr)| ReplicationPeer {
                    node_id: *id,
                    address: addr.clone(),
                })
                .collect(),
            groups: self
                .groups
                .iter()
                .map(|(id, raft)| {
                    let m = raft.metrics().borrow().clone();
                    ReplicationGroup {
                        group: *id,
                        leader: m.current_leader,
                        term: m.current_term,
                        state: format!("{:?}", m.state).to_lowercase(),
                        last_log_index: m.last_log_index,
                        last_applied: m.last_applied.map(|l| l.index),
                    }
                })
                .collect(),
        }
    }

    /// Stops every group and the listener (once; later calls do nothing).
    pub async fn shutdown(&self) {
        let member = self.member.lock().take();
        if let Some(m) = member {
            m.shutdown().await;
            tracing::info!("REPLICATION: stopped");
        }
    }
}

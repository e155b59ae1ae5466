//! The Raft groups of this member (`--replication-address`,
//! `--replication-peer`, `--replication-groups`), as nsqd holds them:
//! starts the `nsq_replication` member on `<data-path>/raft/`, initialises
//! a new cluster from the lowest node id, commits entries to a topic's
//! group (from here or through its leader) and tracks how far this member
//! has applied each group, tells who leads each group (the watch that
//! `leadership.rs` follows), reports the groups for `/stats`, `/metrics`
//! and `GET /replication`, and stops the member on nsqd's one shutdown
//! path.
//! Never: what an entry means (the core decides that, and `apply.rs`
//! applies it to the topics) or Raft itself (the replication crate).
//! Without the flags nothing here runs. Design: docs/replication.md,
//! "nsqd integration".

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nsq_replication::committed::CommittedLog;
use nsq_replication::group::{ClusterMember, MemberError, MemberOptions};
use nsq_replication::log::LogOptions;
use nsq_replication::machine::Applied;
use nsq_replication::maps::Maps;
use nsq_replication::membership::Membership;
use nsq_replication::network::hello::Abouts;
use nsq_replication::network::ClusterTls;
use nsq_replication::placement::Placement;
use nsq_replication::propose::{ProposeError, Proposer};
use nsq_replication::quiet::QuietFlags;
use nsq_replication::snapshot::Snapshots;
use nsq_replication::standing::{applied_in_current_term, Standing};
use nsq_replication::{GroupId, NodeId, Pulses, Raft};
use parking_lot::Mutex;
use tokio::sync::{mpsc, watch};

use super::limits;
use crate::core::replicated::entry::{self, EncodeError, Entry};
use crate::core::replicated::progress::Progress;
use crate::core::replicated::replicas::group_of;
use crate::core::replicated::serving::{Leader, Seen};
use crate::options::Options;

/// What openraft reports of a group's vote, state and leader (it changes
/// with them only, not with every append).
pub type ServerMetrics = openraft::metrics::RaftServerMetrics<NodeId, nsq_replication::Member>;
/// All openraft reports of a group, applied index included.
pub type RaftMetrics = openraft::RaftMetrics<NodeId, nsq_replication::Member>;

/// Why nsqd could not become a member.
#[derive(Debug, thiserror::Error)]
pub enum ReplicationError {
    #[error("replication TLS - {0}")]
    Tls(#[from] nsq_http::tls::TlsError),
    #[error("replication - {0}")]
    Member(#[from] MemberError),
}

/// The most entries a group's log keeps below its snapshot.
const SNAPSHOT_KEEP: u64 = 1000;

/// Applied entries a group may have waiting for nsqd before applying waits.
const APPLIED_CAPACITY: usize = 4096;

/// How long a change to a replicated topic may take to be committed before
/// its client is told it failed: nsqd's HTTP client timeout, so a member
/// forwarding to the leader gives up no later than its own client would.
pub const COMMIT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why an entry was not committed; Display is the HTTP error message (503).
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error("REPLICATION_NO_LEADER")]
    NoLeader,
    #[error("REPLICATION_TIMEOUT")]
    Timeout,
    #[error("REPLICATION_FAILED")]
    Failed(String),
    /// The entry needs a protocol some member does not speak yet (a
    /// rolling upgrade in progress); the detail says which.
    #[error("REPLICATION_UPGRADE_PENDING")]
    UpgradePending(String),
    /// The group's leader refused it (a publish past the group's depth
    /// limit, as the leader counts it): why.
    #[error("{0}")]
    Refused(String),
}

impl CommitError {
    /// What went wrong, for the log (the HTTP message says less).
    pub fn detail(&self) -> &str {
        match self {
            CommitError::NoLeader => "the group has no leader",
            CommitError::Timeout => "not committed in time, or the leader changed first",
            CommitError::Failed(reason)
            | CommitError::UpgradePending(reason)
            | CommitError::Refused(reason) => reason,
        }
    }
}

impl From<ProposeError> for CommitError {
    fn from(e: ProposeError) -> CommitError {
        match e {
            ProposeError::NoLeader(_) => CommitError::NoLeader,
            // Both may still commit: a retry is harmless either way.
            ProposeError::Timeout(..) | ProposeError::LeaderChanged(_) => CommitError::Timeout,
            ProposeError::Refused { reason, .. } => CommitError::Refused(reason),
            other => CommitError::Failed(other.to_string()),
        }
    }
}

impl From<EncodeError> for CommitError {
    fn from(e: EncodeError) -> CommitError {
        CommitError::Failed(e.to_string())
    }
}

/// Where a committed entry stands on this member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Committed {
    /// Committed, and applied here before the answer.
    Applied,
    /// Committed; this member had not applied it yet when the time was up.
    Elsewhere,
}

/// A group this member votes in, as nsqd holds it.
struct Local {
    raft: Raft,
    /// The committed index its storage saved, for reports.
    committed: watch::Receiver<Option<u64>>,
    /// The last log index this member has applied to its topics.
    applied: watch::Sender<u64>,
    /// Each channel's progress through its log, as this member applied it
    /// (`core::progress`; fed by the applier).
    progress: Arc<Mutex<Progress>>,
    /// Its committed entries read back (a new leader redelivers from
    /// them).
    log: CommittedLog,
    /// The committed index its log had at start: the applier reads the
    /// entries up to it from the log
    /// (`nsq_replication::group::Group::replayed`).
    replayed: Option<u64>,
    /// Its snapshots (`snapshots.rs` asks for them).
    snapshots: Snapshots,
    /// Whether a snapshot is being taken.
    snapshotting: AtomicBool,
}

/// The running member's groups, as nsqd holds them.
pub struct Groups {
    node_id: NodeId,
    address: String,
    /// The cluster map: the members, which vote in which group
    /// (`nsq_replication::placement`).
    maps: Maps,
    /// Members added and removed online (`members.rs`).
    pub(super) membership: Membership,
    /// Who leads the groups this member does not vote in.
    pulses: Pulses,
    /// The TCP address each peer said its consumers reach it at.
    abouts: Abouts,
    /// The groups this member votes in, by id.
    local: BTreeMap<GroupId, Local>,
    proposer: Proposer,
    /// Each group's applied entries, until the appliers take them.
    subscriptions: Mutex<Vec<(GroupId, mpsc::Receiver<Applied>)>>,
    /// Per group, the last `Serving` entry applied here: the member that
    /// wrote it when it gained the group, and the TCP address it serves
    /// consumers at (a SUB refused here names it).
    serving: Mutex<BTreeMap<GroupId, (NodeId, String)>>,
    /// Per replicated topic, the messages this member put back when it
    /// gained the topic's group (each one possibly a duplicate).
    put_back: Mutex<BTreeMap<String, u64>>,
    /// Per group (by id), the snapshot it started from (index claimed and
    /// image), until its applier takes it.
    images: Mutex<BTreeMap<GroupId, (u64, bytes::Bytes)>>,
    /// `--replication-snapshot-entries`.
    snapshot_entries: u64,
    /// Whether this member votes (`nsq_replication::standing`).
    standing: watch::Receiver<Standing>,
    /// Which groups this member leads quietly (`nsq_replication::quiet`).
    quiet: QuietFlags,
    /// Latched by [`Groups::caught_up`].
    caught_up: AtomicBool,
    /// Taken by [`Groups::shutdown`].
    member: Mutex<Option<ClusterMember>>,
}

impl Groups {
    /// Starts the member with nsqd's flags, under `data_dir/raft/`. Each
    /// group is initialised by its lowest voter when that member made the
    /// group's directory (a new cluster, or a group size a grown build
    /// offers); every other start joins by being a configured voter.
    /// Restarts keep their state and never initialise again.
    /// `about`: the TCP address this nsqd serves consumers at, told to
    /// its peers.
    pub async fn start(
        opts: &Options,
        data_dir: &Path,
        about: String,
    ) -> Result<Groups, ReplicationError> {
        let node_id = opts.node_id as NodeId;
        let peers = opts.replication_peers.0.clone();
        let tls = ClusterTls::from_flags(crate::server::tls::daemon_tls(opts))?;
        let election = opts.replication_election_timeout.as_millis().max(50) as u64;
        let raft = openraft::Config {
            cluster_name: "nsq-rs".into(),
            heartbeat_interval: (election / 5).max(10),
            election_timeout_min: election,
            election_timeout_max: election * 2,
            // Followers a little behind a purge catch up from the log, not
            // from a snapshot (a second of a loaded group's entries).
            max_in_snapshot_log_to_keep: (opts.replication_snapshot_entries.max(1) as u64)
                .min(SNAPSHOT_KEEP),
            ..Default::default()
        };
        let mut member = ClusterMember::start(MemberOptions {
            node_id,
            listen: opts.replication_address.clone(),
            peers: peers.clone(),
            data_dir: data_dir.to_path_buf(),
            groups: opts.replication_groups.clamp(1, 1024) as u32,
            raft,
            tls,
            log: LogOptions::default(),
            applied_capacity: APPLIED_CAPACITY,
            about,
        })
        .await?;
        tracing::info!(
            node_id,
            groups = member.groups.len(),
            "REPLICATION: listening on {}",
            member.local_addr
        );
        // Once a majority said it never knew this member (a new cluster;
        // not if it replaces a lost one), for the groups it begins.
        // openraft answers NotAllowed (treated as done) when the log
        // already holds a membership.
        let initialize = member.initialize();
        tokio::spawn(async move {
            if let Err(e) = initialize.await {
                tracing::error!(error = %e, "REPLICATION: failed to initialise a group");
            }
        });
        let subscriptions = member
            .groups
            .iter_mut()
            .filter_map(|g| g.applied.take().map(|rx| (g.id, rx)))
            .collect();
        let images = member
            .groups
            .iter_mut()
            .filter_map(|g| g.image.take().map(|i| (g.id, i)))
            .collect();
        let local: BTreeMap<GroupId, Local> = member
            .groups
            .iter()
            .map(|g| {
                let l = Local {
                    raft: g.raft.clone(),
                    committed: g.committed.clone(),
                    applied: watch::Sender::new(0),
                    progress: Arc::default(),
                    log: g.log.clone(),
                    replayed: g.replayed,
                    snapshots: g.snapshots.clone(),
                    snapshotting: AtomicBool::new(false),
                };
                (g.id, l)
            })
            .collect();
        member.check_forwarded(limits::forward_check(
            local.iter().map(|(g, l)| (*g, l.progress.clone())),
        ));
        Ok(Groups {
            node_id,
            address: member.local_addr.to_string(),
            maps: member.maps(),
            membership: member.membership(),
            pulses: member.pulses(),
            abouts: member.abouts(),
            local,
            proposer: member.proposer(),
            subscriptions: Mutex::new(subscriptions),
            serving: Mutex::new(BTreeMap::new()),
            put_back: Mutex::new(BTreeMap::new()),
            images: Mutex::new(images),
            snapshot_entries: opts.replication_snapshot_entries.max(1) as u64,
            standing: member.standing(),
            quiet: member.quiet(),
            caught_up: AtomicBool::new(false),
            member: Mutex::new(Some(member)),
        })
    }

    /// The group a topic of `replicas` replicas lives in: its entries go
    /// there, its voters hold its messages.
    pub fn group_of(&self, topic: &str, replicas: u8) -> GroupId {
        let p = self.maps.placement();
        p.group(replicas, group_of(topic, p.per_set()))
    }

    /// The cluster map this member holds.
    pub fn map(&self) -> Option<Arc<nsq_replication::cluster_map::ClusterMap>> {
        self.maps.get()
    }

    /// Every member's cluster address, as the cluster map says now.
    pub fn members(&self) -> BTreeMap<NodeId, String> {
        self.maps
            .get()
            .map(|m| m.members.clone())
            .unwrap_or_default()
    }

    /// Which members vote in which group, as the cluster map says now.
    pub fn placement(&self) -> Arc<Placement> {
        self.maps.placement()
    }

    /// The group of the cluster's size a topic's name hashes to: its
    /// `TopicCreate` and `TopicDelete` are committed there too, so every
    /// member knows it (the same group as [`Groups::group_of`] for a
    /// topic of as many replicas as the cluster has members).
    pub fn whole_group_of(&self, topic: &str) -> GroupId {
        let p = self.maps.placement();
        p.whole(group_of(topic, p.per_set()))
    }

    /// Whether this member votes in `group` (holds its log).
    pub fn votes_in(&self, group: GroupId) -> bool {
        self.local.contains_key(&group)
    }

    /// Each group's applied entries, once (for the appliers).
    pub fn take_subscriptions(&self) -> Vec<(GroupId, mpsc::Receiver<Applied>)> {
        std::mem::take(&mut *self.subscriptions.lock())
    }

    /// Records that this member has applied `group` up to `index`.
    pub fn mark_applied(&self, group: GroupId, index: u64) {
        if let Some(l) = self.local.get(&group) {
            l.applied.send_if_modified(|at| {
                let newer = index > *at;
                if newer {
                    *at = index;
                }
                newer
            });
        }
    }

    /// Counts `n` messages of `topic` put back by this member on gaining
    /// its group.
    pub fn count_put_back(&self, topic: &str, n: u64) {
        if n > 0 {
            *self.put_back.lock().entry(topic.to_string()).or_default() += n;
        }
    }

    /// `group`'s progress, as this member applied its log.
    pub fn progress(&self, group: GroupId) -> Option<&Arc<Mutex<Progress>>> {
        self.local.get(&group).map(|l| &l.progress)
    }

    /// `group`'s committed entries, read back.
    pub fn committed_log(&self, group: GroupId) -> Option<&CommittedLog> {
        self.local.get(&group).map(|l| &l.log)
    }

    /// The last index of `group` applied again at start and not handed to
    /// its applier (which reads them from the log).
    pub fn replayed(&self, group: GroupId) -> Option<u64> {
        self.local.get(&group).and_then(|l| l.replayed)
    }

    /// The snapshot `group` started from (index claimed and image), once.
    pub fn take_image(&self, group: GroupId) -> Option<(u64, bytes::Bytes)> {
        self.images.lock().remove(&group)
    }

    /// `group`'s snapshots.
    pub fn snapshots(&self, group: GroupId) -> Option<&Snapshots> {
        self.local.get(&group).map(|l| &l.snapshots)
    }

    /// `--replication-snapshot-entries`.
    pub fn snapshot_entries(&self) -> u64 {
        self.snapshot_entries
    }

    /// Marks a snapshot of `group` as being taken; false when one already
    /// is.
    pub fn begin_snapshot(&self, group: GroupId) -> bool {
        self.local
            .get(&group)
            .is_some_and(|l| !l.snapshotting.swap(true, Ordering::AcqRel))
    }

    /// The snapshot of `group` begun is done (taken or not).
    pub fn end_snapshot(&self, group: GroupId) {
        if let Some(l) = self.local.get(&group) {
            l.snapshotting.store(false, Ordering::Release);
        }
    }

    /// How far this member has applied `group` (0 before the first entry).
    pub fn applied(&self, group: GroupId) -> u64 {
        self.local.get(&group).map_or(0, |l| *l.applied.borrow())
    }

    /// Commits `entry` to the group of its topic (of `replicas` replicas)
    /// within [`COMMIT_TIMEOUT`], from here or through the group's leader,
    /// then waits (in what is left of that time) until this member has
    /// applied it too, so the client that asked here sees the change here.
    /// A `TopicCreate` or `TopicDelete` of a topic whose group is smaller
    /// than the cluster is also committed to its whole-cluster group
    /// afterwards, so every member knows the topic; the topic's own group
    /// first, so its voters hold it before any other member takes a
    /// publish to it.
    pub async fn commit(&self, replicas: u8, entry: &Entry) -> Result<Committed, CommitError> {
        let Some(topic) = entry.topic() else {
            return Err(CommitError::Failed(
                "an entry of no topic has no group".into(),
            ));
        };
        let group = self.group_of(topic, replicas);
        let whole = self.whole_group_of(topic);
        if group != whole && matches!(entry, Entry::TopicCreate { .. } | Entry::TopicDelete { .. })
        {
            self.commit_to(group, entry).await?;
            return self.commit_to(whole, entry).await;
        }
        self.commit_to(group, entry).await
    }

    /// [`Groups::commit`] to `group` (an entry of no topic).
    pub async fn commit_to(&self, group: GroupId, entry: &Entry) -> Result<Committed, CommitError> {
        let payload = entry.encode()?;
        let needs = entry::protocol_of(&payload);
        if needs > self.cluster_protocol() {
            return Err(CommitError::UpgradePending(self.upgrade_pending(needs)));
        }
        let deadline = tokio::time::Instant::now() + COMMIT_TIMEOUT;
        let index = self
            .proposer
            .propose(group, payload, COMMIT_TIMEOUT)
            .await?;
        let Some(l) = self.local.get(&group) else {
            return Ok(Committed::Elsewhere);
        };
        let mut rx = l.applied.subscribe();
        let applied = tokio::time::timeout_at(deadline, rx.wait_for(|at| *at >= index)).await;
        Ok(match applied {
            Ok(Ok(_)) => Committed::Applied,
            _ => Committed::Elsewhere,
        })
    }

    /// The replication protocol every member speaks, as far as this one
    /// has met them (`nsq_replication::network::hello`): an entry that
    /// needs more is not proposed.
    pub fn cluster_protocol(&self) -> u32 {
        let members = self.members();
        let peers = members.keys().copied().filter(|p| *p != self.node_id);
        self.abouts.cluster_protocol(peers)
    }

    /// The protocol peer `node` spoke when the two last met.
    pub fn peer_protocol(&self, node: NodeId) -> Option<u32> {
        self.abouts.protocol(node)
    }

    fn upgrade_pending(&self, needs: u32) -> String {
        let behind: Vec<String> = (self.members().keys())
            .filter(|p| **p != self.node_id)
            .filter(|p| self.abouts.protocol(**p).is_none_or(|v| v < needs))
            .map(|p| match self.abouts.protocol(*p) {
                Some(v) => format!("node {p} speaks {v}"),
                None => format!("node {p} not met since this member started"),
            })
            .collect();
        format!(
            "the entry needs replication protocol {needs}, and {}: upgrade every member first",
            behind.join(", ")
        )
    }

    /// Records a committed `Serving` entry of `group`.
    pub fn record_serving(&self, group: GroupId, node: NodeId, address: String) {
        self.serving.lock().insert(group, (node, address));
    }

    /// The TCP address consumers reach member `node` at, as its last
    /// `Serving` entry in `group` says, else in any other group (the
    /// moment between its election and its entry's commit), else as it
    /// said itself when the two members met (a group this member does not
    /// vote in); None when neither is known.
    pub fn serving_address(&self, group: GroupId, node: NodeId) -> Option<String> {
        let serving = self.serving.lock();
        match serving.get(&group) {
            Some((n, a)) if *n == node => Some(a.clone()),
            _ => serving
                .values()
                .find(|(n, _)| *n == node)
                .map(|(_, a)| a.clone())
                .or_else(|| self.abouts.get(node)),
        }
    }

    /// Who leads the group of topic `topic` (of `replicas` replicas), as
    /// this member sees it.
    pub fn topic_leader(&self, topic: &str, replicas: u8) -> Leader {
        self.leader(self.group_of(topic, replicas))
    }

    /// Whether this member leads `group` now.
    pub fn leads(&self, group: GroupId) -> bool {
        self.leader(group) == Leader::Here
    }

    /// The leader of `group` as this member sees it now: as its Raft
    /// says in a group it votes in, as its peers' pulses say in another.
    pub fn leader(&self, group: GroupId) -> Leader {
        if let Some(l) = self.local.get(&group) {
            return seen(self.node_id, &l.raft.server_metrics().borrow()).1;
        }
        match self.pulses.leader(group) {
            Some((n, _)) if n != self.node_id => Leader::Node(n),
            _ => Leader::None,
        }
    }

    /// `group`'s leadership reports (the applier follows them too).
    pub fn leadership_watch(&self, group: GroupId) -> Option<watch::Receiver<ServerMetrics>> {
        self.local.get(&group).map(|l| l.raft.server_metrics())
    }

    /// `group`'s full reports (every apply changes them).
    pub fn metrics_watch(&self, group: GroupId) -> Option<watch::Receiver<RaftMetrics>> {
        self.local.get(&group).map(|l| l.raft.metrics())
    }

    /// Whether `group`'s state machine here has applied an entry of the
    /// current term. A new leader's first entry (openraft's blank) follows
    /// every entry of earlier terms, so by then all of them have been
    /// handed to the applier.
    pub fn applied_current_term(&self, group: GroupId) -> bool {
        self.metrics_watch(group).is_some_and(|m| {
            let m = m.borrow();
            m.last_applied
                .is_some_and(|l| l.leader_id.get_term() == m.current_term)
        })
    }

    /// Each group's leadership reports, for the watchers of `leadership.rs`.
    pub fn leadership_watches(&self) -> Vec<(GroupId, watch::Receiver<ServerMetrics>)> {
        self.local
            .iter()
            .map(|(id, l)| (*id, l.raft.server_metrics()))
            .collect()
    }

    pub fn node_id(&self) -> NodeId {
        self.node_id
    }

    /// Whether every group has applied, since this start, an entry of the
    /// term it is in under a known leader: from then on this member has
    /// every topic the groups created before (it stays true).
    pub fn caught_up(&self) -> bool {
        if self.caught_up.load(Ordering::Relaxed) {
            return true;
        }
        let all = self.local.values().all(|l| {
            let m = l.raft.metrics().borrow().clone();
            applied_in_current_term(
                m.current_term,
                m.current_leader,
                m.last_applied.map(|l| l.leader_id.get_term()),
            )
        });
        if all {
            self.caught_up.store(true, Ordering::Relaxed);
        }
        all
    }

    /// Members of the cluster, this one included.
    pub fn cluster_size(&self) -> usize {
        self.members().len()
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

/// A group's leadership in one report, as member `me` sees it: the term
/// and whether it leads, and who leads.
pub fn seen(me: NodeId, m: &ServerMetrics) -> (Seen, Leader) {
    let leads = m.state == openraft::ServerState::Leader;
    let leader = match m.current_leader {
        _ if leads => Leader::Here,
        Some(n) if n != me => Leader::Node(n),
        // Itself named while not (or no longer) in the leader state: an
        // election in between, no one to send a consumer to.
        _ => Leader::None,
    };
    let term = m.vote.leader_id().get_term();
    (Seen { term, leads }, leader)
}

#[path = "groups_reports.rs"]
mod reports;

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::ServerState;

    fn report(state: ServerState, term: u64, voted: u64, leader: Option<u64>) -> ServerMetrics {
        ServerMetrics {
            id: 1,
            vote: openraft::Vote::new(term, voted),
            state,
            current_leader: leader,
            ..Default::default()
        }
    }

    #[test]
    fn leadership_as_member_1_sees_it() {
        let lead = |state, leader| seen(1, &report(state, 3, 1, leader));
        assert_eq!(
            lead(ServerState::Leader, Some(1)),
            (
                Seen {
                    term: 3,
                    leads: true
                },
                Leader::Here
            )
        );
        assert_eq!(
            seen(1, &report(ServerState::Follower, 4, 2, Some(2))),
            (
                Seen {
                    term: 4,
                    leads: false
                },
                Leader::Node(2)
            )
        );
        // Standing for election, or no leader known yet.
        assert_eq!(lead(ServerState::Candidate, None).1, Leader::None);
        assert_eq!(lead(ServerState::Follower, None).1, Leader::None);
        // Named leader while no longer in the leader state (stepping down).
        assert_eq!(
            lead(ServerState::Follower, Some(1)),
            (
                Seen {
                    term: 3,
                    leads: false
                },
                Leader::None
            )
        );
    }
}

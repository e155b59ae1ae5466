//! A member of the replication cluster: the Raft groups it votes in (each
//! with its log, state machine and network; `placement.rs` says which),
//! its cluster listener and its connections to peers. Never: which topic
//! lives in which group, or what an entry means (nsqd's core places topics
//! and reads what is applied).
//!
//! Directory layout under the member's data directory:
//! `raft/{group:04}/` per group, holding the group's segments, `purged`,
//! `vote`, `committed` and `snapshot`; `raft/member` and `raft/peers`, the
//! member's identity and its peers' (`identity.rs`; docs/replication.md);
//! `raft/cluster`, the cluster map (`maps.rs`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::cluster_map::ClusterMap;
use crate::committed::{Chunk, CommittedLog, ReadError};
use crate::identity::Identity;
use crate::log::{LogError, LogOptions};
use crate::machine::{Applied, StateMachine};
use crate::maps::Maps;
use crate::membership::{self, Membership};
use crate::network::hello::{Abouts, ClusterConfig, Greeting};
use crate::network::listener::{self, Allowed, Groups, Serve};
use crate::network::{ClusterTls, Network, Peers};
use crate::placement::Placement;
use crate::propose::{Others, Proposer};
use crate::pulse::{self, Pulses};
use crate::quiet::{QuietFlags, Timing};
use crate::roll_call;
use crate::snapshot::Snapshots;
use crate::standing::Standing;
use crate::store::LogStore;
use crate::{GroupId, Member, NodeId, Raft};

/// How a member is started.
#[derive(Clone)]
pub struct MemberOptions {
    pub node_id: NodeId,
    /// Where the cluster listener binds (the address peers know it by may
    /// differ: `peers` says that one).
    pub listen: String,
    /// Every member of the cluster, this one included: id and address.
    pub peers: BTreeMap<NodeId, String>,
    pub data_dir: PathBuf,
    /// Raft groups per group size (`placement.rs`); the same on every
    /// member.
    pub groups: u32,
    /// openraft's settings (timeouts, batch sizes). Its `snapshot_policy`
    /// is replaced by `Never`: the log is the store, and openraft purges
    /// after each snapshot it builds, so only the subscriber may decide
    /// when (below the slowest channel: [`Group::snapshots`]).
    pub raft: openraft::Config,
    pub tls: Option<ClusterTls>,
    pub log: LogOptions,
    /// Applied entries a group's subscriber may have waiting before
    /// applying waits for it: a group whose `applied` is never read stops
    /// applying there (the log keeps committing).
    pub applied_capacity: usize,
    /// What this member tells its peers about itself (opaque here; nsqd
    /// gives the TCP address its consumers reach it at).
    pub about: String,
}

/// Why a member did not start.
#[derive(Debug, thiserror::Error)]
pub enum MemberError {
    #[error("replication listener on {addr}: {err}")]
    Listen { addr: String, err: std::io::Error },
    #[error("peer address {addr}: {err}")]
    Peer { addr: String, err: std::io::Error },
    #[error("group {group}: {err}")]
    Log { group: GroupId, err: LogError },
    #[error("group {group}: state machine: {err}")]
    Machine { group: GroupId, err: std::io::Error },
    #[error("raft config: {0}")]
    Config(#[from] openraft::ConfigError),
    #[error("identity in {dir}: {err}")]
    Identity { dir: String, err: std::io::Error },
    #[error("group {group}: {err}")]
    Raft {
        group: GroupId,
        err: openraft::error::Fatal<NodeId>,
    },
}

/// One group of a running member.
pub struct Group {
    pub id: GroupId,
    pub raft: Raft,
    /// Applied entries, in log order (taken by whoever consumes them),
    /// after `replayed`.
    pub applied: Option<mpsc::Receiver<Applied>>,
    /// The committed index this member's log had at start: openraft applies
    /// the entries up to it again before the member runs, and they are not
    /// in `applied` (a subscriber that is not reading yet would hold the
    /// start up for good): read them with [`Group::read_entries`].
    pub replayed: Option<u64>,
    /// The committed index this member has saved (its log storage's).
    pub committed: watch::Receiver<Option<u64>>,
    /// The group's committed entries, read back from its log.
    pub log: CommittedLog,
    /// The snapshot this member started from: the index it claims and the
    /// image its subscriber handed over (entries from the next index on
    /// are in the log; `replayed` counts from there).
    pub image: Option<(u64, bytes::Bytes)>,
    /// Snapshots of the group, asked for by its subscriber.
    pub snapshots: Snapshots,
    /// Its directory was made by this start (nothing of it on disk before).
    new: bool,
}

impl Group {
    /// The committed entries of `start..end` from `start`, one bounded
    /// chunk at a time ([`CommittedLog::read`]).
    pub async fn read_entries(
        &self,
        start: u64,
        end: u64,
        max_bytes: usize,
    ) -> Result<Chunk, ReadError> {
        self.log.read(start, end, max_bytes).await
    }
}

/// A running member.
pub struct ClusterMember {
    pub node_id: NodeId,
    /// The address the listener is bound to.
    pub local_addr: SocketAddr,
    /// The groups this member votes in.
    pub groups: Vec<Group>,
    maps: Maps,
    pulses: Pulses,
    abouts: Abouts,
    proposer: Proposer,
    membership: Membership,
    peers: Arc<Peers>,
    identity: Arc<Identity>,
    quiet: QuietFlags,
    shutdown: CancellationToken,
    checks: crate::answer::ForwardChecks,
    /// The listener, the roll call and the pulse.
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl ClusterMember {
    /// Opens the storage of every group this member votes in, starts its
    /// Raft and the listener. A member whose `peers` do not name it joins
    /// a running cluster: its listener answers probes and hellos, and its
    /// groups start once a member's hello brings the cluster map that
    /// names it (`membership.rs`: after an operator added it).
    pub async fn start(opts: MemberOptions) -> Result<ClusterMember, MemberError> {
        let config = openraft::Config {
            snapshot_policy: openraft::SnapshotPolicy::Never,
            ..opts.raft.clone()
        };
        let config = Arc::new(config.validate()?);
        let raft_dir = opts.data_dir.join("raft");
        let had_state = raft_dir.exists();
        let identity_err = |err| MemberError::Identity {
            dir: raft_dir.display().to_string(),
            err,
        };
        let listed = opts.peers.contains_key(&opts.node_id);
        let formed = listed.then(|| ClusterMap::formed(&opts.peers, opts.groups));
        let maps = Maps::open(&raft_dir, formed).map_err(identity_err)?;
        if listed && !had_state {
            // A host that replaces a lost member on an empty disk, after
            // the membership changed online, opens the groups of the map
            // its peers hold, not of its flags.
            let tls = opts.tls.as_ref().map(|t| t.client.clone());
            if let Some(m) = newest_map(&opts.peers, opts.node_id, tls).await {
                maps.adopt(&m, |held| held.is_none_or(|h| h.per_set == m.per_set));
            }
        }
        let mut addrs: Vec<String> = opts.peers.values().cloned().collect();
        if let Some(m) = maps.get() {
            addrs.extend(m.members.values().cloned());
        }
        let allowed: Allowed = Arc::new(RwLock::new(resolve(&addrs).await?));
        let listener =
            TcpListener::bind(&opts.listen)
                .await
                .map_err(|err| MemberError::Listen {
                    addr: opts.listen.clone(),
                    err,
                })?;
        let local_addr = listener.local_addr().map_err(|err| MemberError::Listen {
            addr: opts.listen.clone(),
            err,
        })?;
        // The cluster's size as far as this member knows it yet (one that
        // joins counts itself beside the members its flags name).
        let size = maps
            .get()
            .map_or(opts.peers.len() + usize::from(!listed), |m| m.members.len());
        let identity = Identity::open(&raft_dir, opts.node_id, had_state, size, 0)
            .map(Arc::new)
            .map_err(identity_err)?;
        let greeting = Arc::new(Greeting::new(
            ClusterConfig {
                groups: opts.groups,
                peers: opts.peers.clone(),
            },
            identity.clone(),
            opts.about.clone(),
            maps.clone(),
        ));
        let abouts = greeting.abouts.clone();
        let peers = Peers::new(
            opts.tls.as_ref().map(|t| t.client.clone()),
            Duration::from_secs(2),
            greeting.clone(),
        );
        let registry: Groups = Arc::new(RwLock::new(HashMap::new()));
        let shutdown = CancellationToken::new();
        let checks = crate::answer::ForwardChecks::default();
        let serve = Serve {
            checks: checks.clone(),
            allowed: allowed.clone(),
            tls: opts.tls.as_ref().map(|t| t.server.clone()),
            groups: registry.clone(),
            greeting,
            shutdown: shutdown.clone(),
        };
        let listener = tokio::spawn(listener::serve(listener, serve));
        if maps.get().is_none() {
            tracing::info!(
                node_id = opts.node_id,
                "REPLICATION: not a member of a cluster yet: waiting to be added (POST /replication/members/add?id={}&address=<this --replication-address> on a member)",
                opts.node_id
            );
            let mut changed = maps.watch();
            while maps.get().is_none() {
                if changed.changed().await.is_err() {
                    break;
                }
            }
        }
        let placement = maps.placement();
        let mine = placement.groups_of(opts.node_id);
        identity.set_groups(mine.len() as u32);
        // Only a cluster whose map never changed begins groups: after a
        // change every group exists on its other members.
        let may_begin = maps.get().is_some_and(|m| m.version == 0);
        let mut groups = Vec::new();
        for &id in &mine {
            let dir = opts.data_dir.join("raft").join(format!("{id:04}"));
            let new = !dir.exists() && may_begin;
            let store = LogStore::open(&dir, opts.log.clone())
                .map_err(|err| MemberError::Log { group: id, err })?;
            let committed = store.committed_index();
            let log = store.committed_log();
            let replayed = *committed.borrow();
            let (sm, applied) = StateMachine::open(&dir, opts.applied_capacity, replayed)
                .map_err(|err| MemberError::Machine { group: id, err })?;
            let sm = sm.with_maps(maps.clone());
            let image = sm
                .image()
                .map_err(|err| MemberError::Machine { group: id, err })?;
            let requests = sm.requests();
            let network = Network {
                group: id,
                peers: peers.clone(),
            };
            let raft = Raft::new(opts.node_id, config.clone(), network, store, sm)
                .await
                .map_err(|err| MemberError::Raft { group: id, err })?;
            registry.write().insert(id, raft.clone());
            groups.push(Group {
                id,
                snapshots: Snapshots::new(raft.clone(), log.clone(), requests),
                raft,
                applied: Some(applied),
                replayed,
                committed,
                log,
                image,
                new,
            });
        }
        let others: Vec<(NodeId, Arc<crate::network::peer::Peer>)> = maps
            .get()
            .map(|m| m.members.clone())
            .unwrap_or_default()
            .iter()
            .filter(|(id, _)| **id != opts.node_id)
            .map(|(id, addr)| (*id, peers.get(addr)))
            .collect();
        let rafts: Vec<(GroupId, Raft)> = groups.iter().map(|g| (g.id, g.raft.clone())).collect();
        let roll_call = tokio::spawn(roll_call::run(
            identity.clone(),
            rafts.clone(),
            others,
            shutdown.clone(),
        ));
        let ids = placement.groups().into_iter().max().map_or(0, |g| g + 1);
        let quiet: QuietFlags = Arc::new((0..ids).map(|_| AtomicBool::new(false)).collect());
        let election = Duration::from_millis(config.election_timeout_min);
        let pulses = Pulses::new(Timing {
            fresh_for: election,
            quiet_after: election,
        });
        let pulse = tokio::spawn(pulse::run(
            identity.clone(),
            rafts.clone(),
            maps.clone(),
            peers.clone(),
            pulses.clone(),
            Duration::from_millis(config.heartbeat_interval),
            quiet.clone(),
            shutdown.clone(),
        ));
        let allow = tokio::spawn(allow_members(maps.clone(), allowed, shutdown.clone()));
        let proposer = Proposer::new(
            rafts.iter().cloned().collect(),
            peers.clone(),
            Others {
                maps: maps.clone(),
                pulses: pulses.clone(),
            },
        );
        let changes = tokio::spawn(membership::run(
            opts.node_id,
            maps.clone(),
            rafts,
            proposer.clone(),
            shutdown.clone(),
        ));
        let membership = Membership {
            me: opts.node_id,
            maps: maps.clone(),
            proposer: proposer.clone(),
            abouts: abouts.clone(),
            tls: opts.tls.as_ref().map(|t| t.client.clone()),
            asking: Arc::default(),
        };
        Ok(ClusterMember {
            node_id: opts.node_id,
            local_addr,
            groups,
            maps,
            pulses,
            abouts,
            proposer,
            membership,
            peers,
            identity,
            quiet,
            shutdown,
            checks,
            tasks: vec![listener, roll_call, pulse, allow, changes],
        })
    }

    /// Makes each new group's voters (`placement.rs`) its members, in the
    /// groups whose directory this start made and whose lowest voter this
    /// member is: run at every start, it does nothing once the groups
    /// exist, and each group is begun by one member. It waits until this
    /// member's standing is settled (a majority never knew it), and does
    /// nothing if it turned out to replace a lost member (whose groups
    /// exist elsewhere). A group already initialised answers openraft's
    /// `NotAllowed`, which this treats as done.
    pub fn initialize(
        &self,
    ) -> impl std::future::Future<
        Output = Result<
            (),
            openraft::error::RaftError<NodeId, openraft::error::InitializeError<NodeId, Member>>,
        >,
    > + Send
           + 'static {
        let placement = self.maps.placement();
        let map = self.maps.get().unwrap_or_default();
        let begins: Vec<(Raft, BTreeMap<NodeId, Member>)> = self
            .groups
            .iter()
            .filter(|g| g.new)
            .filter_map(|g| {
                let voters = placement.voters(g.id)?;
                (voters.first() == Some(&self.node_id)).then(|| {
                    let members = voters
                        .iter()
                        .filter_map(|id| {
                            let addr = map.members.get(id)?;
                            Some((*id, Member::new(addr.clone())))
                        })
                        .collect();
                    (g.raft.clone(), members)
                })
            })
            .collect();
        let mut standing = self.identity.standing();
        async move {
            if begins.is_empty() {
                return Ok(());
            }
            let settled = standing
                .wait_for(|s| !matches!(s, Standing::Joining { .. }))
                .await
                .map(|s| s.clone());
            match settled {
                Ok(Standing::Member) => {}
                Ok(_) => {
                    tracing::info!(
                        "REPLICATION: not initialising: this member replaces a lost one"
                    );
                    return Ok(());
                }
                // the member stopped first
                Err(_) => return Ok(()),
            }
            for (raft, members) in begins {
                match raft.initialize(members).await {
                    Ok(()) => {}
                    Err(openraft::error::RaftError::APIError(
                        openraft::error::InitializeError::NotAllowed(_),
                    )) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        }
    }

    /// This member's standing now, and each change after.
    /// Which groups this member leads without heartbeats (idle, every
    /// member up to date: `crate::quiet`), by group id.
    pub fn quiet(&self) -> QuietFlags {
        self.quiet.clone()
    }

    pub fn standing(&self) -> watch::Receiver<Standing> {
        self.identity.standing()
    }

    /// Proposes payloads to the cluster's groups, from here or through
    /// their leaders.
    /// Checks each proposal forwarded to this member, where it leads the
    /// group, before it is written (set once; a second call changes
    /// nothing): a refusal reaches the proposer as
    /// [`crate::propose::ProposeError::Refused`].
    pub fn check_forwarded(&self, check: crate::answer::ForwardCheck) {
        let _ = self.checks.set(check);
    }

    pub fn proposer(&self) -> Proposer {
        self.proposer.clone()
    }

    /// Which members vote in which group, as the cluster map says now.
    pub fn placement(&self) -> Arc<Placement> {
        self.maps.placement()
    }

    /// The cluster map this member holds.
    pub fn maps(&self) -> Maps {
        self.maps.clone()
    }

    /// Members added and removed online.
    pub fn membership(&self) -> Membership {
        self.membership.clone()
    }

    /// What each peer said about itself when the two last met
    /// ([`MemberOptions::about`]).
    pub fn abouts(&self) -> Abouts {
        self.abouts.clone()
    }

    /// The replication protocol every member of the cluster speaks, as far
    /// as this member has met them (`hello.rs`): what may be proposed.
    pub fn cluster_protocol(&self) -> u32 {
        let members = self
            .maps
            .get()
            .map(|m| m.members.clone())
            .unwrap_or_default();
        self.abouts
            .cluster_protocol(members.keys().copied().filter(|p| *p != self.node_id))
    }

    /// What the peers' pulses say (who leads the groups this member does
    /// not vote in).
    pub fn pulses(&self) -> Pulses {
        self.pulses.clone()
    }

    /// The group `id`.
    pub fn group(&self, id: GroupId) -> Option<&Group> {
        self.groups.iter().find(|g| g.id == id)
    }

    /// Stops every group's Raft, the listener and the peer connections.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        for g in &self.groups {
            if let Err(e) = g.raft.shutdown().await {
                tracing::warn!(group = g.id, error = %e, "raft group did not stop cleanly");
            }
        }
        self.peers.close();
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// The IP addresses of `addrs`.
async fn resolve(addrs: &[String]) -> Result<HashSet<IpAddr>, MemberError> {
    let mut allowed = HashSet::new();
    for addr in addrs {
        let ips = tokio::net::lookup_host(addr.as_str())
            .await
            .map_err(|err| MemberError::Peer {
                addr: addr.clone(),
                err,
            })?;
        allowed.extend(ips.map(|a| a.ip()));
    }
    Ok(allowed)
}

/// Keeps the listener's allowed addresses those of the map's members as
/// the map changes (a member added is let in, a removed one no longer;
/// an address that does not resolve is left out and logged).
async fn allow_members(maps: Maps, allowed: Allowed, shutdown: CancellationToken) {
    let mut changed = maps.watch();
    loop {
        if let Some(map) = maps.get() {
            let mut ips = HashSet::new();
            for addr in map.members.values() {
                match tokio::net::lookup_host(addr.as_str()).await {
                    Ok(found) => ips.extend(found.map(|a| a.ip())),
                    Err(e) => {
                        tracing::warn!(%addr, error = %e, "REPLICATION: a member's address does not resolve")
                    }
                }
            }
            *allowed.write() = ips;
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            r = changed.changed() => if r.is_err() { return },
        }
    }
}

/// The newest cluster map naming `me` that the members at `peers` hold,
/// changed online since they were formed: one probe each, at once (a
/// peer not up is not waited for: a new cluster's members start in any
/// order).
async fn newest_map(
    peers: &BTreeMap<NodeId, String>,
    me: NodeId,
    tls: Option<Arc<rustls::ClientConfig>>,
) -> Option<ClusterMap> {
    let asks: Vec<_> = peers
        .iter()
        .filter(|(id, _)| **id != me)
        .map(|(_, addr)| {
            let (addr, tls) = (addr.clone(), tls.clone());
            tokio::spawn(async move {
                crate::network::peer::probe(&addr, tls.as_ref(), Duration::from_secs(1)).await
            })
        })
        .collect();
    let mut newest: Option<ClusterMap> = None;
    for a in asks {
        let Ok(Ok(p)) = a.await else { continue };
        if let Some(m) = p
            .map
            .filter(|m| m.version > 0 && m.members.contains_key(&me))
        {
            if newest.as_ref().is_none_or(|n| n.version < m.version) {
                newest = Some(m);
            }
        }
    }
    newest
}

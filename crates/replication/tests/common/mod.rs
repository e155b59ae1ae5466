//! What the in-process cluster tests share: members on free loopback
//! ports, a leader, proposals, and what was applied and committed.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use nsq_replication::group::{ClusterMember, MemberOptions};
use nsq_replication::log::LogOptions;
use nsq_replication::machine::Applied;
use nsq_replication::network::ClusterTls;
use nsq_replication::{GroupId, NodeId};
use tokio::sync::mpsc;

pub const WAIT: Duration = Duration::from_secs(10);

pub fn raft_config() -> openraft::Config {
    openraft::Config {
        cluster_name: "nsq-rs-test".into(),
        heartbeat_interval: 50,
        election_timeout_min: 300,
        election_timeout_max: 600,
        ..Default::default()
    }
}

/// Distinct free loopback ports for `n` members (below the ephemeral
/// range, where no outgoing connection takes them meanwhile).
pub fn addresses(n: u64) -> BTreeMap<NodeId, String> {
    nsq_tests::free_ports(n as usize)
        .into_iter()
        .enumerate()
        .map(|(i, p)| (i as u64 + 1, format!("127.0.0.1:{p}")))
        .collect()
}

pub fn options(
    id: NodeId,
    peers: &BTreeMap<NodeId, String>,
    dir: &Path,
    tls: Option<ClusterTls>,
) -> MemberOptions {
    MemberOptions {
        node_id: id,
        listen: peers[&id].clone(),
        peers: peers.clone(),
        data_dir: dir.join(format!("member-{id}")),
        groups: 2,
        raft: raft_config(),
        tls,
        log: LogOptions::default(),
        applied_capacity: 1024,
        about: format!("member {id}"),
    }
}

pub async fn start(
    id: NodeId,
    peers: &BTreeMap<NodeId, String>,
    dir: &Path,
    tls: Option<ClusterTls>,
) -> ClusterMember {
    // A restarted member may find its port still in TIME_WAIT for a moment.
    let mut tries = 0;
    loop {
        match ClusterMember::start(options(id, peers, dir, tls.clone())).await {
            Ok(m) => return m,
            Err(e) if tries < 50 => {
                tries += 1;
                eprintln!("member {id} not started yet: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("member {id}: {e}"),
        }
    }
}

/// The leader of `group` as `member` sees it, once it sees one that is
/// not `not`.
pub async fn leader(member: &ClusterMember, group: GroupId, not: Option<NodeId>) -> NodeId {
    let m = member
        .group(group)
        .unwrap()
        .raft
        .wait(Some(WAIT))
        .metrics(
            |m| m.current_leader.is_some() && m.current_leader != not,
            "a leader",
        )
        .await
        .expect("a leader is elected");
    m.current_leader.unwrap()
}

pub fn payload(group: GroupId, i: u64) -> Bytes {
    Bytes::from(format!("group {group} batch {i}"))
}

/// Proposes `range` through `member`'s proposer, one at a time: written
/// there if it leads, forwarded to the leader otherwise, and waited for
/// while an election is on (on a loaded machine the leader a test just saw
/// may have lost an election before the write reached it).
pub async fn propose(member: &ClusterMember, group: GroupId, range: std::ops::Range<u64>) {
    for i in range {
        member
            .proposer()
            .propose(group, payload(group, i), WAIT)
            .await
            .unwrap_or_else(|e| panic!("batch {i} not committed: {e}"));
    }
}

/// Reads applied payloads until `want` arrived in order (entries applied
/// again after a restart may come first: they repeat earlier indexes).
pub async fn expect_applied(
    rx: &mut mpsc::Receiver<Applied>,
    group: GroupId,
    want: std::ops::Range<u64>,
) {
    let mut next = want.start;
    while next < want.end {
        let a = tokio::time::timeout(WAIT, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("group {group}: batch {next} not applied in time"))
            .expect("subscription open");
        if let Applied::Entry { payload: p, .. } = a {
            if p == payload(group, next) {
                next += 1;
            } else {
                // Only a replay of an earlier batch may come in between.
                let earlier = (0..next).any(|i| p == payload(group, i));
                assert!(
                    earlier,
                    "group {group}: unexpected {p:?} while waiting for batch {next}"
                );
            }
        }
    }
}

/// Every committed payload of `group` on `member`, read back from its log
/// in chunks of about `max_bytes`.
pub async fn read_back(member: &ClusterMember, group: GroupId, max_bytes: usize) -> Vec<Bytes> {
    let g = member.group(group).unwrap();
    let (mut out, mut at) = (Vec::new(), 0);
    loop {
        let chunk = g.read_entries(at, u64::MAX, max_bytes).await.unwrap();
        if chunk.next == at {
            return out;
        }
        out.extend(chunk.entries.into_iter().map(|(_, p)| p));
        at = chunk.next;
    }
}

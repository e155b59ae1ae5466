//! A member that comes back with an empty disk under its node id, in
//! process over real sockets: it must not vote until it holds what the
//! groups committed, or it could elect a leader that lacks committed
//! entries.
//!
//! The case that loses data without the rule: of members L, W and C, C is
//! stopped, entries are committed on L and W, then W loses its disk and L
//! stops. C (which lacks the entries) and the empty W are a majority: if W
//! voted, C would lead and the entries would be gone, overwritten on L
//! when it came back. With the rule, W abstains, nobody leads until L is
//! back, and then every member holds every entry.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use nsq_replication::group::ClusterMember;
use nsq_replication::standing::Standing;
use nsq_replication::NodeId;

async fn standing_becomes(m: &ClusterMember, name: &str) {
    let mut rx = m.standing();
    tokio::time::timeout(WAIT, rx.wait_for(|s| s.name() == name))
        .await
        .unwrap_or_else(|_| panic!("node {}: never {name}", m.node_id))
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_back_with_an_empty_disk_votes_only_once_it_holds_what_was_committed() {
    let dir = tempfile::tempdir().unwrap();
    let peers = addresses(3);
    let mut members: BTreeMap<NodeId, ClusterMember> = BTreeMap::new();
    for id in 1..=3 {
        members.insert(id, start(id, &peers, dir.path(), None).await);
    }
    members[&1].initialize().await.unwrap();
    for m in members.values() {
        standing_becomes(m, "member").await;
    }
    let l = leader(&members[&1], 0, None).await;
    propose(&members[&l], 0, 0..20).await;
    let others: Vec<NodeId> = (1..=3).filter(|id| *id != l).collect();
    let (w, c) = (others[0], others[1]);
    // Every member has greeted every other (so C knows W's incarnation).
    for m in members.values() {
        let want: Vec<Bytes> = (0..20).map(|i| payload(0, i)).collect();
        tokio::time::timeout(WAIT, async {
            while read_back(m, 0, 1 << 20).await != want {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .expect("the first 20 everywhere");
    }

    // C stops; 20..30 are committed on L and W alone.
    members.remove(&c).unwrap().shutdown().await;
    propose(&members[&l], 0, 20..30).await;
    let want: Vec<Bytes> = (0..30).map(|i| payload(0, i)).collect();
    assert_eq!(read_back(&members[&l], 0, 1 << 20).await, want);

    // W loses its disk; L stops.
    members.remove(&w).unwrap().shutdown().await;
    std::fs::remove_dir_all(dir.path().join(format!("member-{w}"))).unwrap();
    let back_l = members.remove(&l).unwrap();
    back_l.shutdown().await;

    // C and the empty W: W learns from C that it replaces a lost member,
    // and abstains, so C (without 20..30) is not elected.
    members.insert(c, start(c, &peers, dir.path(), None).await);
    members.insert(w, start(w, &peers, dir.path(), None).await);
    standing_becomes(&members[&w], "replacing").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    for id in [c, w] {
        let m = members[&id]
            .group(0)
            .unwrap()
            .raft
            .metrics()
            .borrow()
            .clone();
        assert_eq!(
            m.current_leader, None,
            "node {id} sees a leader elected without the committed entries"
        );
    }
    assert!(matches!(
        *members[&w].standing().borrow(),
        Standing::Replacing { .. }
    ));

    // L comes back: it leads (its log is the longest), W catches up on
    // both groups and is a member again, and every entry is on all three.
    members.insert(l, start(l, &peers, dir.path(), None).await);
    standing_becomes(&members[&w], "member").await;
    let now = leader(&members[&w], 0, None).await;
    propose(&members[&now], 0, 30..31).await;
    let want: Vec<Bytes> = (0..31).map(|i| payload(0, i)).collect();
    for m in members.values() {
        tokio::time::timeout(WAIT, async {
            while read_back(m, 0, 1 << 20).await != want {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("node {}: not every entry", m.node_id));
    }

    // W votes again: with L stopped, C and W elect one of themselves.
    let l_now = members.remove(&now).unwrap();
    l_now.shutdown().await;
    let survivor = members.values().next().unwrap();
    let next = leader(survivor, 0, Some(now)).await;
    assert_ne!(next, now);
    for (_, m) in members {
        m.shutdown().await;
    }
}

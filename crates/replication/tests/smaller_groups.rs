//! Five members on 127.0.0.1 in one process, with groups of three beside
//! the groups of five: each member runs only the groups it votes in, a
//! group of three keeps its log on its three voters alone, and a member
//! outside it proposes through the leader its peers' pulses name, before
//! and after that leader is lost.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use nsq_replication::machine::Applied;
use nsq_replication::propose::ProposeError;
use nsq_replication::{GroupId, NodeId};
use tokio::sync::mpsc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_of_three_of_five_commits_from_every_member() {
    let dir = tempfile::tempdir().unwrap();
    let peers = addresses(5);
    let mut members = Vec::new();
    for id in 1..=5 {
        members.push(start(id, &peers, dir.path(), None).await);
    }
    // Two groups per size: 0 and 1 of all five, 4 of members 1-3 and 5
    // of members 2-4 (`placement.rs`).
    let placement = members[0].placement();
    assert_eq!(placement.groups(), vec![0, 1, 4, 5]);
    assert_eq!(placement.voters(5), Some(BTreeSet::from([2, 3, 4])));
    let runs: Vec<Vec<GroupId>> = members
        .iter()
        .map(|m| m.groups.iter().map(|g| g.id).collect())
        .collect();
    assert_eq!(
        runs,
        vec![
            vec![0, 1, 4],
            vec![0, 1, 4, 5],
            vec![0, 1, 4, 5],
            vec![0, 1, 5],
            vec![0, 1]
        ]
    );
    let group_dir = |id: NodeId, g: GroupId| {
        dir.path()
            .join(format!("member-{id}"))
            .join("raft")
            .join(format!("{g:04}"))
    };
    assert!(!group_dir(1, 5).exists() && !group_dir(5, 5).exists());
    assert!(group_dir(2, 5).exists() && group_dir(4, 5).exists());

    // Every member begins the groups whose lowest voter it is: 1 those of
    // five and group 4, 2 group 5.
    let begun: Vec<_> = members
        .iter()
        .map(|m| tokio::spawn(m.initialize()))
        .collect();
    for b in begun {
        b.await.unwrap().unwrap();
    }
    let mut applied: BTreeMap<NodeId, mpsc::Receiver<Applied>> = BTreeMap::new();
    for m in &mut members {
        if let Some(g) = m.groups.iter_mut().find(|g| g.id == 5) {
            applied.insert(m.node_id, g.applied.take().unwrap());
        }
    }
    let at = |members: &[nsq_replication::group::ClusterMember], id: NodeId| {
        members.iter().position(|m| m.node_id == id).unwrap()
    };
    let l = leader(&members[at(&members, 2)], 5, None).await;
    assert!((2..=4).contains(&l), "leader {l}");
    let voters: BTreeSet<NodeId> = members[at(&members, 2)]
        .group(5)
        .unwrap()
        .raft
        .metrics()
        .borrow()
        .membership_config
        .membership()
        .voter_ids()
        .collect();
    assert_eq!(voters, BTreeSet::from([2, 3, 4]));
    for g in [0, 1, 4] {
        leader(&members[0], g, None).await;
    }

    // What each said about itself when they met.
    assert_eq!(members[0].abouts().get(5).as_deref(), Some("member 5"));
    assert_eq!(members[4].abouts().get(1).as_deref(), Some("member 1"));

    // Members 1 and 5 vote in neither: they forward to the leader.
    propose(&members[0], 5, 0..10).await;
    propose(&members[4], 5, 10..20).await;
    assert_eq!(members[0].pulses().leader(5).map(|(n, _)| n), Some(l));
    for id in 2..=4 {
        expect_applied(applied.get_mut(&id).unwrap(), 5, 0..20).await;
    }
    let back = read_back(&members[at(&members, 3)], 5, 1 << 20).await;
    assert_eq!(
        back.iter()
            .filter(|p| p.starts_with(b"group 5 batch"))
            .count(),
        20
    );
    assert!(!group_dir(1, 5).exists() && !group_dir(5, 5).exists());

    // The group's leader lost: the two voters left elect another, and a
    // member outside the group reaches it once the pulses name it.
    let old = members.remove(at(&members, l));
    old.shutdown().await;
    applied.remove(&l);
    let left = *applied.keys().next().unwrap();
    let new = leader(&members[at(&members, left)], 5, Some(l)).await;
    assert_ne!(new, l);
    propose(&members[at(&members, 1)], 5, 20..25).await;
    propose(&members[at(&members, 5)], 5, 25..30).await;
    for rx in applied.values_mut() {
        expect_applied(rx, 5, 20..30).await;
    }

    // A group the cluster does not have.
    assert!(matches!(
        members[0]
            .proposer()
            .propose(6, payload(6, 0), std::time::Duration::from_secs(1))
            .await,
        Err(ProposeError::NoGroup(6))
    ));
    for m in members {
        m.shutdown().await;
    }
}

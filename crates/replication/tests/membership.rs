//! Membership changes end to end on five members in one process, with
//! groups of three beside the groups of five: members removed until a
//! group of three has one voter left, whose removal is refused with every
//! member's map unchanged; an address that is a member of a cluster
//! already is refused as a new member; a fresh member added fills the
//! vacancies the removals left and becomes a voter of each of its groups;
//! a member replaced on an empty disk under its old flags starts from the
//! map its peers hold.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use nsq_replication::cluster_map::{Change, Refusal};
use nsq_replication::group::ClusterMember;
use nsq_replication::membership::ChangeError;
use nsq_replication::{GroupId, NodeId};

const TIMEOUT: Duration = Duration::from_secs(10);

/// Waits until every member in `ms` holds a map with no change pending.
async fn settled(ms: &[&ClusterMember]) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let maps: Vec<_> = ms.iter().map(|m| m.maps().get().unwrap()).collect();
        if maps
            .iter()
            .all(|m| m.pending.is_none() && m.version == maps[0].version)
        {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not carried out: {maps:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `group`'s voters as `m`'s Raft says.
fn voters(m: &ClusterMember, group: GroupId) -> BTreeSet<NodeId> {
    m.group(group)
        .unwrap()
        .raft
        .metrics()
        .borrow()
        .membership_config
        .membership()
        .voter_ids()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removals_stop_at_a_groups_last_voter_and_an_added_member_fills_the_vacancies() {
    let dir = tempfile::tempdir().unwrap();
    let mut peers = addresses(6);
    let fresh = peers.remove(&6).unwrap();
    let mut members = Vec::new();
    for id in 1..=5 {
        members.push(start(id, &peers, dir.path(), None).await);
    }
    // Two groups per size: 0 and 1 of all five, 4 of members 1-3 and 5
    // of members 2-4.
    for b in members
        .iter()
        .map(|m| tokio::spawn(m.initialize()))
        .collect::<Vec<_>>()
    {
        b.await.unwrap().unwrap();
    }
    // every member knows group 0's leader, which the changes go through
    // (a change forwarded while the first elections settle may be answered
    // "leader changed": an operator asks again)
    let first = leader(&members[0], 0, None).await;
    for m in &members {
        assert_eq!(leader(m, 0, None).await, first);
    }
    for g in [1, 4] {
        leader(&members[0], g, None).await;
    }
    leader(&members[1], 5, None).await;
    let ask = members[3].membership();

    // A change whose asker went away mid-way (its probe of an address that
    // never answers dropped) leaves nothing asked behind.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let asked = ask.change(
        Change::Add {
            id: 9,
            addr: silent.local_addr().unwrap().to_string(),
        },
        TIMEOUT,
    );
    assert!(tokio::time::timeout(Duration::from_millis(100), asked)
        .await
        .is_err());

    // Members 1 and 2 leave: group 4 keeps member 3 alone. (A removed
    // member hears of nothing after its removal.)
    for id in [1, 2] {
        ask.change(Change::Remove { id }, TIMEOUT).await.unwrap();
        let left: Vec<&ClusterMember> = members[id as usize..].iter().collect();
        settled(&left).await;
    }
    assert_eq!(voters(&members[2], 4), BTreeSet::from([3]));
    assert_eq!(voters(&members[2], 5), BTreeSet::from([3, 4]));
    assert_eq!(voters(&members[2], 0), BTreeSet::from([3, 4, 5]));

    // Member 3 is group 4's last voter: refused, no map changed.
    let version = members[3].maps().get().unwrap().version;
    let refused = ask.change(Change::Remove { id: 3 }, TIMEOUT).await;
    assert!(
        matches!(
            refused,
            Err(ChangeError::Refused(Refusal::LastVoter { id: 3, group: 4 }))
        ),
        "{refused:?}"
    );
    // A member of a cluster already (member 1, removed, keeps its map) is
    // no new member.
    let refused = ask
        .change(
            Change::Add {
                id: 1,
                addr: peers[&1].clone(),
            },
            TIMEOUT,
        )
        .await;
    assert!(
        matches!(&refused, Err(ChangeError::Unreachable(why)) if why.contains("already a member of a cluster")),
        "{refused:?}"
    );
    for m in &members[2..] {
        assert_eq!(m.maps().get().unwrap().version, version);
    }

    // A fresh member 6, naming the running members only, waits to be
    // added; added, it fills both vacancies and votes in its groups.
    let running: std::collections::BTreeMap<NodeId, String> = peers
        .iter()
        .filter(|(id, _)| **id >= 3)
        .map(|(id, a)| (*id, a.clone()))
        .collect();
    let mut with_six = running.clone();
    with_six.insert(6, fresh.clone());
    let mut opts = options(6, &with_six, dir.path(), None);
    opts.peers = running;
    let joining = tokio::spawn(ClusterMember::start(opts));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!joining.is_finished(), "it started before it was added");
    ask.change(
        Change::Add {
            id: 6,
            addr: fresh.clone(),
        },
        TIMEOUT,
    )
    .await
    .unwrap();
    let six = tokio::time::timeout(TIMEOUT, joining)
        .await
        .expect("member 6 starts once added")
        .unwrap()
        .unwrap();
    let mut runs: Vec<GroupId> = six.groups.iter().map(|g| g.id).collect();
    runs.sort();
    assert_eq!(runs, vec![0, 1, 4, 5]);
    let all: Vec<&ClusterMember> = members[2..].iter().chain([&six]).collect();
    settled(&all).await;
    assert_eq!(voters(&members[2], 4), BTreeSet::from([3, 6]));
    assert_eq!(voters(&members[2], 5), BTreeSet::from([3, 4, 6]));
    assert_eq!(voters(&members[2], 1), BTreeSet::from([3, 4, 5, 6]));

    // Member 5's host is lost with its disk and replaced under the same id
    // and flags (which still name members 1 and 2, and not 6): it starts
    // from the map its peers hold, not from its flags.
    let version = members[2].maps().get().unwrap().version;
    let five = members.pop().unwrap();
    five.shutdown().await;
    std::fs::remove_dir_all(dir.path().join("member-5")).unwrap();
    let five = start(5, &peers, dir.path(), None).await;
    let map = five.maps().get().unwrap();
    assert_eq!(map.version, version, "{map:?}");
    assert_eq!(
        map.members.keys().copied().collect::<Vec<_>>(),
        vec![3, 4, 5, 6]
    );
    let mut standing = five.standing();
    tokio::time::timeout(
        Duration::from_secs(30),
        standing.wait_for(|s| *s == nsq_replication::standing::Standing::Member),
    )
    .await
    .expect("the replacement catches up")
    .unwrap();
    five.shutdown().await;
    six.shutdown().await;
    for m in members {
        m.shutdown().await;
    }
}

use super::*;

fn peers(ids: &[NodeId]) -> BTreeMap<NodeId, String> {
    ids.iter().map(|i| (*i, format!("h{i}:4250"))).collect()
}

fn add(id: NodeId) -> Change {
    Change::Add {
        id,
        addr: format!("h{id}:4250"),
    }
}

/// Applies `change` and reports every group converged.
fn done(map: &mut ClusterMap, change: Change) {
    let base = map.version;
    assert_eq!(map.apply(&Update::Change { change, base }), Ok(true));
    let at = map.version;
    for group in map.groups() {
        assert!(map.pending.is_some());
        assert_eq!(map.apply(&Update::Converged { at, group }), Ok(true));
    }
    assert_eq!(map.pending, None);
}

#[test]
fn a_formed_map_is_the_placement_of_the_flags() {
    let m = ClusterMap::formed(&peers(&[10, 20, 30, 40, 50]), 4);
    assert_eq!(m.groups(), vec![0, 1, 2, 3, 8, 9, 10, 11]);
    assert_eq!(m.voters(8), Some(BTreeSet::from([10, 20, 30])));
    assert_eq!(m.voters(11), Some(BTreeSet::from([40, 50, 10])));
    assert_eq!(m.voters(1).map(|v| v.len()), Some(5));
    assert_eq!(m.voters(4), None);
    let three = ClusterMap::formed(&peers(&[1, 2, 3]), 16);
    assert_eq!(three.groups(), (0..16).collect::<Vec<_>>());
    assert!(three.voters.is_empty());
}

#[test]
fn an_added_member_joins_the_whole_set_and_fills_vacancies() {
    let mut m = ClusterMap::formed(&peers(&[1, 2, 3]), 2);
    done(&mut m, add(4));
    assert_eq!(m.voters(0), Some(BTreeSet::from([1, 2, 3, 4])));
    // the groups, and so every topic's group, are where they were
    assert_eq!(m.groups(), vec![0, 1]);
    let mut m = ClusterMap::formed(&peers(&[1, 2, 3, 4, 5]), 2);
    assert_eq!(m.voters(4), Some(BTreeSet::from([1, 2, 3])));
    done(&mut m, Change::Remove { id: 1 });
    assert_eq!(m.voters(4), Some(BTreeSet::from([2, 3])));
    assert_eq!(m.voters(0).unwrap().len(), 4);
    // the replacement takes the vacancy, and only it
    done(&mut m, add(6));
    assert_eq!(m.voters(4), Some(BTreeSet::from([2, 3, 6])));
    assert_eq!(m.voters(5), Some(BTreeSet::from([2, 3, 4])));
}

#[test]
fn bad_changes_are_refused_and_change_nothing() {
    let mut m = ClusterMap::formed(&peers(&[1, 2, 3]), 2);
    let was = m.clone();
    assert_eq!(m.check(&add(2)), Err(Refusal::AlreadyMember(2)));
    assert_eq!(
        m.check(&Change::Add {
            id: 9,
            addr: "h3:4250".into()
        }),
        Err(Refusal::AddressInUse {
            addr: "h3:4250".into(),
            id: 3
        })
    );
    assert_eq!(
        m.check(&Change::Remove { id: 7 }),
        Err(Refusal::NotMember(7))
    );
    assert_eq!(
        m.apply(&Update::Change {
            change: add(4),
            base: 5
        }),
        Err(Refusal::Stale { base: 5, now: 0 })
    );
    assert_eq!(m, was);
    // one change at a time
    assert_eq!(
        m.apply(&Update::Change {
            change: add(4),
            base: 0
        }),
        Ok(true)
    );
    let pending = m.clone();
    assert!(matches!(
        m.apply(&Update::Change {
            change: add(5),
            base: 1
        }),
        Err(Refusal::InProgress {
            done: 0,
            groups: 2,
            ..
        })
    ));
    // a report of another version, or twice, changes nothing
    assert_eq!(m.apply(&Update::Converged { at: 7, group: 0 }), Ok(false));
    assert_eq!(m, pending);
    assert_eq!(m.apply(&Update::Converged { at: 1, group: 0 }), Ok(true));
    assert_eq!(m.apply(&Update::Converged { at: 1, group: 0 }), Ok(false));
    assert_eq!(m.apply(&Update::Converged { at: 1, group: 1 }), Ok(true));
    assert_eq!((m.pending.clone(), m.version), (None, 3));
}

#[test]
fn the_last_voter_of_a_group_and_the_last_member_stay() {
    let mut m = ClusterMap::formed(&peers(&[1, 2, 3, 4, 5]), 1);
    // group 2 (a set of three) has 3, 4, 5... after two leave, the third
    // is its last voter
    let g = *m.voters.keys().next().unwrap();
    let v: Vec<NodeId> = m.voters[&g].iter().copied().collect();
    done(&mut m, Change::Remove { id: v[0] });
    done(&mut m, Change::Remove { id: v[1] });
    assert_eq!(
        m.check(&Change::Remove { id: v[2] }),
        Err(Refusal::LastVoter { id: v[2], group: g })
    );
    let mut two = ClusterMap::formed(&peers(&[1, 2]), 1);
    done(&mut two, Change::Remove { id: 1 });
    assert_eq!(
        two.check(&Change::Remove { id: 2 }),
        Err(Refusal::LastMember(2))
    );
}

#[test]
fn updates_ride_in_payloads_nsqd_never_writes() {
    let u = Update::Converged { at: 3, group: 17 };
    let p = u.encode();
    assert!(is_map_entry(&p));
    assert_eq!(Update::decode(&p), Some(u));
    // nsqd's entries begin with their version, 1
    assert!(!is_map_entry(&[1, 0, 0]));
    assert_eq!(Update::decode(&[1, 0]), None);
}

#[test]
fn an_add_not_carried_out_can_be_undone() {
    let mut m = ClusterMap::formed(&peers(&[1, 2, 3, 4, 5]), 1);
    assert_eq!(
        m.apply(&Update::Change {
            change: add(6),
            base: 0
        }),
        Ok(true)
    );
    assert_eq!(m.apply(&Update::Converged { at: 1, group: 0 }), Ok(true));
    // another change waits, but removing node 6 undoes the add
    assert!(matches!(
        m.check(&Change::Remove { id: 2 }),
        Err(Refusal::InProgress { .. })
    ));
    assert_eq!(
        m.apply(&Update::Change {
            change: Change::Remove { id: 6 },
            base: 2
        }),
        Ok(true)
    );
    assert!(!m.members.contains_key(&6));
    assert!(m.voters.values().all(|v| !v.contains(&6)));
    let p = m.pending.clone().unwrap();
    assert_eq!(
        (p.change, p.at, p.converged.len()),
        (Change::Remove { id: 6 }, 3, 0)
    );
}

//! A channel's depth limit (`reject`, `drop-oldest`), the server played by
//! [`super::Harness`].

use super::*;

fn limit(max_depth: u64, policy: crate::core::Policy) -> crate::core::Limit {
    crate::core::Limit { max_depth, policy }
}

#[test]
fn drop_oldest_keeps_the_depth_at_max_and_counts_what_it_dropped() {
    // memory 2, the rest on disk: the oldest go from memory first, then
    // from the disk's head
    let mut h = Harness::new(cfg(2));
    h.ch.set_limit(limit(5, crate::core::Policy::DropOldest));
    h.put(0..5);
    assert_eq!(h.depth(), 5);
    h.put(5..8);
    assert_eq!(h.depth(), 5);
    assert_eq!(h.ch.stats("c", h.disk.len() as i64, h.now).dropped_count, 3);
    assert_eq!(h.skipped.iter().map(n_of).collect::<Vec<_>>(), vec![2]);
    // a batch larger than the limit keeps its newest five
    h.put(100..110);
    assert_eq!(h.depth(), 5);
    let s = h.ch.stats("c", h.disk.len() as i64, h.now);
    assert_eq!((s.dropped_count, s.message_count), (13, 18));
    h.sub(1, 100);
    let mut got: Vec<u64> = h.take(1).iter().map(n_of).collect();
    got.sort();
    assert_eq!(got, vec![105, 106, 107, 108, 109]);
}

#[test]
fn reject_refuses_what_would_cross_max_depth_and_never_a_requeue() {
    let mut h = Harness::new(cfg(10));
    h.ch.set_limit(limit(3, crate::core::Policy::Reject));
    assert!(!h.ch.refuses(3));
    h.put(0..3);
    assert!(h.ch.refuses(1), "full");
    assert!(h.ch.refuses(1) && !h.ch.refuses(0));
    // counted with the disk: two in memory and one on disk is three
    let mut h2 = Harness::new(cfg(2));
    h2.ch.set_limit(limit(3, crate::core::Policy::Reject));
    h2.put(0..3);
    assert!(h2.ch.refuses(1));
    // a message already accepted goes back whatever the limit
    h.sub(1, 1);
    let m = h.take(1).remove(0);
    h.ch.requeue(1, &m.id, Duration::ZERO, h.now).unwrap();
    h.settle();
    assert_eq!(h.depth() + h.ch.in_flight_count(), 3);
}

#[test]
fn no_limit_is_nsqs_behaviour() {
    let mut h = Harness::new(cfg(2));
    h.put(0..50);
    assert_eq!(h.depth(), 50);
    assert!(!h.ch.refuses(1_000_000));
    let s = h.ch.stats("c", h.disk.len() as i64, h.now);
    assert_eq!(
        (s.dropped_count, s.max_depth, s.max_depth_policy),
        (0, 0, None)
    );
}

#[test]
fn what_the_group_dropped_leaves_memory_now_and_is_skipped_elsewhere() {
    // memory 2, the rest on disk; one dropped before it even arrives
    let mut h = Harness::new(cfg(2));
    h.ch.drop_for_group(&[msg(0).id, msg(3).id, msg(5).id]);
    h.put(0..5);
    assert_eq!(h.depth(), 5);
    // waiting in memory: gone at once
    h.ch.drop_for_group(&[msg(1).id]);
    assert_eq!(h.depth(), 4);
    h.sub(1, 100);
    let mut got: Vec<u64> = h.take(1).iter().map(n_of).collect();
    got.sort();
    assert_eq!(got, vec![2, 4]);
    let s = h.ch.stats("c", h.disk.len() as i64, h.now);
    assert_eq!(s.dropped_count, 3);
    // the one not yet arrived is skipped when it does
    h.put(5..7);
    let got = h.take(1);
    assert_eq!(got.iter().map(n_of).collect::<Vec<_>>(), vec![6]);
    // one in flight: done with at its FIN
    h.ch.drop_for_group(&[got[0].id]);
    assert_eq!(h.ch.group_dropped.len(), 1);
    assert!(h.fin(1, &[got[0].id]).is_empty());
    assert!(h.ch.group_dropped.is_empty());
}

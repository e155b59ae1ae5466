//! A channel and its backend, the server played by [`super::Harness`]:
//! records that become readable later, dead letters past `max_attempts`,
//! and with durable acknowledgements which backend record each message
//! still holds.

use super::*;

#[test]
fn records_that_become_readable_later_are_fetched_when_the_backend_grows() {
    // durable acknowledgements: the disk queue shows records only once a
    // sync covered them
    let mut h = Harness::new(ChannelConfig {
        hand_off: false,
        ..cfg(0)
    });
    h.sub(1, 5);
    h.gated = true;
    h.put([1, 2, 3]);
    assert!(h.take(1).is_empty(), "nothing readable before the sync");
    assert_eq!(h.disk.len(), 3);
    h.gated = false;
    h.ch.backend_grew(h.now);
    h.settle();
    assert_eq!(nums(&h.take(1)), vec![1, 2, 3]);
}

#[test]
fn a_message_past_max_attempts_goes_to_the_dead_letter_topic_instead_of_its_next_delivery() {
    let mut h = Harness::new(ChannelConfig {
        max_attempts: 2,
        ..cfg(100)
    });
    h.sub(1, 1);
    h.put([1]);
    let m = h.take(1).remove(0);
    assert_eq!((n_of(&m), m.attempts), (1, 1));
    h.ch.requeue(1, &m.id, Duration::ZERO, h.now).unwrap();
    h.settle();
    let m = h.take(1).remove(0);
    assert_eq!((n_of(&m), m.attempts), (1, 2));
    h.put([2]);
    h.ch.requeue(1, &m.id, Duration::ZERO, h.now).unwrap();
    h.settle();
    let two = h.take(1);
    assert_eq!(nums(&two), vec![2]);
    // the next pass reaches 1: attempt 3 would exceed max_attempts, so it
    // is dead-lettered, and the client's turn is not used up by it
    h.put([3]);
    assert!(h.fin(1, &ids(&two)).is_empty());
    assert_eq!(nums(&h.take(1)), vec![3], "the client keeps its turn");
    assert_eq!(nums(&h.dead), vec![1]);
    assert_eq!(h.dead[0].body, msg(1).body, "body unchanged");
    let s = h.ch.stats("c", 0, h.now);
    assert_eq!((s.dead_letter_count, s.depth, s.in_flight_count), (1, 0, 1));
}

#[test]
fn dead_letters_the_topic_refuses_stay_in_the_channel() {
    let mut h = Harness::new(ChannelConfig {
        max_attempts: 1,
        ..cfg(100)
    });
    h.refuse_dead = true;
    h.sub(1, 1);
    h.put([1]);
    let m = h.take(1).remove(0);
    h.ch.requeue(1, &m.id, Duration::ZERO, h.now).unwrap();
    h.settle();
    assert!(h.dead.is_empty());
    let s = h.ch.stats("c", 0, h.now);
    assert_eq!(
        (s.dead_letter_count, s.deferred_count),
        (0, 1),
        "kept, not counted, retried later"
    );
    h.ch.pump(h.now);
    h.settle();
    assert!(h.dead.is_empty(), "not before the retry delay");
    h.refuse_dead = false;
    h.timers_at(DEAD_LETTER_RETRY);
    assert_eq!(nums(&h.dead), vec![1], "moved once the topic takes it");
}

#[test]
fn max_attempts_zero_is_unlimited_and_can_be_changed_at_run_time() {
    let mut h = Harness::new(cfg(100));
    h.sub(1, 1);
    h.put([1]);
    for _ in 0..5 {
        let m = h.take(1).remove(0);
        h.ch.requeue(1, &m.id, Duration::ZERO, h.now).unwrap();
        h.settle();
    }
    assert!(h.dead.is_empty());
    let m = h.take(1).remove(0);
    assert_eq!(m.attempts, 6);
    h.ch.set_max_attempts(3, h.now);
    h.ch.requeue(1, &m.id, Duration::ZERO, h.now).unwrap();
    h.settle();
    assert_eq!(nums(&h.dead), vec![1]);
}

fn durable_acks(max_attempts: u16) -> Harness {
    let mut h = Harness::new(ChannelConfig {
        hand_off: false,
        max_attempts,
        ..cfg(0)
    });
    h.acked = true;
    h
}

#[test]
fn with_durable_acks_a_backend_record_is_released_only_when_its_message_is_done() {
    let mut h = durable_acks(0);
    h.sub(1, 4);
    h.put([1, 2, 3, 4]);
    let got = h.take(1);
    assert_eq!(nums(&got), vec![1, 2, 3, 4]);
    assert_eq!(h.outstanding(), vec![1, 2, 3, 4], "all in flight: all kept");
    assert!(h.fin(1, &[got[0].id]).is_empty());
    h.ch.requeue(1, &got[1].id, Duration::from_secs(5), h.now)
        .unwrap();
    h.settle();
    assert_eq!(
        h.outstanding(),
        vec![2, 3, 4],
        "finished 1 released; deferred 2 and in-flight 3, 4 kept"
    );
    assert!(h.fin(1, &[got[3].id]).is_empty());
    // 3 times out and 2 is due: with no memory they are written back to
    // the disk queue as new records, which replace the old ones
    h.rdy(1, 0);
    h.timers_at(T + Duration::from_secs(1));
    assert!(h.outstanding().is_empty(), "{:?}", h.outstanding());
    assert_eq!(
        nums(&h.disk.iter().cloned().collect::<Vec<_>>()),
        vec![3, 2]
    );
    h.rdy(1, 10);
    let again = h.take(1);
    assert_eq!(nums(&again), vec![3, 2]);
    assert_eq!(h.outstanding(), vec![2, 3], "read again: kept again");
    assert!(h.fin(1, &ids(&again)).is_empty());
    assert!(h.outstanding().is_empty(), "{:?}", h.outstanding());
}

#[test]
fn with_durable_acks_a_message_written_back_or_dead_lettered_releases_its_old_record() {
    let mut h = durable_acks(2);
    h.sub(1, 1);
    h.put([1]);
    let m = h.take(1).remove(0);
    assert_eq!(h.outstanding(), vec![1]);
    // memory is 0: the requeued message goes back to the disk queue as a
    // new record, and the one it was read from is released after the append
    h.ch.requeue(1, &m.id, Duration::ZERO, h.now).unwrap();
    h.settle();
    let m = h.take(1).remove(0);
    assert_eq!((n_of(&m), m.attempts), (1, 2));
    assert_eq!(h.outstanding(), vec![1], "one record: the rewritten one");
    // a refused dead letter keeps its record; an accepted one releases it
    h.refuse_dead = true;
    h.ch.requeue(1, &m.id, Duration::ZERO, h.now).unwrap();
    h.settle();
    assert!(h.dead.is_empty());
    assert_eq!(h.outstanding(), vec![1]);
    h.refuse_dead = false;
    h.timers_at(DEAD_LETTER_RETRY);
    assert_eq!(nums(&h.dead), vec![1]);
    assert!(h.outstanding().is_empty());
}

#[test]
fn a_second_copy_of_a_message_is_never_in_flight_twice() {
    // without durable acks: a crash-replayed record meets its message in flight
    let mut h = Harness::new(ChannelConfig {
        hand_off: false,
        ..cfg(0)
    });
    h.sub(1, 5);
    h.put([1]);
    let first = h.take(1);
    assert_eq!(nums(&first), vec![1]);
    h.disk.push_back(msg(1));
    h.ch.backend_grew(h.now);
    h.settle();
    assert!(h.take(1).is_empty(), "the copy is not delivered");
    assert!(h.fin(1, &ids(&first)).is_empty());
    let s = h.ch.subscriber(1).unwrap();
    assert_eq!(s.in_flight, 0, "no credit leaked");
}

#[test]
fn with_durable_acks_a_replayed_second_record_of_a_message_is_acknowledged_and_dropped() {
    let mut h = durable_acks(0);
    h.sub(1, 5);
    h.put([1, 2]);
    let got = h.take(1);
    assert_eq!(h.outstanding(), vec![1, 2]);
    // the crash replay: both records of message 1 (read and written back)
    h.disk.push_back(msg(1));
    h.ch.backend_grew(h.now);
    h.settle();
    assert!(h.take(1).is_empty());
    assert_eq!(h.outstanding(), vec![1, 2], "the copy's record is released");
    assert!(h.fin(1, &ids(&got)).is_empty());
    assert!(h.outstanding().is_empty());
    assert_eq!(h.ch.subscriber(1).unwrap().in_flight, 0);
}

#[test]
fn records_on_disk_are_delivered_while_a_steady_publisher_keeps_memory_from_emptying() {
    // memory holds 4: of 1..=8, 1 goes out at once, 2..=5 wait in memory
    // and 6..=8 go to disk; then one message in for each one finished, so
    // memory never empties and has room for one record at each turn
    let mut h = Harness::new(cfg(4));
    h.sub(1, 1);
    h.put(1..=8);
    assert_eq!(h.disk.len(), 3);
    let mut got = Vec::new();
    let rounds = 4 * (crate::core::queue::FAIR_AFTER as u64 + 1);
    for next in 9..9 + rounds {
        let out = h.take(1);
        got.extend(nums(&out));
        assert!(h.fin(1, &ids(&out)).is_empty());
        h.put([next]);
        h.settle();
    }
    for n in 6..=8 {
        assert!(got.contains(&n), "record {n} on disk starved: {got:?}");
    }
}

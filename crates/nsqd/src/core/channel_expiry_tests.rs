//! A channel's expiry (`max_age`), driven as the server drives it: the
//! wall clock is told once, and time moves on the monotonic clock.

use super::*;

/// The wall clock (Unix ns) at the harness's `now`.
const WALL: i64 = 10_000_000_000_000;
const AGE: Duration = Duration::from_secs(60);

/// Message `n`, published `ago` before the harness's `now`.
fn aged(n: u64, ago: Duration) -> Message {
    Message::new(
        MessageId::from_guid(n),
        WALL - ago.as_nanos() as i64,
        Bytes::from(format!("m{n}")),
    )
}

fn expiring(mem: usize, dead_letters: bool) -> Harness {
    let mut h = Harness::new(cfg(mem));
    let now = h.now;
    h.ch.set_max_age(Some(AGE), Duration::ZERO, dead_letters, now, WALL);
    h.settle();
    h
}

fn put_aged(h: &mut Harness, msgs: Vec<Message>) {
    h.ch.put(msgs, h.now);
    h.settle();
}

const OLD: Duration = Duration::from_secs(61);
const FRESH: Duration = Duration::from_secs(1);

#[test]
fn an_expired_message_in_memory_is_never_delivered_and_is_counted() {
    let mut h = expiring(100, false);
    put_aged(&mut h, vec![aged(1, OLD), aged(2, FRESH), aged(3, OLD)]);
    h.sub(1, 10);
    assert_eq!(nums(&h.take(1)), vec![2]);
    assert_eq!(h.ch.expired_count(), 2);
    assert!(h.dead.is_empty(), "no dead-letter topic: dropped");
    assert_eq!(h.depth(), 0);
    let s = h.ch.stats("c", 0, h.now);
    assert_eq!((s.expired_count, s.max_age.as_deref()), (2, Some("1m0s")));
}

#[test]
fn with_a_dead_letter_topic_expired_messages_go_there_bodies_unchanged() {
    let mut h = expiring(100, true);
    put_aged(&mut h, vec![aged(1, OLD), aged(2, FRESH)]);
    h.sub(1, 10);
    assert_eq!(nums(&h.take(1)), vec![2]);
    assert_eq!(nums(&h.dead), vec![1]);
    assert_eq!(&h.dead[0].body[..], b"m1");
    assert_eq!(h.ch.expired_count(), 1);
    assert_eq!(
        h.ch.stats("c", 0, h.now).dead_letter_count,
        0,
        "not past max_attempts"
    );
}

#[test]
fn the_timer_drops_what_expires_at_the_head_with_no_consumer_and_wakes_for_the_next() {
    let mut h = expiring(100, false);
    put_aged(
        &mut h,
        vec![
            aged(1, Duration::from_secs(59)),
            aged(2, Duration::from_secs(30)),
        ],
    );
    assert!(h.ch.take_wake(), "the timer is woken for the head's expiry");
    let next = h.timers_at(Duration::ZERO);
    assert_eq!(
        next,
        Some(h.now + Duration::from_secs(1)),
        "when message 1 expires"
    );
    let next = h.timers_at(Duration::from_secs(2));
    assert_eq!(h.ch.expired_count(), 1);
    assert_eq!(h.depth(), 1);
    assert_eq!(
        next,
        Some(h.now + Duration::from_secs(30)),
        "then message 2"
    );
    assert_eq!(
        h.timers_at(Duration::from_secs(31)),
        None,
        "nothing left to expire"
    );
    assert_eq!((h.depth(), h.ch.expired_count()), (0, 2));
}

#[test]
fn the_backend_is_swept_of_its_expired_head_without_a_consumer() {
    let mut h = expiring(1, false);
    put_aged(&mut h, (1..=5).map(|n| aged(n, OLD)).collect());
    put_aged(&mut h, vec![aged(6, FRESH)]);
    assert_eq!(h.disk.len(), 5, "past memory, on the disk");
    let next = h.timers_at(Duration::ZERO);
    assert_eq!(h.ch.expired_count(), 5, "1 from memory, 4 skipped on disk");
    assert_eq!(
        nums(h.disk.iter().cloned().collect::<Vec<_>>().as_slice()),
        vec![6]
    );
    assert!(next.is_some(), "the backend still holds one: swept again");
    h.sub(1, 10);
    assert_eq!(nums(&h.take(1)), vec![6]);
}

#[test]
fn a_deferral_that_comes_due_after_expiry_expires_then() {
    let mut h = expiring(100, false);
    h.sub(1, 10);
    h.ch.put_deferred(
        vec![aged(1, Duration::from_secs(50))],
        Duration::from_secs(20),
        h.now,
    );
    h.settle();
    h.timers_at(Duration::from_secs(21));
    assert!(h.take(1).is_empty());
    assert_eq!(h.ch.expired_count(), 1);
    assert_eq!(h.ch.deferred_count(), 0);
}

#[test]
fn a_requeue_of_an_expired_message_expires_it() {
    let mut h = expiring(100, false);
    h.sub(1, 10);
    put_aged(
        &mut h,
        vec![aged(1, Duration::from_secs(59)), aged(2, FRESH)],
    );
    let got = h.take(1);
    assert_eq!(nums(&got), vec![1, 2]);
    let later = h.now + Duration::from_secs(5);
    h.ch.requeue(1, &got[0].id, Duration::ZERO, later).unwrap();
    h.ch.requeue(1, &got[1].id, Duration::ZERO, later).unwrap();
    h.settle();
    assert_eq!(
        nums(&h.take(1)),
        vec![2],
        "only the one still young comes back"
    );
    assert_eq!(h.ch.expired_count(), 1);
    let s = h.ch.stats("c", 0, h.now);
    assert_eq!(s.requeue_count, 2, "both REQs counted");
}

#[test]
fn a_replicated_topics_channel_finishes_what_it_drops_for_its_group() {
    let mut h = expiring(100, false);
    h.ch.record_finished();
    put_aged(&mut h, vec![aged(1, OLD)]);
    h.sub(1, 10);
    assert_eq!(h.ch.take_finished(), vec![MessageId::from_guid(1)]);
}

#[test]
fn a_refused_dead_letter_that_expired_is_counted_once() {
    let mut h = expiring(100, true);
    h.refuse_dead = true;
    put_aged(&mut h, vec![aged(1, OLD)]);
    h.sub(1, 10);
    assert_eq!(
        h.ch.expired_count(),
        0,
        "refused: back in deferral, uncounted"
    );
    h.refuse_dead = false;
    h.timers_at(DEAD_LETTER_RETRY);
    assert_eq!(nums(&h.dead), vec![1]);
    assert_eq!(h.ch.expired_count(), 1);
}

#[test]
fn the_shorter_of_the_channels_and_the_topics_max_age_applies() {
    let mut h = Harness::new(cfg(100));
    let now = h.now;
    let (s, m, l) = (
        Duration::from_secs(10),
        Duration::from_secs(60),
        Duration::from_secs(600),
    );
    let max_age = |h: &mut Harness, own, topic| {
        h.ch.set_max_age(own, topic, false, now, WALL);
        h.ch.max_age()
    };
    assert_eq!(
        max_age(&mut h, Some(s), m),
        s,
        "a channel's shorter one wins"
    );
    assert_eq!(
        max_age(&mut h, Some(l), m),
        m,
        "a longer one cannot outlive the topic's"
    );
    assert_eq!(max_age(&mut h, None, m), m);
    assert_eq!(max_age(&mut h, Some(s), Duration::ZERO), s);
    assert_eq!(
        max_age(&mut h, Some(Duration::ZERO), m),
        m,
        "zero: none of its own"
    );
    assert_eq!(h.ch.own_max_age(), None);
    assert_eq!(max_age(&mut h, None, Duration::ZERO), Duration::ZERO);
    assert!(!h.ch.expires());
}

#[test]
fn expiry_off_delivers_every_message_whatever_its_age() {
    let mut h = Harness::new(cfg(100));
    put_aged(&mut h, vec![aged(1, Duration::from_secs(86_400 * 365))]);
    h.sub(1, 10);
    assert_eq!(nums(&h.take(1)), vec![1]);
    assert_eq!(h.ch.expired_count(), 0);
    assert_eq!(h.ch.stats("c", 0, h.now).max_age, None);
}

#[test]
fn expiry_off_costs_a_channel_one_empty_pointer_and_the_count_outlives_turning_it_off() {
    assert_eq!(
        std::mem::size_of::<expiry::Expiry>(),
        std::mem::size_of::<usize>()
    );
    let mut h = Harness::new(cfg(100));
    let now = h.now;
    h.ch.set_max_age(None, Duration::ZERO, true, now, WALL);
    h.ch.set_expired_dead_letters(true);
    assert!(!h.ch.expiry.allocated(), "nothing allocated while off");
    assert!(!h.ch.expires() && h.ch.max_age().is_zero());

    let mut h = expiring(100, false);
    put_aged(&mut h, vec![aged(1, AGE * 2)]);
    h.sub(1, 10);
    assert!(h.take(1).is_empty());
    let now = h.now;
    h.ch.set_max_age(None, Duration::ZERO, false, now, WALL);
    assert_eq!((h.ch.expired_count(), h.ch.own_max_age()), (1, None));
    put_aged(&mut h, vec![aged(2, AGE * 2)]);
    assert_eq!(nums(&h.take(1)), vec![2], "off again: delivered");
}

//! A channel's deferred messages driven through the channel, the server
//! played by [`super::Harness`]: REQ with a delay, DPUB, a clean close, and
//! with spilling on, run files written, loaded when due and deleted.

use super::*;
use crate::core::deferred::SpillConfig;

#[test]
fn requeue_with_a_delay_is_deferred_until_due() {
    let mut h = Harness::new(cfg(100));
    h.sub(1, 5);
    h.put([1]);
    let m = h.take(1).remove(0);
    h.ch.requeue(1, &m.id, Duration::from_secs(2), h.now)
        .unwrap();
    h.settle();
    assert_eq!(h.ch.deferred_count(), 1);
    assert!(h.ch.take_wake(), "the timer must wake for the new due time");
    h.timers_at(Duration::from_millis(1999));
    assert!(h.take(1).is_empty());
    h.timers_at(Duration::from_secs(2));
    let m2 = h.take(1);
    assert_eq!((m2.len(), m2[0].attempts), (1, 2));
    assert_eq!(h.ch.stats("c", 0, h.now).requeue_count, 1);
}

#[test]
fn a_deferred_message_keeps_only_its_own_bytes() {
    let mut h = Harness::new(cfg(100));
    h.sub(1, 10);
    // two records of one read-ahead buffer, as the disk queue hands them out
    let shared = Bytes::from_static(b"m1m2");
    let (a, b) = (shared.slice(0..2), shared.slice(2..4));
    let a_at = a.as_ptr();
    h.ch.put(
        vec![
            Message::new(MessageId::from_guid(1), 1_000, a),
            Message::new(MessageId::from_guid(2), 1_000, b),
        ],
        h.now,
    );
    h.settle();
    let got = h.take(1);
    assert_eq!(nums(&got), vec![1, 2]);
    h.ch.requeue(1, &got[0].id, Duration::from_secs(5), h.now)
        .unwrap();
    let kept = h.ch.deferred.pop_due(h.now + Duration::from_secs(5));
    let kept = kept.expect("deferred");
    assert_eq!(&kept.body[..], b"m1");
    assert_ne!(kept.body.as_ptr(), a_at, "a copy, not the shared buffer");
}

#[test]
fn close_returns_memory_then_in_flight_then_deferred_with_attempts_kept() {
    let mut h = Harness::new(cfg(100));
    h.sub(1, 2);
    h.put(0..4); // 0, 1 in flight; 2, 3 in memory
    h.ch.put_deferred(vec![msg(6)], Duration::from_secs(9), h.now);
    h.ch.put_deferred(vec![msg(5)], Duration::from_secs(5), h.now);
    let (saved, run) = h.ch.close();
    assert!(
        run.is_none(),
        "without spill, deferred ones go to the backend"
    );
    assert_eq!(nums(&saved), vec![2, 3, 0, 1, 5, 6]);
    assert_eq!(
        saved.iter().map(|m| m.attempts).collect::<Vec<_>>(),
        vec![0, 0, 1, 1, 0, 0]
    );
    assert_eq!(h.ch.add_client(2, T, 0, 0), Err(SubError::Exiting));
}

fn spilling(mem: usize, durable: bool) -> ChannelConfig {
    ChannelConfig {
        spill: Some(SpillConfig {
            threshold: mem,
            durable,
            max_run_bytes: u64::MAX,
        }),
        ..cfg(mem)
    }
}

impl Harness {
    /// Moves the clock to `at` after the start and runs the timers.
    fn advance(&mut self, t0: Instant, at: Duration) {
        self.now = t0 + at;
        self.ch.process_timers(self.now);
        self.settle();
    }
}

#[test]
fn dpubs_past_mem_queue_size_spill_and_are_delivered_when_due_never_early() {
    let mut h = Harness::new(spilling(10, false));
    let t0 = h.now;
    h.sub(1, 1000);
    h.ch.put_deferred((0..100).map(msg).collect(), Duration::from_secs(30), t0);
    h.settle();
    assert_eq!(h.ch.deferred_count(), 100);
    assert_eq!(h.ch.deferred_in_memory(), 10);
    assert_eq!(h.runs.values().map(|r| r.0.len()).sum::<usize>(), 90);
    h.advance(t0, Duration::from_millis(29_990));
    assert!(h.take(1).is_empty(), "nothing early");
    h.advance(t0, Duration::from_secs(30));
    let got = h.take(1);
    assert_eq!(nums(&got), (0..100).collect::<Vec<_>>());
    assert_eq!(h.ch.deferred_count(), 0);
    assert!(h.runs.is_empty() && h.deleted_runs.len() == 1);
}

#[test]
fn with_durable_acks_a_run_is_deleted_in_the_call_that_appends_its_last_records() {
    let mut h = Harness::new(ChannelConfig {
        hand_off: false,
        ..spilling(0, true)
    });
    let t0 = h.now;
    h.ch.put_deferred((0..5).map(msg).collect(), Duration::from_millis(200), t0);
    h.settle();
    let written: Vec<usize> = h.runs.values().map(|r| r.0.len()).collect();
    assert_eq!(written, vec![5], "on disk at once, however short the delay");
    h.advance(t0, Duration::from_millis(200));
    assert_eq!(h.disk.len(), 5, "due: into the backend (no memory queue)");
    assert_eq!(
        h.appends_at_delete,
        vec![h.appends],
        "deleted with that append"
    );
}

#[test]
fn a_requeue_with_a_delay_spills_too_and_close_keeps_the_due_times_of_memory() {
    let mut h = Harness::new(spilling(1, false));
    let t0 = h.now;
    h.sub(1, 2);
    h.put([1, 2]);
    let got = h.take(1);
    h.ch.requeue(1, &got[0].id, Duration::from_secs(5), t0)
        .unwrap();
    h.ch.requeue(1, &got[1].id, Duration::from_secs(9), t0)
        .unwrap();
    h.settle();
    assert_eq!((h.ch.deferred_in_memory(), h.runs.len()), (1, 1));
    let (saved, run) = h.ch.close();
    assert!(saved.is_empty());
    let run = run.expect("memory's deferrals as a run");
    assert_eq!(run.records.len(), 1);
    assert_eq!(run.records[0].0, t0 + Duration::from_secs(5));
    assert!(run.new && !h.runs.contains_key(&run.run));
}

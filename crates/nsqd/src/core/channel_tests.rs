//! The channel state machine driven the way the server drives it, with an
//! in-memory backend: every call's effects are carried out (frames decoded
//! per client, appends and refills against a `VecDeque`) before the next.

use std::collections::{BTreeMap, HashMap, VecDeque};

use bytes::Bytes;

use super::*;

const T: Duration = Duration::from_secs(60);

fn msg(n: u64) -> Message {
    Message::new(MessageId::from_guid(n), 1_000, Bytes::from(format!("m{n}")))
}

fn n_of(m: &Message) -> u64 {
    std::str::from_utf8(&m.body[1..]).unwrap().parse().unwrap()
}

fn cfg(mem: usize) -> ChannelConfig {
    ChannelConfig {
        mem_queue_size: mem,
        durable: true,
        backend_unread: false,
        backend_depth: 0,
        max_attempts: 0,
        hand_off: true,
        e2e: None,
        seed: 7,
        spill: None,
        restored_runs: Vec::new(),
    }
}

/// The server, played by the test.
struct Harness {
    ch: Channel,
    disk: VecDeque<Message>,
    got: HashMap<ClientId, Vec<Message>>,
    appends: usize,
    refills: usize,
    /// Records on the fake disk are not readable yet (not durable).
    gated: bool,
    /// What went to the dead-letter topic.
    dead: Vec<Message>,
    /// Backend records a `drop-oldest` limit dropped.
    skipped: Vec<Message>,
    /// The dead-letter topic refuses publishes.
    refuse_dead: bool,
    /// The backend keeps what it hands out until it is acknowledged (nsqd
    /// with `--sync-every=1`): read numbers go with refills.
    acked: bool,
    reads: u64,
    /// Records handed out and not acknowledged, by read number: what a
    /// crash would bring back.
    outstanding: BTreeMap<u64, MessageId>,
    /// Run files of spilled deferred messages, each with its read position.
    runs: BTreeMap<u64, (Vec<(Instant, Message)>, usize)>,
    /// Runs the channel was done with, in order.
    deleted_runs: Vec<u64>,
    /// Appends to the backend in the call that deleted a run, for each
    /// deletion (with durable acks its records must be in the backend first).
    appends_at_delete: Vec<usize>,
    now: Instant,
}

impl Harness {
    fn new(cfg: ChannelConfig) -> Harness {
        let now = Instant::now();
        Harness {
            ch: Channel::new(cfg, now),
            disk: VecDeque::new(),
            got: HashMap::new(),
            appends: 0,
            refills: 0,
            gated: false,
            dead: Vec::new(),
            skipped: Vec::new(),
            refuse_dead: false,
            acked: false,
            reads: 0,
            outstanding: BTreeMap::new(),
            runs: BTreeMap::new(),
            deleted_runs: Vec::new(),
            appends_at_delete: Vec::new(),
            now,
        }
    }

    /// Carries out effects until none are left.
    fn settle(&mut self) {
        loop {
            let got = &mut self.got;
            self.ch.flush_deliveries(|c, frames| {
                got.entry(c).or_default().extend(decode_frames(&frames[..]))
            });
            let work = self.ch.take_disk_work();
            if work.is_empty() {
                return;
            }
            if !work.dead_letters.is_empty() {
                if self.refuse_dead {
                    self.ch.dead_letters_refused(
                        work.dead_letters,
                        work.dead_letter_acks,
                        self.now,
                    );
                } else {
                    self.dead.extend(work.dead_letters);
                    for (_, read) in work.dead_letter_acks {
                        self.ack(read);
                    }
                }
            }
            if !work.append.is_empty() {
                self.appends += 1;
                self.disk.extend(work.append);
                self.ch.appended(self.now);
            }
            for b in work.deferred.spill {
                let run = self.runs.entry(b.run).or_default();
                run.0.extend(b.records);
                self.ch.spilled(b.run, Vec::new(), self.now);
            }
            for l in work.deferred.load {
                let (recs, pos) = self.runs.get_mut(&l.run).expect("a load of a run on disk");
                let mut got = Vec::new();
                while got.len() < l.max && *pos < recs.len() && recs[*pos].0 <= l.until {
                    got.push(recs[*pos].clone());
                    *pos += 1;
                }
                let next = recs.get(*pos).map(|r| r.0);
                self.ch.loaded(l.run, got, next, self.now);
            }
            for id in work.deferred.delete {
                self.runs.remove(&id);
                self.deleted_runs.push(id);
                self.appends_at_delete.push(self.appends);
            }
            if work.skip > 0 {
                let n = (work.skip as usize).min(self.disk.len());
                self.skipped.extend(self.disk.drain(..n));
            }
            if let Some(e) = work.expire {
                let n = self
                    .disk
                    .iter()
                    .take(e.max)
                    .take_while(|m| m.timestamp < e.before_ns)
                    .count();
                let gone: Vec<Message> = self.disk.drain(..n).collect();
                if e.bodies {
                    self.ch.backend_expired(0, gone, Vec::new(), self.now);
                } else {
                    self.ch
                        .backend_expired(n as u64, Vec::new(), Vec::new(), self.now);
                }
            }
            for read in work.acks {
                self.ack(read);
            }
            if let Some(r) = work.refill {
                self.refills += 1;
                let n = if self.gated {
                    0
                } else {
                    r.max.min(self.disk.len())
                };
                let recs: Vec<Message> = self.disk.drain(..n).collect();
                let more = !self.gated && !self.disk.is_empty();
                let mut reads = Vec::new();
                if self.acked {
                    for m in &recs {
                        self.reads += 1;
                        self.outstanding.insert(self.reads, m.id);
                        reads.push(self.reads);
                    }
                }
                self.ch.refilled(r, recs, reads, more, self.now);
            }
        }
    }

    fn ack(&mut self, read: u64) {
        assert!(
            self.outstanding.remove(&read).is_some(),
            "ack of read {read}, not outstanding"
        );
    }

    /// Message numbers a crash now would deliver again.
    fn outstanding(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .outstanding
            .values()
            .map(|id| u64::from_str_radix(std::str::from_utf8(&id.0).unwrap(), 16).unwrap())
            .collect();
        v.sort();
        v
    }

    fn put(&mut self, ns: impl IntoIterator<Item = u64>) {
        self.ch.put(ns.into_iter().map(msg).collect(), self.now);
        self.settle();
    }

    fn sub(&mut self, c: ClientId, rdy: i64) {
        self.ch.add_client(c, T, 0, 0).unwrap();
        self.ch.set_rdy(c, rdy, self.now);
        self.settle();
    }

    fn rdy(&mut self, c: ClientId, rdy: i64) {
        self.ch.set_rdy(c, rdy, self.now);
        self.settle();
    }

    fn fin(&mut self, c: ClientId, ids: &[MessageId]) -> Vec<(MessageId, InFlightError)> {
        let mut failed = Vec::new();
        self.ch
            .finish(c, ids, self.now, 2_000, |id, e| failed.push((*id, e)));
        self.settle();
        failed
    }

    fn timers_at(&mut self, at: Duration) -> Option<Instant> {
        let next = self.ch.process_timers(self.now + at);
        self.settle();
        next
    }

    fn take(&mut self, c: ClientId) -> Vec<Message> {
        self.got.remove(&c).unwrap_or_default()
    }

    fn depth(&self) -> usize {
        self.ch.memory_depth() + self.disk.len()
    }
}

fn decode_frames(mut frames: &[u8]) -> Vec<Message> {
    let mut v = vec![];
    while frames.len() >= 8 {
        let size = u32::from_be_bytes(frames[..4].try_into().unwrap()) as usize;
        let kind = u32::from_be_bytes(frames[4..8].try_into().unwrap());
        assert_eq!(kind, 2, "a channel only encodes message frames");
        v.push(Message::decode(Bytes::copy_from_slice(&frames[8..4 + size])).unwrap());
        frames = &frames[4 + size..];
    }
    v
}

fn ids(ms: &[Message]) -> Vec<MessageId> {
    ms.iter().map(|m| m.id).collect()
}

fn nums(ms: &[Message]) -> Vec<u64> {
    ms.iter().map(n_of).collect()
}

#[test]
fn delivers_only_up_to_rdy_and_counts_attempts() {
    let mut h = Harness::new(cfg(100));
    h.sub(1, 0);
    h.put(0..5);
    assert!(h.take(1).is_empty(), "RDY 0 receives nothing");
    h.rdy(1, 2);
    let got = h.take(1);
    assert_eq!(nums(&got), vec![0, 1]);
    assert!(got.iter().all(|m| m.attempts == 1));
    assert_eq!((h.depth(), h.ch.in_flight_count()), (3, 2));
    assert!(h.fin(1, &[got[0].id]).is_empty());
    assert_eq!(h.take(1).len(), 1, "a FIN frees exactly one slot");
    assert_eq!(
        h.fin(1, &[got[0].id]),
        vec![(got[0].id, InFlightError::NotInFlight)]
    );
}

#[test]
fn pipelined_fins_report_failures_in_order_and_refill_the_freed_credit() {
    let mut h = Harness::new(cfg(100));
    h.sub(1, 3);
    h.put(0..6);
    let got = h.take(1);
    assert_eq!(got.len(), 3);
    let stranger = MessageId::from_guid(999);
    let failed = h.fin(1, &[got[0].id, stranger, got[1].id, got[0].id]);
    assert_eq!(
        failed,
        vec![
            (stranger, InFlightError::NotInFlight),
            (got[0].id, InFlightError::NotInFlight)
        ]
    );
    assert_eq!(h.take(1).len(), 2, "two FINs worked: two more delivered");
    assert_eq!((h.ch.in_flight_count(), h.depth()), (3, 1));
}

#[test]
fn a_replicated_topics_channel_keeps_the_ids_it_finished_until_taken() {
    let mut h = Harness::new(cfg(100));
    h.sub(1, 4);
    h.put(0..4);
    let got = h.take(1);
    // Not recording (every unreplicated channel): nothing is kept.
    h.fin(1, &[got[0].id]);
    assert!(h.ch.take_finished().is_empty());
    h.ch.record_finished();
    let stranger = MessageId::from_guid(999);
    h.fin(1, &[got[1].id, stranger, got[2].id, got[1].id]);
    // A failed FIN (not in flight, or finished already) is no progress.
    assert_eq!(h.ch.take_finished(), vec![got[1].id, got[2].id]);
    assert!(h.ch.take_finished().is_empty(), "taken once");
    h.fin(1, &[got[3].id]);
    assert_eq!(h.ch.take_finished(), vec![got[3].id]);
}

#[test]
fn rdy_spreads_messages_over_clients_round_robin_within_their_credit() {
    let mut h = Harness::new(cfg(100));
    h.sub(1, 1);
    h.sub(2, 2);
    h.sub(3, 3);
    h.put(0..10);
    let (a, b, c) = (h.take(1), h.take(2), h.take(3));
    assert_eq!(
        (a.len(), b.len(), c.len()),
        (1, 2, 3),
        "each gets exactly its RDY"
    );
    // round robin: the first three messages went to three different clients
    let first_of = |ms: &[Message]| ms.iter().map(n_of).min().unwrap();
    let mut firsts = [first_of(&a), first_of(&b), first_of(&c)];
    firsts.sort();
    assert_eq!(firsts, [0, 1, 2]);
    assert_eq!(h.depth(), 4);
    assert_eq!(
        h.fin(2, &[a[0].id]),
        vec![(a[0].id, InFlightError::NotOwner)]
    );
    for c in 1..=3 {
        assert_eq!(h.ch.subscriber(c).unwrap().in_flight, c as i64);
    }
}

#[test]
fn timeout_requeues_and_redelivers_with_the_next_attempt() {
    let mut h = Harness::new(cfg(100));
    h.ch.add_client(1, Duration::from_secs(1), 0, 0).unwrap();
    h.rdy(1, 1);
    h.put([1]);
    assert_eq!(h.take(1).len(), 1);
    assert_eq!(
        h.timers_at(Duration::from_millis(999)),
        Some(h.now + Duration::from_secs(1))
    );
    assert!(h.take(1).is_empty());
    h.timers_at(Duration::from_secs(1));
    let again = h.take(1);
    assert_eq!((again.len(), again[0].attempts), (1, 2));
    let s = h.ch.stats("c", 0, h.now);
    assert_eq!((s.timeout_count, s.requeue_count), (1, 0));
}

#[test]
fn touch_postpones_the_timeout_but_not_past_max_msg_timeout() {
    let mut h = Harness::new(cfg(100));
    h.ch.add_client(1, Duration::from_secs(1), 0, 0).unwrap();
    h.rdy(1, 1);
    h.put([1]);
    let m = h.take(1).remove(0);
    h.ch.touch(
        1,
        &m.id,
        h.now + Duration::from_millis(800),
        Duration::from_millis(1500),
    )
    .unwrap();
    h.timers_at(Duration::from_millis(1200));
    assert!(
        h.take(1).is_empty(),
        "touched message did not time out at its old deadline"
    );
    // capped at delivery + max_msg_timeout = 1.5 s
    h.timers_at(Duration::from_millis(1500));
    assert_eq!(h.take(1).len(), 1);
    assert_eq!(h.ch.touch(2, &m.id, h.now, T), Err(InFlightError::NotOwner));
}

#[test]
fn a_paused_channel_delivers_nothing_until_unpaused() {
    let mut h = Harness::new(cfg(100));
    h.sub(1, 5);
    h.ch.put_deferred(vec![msg(1)], Duration::from_secs(1), h.now);
    assert!(h.take(1).is_empty());
    h.ch.set_paused(true, h.now);
    h.timers_at(Duration::from_secs(1));
    h.put([2]);
    assert!(h.take(1).is_empty(), "paused channel delivers nothing");
    assert_eq!(h.depth(), 2);
    h.ch.set_paused(false, h.now);
    h.settle();
    assert_eq!(nums(&h.take(1)), vec![1, 2]);
}

#[test]
fn empty_drops_in_flight_and_gives_the_credit_back() {
    let mut h = Harness::new(cfg(100));
    h.sub(1, 1);
    h.put([1, 2]);
    let m = h.take(1).remove(0);
    h.ch.empty();
    h.disk.clear();
    h.settle();
    assert_eq!((h.depth(), h.ch.in_flight_count()), (0, 0));
    assert_eq!(h.fin(1, &[m.id]), vec![(m.id, InFlightError::NotInFlight)]);
    h.put([3]);
    assert_eq!(nums(&h.take(1)), vec![3], "credit restored after empty");
}

#[test]
fn max_consumers_and_exiting_refuse_sub() {
    let mut h = Harness::new(cfg(10));
    h.ch.add_client(1, T, 0, 1).unwrap();
    assert_eq!(h.ch.add_client(2, T, 0, 1), Err(SubError::TooManyConsumers));
    assert_eq!(h.ch.remove_client(1), 0);
    h.ch.delete();
    assert_eq!(h.ch.add_client(2, T, 0, 1), Err(SubError::Exiting));
}

#[test]
fn overflow_past_mem_queue_size_goes_to_the_backend_in_order_and_comes_back_in_order() {
    let mut h = Harness::new(cfg(3));
    h.put(0..10);
    assert_eq!(h.ch.memory_depth(), 3);
    assert_eq!(nums(h.disk.make_contiguous()), (3..10).collect::<Vec<_>>());
    assert_eq!(h.appends, 1, "an MPUB's overflow is one append");
    assert_eq!(h.ch.stats("c", h.disk.len() as i64, h.now).depth, 10);
    h.sub(1, 100);
    let got = h.take(1);
    assert_eq!(nums(&got), (0..10).collect::<Vec<_>>());
    assert_eq!(h.depth(), 0);
    let s = h.ch.stats("c", 0, h.now);
    assert_eq!(s.message_count, 10);
    assert_eq!(
        s.global_msg_count, 3,
        "only memory deliveries count as global"
    );
}

#[test]
fn refills_are_bounded_by_the_credit_of_the_ready_clients() {
    let mut h = Harness::new(cfg(0));
    h.put(0..50);
    assert_eq!(h.disk.len(), 50);
    h.sub(1, 7);
    assert_eq!(h.take(1).len(), 7);
    assert_eq!(h.disk.len(), 43, "no more read than the client can take");
    assert_eq!(h.ch.memory_depth(), 0);
}

#[test]
fn after_a_restart_the_backlog_on_disk_is_delivered_in_order_beside_new_messages() {
    let mut h = Harness::new(ChannelConfig {
        backend_unread: true,
        ..cfg(100)
    });
    h.disk.extend((0..5).map(msg));
    h.put([100, 101]);
    h.sub(1, 100);
    let got = nums(&h.take(1));
    assert_eq!(got.len(), 7);
    let old: Vec<u64> = got.iter().copied().filter(|n| *n < 100).collect();
    assert_eq!(old, vec![0, 1, 2, 3, 4], "the disk backlog keeps its order");
    let s = h.ch.stats("c", 0, h.now);
    assert_eq!((s.message_count, s.global_msg_count), (2, 2));
}

#[test]
fn requeues_timeouts_and_deferrals_overflow_to_the_backend_when_memory_is_full() {
    let mut h = Harness::new(cfg(1));
    h.ch.add_client(1, Duration::from_secs(1), 0, 0).unwrap();
    h.rdy(1, 2);
    h.put(0..4); // 0, 1 delivered; 2 in memory; 3 on disk
    let first = h.take(1);
    assert_eq!(nums(&first), vec![0, 1]);
    assert_eq!((h.ch.memory_depth(), h.disk.len()), (1, 1));
    // memory is full: a REQ goes behind 3 on disk
    h.ch.requeue(1, &first[0].id, Duration::ZERO, h.now)
        .unwrap();
    h.settle();
    assert_eq!(
        nums(&h.take(1)),
        vec![2],
        "the freed credit takes the memory message"
    );
    assert_eq!(nums(h.disk.make_contiguous()), vec![3, 0]);
    // at +1 s, 1 and 2 time out and 9 is due: 1 takes the free memory
    // slot, 2 and 9 queue behind the disk backlog
    h.ch.put_deferred(vec![msg(9)], Duration::from_secs(1), h.now);
    h.timers_at(Duration::from_secs(1));
    let again = h.take(1);
    assert_eq!(nums(&again), vec![1, 3]);
    assert_eq!(
        again.iter().map(|m| m.attempts).collect::<Vec<_>>(),
        vec![2, 1]
    );
    assert_eq!(nums(h.disk.make_contiguous()), vec![0, 2, 9]);
    assert!(h.fin(1, &ids(&again)).is_empty());
    let then = h.take(1);
    assert_eq!(nums(&then), vec![0, 2]);
    assert_eq!(
        then.iter().map(|m| m.attempts).collect::<Vec<_>>(),
        vec![2, 2]
    );
    assert!(h.fin(1, &ids(&then)).is_empty());
    assert_eq!(nums(&h.take(1)), vec![9]);
    assert_eq!(h.depth(), 0);
    let s = h.ch.stats("c", 0, h.now);
    assert_eq!(
        (s.requeue_count, s.timeout_count, s.message_count),
        (1, 2, 5)
    );
}

#[test]
fn mem_queue_size_zero_hands_off_to_a_ready_client_and_otherwise_goes_to_disk() {
    let mut h = Harness::new(cfg(0));
    h.sub(1, 1);
    h.put([1, 2]);
    assert_eq!(nums(&h.take(1)), vec![1]);
    assert_eq!(nums(h.disk.make_contiguous()), vec![2]);
    let s = h.ch.stats("c", 0, h.now);
    assert_eq!(s.global_msg_count, 1);
}

#[test]
fn later_messages_of_a_batch_never_overtake_its_overflow() {
    // memory 0: message 1 is handed off; 2 overflows; when 3 arrives a
    // client has credit again (a FIN came in between in real life) but
    // must not get 3 before 2.
    let mut h = Harness::new(cfg(0));
    h.sub(1, 2);
    h.ch.put(vec![msg(1)], h.now);
    h.settle();
    h.ch.set_rdy(1, 1, h.now); // credit used up
    h.ch.put(vec![msg(2), msg(3)], h.now);
    h.ch.set_rdy(1, 5, h.now);
    h.settle();
    assert_eq!(nums(&h.take(1)), vec![1, 2, 3]);
}

#[test]
fn an_ephemeral_channel_drops_its_overflow() {
    let mut h = Harness::new(ChannelConfig {
        durable: false,
        ..cfg(2)
    });
    h.put(0..5);
    assert_eq!((h.ch.memory_depth(), h.disk.len(), h.appends), (2, 0, 0));
    assert_eq!(h.ch.stats("c", 0, h.now).message_count, 5);
    h.sub(1, 10);
    assert_eq!(nums(&h.take(1)), vec![0, 1]);
}

#[test]
fn sampling_is_deterministic_for_a_seed_and_near_the_rate() {
    let run = |seed: u64| {
        let mut h = Harness::new(ChannelConfig {
            seed,
            ..cfg(10_000)
        });
        h.ch.add_client(1, T, 30, 0).unwrap();
        h.rdy(1, 10_000);
        h.put(0..1000);
        nums(&h.take(1))
    };
    let (a, b) = (run(3), run(3));
    assert_eq!(a, b, "same seed, same sample");
    assert!(
        (250..350).contains(&a.len()),
        "sample_rate 30 kept {} of 1000",
        a.len()
    );
    assert_ne!(run(4), a, "another seed, another sample");
}

#[test]
fn fin_records_e2e_latency_from_the_wall_clock_passed_in() {
    let mut h = Harness::new(ChannelConfig {
        e2e: Some((vec![0.5], Duration::from_secs(60))),
        ..cfg(10)
    });
    h.sub(1, 1);
    h.put([1]);
    let m = h.take(1).remove(0);
    h.ch.finish(1, &[m.id], h.now, m.timestamp + 5_000, |_, _| {
        panic!("in flight")
    });
    let e2e = h.ch.stats("c", 0, h.now).e2e_processing_latency;
    assert_eq!(e2e.count, 1);
    assert_eq!(e2e.percentiles.unwrap()[0].value, 5_000.0);
}

#[test]
fn the_deadline_heap_stays_bounded_under_fin_churn() {
    let mut h = Harness::new(cfg(10));
    h.sub(1, 1);
    for i in 0..10_000 {
        h.put([i]);
        let m = h.take(1).remove(0);
        assert!(h.fin(1, &[m.id]).is_empty());
    }
    assert!(h.ch.in_flight.heap_len() < 2048);
}

#[test]
fn without_hand_off_a_ready_consumer_still_gets_messages_only_through_the_disk() {
    let mut h = Harness::new(ChannelConfig {
        hand_off: false,
        ..cfg(0)
    });
    h.sub(1, 5);
    h.put([1, 2]);
    assert_eq!(h.appends, 1, "both went to the disk queue first");
    assert_eq!(
        nums(&h.take(1)),
        vec![1, 2],
        "and came back through a refill"
    );
    assert!(h.refills >= 1);
}

// deferrals, in memory and spilled to runs
#[path = "channel_deferred_tests.rs"]
mod deferral;

// the backend's side: records that appear, dead letters, durable acks
#[path = "channel_backend_tests.rs"]
mod backend;

// depth limits
#[path = "channel_limits_tests.rs"]
mod limits;

// max_age: expiry in memory, on disk, deferred, in flight
#[path = "channel_expiry_tests.rs"]
mod expiry;

//! The deferred heap and its spill to runs, with the run files played by
//! the test (a map of vectors with a read position each), `now` passed in.

use std::collections::BTreeMap;

use bytes::Bytes;
use nsq_protocol::MessageId;

use super::*;

fn msg(n: u64) -> Message {
    Message::new(MessageId::from_guid(n), 1_000, Bytes::from(format!("m{n}")))
}

fn n_of(m: &Message) -> u64 {
    std::str::from_utf8(&m.body[1..]).unwrap().parse().unwrap()
}

fn spill(threshold: usize, durable: bool) -> Option<SpillConfig> {
    Some(SpillConfig {
        threshold,
        durable,
        max_run_bytes: u64::MAX,
    })
}

#[derive(Default)]
struct Disk {
    runs: BTreeMap<u64, (Vec<(Instant, Message)>, usize)>,
    deleted: Vec<u64>,
    writes: usize,
    loads: usize,
    /// Writes fail.
    broken: bool,
}

impl Disk {
    /// Carries out the run work until none is left.
    fn settle(&mut self, d: &mut Deferred) {
        loop {
            let work = d.take_work();
            if work.is_empty() {
                return;
            }
            for b in work.spill {
                if self.broken {
                    d.spilled(b.run, b.records);
                    continue;
                }
                self.writes += 1;
                let run = self.runs.entry(b.run).or_default();
                assert_eq!(
                    b.new,
                    run.0.is_empty() && run.1 == 0,
                    "new only for a new run"
                );
                if let Some(((last, _), (first, _))) = run.0.last().zip(b.records.first()) {
                    assert!(first >= last, "a run is appended to in due order");
                }
                run.0.extend(b.records);
                d.spilled(b.run, Vec::new());
            }
            for l in work.load {
                self.loads += 1;
                let (recs, pos) = self.runs.get_mut(&l.run).expect("load of a run on disk");
                let mut got = Vec::new();
                while got.len() < l.max && *pos < recs.len() && recs[*pos].0 <= l.until {
                    got.push(recs[*pos].clone());
                    *pos += 1;
                }
                let next = recs.get(*pos).map(|r| r.0);
                d.loaded(l.run, got, next);
            }
            for id in work.delete {
                self.runs.remove(&id);
                self.deleted.push(id);
            }
        }
    }

    fn on_disk(&self) -> usize {
        self.runs.values().map(|(r, p)| r.len() - p).sum()
    }
}

/// Runs the timers at every `step` from `from` to `to`: due messages out
/// (with the time they came out), loads carried out.
fn drain(
    d: &mut Deferred,
    disk: &mut Disk,
    t0: Instant,
    to: Duration,
    step: Duration,
) -> Vec<(u64, Duration)> {
    let mut out = Vec::new();
    let mut at = Duration::ZERO;
    while at <= to {
        let now = t0 + at;
        loop {
            while let Some(m) = d.pop_due(now) {
                out.push((n_of(&m), at));
            }
            d.plan_loads(now);
            if !d.has_work() {
                break;
            }
            disk.settle(d);
        }
        at += step;
    }
    out
}

#[test]
fn without_spill_everything_waits_in_memory_in_due_order() {
    let t0 = Instant::now();
    let mut d = Deferred::new(None, &[]);
    for (n, s) in [(1, 5), (2, 1), (3, 5), (4, 3)] {
        d.push(msg(n), t0 + Duration::from_secs(s), t0);
    }
    assert!(!d.has_work());
    assert_eq!((d.len(), d.memory_len()), (4, 4));
    let out = drain(
        &mut d,
        &mut Disk::default(),
        t0,
        Duration::from_secs(6),
        Duration::from_secs(1),
    );
    assert_eq!(
        out.iter().map(|o| o.0).collect::<Vec<_>>(),
        vec![2, 4, 1, 3],
        "due order, equal due times in arrival order"
    );
}

#[test]
fn past_the_threshold_deferrals_spill_to_one_run_and_come_back_when_due_never_early() {
    let t0 = Instant::now();
    let mut d = Deferred::new(spill(10, false), &[]);
    let mut disk = Disk::default();
    // 1000 messages deferred 60 s, published 10 ms apart (a constant delay)
    for n in 0..1000u64 {
        let now = t0 + Duration::from_millis(10 * n);
        d.push(msg(n), now + Duration::from_secs(60), now);
        disk.settle(&mut d);
    }
    assert_eq!((d.len(), d.memory_len()), (1000, 10));
    assert_eq!(disk.runs.len(), 1, "a constant delay appends to one run");
    assert_eq!(disk.on_disk(), 990);
    // nothing is loaded before LOAD_AHEAD of the first spilled one
    let out = drain(
        &mut d,
        &mut disk,
        t0,
        Duration::from_millis(58_000),
        Duration::from_millis(100),
    );
    assert!(out.is_empty() && disk.loads == 0);
    let out = drain(
        &mut d,
        &mut disk,
        t0,
        Duration::from_secs(71),
        Duration::from_millis(10),
    );
    let nums: Vec<u64> = out.iter().map(|o| o.0).collect();
    assert_eq!(
        nums,
        (0..1000).collect::<Vec<_>>(),
        "each once, in due order"
    );
    for (n, at) in &out {
        let due = Duration::from_millis(10 * n) + Duration::from_secs(60);
        assert!(*at >= due, "{n} came out at {at:?}, due {due:?}");
        assert!(
            *at < due + Duration::from_millis(20),
            "{n} late: {at:?}, due {due:?}"
        );
    }
    assert!(d.is_empty() && d.run_count() == 0);
    assert_eq!(disk.deleted.len(), 1, "the consumed run is deleted");
}

#[test]
fn interleaved_delays_spill_to_separate_runs_and_merge_back_in_due_order() {
    let t0 = Instant::now();
    let mut d = Deferred::new(spill(0, false), &[]);
    let mut disk = Disk::default();
    // a stream deferred 30 s and one deferred 10 s, interleaved
    for i in 0..50u64 {
        let now = t0 + Duration::from_millis(100 * i);
        d.push(msg(2 * i), now + Duration::from_secs(30), now);
        d.push(msg(2 * i + 1), now + Duration::from_secs(10), now);
        disk.settle(&mut d);
    }
    assert_eq!(disk.runs.len(), 2, "one run per stream");
    assert_eq!(d.memory_len(), 0);
    let out = drain(
        &mut d,
        &mut disk,
        t0,
        Duration::from_secs(40),
        Duration::from_millis(50),
    );
    assert_eq!(out.len(), 100);
    let dues: Vec<Duration> = out
        .iter()
        .map(|(n, _)| {
            let i = n / 2;
            Duration::from_millis(100 * i) + Duration::from_secs(if n % 2 == 0 { 30 } else { 10 })
        })
        .collect();
    assert!(dues.windows(2).all(|w| w[0] <= w[1]), "merged in due order");
    assert!(out.iter().zip(&dues).all(|((_, at), due)| at >= due));
    assert!(d.is_empty() && disk.runs.is_empty());
}

#[test]
fn short_deferrals_stay_in_memory_unless_durable() {
    let t0 = Instant::now();
    let mut d = Deferred::new(spill(0, false), &[]);
    d.push(msg(1), t0 + Duration::from_millis(500), t0);
    assert!(!d.has_work(), "due within LOAD_AHEAD: kept in memory");
    let mut d = Deferred::new(spill(0, true), &[]);
    let mut disk = Disk::default();
    d.push(msg(1), t0 + Duration::from_millis(500), t0);
    disk.settle(&mut d);
    assert_eq!(
        (disk.writes, d.memory_len(), d.len()),
        (1, 0, 1),
        "durable: on disk with its due time"
    );
    let out = drain(
        &mut d,
        &mut disk,
        t0,
        Duration::from_secs(2),
        Duration::from_millis(100),
    );
    assert_eq!(out, vec![(1, Duration::from_millis(500))]);
}

#[test]
fn a_run_appended_to_while_a_load_is_out_is_read_to_its_end() {
    let t0 = Instant::now();
    let mut d = Deferred::new(spill(0, false), &[]);
    let mut disk = Disk::default();
    d.push(msg(1), t0 + Duration::from_secs(2), t0);
    disk.settle(&mut d);
    let now = t0 + Duration::from_millis(1500);
    d.plan_loads(now);
    let load = d.take_work();
    assert_eq!(load.load.len(), 1);
    // appended after the load was asked for, written before it is read
    d.push(msg(2), t0 + Duration::from_secs(5), now);
    disk.settle(&mut d);
    let (recs, pos) = disk.runs.get_mut(&load.load[0].run).unwrap();
    let got = vec![recs[0].clone()];
    *pos = 1;
    d.loaded(load.load[0].run, got, None);
    // the load saw the end before the append: the run's head is the append
    let out = drain(
        &mut d,
        &mut disk,
        t0,
        Duration::from_secs(6),
        Duration::from_millis(100),
    );
    assert_eq!(out.iter().map(|o| o.0).collect::<Vec<_>>(), vec![1, 2]);
    assert!(out[1].1 >= Duration::from_secs(5));
    assert!(d.is_empty() && disk.runs.is_empty());
}

#[test]
fn a_failed_spill_keeps_the_messages_in_memory() {
    let t0 = Instant::now();
    let mut d = Deferred::new(spill(0, true), &[]);
    let mut disk = Disk {
        broken: true,
        ..Disk::default()
    };
    d.push(msg(1), t0 + Duration::from_secs(5), t0);
    disk.settle(&mut d);
    assert_eq!((d.len(), d.memory_len(), d.run_count()), (1, 1, 0));
    let out = drain(
        &mut d,
        &mut disk,
        t0,
        Duration::from_secs(6),
        Duration::from_secs(1),
    );
    assert_eq!(out, vec![(1, Duration::from_secs(5))]);
}

#[test]
fn restored_runs_are_loaded_when_due_even_with_spill_off() {
    let t0 = Instant::now();
    let mut disk = Disk::default();
    let recs: Vec<(Instant, Message)> = (0..5)
        .map(|n| (t0 + Duration::from_secs(3 + n), msg(n)))
        .collect();
    disk.runs.insert(7, (recs, 0));
    disk.runs.insert(9, (Vec::new(), 0));
    let restored = [
        RestoredRun {
            id: 7,
            count: 5,
            head: t0 + Duration::from_secs(3),
        },
        RestoredRun {
            id: 9,
            count: 0,
            head: t0,
        },
    ];
    let mut d = Deferred::new(None, &restored);
    assert_eq!(d.len(), 5);
    let out = drain(
        &mut d,
        &mut disk,
        t0,
        Duration::from_secs(10),
        Duration::from_millis(100),
    );
    assert_eq!(
        out,
        (0..5)
            .map(|n| (n, Duration::from_secs(3 + n)))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        disk.deleted,
        vec![9, 7],
        "the empty run at once, the other once read"
    );
    // new runs never reuse a restored number
    let mut d = Deferred::new(spill(0, true), &restored[..1]);
    d.push(msg(9), t0 + Duration::from_secs(60), t0);
    assert_eq!(d.take_work().spill[0].run, 8);
}

#[test]
fn a_run_stops_growing_at_max_run_bytes() {
    let t0 = Instant::now();
    let mut d = Deferred::new(
        Some(SpillConfig {
            threshold: 0,
            durable: true,
            max_run_bytes: 3 * (msg(0).encoded_len() as u64 + RECORD_OVERHEAD),
        }),
        &[],
    );
    let mut disk = Disk::default();
    for n in 0..7 {
        d.push(msg(n), t0 + Duration::from_secs(10 + n), t0);
    }
    disk.settle(&mut d);
    let sizes: Vec<usize> = disk.runs.values().map(|r| r.0.len()).collect();
    assert_eq!(sizes, vec![3, 3, 1]);
    let out = drain(
        &mut d,
        &mut disk,
        t0,
        Duration::from_secs(20),
        Duration::from_millis(500),
    );
    assert_eq!(
        out.iter().map(|o| o.0).collect::<Vec<_>>(),
        (0..7).collect::<Vec<_>>()
    );
    assert_eq!(disk.deleted.len(), 3);
}

#[test]
fn loads_wait_while_loaded_messages_fill_the_budget_unless_overdue() {
    let t0 = Instant::now();
    let mut d = Deferred::new(spill(0, true), &[]);
    let mut disk = Disk::default();
    // 3000 due at 10 s + n µs: three loads' worth
    for n in 0..3000u64 {
        d.push(
            msg(n),
            t0 + Duration::from_secs(10) + Duration::from_micros(n),
            t0,
        );
    }
    disk.settle(&mut d);
    d.plan_loads(t0 + Duration::from_millis(9100));
    disk.settle(&mut d);
    assert_eq!(d.memory_len(), LOAD_MAX, "one load while none is due");
    let out = drain(
        &mut d,
        &mut disk,
        t0 + Duration::from_secs(10),
        Duration::from_millis(10),
        Duration::from_millis(1),
    );
    assert_eq!(out.len(), 3000, "overdue heads load at once");
}

#[test]
fn clear_deletes_every_run_and_close_keeps_due_times() {
    let t0 = Instant::now();
    let mut d = Deferred::new(spill(1, false), &[]);
    let mut disk = Disk::default();
    for n in 0..4 {
        d.push(msg(n), t0 + Duration::from_secs(10 + n), t0);
    }
    disk.settle(&mut d);
    let held = d.drain_in_order();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].0, t0 + Duration::from_secs(10));
    let run = d.closing_run(held);
    assert!(run.new && !disk.runs.contains_key(&run.run));
    d.clear();
    disk.settle(&mut d);
    assert!(d.is_empty() && disk.runs.is_empty());
}

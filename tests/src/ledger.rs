//! The account of every message: reads the ledgers written by
//! `nsq_ledger produce` / `consume` and `tests/python/ledger_consumer.py`
//! (line formats in `apps/nsq_ledger/src/ledger.rs`) and answers what the
//! cluster test asks of them — per channel: acknowledged, lost, duplicated,
//! publish-to-first-delivery latency; per fault: when every consumer was
//! receiving steadily from every nsqd again, the longest pause, and which
//! messages were redelivered.
//!
//! Pure: text in, numbers out; no clock, no files, no processes.

use std::collections::HashMap;

/// One id as the producers logged it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Published {
    pub sent_ns: i64,
    /// nsqd answered `OK` (an `ERR` line otherwise).
    pub acked: bool,
}

/// One delivery as a consumer logged it (strings interned as indexes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Receipt {
    pub t_ns: i64,
    pub consumer: u16,
    pub channel: u16,
    pub nsqd: u16,
    pub attempts: u16,
    id: u32,
}

/// Numbers of one channel (optionally only for ids published in a window).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChannelAccount {
    pub acknowledged: usize,
    /// Acknowledged ids never delivered on the channel (first few listed).
    pub lost: usize,
    pub lost_examples: Vec<String>,
    /// Deliveries of acknowledged ids beyond each id's first, made in the
    /// window (a duplicate belongs to the fault that caused it, whenever
    /// its message was sent).
    pub duplicates: usize,
    /// Acknowledged ids with such a delivery in the window.
    pub duplicated_ids: usize,
    /// Ids with an `ERR` line (no OK) that were delivered anyway (allowed).
    pub unacked_delivered: usize,
    /// Deliveries of ids no producer logged (should be 0).
    pub unknown_ids: usize,
    /// Publish (send) to first delivery, over delivered acknowledged ids.
    pub latency_p50_ns: i64,
    pub latency_p99_ns: i64,
    pub latency_max_ns: i64,
}

impl ChannelAccount {
    /// Duplicates per acknowledged message.
    pub fn duplicate_rate(&self) -> f64 {
        if self.acknowledged == 0 {
            0.0
        } else {
            self.duplicates as f64 / self.acknowledged as f64
        }
    }
}

/// Every ledger of a run, indexed.
#[derive(Default)]
pub struct Ledgers {
    ids: HashMap<String, u32>,
    id_names: Vec<String>,
    published: Vec<Option<Published>>,
    names: Interner,
    /// Sorted by time once [`Ledgers::seal`] ran.
    receipts: Vec<Receipt>,
    sealed: bool,
    /// Lines that did not parse (a torn last line, garbage).
    pub bad_lines: usize,
}

#[derive(Default)]
struct Interner {
    index: HashMap<String, u16>,
    names: Vec<String>,
}

impl Interner {
    fn get(&mut self, s: &str) -> u16 {
        if let Some(i) = self.index.get(s) {
            return *i;
        }
        let i = self.names.len() as u16;
        self.names.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }

    fn find(&self, s: &str) -> Option<u16> {
        self.index.get(s).copied()
    }
}

/// p-th percentile (0..=100) of sorted values, nearest rank.
pub fn percentile(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl Ledgers {
    fn id(&mut self, id: &str) -> u32 {
        if let Some(i) = self.ids.get(id) {
            return *i;
        }
        let i = self.id_names.len() as u32;
        self.id_names.push(id.to_string());
        self.published.push(None);
        self.ids.insert(id.to_string(), i);
        i
    }

    /// Adds a producer ledger (`P`, `OK`, `ERR` lines). An id is
    /// acknowledged if any line says `OK`.
    pub fn add_producer(&mut self, text: &str) {
        for line in text.lines() {
            let mut w = line.split(' ');
            let (kind, id, sent) = (w.next(), w.next(), w.next());
            let (Some(kind), Some(id), Some(Ok(sent_ns))) = (kind, id, sent.map(str::parse)) else {
                self.bad_lines += 1;
                continue;
            };
            let acked = match kind {
                "OK" => true,
                "P" | "ERR" => false,
                _ => {
                    self.bad_lines += 1;
                    continue;
                }
            };
            let i = self.id(id) as usize;
            let before = self.published[i].is_some_and(|p| p.acked);
            self.published[i] = Some(Published {
                sent_ns,
                acked: acked || before,
            });
        }
    }

    /// Adds the ledger of consumer process `consumer` (`R` / `F` lines;
    /// only `R` lines are needed for the account).
    pub fn add_consumer(&mut self, consumer: &str, text: &str) {
        let c = self.names.get(consumer);
        for line in text.lines() {
            let mut w = line.split(' ');
            match w.next() {
                Some("R") => {}
                Some("F") => continue,
                _ => {
                    self.bad_lines += 1;
                    continue;
                }
            }
            let fields: Vec<&str> = w.collect();
            let [channel, id, t, attempts, nsqd] = fields[..] else {
                self.bad_lines += 1;
                continue;
            };
            let (Ok(t_ns), Ok(attempts)) = (t.parse(), attempts.parse()) else {
                self.bad_lines += 1;
                continue;
            };
            let r = Receipt {
                t_ns,
                consumer: c,
                channel: self.names.get(channel),
                nsqd: self.names.get(nsqd),
                attempts,
                id: self.id(id),
            };
            self.receipts.push(r);
        }
        self.sealed = false;
    }

    fn seal(&mut self) {
        if !self.sealed {
            self.receipts.sort_by_key(|r| r.t_ns);
            self.sealed = true;
        }
    }

    pub fn name(&self, i: u16) -> &str {
        &self.names.names[i as usize]
    }

    pub fn published(&self, id: &str) -> Option<Published> {
        self.ids.get(id).and_then(|i| self.published[*i as usize])
    }

    /// Acknowledged ids whose send time is in `[from, to)`.
    pub fn acknowledged_between(&self, from: i64, to: i64) -> usize {
        self.published
            .iter()
            .flatten()
            .filter(|p| p.acked && p.sent_ns >= from && p.sent_ns < to)
            .count()
    }

    /// The account of `channel` over ids sent in `[from, to)`, duplicates
    /// over deliveries made in it (pass `i64::MIN, i64::MAX` for all).
    pub fn account(&mut self, channel: &str, from: i64, to: i64) -> ChannelAccount {
        self.seal();
        let mut acc = ChannelAccount::default();
        let ch = self.names.find(channel);
        // first delivery time per id; later deliveries in the window are duplicates
        let mut first: HashMap<u32, i64> = HashMap::new();
        let mut duplicated: HashMap<u32, usize> = HashMap::new();
        for r in self.receipts.iter().filter(|r| Some(r.channel) == ch) {
            match first.entry(r.id) {
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(r.t_ns);
                }
                std::collections::hash_map::Entry::Occupied(_) => {
                    let acked = self.published[r.id as usize].is_some_and(|p| p.acked);
                    if acked && r.t_ns >= from && r.t_ns < to {
                        *duplicated.entry(r.id).or_default() += 1;
                    }
                }
            }
        }
        acc.duplicates = duplicated.values().sum();
        acc.duplicated_ids = duplicated.len();
        let mut latencies = Vec::new();
        for (i, p) in self.published.iter().enumerate() {
            let Some(p) = p else { continue };
            if p.sent_ns < from || p.sent_ns >= to {
                continue;
            }
            let got = first.get(&(i as u32));
            if !p.acked {
                acc.unacked_delivered += usize::from(got.is_some());
                continue;
            }
            acc.acknowledged += 1;
            match got {
                None => {
                    acc.lost += 1;
                    if acc.lost_examples.len() < 10 {
                        acc.lost_examples.push(self.id_names[i].clone());
                    }
                }
                Some(t) => latencies.push(t - p.sent_ns),
            }
        }
        if from == i64::MIN && to == i64::MAX {
            acc.unknown_ids = first
                .keys()
                .filter(|i| self.published[**i as usize].is_none())
                .count();
        }
        latencies.sort_unstable();
        acc.latency_p50_ns = percentile(&latencies, 50.0);
        acc.latency_p99_ns = percentile(&latencies, 99.0);
        acc.latency_max_ns = latencies.last().copied().unwrap_or(0);
        acc
    }

    /// For each wanted `(consumer, channel, nsqd)`, when it was receiving
    /// steadily again after `from`: the start of its first run of deliveries
    /// within `[from, to)` with no pause longer than `gap` that lasted
    /// `min_run` or was still going at `to` (`i64::MAX`: no end). So a lone
    /// delivery followed by a stall is not steady, and with `min_run` of
    /// `i64::MAX` only the run that reaches `to` is.
    /// None: nothing delivered, or no run long enough.
    pub fn steady_after(
        &mut self,
        from: i64,
        to: i64,
        gap: i64,
        min_run: i64,
        wanted: &[(String, String, String)],
    ) -> Vec<Option<i64>> {
        self.seal();
        let mut slot: HashMap<(u16, u16, u16), usize> = HashMap::new();
        for (i, (c, ch, n)) in wanted.iter().enumerate() {
            if let (Some(c), Some(ch), Some(n)) =
                (self.names.find(c), self.names.find(ch), self.names.find(n))
            {
                slot.insert((c, ch, n), i);
            }
        }
        let mut last = vec![from; wanted.len()];
        let mut run: Vec<Option<i64>> = vec![None; wanted.len()];
        let mut found: Vec<Option<i64>> = vec![None; wanted.len()];
        let start = self.receipts.partition_point(|r| r.t_ns < from);
        for r in self.receipts[start..].iter().take_while(|r| r.t_ns < to) {
            let Some(&i) = slot.get(&(r.consumer, r.channel, r.nsqd)) else {
                continue;
            };
            if found[i].is_some() {
                continue;
            }
            if run[i].is_none() || r.t_ns - last[i] > gap {
                run[i] = Some(r.t_ns);
            }
            last[i] = r.t_ns;
            if run[i].is_some_and(|s| r.t_ns - s >= min_run) {
                found[i] = run[i];
            }
        }
        for i in 0..wanted.len() {
            if found[i].is_none() && (to == i64::MAX || to - last[i] <= gap) {
                found[i] = run[i];
            }
        }
        found
    }

    /// For each wanted `(consumer, channel, nsqd)`, the longest time in
    /// `[from, to]` without a delivery (the edges count as deliveries).
    pub fn max_gaps(
        &mut self,
        from: i64,
        to: i64,
        wanted: &[(String, String, String)],
    ) -> Vec<i64> {
        self.seal();
        let mut slot: HashMap<(u16, u16, u16), usize> = HashMap::new();
        for (i, (c, ch, n)) in wanted.iter().enumerate() {
            if let (Some(c), Some(ch), Some(n)) =
                (self.names.find(c), self.names.find(ch), self.names.find(n))
            {
                slot.insert((c, ch, n), i);
            }
        }
        let mut last = vec![from; wanted.len()];
        let mut gap = vec![0i64; wanted.len()];
        let start = self.receipts.partition_point(|r| r.t_ns < from);
        for r in self.receipts[start..].iter().take_while(|r| r.t_ns <= to) {
            if let Some(&i) = slot.get(&(r.consumer, r.channel, r.nsqd)) {
                gap[i] = gap[i].max(r.t_ns - last[i]);
                last[i] = r.t_ns;
            }
        }
        for i in 0..wanted.len() {
            gap[i] = gap[i].max(to - last[i]);
        }
        gap
    }

    /// Messages `held_by` held when it stopped, as they reach other
    /// consumers: the redeliveries (attempts > 1) in `[from, to)` to a
    /// consumer other than `held_by` of an id whose previous delivery on
    /// that channel went to `held_by` before `held_until`: (time, consumer
    /// name). Redeliveries with other causes (the next fault, whose window
    /// this one's may overlap) are not counted.
    pub fn handed_over(
        &mut self,
        held_by: &str,
        held_until: i64,
        from: i64,
        to: i64,
    ) -> Vec<(i64, String)> {
        self.seal();
        let Some(held) = self.names.find(held_by) else {
            return Vec::new();
        };
        let mut last: HashMap<(u16, u32), (u16, i64)> = HashMap::new();
        let mut out = Vec::new();
        for r in self.receipts.iter().take_while(|r| r.t_ns < to) {
            let prev = last.insert((r.channel, r.id), (r.consumer, r.t_ns));
            let was_held = prev.is_some_and(|(c, t)| c == held && t < held_until);
            if was_held && r.t_ns >= from && r.attempts > 1 && r.consumer != held {
                out.push((r.t_ns, self.names.names[r.consumer as usize].clone()));
            }
        }
        out
    }

    /// Latest delivery time of any consumer (0 if none).
    pub fn last_delivery(&mut self) -> i64 {
        self.seal();
        self.receipts.last().map(|r| r.t_ns).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Ledgers {
        let mut l = Ledgers::default();
        l.add_producer("P a.1 100\nOK a.1 100 110\nP a.2 200\nOK a.2 200 210\nP a.3 300\nERR a.3 300 connect refused\nP a.4 400\nOK a.4 400 410\nP a.5 500\ntorn");
        l.add_consumer(
            "c1",
            "R A a.1 150 1 n1:4150\nF A a.1 151\nR A a.2 260 1 n2:4150\nR A a.2 900 2 n2:4150\nR B a.1 120 1 n1:4150\nR A a.3 500 1 n1:4150\nR A zz.9 600 1 n1:4150\n",
        );
        l.add_consumer("c2", "R A a.2 1000 3 n1:4150\n");
        l
    }

    #[test]
    fn account_counts_lost_duplicates_unacked_and_latency() {
        let mut l = sample();
        assert_eq!(l.bad_lines, 1);
        let a = l.account("A", i64::MIN, i64::MAX);
        assert_eq!(a.acknowledged, 3);
        assert_eq!(
            (a.lost, a.lost_examples.clone()),
            (1, vec!["a.4".to_string()])
        );
        assert_eq!((a.duplicates, a.duplicated_ids), (2, 1));
        assert_eq!(a.unacked_delivered, 1); // a.5 was sent, never answered, never delivered
        assert_eq!(a.unknown_ids, 1);
        assert_eq!((a.latency_p50_ns, a.latency_max_ns), (50, 60));
        let b = l.account("B", i64::MIN, i64::MAX);
        assert_eq!((b.acknowledged, b.lost, b.duplicates), (3, 2, 0));
        // a window: only a.2 was sent in [150, 250); its duplicates came later
        let w = l.account("A", 150, 250);
        assert_eq!((w.acknowledged, w.lost, w.duplicates), (1, 0, 0));
        let w = l.account("A", 800, 1100);
        assert_eq!((w.acknowledged, w.duplicates, w.duplicated_ids), (0, 2, 1));
        assert_eq!(l.acknowledged_between(150, 450), 2);
    }

    #[test]
    fn steadiness_gaps_and_redeliveries() {
        let mut l = sample();
        let want = vec![
            ("c1".to_string(), "A".to_string(), "n2:4150".to_string()),
            ("c2".to_string(), "A".to_string(), "n1:4150".to_string()),
            ("c2".to_string(), "A".to_string(), "n9:4150".to_string()),
        ];
        // a.2 went to c1 at 260 and again (attempt 2) at 900, then to c2
        assert_eq!(
            l.handed_over("c1", 950, 0, 2000),
            vec![(1000, "c2".to_string())]
        );
        // c1's own redelivery is not a hand-over, nor one after the window
        assert!(l.handed_over("c1", 950, 0, 1000).is_empty());
        // a hold that ended at 800: the delivery c2's follows (c1's at 900)
        // came after it
        assert!(l.handed_over("c1", 800, 0, 2000).is_empty());
        assert!(l.handed_over("c2", i64::MAX, 0, 2000).is_empty());
        assert_eq!(l.last_delivery(), 1000);
        // steady again: c1/A/n2 delivers at 260 and 900; with gaps up to 700
        // allowed that is 260, with gaps up to 500 only 900 (after the pause)
        let to_end = i64::MAX;
        assert_eq!(
            l.steady_after(0, 1000, 700, to_end, &want[..1]),
            vec![Some(260)]
        );
        assert_eq!(
            l.steady_after(0, i64::MAX, 500, to_end, &want[..1]),
            vec![Some(900)]
        );
        // paused again at the end of the window: not steady
        assert_eq!(l.steady_after(0, 2000, 500, to_end, &want[..1]), vec![None]);
        assert_eq!(l.steady_after(0, 2000, 500, to_end, &want[2..]), vec![None]);
        // unless the run before the pause lasted long enough: 260 to 900
        // with gaps up to 700 is a run of 640
        assert_eq!(
            l.steady_after(0, 2000, 700, 600, &want[..1]),
            vec![Some(260)]
        );
        assert_eq!(l.steady_after(0, 2000, 700, 700, &want[..1]), vec![None]);
        // c1/A/n2 delivered at 260 and 900: in [0, 1000] the longest gap is 640
        assert_eq!(l.max_gaps(0, 1000, &want), vec![640, 1000, 1000]);
        assert_eq!(l.max_gaps(200, 300, &want[..1]), vec![60]);
    }

    #[test]
    fn percentile_nearest_rank() {
        let v: Vec<i64> = (1..=100).collect();
        assert_eq!(percentile(&v, 99.0), 99);
        assert_eq!(percentile(&v, 100.0), 100);
        assert_eq!(percentile(&[7], 50.0), 7);
        assert_eq!(percentile(&[], 50.0), 0);
    }
}

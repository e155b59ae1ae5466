//! Recent history of the cluster, kept in nsqadmin's memory (nsq-rs only;
//! nsqadmin 1.3.0 needs graphite for any chart).
//!
//! A background poller samples every nsqd's `/stats` every
//! `INTERVAL` (5 s) and records, per topic, per topic and node, per
//! channel and per channel and node: depth, in-flight, deferred, message
//! count, client count and the message rate since the previous sample. Each
//! series is a ring buffer holding `WINDOW` (30 min); topics and
//! channels not seen for a whole window disappear.
//!
//! [`HistoryState`] is the pure part (time passed in, unit-tested); the
//! poller, the daemon's task around it, is `crate::poller`. Served as columnar JSON under
//! `/api/history` (see `http::api`).

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde::Serialize;

use crate::cluster::TopicStats;

/// How often the cluster is sampled (not a flag).
pub const INTERVAL: Duration = Duration::from_secs(5);
/// How much history is kept in memory (not a flag).
pub const WINDOW: Duration = Duration::from_secs(30 * 60);

/// Counters of one series at one instant. For a topic, `depth` is the total
/// backlog (the topic's own depth plus its channels' depths) and
/// `in_flight`/`deferred`/`clients` sum its channels.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Point {
    pub depth: i64,
    pub in_flight: i64,
    pub deferred: i64,
    pub messages: i64,
    pub clients: i64,
}

impl Point {
    fn add(&mut self, o: Point) {
        self.depth += o.depth;
        self.in_flight += o.in_flight;
        self.deferred += o.deferred;
        self.messages += o.messages;
        self.clients += o.clients;
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Sample {
    ts_ms: i64,
    point: Point,
}

/// One time series: samples in time order, oldest first.
#[derive(Debug, Clone, Default)]
pub struct Ring {
    samples: VecDeque<Sample>,
}

/// Messages per second between two samples; `None` across a counter reset.
fn rate(a: &Sample, b: &Sample) -> Option<f64> {
    let dt = b.ts_ms - a.ts_ms;
    let dm = b.point.messages - a.point.messages;
    (dt > 0 && dm >= 0).then(|| dm as f64 * 1000.0 / dt as f64)
}

impl Ring {
    fn push(&mut self, ts_ms: i64, point: Point, cap: usize) {
        self.samples.push_back(Sample { ts_ms, point });
        while self.samples.len() > cap {
            self.samples.pop_front();
        }
    }

    fn prune(&mut self, oldest_ms: i64) {
        while self.samples.front().is_some_and(|s| s.ts_ms < oldest_ms) {
            self.samples.pop_front();
        }
    }

    pub fn len(&self) -> usize {
        self.samples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// Columnar JSON form with at most `points` entries (evenly thinned,
    /// always keeping the newest; rates recomputed between kept samples).
    pub fn series(&self, points: usize) -> Series {
        let n = self.samples.len();
        let stride = if points == 0 || n <= points {
            1
        } else {
            n.div_ceil(points)
        };
        let mut picked: Vec<&Sample> = self.samples.iter().rev().step_by(stride).collect();
        picked.reverse();
        let mut s = Series::default();
        let mut prev: Option<&Sample> = None;
        for cur in picked {
            s.ts.push(cur.ts_ms);
            s.depth.push(cur.point.depth);
            s.in_flight.push(cur.point.in_flight);
            s.deferred.push(cur.point.deferred);
            s.messages.push(cur.point.messages);
            s.clients.push(cur.point.clients);
            s.rate.push(
                prev.and_then(|p| rate(p, cur))
                    .map(|r| (r * 100.0).round() / 100.0),
            );
            prev = Some(cur);
        }
        s
    }
}

/// A series as `/api/history` serves it: parallel arrays, `ts` in Unix ms,
/// `rate` in messages/second (`null` for the first sample or across a reset).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Series {
    pub ts: Vec<i64>,
    pub depth: Vec<i64>,
    pub in_flight: Vec<i64>,
    pub deferred: Vec<i64>,
    pub messages: Vec<i64>,
    pub clients: Vec<i64>,
    pub rate: Vec<Option<f64>>,
}

#[derive(Debug, Clone, Default)]
pub struct ChannelHistory {
    pub total: Ring,
    pub nodes: BTreeMap<String, Ring>,
}

#[derive(Debug, Clone, Default)]
pub struct TopicHistory {
    pub total: Ring,
    pub nodes: BTreeMap<String, Ring>,
    pub channels: BTreeMap<String, ChannelHistory>,
}

/// One poll's sums for a topic or channel: the total and each node's part.
#[derive(Default)]
struct NodeTally<'a> {
    total: Point,
    nodes: Vec<(&'a str, Point)>,
}

#[derive(Default)]
struct Tally<'a> {
    total: Point,
    nodes: Vec<(&'a str, Point)>,
    channels: BTreeMap<&'a str, NodeTally<'a>>,
}

/// Everything recorded so far. Pure: the caller supplies the time.
#[derive(Debug, Clone)]
pub struct HistoryState {
    pub window_ms: i64,
    pub interval_ms: i64,
    pub updated_ms: i64,
    /// Warning text of the last poll (`""` when every node answered).
    pub message: String,
    /// All channels of all topics: depth/in-flight summed, `messages` = messages processed.
    pub cluster: Ring,
    pub topics: BTreeMap<String, TopicHistory>,
}

impl HistoryState {
    pub fn new(interval: Duration, window: Duration) -> HistoryState {
        HistoryState {
            window_ms: window.as_millis() as i64,
            interval_ms: interval.as_millis().max(1) as i64,
            updated_ms: 0,
            message: String::new(),
            cluster: Ring::default(),
            topics: BTreeMap::new(),
        }
    }

    fn cap(&self) -> usize {
        // a little slack so a slow poll never pushes the window's first sample out
        (self.window_ms / self.interval_ms) as usize + 2
    }

    /// Records one poll: the per-node topic stats of every nsqd that answered.
    pub fn record(&mut self, now_ms: i64, per_node: &[TopicStats], message: String) {
        let cap = self.cap();
        let mut cluster = Point::default();
        let mut topics: BTreeMap<&str, Tally> = BTreeMap::new();
        // A replicated topic's totals are its leader's (every member holds
        // it); each member's own series is kept as it is.
        let counts =
            crate::cluster::replicated::counts_in(per_node, |t| &t.topic_name, |t| &t.replicated);
        for (t, counts) in per_node.iter().zip(counts) {
            let mut node_point = Point {
                depth: t.depths.depth,
                messages: t.message_count,
                ..Default::default()
            };
            let entry = topics.entry(&t.topic_name).or_default();
            for c in t.channels.iter().flatten() {
                let cp = Point {
                    depth: c.depths.depth,
                    in_flight: c.in_flight_count,
                    deferred: c.deferred_count,
                    messages: c.message_count,
                    clients: c.client_count,
                };
                node_point.depth += cp.depth;
                node_point.in_flight += cp.in_flight;
                node_point.deferred += cp.deferred;
                node_point.clients += cp.clients;
                let ch = entry.channels.entry(&c.channel_name).or_default();
                ch.nodes.push((&t.node, cp));
                if counts {
                    cluster.add(cp);
                    ch.total.add(cp);
                }
            }
            if counts {
                cluster.depth += t.depths.depth;
                entry.total.add(node_point);
            }
            entry.nodes.push((&t.node, node_point));
        }
        self.cluster.push(now_ms, cluster, cap);
        for (name, tally) in topics {
            let th = self.topics.entry(name.to_string()).or_default();
            th.total.push(now_ms, tally.total, cap);
            for (node, p) in tally.nodes {
                th.nodes
                    .entry(node.to_string())
                    .or_default()
                    .push(now_ms, p, cap);
            }
            for (cname, ctally) in tally.channels {
                let ch = th.channels.entry(cname.to_string()).or_default();
                ch.total.push(now_ms, ctally.total, cap);
                for (node, p) in ctally.nodes {
                    ch.nodes
                        .entry(node.to_string())
                        .or_default()
                        .push(now_ms, p, cap);
                }
            }
        }
        self.updated_ms = now_ms;
        self.message = message;
        self.prune(now_ms - self.window_ms);
    }

    fn prune(&mut self, oldest_ms: i64) {
        self.cluster.prune(oldest_ms);
        self.topics.retain(|_, th| {
            th.total.prune(oldest_ms);
            th.nodes.retain(|_, r| {
                r.prune(oldest_ms);
                !r.is_empty()
            });
            th.channels.retain(|_, ch| {
                ch.total.prune(oldest_ms);
                ch.nodes.retain(|_, r| {
                    r.prune(oldest_ms);
                    !r.is_empty()
                });
                !ch.total.is_empty()
            });
            !th.total.is_empty()
        });
    }
}

/// The shared, lockable history.
#[derive(Debug)]
pub struct History {
    state: Mutex<HistoryState>,
}

impl History {
    pub fn new(interval: Duration, window: Duration) -> History {
        History {
            state: Mutex::new(HistoryState::new(interval, window)),
        }
    }

    /// Runs `f` on the state (short critical section: no await inside).
    pub fn read<R>(&self, f: impl FnOnce(&HistoryState) -> R) -> R {
        f(&self.state.lock())
    }

    pub(crate) fn record(&self, now_ms: i64, per_node: &[TopicStats], message: String) {
        self.state.lock().record(now_ms, per_node, message);
    }

    /// A poll that reached no nsqd: no sample (a gap, not a drop to zero), just the warning.
    pub(crate) fn failed(&self, message: String) {
        self.state.lock().message = message;
    }
}

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::input::{NsqdChannel, NsqdInfo, NsqdTopic};
    use crate::cluster::Producer;

    fn topic(node_port: i64, name: &str, msgs: i64, chans: &[(&str, i64, i64)]) -> TopicStats {
        let p = Producer::from_nsqd(
            NsqdInfo {
                broadcast_address: "h".into(),
                http_port: node_port,
                ..Default::default()
            },
            vec![],
        );
        let channels = chans
            .iter()
            .map(|(c, depth, m)| NsqdChannel {
                channel_name: c.to_string(),
                depth: *depth,
                message_count: *m,
                in_flight_count: 1,
                ..Default::default()
            })
            .collect();
        TopicStats::from_nsqd(
            NsqdTopic {
                topic_name: name.into(),
                depth: 3,
                message_count: msgs,
                channels: Some(channels),
                ..Default::default()
            },
            &p,
            0,
        )
    }

    #[test]
    fn records_totals_nodes_channels_and_rates() {
        let mut h = HistoryState::new(Duration::from_secs(5), Duration::from_secs(60));
        h.record(
            0,
            &[
                topic(1, "t", 10, &[("c", 2, 10)]),
                topic(2, "t", 0, &[("c", 1, 0)]),
            ],
            String::new(),
        );
        h.record(
            5000,
            &[
                topic(1, "t", 60, &[("c", 2, 60)]),
                topic(2, "t", 50, &[("c", 1, 50)]),
            ],
            String::new(),
        );
        let th = &h.topics["t"];
        let s = th.total.series(0);
        assert_eq!(
            (
                s.ts.clone(),
                s.depth.clone(),
                s.messages.clone(),
                s.in_flight.clone()
            ),
            (vec![0, 5000], vec![9, 9], vec![10, 110], vec![2, 2])
        );
        assert_eq!(s.rate, vec![None, Some(20.0)]);
        assert_eq!(th.nodes["h:2"].series(0).rate, vec![None, Some(10.0)]);
        assert_eq!(th.channels["c"].total.series(0).depth, vec![3, 3]);
        assert_eq!(h.cluster.series(0).messages, vec![10, 110]);
    }

    #[test]
    fn counter_reset_gives_no_rate_and_old_samples_expire() {
        let mut h = HistoryState::new(Duration::from_secs(5), Duration::from_secs(10));
        h.record(0, &[topic(1, "t", 100, &[])], String::new());
        h.record(5000, &[topic(1, "t", 5, &[])], String::new());
        assert_eq!(h.topics["t"].total.series(0).rate, vec![None, None]);
        h.record(10000, &[topic(1, "u", 1, &[])], String::new());
        h.record(16000, &[], String::new());
        assert!(!h.topics.contains_key("t"), "t not seen for a whole window");
        assert!(h.topics.contains_key("u"));
        h.record(30000, &[], String::new());
        assert!(h.topics.is_empty());
    }

    #[test]
    fn thinning_keeps_newest_and_recomputes_rate() {
        let mut r = Ring::default();
        for i in 0..10 {
            r.push(
                i * 1000,
                Point {
                    messages: i * 10,
                    ..Default::default()
                },
                100,
            );
        }
        let s = r.series(4);
        assert_eq!(s.ts, vec![0, 3000, 6000, 9000]);
        assert_eq!(s.rate, vec![None, Some(10.0), Some(10.0), Some(10.0)]);
        let s = r.series(3);
        assert_eq!(*s.ts.last().unwrap(), 9000);
        assert!(s.ts.len() <= 3);
        let full = r.series(0);
        assert_eq!((full.ts.len(), full.rate[0]), (10, None));
        let tail = r.series(10);
        assert_eq!(tail.rate[1], Some(10.0));
    }
}

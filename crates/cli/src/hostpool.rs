//! go-hostpool v0.1.0, the destination chooser of nsq_to_nsq and
//! nsq_to_http behind `--mode=hostpool` and `--mode=epsilon-greedy`.
//!
//! * Standard pool: round robin over healthy hosts. A failed host is dead
//!   for 30 s; after that it is tried again (and each retry doubles the wait,
//!   up to 900 s) until a success revives it. With every host dead, all are
//!   revived at once.
//! * Epsilon-greedy: with probability ε (0.3, decaying ×0.9 per use to 1 %)
//!   explore by round robin; otherwise pick at random weighted by 1/(average
//!   response time in ms) over the last 5 minutes (120 buckets), falling
//!   back to round robin while no host has a non-zero average.
//!
//! Pure state: the caller passes the time and the random numbers, so the
//! rules are testable without a clock or a network.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const EPSILON_BUCKETS: usize = 120;
const EPSILON_DECAY: f32 = 0.90;
const MIN_EPSILON: f32 = 0.01;
const INITIAL_EPSILON: f32 = 0.3;
/// How long the response-time history reaches back.
pub const DECAY_DURATION: Duration = Duration::from_secs(5 * 60);
/// How often one bucket of history is dropped.
pub const DECAY_TICK: Duration =
    Duration::from_nanos(DECAY_DURATION.as_nanos() as u64 / EPSILON_BUCKETS as u64);

struct HostEntry {
    host: String,
    next_retry: Option<Instant>,
    retry_delay: Duration,
    dead: bool,
    epsilon_counts: Vec<i64>,
    epsilon_values: Vec<i64>,
    epsilon_index: usize,
}

impl HostEntry {
    fn retry_due(&self, now: Instant) -> bool {
        match self.next_retry {
            None => true,
            Some(t) => t < now,
        }
    }

    fn can_try(&self, now: Instant) -> bool {
        !self.dead || self.retry_due(now)
    }

    fn will_retry(&mut self, max_retry_interval: Duration, now: Instant) {
        self.retry_delay = (self.retry_delay * 2).min(max_retry_interval);
        self.next_retry = Some(now + self.retry_delay);
    }

    /// Older buckets weigh less; an empty bucket repeats the previous value.
    fn weighted_average_response_time(&self) -> f64 {
        let mut value = 0.0;
        let mut last = 0.0;
        for i in 1..=EPSILON_BUCKETS {
            let pos = (self.epsilon_index + i) % EPSILON_BUCKETS;
            let count = self.epsilon_counts[pos];
            let weight = i as f64 / EPSILON_BUCKETS as f64;
            if count > 0 {
                let current = self.epsilon_values[pos] as f64 / count as f64;
                value += current * weight;
                last = current;
            } else {
                value += last * weight;
            }
        }
        value
    }
}

/// A pool shared by a program's tasks.
pub type Shared = Arc<Mutex<HostPool>>;

/// A pool of `hosts` (epsilon-greedy or standard), with the task that ages
/// the epsilon-greedy response times (every [`DECAY_TICK`]) started on the
/// current tokio runtime.
pub fn start(hosts: &[String], epsilon_greedy: bool) -> Shared {
    let pool = if epsilon_greedy {
        HostPool::epsilon_greedy(hosts)
    } else {
        HostPool::standard(hosts)
    };
    let pool = Arc::new(Mutex::new(pool));
    if epsilon_greedy {
        let pool = pool.clone();
        tokio::spawn(async move {
            let mut tick =
                tokio::time::interval_at(tokio::time::Instant::now() + DECAY_TICK, DECAY_TICK);
            loop {
                tick.tick().await;
                pool.lock().unwrap_or_else(|e| e.into_inner()).decay();
            }
        });
    }
    pool
}

pub struct HostPool {
    hosts: Vec<HostEntry>,
    /// host → entry (the last one, for repeated addresses, as Go's map).
    by_name: HashMap<String, usize>,
    next_host_index: usize,
    initial_retry_delay: Duration,
    max_retry_interval: Duration,
    /// `Some` for the epsilon-greedy pool: the exploration rate.
    epsilon: Option<f32>,
}

impl HostPool {
    pub fn standard(hosts: &[String]) -> HostPool {
        let initial_retry_delay = Duration::from_secs(30);
        let entries: Vec<HostEntry> = hosts
            .iter()
            .map(|h| HostEntry {
                host: h.clone(),
                next_retry: None,
                retry_delay: initial_retry_delay,
                dead: false,
                epsilon_counts: Vec::new(),
                epsilon_values: Vec::new(),
                epsilon_index: 0,
            })
            .collect();
        let by_name = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.host.clone(), i))
            .collect();
        HostPool {
            hosts: entries,
            by_name,
            next_host_index: 0,
            initial_retry_delay,
            max_retry_interval: Duration::from_secs(900),
            epsilon: None,
        }
    }

    pub fn epsilon_greedy(hosts: &[String]) -> HostPool {
        let mut p = HostPool::standard(hosts);
        for h in &mut p.hosts {
            h.epsilon_counts = vec![0; EPSILON_BUCKETS];
            h.epsilon_values = vec![0; EPSILON_BUCKETS];
        }
        p.epsilon = Some(INITIAL_EPSILON);
        p
    }

    pub fn is_epsilon_greedy(&self) -> bool {
        self.epsilon.is_some()
    }

    /// Picks a host now, with fresh random numbers ([`HostPool::get`]).
    pub fn pick(&mut self) -> String {
        self.get(Instant::now(), rand::random::<f32>(), rand::random::<f64>())
    }

    /// Picks a host. `explore` and `pick` are uniform random numbers in [0, 1).
    pub fn get(&mut self, now: Instant, explore: f32, pick: f64) -> String {
        match self.epsilon {
            None => self.round_robin(now),
            Some(_) => self.epsilon_greedy_pick(now, explore, pick),
        }
    }

    fn round_robin(&mut self, now: Instant) -> String {
        let n = self.hosts.len();
        for i in 0..n {
            let idx = (i + self.next_host_index) % n;
            let max = self.max_retry_interval;
            let h = &mut self.hosts[idx];
            if !h.dead {
                self.next_host_index = idx + 1;
                return h.host.clone();
            }
            if h.retry_due(now) {
                h.will_retry(max, now);
                self.next_host_index = idx + 1;
                return h.host.clone();
            }
        }
        // Every host is down: revive them all.
        self.reset_all();
        self.next_host_index = 0;
        self.hosts[0].host.clone()
    }

    fn epsilon_greedy_pick(&mut self, now: Instant, explore: f32, pick: f64) -> String {
        let epsilon = self.epsilon.unwrap_or(INITIAL_EPSILON);
        if explore < epsilon {
            self.epsilon = Some((epsilon * EPSILON_DECAY).max(MIN_EPSILON));
            return self.round_robin(now);
        }
        let mut possible: Vec<(usize, f64)> = Vec::new();
        let mut sum = 0.0;
        for (i, h) in self.hosts.iter().enumerate() {
            if h.can_try(now) {
                let v = h.weighted_average_response_time();
                if v > 0.0 {
                    let ev = 1.0 / v;
                    sum += ev;
                    possible.push((i, ev));
                }
            }
        }
        let mut chosen = None;
        let mut ceiling = 0.0;
        for &(i, ev) in &possible {
            ceiling += ev / sum;
            if pick <= ceiling {
                chosen = Some(i);
                break;
            }
        }
        let Some(i) = chosen else {
            return self.round_robin(now);
        };
        let max = self.max_retry_interval;
        let h = &mut self.hosts[i];
        if h.dead {
            h.will_retry(max, now);
        }
        h.host.clone()
    }

    fn reset_all(&mut self) {
        for &i in self.by_name.values() {
            self.hosts[i].dead = false;
        }
    }

    /// A request to `host` worked; `took` feeds the epsilon-greedy history.
    pub fn mark_success(&mut self, host: &str, took: Duration) {
        let Some(&i) = self.by_name.get(host) else {
            return;
        };
        let h = &mut self.hosts[i];
        h.dead = false;
        if self.epsilon.is_some() {
            let idx = h.epsilon_index;
            h.epsilon_counts[idx] += 1;
            h.epsilon_values[idx] += (took.as_secs_f64() * 1000.0) as i64;
        }
    }

    /// A request to `host` failed: dead until its retry time.
    pub fn mark_failed(&mut self, host: &str, now: Instant) {
        let Some(&i) = self.by_name.get(host) else {
            return;
        };
        let initial = self.initial_retry_delay;
        let h = &mut self.hosts[i];
        if !h.dead {
            h.dead = true;
            h.retry_delay = initial;
            h.next_retry = Some(now + initial);
        }
    }

    /// Drops the oldest bucket of response times (every [`DECAY_TICK`]).
    pub fn decay(&mut self) {
        for h in &mut self.hosts {
            if h.epsilon_counts.is_empty() {
                continue;
            }
            h.epsilon_index = (h.epsilon_index + 1) % EPSILON_BUCKETS;
            h.epsilon_counts[h.epsilon_index] = 0;
            h.epsilon_values[h.epsilon_index] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("h{i}")).collect()
    }

    #[test]
    fn round_robin_skips_dead_hosts_until_retry() {
        let mut p = HostPool::standard(&hosts(3));
        let t0 = Instant::now();
        assert_eq!(
            [
                p.get(t0, 0.0, 0.0),
                p.get(t0, 0.0, 0.0),
                p.get(t0, 0.0, 0.0),
                p.get(t0, 0.0, 0.0)
            ],
            ["h0", "h1", "h2", "h0"]
        );
        p.mark_failed("h1", t0);
        assert_eq!([p.get(t0, 0.0, 0.0), p.get(t0, 0.0, 0.0)], ["h2", "h0"]);
        // After 30 s h1 is tried once more; the next retry is 60 s later.
        let t1 = t0 + Duration::from_secs(31);
        assert_eq!(p.get(t1, 0.0, 0.0), "h1");
        assert_eq!(
            [
                p.get(t1, 0.0, 0.0),
                p.get(t1, 0.0, 0.0),
                p.get(t1, 0.0, 0.0)
            ],
            ["h2", "h0", "h2"]
        );
        p.mark_success("h1", Duration::ZERO);
        assert_eq!(p.get(t1, 0.0, 0.0), "h0");
        assert_eq!(p.get(t1, 0.0, 0.0), "h1");
    }

    #[test]
    fn all_dead_revives_everyone() {
        let mut p = HostPool::standard(&hosts(2));
        let t0 = Instant::now();
        p.mark_failed("h0", t0);
        p.mark_failed("h1", t0);
        // go-hostpool restarts at index 0 after reviving, so h0 comes twice.
        assert_eq!(
            [
                p.get(t0, 0.0, 0.0),
                p.get(t0, 0.0, 0.0),
                p.get(t0, 0.0, 0.0)
            ],
            ["h0", "h0", "h1"]
        );
    }

    #[test]
    fn epsilon_greedy_prefers_fast_hosts() {
        let mut p = HostPool::epsilon_greedy(&hosts(2));
        let t0 = Instant::now();
        // No history yet: round robin.
        assert_eq!(p.get(t0, 0.99, 0.5), "h0");
        p.mark_success("h0", Duration::from_millis(10));
        p.mark_success("h1", Duration::from_millis(90));
        // Weights 1/10 : 1/90 → h0 owns the first 90 % of [0, 1).
        assert_eq!(p.get(t0, 0.99, 0.5), "h0");
        assert_eq!(p.get(t0, 0.99, 0.95), "h1");
        // Exploring: round robin, and epsilon decays.
        let before = p.epsilon.unwrap();
        p.get(t0, 0.0, 0.5);
        assert!(p.epsilon.unwrap() < before);
        for _ in 0..EPSILON_BUCKETS {
            p.decay();
        }
        assert_eq!(p.hosts[0].weighted_average_response_time(), 0.0);
    }
}

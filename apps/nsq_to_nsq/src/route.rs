//! Choosing a destination nsqd per message, and the publish-timing log.
//!
//! * Round-robin: a shared counter, incremented before use, modulo the
//!   number of destinations (so the first message goes to the second one,
//!   as in the original).
//! * Host pool (go-hostpool's standard pool): healthy destinations in turn;
//!   a failed one is skipped for 30 s, then tried once, its wait doubling
//!   up to 15 min while it keeps failing; when all are down, all are reset.
//!
//! [`TimerMetrics`] reproduces bitly/timer_metrics' log line, printed once
//! every `status_every` publishes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const INITIAL_RETRY_DELAY: Duration = Duration::from_secs(30);
const MAX_RETRY_INTERVAL: Duration = Duration::from_secs(900);

/// Per destination state of the host pool.
#[derive(Debug, Clone)]
struct HostEntry {
    dead: bool,
    next_retry: Instant,
    retry_delay: Duration,
}

#[derive(Debug)]
pub struct HostPool {
    hosts: Vec<HostEntry>,
    next_host_index: usize,
}

impl HostPool {
    fn get(&mut self, now: Instant) -> usize {
        let n = self.hosts.len();
        for i in 0..n {
            let idx = (i + self.next_host_index) % n;
            let h = &mut self.hosts[idx];
            if !h.dead {
                self.next_host_index = idx + 1;
                return idx;
            }
            if h.next_retry < now {
                h.retry_delay = (h.retry_delay * 2).min(MAX_RETRY_INTERVAL);
                h.next_retry = now + h.retry_delay;
                self.next_host_index = idx + 1;
                return idx;
            }
        }
        for h in &mut self.hosts {
            h.dead = false;
        }
        self.next_host_index = 0;
        0
    }

    fn mark(&mut self, idx: usize, ok: bool, now: Instant) {
        let h = &mut self.hosts[idx];
        if ok {
            h.dead = false;
        } else if !h.dead {
            h.dead = true;
            h.retry_delay = INITIAL_RETRY_DELAY;
            h.next_retry = now + h.retry_delay;
        }
    }
}

/// Picks the destination (an index into the destination list) for each message.
#[derive(Debug)]
pub enum Router {
    RoundRobin { counter: AtomicU64, len: u64 },
    HostPool(Mutex<HostPool>),
}

impl Router {
    pub fn new(len: usize, hostpool: bool) -> Router {
        if hostpool {
            let now = Instant::now();
            let entry = HostEntry {
                dead: false,
                next_retry: now,
                retry_delay: INITIAL_RETRY_DELAY,
            };
            Router::HostPool(Mutex::new(HostPool {
                hosts: vec![entry; len],
                next_host_index: 0,
            }))
        } else {
            Router::RoundRobin {
                counter: AtomicU64::new(0),
                len: len as u64,
            }
        }
    }

    pub fn pick(&self) -> usize {
        match self {
            Router::RoundRobin { counter, len } => {
                ((counter.fetch_add(1, Ordering::SeqCst) + 1) % len) as usize
            }
            Router::HostPool(p) => p
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(Instant::now()),
        }
    }

    /// Reports how the publish to `idx` went (the host pool learns from it).
    pub fn mark(&self, idx: usize, ok: bool) {
        if let Router::HostPool(p) = self {
            p.lock()
                .unwrap_or_else(|e| e.into_inner())
                .mark(idx, ok, Instant::now());
        }
    }
}

/// The last `status_every` publish durations; logs a summary each time
/// the window wraps. `status_every == 0` records nothing.
#[derive(Debug)]
pub struct TimerMetrics {
    prefix: String,
    status_every: i64,
    inner: Mutex<Window>,
}

#[derive(Debug, Default)]
struct Window {
    timings: Vec<Duration>,
    position: i64,
}

impl TimerMetrics {
    pub fn new(status_every: i64, prefix: &str) -> TimerMetrics {
        if status_every > 0 && status_every < 100 {
            nsq_cli::golog::log(format!(
                "Warning: use more than 100 status values for accurate percentiles (configured with {status_every})"
            ));
        }
        TimerMetrics {
            prefix: prefix.to_string(),
            status_every,
            inner: Mutex::new(Window::default()),
        }
    }

    /// Records one publish; logs the summary when the window wraps.
    pub fn status(&self, took: Duration) {
        if let Some(line) = self.record(took) {
            nsq_cli::golog::log(&line);
        }
    }

    fn record(&self, took: Duration) -> Option<String> {
        if self.status_every == 0 {
            return None;
        }
        let mut w = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        w.position += 1;
        let looped = w.position > self.status_every;
        if looped {
            w.position = 1;
        }
        let pos = w.position as usize;
        if pos > w.timings.len() {
            w.timings.push(took);
        } else {
            w.timings[pos - 1] = took;
        }
        looped.then(|| summary(&self.prefix, &w.timings))
    }
}

/// `<prefix> finished <n> - 99th: 1.23ms - 95th: 0.98ms - avg: 0.50ms`.
fn summary(prefix: &str, timings: &[Duration]) -> String {
    let mut sorted = timings.to_vec();
    sorted.sort();
    let total: Duration = timings.iter().sum();
    let avg = if timings.is_empty() {
        Duration::ZERO
    } else {
        total / timings.len() as u32
    };
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    format!(
        "{prefix} finished {} - 99th: {:.2}ms - 95th: {:.2}ms - avg: {:.2}ms",
        timings.len(),
        ms(percentile(99.0, &sorted)),
        ms(percentile(95.0, &sorted)),
        ms(avg)
    )
}

fn percentile(perc: f64, sorted: &[Duration]) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((perc / 100.0) * sorted.len() as f64 + 0.5).ceil() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_starts_at_the_second() {
        let r = Router::new(3, false);
        let picks: Vec<usize> = (0..4).map(|_| r.pick()).collect();
        assert_eq!(picks, [1, 2, 0, 1]);
    }

    #[test]
    fn host_pool_skips_failed_hosts_until_retry() {
        let t0 = Instant::now();
        let entry = HostEntry {
            dead: false,
            next_retry: t0,
            retry_delay: INITIAL_RETRY_DELAY,
        };
        let mut p = HostPool {
            hosts: vec![entry; 2],
            next_host_index: 0,
        };
        assert_eq!(p.get(t0), 0);
        assert_eq!(p.get(t0), 1);
        p.mark(0, false, t0);
        assert_eq!(p.get(t0), 1);
        assert_eq!(p.get(t0), 1);
        // After 30 s the dead host is tried once, with a doubled wait next time.
        let later = t0 + Duration::from_secs(31);
        assert_eq!(p.get(later), 0);
        assert_eq!(p.hosts[0].retry_delay, Duration::from_secs(60));
        assert_eq!(p.get(later), 1);
        p.mark(0, true, later);
        assert_eq!(p.get(later), 0);
        // All dead: everything is reset and the first host is used.
        p.mark(0, false, later);
        p.mark(1, false, later);
        assert_eq!(p.get(later), 0);
        assert!(!p.hosts[1].dead);
    }

    #[test]
    fn timer_metrics_logs_when_the_window_wraps() {
        let m = TimerMetrics {
            prefix: "[aggregate]:".into(),
            status_every: 2,
            inner: Mutex::new(Window::default()),
        };
        assert_eq!(m.record(Duration::from_millis(1)), None);
        assert_eq!(m.record(Duration::from_millis(3)), None);
        assert_eq!(
            m.record(Duration::from_millis(5)).as_deref(),
            Some("[aggregate]: finished 2 - 99th: 5.00ms - 95th: 5.00ms - avg: 4.00ms")
        );
        let off = TimerMetrics {
            prefix: String::new(),
            status_every: 0,
            inner: Mutex::new(Window::default()),
        };
        assert_eq!(off.record(Duration::from_millis(1)), None);
    }
}

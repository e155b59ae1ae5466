//! bitly/timer_metrics v1.0.0: request timings, logged every
//! `--status-every` requests as
//! `<prefix> finished <n> - 99th: 1.23ms - 95th: 1.00ms - avg: 0.80ms`
//! (the first line after `n + 1` requests, then every `n`; the window is a
//! ring of the last `n` timings).

use std::time::{Duration, Instant};

use parking_lot::Mutex;

use nsq_cli::golog::log as go_log;

pub struct TimerMetrics {
    prefix: String,
    status_every: i64,
    state: Mutex<State>,
}

struct State {
    timings: Vec<Duration>,
    position: i64,
}

/// Summary of the current window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stats {
    pub count: usize,
    pub avg: Duration,
    pub p95: Duration,
    pub p99: Duration,
}

impl TimerMetrics {
    /// `status_every == 0` disables it.
    pub fn new(status_every: i64, prefix: &str) -> TimerMetrics {
        if status_every > 0 && status_every < 100 {
            go_log(format!("Warning: use more than 100 status values for accurate percentiles (configured with {status_every})"));
        }
        TimerMetrics {
            prefix: prefix.to_string(),
            status_every,
            state: Mutex::new(State {
                timings: Vec::new(),
                position: 0,
            }),
        }
    }

    /// Records the time since `start`.
    pub fn status(&self, start: Instant) {
        if self.status_every == 0 {
            return;
        }
        self.status_duration(start.elapsed());
    }

    pub fn status_duration(&self, d: Duration) {
        if self.status_every == 0 {
            return;
        }
        let stats = {
            let mut st = self.state.lock();
            st.position += 1;
            let mut looped = false;
            if st.position > self.status_every {
                looped = true;
                st.position = 1;
            }
            let pos = st.position as usize;
            if pos > st.timings.len() {
                st.timings.push(d);
            } else {
                st.timings[pos - 1] = d;
            }
            if !looped {
                return;
            }
            stats(&st.timings)
        };
        go_log(format!(
            "{} finished {} - 99th: {:.2}ms - 95th: {:.2}ms - avg: {:.2}ms",
            self.prefix,
            stats.count,
            ms(stats.p99),
            ms(stats.p95),
            ms(stats.avg)
        ));
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn stats(timings: &[Duration]) -> Stats {
    let total: Duration = timings.iter().sum();
    let mut sorted = timings.to_vec();
    sorted.sort();
    let avg = if sorted.is_empty() {
        Duration::ZERO
    } else {
        total / sorted.len() as u32
    };
    Stats {
        count: timings.len(),
        avg,
        p95: percentile(95.0, &sorted),
        p99: percentile(99.0, &sorted),
    }
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
    fn window_and_percentiles_match_timer_metrics() {
        // timer_metrics' own test: 11 timings into a window of 5.
        let timings: Vec<Duration> = [7, 8, 9, 10, 11]
            .iter()
            .map(|s| Duration::from_secs(*s))
            .collect();
        let s = stats(&timings);
        assert_eq!(s.avg, Duration::from_secs(9));
        assert_eq!(s.p99, Duration::from_secs(11));
        let m = TimerMetrics::new(0, "x");
        m.status_duration(Duration::from_secs(1)); // disabled: no effect
        assert!(m.state.lock().timings.is_empty());
    }
}

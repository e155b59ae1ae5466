//! bitly/timer_metrics v1.0.0, as nsq_to_nsq and nsq_to_http use it:
//! request timings, logged every `--status-every` requests as
//! `<prefix> finished <n> - 99th: 1.23ms - 95th: 1.00ms - avg: 0.80ms`
//! (the first line after `n + 1` requests, then every `n`; the window is a
//! ring of the last `n` timings).

use std::sync::Mutex;
use std::time::Duration;

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
            crate::golog::log(format!(
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
            crate::golog::log(&line);
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

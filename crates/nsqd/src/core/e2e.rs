//! End-to-end processing latency (publish → FIN) quantiles over a sliding
//! window, as `--e2e-processing-latency-percentile` asks for.
//!
//! nsqd keeps two targeted-quantile streams and swaps them every half
//! window. We keep two bounded sample buffers the same way (reservoir
//! sampling past the bound keeps memory fixed) and sort on query; the
//! answer is approximate, as nsqd's is. The reservoir's randomness comes
//! from a seed passed in, so a test sees the same samples every run.

use std::time::{Duration, Instant};

use super::rng::Rng;
use nsq_protocol::stats::{E2eLatency, Percentile};

const MAX_SAMPLES: usize = 4096;

#[derive(Debug, Default, Clone)]
struct Half {
    samples: Vec<f64>,
    seen: u64,
}

impl Half {
    fn insert(&mut self, v: f64, rng: &mut Rng) {
        self.seen += 1;
        if self.samples.len() < MAX_SAMPLES {
            self.samples.push(v);
        } else {
            let i = rng.below(self.seen);
            if (i as usize) < MAX_SAMPLES {
                self.samples[i as usize] = v;
            }
        }
    }
}

#[derive(Debug, Clone)]
pub struct QuantileStream {
    percentiles: Vec<f64>,
    half_window: Duration,
    current: Half,
    previous: Half,
    swapped_at: Instant,
    rng: Rng,
}

impl QuantileStream {
    pub fn new(percentiles: Vec<f64>, window: Duration, now: Instant, seed: u64) -> QuantileStream {
        QuantileStream {
            percentiles,
            half_window: window / 2,
            current: Half::default(),
            previous: Half::default(),
            swapped_at: now,
            rng: Rng::new(seed),
        }
    }

    fn roll(&mut self, now: Instant) {
        while now.duration_since(self.swapped_at) >= self.half_window && !self.half_window.is_zero()
        {
            self.previous = std::mem::take(&mut self.current);
            self.swapped_at += self.half_window;
            if now.duration_since(self.swapped_at) >= self.half_window * 2 {
                // idle for a whole window: both halves are stale
                self.previous = Half::default();
                self.swapped_at = now;
            }
        }
    }

    pub fn insert(&mut self, latency_ns: f64, now: Instant) {
        self.roll(now);
        self.current.insert(latency_ns, &mut self.rng);
    }

    fn merged(&mut self, now: Instant) -> (Vec<f64>, u64) {
        self.roll(now);
        let mut all: Vec<f64> = self
            .current
            .samples
            .iter()
            .chain(self.previous.samples.iter())
            .copied()
            .collect();
        all.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        (all, self.current.seen + self.previous.seen)
    }

    pub fn snapshot(&mut self, now: Instant) -> E2eLatency {
        let (all, count) = self.merged(now);
        E2eLatency {
            count,
            percentiles: Some(quantiles(&self.percentiles, &all)),
        }
    }

    /// The raw samples of the window, for a topic's merge of its channels.
    pub fn samples(&mut self, now: Instant) -> (Vec<f64>, u64) {
        self.merged(now)
    }
}

/// Quantile values of sorted samples, in the configured (descending) order.
pub fn quantiles(percentiles: &[f64], sorted: &[f64]) -> Vec<Percentile> {
    percentiles
        .iter()
        .map(|&q| {
            let value = if sorted.is_empty() {
                0.0
            } else {
                let idx = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
                sorted[idx]
            };
            Percentile { quantile: q, value }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_of_uniform_samples() {
        let now = Instant::now();
        let mut s = QuantileStream::new(vec![1.0, 0.99, 0.5], Duration::from_secs(600), now, 1);
        for i in 1..=1000 {
            s.insert(i as f64, now);
        }
        let snap = s.snapshot(now);
        assert_eq!(snap.count, 1000);
        let p = snap.percentiles.unwrap();
        assert_eq!(p[0].value, 1000.0);
        assert_eq!(p[1].value, 990.0);
        assert_eq!(p[2].value, 500.0);
    }

    #[test]
    fn past_the_reservoir_bound_samples_depend_only_on_the_seed() {
        let now = Instant::now();
        let run = |seed| {
            let mut s = QuantileStream::new(vec![0.99, 0.5], Duration::from_secs(600), now, seed);
            for i in 0..20_000 {
                s.insert(((i * 7919) % 20_000) as f64, now);
            }
            s.snapshot(now)
        };
        let (a, b) = (run(5), run(5));
        assert_eq!(a, b, "same seed, same estimate");
        assert_eq!(a.count, 20_000, "every latency counts, sampled or not");
        let p = a.percentiles.clone().unwrap();
        assert!(
            (p[0].value - 19_800.0).abs() < 400.0,
            "p99 estimate {}",
            p[0].value
        );
        assert!(
            (p[1].value - 10_000.0).abs() < 800.0,
            "p50 estimate {}",
            p[1].value
        );
        assert_ne!(run(6), a, "another seed, another sample");
    }

    #[test]
    fn window_forgets_old_samples() {
        let now = Instant::now();
        let mut s = QuantileStream::new(vec![0.5], Duration::from_secs(10), now, 1);
        s.insert(5.0, now);
        assert_eq!(s.snapshot(now + Duration::from_secs(6)).count, 1);
        assert_eq!(s.snapshot(now + Duration::from_secs(11)).count, 0);
    }
}

//! Choosing a destination nsqd per message.
//!
//! * Round-robin: a shared counter, incremented before use, modulo the
//!   number of destinations (so the first message goes to the second one,
//!   as in the original).
//! * Host pool: go-hostpool's standard pool, or its epsilon-greedy one
//!   (`--mode=epsilon-greedy`), as NSQ's nsq_to_nsq uses them
//!   (`nsq_cli::hostpool`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nsq_cli::hostpool;

/// Picks the destination (an index into the destination list) for each message.
pub enum Router {
    RoundRobin {
        counter: AtomicU64,
        len: u64,
    },
    HostPool {
        pool: hostpool::Shared,
        addresses: Vec<String>,
    },
}

impl Router {
    pub fn round_robin(len: usize) -> Router {
        Router::RoundRobin {
            counter: AtomicU64::new(0),
            len: len as u64,
        }
    }

    /// A host pool over `addresses` (on the current tokio runtime).
    pub fn host_pool(addresses: &[String], epsilon_greedy: bool) -> Router {
        Router::HostPool {
            pool: hostpool::start(addresses, epsilon_greedy),
            addresses: addresses.to_vec(),
        }
    }

    pub fn pick(&self) -> usize {
        match self {
            Router::RoundRobin { counter, len } => {
                ((counter.fetch_add(1, Ordering::SeqCst) + 1) % len) as usize
            }
            Router::HostPool { pool, addresses } => {
                let host = pool.lock().unwrap_or_else(|e| e.into_inner()).pick();
                addresses.iter().position(|a| *a == host).unwrap_or(0)
            }
        }
    }

    /// Reports how the publish to `idx` went, and how long it took (the
    /// host pool learns from both).
    pub fn mark(&self, idx: usize, ok: bool, took: Duration) {
        if let Router::HostPool { pool, addresses } = self {
            let mut pool = pool.lock().unwrap_or_else(|e| e.into_inner());
            match ok {
                true => pool.mark_success(&addresses[idx], took),
                false => pool.mark_failed(&addresses[idx], Instant::now()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_starts_at_the_second() {
        let r = Router::round_robin(3);
        let picks: Vec<usize> = (0..4).map(|_| r.pick()).collect();
        assert_eq!(picks, [1, 2, 0, 1]);
    }

    #[tokio::test]
    async fn host_pool_skips_a_failed_destination() {
        let addrs = vec!["a:1".to_string(), "b:1".to_string()];
        let r = Router::host_pool(&addrs, false);
        assert_eq!((r.pick(), r.pick()), (0, 1));
        r.mark(0, false, Duration::ZERO);
        assert_eq!((r.pick(), r.pick()), (1, 1));
    }
}

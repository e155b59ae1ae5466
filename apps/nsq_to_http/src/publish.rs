//! The message handler: NSQ's `PublishHandler`. Each message becomes one
//! request per chosen endpoint; any failure (network error, GET not 200,
//! POST not 2xx) is returned to the consumer, which REQueues the message
//! with go-nsq's delay and backoff. A message left out by `--sample` is
//! simply finished.
//!
//! Modes: `All` — every endpoint in order, stopping at the first failure;
//! `RoundRobin` — a shared counter (incremented first, so the first message
//! goes to the second endpoint, as in NSQ); `HostPool` — go-hostpool's
//! standard or epsilon-greedy pool.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use bytes::Bytes;
use nsq_client::{Handler, HandlerResult, Message};

use crate::http::{query_escape, sprintf_one, HttpClient};
use nsq_cli::hostpool;
use nsq_cli::timer_metrics::TimerMetrics;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    All,
    RoundRobin,
    HostPool,
}

impl Mode {
    /// NSQ's mapping: anything unrecognised selects `All`.
    pub fn from_flag(s: &str) -> Mode {
        match s {
            "round-robin" => Mode::RoundRobin,
            "hostpool" | "epsilon-greedy" => Mode::HostPool,
            _ => Mode::All,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// `--get`: the body, query-escaped, replaces `%s` in the URL.
    Get,
    /// `--post`: the body is the request body.
    Post,
}

pub struct PublishHandler {
    pub client: HttpClient,
    pub verb: Verb,
    pub addresses: Vec<String>,
    pub mode: Mode,
    pub counter: AtomicU64,
    pub pool: hostpool::Shared,
    pub per_address: HashMap<String, TimerMetrics>,
    pub aggregate: TimerMetrics,
    pub sample: f64,
}

#[derive(Debug)]
struct StatusError(u16);

impl std::fmt::Display for StatusError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "got status code {}", self.0)
    }
}

impl std::error::Error for StatusError {}

impl PublishHandler {
    /// One request to `addr`; success means 200 for GET, any 2xx for POST.
    async fn publish(&self, addr: &str, body: &Bytes) -> HandlerResult {
        match self.verb {
            Verb::Get => {
                let endpoint = sprintf_one(addr, &query_escape(body));
                let status = self.client.get(&endpoint).await?;
                if status != 200 {
                    return Err(Box::new(StatusError(status)));
                }
            }
            Verb::Post => {
                let status = self.client.post(addr, body.clone()).await?;
                if !(200..300).contains(&status) {
                    return Err(Box::new(StatusError(status)));
                }
            }
        }
        Ok(())
    }

    fn record(&self, addr: &str, start: Instant) {
        if let Some(m) = self.per_address.get(addr) {
            m.status(start.elapsed());
        }
    }
}

impl Handler for PublishHandler {
    async fn handle_message(&self, m: Message) -> HandlerResult {
        if self.sample < 1.0 && rand::random::<f64>() > self.sample {
            return Ok(());
        }
        let body = m.body();
        let start = Instant::now();
        match self.mode {
            Mode::All => {
                for addr in &self.addresses {
                    let st = Instant::now();
                    self.publish(addr, body).await?;
                    self.record(addr, st);
                }
            }
            Mode::RoundRobin => {
                let counter = self.counter.fetch_add(1, Ordering::SeqCst).wrapping_add(1);
                let addr = &self.addresses[(counter % self.addresses.len() as u64) as usize];
                self.publish(addr, body).await?;
                self.record(addr, start);
            }
            Mode::HostPool => {
                let (addr, picked_at) = {
                    let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
                    (pool.pick(), Instant::now())
                };
                let result = self.publish(&addr, body).await;
                {
                    let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
                    match &result {
                        Ok(()) => pool.mark_success(&addr, picked_at.elapsed()),
                        Err(_) => pool.mark_failed(&addr, Instant::now()),
                    }
                }
                result?;
                self.record(&addr, start);
            }
        }
        self.aggregate.status(start.elapsed());
        Ok(())
    }
}

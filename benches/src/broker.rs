//! What the load generators for other brokers (`js_bench`, NATS
//! JetStream; `amqp_bench`, RabbitMQ) share, so that both put the same load
//! shape as `nsq_bench` and report it the same way: the command line, the
//! send time carried in a latency message's body, the latency summary and
//! the `RESULT {json}` line (scripts/replicated.sh reads it).

use std::future::Future;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};

/// A run's mode and flags (`--flag value` pairs after the mode).
pub struct Args {
    /// setup, pub, sub or latency.
    pub mode: String,
    pub server: String,
    /// The stream or queue (`--stream` / `--queue`).
    pub target: String,
    pub replicas: u32,
    pub writers: usize,
    /// Publishes waiting for their acknowledgement, per connection.
    pub window: usize,
    pub size: usize,
    pub runfor: Duration,
    /// Messages `sub` reads before it stops.
    pub count: u64,
    /// Messages a consumer asks for at once (pull batch, prefetch).
    pub batch: u64,
    /// `latency`'s publish rate, msgs/s.
    pub rate: u64,
}

/// Parses the command line of `name`, whose stream or queue is named by
/// `--{target_flag}`.
pub fn parse(name: &str, default_server: &str, target_flag: &str) -> Result<Args> {
    let mut a = Args {
        mode: String::new(),
        server: default_server.into(),
        target: "bench".into(),
        replicas: 3,
        writers: 2,
        window: 800,
        size: 200,
        runfor: Duration::from_secs(3),
        count: 0,
        batch: 2500,
        rate: 20_000,
    };
    let mut it = std::env::args().skip(1);
    a.mode = it
        .next()
        .ok_or_else(|| anyhow!("usage: {name} setup|pub|sub|latency [--flag value]..."))?;
    while let Some(flag) = it.next() {
        let v = it.next().ok_or_else(|| anyhow!("{flag} needs a value"))?;
        let n = || v.parse::<u64>().with_context(|| format!("{flag} {v}"));
        match flag.trim_start_matches('-') {
            "server" => a.server = v.clone(),
            f if f == target_flag => a.target = v.clone(),
            "replicas" => a.replicas = n()? as u32,
            "writers" => a.writers = n()? as usize,
            "window" => a.window = n()?.max(1) as usize,
            // A latency message carries its send time in its first 8 bytes.
            "size" => a.size = n()?.max(16) as usize,
            "runfor" => {
                a.runfor = Duration::from_secs_f64(
                    v.trim_end_matches('s')
                        .parse::<f64>()
                        .with_context(|| format!("--runfor {v} (seconds, e.g. 3s)"))?,
                )
            }
            "count" => a.count = n()?,
            "batch" => a.batch = n()?.max(1),
            "rate" => a.rate = n()?.max(1),
            _ => bail!("unknown flag {flag}"),
        }
    }
    Ok(a)
}

/// Wall-clock nanoseconds: the publisher and the consumer of a latency
/// run share this machine's clock.
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Writes the send time into a latency message's body.
pub fn stamp(body: &mut [u8]) {
    body[..8].copy_from_slice(&now_ns().to_be_bytes());
}

/// The time from a latency message's send to `at`, if the body has one.
pub fn since_sent(body: &[u8], at: u64) -> Option<u64> {
    let sent = u64::from_be_bytes(body.get(..8)?.try_into().ok()?);
    Some(at.saturating_sub(sent))
}

/// When each publish of a latency run was written (by its number, from 0)
/// and how long each took to be acknowledged. The publisher marks a
/// tick's messages just before it flushes them; the acknowledgement
/// reader records each as its acknowledgement arrives.
#[derive(Default)]
pub struct Acks {
    sent: std::sync::Mutex<Vec<u64>>,
    lat: std::sync::Mutex<Vec<u64>>,
}

impl Acks {
    /// Messages up to (not including) number `upto` are being written now.
    pub fn written(&self, upto: u64) {
        let now = now_ns();
        let mut sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        while (sent.len() as u64) < upto {
            sent.push(now);
        }
    }

    /// Message number `n` was acknowledged now.
    pub fn acked(&self, n: u64) {
        let now = now_ns();
        let sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&t) = sent.get(n as usize) {
            let mut lat = self.lat.lock().unwrap_or_else(|e| e.into_inner());
            lat.push(now.saturating_sub(t));
        }
    }

    /// The acknowledgement latencies recorded (nanoseconds).
    pub fn take(&self) -> Vec<u64> {
        std::mem::take(&mut *self.lat.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// The `latency` result: percentiles of `lat` (publish to delivery) and of
/// `ack` (publish to its acknowledgement), nanoseconds, in ms.
pub fn latency_result(rate: u64, sent: u64, mut lat: Vec<u64>, mut ack: Vec<u64>) -> Value {
    fn pct(v: &[u64], q: f64) -> f64 {
        if v.is_empty() {
            return 0.0;
        }
        let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
        v[i] as f64 / 1e6
    }
    lat.sort_unstable();
    ack.sort_unstable();
    json!({"mode": "latency", "rate": rate, "sent": sent, "received": lat.len(),
          "p50_ms": pct(&lat, 0.5), "p99_ms": pct(&lat, 0.99), "max_ms": pct(&lat, 1.0),
          "acked": ack.len(), "ack_p50_ms": pct(&ack, 0.5), "ack_p99_ms": pct(&ack, 0.99),
          "ack_max_ms": pct(&ack, 1.0)})
}

/// The `pub` and `sub` results.
pub fn rate_result(mode: &str, msgs: u64, secs: f64, extra: Value) -> Value {
    let mut v =
        json!({"mode": mode, "msgs": msgs, "secs": secs, "msgs_per_sec": msgs as f64 / secs});
    if let (Some(o), Value::Object(e)) = (v.as_object_mut(), extra) {
        o.extend(e);
    }
    v
}

/// `pub`: `a.writers` publishers side by side until `a.runfor` has passed,
/// each given the deadline and the counts of acknowledged and refused
/// messages to add to.
pub async fn run_pub<F, Fut>(a: Arc<Args>, publisher: F) -> Result<Value>
where
    F: Fn(Arc<Args>, tokio::time::Instant, Arc<AtomicU64>, Arc<AtomicU64>) -> Fut,
    Fut: Future<Output = Result<()>> + Send + 'static,
{
    let acked = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let start = tokio::time::Instant::now();
    let deadline = start + a.runfor;
    let tasks: Vec<_> = (0..a.writers)
        .map(|_| {
            tokio::spawn(publisher(
                a.clone(),
                deadline,
                acked.clone(),
                refused.clone(),
            ))
        })
        .collect();
    for t in tasks {
        t.await??;
    }
    Ok(rate_result(
        "pub",
        acked.load(Ordering::Relaxed),
        start.elapsed().as_secs_f64(),
        json!({"refused": refused.load(Ordering::Relaxed)}),
    ))
}

/// Prints the `RESULT` line, or the error; the process's exit code.
pub fn finish(name: &str, r: Result<Value>) -> ExitCode {
    match r {
        Ok(v) => {
            println!("RESULT {v}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{name}: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamped_body_tells_its_age() {
        let mut b = vec![b'x'; 16];
        stamp(&mut b);
        let at = now_ns() + 5_000_000;
        let age = since_sent(&b, at).unwrap();
        assert!((5_000_000..1_000_000_000).contains(&age), "{age}");
        assert_eq!(since_sent(b"short", at), None);
    }

    #[test]
    fn percentiles_in_milliseconds() {
        let lat: Vec<u64> = (1..=100).map(|ms| ms * 1_000_000).collect();
        let ack: Vec<u64> = (1..=10).rev().map(|ms| ms * 1_000_000).collect();
        let v = latency_result(20_000, 100, lat, ack);
        assert_eq!(v["p50_ms"], 50.0);
        assert_eq!(v["p99_ms"], 99.0);
        assert_eq!(v["max_ms"], 100.0);
        assert_eq!(v["received"], 100);
        assert_eq!(
            (v["ack_p50_ms"].as_f64(), v["ack_max_ms"].as_f64()),
            (Some(5.0), Some(10.0))
        );
        assert_eq!(v["acked"], 10);
        assert_eq!(latency_result(1, 0, vec![], vec![])["p99_ms"], 0.0);
    }

    #[test]
    fn acknowledgements_count_from_when_their_tick_was_written() {
        let acks = Acks::default();
        acks.acked(0); // before it was written: not counted
        acks.written(3);
        std::thread::sleep(Duration::from_millis(2));
        for n in [2, 0, 1, 7] {
            acks.acked(n);
        }
        let lat = acks.take();
        assert_eq!(lat.len(), 3, "the three written, each once");
        assert!(lat.iter().all(|&l| l >= 2_000_000), "{lat:?}");
        assert!(acks.take().is_empty());
    }
}

//! `to_nsq`: reads stdin, cuts it at `--delimiter` and publishes every
//! non-empty piece to `--topic` on each `--nsqd-tcp-address`, optionally
//! throttled to `--rate` messages per second. Exits 0 at end of input.

#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nsq_cli::golog::{self, fatal};
use nsq_client::{Config, Producer};
use tokio::io::{AsyncBufReadExt, BufReader};

use nsq_cli::VERSION;

/// The Go tool's throttle: a balance of send credits, one added every
/// `1s / rate` and capped at `rate`; a send with no credit first sleeps one
/// interval (once — the balance may go negative, as in the original).
struct Throttle {
    balance: Arc<AtomicI64>,
    interval: Duration,
}

impl Throttle {
    fn start(rate: i64) -> Throttle {
        let interval = Duration::from_nanos((1_000_000_000 / rate).max(1) as u64);
        let balance = Arc::new(AtomicI64::new(1));
        let b = balance.clone();
        golog::log(format!("Throttling messages rate to max:{rate}/second"));
        tokio::spawn(async move {
            let mut tick =
                tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
            loop {
                tick.tick().await;
                if b.fetch_add(1, Ordering::SeqCst) + 1 > rate {
                    b.store(rate, Ordering::SeqCst);
                }
            }
        });
        Throttle { balance, interval }
    }

    async fn before_send(&self) {
        if self.balance.load(Ordering::SeqCst) <= 0 {
            tokio::time::sleep(self.interval).await;
        }
    }

    fn after_send(&self) {
        self.balance.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Reads one piece up to `delim` and publishes it to every producer; `Ok(false)` at end of input.
async fn read_and_publish<R: tokio::io::AsyncBufRead + Unpin>(
    input: &mut R,
    delim: u8,
    topic: &str,
    producers: &[Producer],
) -> Result<bool, String> {
    let mut line = Vec::new();
    let n = input
        .read_until(delim, &mut line)
        .await
        .map_err(|e| e.to_string())?;
    // The original always drops the last byte: the delimiter, or at end of
    // input without one, the last byte of the data.
    line.pop();
    if !line.is_empty() {
        for p in producers {
            p.publish(topic, &line).await.map_err(|e| e.to_string())?;
        }
    }
    Ok(n > 0)
}

nsq_cli::flags! {
    /// to_nsq's flags (NSQ 1.3.0's names, types and defaults).
    struct Flags {
        /// topic to publish to
        topic: String = "";
        /// single byte that separates messages on stdin
        delimiter: String = "\n";
        /// nsqd TCP address to publish to; every message goes to each (repeatable)
        nsqd_tcp_address: Vec<String> = "";
        /// producer setting as key,value, e.g. write_timeout,5s (repeatable; go-nsq Config names)
        producer_opt: Vec<String> = "", check = Config::check_opt;
        /// publish at most this many messages per second; 0 means unlimited
        rate: i64 = "0";
    }
}

fn main() {
    let parsed = nsq_cli::flags::parse_command_line::<Flags>();
    let p = &parsed.flags;
    let mut cfg = Config::default();
    for opt in p.producer_opt.clone() {
        let _ = cfg.set_opt(&opt); // each was checked while parsing
    }
    let topic = p.topic.clone();
    let delimiter = p.delimiter.clone();
    let rate = p.rate;
    let nsqd_tcp_addrs = p.nsqd_tcp_address.clone();

    if topic.is_empty() {
        fatal("--topic required");
    }
    if delimiter.len() != 1 {
        fatal("--delimiter must be a single byte");
    }
    let delim = delimiter.as_bytes()[0];
    cfg.user_agent = format!("to_nsq/{VERSION} go-nsq/1.1.0");

    let rt = nsq_cli::app_runtime();
    rt.block_on(async move {
        let shutdown = nsq_cli::shutdown_on_signals();
        let mut producers = Vec::new();
        for addr in &nsqd_tcp_addrs {
            // The Go tool keys producers by address, so a repeated address publishes once.
            if producers.iter().any(|p: &Producer| p.addr() == addr) {
                continue;
            }
            let p = Producer::new(addr.as_str(), cfg.clone())
                .unwrap_or_else(|e| fatal(format!("failed to create nsq.Producer - {}", e.0)));
            producers.push(p);
        }
        if producers.is_empty() {
            fatal("--nsqd-tcp-address required");
        }
        let throttle = (rate >= 1).then(|| Throttle::start(rate));
        let publish_all = async {
            let mut input = BufReader::new(tokio::io::stdin());
            loop {
                if let Some(t) = &throttle {
                    t.before_send().await;
                }
                let more = read_and_publish(&mut input, delim, &topic, &producers).await;
                if let Some(t) = &throttle {
                    t.after_send();
                }
                match more {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(e) => fatal(&e),
                }
            }
        };
        tokio::select! {
            _ = publish_all => {}
            _ = shutdown.cancelled() => {}
        }
        for p in &producers {
            p.stop().await;
        }
    });
    // A stdin read may still be pending on a blocking thread (stopped by a
    // signal): do not wait for it.
    rt.shutdown_background();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn pieces_lose_their_last_byte() {
        // No producers: only the cutting is exercised.
        let mut input: &[u8] = b"a\nbb\n\nxyz";
        let mut seen = 0;
        while read_and_publish(&mut input, b'\n', "t", &[]).await.unwrap() {
            seen += 1;
        }
        assert_eq!(seen, 4);
    }
}

//! `nsq_ledger produce`: publishes to one (local) nsqd at a steady rate and
//! writes a `P` line before sending each message, then an `OK` line for
//! every message nsqd acknowledged and an `ERR` line for every one it did not. A failed attempt is never retried under the
//! same id — the next message gets a new one — so a duplicate in the
//! account is always nsqd's or the consumers', never the producer's.

use std::time::Duration;

use anyhow::Result;
use nsq_client::{Config, Producer};
use tokio_util::sync::CancellationToken;

use crate::ledger::{now_ns, Ledger};

pub struct ProduceOpts {
    pub nsqd: String,
    pub topic: String,
    pub id_prefix: String,
    /// Publish ticks per second.
    pub rate: f64,
    /// Every n-th tick is an MPUB of `mpub_size` messages (0: never).
    pub mpub_every: u64,
    pub mpub_size: usize,
    pub config: Config,
}

/// Pause after a failed publish, so a down nsqd is not dialled in a busy loop.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

pub async fn run(opts: ProduceOpts, ledger: Ledger, stop: CancellationToken) -> Result<()> {
    let producer = Producer::new(opts.nsqd.clone(), opts.config.clone())?;
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / opts.rate));
    // A stalled nsqd must not be answered with a burst when it comes back.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut seq: u64 = 0;
    let mut ticks: u64 = 0;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.cancelled() => break,
        }
        ticks += 1;
        let n = if opts.mpub_every > 0 && ticks.is_multiple_of(opts.mpub_every) {
            opts.mpub_size.max(1)
        } else {
            1
        };
        let sent = now_ns();
        let ids: Vec<String> = (0..n)
            .map(|_| {
                seq += 1;
                format!("{}.{seq}", opts.id_prefix)
            })
            .collect();
        let bodies: Vec<String> = ids.iter().map(|id| format!("{id} {sent}")).collect();
        for id in &ids {
            ledger.write(&format!("P {id} {sent}"))?;
        }
        let publish = async {
            if n == 1 {
                producer.publish(&opts.topic, &bodies[0]).await
            } else {
                producer.multi_publish(&opts.topic, &bodies).await
            }
        };
        let result = tokio::select! {
            r = publish => r,
            // An answer that never comes (nsqd stopped mid-request) is not
            // an OK; nothing is written for it.
            _ = stop.cancelled() => break,
        };
        match result {
            Ok(()) => {
                let ok = now_ns();
                for id in &ids {
                    ledger.write(&format!("OK {id} {sent} {ok}"))?;
                }
            }
            Err(e) => {
                let text = e.to_string().replace('\n', " ");
                for id in &ids {
                    ledger.write(&format!("ERR {id} {sent} {text}"))?;
                }
                tokio::select! {
                    _ = tokio::time::sleep(RETRY_PAUSE) => {}
                    _ = stop.cancelled() => break,
                }
            }
        }
    }
    producer.stop().await;
    tracing::info!(published = seq, "producer stopped");
    Ok(())
}

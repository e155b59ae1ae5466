//! `nsq_ledger consume`: one [`Consumer`] per channel of one topic, found
//! through nsqlookupd only. Every delivery the handler sees becomes an `R`
//! line (with the attempt count and the nsqd that sent it) before anything
//! else happens to it, and an `F` line once the handler is done and the FIN
//! is on its way. Handlers never fail: every message is finished.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use nsq_client::{Config, Consumer, Handler, HandlerResult, Message};
use rand::Rng;
use tokio_util::sync::CancellationToken;

use crate::ledger::{body_id, now_ns, Ledger};

pub struct ConsumeOpts {
    pub topic: String,
    pub channels: Vec<String>,
    pub lookupds: Vec<String>,
    /// Handler tasks per channel.
    pub handlers: usize,
    /// Each message is "worked on" for a random time below this.
    pub max_work: Duration,
    pub config: Config,
}

struct LedgerHandler {
    channel: String,
    ledger: Arc<Ledger>,
    max_work: Duration,
}

impl Handler for LedgerHandler {
    async fn handle_message(&self, m: Message) -> HandlerResult {
        let id = body_id(m.body());
        self.ledger.write(&format!(
            "R {} {id} {} {} {}",
            self.channel,
            now_ns(),
            m.attempts(),
            m.nsqd_address()
        ))?;
        if !self.max_work.is_zero() {
            let work = rand::thread_rng().gen_range(Duration::ZERO..self.max_work);
            tokio::time::sleep(work).await;
        }
        self.ledger
            .write(&format!("F {} {id} {}", self.channel, now_ns()))?;
        Ok(())
    }
}

pub async fn run(opts: ConsumeOpts, ledger: Ledger, stop: CancellationToken) -> Result<()> {
    let ledger = Arc::new(ledger);
    let mut consumers = Vec::new();
    for channel in &opts.channels {
        let c = Consumer::new(&opts.topic, channel, opts.config.clone())
            .with_context(|| format!("consumer for channel {channel}"))?;
        c.add_concurrent_handlers(
            LedgerHandler {
                channel: channel.clone(),
                ledger: ledger.clone(),
                max_work: opts.max_work,
            },
            opts.handlers.max(1),
        )?;
        c.connect_to_nsqd_lookupds(&opts.lookupds).await?;
        consumers.push(c);
    }
    stop.cancelled().await;
    for c in &consumers {
        c.stop().await;
        let s = c.stats();
        tracing::info!(
            channel = c.channel(),
            received = s.messages_received,
            finished = s.messages_finished,
            "consumer stopped"
        );
    }
    Ok(())
}

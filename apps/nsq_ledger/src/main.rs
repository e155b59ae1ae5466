//! `nsq_ledger`: the producer and the consumer of the cluster fault test
//! (`tests/tests/cluster_faults`). Both keep a ledger — one line per
//! acknowledged, received and finished message (see [`ledger`]) — from
//! which the test accounts for every message after the faults.
//!
//! ```text
//! nsq_ledger produce --nsqd-tcp-address=127.0.0.1:4150 --topic=t --id-prefix=n1.0 --ledger=p.log
//! nsq_ledger consume --lookupd-http-address=10.0.0.1:4161 --topic=t --channel=a --ledger=c.log
//! ```
//!
//! SIGINT or SIGTERM stops either cleanly (the consumer finishes what it
//! holds first).

#![forbid(unsafe_code)]

mod consume;
mod ledger;
mod produce;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use nsq_client::Config;

#[derive(Parser, Debug)]
#[command(
    name = "nsq_ledger",
    version,
    about = "Producer and consumer that log every message they publish, receive and finish"
)]
struct Cli {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand, Debug)]
enum Mode {
    /// publish at a steady rate to one nsqd; log OK / ERR per message
    Produce(ProduceArgs),
    /// consume channels of a topic found through nsqlookupd; log R / F per delivery
    Consume(ConsumeArgs),
}

#[derive(Args, Debug)]
struct ProduceArgs {
    /// nsqd TCP address to publish to
    #[arg(long = "nsqd-tcp-address", default_value = "127.0.0.1:4150")]
    nsqd_tcp_address: String,
    #[arg(long)]
    topic: String,
    /// message ids are <id-prefix>.<n>; must be unique per producer run
    #[arg(long = "id-prefix")]
    id_prefix: String,
    /// publish ticks per second
    #[arg(long, default_value_t = 20.0)]
    rate: f64,
    /// every n-th tick is an MPUB (0: never)
    #[arg(long = "mpub-every", default_value_t = 10)]
    mpub_every: u64,
    /// messages per MPUB
    #[arg(long = "mpub-size", default_value_t = 5)]
    mpub_size: usize,
    /// go-nsq option as key,value (repeatable)
    #[arg(long = "producer-opt")]
    producer_opt: Vec<String>,
    /// file the OK / ERR lines are appended to
    #[arg(long)]
    ledger: PathBuf,
}

#[derive(Args, Debug)]
struct ConsumeArgs {
    /// nsqlookupd HTTP address (repeatable)
    #[arg(long = "lookupd-http-address", required = true)]
    lookupd_http_address: Vec<String>,
    #[arg(long)]
    topic: String,
    /// channel to consume (repeatable; one consumer each)
    #[arg(long, required = true)]
    channel: Vec<String>,
    /// handler tasks per channel
    #[arg(long, default_value_t = 4)]
    handlers: usize,
    /// each message is held for a random time below this before FIN
    #[arg(long = "max-work", default_value = "5ms", value_parser = nsq_cli::duration_arg)]
    max_work: Duration,
    /// go-nsq option as key,value (repeatable), e.g. max_in_flight,50
    #[arg(long = "consumer-opt")]
    consumer_opt: Vec<String>,
    /// file the R / F lines are appended to
    #[arg(long)]
    ledger: PathBuf,
}

fn config(opts: &[String]) -> Result<Config> {
    let mut cfg = Config::default();
    for o in opts {
        cfg.set_opt(o).with_context(|| format!("option {o:?}"))?;
    }
    cfg.validate()?;
    Ok(cfg)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    let prefix = match &cli.mode {
        Mode::Produce(_) => "[nsq_ledger produce] ",
        Mode::Consume(_) => "[nsq_ledger consume] ",
    };
    // The level never changes at run time, so the setter is not kept.
    let _level = nsq_cli::init_logging("info", prefix).map_err(anyhow::Error::msg)?;
    let stop = nsq_cli::shutdown_on_signals();
    match cli.mode {
        Mode::Produce(a) => {
            anyhow::ensure!(a.rate > 0.0, "--rate must be positive");
            let ledger = ledger::Ledger::open(&a.ledger)
                .with_context(|| format!("open {}", a.ledger.display()))?;
            let opts = produce::ProduceOpts {
                nsqd: a.nsqd_tcp_address,
                topic: a.topic,
                id_prefix: a.id_prefix,
                rate: a.rate,
                mpub_every: a.mpub_every,
                mpub_size: a.mpub_size,
                config: config(&a.producer_opt)?,
            };
            produce::run(opts, ledger, stop).await
        }
        Mode::Consume(a) => {
            let ledger = ledger::Ledger::open(&a.ledger)
                .with_context(|| format!("open {}", a.ledger.display()))?;
            let opts = consume::ConsumeOpts {
                topic: a.topic,
                channels: a.channel,
                lookupds: a.lookupd_http_address,
                handlers: a.handlers,
                max_work: a.max_work,
                config: config(&a.consumer_opt)?,
            };
            consume::run(opts, ledger, stop).await
        }
    }
}

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

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use nsq_client::Config;

nsq_cli::flags! {
    /// `nsq_ledger produce` flags.
    struct ProduceFlags {
        /// nsqd TCP address to publish to
        nsqd_tcp_address: String = "127.0.0.1:4150";
        /// topic to publish to
        topic: String = "";
        /// message ids are <id-prefix>.<n>; must be unique per producer run
        id_prefix: String = "";
        /// publish ticks per second
        rate: f64 = 20.0;
        /// every n-th tick is an MPUB (0: never)
        mpub_every: u64 = 10;
        /// messages per MPUB
        mpub_size: usize = 5;
        /// producer setting as key,value (repeatable; go-nsq Config names)
        producer_opt: Vec<String> = "", check = Config::check_opt;
        /// file the P / OK / ERR lines are appended to
        ledger: String = "";
    }
}

nsq_cli::flags! {
    /// `nsq_ledger consume` flags.
    struct ConsumeFlags {
        /// nsqlookupd HTTP address (repeatable)
        lookupd_http_address: Vec<String> = "";
        /// topic to consume
        topic: String = "";
        /// channel to consume (repeatable; one consumer each)
        channel: Vec<String> = "";
        /// handler tasks per channel
        handlers: usize = 4;
        /// each message is held for a random time below this before FIN
        max_work: Duration = "5ms";
        /// consumer setting as key,value, e.g. max_in_flight,50 (repeatable; go-nsq Config names)
        consumer_opt: Vec<String> = "", check = Config::check_opt;
        /// file the R / F lines are appended to
        ledger: String = "";
    }
}

const USAGE: &str = "usage: nsq_ledger produce|consume [flags] (-h for the flags of each)";

fn config(opts: &[String]) -> Result<Config> {
    let mut cfg = Config::default();
    for o in opts {
        cfg.set_opt(o).with_context(|| format!("option {o:?}"))?;
    }
    cfg.validate()?;
    Ok(cfg)
}

fn open_ledger(path: &str) -> Result<ledger::Ledger> {
    anyhow::ensure!(!path.is_empty(), "--ledger required");
    ledger::Ledger::open(Path::new(path)).with_context(|| format!("open {path}"))
}

fn main() -> Result<()> {
    let argv = nsq_cli::flags::args();
    let mode = argv.get(1).map(String::as_str).unwrap_or_default();
    let rest = argv.get(2..).unwrap_or_default();
    // One thread is plenty for one producer or a few consumers, and keeps
    // each of the cluster test's many processes small.
    let rt = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("tokio runtime")
    };
    match mode {
        "produce" => {
            let a = nsq_cli::flags::parse::<ProduceFlags>("nsq_ledger produce", rest)
                .unwrap_or_else(|e| e.exit())
                .flags;
            // The level never changes at run time, so the setter is not kept.
            let _ = nsq_cli::log::init(
                nsq_cli::LogLevel::Info,
                "[nsq_ledger produce] ",
                nsq_cli::log::Form::Tracing,
            );
            anyhow::ensure!(a.rate > 0.0, "--rate must be positive");
            anyhow::ensure!(!a.topic.is_empty(), "--topic required");
            anyhow::ensure!(!a.id_prefix.is_empty(), "--id-prefix required");
            let ledger = open_ledger(&a.ledger)?;
            let opts = produce::ProduceOpts {
                nsqd: a.nsqd_tcp_address,
                topic: a.topic,
                id_prefix: a.id_prefix,
                rate: a.rate,
                mpub_every: a.mpub_every,
                mpub_size: a.mpub_size,
                config: config(&a.producer_opt)?,
            };
            rt()?.block_on(async move {
                produce::run(opts, ledger, nsq_cli::shutdown_on_signals()).await
            })
        }
        "consume" => {
            let a = nsq_cli::flags::parse::<ConsumeFlags>("nsq_ledger consume", rest)
                .unwrap_or_else(|e| e.exit())
                .flags;
            let _ = nsq_cli::log::init(
                nsq_cli::LogLevel::Info,
                "[nsq_ledger consume] ",
                nsq_cli::log::Form::Tracing,
            );
            anyhow::ensure!(!a.topic.is_empty(), "--topic required");
            anyhow::ensure!(!a.channel.is_empty(), "--channel required");
            anyhow::ensure!(
                !a.lookupd_http_address.is_empty(),
                "--lookupd-http-address required"
            );
            let ledger = open_ledger(&a.ledger)?;
            let opts = consume::ConsumeOpts {
                topic: a.topic,
                channels: a.channel,
                lookupds: a.lookupd_http_address,
                handlers: a.handlers,
                max_work: a.max_work,
                config: config(&a.consumer_opt)?,
            };
            rt()?.block_on(async move {
                consume::run(opts, ledger, nsq_cli::shutdown_on_signals()).await
            })
        }
        _ => {
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    }
}

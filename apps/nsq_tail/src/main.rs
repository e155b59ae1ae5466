//! `nsq_tail`: consumes one or more topics on one channel and prints every
//! message body (optionally prefixed with `<topic> | `) to stdout, one per
//! line; exits 0 after `--n` messages of a topic.

#![forbid(unsafe_code)]

use std::io::Write;
use std::sync::atomic::{AtomicI64, Ordering};

use nsq_cli::golog::{self, fatal};
use nsq_client::{Config, Consumer, Handler, HandlerResult, Message};

use nsq_cli::VERSION;

/// Prints the messages of one topic; counts them to stop at `--n`.
struct TailHandler {
    /// `Some("<topic> | ")` with `--print-topic`.
    prefix: Option<String>,
    total_messages: i64,
    messages_shown: AtomicI64,
}

impl Handler for TailHandler {
    async fn handle_message(&self, message: Message) -> HandlerResult {
        let shown = self.messages_shown.fetch_add(1, Ordering::SeqCst) + 1;
        let mut line = Vec::with_capacity(message.body().len() + 64);
        if let Some(p) = &self.prefix {
            line.extend_from_slice(p.as_bytes());
        }
        line.extend_from_slice(message.body());
        line.push(b'\n');
        let mut out = std::io::stdout().lock();
        if let Err(e) = out.write_all(&line).and_then(|_| out.flush()) {
            fatal(format!("ERROR: failed to write to os.Stdout - {e}"));
        }
        if self.total_messages > 0 && shown >= self.total_messages {
            // Like the Go tool: leave at once, this message unanswered.
            std::process::exit(0);
        }
        Ok(())
    }
}

nsq_cli::flags! {
    /// nsq_tail's flags (NSQ 1.3.0's names, types and defaults).
    struct Flags {
        /// print the version and exit
        version: bool = false;
        /// channel to read from; empty picks a random tail<N>#ephemeral channel
        channel: String = "";
        /// most messages held unacknowledged at once
        max_in_flight: i64 = 200;
        /// exit after printing this many messages of a topic; 0 means never
        n: i64 = 0;
        /// prefix each line with "<topic> | "
        print_topic: bool = false;
        /// nsqd TCP address to read from (repeatable)
        nsqd_tcp_address: Vec<String> = "";
        /// nsqlookupd HTTP address used to find nsqds (repeatable)
        lookupd_http_address: Vec<String> = "";
        /// topic to read (repeatable)
        topic: Vec<String> = "";
        /// consumer setting as key,value, e.g. max_attempts,10 (repeatable; go-nsq Config names)
        consumer_opt: Vec<String> = "", check = Config::check_opt;
        /// nsq-rs: secret for the HTTP API of nsqlookupd and nsqd started with --http-auth-required (sent as Authorization: Bearer)
        http_secret: String = "";
    }
}

fn main() {
    let f = nsq_cli::flags::parse_command_line::<Flags>().flags;
    let mut cfg = Config::default();
    for opt in &f.consumer_opt {
        let _ = cfg.set_opt(opt); // each was checked while parsing
    }
    if !f.http_secret.is_empty() {
        cfg.http_secret = Some(f.http_secret.clone());
    }
    let mut channel = f.channel;
    let mut max_in_flight = f.max_in_flight;
    let total_messages = f.n;
    let print_topic = f.print_topic;
    let nsqd_tcp_addrs = f.nsqd_tcp_address;
    let lookupd_http_addrs = f.lookupd_http_address;
    let topics = f.topic;

    if f.version {
        println!("{}", nsq_cli::app_version("nsq_tail"));
        return;
    }
    if channel.is_empty() {
        channel = format!("tail{:06}#ephemeral", rand::random::<u32>() % 999_999);
    }
    if nsqd_tcp_addrs.is_empty() && lookupd_http_addrs.is_empty() {
        fatal("--nsqd-tcp-address or --lookupd-http-address required");
    }
    if !nsqd_tcp_addrs.is_empty() && !lookupd_http_addrs.is_empty() {
        fatal("use --nsqd-tcp-address or --lookupd-http-address not both");
    }
    if topics.is_empty() {
        fatal("--topic required");
    }
    // Don't ask for more messages than we want.
    if total_messages > 0 && total_messages < max_in_flight {
        max_in_flight = total_messages;
    }
    cfg.user_agent = format!("nsq_tail/{VERSION} go-nsq/1.1.0");
    cfg.max_in_flight = max_in_flight;

    let rt = nsq_cli::app_runtime();
    rt.block_on(async move {
        let shutdown = nsq_cli::shutdown_on_signals();
        let mut consumers = Vec::new();
        for topic in &topics {
            golog::log(format!("Adding consumer for topic: {topic}"));
            let consumer = Consumer::new(topic, &channel, cfg.clone())
                .unwrap_or_else(|e| fatal(e.to_string()));
            let handler = TailHandler {
                prefix: print_topic.then(|| format!("{topic} | ")),
                total_messages,
                messages_shown: AtomicI64::new(0),
            };
            consumer
                .add_handler(handler)
                .unwrap_or_else(|e| fatal(e.to_string()));
            if let Err(e) = consumer.connect_to_nsqds(&nsqd_tcp_addrs).await {
                fatal(e.to_string());
            }
            if let Err(e) = consumer.connect_to_nsqd_lookupds(&lookupd_http_addrs).await {
                fatal(e.to_string());
            }
            consumers.push(consumer);
        }
        shutdown.cancelled().await;
        let stops: Vec<_> = consumers
            .into_iter()
            .map(|c| tokio::spawn(async move { c.stop().await }))
            .collect();
        for s in stops {
            let _ = s.await;
        }
    });
}

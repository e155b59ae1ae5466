//! `nsq_tail`: consumes one or more topics on one channel and prints every
//! message body (optionally prefixed with `<topic> | `) to stdout, one per
//! line; exits 0 after `--n` messages of a topic.

#![forbid(unsafe_code)]

mod go_app;

use std::io::Write;
use std::sync::atomic::{AtomicI64, Ordering};

use go_app::{fatal, FlagSet};
use nsq_client::{Config, Consumer, Handler, HandlerResult, Message};

const VERSION: &str = "1.3.0";

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
            fatal(&format!("ERROR: failed to write to os.Stdout - {e}"));
        }
        if self.total_messages > 0 && shown >= self.total_messages {
            // Like the Go tool: leave at once, this message unanswered.
            std::process::exit(0);
        }
        Ok(())
    }
}

fn main() {
    let args = go_app::args();
    let mut cfg = Config::default();
    let mut show_version = false;
    let mut channel = String::new();
    let mut max_in_flight: i64 = 200;
    let mut total_messages: i64 = 0;
    let mut print_topic = false;
    let mut nsqd_tcp_addrs = Vec::new();
    let mut lookupd_http_addrs = Vec::new();
    let mut topics = Vec::new();
    {
        let mut fs = FlagSet::new(&args[0]);
        fs.bool(&mut show_version, "version", "print the version and exit");
        fs.string(&mut channel, "channel", "channel to read from; empty picks a random tail<N>#ephemeral channel");
        fs.int(&mut max_in_flight, "max-in-flight", "most messages held unacknowledged at once");
        fs.int(&mut total_messages, "n", "exit after printing this many messages of a topic; 0 means never");
        fs.bool(&mut print_topic, "print-topic", "prefix each line with \"<topic> | \"");
        fs.strings(&mut nsqd_tcp_addrs, "nsqd-tcp-address", "nsqd TCP address to read from (repeatable)");
        fs.strings(&mut lookupd_http_addrs, "lookupd-http-address", "nsqlookupd HTTP address used to find nsqds (repeatable)");
        fs.strings(&mut topics, "topic", "topic to read (repeatable)");
        fs.var("consumer-opt", "consumer setting as key,value, e.g. max_attempts,10 (repeatable; go-nsq Config names)", |v| {
            cfg.set_opt(v).map_err(|e| e.0)
        });
        fs.parse(&args[1..]);
    }

    if show_version {
        println!("nsq_tail v{VERSION}");
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

    if let Err(e) = nsq_cli::init_logging("info", "") {
        fatal(&e);
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap_or_else(|e| fatal(&e.to_string()));
    rt.block_on(async move {
        let shutdown = nsq_cli::shutdown_on_signals();
        let mut consumers = Vec::new();
        for topic in &topics {
            go_app::log(&format!("Adding consumer for topic: {topic}"));
            let consumer = Consumer::new(topic, &channel, cfg.clone()).unwrap_or_else(|e| fatal(&e.to_string()));
            let handler =
                TailHandler { prefix: print_topic.then(|| format!("{topic} | ")), total_messages, messages_shown: AtomicI64::new(0) };
            consumer.add_handler(handler).unwrap_or_else(|e| fatal(&e.to_string()));
            if let Err(e) = consumer.connect_to_nsqds(&nsqd_tcp_addrs).await {
                fatal(&e.to_string());
            }
            if let Err(e) = consumer.connect_to_nsqd_lookupds(&lookupd_http_addrs).await {
                fatal(&e.to_string());
            }
            consumers.push(consumer);
        }
        shutdown.cancelled().await;
        let stops: Vec<_> = consumers.into_iter().map(|c| tokio::spawn(async move { c.stop().await })).collect();
        for s in stops {
            let _ = s.await;
        }
    });
}

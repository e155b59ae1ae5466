//! `nsq_tail`: consumes one or more topics on one channel and prints every
//! message body (optionally prefixed with `<topic> | `) to stdout, one per
//! line; exits 0 after `--n` messages of a topic.

#![forbid(unsafe_code)]

use std::io::Write;
use std::sync::atomic::{AtomicI64, Ordering};

use nsq_cli::goflag::{Flag, FlagSet, Kind};
use nsq_cli::golog::{self, fatal};
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
            fatal(format!("ERROR: failed to write to os.Stdout - {e}"));
        }
        if self.total_messages > 0 && shown >= self.total_messages {
            // Like the Go tool: leave at once, this message unanswered.
            std::process::exit(0);
        }
        Ok(())
    }
}

fn flag_set(program: &str) -> FlagSet {
    use Kind::*;
    FlagSet {
        name: program.to_string(),
        flags: vec![
            Flag::new("version", Bool, "false", "print the version and exit"),
            Flag::new("channel", Str, "", "channel to read from; empty picks a random tail<N>#ephemeral channel"),
            Flag::new("max-in-flight", Int, "200", "most messages held unacknowledged at once"),
            Flag::new("n", Int, "0", "exit after printing this many messages of a topic; 0 means never"),
            Flag::new("print-topic", Bool, "false", "prefix each line with \"<topic> | \""),
            Flag::new("nsqd-tcp-address", List, "", "nsqd TCP address to read from (repeatable)"),
            Flag::new("lookupd-http-address", List, "", "nsqlookupd HTTP address used to find nsqds (repeatable)"),
            Flag::new("topic", List, "", "topic to read (repeatable)"),
            Flag::new("consumer-opt", List, "", "consumer setting as key,value, e.g. max_attempts,10 (repeatable; go-nsq Config names)")
                .checked(Config::check_opt),
        ],
    }
}

fn main() {
    let args = nsq_cli::goflag::args();
    let p = flag_set(&args[0]).parse_or_exit(&args[1..]);
    let mut cfg = Config::default();
    for opt in p.list("consumer-opt") {
        let _ = cfg.set_opt(&opt); // each was checked while parsing
    }
    let show_version = p.bool("version");
    let mut channel = p.string("channel");
    let mut max_in_flight = p.int("max-in-flight");
    let total_messages = p.int("n");
    let print_topic = p.bool("print-topic");
    let nsqd_tcp_addrs = p.list("nsqd-tcp-address");
    let lookupd_http_addrs = p.list("lookupd-http-address");
    let topics = p.list("topic");

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
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| fatal(e.to_string()));
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

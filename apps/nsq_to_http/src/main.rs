//! `nsq_to_http`: consumes a topic and makes an HTTP request (GET with the
//! body in the URL, or POST with it as the body) per message, to one or
//! many endpoints. This file turns NSQ's flags into a consumer with a
//! [`publish::PublishHandler`]; the request rules are in [`http`], the
//! endpoint choice in [`hostpool`].

#![deny(unsafe_code)]
#![deny(rust_2018_idioms, unused_must_use)]

mod hostpool;
mod http;
mod publish;
mod timer_metrics;

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use nsq_cli::goflag::{Flag, FlagSet, Kind};
use nsq_cli::golog::fatal as go_log_fatal;
use nsq_client::{Consumer, ConsumerError};
use parking_lot::Mutex;

use crate::hostpool::HostPool;
use crate::publish::{Mode, PublishHandler, Verb};
use crate::timer_metrics::TimerMetrics;

const VERSION: &str = "1.3.0";
const DEFAULT_CONTENT_TYPE: &str = "application/octet-stream";

fn flag_set(program: &str) -> FlagSet {
    use Kind::*;
    let mut consumer_opt = Flag::new(
        "consumer-opt",
        List,
        "",
        "consumer option as key,value, e.g. max_attempts,10 (may be given multiple times)",
    );
    consumer_opt.check = Some(nsq_client::Config::check_opt);
    FlagSet {
        name: program.to_string(),
        flags: vec![
            Flag::new("version", Bool, "false", "print the version and exit"),
            Flag::new("topic", Str, "", "topic to consume"),
            Flag::new("channel", Str, "nsq_to_http", "channel to consume"),
            Flag::new("max-in-flight", Int, "200", "most messages held unacknowledged"),
            Flag::new("n", Int, "100", "number of requests made concurrently"),
            Flag::new("mode", Str, "hostpool", "how endpoints are chosen: round-robin, hostpool or epsilon-greedy"),
            Flag::new("sample", Float, "1", "fraction of messages to send, 0 to 1 (the rest are acknowledged unsent)"),
            Flag::new("http-client-connect-timeout", Duration, "2s", "HTTP connect timeout"),
            Flag::new("http-client-request-timeout", Duration, "20s", "HTTP request timeout"),
            Flag::new("status-every", Int, "250", "log timing statistics every this many requests (0 disables)"),
            Flag::new("content-type", Str, DEFAULT_CONTENT_TYPE, "Content-Type of POST requests"),
            Flag::new("post", List, "", "URL to POST each message body to (may be given multiple times)"),
            Flag::new("header", List, "", "extra request header as 'Key: Value' (may be given multiple times)"),
            Flag::new("get", List, "", "URL to GET, with %s replaced by the query-escaped message body (may be given multiple times)"),
            Flag::new("nsqd-tcp-address", List, "", "nsqd TCP address (may be given multiple times)"),
            Flag::new("lookupd-http-address", List, "", "nsqlookupd HTTP address (may be given multiple times)"),
            consumer_opt,
        ],
    }
}

/// NSQ's `parseCustomHeaders`: `Key: Value`, split at the first colon,
/// both sides trimmed and non-empty.
fn parse_custom_headers(raw: &[String]) -> Result<Vec<(String, String)>, String> {
    raw.iter()
        .map(|s| {
            let (k, v) = s
                .split_once(':')
                .ok_or_else(|| format!("invalid header: {s:?}"))?;
            let (k, v) = (k.trim(), v.trim());
            if k.is_empty() || v.is_empty() {
                return Err(format!("invalid header: {s:?}"));
            }
            Ok((k.to_string(), v.to_string()))
        })
        .collect()
}

/// go-nsq's wording for the errors `log.Fatal` shows at start-up.
fn consumer_error_text(e: &ConsumerError) -> String {
    match e {
        ConsumerError::InvalidTopic(_) => "invalid topic name".into(),
        ConsumerError::InvalidChannel(_) => "invalid channel name".into(),
        ConsumerError::NoHandler => "no handlers".into(),
        e => e.to_string(),
    }
}

fn main() {
    let mut argv = std::env::args();
    let program = argv.next().unwrap_or_else(|| "nsq_to_http".into());
    let args: Vec<String> = argv.collect();
    let p = flag_set(&program).parse(&args).unwrap_or_else(|e| e.exit());
    if p.bool("version") {
        println!("nsq_to_http v{VERSION}");
        return;
    }

    let raw_headers = p.list("header");
    let headers = parse_custom_headers(&raw_headers)
        .unwrap_or_else(|_| go_log_fatal("--header value format should be 'key=value'"));
    let topic = p.string("topic");
    let channel = p.string("channel");
    if topic.is_empty() || channel.is_empty() {
        go_log_fatal("--topic and --channel are required");
    }
    let post_addrs = p.list("post");
    let get_addrs = p.list("get");
    let content_type = p.string("content-type");
    if content_type != DEFAULT_CONTENT_TYPE {
        if post_addrs.is_empty() {
            go_log_fatal("--content-type only used with --post");
        }
        if content_type.is_empty() {
            go_log_fatal("--content-type requires a value when used");
        }
    }
    let nsqd_tcp_addrs = p.list("nsqd-tcp-address");
    let lookupd_http_addrs = p.list("lookupd-http-address");
    if nsqd_tcp_addrs.is_empty() && lookupd_http_addrs.is_empty() {
        go_log_fatal("--nsqd-tcp-address or --lookupd-http-address required");
    }
    if !nsqd_tcp_addrs.is_empty() && !lookupd_http_addrs.is_empty() {
        go_log_fatal("use --nsqd-tcp-address or --lookupd-http-address not both");
    }
    if get_addrs.is_empty() && post_addrs.is_empty() {
        go_log_fatal("--get or --post required");
    }
    if !get_addrs.is_empty() && !post_addrs.is_empty() {
        go_log_fatal("use --get or --post not both");
    }
    if get_addrs.iter().any(|g| g.matches("%s").count() != 1) {
        go_log_fatal("invalid GET address - must be a printf string");
    }
    let mode_flag = p.string("mode");
    let mode = Mode::from_flag(&mode_flag);
    let sample = p.float("sample");
    // Written as NSQ does, so NaN passes as it does there.
    #[allow(clippy::manual_range_contains)]
    if sample > 1.0 || sample < 0.0 {
        go_log_fatal("ERROR: --sample must be between 0.0 and 1.0");
    }

    let (verb, addresses) = if post_addrs.is_empty() {
        (Verb::Get, get_addrs)
    } else {
        (Verb::Post, post_addrs)
    };
    let mut cfg = nsq_client::Config::default();
    for opt in p.list("consumer-opt") {
        let _ = cfg.set_opt(&opt); // each was checked while parsing
    }
    cfg.user_agent = format!("nsq_to_http/{VERSION} go-nsq/1.1.0");
    cfg.max_in_flight = p.int("max-in-flight");
    // Durations given as zero or negative behave as "no timeout" in Go's
    // transport; a very long timeout is the nearest equivalent.
    let forever = std::time::Duration::from_secs(100 * 365 * 24 * 3600);
    let connect_timeout = p
        .positive_duration("http-client-connect-timeout")
        .unwrap_or(forever);
    let request_timeout = p
        .positive_duration("http-client-request-timeout")
        .unwrap_or(forever);
    let status_every = p.int("status-every");
    let concurrency = usize::try_from(p.int("n")).unwrap_or(0);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| go_log_fatal(e));
    rt.block_on(async move {
        let _ = nsq_cli::init_logging("info", "");
        let term = nsq_cli::shutdown_on_signals();
        let consumer = Consumer::new(&topic, &channel, cfg)
            .unwrap_or_else(|e| go_log_fatal(consumer_error_text(&e)));

        let mut per_address = HashMap::new();
        if addresses.len() == 1 {
            per_address.insert(addresses[0].clone(), TimerMetrics::new(0, ""));
        } else {
            for a in &addresses {
                per_address.insert(
                    a.clone(),
                    TimerMetrics::new(status_every, &format!("[{a}]:")),
                );
            }
        }
        let pool = if mode_flag == "epsilon-greedy" {
            HostPool::epsilon_greedy(&addresses)
        } else {
            HostPool::standard(&addresses)
        };
        let pool = Arc::new(Mutex::new(pool));
        if pool.lock().is_epsilon_greedy() {
            let pool = pool.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval_at(
                    tokio::time::Instant::now() + hostpool::DECAY_TICK,
                    hostpool::DECAY_TICK,
                );
                loop {
                    tick.tick().await;
                    pool.lock().decay();
                }
            });
        }
        let handler = PublishHandler {
            client: http::HttpClient::new(connect_timeout, request_timeout, content_type, headers),
            verb,
            addresses,
            mode,
            counter: AtomicU64::new(0),
            pool,
            per_address,
            aggregate: TimerMetrics::new(status_every, "[aggregate]:"),
            sample,
        };
        if let Err(e) = consumer.add_concurrent_handlers(handler, concurrency) {
            go_log_fatal(consumer_error_text(&e));
        }
        if let Err(e) = consumer.connect_to_nsqds(&nsqd_tcp_addrs).await {
            go_log_fatal(consumer_error_text(&e));
        }
        if let Err(e) = consumer.connect_to_nsqd_lookupds(&lookupd_http_addrs).await {
            go_log_fatal(consumer_error_text(&e));
        }
        term.cancelled().await;
        consumer.stop().await;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn custom_headers() {
        let h = parse_custom_headers(&["X-A: 1".into(), " b :c:d ".into()]).unwrap();
        assert_eq!(
            h,
            vec![
                ("X-A".to_string(), "1".to_string()),
                ("b".to_string(), "c:d".to_string())
            ]
        );
        assert!(parse_custom_headers(&["nocolon".into()]).is_err());
        assert!(parse_custom_headers(&["k: ".into()]).is_err());
        assert!(parse_custom_headers(&[": v".into()]).is_err());
    }

    #[test]
    fn modes() {
        assert_eq!(Mode::from_flag("round-robin"), Mode::RoundRobin);
        assert_eq!(Mode::from_flag("epsilon-greedy"), Mode::HostPool);
        assert_eq!(Mode::from_flag("fanout"), Mode::All);
    }
}

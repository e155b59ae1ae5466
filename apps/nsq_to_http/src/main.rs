//! `nsq_to_http`: consumes a topic and makes an HTTP request (GET with the
//! body in the URL, or POST with it as the body) per message, to one or
//! many endpoints. This file turns NSQ's flags into a consumer with a
//! [`publish::PublishHandler`]; the request rules are in [`http`], the
//! endpoint choice in [`hostpool`].

#![forbid(unsafe_code)]
#![deny(rust_2018_idioms, unused_must_use)]

mod http;
mod publish;

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;

use nsq_cli::golog::fatal as go_log_fatal;
use nsq_client::{Consumer, ConsumerError};

use crate::publish::{Mode, PublishHandler, Verb};
use nsq_cli::timer_metrics::TimerMetrics;

use nsq_cli::VERSION;
const DEFAULT_CONTENT_TYPE: &str = "application/octet-stream";

nsq_cli::flags! {
    /// nsq_to_http's flags (NSQ 1.3.0's names, types and defaults).
    struct Flags {
        /// consumer option as key,value, e.g. max_attempts,10 (may be given multiple times)
        consumer_opt: Vec<String> = "", check = nsq_client::Config::check_opt;
        /// print the version and exit
        version: bool = "false";
        /// topic to consume
        topic: String = "";
        /// channel to consume
        channel: String = "nsq_to_http";
        /// most messages held unacknowledged
        max_in_flight: i64 = "200";
        /// number of requests made concurrently
        n: i64 = "100";
        /// how endpoints are chosen: round-robin, hostpool or epsilon-greedy
        mode: String = "hostpool";
        /// fraction of messages to send, 0 to 1 (the rest are acknowledged unsent)
        sample: f64 = "1";
        /// HTTP connect timeout
        http_client_connect_timeout: std::time::Duration = "2s";
        /// HTTP request timeout
        http_client_request_timeout: std::time::Duration = "20s";
        /// log timing statistics every this many requests (0 disables)
        status_every: i64 = "250";
        /// Content-Type of POST requests
        content_type: String = DEFAULT_CONTENT_TYPE;
        /// URL to POST each message body to (may be given multiple times)
        post: Vec<String> = "";
        /// extra request header as 'Key: Value' (may be given multiple times)
        header: Vec<String> = "";
        /// URL to GET, with %s replaced by the query-escaped message body (may be given multiple times)
        get: Vec<String> = "";
        /// nsqd TCP address (may be given multiple times)
        nsqd_tcp_address: Vec<String> = "";
        /// nsqlookupd HTTP address (may be given multiple times)
        lookupd_http_address: Vec<String> = "";
        /// nsq-rs: secret for the HTTP API of nsqlookupd started with --http-auth-required (sent as Authorization: Bearer; not to the destinations: use --header)
        http_secret: String = "";
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
    let parsed = nsq_cli::flags::parse_command_line::<Flags>();
    let p = &parsed.flags;
    if p.version {
        println!("{}", nsq_cli::app_version("nsq_to_http"));
        return;
    }

    let raw_headers = p.header.clone();
    let headers = parse_custom_headers(&raw_headers)
        .unwrap_or_else(|_| go_log_fatal("--header value format should be 'key=value'"));
    let topic = p.topic.clone();
    let channel = p.channel.clone();
    if topic.is_empty() || channel.is_empty() {
        go_log_fatal("--topic and --channel are required");
    }
    let post_addrs = p.post.clone();
    let get_addrs = p.get.clone();
    let content_type = p.content_type.clone();
    if content_type != DEFAULT_CONTENT_TYPE {
        if post_addrs.is_empty() {
            go_log_fatal("--content-type only used with --post");
        }
        if content_type.is_empty() {
            go_log_fatal("--content-type requires a value when used");
        }
    }
    let nsqd_tcp_addrs = p.nsqd_tcp_address.clone();
    let lookupd_http_addrs = p.lookupd_http_address.clone();
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
    let mode_flag = p.mode.clone();
    let mode = Mode::from_flag(&mode_flag);
    let sample = p.sample;
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
    for opt in p.consumer_opt.clone() {
        let _ = cfg.set_opt(&opt); // each was checked while parsing
    }
    cfg.user_agent = format!("nsq_to_http/{VERSION} go-nsq/1.1.0");
    if !p.http_secret.is_empty() {
        cfg.http_secret = Some(p.http_secret.clone());
    }
    cfg.max_in_flight = p.max_in_flight;
    // Durations given as zero or negative behave as "no timeout" in Go's
    // transport; a very long timeout is the nearest equivalent.
    let forever = std::time::Duration::from_secs(100 * 365 * 24 * 3600);
    let connect_timeout =
        nsq_cli::flags::positive(p.http_client_connect_timeout).unwrap_or(forever);
    let request_timeout =
        nsq_cli::flags::positive(p.http_client_request_timeout).unwrap_or(forever);
    let status_every = p.status_every;
    let concurrency = usize::try_from(p.n).unwrap_or(0);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| go_log_fatal(e));
    rt.block_on(async move {
        let _ = nsq_cli::log::init(nsq_cli::LogLevel::Info, "", nsq_cli::log::Form::Tracing);
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
        let pool = nsq_cli::hostpool::start(&addresses, mode_flag == "epsilon-greedy");
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

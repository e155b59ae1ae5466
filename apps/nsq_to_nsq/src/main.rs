//! `nsq_to_nsq`: consumes topics from one set of nsqds and republishes each
//! message to a destination nsqd (round-robin or host pool), FINing it once
//! the destination said OK and REQueueing it (with backoff) otherwise.
//! Optional JSON filters drop or trim messages on the way.

#![forbid(unsafe_code)]

mod json_filter;
mod route;

use std::sync::Arc;
use std::time::Instant;

use json_filter::{JsonFilter, Verdict};
use nsq_cli::golog::fatal;
use nsq_cli::timer_metrics::TimerMetrics;
use nsq_client::{Config, Consumer, Handler, HandlerResult, Message, Producer};
use nsq_protocol::names::{is_valid_channel_name, is_valid_topic_name};
use route::Router;

use nsq_cli::VERSION;

/// What every topic's handler shares: the destinations and their bookkeeping.
struct Publisher {
    producers: Vec<Producer>,
    router: Router,
    filter: JsonFilter,
    /// Per destination, in `--destination-nsqd-tcp-address` order.
    per_address: Vec<TimerMetrics>,
    aggregate: TimerMetrics,
}

/// One source topic's handler: publishes to `destination_topic`.
struct TopicHandler {
    publisher: Arc<Publisher>,
    destination_topic: String,
}

impl Handler for TopicHandler {
    async fn handle_message(&self, message: Message) -> HandlerResult {
        let p = &self.publisher;
        let body = match p.filter.apply(message.body()) {
            Verdict::Pass(body) => body,
            Verdict::Drop => return Ok(()),
            Verdict::Backoff => return Err("backoff".into()),
        };
        let start = Instant::now();
        let dest = p.router.pick();
        // Publish in the background, as the Go tool's PublishAsync does, so
        // the handler can take the next message; answer when nsqd answers.
        message.disable_auto_response();
        let (publisher, topic) = (self.publisher.clone(), self.destination_topic.clone());
        tokio::spawn(async move {
            let result = publisher.producers[dest].publish(&topic, &body).await;
            publisher.router.mark(dest, result.is_ok(), start.elapsed());
            match result {
                Ok(()) => message.finish(),
                Err(e) => {
                    tracing::error!(nsqd = %publisher.producers[dest].addr(), error = %e, "publish failed, requeueing");
                    message.requeue(None);
                }
            }
            let took = start.elapsed();
            publisher.per_address[dest].status(took);
            publisher.aggregate.status(took);
        });
        Ok(())
    }
}

nsq_cli::flags! {
    /// nsq_to_nsq's flags (NSQ 1.3.0's names, types and defaults).
    struct Flags {
        /// print the version and exit
        version: bool = "false";
        /// channel to consume the source topics on
        channel: String = "nsq_to_nsq";
        /// publish everything to this topic (empty: the topic each message came from)
        destination_topic: String = "";
        /// most messages held unacknowledged at once
        max_in_flight: i64 = "200";
        /// log publish timings every this many messages (per destination); 0 turns it off
        status_every: i64 = "250";
        /// how to pick a destination: round-robin, hostpool or epsilon-greedy
        mode: String = "hostpool";
        /// source nsqd TCP address (repeatable)
        nsqd_tcp_address: Vec<String> = "";
        /// destination nsqd TCP address (repeatable)
        destination_nsqd_tcp_address: Vec<String> = "";
        /// nsqlookupd HTTP address used to find source nsqds (repeatable)
        lookupd_http_address: Vec<String> = "";
        /// source topic (repeatable)
        topic: Vec<String> = "";
        /// JSON messages: keep only this top-level field (repeatable)
        whitelist_json_field: Vec<String> = "";
        /// JSON messages: pass only those with this top-level field
        require_json_field: String = "";
        /// JSON messages: pass only those whose required field equals this value
        require_json_value: String = "";
        /// consumer setting as key,value, e.g. max_attempts,10 (repeatable; go-nsq Config names)
        consumer_opt: Vec<String> = "", check = Config::check_opt;
        /// producer setting as key,value, e.g. write_timeout,5s (repeatable; go-nsq Config names)
        producer_opt: Vec<String> = "", check = Config::check_opt;
        /// nsq-rs: secret for the HTTP API of nsqlookupd and nsqd started with --http-auth-required (sent as Authorization: Bearer)
        http_secret: String = "";
    }
}

fn main() {
    let parsed = nsq_cli::flags::parse_command_line::<Flags>();
    let p = &parsed.flags;
    let (mut c_cfg, mut p_cfg) = (Config::default(), Config::default());
    for opt in p.consumer_opt.clone() {
        let _ = c_cfg.set_opt(&opt); // each was checked while parsing
    }
    for opt in p.producer_opt.clone() {
        let _ = p_cfg.set_opt(&opt);
    }
    if !p.http_secret.is_empty() {
        c_cfg.http_secret = Some(p.http_secret.clone());
    }
    let show_version = p.version;
    let channel = p.channel.clone();
    let dest_topic = p.destination_topic.clone();
    let max_in_flight = p.max_in_flight;
    let status_every = p.status_every;
    let mode = p.mode.clone();
    let nsqd_tcp_addrs = p.nsqd_tcp_address.clone();
    let lookupd_http_addrs = p.lookupd_http_address.clone();
    let dest_nsqd_tcp_addrs = p.destination_nsqd_tcp_address.clone();
    let whitelist_json_fields = p.whitelist_json_field.clone();
    let topics = p.topic.clone();
    let require_json_field = p.require_json_field.clone();
    let require_json_value = p.require_json_value.clone();

    if show_version {
        println!("{}", nsq_cli::app_version("nsq_to_nsq"));
        return;
    }
    if topics.is_empty() || channel.is_empty() {
        fatal("--topic and --channel are required");
    }
    if !topics.iter().all(|t| is_valid_topic_name(t)) {
        fatal("--topic is invalid");
    }
    if !dest_topic.is_empty() && !is_valid_topic_name(&dest_topic) {
        fatal("--destination-topic is invalid");
    }
    if !is_valid_channel_name(&channel) {
        fatal("--channel is invalid");
    }
    if nsqd_tcp_addrs.is_empty() && lookupd_http_addrs.is_empty() {
        fatal("--nsqd-tcp-address or --lookupd-http-address required");
    }
    if !nsqd_tcp_addrs.is_empty() && !lookupd_http_addrs.is_empty() {
        fatal("use --nsqd-tcp-address or --lookupd-http-address not both");
    }
    if dest_nsqd_tcp_addrs.is_empty() {
        fatal("--destination-nsqd-tcp-address required");
    }

    let user_agent = format!("nsq_to_nsq/{VERSION} go-nsq/1.1.0");
    c_cfg.user_agent = user_agent.clone();
    c_cfg.max_in_flight = max_in_flight;
    p_cfg.user_agent = user_agent;

    let rt = nsq_cli::app_runtime();
    rt.block_on(async move {
        let shutdown = nsq_cli::shutdown_on_signals();
        let producers: Vec<Producer> = dest_nsqd_tcp_addrs
            .iter()
            .map(|a| {
                Producer::new(a.as_str(), p_cfg.clone())
                    .unwrap_or_else(|e| fatal(format!("failed creating producer {}", e.0)))
            })
            .collect();
        let per_address = if dest_nsqd_tcp_addrs.len() == 1 {
            // One destination: its numbers are the aggregate's.
            vec![TimerMetrics::new(0, "")]
        } else {
            dest_nsqd_tcp_addrs
                .iter()
                .map(|a| TimerMetrics::new(status_every, &format!("[{a}]:")))
                .collect()
        };
        let publisher = Arc::new(Publisher {
            producers,
            router: match mode.as_str() {
                "hostpool" | "epsilon-greedy" => {
                    Router::host_pool(&dest_nsqd_tcp_addrs, mode == "epsilon-greedy")
                }
                // Any other --mode value selects round-robin, as in the original.
                _ => Router::round_robin(dest_nsqd_tcp_addrs.len()),
            },
            filter: JsonFilter::new(
                &require_json_field,
                &require_json_value,
                whitelist_json_fields,
            ),
            per_address,
            aggregate: TimerMetrics::new(status_every, "[aggregate]:"),
        });

        let mut consumers = Vec::new();
        for topic in &topics {
            let consumer = Consumer::new(topic, &channel, c_cfg.clone())
                .unwrap_or_else(|e| fatal(e.to_string()));
            let destination_topic = if dest_topic.is_empty() {
                topic.clone()
            } else {
                dest_topic.clone()
            };
            let handler = TopicHandler {
                publisher: publisher.clone(),
                destination_topic,
            };
            consumer
                .add_concurrent_handlers(handler, dest_nsqd_tcp_addrs.len())
                .unwrap_or_else(|e| fatal(e.to_string()));
            consumers.push(consumer);
        }
        for c in &consumers {
            if let Err(e) = c.connect_to_nsqds(&nsqd_tcp_addrs).await {
                fatal(e.to_string());
            }
        }
        for c in &consumers {
            if let Err(e) = c.connect_to_nsqd_lookupds(&lookupd_http_addrs).await {
                fatal(e.to_string());
            }
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

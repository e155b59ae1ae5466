//! `nsqd`: flags and config file → `nsqd::Options`, logging, signals, run.

use std::time::Duration;

use clap::{ArgAction, CommandFactory, FromArgMatches, Parser};
use nsq_cli::{bool_arg, duration_arg};

const PREFIX: &str = "[nsqd] ";

/// nsqd's flags, with nsqd's names and defaults. Flags marked "(accepted; ...)"
/// in --help parse and show in /config but change nothing.
#[derive(Parser, Debug)]
#[command(
    name = "nsqd",
    disable_version_flag = true,
    about = "nsqd receives, queues and delivers messages (nsq-rs)"
)]
struct Cli {
    #[arg(long, help = "print version string")]
    version: bool,
    #[arg(long, default_value = "", help = "path to config file (TOML)")]
    config: String,
    #[arg(
        long,
        default_value = "info",
        help = "set log level: debug, info, warn, error, or fatal"
    )]
    log_level: String,
    #[arg(long, default_value = "[nsqd] ", help = "log message prefix")]
    log_prefix: String,
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = bool_arg, default_value = "false", help = "[deprecated] has no effect, use --log-level")]
    verbose: bool,
    #[arg(
        long,
        help = "unique part for message IDs, (int) in range [0,1024) (default is hash of hostname)"
    )]
    node_id: Option<i64>,
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = bool_arg, default_value = "false", help = "[deprecated] use --node-id")]
    worker_id: bool,
    #[arg(
        long,
        default_value = "0.0.0.0:4150",
        help = "<addr>:<port> to listen on for TCP clients"
    )]
    tcp_address: String,
    #[arg(
        long,
        default_value = "0.0.0.0:4151",
        help = "<addr>:<port> to listen on for HTTP clients (empty disables)"
    )]
    http_address: String,
    #[arg(
        long,
        default_value = "0.0.0.0:4152",
        help = "<addr>:<port> to listen on for HTTPS clients"
    )]
    https_address: String,
    #[arg(
        long,
        help = "address that will be registered with lookupd (defaults to the OS hostname)"
    )]
    broadcast_address: Option<String>,
    #[arg(
        long,
        default_value_t = 0,
        help = "TCP port that will be registered with lookupd (defaults to the TCP port that this nsqd is listening on)"
    )]
    broadcast_tcp_port: u16,
    #[arg(
        long,
        default_value_t = 0,
        help = "HTTP port that will be registered with lookupd (defaults to the HTTP port that this nsqd is listening on)"
    )]
    broadcast_http_port: u16,
    #[arg(long = "lookupd-tcp-address", action = ArgAction::Append, help = "lookupd TCP address (may be given multiple times)")]
    lookupd_tcp_address: Vec<String>,
    #[arg(long = "auth-http-address", action = ArgAction::Append, help = "<addr>:<port> or a full url to query auth server (may be given multiple times)")]
    auth_http_address: Vec<String>,
    #[arg(
        long,
        default_value = "get",
        help = "HTTP method to use for auth server requests"
    )]
    auth_http_request_method: String,
    #[arg(long, default_value = "2s", value_parser = duration_arg, value_name = "DURATION", help = "timeout for HTTP connect")]
    http_client_connect_timeout: Duration,
    #[arg(long, default_value = "5s", value_parser = duration_arg, value_name = "DURATION", help = "timeout for HTTP request")]
    http_client_request_timeout: Duration,
    #[arg(
        long,
        default_value = "",
        help = "region of this nsqd (topology-aware consumption experiment)"
    )]
    topology_region: String,
    #[arg(
        long,
        default_value = "",
        help = "zone of this nsqd (topology-aware consumption experiment)"
    )]
    topology_zone: String,
    #[arg(
        long,
        default_value = "",
        help = "path to store disk-backed messages (default: current directory)"
    )]
    data_path: String,
    #[arg(
        long,
        default_value_t = 10000,
        help = "number of messages to keep in memory (per topic/channel)"
    )]
    mem_queue_size: i64,
    #[arg(
        long,
        default_value_t = 104857600,
        help = "number of bytes per diskqueue file before rolling"
    )]
    max_bytes_per_file: i64,
    #[arg(
        long,
        default_value_t = 2500,
        help = "number of messages per diskqueue fsync"
    )]
    sync_every: i64,
    #[arg(long, default_value = "2s", value_parser = duration_arg, value_name = "DURATION", help = "duration of time per diskqueue fsync")]
    sync_timeout: Duration,
    #[arg(
        long,
        default_value_t = 4,
        help = "max concurrency for checking in-flight and deferred message timeouts (accepted; nsq-rs uses one exact timer per channel)"
    )]
    queue_scan_worker_pool_max: i64,
    #[arg(
        long,
        default_value_t = 20,
        help = "number of channels to check per cycle (accepted; nsq-rs uses one exact timer per channel)"
    )]
    queue_scan_selection_count: i64,
    #[arg(long, default_value = "1m0s", value_parser = duration_arg, value_name = "DURATION", help = "default duration to wait before auto-requeing a message")]
    msg_timeout: Duration,
    #[arg(long, default_value = "15m0s", value_parser = duration_arg, value_name = "DURATION", help = "maximum duration before a message will timeout")]
    max_msg_timeout: Duration,
    #[arg(
        long,
        default_value_t = 1048576,
        help = "maximum size of a single message in bytes"
    )]
    max_msg_size: i64,
    #[arg(long, default_value = "1h0m0s", value_parser = duration_arg, value_name = "DURATION", help = "maximum requeuing timeout for a message")]
    max_req_timeout: Duration,
    #[arg(
        long,
        default_value_t = 5242880,
        help = "maximum size of a single command body"
    )]
    max_body_size: i64,
    #[arg(long, default_value = "1m0s", value_parser = duration_arg, value_name = "DURATION", help = "maximum client configurable duration of time between client heartbeats")]
    max_heartbeat_interval: Duration,
    #[arg(long, default_value_t = 2500, help = "maximum RDY count for a client")]
    max_rdy_count: i64,
    #[arg(
        long,
        default_value_t = 65536,
        help = "maximum client configurable size (in bytes) for a client output buffer"
    )]
    max_output_buffer_size: i64,
    #[arg(long, default_value = "30s", value_parser = duration_arg, value_name = "DURATION", help = "maximum client configurable duration of time between flushing to a client")]
    max_output_buffer_timeout: Duration,
    #[arg(long, default_value = "25ms", value_parser = duration_arg, value_name = "DURATION", help = "minimum client configurable duration of time between flushing to a client")]
    min_output_buffer_timeout: Duration,
    #[arg(long, default_value = "250ms", value_parser = duration_arg, value_name = "DURATION", help = "default duration of time between flushing data to clients")]
    output_buffer_timeout: Duration,
    #[arg(
        long,
        default_value_t = 0,
        help = "maximum channel consumer connection count per nsqd instance (default 0, i.e., unlimited)"
    )]
    max_channel_consumers: i64,
    #[arg(
        long,
        default_value_t = 0,
        help = "nsq-rs: deliveries a message gets at most per channel before it goes to the channel's dead-letter topic (0: unlimited, as NSQ; per channel: /channel/config)"
    )]
    max_attempts: u16,
    #[arg(
        long,
        default_value = "",
        help = "UDP <addr>:<port> of a statsd daemon for pushing stats"
    )]
    statsd_address: String,
    #[arg(long, default_value = "1m0s", value_parser = duration_arg, value_name = "DURATION", help = "duration between pushing to statsd")]
    statsd_interval: Duration,
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = bool_arg, default_value = "true", help = "toggle sending memory and GC stats to statsd")]
    statsd_mem_stats: bool,
    #[arg(
        long,
        default_value = "nsq.%s",
        help = "prefix used for keys sent to statsd (%s for host replacement)"
    )]
    statsd_prefix: String,
    #[arg(
        long,
        default_value_t = 508,
        help = "the size in bytes of statsd UDP packets"
    )]
    statsd_udp_packet_size: i64,
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = bool_arg, default_value = "false", help = "omit ephemeral topics and channels from statsd metrics")]
    statsd_exclude_ephemeral: bool,
    #[arg(long = "e2e-processing-latency-percentile", action = ArgAction::Append, help = "message processing time percentiles (as float (0, 1.0]) to track (can be specified multiple times or comma separated '1.0,0.99,0.95', default none)")]
    e2e_processing_latency_percentile: Vec<String>,
    #[arg(long, default_value = "10m0s", value_parser = duration_arg, value_name = "DURATION", help = "calculate end to end latency quantiles for this duration of time")]
    e2e_processing_latency_window_time: Duration,
    #[arg(long, default_value = "", help = "path to certificate file")]
    tls_cert: String,
    #[arg(long, default_value = "", help = "path to key file")]
    tls_key: String,
    #[arg(
        long,
        default_value = "",
        help = "client certificate auth policy ('require' or 'require-verify')"
    )]
    tls_client_auth_policy: String,
    #[arg(long, default_value = "", help = "path to certificate authority file")]
    tls_root_ca_file: String,
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false", help = "require TLS for client connections (true, false, tcp-https)")]
    tls_required: String,
    #[arg(
        long,
        default_value = "tls1.0",
        help = "minimum SSL/TLS version acceptable ('ssl3.0', 'tls1.0', 'tls1.1', 'tls1.2' or 'tls1.3'); nsq-rs speaks TLS 1.2 and 1.3 only, so anything below tls1.2 means tls1.2"
    )]
    tls_min_version: String,
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = bool_arg, default_value = "true", help = "enable deflate feature negotiation (client compression)")]
    deflate: bool,
    #[arg(
        long,
        default_value_t = 6,
        help = "max deflate compression level a client can negotiate (> values == > nsqd CPU usage)"
    )]
    max_deflate_level: i64,
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = bool_arg, default_value = "true", help = "enable snappy feature negotiation (client compression)")]
    snappy: bool,
    #[arg(long = "enable-experiment", action = ArgAction::Append, help = "enable experimental feature (may be given multiple times) (accepted; no experiments implemented)")]
    enable_experiment: Vec<String>,
}

fn options(cli: Cli) -> Result<nsqd::Options, String> {
    let mut o = nsqd::Options::default();
    if let Some(id) = cli.node_id {
        o.node_id = id;
    }
    let level = cli.log_level.to_lowercase();
    if !matches!(
        level.as_str(),
        "debug" | "info" | "warn" | "error" | "fatal"
    ) {
        return Err(format!("invalid log level {:?}", cli.log_level));
    }
    let mut percentiles = Vec::new();
    for v in cli
        .e2e_processing_latency_percentile
        .iter()
        .flat_map(|s| s.split(','))
    {
        let p: f64 = v
            .trim()
            .parse()
            .map_err(|_| format!("invalid E2E processing latency percentile: {v}"))?;
        percentiles.push(p);
    }
    percentiles.sort_by(|a, b| b.partial_cmp(a).unwrap_or(std::cmp::Ordering::Equal));
    percentiles.dedup();
    let tls_required = match cli.tls_required.as_str() {
        "tcp-https" => 1,
        v => {
            if bool_arg(v)? {
                2
            } else {
                0
            }
        }
    };
    let tls_min_version = match cli.tls_min_version.to_lowercase().as_str() {
        // empty keeps the default, as in nsqd
        "" | "tls1.0" => 0x0301,
        "tls1.1" => 0x0302,
        "tls1.2" => 0x0303,
        "tls1.3" => 0x0304,
        v => return Err(format!("unknown tls min version {v:?}")),
    };
    o.log_level = level;
    o.log_prefix = cli.log_prefix;
    o.tcp_address = cli.tcp_address;
    o.http_address = cli.http_address;
    o.https_address = cli.https_address;
    if let Some(b) = cli.broadcast_address {
        o.broadcast_address = b;
    }
    o.broadcast_tcp_port = cli.broadcast_tcp_port;
    o.broadcast_http_port = cli.broadcast_http_port;
    o.lookupd_tcp_addresses = cli.lookupd_tcp_address;
    o.auth_http_addresses = cli.auth_http_address;
    o.auth_http_request_method = cli.auth_http_request_method;
    o.http_client_connect_timeout = cli.http_client_connect_timeout;
    o.http_client_request_timeout = cli.http_client_request_timeout;
    o.topology_region = cli.topology_region;
    o.topology_zone = cli.topology_zone;
    o.data_path = cli.data_path;
    o.mem_queue_size = cli.mem_queue_size;
    o.max_bytes_per_file = cli.max_bytes_per_file;
    o.sync_every = cli.sync_every;
    o.sync_timeout = cli.sync_timeout;
    o.queue_scan_worker_pool_max = cli.queue_scan_worker_pool_max;
    o.queue_scan_selection_count = cli.queue_scan_selection_count;
    o.msg_timeout = cli.msg_timeout;
    o.max_msg_timeout = cli.max_msg_timeout;
    o.max_msg_size = cli.max_msg_size;
    o.max_req_timeout = cli.max_req_timeout;
    o.max_body_size = cli.max_body_size;
    o.max_heartbeat_interval = cli.max_heartbeat_interval;
    o.max_rdy_count = cli.max_rdy_count;
    o.max_output_buffer_size = cli.max_output_buffer_size;
    o.max_output_buffer_timeout = cli.max_output_buffer_timeout;
    o.min_output_buffer_timeout = cli.min_output_buffer_timeout;
    o.output_buffer_timeout = cli.output_buffer_timeout;
    o.max_channel_consumers = cli.max_channel_consumers;
    o.max_attempts = cli.max_attempts;
    o.statsd_address = cli.statsd_address;
    o.statsd_interval = cli.statsd_interval;
    o.statsd_mem_stats = cli.statsd_mem_stats;
    o.statsd_prefix = cli.statsd_prefix;
    o.statsd_udp_packet_size = cli.statsd_udp_packet_size;
    o.statsd_exclude_ephemeral = cli.statsd_exclude_ephemeral;
    o.e2e_processing_latency_percentiles = percentiles;
    o.e2e_processing_latency_window_time = cli.e2e_processing_latency_window_time;
    o.tls_cert = cli.tls_cert;
    o.tls_key = cli.tls_key;
    o.tls_client_auth_policy = cli.tls_client_auth_policy;
    o.tls_root_ca_file = cli.tls_root_ca_file;
    o.tls_required = tls_required;
    o.tls_min_version = tls_min_version;
    o.deflate = cli.deflate;
    o.max_deflate_level = cli.max_deflate_level;
    o.snappy = cli.snappy;
    o.enable_experiment = cli.enable_experiment;
    Ok(o)
}

fn main() {
    let matches = nsq_cli::parse_with_config(
        Cli::command(),
        &[
            ("id", "node-id"),
            ("nsqlookupd_tcp_addresses", "lookupd-tcp-address"),
            ("auth_http_addresses", "auth-http-address"),
            (
                "e2e_processing_latency_percentiles",
                "e2e-processing-latency-percentile",
            ),
        ],
    )
    .unwrap_or_else(|e| {
        eprint!("{e}");
        std::process::exit(2)
    });
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| {
        eprint!("{e}");
        std::process::exit(2)
    });
    if cli.version {
        println!(
            "nsqd v{} (built w/rust, nsq-rs {})",
            nsqd::VERSION,
            env!("CARGO_PKG_VERSION")
        );
        return;
    }
    let prefix = cli.log_prefix.clone();
    let opts = options(cli).unwrap_or_else(|e| nsq_cli::fatal(&prefix, &e));
    let set_level = nsq_cli::init_logging(&opts.log_level, &opts.log_prefix)
        .unwrap_or_else(|e| nsq_cli::fatal(&prefix, &e));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| nsq_cli::fatal(PREFIX, &e.to_string()));
    rt.block_on(async move {
        let nsqd = match nsqd::Nsqd::new(opts).await {
            Ok(n) => n,
            Err(e) => nsq_cli::fatal(&prefix, &format!("failed to instantiate nsqd - {e}")),
        };
        *nsqd.inner().log_level_hook.lock() = Some(set_level);
        let shutdown = nsq_cli::shutdown_on_signals();
        if let Err(e) = nsqd.run(shutdown).await {
            nsq_cli::fatal(&prefix, &e.to_string());
        }
    });
}

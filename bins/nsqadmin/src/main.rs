//! `nsqadmin`: flags and config file → `nsqadmin::Options`, logging, signals, run.

use std::time::Duration;

use anyhow::Context;
use clap::{ArgAction, CommandFactory, FromArgMatches, Parser};
use nsq_cli::{bool_arg, duration_arg};

/// nsqadmin's flags, with nsqadmin's names and defaults.
#[derive(Parser, Debug)]
#[command(
    name = "nsqadmin",
    disable_version_flag = true,
    about = "nsqadmin: web UI and JSON API to watch and administer an NSQ cluster (nsq-rs)"
)]
struct Cli {
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = bool_arg, default_value = "false", help = "print version string")]
    version: bool,
    #[arg(long, default_value = "", help = "path to config file (TOML)")]
    config: String,
    #[arg(
        long,
        default_value = "info",
        help = "set log level: debug, info, warn, error, or fatal"
    )]
    log_level: String,
    #[arg(long, default_value = "[nsqadmin] ", help = "log message prefix")]
    log_prefix: String,
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = bool_arg, default_value = "false", help = "[deprecated] has no effect, use --log-level")]
    verbose: bool,
    #[arg(
        long,
        default_value = "0.0.0.0:4171",
        help = "<addr>:<port> to listen on for HTTP clients"
    )]
    http_address: String,
    #[arg(long, default_value = "/", help = "URL base path")]
    base_path: String,
    #[arg(
        long,
        default_value = "",
        help = "serve /static assets from this directory (development)"
    )]
    dev_static_dir: String,
    #[arg(long, default_value = "", help = "graphite HTTP address")]
    graphite_url: String,
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = bool_arg, default_value = "false", help = "proxy HTTP requests to graphite")]
    proxy_graphite: bool,
    #[arg(
        long,
        default_value = "stats.counters.%s.count",
        help = "graphite key template statsd uses for counters (empty for none)"
    )]
    statsd_counter_format: String,
    #[arg(
        long,
        default_value = "stats.gauges.%s",
        help = "graphite key template statsd uses for gauges (empty for none)"
    )]
    statsd_gauge_format: String,
    #[arg(
        long,
        default_value = "nsq.%s",
        help = "statsd key prefix nsqd uses (%s for the host; must match nsqd)"
    )]
    statsd_prefix: String,
    #[arg(long, default_value = "1m0s", value_parser = duration_arg, value_name = "DURATION", help = "interval nsqd pushes to statsd (must match nsqd)")]
    statsd_interval: Duration,
    #[arg(
        long,
        default_value = "",
        help = "URL to POST a JSON notification of each admin action to"
    )]
    notification_http_endpoint: String,
    #[arg(long, default_value = "2s", value_parser = duration_arg, value_name = "DURATION", help = "timeout for HTTP connect")]
    http_client_connect_timeout: Duration,
    #[arg(long, default_value = "5s", value_parser = duration_arg, value_name = "DURATION", help = "timeout for HTTP request")]
    http_client_request_timeout: Duration,
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = bool_arg, default_value = "false", help = "skip verification of upstream TLS certificates (accepted; upstreams are spoken to over plain HTTP)")]
    http_client_tls_insecure_skip_verify: bool,
    #[arg(
        long,
        default_value = "",
        help = "CA file for the HTTP client (accepted; upstreams are spoken to over plain HTTP)"
    )]
    http_client_tls_root_ca_file: String,
    #[arg(
        long,
        default_value = "",
        help = "certificate file for the HTTP client (accepted; upstreams are spoken to over plain HTTP)"
    )]
    http_client_tls_cert: String,
    #[arg(
        long,
        default_value = "",
        help = "key file for the HTTP client (accepted; upstreams are spoken to over plain HTTP)"
    )]
    http_client_tls_key: String,
    #[arg(
        long,
        default_value = "127.0.0.1/8",
        help = "CIDR from which /config requests are allowed (empty allows all)"
    )]
    allow_config_from_cidr: String,
    #[arg(
        long,
        default_value = "X-Forwarded-User",
        help = "HTTP header carrying the authenticated user"
    )]
    acl_http_header: String,
    #[arg(long = "lookupd-http-address", action = ArgAction::Append, help = "nsqlookupd HTTP address (may be given multiple times)")]
    lookupd_http_address: Vec<String>,
    #[arg(long = "nsqd-http-address", action = ArgAction::Append, help = "nsqd HTTP address (may be given multiple times)")]
    nsqd_http_address: Vec<String>,
    #[arg(long = "admin-user", action = ArgAction::Append, help = "admin user (may be given multiple times); when set, only these users (per --acl-http-header) may perform admin actions")]
    admin_user: Vec<String>,
}

fn options(cli: Cli) -> anyhow::Result<nsqadmin::Options> {
    let log_level = nsqadmin::options::parse_log_level(&cli.log_level)
        .with_context(|| format!("invalid log level {:?}", cli.log_level))?;
    Ok(nsqadmin::Options {
        log_level,
        log_prefix: cli.log_prefix,
        http_address: cli.http_address,
        base_path: cli.base_path,
        dev_static_dir: cli.dev_static_dir,
        graphite_url: cli.graphite_url,
        proxy_graphite: cli.proxy_graphite,
        statsd_prefix: cli.statsd_prefix,
        statsd_counter_format: cli.statsd_counter_format,
        statsd_gauge_format: cli.statsd_gauge_format,
        statsd_interval: cli.statsd_interval,
        nsqlookupd_http_addresses: cli.lookupd_http_address,
        nsqd_http_addresses: cli.nsqd_http_address,
        http_client_connect_timeout: cli.http_client_connect_timeout,
        http_client_request_timeout: cli.http_client_request_timeout,
        http_client_tls_insecure_skip_verify: cli.http_client_tls_insecure_skip_verify,
        http_client_tls_root_ca_file: cli.http_client_tls_root_ca_file,
        http_client_tls_cert: cli.http_client_tls_cert,
        http_client_tls_key: cli.http_client_tls_key,
        allow_config_from_cidr: cli.allow_config_from_cidr,
        notification_http_endpoint: cli.notification_http_endpoint,
        acl_http_header: cli.acl_http_header,
        admin_users: cli.admin_user,
        ..Default::default()
    })
}

fn main() {
    let matches = nsq_cli::parse_with_config(
        Cli::command(),
        &[
            ("nsqlookupd_http_addresses", "lookupd-http-address"),
            ("nsqd_http_addresses", "nsqd-http-address"),
            ("admin_users", "admin-user"),
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
            "nsqadmin v{} (built w/rust, nsq-rs {})",
            nsqadmin::VERSION,
            env!("CARGO_PKG_VERSION")
        );
        return;
    }
    let prefix = cli.log_prefix.clone();
    let level = cli.log_level.clone();
    let opts = options(cli).unwrap_or_else(|e| nsq_cli::fatal(&prefix, &format!("{e:#}")));
    let set_level =
        nsq_cli::init_logging(&level, &prefix).unwrap_or_else(|e| nsq_cli::fatal(&prefix, &e));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| nsq_cli::fatal(&prefix, &e.to_string()));
    rt.block_on(async move {
        let admin = match nsqadmin::Nsqadmin::new(opts).await {
            Ok(a) => a,
            Err(e) => nsq_cli::fatal(&prefix, &e.to_string()),
        };
        admin.set_log_level_hook(set_level);
        let shutdown = nsq_cli::shutdown_on_signals();
        if let Err(e) = admin.run(shutdown).await {
            nsq_cli::fatal(&prefix, &e.to_string());
        }
    });
}

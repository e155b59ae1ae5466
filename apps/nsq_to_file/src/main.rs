//! `nsq_to_file`: consumes topics and appends every message body (plus a
//! newline) to local files, with NSQ's naming, rotation, gzip and
//! sync-before-FIN rules. This file only turns the command line into
//! settings (NSQ's flags, defaults and `log.Fatal` checks) and starts the
//! topic discoverer; the work is in [`discovery`] and [`file_logger`].

#![forbid(unsafe_code)]
#![deny(rust_2018_idioms, unused_must_use)]

mod clock;
mod discovery;
mod file_logger;
mod gopath;
mod logf;

use std::sync::Arc;

use logf::{go_log_fatal, Level};

use nsq_cli::VERSION;

nsq_cli::flags! {
    /// nsq_to_file's flags (NSQ 1.3.0's names, types and defaults).
    struct Flags {
        /// print the version and exit
        version: bool = "false";
        /// log verbosity: debug, info, warn, error, or fatal
        log_level: String = "info";
        /// prefix of every log line
        log_prefix: String = "[nsq_to_file] ";
        /// channel to consume
        channel: String = "nsq_to_file";
        /// most messages held unacknowledged (also the batch size that forces a sync)
        max_in_flight: i64 = "200";
        /// directory finished files are written to
        output_dir: String = "/tmp";
        /// directory for files being written, moved to --output-dir when closed (the --output-dir when empty)
        work_dir: String = "";
        /// strftime format of <DATETIME> in --filename-format
        datetime_format: String = "%Y-%m-%d_%H";
        /// file name template; <TOPIC>, <HOST>, <PID>, <DATETIME> and <REV> are replaced (<REV> counts up while a name is taken)
        filename_format: String = "<TOPIC>.<HOST><REV>.<DATETIME>.log";
        /// text used for <HOST> instead of the short host name; may contain <SHORT_HOST> and <HOSTNAME>
        host_identifier: String = "";
        /// gzip compression level, 1 (fastest) to 9 (smallest)
        gzip_level: i64 = "6";
        /// write gzip-compressed files
        gzip: bool = "false";
        /// do not create files that would stay empty
        skip_empty_files: bool = "false";
        /// how often the topic list is fetched from nsqlookupd (without --topic)
        topic_refresh: std::time::Duration = "1m0s";
        /// only archive topics matching this regular expression
        topic_pattern: String = "";
        /// start a new file once the current one is larger than `rotate-size` bytes
        rotate_size: i64 = "0";
        /// start a new file once the current one is older than this
        rotate_interval: std::time::Duration = "0s";
        /// how often files are fsynced (and their messages acknowledged)
        sync_interval: std::time::Duration = "30s";
        /// connect timeout for nsqlookupd HTTP requests
        http_client_connect_timeout: std::time::Duration = "2s";
        /// request timeout for nsqlookupd HTTP requests
        http_client_request_timeout: std::time::Duration = "5s";
        /// nsqd TCP address (may be given multiple times)
        nsqd_tcp_address: Vec<String> = "";
        /// nsqlookupd HTTP address (may be given multiple times)
        lookupd_http_address: Vec<String> = "";
        /// topic to archive (may be given multiple times)
        topic: Vec<String> = "";
        /// consumer option as key,value, e.g. lookupd_poll_interval,15s (may be given multiple times)
        consumer_opt: Vec<String> = "";
        /// nsq-rs: secret for the HTTP API of nsqlookupd and nsqd started with --http-auth-required (sent as Authorization: Bearer)
        http_secret: String = "";
    }
}

fn main() {
    // NSQ's nsq_to_file names its flag set "nsqd", so that is what --help says.
    let parsed = nsq_cli::flags::parse_or_exit::<Flags>("nsqd");
    let p = &parsed.flags;
    if !parsed.args.is_empty() {
        go_log_fatal(format!("unknown arguments: [{}]", parsed.args.join(" ")));
    }
    let level_text = p.log_level.clone();
    let Some(level) = Level::parse(&level_text) else {
        go_log_fatal("--log-level is invalid")
    };
    if p.version {
        println!("{}", nsq_cli::app_version("nsq_to_file"));
        return;
    }

    let channel = p.channel.clone();
    if channel.is_empty() {
        go_log_fatal("--channel is required");
    }
    let Some(connect_timeout) = nsq_cli::flags::positive(p.http_client_connect_timeout) else {
        go_log_fatal("--http-client-connect-timeout should be positive")
    };
    let Some(request_timeout) = nsq_cli::flags::positive(p.http_client_request_timeout) else {
        go_log_fatal("--http-client-request-timeout should be positive")
    };
    let nsqd_tcp_addrs = p.nsqd_tcp_address.clone();
    let lookupd_http_addrs = p.lookupd_http_address.clone();
    if nsqd_tcp_addrs.is_empty() && lookupd_http_addrs.is_empty() {
        go_log_fatal("--nsqd-tcp-address or --lookupd-http-address required.");
    }
    if !nsqd_tcp_addrs.is_empty() && !lookupd_http_addrs.is_empty() {
        go_log_fatal("use --nsqd-tcp-address or --lookupd-http-address not both");
    }
    let gzip_level = p.gzip_level;
    if !(1..=9).contains(&gzip_level) {
        go_log_fatal(format!(
            "invalid --gzip-level value ({gzip_level}), should be 1-9"
        ));
    }
    let topics = p.topic.clone();
    let topic_pattern = p.topic_pattern.clone();
    if topics.is_empty() && topic_pattern.is_empty() {
        go_log_fatal("--topic or --topic-pattern required");
    }
    if topics.is_empty() && lookupd_http_addrs.is_empty() {
        go_log_fatal("--lookupd-http-address must be specified when no --topic specified");
    }
    let output_dir = p.output_dir.clone();
    let mut work_dir = p.work_dir.clone();
    if work_dir.is_empty() {
        work_dir = output_dir.clone();
    }

    let max_in_flight = p.max_in_flight;
    let mut cfg = nsq_client::Config::default();
    for opt in p.consumer_opt.clone() {
        // nsq_to_file ignores bad consumer options.
        let _ = cfg.set_opt(&opt);
    }
    cfg.user_agent = format!("nsq_to_file/{VERSION} go-nsq/1.1.0");
    if !p.http_secret.is_empty() {
        cfg.http_secret = Some(p.http_secret.clone());
    }
    cfg.max_in_flight = max_in_flight;

    let prefix = p.log_prefix.clone();
    logf::init(&prefix, level);
    // The client library logs through `tracing`.
    let _ = nsq_cli::log::init(
        level_text.parse().unwrap_or_default(),
        &prefix,
        nsq_cli::log::Form::Tracing,
    );

    let settings = Arc::new(file_logger::Settings {
        channel,
        max_in_flight,
        output_dir,
        work_dir,
        datetime_format: p.datetime_format.clone(),
        filename_format: p.filename_format.clone(),
        host_identifier: p.host_identifier.clone(),
        gzip: p.gzip,
        gzip_level: gzip_level as u32,
        skip_empty_files: p.skip_empty_files,
        rotate_size: p.rotate_size,
        rotate_interval: nsq_cli::flags::positive(p.rotate_interval),
        sync_interval: nsq_cli::flags::positive(p.sync_interval),
        nsqd_tcp_addrs,
        lookupd_http_addrs,
    });
    let discoverer = discovery::Discoverer {
        settings,
        cfg,
        topics,
        topic_pattern,
        topic_refresh: nsq_cli::flags::positive(p.topic_refresh),
        connect_timeout,
        request_timeout,
    };

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| logf::fatal(e));
    rt.block_on(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let hup = signal(SignalKind::hangup())
            .unwrap_or_else(|e| logf::fatal(format!("cannot handle SIGHUP: {e}")));
        let term = nsq_cli::shutdown_on_signals();
        discoverer.run(term, hup).await;
    });
}

//! `nsq_to_file`: consumes topics and appends every message body (plus a
//! newline) to local files, with NSQ's naming, rotation, gzip and
//! sync-before-FIN rules. This file only turns the command line into
//! settings (NSQ's flags, defaults and `log.Fatal` checks) and starts the
//! topic discoverer; the work is in [`discovery`] and [`file_logger`].

#![deny(unsafe_code)]
#![deny(rust_2018_idioms, unused_must_use)]

mod clock;
mod discovery;
mod file_logger;
mod gopath;
mod logf;

use std::sync::Arc;

use logf::{go_log_fatal, Level};
use nsq_cli::goflag::{Flag, FlagSet, Kind};

const VERSION: &str = "1.3.0";

fn flag_set() -> FlagSet {
    use Kind::*;
    FlagSet {
        // NSQ's nsq_to_file names its flag set "nsqd", so that is what --help says.
        name: "nsqd".into(),
        flags: vec![
            Flag::new("version", Bool, "false", "print the version and exit"),
            Flag::new("log-level", Str, "info", "log verbosity: debug, info, warn, error, or fatal"),
            Flag::new("log-prefix", Str, "[nsq_to_file] ", "prefix of every log line"),
            Flag::new("channel", Str, "nsq_to_file", "channel to consume"),
            Flag::new("max-in-flight", Int, "200", "most messages held unacknowledged (also the batch size that forces a sync)"),
            Flag::new("output-dir", Str, "/tmp", "directory finished files are written to"),
            Flag::new("work-dir", Str, "", "directory for files being written, moved to --output-dir when closed (default: --output-dir)"),
            Flag::new("datetime-format", Str, "%Y-%m-%d_%H", "strftime format of <DATETIME> in --filename-format"),
            Flag::new(
                "filename-format",
                Str,
                "<TOPIC>.<HOST><REV>.<DATETIME>.log",
                "file name template; <TOPIC>, <HOST>, <PID>, <DATETIME> and <REV> are replaced (<REV> counts up while a name is taken)",
            ),
            Flag::new(
                "host-identifier",
                Str,
                "",
                "text used for <HOST> instead of the short host name; may contain <SHORT_HOST> and <HOSTNAME>",
            ),
            Flag::new("gzip-level", Int, "6", "gzip compression level, 1 (fastest) to 9 (smallest)"),
            Flag::new("gzip", Bool, "false", "write gzip-compressed files"),
            Flag::new("skip-empty-files", Bool, "false", "do not create files that would stay empty"),
            Flag::new("topic-refresh", Duration, "1m0s", "how often the topic list is fetched from nsqlookupd (without --topic)"),
            Flag::new("topic-pattern", Str, "", "only archive topics matching this regular expression"),
            Flag::new("rotate-size", Int, "0", "start a new file once the current one is larger than `rotate-size` bytes"),
            Flag::new("rotate-interval", Duration, "0s", "start a new file once the current one is older than this"),
            Flag::new("sync-interval", Duration, "30s", "how often files are fsynced (and their messages acknowledged)"),
            Flag::new("http-client-connect-timeout", Duration, "2s", "connect timeout for nsqlookupd HTTP requests"),
            Flag::new("http-client-request-timeout", Duration, "5s", "request timeout for nsqlookupd HTTP requests"),
            Flag::new("nsqd-tcp-address", List, "", "nsqd TCP address (may be given multiple times)"),
            Flag::new("lookupd-http-address", List, "", "nsqlookupd HTTP address (may be given multiple times)"),
            Flag::new("topic", List, "", "topic to archive (may be given multiple times)"),
            Flag::new(
                "consumer-opt",
                List,
                "",
                "consumer option as key,value, e.g. lookupd_poll_interval,15s (may be given multiple times)",
            ),
        ],
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let p = flag_set().parse(&args).unwrap_or_else(|e| e.exit());
    if !p.args.is_empty() {
        go_log_fatal(format!("unknown arguments: [{}]", p.args.join(" ")));
    }
    let level_text = p.string("log-level");
    let Some(level) = Level::parse(&level_text) else {
        go_log_fatal("--log-level is invalid")
    };
    if p.bool("version") {
        println!("nsq_to_file v{VERSION}");
        return;
    }

    let channel = p.string("channel");
    if channel.is_empty() {
        go_log_fatal("--channel is required");
    }
    let Some(connect_timeout) = p.positive_duration("http-client-connect-timeout") else {
        go_log_fatal("--http-client-connect-timeout should be positive")
    };
    let Some(request_timeout) = p.positive_duration("http-client-request-timeout") else {
        go_log_fatal("--http-client-request-timeout should be positive")
    };
    let nsqd_tcp_addrs = p.list("nsqd-tcp-address");
    let lookupd_http_addrs = p.list("lookupd-http-address");
    if nsqd_tcp_addrs.is_empty() && lookupd_http_addrs.is_empty() {
        go_log_fatal("--nsqd-tcp-address or --lookupd-http-address required.");
    }
    if !nsqd_tcp_addrs.is_empty() && !lookupd_http_addrs.is_empty() {
        go_log_fatal("use --nsqd-tcp-address or --lookupd-http-address not both");
    }
    let gzip_level = p.int("gzip-level");
    if !(1..=9).contains(&gzip_level) {
        go_log_fatal(format!(
            "invalid --gzip-level value ({gzip_level}), should be 1-9"
        ));
    }
    let topics = p.list("topic");
    let topic_pattern = p.string("topic-pattern");
    if topics.is_empty() && topic_pattern.is_empty() {
        go_log_fatal("--topic or --topic-pattern required");
    }
    if topics.is_empty() && lookupd_http_addrs.is_empty() {
        go_log_fatal("--lookupd-http-address must be specified when no --topic specified");
    }
    let output_dir = p.string("output-dir");
    let mut work_dir = p.string("work-dir");
    if work_dir.is_empty() {
        work_dir = output_dir.clone();
    }

    let max_in_flight = p.int("max-in-flight");
    let mut cfg = nsq_client::Config::default();
    for opt in p.list("consumer-opt") {
        // nsq_to_file ignores bad consumer options.
        let _ = cfg.set_opt(&opt);
    }
    cfg.user_agent = format!("nsq_to_file/{VERSION} go-nsq/1.1.0");
    cfg.max_in_flight = max_in_flight;

    let prefix = p.string("log-prefix");
    logf::init(&prefix, level);
    // The client library logs through `tracing`.
    let _ = nsq_cli::init_logging(&level_text, &prefix);

    let settings = Arc::new(file_logger::Settings {
        channel,
        max_in_flight,
        output_dir,
        work_dir,
        datetime_format: p.string("datetime-format"),
        filename_format: p.string("filename-format"),
        host_identifier: p.string("host-identifier"),
        gzip: p.bool("gzip"),
        gzip_level: gzip_level as u32,
        skip_empty_files: p.bool("skip-empty-files"),
        rotate_size: p.int("rotate-size"),
        rotate_interval: p.positive_duration("rotate-interval"),
        sync_interval: p.positive_duration("sync-interval"),
        nsqd_tcp_addrs,
        lookupd_http_addrs,
    });
    let discoverer = discovery::Discoverer {
        settings,
        cfg,
        topics,
        topic_pattern,
        topic_refresh: p.positive_duration("topic-refresh"),
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

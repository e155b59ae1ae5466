//! `nsq_stat`: every `--interval`, sums one topic/channel's stats over all
//! nsqds that have the topic (found through nsqlookupd or given directly)
//! and prints a row of rates, depths and counters, with a header every 25
//! polls; `--count N` stops after N rows.

#![forbid(unsafe_code)]

mod stats;

use std::time::Duration;

use nsq_cli::golog::fatal;
use nsq_protocol::gofmt::quote as go_quote;
use stats::{ChannelTotals, Cluster};

/// The header's two lines.
fn header() -> String {
    format!(
        "{}+{}+{}\n{:>7} {:>7} | {:>7} {:>7} {:>7} {:>5} {:>5} | {:>7} {:>7} {:>12} {:>7}\n",
        "------rate------",
        "----------------depth----------------",
        "--------------metadata---------------",
        "ingress",
        "egress",
        "total",
        "mem",
        "disk",
        "inflt",
        "def",
        "req",
        "t-o",
        "msgs",
        "clients"
    )
}

/// One data row: rates are per second over `interval`, truncated.
fn row(prev: &ChannelTotals, cur: &ChannelTotals, interval: Duration) -> String {
    let secs = interval.as_secs_f64();
    let ingress = (cur.message_count - prev.message_count) as f64 / secs;
    let egress = (cur.message_count - prev.message_count - (cur.depth - prev.depth)) as f64 / secs;
    format!(
        "{:>7} {:>7} | {:>7} {:>7} {:>7} {:>5} {:>5} | {:>7} {:>7} {:>12} {:>7}\n",
        ingress as i64,
        egress as i64,
        cur.depth,
        cur.depth - cur.backend_depth,
        cur.backend_depth,
        cur.in_flight_count,
        cur.deferred_count,
        cur.requeue_count,
        cur.timeout_count,
        cur.message_count,
        cur.client_count
    )
}

/// Polls and prints until `count` rows are out (forever without a count), then exits 0.
async fn stat_loop(
    cluster: Cluster,
    interval: Duration,
    topic: &str,
    channel: &str,
    count: Option<i64>,
) -> ! {
    use std::io::Write;
    let mut previous: Option<ChannelTotals> = None;
    let mut i: i64 = 0;
    while !matches!(count, Some(c) if c < i) {
        let producers = cluster
            .topic_producers(topic)
            .await
            .unwrap_or_else(|e| fatal(format!("ERROR: failed to get topic producers - {e}")));
        let channels = cluster
            .channel_stats(&producers, topic, channel)
            .await
            .unwrap_or_else(|e| fatal(format!("ERROR: failed to get nsqd stats - {e}")));
        let Some(current) = channels.get(channel).cloned() else {
            fatal(format!(
                "ERROR: failed to find channel({channel}) in stats metadata for topic({topic})"
            ));
        };
        let mut out = String::new();
        if i % 25 == 0 {
            out.push_str(&header());
        }
        if let Some(prev) = &previous {
            out.push_str(&row(prev, &current, interval));
        }
        let mut stdout = std::io::stdout().lock();
        let _ = stdout
            .write_all(out.as_bytes())
            .and_then(|_| stdout.flush());
        drop(stdout);
        previous = Some(current);
        tokio::time::sleep(interval).await;
        i += 1;
    }
    std::process::exit(0)
}

nsq_cli::flags! {
    /// nsq_stat's flags (NSQ 1.3.0's names, types and defaults).
    struct Flags {
        /// print the version and exit
        version: bool = "false";
        /// topic to report on
        topic: String = "";
        /// channel to report on
        channel: String = "";
        /// time between polls (and rows)
        interval: std::time::Duration = "2s";
        /// HTTP connect timeout
        http_client_connect_timeout: std::time::Duration = "2s";
        /// HTTP request timeout
        http_client_request_timeout: std::time::Duration = "5s";
        /// print this many rows, then exit
        count: Vec<String> = "", check = |s: &str| parse_count(s).map(drop);
        /// nsqd HTTP address (repeatable)
        nsqd_http_address: Vec<String> = "";
        /// nsqlookupd HTTP address (repeatable)
        lookupd_http_address: Vec<String> = "";
        /// nsq-rs: secret for the HTTP API of nsqlookupd and nsqd started with --http-auth-required (sent as Authorization: Bearer)
        http_secret: String = "";
    }
}

fn main() {
    let parsed = nsq_cli::flags::parse_command_line::<Flags>();
    let p = &parsed.flags;
    let show_version = p.version;
    let topic = p.topic.clone();
    let channel = p.channel.clone();
    // `None` when zero or negative, which the checks below refuse.
    let interval = nsq_cli::flags::positive(p.interval);
    let connect_timeout = nsq_cli::flags::positive(p.http_client_connect_timeout);
    let request_timeout = nsq_cli::flags::positive(p.http_client_request_timeout);
    // Go's `flag.Var` keeps the last value.
    let count = p.count.last().and_then(|s| parse_count(s).ok());
    let nsqd_http_addrs = p.nsqd_http_address.clone();
    let lookupd_http_addrs = p.lookupd_http_address.clone();

    if show_version {
        println!("{}", nsq_cli::app_version("nsq_stat"));
        return;
    }
    if topic.is_empty() || channel.is_empty() {
        fatal("--topic and --channel are required");
    }
    let Some(interval) = interval else {
        fatal("--interval should be positive")
    };
    let Some(connect_timeout) = connect_timeout else {
        fatal("--http-client-connect-timeout should be positive")
    };
    let Some(request_timeout) = request_timeout else {
        fatal("--http-client-request-timeout should be positive")
    };
    if count.is_some_and(|c| c <= 0) {
        fatal("--count should be positive");
    }
    if nsqd_http_addrs.is_empty() && lookupd_http_addrs.is_empty() {
        fatal("--nsqd-http-address or --lookupd-http-address required");
    }
    if !nsqd_http_addrs.is_empty() && !lookupd_http_addrs.is_empty() {
        fatal("use --nsqd-http-address or --lookupd-http-address not both");
    }
    // As NSQ, no scheme; nsq-rs: but https:// for a daemon serving HTTPS.
    let has_scheme = |a: &String| a.starts_with("http") && !a.starts_with("https://");
    if nsqd_http_addrs.iter().any(has_scheme) {
        fatal("--nsqd-http-address error - address should not contain scheme");
    }
    if lookupd_http_addrs.iter().any(has_scheme) {
        fatal("--lookupd-http-address error - address should not contain scheme");
    }

    // SIGHUP, SIGINT and SIGTERM end the program quietly, with status 0.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| fatal(e.to_string()));
    rt.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        let cluster = Cluster::new(
            lookupd_http_addrs,
            nsqd_http_addrs,
            connect_timeout,
            request_timeout,
            &p.http_secret,
        );
        let (Ok(mut hup), Ok(mut int), Ok(mut term)) = (
            signal(SignalKind::hangup()),
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) else {
            fatal("cannot install signal handlers");
        };
        tokio::select! {
            _ = stat_loop(cluster, interval, &topic, &channel, count) => {}
            _ = hup.recv() => {}
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
    });
    std::process::exit(0)
}

/// `--count`: Go's `strconv.ParseInt(s, 10, 32)` with its error text.
fn parse_count(s: &str) -> Result<i64, String> {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    if body.is_empty() || !body.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "strconv.ParseInt: parsing {}: invalid syntax",
            go_quote(s)
        ));
    }
    match s.parse::<i32>() {
        Ok(v) => Ok(i64::from(v)),
        Err(_) => Err(format!(
            "strconv.ParseInt: parsing {}: value out of range",
            go_quote(s)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_layout() {
        let h = header();
        assert_eq!(
            h,
            "------rate------+----------------depth----------------+--------------metadata---------------\n\
             ingress  egress |   total     mem    disk inflt   def |     req     t-o         msgs clients\n"
        );
        let prev = ChannelTotals {
            message_count: 5,
            depth: 4,
            ..Default::default()
        };
        let cur = ChannelTotals {
            message_count: 9,
            depth: 6,
            backend_depth: 0,
            in_flight_count: 2,
            client_count: 1,
            ..Default::default()
        };
        assert_eq!(
            row(&prev, &cur, Duration::from_secs(2)),
            "      2       1 |       6       6       0     2     0 |       0       0            9       1\n"
        );
    }

    #[test]
    fn count_values() {
        assert_eq!(parse_count("3"), Ok(3));
        assert_eq!(parse_count("-1"), Ok(-1));
        assert_eq!(
            parse_count("x"),
            Err("strconv.ParseInt: parsing \"x\": invalid syntax".into())
        );
        assert_eq!(
            parse_count("9999999999"),
            Err("strconv.ParseInt: parsing \"9999999999\": value out of range".into())
        );
    }
}

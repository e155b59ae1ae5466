//! `nsq_stat`: every `--interval`, sums one topic/channel's stats over all
//! nsqds that have the topic (found through nsqlookupd or given directly)
//! and prints a row of rates, depths and counters, with a header every 25
//! polls; `--count N` stops after N rows.

#![forbid(unsafe_code)]

#[path = "../../nsq_tail/src/go_app.rs"]
mod go_app;
mod stats;

use std::time::Duration;

use go_app::{fatal, FlagSet};
use stats::{ChannelTotals, Cluster};

const VERSION: &str = "1.3.0";

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
fn stat_loop(cluster: Cluster, interval: Duration, topic: &str, channel: &str, count: Option<i64>) -> ! {
    use std::io::Write;
    let mut previous: Option<ChannelTotals> = None;
    let mut i: i64 = 0;
    while !matches!(count, Some(c) if c < i) {
        let producers = cluster.topic_producers(topic).unwrap_or_else(|e| fatal(&format!("ERROR: failed to get topic producers - {e}")));
        let channels =
            cluster.channel_stats(&producers, topic, channel).unwrap_or_else(|e| fatal(&format!("ERROR: failed to get nsqd stats - {e}")));
        let Some(current) = channels.get(channel).cloned() else {
            fatal(&format!("ERROR: failed to find channel({channel}) in stats metadata for topic({topic})"));
        };
        let mut out = String::new();
        if i % 25 == 0 {
            out.push_str(&header());
        }
        if let Some(prev) = &previous {
            out.push_str(&row(prev, &current, interval));
        }
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(out.as_bytes()).and_then(|_| stdout.flush());
        drop(stdout);
        previous = Some(current);
        std::thread::sleep(interval);
        i += 1;
    }
    std::process::exit(0)
}

fn main() {
    let args = go_app::args();
    let mut show_version = false;
    let mut topic = String::new();
    let mut channel = String::new();
    let mut interval_ns: i64 = 2_000_000_000;
    let mut connect_timeout_ns: i64 = 2_000_000_000;
    let mut request_timeout_ns: i64 = 5_000_000_000;
    let mut count: Option<i64> = None;
    let mut nsqd_http_addrs = Vec::new();
    let mut lookupd_http_addrs = Vec::new();
    {
        let mut fs = FlagSet::new(&args[0]);
        fs.bool(&mut show_version, "version", "print the version and exit");
        fs.string(&mut topic, "topic", "topic to report on");
        fs.string(&mut channel, "channel", "channel to report on");
        fs.duration(&mut interval_ns, "interval", "time between polls (and rows)");
        fs.duration(&mut connect_timeout_ns, "http-client-connect-timeout", "HTTP connect timeout");
        fs.duration(&mut request_timeout_ns, "http-client-request-timeout", "HTTP request timeout");
        fs.var("count", "print this many rows, then exit", |s| {
            count = Some(parse_count(s)?);
            Ok(())
        });
        fs.strings(&mut nsqd_http_addrs, "nsqd-http-address", "nsqd HTTP address (repeatable)");
        fs.strings(&mut lookupd_http_addrs, "lookupd-http-address", "nsqlookupd HTTP address (repeatable)");
        fs.parse(&args[1..]);
    }

    if show_version {
        println!("nsq_stat v{VERSION}");
        return;
    }
    if topic.is_empty() || channel.is_empty() {
        fatal("--topic and --channel are required");
    }
    if interval_ns <= 0 {
        fatal("--interval should be positive");
    }
    if connect_timeout_ns <= 0 {
        fatal("--http-client-connect-timeout should be positive");
    }
    if request_timeout_ns <= 0 {
        fatal("--http-client-request-timeout should be positive");
    }
    if count.is_some_and(|c| c <= 0) {
        fatal("--count should be positive");
    }
    if nsqd_http_addrs.is_empty() && lookupd_http_addrs.is_empty() {
        fatal("--nsqd-http-address or --lookupd-http-address required");
    }
    if !nsqd_http_addrs.is_empty() && !lookupd_http_addrs.is_empty() {
        fatal("use --nsqd-http-address or --lookupd-http-address not both");
    }
    if nsqd_http_addrs.iter().any(|a| a.starts_with("http")) {
        fatal("--nsqd-http-address error - address should not contain scheme");
    }
    if lookupd_http_addrs.iter().any(|a| a.starts_with("http")) {
        fatal("--lookupd-http-address error - address should not contain scheme");
    }

    let nanos = |ns: i64| Duration::from_nanos(ns as u64);
    let cluster = Cluster {
        lookupd_http_addrs,
        nsqd_http_addrs,
        connect_timeout: nanos(connect_timeout_ns),
        request_timeout: nanos(request_timeout_ns),
    };
    let interval = nanos(interval_ns);
    std::thread::spawn(move || stat_loop(cluster, interval, &topic, &channel, count));

    // SIGHUP, SIGINT and SIGTERM end the program quietly, with status 0.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap_or_else(|e| fatal(&e.to_string()));
    rt.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut hup), Ok(mut int), Ok(mut term)) =
            (signal(SignalKind::hangup()), signal(SignalKind::interrupt()), signal(SignalKind::terminate()))
        else {
            fatal("cannot install signal handlers");
        };
        tokio::select! {
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
        return Err(format!("strconv.ParseInt: parsing {}: invalid syntax", go_app::go_quote(s)));
    }
    match s.parse::<i32>() {
        Ok(v) => Ok(i64::from(v)),
        Err(_) => Err(format!("strconv.ParseInt: parsing {}: value out of range", go_app::go_quote(s))),
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
        let prev = ChannelTotals { message_count: 5, depth: 4, ..Default::default() };
        let cur = ChannelTotals { message_count: 9, depth: 6, backend_depth: 0, in_flight_count: 2, client_count: 1, ..Default::default() };
        assert_eq!(
            row(&prev, &cur, Duration::from_secs(2)),
            "      2       1 |       6       6       0     2     0 |       0       0            9       1\n"
        );
    }

    #[test]
    fn count_values() {
        assert_eq!(parse_count("3"), Ok(3));
        assert_eq!(parse_count("-1"), Ok(-1));
        assert_eq!(parse_count("x"), Err("strconv.ParseInt: parsing \"x\": invalid syntax".into()));
        assert_eq!(parse_count("9999999999"), Err("strconv.ParseInt: parsing \"9999999999\": value out of range".into()));
    }
}

//! Test support for the client's black-box tests: the workspace's one
//! daemon harness (`nsq-tests`) starts the real `nsqd` / `nsqlookupd` on
//! free loopback ports with temporary data directories and stops them on
//! drop; a missing binary fails the test (build them first:
//! `cargo build -p nsqd-bin -p nsqlookupd-bin`, or set `NSQ_BIN_DIR`).
//! Async helpers read their HTTP APIs with `nsq_http`'s client.

#![allow(dead_code, unused_imports)]

use std::time::{Duration, Instant};

pub use nsq_tests::free_port;

/// A running daemon and its addresses; stopped (by PID) on drop.
pub struct Daemon {
    pub tcp: String,
    pub http: String,
    _process: Process,
}

enum Process {
    Nsqd(nsq_tests::Nsqd),
    Lookupd(nsq_tests::Lookupd),
}

/// nsqd with a fresh data directory, broadcasting 127.0.0.1, plus `extra` flags.
pub fn start_nsqd(extra: &[String]) -> Daemon {
    let mut args = vec!["--broadcast-address=127.0.0.1"];
    args.extend(extra.iter().map(String::as_str));
    let n = nsq_tests::Nsqd::start(&args);
    Daemon {
        tcp: n.tcp_addr.clone(),
        http: n.http_addr.clone(),
        _process: Process::Nsqd(n),
    }
}

pub fn start_nsqlookupd() -> Daemon {
    let l = nsq_tests::Lookupd::start(&[]);
    Daemon {
        tcp: l.tcp.clone(),
        http: l.http.clone(),
        _process: Process::Lookupd(l),
    }
}

fn client() -> nsq_http::Client {
    nsq_http::Client::new(nsq_http::ClientOptions::new(
        Duration::from_secs(2),
        Duration::from_secs(5),
    ))
}

/// `GET path` → (status, body).
pub async fn http_get(addr: &str, path: &str) -> (u16, Vec<u8>) {
    http_request(addr, "GET", path).await
}

pub async fn http_request(addr: &str, method: &str, path: &str) -> (u16, Vec<u8>) {
    let method = hyper::Method::from_bytes(method.as_bytes()).expect("method");
    let r = client()
        .request(method, &format!("http://{addr}{path}"), &[], None)
        .await
        .expect("http request");
    (r.status.as_u16(), r.body.to_vec())
}

/// `/stats?format=json` of one nsqd, filtered to topic (and channel unless
/// empty: nsq-rs's nsqd treats `channel=` as a filter matching nothing,
/// where Go's nsqd treats it as absent).
pub async fn nsqd_stats(http: &str, topic: &str, channel: &str) -> serde_json::Value {
    let mut path = format!("/stats?format=json&topic={topic}");
    if !channel.is_empty() {
        path.push_str(&format!("&channel={channel}"));
    }
    let (status, body) = http_get(http, &path).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    serde_json::from_slice(&body).expect("stats json")
}

/// The channel object from nsqd stats (None before it exists).
pub fn channel_of<'a>(
    stats: &'a serde_json::Value,
    topic: &str,
    channel: &str,
) -> Option<&'a serde_json::Value> {
    stats["topics"]
        .as_array()?
        .iter()
        .find(|t| t["topic_name"] == topic)?["channels"]
        .as_array()?
        .iter()
        .find(|c| c["channel_name"] == channel)
}

/// Sum of a per-client field over the channel's clients.
pub fn client_sum(stats: &serde_json::Value, topic: &str, channel: &str, field: &str) -> i64 {
    channel_of(stats, topic, channel)
        .and_then(|c| c["clients"].as_array())
        .map(|cl| cl.iter().map(|c| c[field].as_i64().unwrap_or(0)).sum())
        .unwrap_or(0)
}

/// Stats of topic/channel once nsqd lists no client on the channel (it
/// notices a closed socket on its own schedule); panics after 5 s.
pub async fn stats_without_clients(http: &str, topic: &str, channel: &str) -> serde_json::Value {
    for _ in 0..250 {
        let s = nsqd_stats(http, topic, channel).await;
        let n = channel_of(&s, topic, channel)
            .and_then(|c| c["clients"].as_array().map(Vec::len))
            .unwrap_or(0);
        if n == 0 {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("nsqd still lists clients on {topic}/{channel}");
}

/// Polls `f` every 20 ms until true or panics after `timeout`.
pub async fn wait_until(timeout: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

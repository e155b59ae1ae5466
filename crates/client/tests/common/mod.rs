//! Test support: start the real `nsqd` / `nsqlookupd` binaries on free
//! 127.0.0.1 ports with a temporary data directory, kill them (by PID) on
//! drop, and read their HTTP APIs.
//!
//! Build the binaries first: `cargo build -p nsqd-bin -p nsqlookupd-bin`.
//! `NSQ_BIN_DIR` overrides where they are looked up.

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nsq_client::lookup::parse_http_response;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub fn bin(name: &str) -> PathBuf {
    let dir = match std::env::var("NSQ_BIN_DIR") {
        Ok(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/debug"),
    };
    dir.join(name)
}

pub fn have_bin(name: &str) -> bool {
    bin(name).exists()
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind :0")
        .local_addr()
        .expect("local addr")
        .port()
}

/// A running daemon; SIGKILLed by PID and reaped on drop.
pub struct Daemon {
    child: Child,
    pub tcp: String,
    pub http: String,
    pub dir: tempfile::TempDir,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daemon {
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default()
    }
}

fn blocking_ping(http: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(http) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(format!("GET /ping HTTP/1.0\r\nHost: {http}\r\n\r\n").as_bytes())
        .is_err()
    {
        return false;
    }
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    matches!(parse_http_response(&raw), Ok((200, _)))
}

fn start(name: &str, args: impl Fn(&str, &str, &std::path::Path) -> Vec<String>) -> Daemon {
    let path = bin(name);
    assert!(
        path.exists(),
        "{} missing: run `cargo build -p nsqd-bin -p nsqlookupd-bin` first",
        path.display()
    );
    let mut last = String::new();
    for _ in 0..5 {
        let dir = tempfile::Builder::new()
            .prefix(&format!("nsq-client-{name}-"))
            .tempdir()
            .expect("tempdir");
        let tcp = format!("127.0.0.1:{}", free_port());
        let http = format!("127.0.0.1:{}", free_port());
        let child = Command::new(&path)
            .args(args(&tcp, &http, dir.path()))
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(dir.path().join("stdout")).expect("stdout file"))
            .stderr(std::fs::File::create(dir.path().join("stderr")).expect("stderr file"))
            .spawn()
            .expect("spawn daemon");
        let mut d = Daemon {
            child,
            tcp,
            http,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = d.child.try_wait() {
                break;
            }
            if blocking_ping(&d.http) {
                return d;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        last = d.stderr();
        // Probably a port race: drop (kill) and retry with fresh ports.
    }
    panic!("{name} did not start; stderr:\n{last}");
}

/// nsqd with a fresh data directory plus `extra` flags.
pub fn start_nsqd(extra: &[String]) -> Daemon {
    start("nsqd", |tcp, http, dir| {
        let mut a = vec![
            format!("--tcp-address={tcp}"),
            format!("--http-address={http}"),
            // the HTTPS listener opens whenever a test passes --tls-cert:
            // never the default 0.0.0.0:4152, which parallel tests share
            format!("--https-address=127.0.0.1:{}", free_port()),
            format!("--data-path={}", dir.display()),
            "--broadcast-address=127.0.0.1".to_string(),
        ];
        a.extend(extra.iter().cloned());
        a
    })
}

pub fn start_nsqlookupd() -> Daemon {
    start("nsqlookupd", |tcp, http, _dir| {
        vec![
            format!("--tcp-address={tcp}"),
            format!("--http-address={http}"),
            "--broadcast-address=127.0.0.1".to_string(),
        ]
    })
}

/// `GET path` (HTTP/1.0) → (status, body).
pub async fn http_get(addr: &str, path: &str) -> (u16, Vec<u8>) {
    http_request(addr, "GET", path).await
}

pub async fn http_request(addr: &str, method: &str, path: &str) -> (u16, Vec<u8>) {
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connect http");
    let req = format!("{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Length: 0\r\n\r\n");
    s.write_all(req.as_bytes()).await.expect("write http");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.expect("read http");
    parse_http_response(&raw).expect("parse http")
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

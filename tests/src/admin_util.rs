//! Helpers for the nsqadmin black-box tests (`tests/tests/nsqadmin.rs`, which
//! includes this file with `#[path]`): start nsqlookupd and nsqadmin from the
//! built binaries, a whole cluster (one nsqlookupd, two nsqd, one nsqadmin),
//! a recording HTTP server for notifications, and JSON key-order checks.
//!
//! Builds on the harness in `lib.rs` (`Nsqd`, `http_request`, `free_port`, …).

#![allow(dead_code)]

use std::fs;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nsq_tests::*;

/// A child daemon (nsqlookupd or nsqadmin) with captured output; SIGTERM/SIGKILL on drop.
pub struct Daemon {
    child: Option<Child>,
    pub http_addr: String,
    pub tcp_addr: String,
    log_dir: tempfile::TempDir,
    pub args: Vec<String>,
}

impl Daemon {
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    pub fn stderr(&self) -> String {
        fs::read_to_string(self.log_dir.path().join("stderr")).unwrap_or_default()
    }

    pub fn get(&self, path: &str) -> HttpResponse {
        http_get(&self.http_addr, path)
    }

    pub fn req(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> HttpResponse {
        http_request(&self.http_addr, method, path, headers, body)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    pub fn post_json(&self, path: &str, body: &str) -> HttpResponse {
        self.req(
            "POST",
            path,
            &[("Content-Type", "application/json")],
            Some(body.as_bytes()),
        )
    }

    pub fn delete(&self, path: &str, body: Option<&str>) -> HttpResponse {
        self.req("DELETE", path, &[], body.map(str::as_bytes))
    }

    /// Waits up to `timeout` for the process to exit on its own.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let st = wait_timeout(self.child.as_mut()?, timeout)?;
        self.child = None;
        Some(st)
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            terminate(&mut c, Duration::from_secs(3));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
    }
}

fn spawn(bin: &str, args: Vec<String>) -> (Child, tempfile::TempDir) {
    let log_dir = tempfile::Builder::new()
        .prefix(&format!("{bin}-log-"))
        .tempdir()
        .unwrap();
    let child = Command::new(bin_path(bin))
        .args(&args)
        .stdin(Stdio::null())
        .stdout(fs::File::create(log_dir.path().join("stdout")).unwrap())
        .stderr(fs::File::create(log_dir.path().join("stderr")).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {bin}: {e}"));
    (child, log_dir)
}

/// Waits for `GET <ping>` → 200 `OK`; `Err` with the log if the child exits or 20 s pass.
fn wait_ping(d: &mut Daemon, what: &str, ping: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(st) = d.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
            d.child = None;
            return Err(format!(
                "{what} exited during startup with {st}\nargs {:?}\nstderr:\n{}",
                d.args,
                d.stderr()
            ));
        }
        if let Ok(r) =
            http_request_timeout(&d.http_addr, "GET", ping, &[], None, Duration::from_secs(2))
        {
            if r.status == 200 && r.body == b"OK" {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{what} did not answer /ping\nstderr:\n{}",
                d.stderr()
            ));
        }
        sleep_ms(50);
    }
}

/// Starts nsqlookupd on free 127.0.0.1 ports.
pub fn start_lookupd() -> Daemon {
    start_lookupd_with(&[])
}

/// Starts nsqlookupd on free 127.0.0.1 ports with `extra` flags.
pub fn start_lookupd_with(extra: &[&str]) -> Daemon {
    let mut last = String::new();
    for _ in 0..5 {
        let tcp = format!("127.0.0.1:{}", free_port());
        let http = format!("127.0.0.1:{}", free_port());
        let mut args = vec![
            format!("--tcp-address={tcp}"),
            format!("--http-address={http}"),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let (child, log_dir) = spawn("nsqlookupd", args.clone());
        let mut d = Daemon {
            child: Some(child),
            http_addr: http,
            tcp_addr: tcp,
            log_dir,
            args,
        };
        match wait_ping(&mut d, "nsqlookupd", "/ping") {
            Ok(()) => return d,
            Err(e) => last = e,
        }
    }
    panic!("nsqlookupd failed to start: {last}");
}

/// Starts nsqadmin on a free port with `args` (plus `--http-address`).
pub fn start_admin(args: &[&str]) -> Daemon {
    try_start_admin(args).unwrap_or_else(|e| panic!("{e}"))
}

pub fn try_start_admin(args: &[&str]) -> Result<Daemon, String> {
    let base = args
        .iter()
        .find_map(|a| a.strip_prefix("--base-path="))
        .unwrap_or("")
        .trim_matches('/');
    let ping = if base.is_empty() {
        "/ping".to_string()
    } else {
        format!("/{base}/ping")
    };
    let mut last = String::new();
    for _ in 0..5 {
        let http = format!("127.0.0.1:{}", free_port());
        let mut all = vec![format!("--http-address={http}")];
        all.extend(args.iter().map(|s| s.to_string()));
        let (child, log_dir) = spawn("nsqadmin", all.clone());
        let mut d = Daemon {
            child: Some(child),
            http_addr: http,
            tcp_addr: String::new(),
            log_dir,
            args: all,
        };
        match wait_ping(&mut d, "nsqadmin", &ping) {
            Ok(()) => return Ok(d),
            Err(e) if e.contains("exited") && !e.contains("Address already in use") => {
                return Err(e)
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Starts an nsqd registered with `lookupd` and broadcasting 127.0.0.1.
pub fn start_nsqd_with_lookupd(lookupd: &Daemon) -> Nsqd {
    Nsqd::start(&[
        &format!("--lookupd-tcp-address={}", lookupd.tcp_addr),
        "--broadcast-address=127.0.0.1",
    ])
}

/// One nsqlookupd, two nsqds registered with it, and nsqadmin in lookupd mode.
pub struct Cluster {
    pub lookupd: Daemon,
    pub nsqds: Vec<Nsqd>,
    pub admin: Daemon,
}

impl Cluster {
    pub fn start(admin_args: &[&str]) -> Cluster {
        let lookupd = start_lookupd();
        let nsqds = vec![
            start_nsqd_with_lookupd(&lookupd),
            start_nsqd_with_lookupd(&lookupd),
        ];
        let mut args = vec![
            format!("--lookupd-http-address={}", lookupd.http_addr),
            "--http-client-request-timeout=2s".to_string(),
        ];
        args.extend(admin_args.iter().map(|s| s.to_string()));
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let admin = start_admin(&refs);
        let c = Cluster {
            lookupd,
            nsqds,
            admin,
        };
        c.wait_nodes(2);
        c
    }

    /// `broadcast_address:http_port` of nsqd `i` (its nsqadmin node name).
    pub fn node(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.nsqds[i].http_port)
    }

    /// Waits until nsqlookupd lists `n` nsqds.
    pub fn wait_nodes(&self, n: usize) {
        wait_for(
            Duration::from_secs(15),
            &format!("{n} nsqds registered with nsqlookupd"),
            || {
                let r = self.lookupd.get("/nodes");
                (r.status == 200 && r.json()["producers"].as_array().map_or(0, |a| a.len()) == n)
                    .then_some(())
            },
        );
    }

    /// Waits until nsqlookupd lists `n` producers of `topic`.
    pub fn wait_producers(&self, topic: &str, n: usize) {
        wait_for(
            Duration::from_secs(15),
            &format!("{n} producers of {topic} on nsqlookupd"),
            || {
                let r = self.lookupd.get(&format!("/lookup?topic={topic}"));
                (r.status == 200 && r.json()["producers"].as_array().map_or(0, |a| a.len()) == n)
                    .then_some(())
            },
        );
    }

    /// Waits until nsqlookupd knows channel `channel` of `topic`.
    /// Until nsqlookupd has `n` producers for the channel (its `/debug`):
    /// every nsqd's REGISTER has arrived, so none can land after a delete.
    pub fn wait_channel_producers(&self, topic: &str, channel: &str, n: usize) {
        let key = format!("channel:{topic}:{channel}");
        wait_for(
            Duration::from_secs(15),
            &format!("{n} producers of channel {topic}/{channel} on nsqlookupd"),
            || {
                let r = self.lookupd.get("/debug");
                (r.status == 200 && r.json()[&key].as_array().is_some_and(|a| a.len() == n))
                    .then_some(())
            },
        );
    }

    pub fn wait_channel(&self, topic: &str, channel: &str) {
        wait_for(
            Duration::from_secs(15),
            &format!("channel {topic}/{channel} on nsqlookupd"),
            || {
                let r = self.lookupd.get(&format!("/channels?topic={topic}"));
                (r.status == 200
                    && r.json()["channels"]
                        .as_array()
                        .is_some_and(|a| a.iter().any(|c| c == channel)))
                .then_some(())
            },
        );
    }
}

/// A tiny HTTP server that answers 200 to everything and records each request.
pub struct Recorder {
    pub addr: String,
    pub requests: Arc<Mutex<Vec<Recorded>>>,
}

#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

impl Recorder {
    pub fn start() -> Recorder {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let requests: Arc<Mutex<Vec<Recorded>>> = Arc::default();
        let reqs = requests.clone();
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                let reqs = reqs.clone();
                s.set_read_timeout(Some(Duration::from_secs(5))).ok();
                std::thread::spawn(move || serve_one(s, reqs));
            }
        });
        Recorder { addr, requests }
    }

    /// [`Recorder::start`] over HTTPS with `cfg`'s certificate.
    pub fn start_tls(cfg: Arc<rustls::ServerConfig>) -> Recorder {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let requests: Arc<Mutex<Vec<Recorded>>> = Arc::default();
        let reqs = requests.clone();
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                let (reqs, cfg) = (reqs.clone(), cfg.clone());
                s.set_read_timeout(Some(Duration::from_secs(5))).ok();
                std::thread::spawn(move || {
                    if let Ok(conn) = rustls::ServerConnection::new(cfg) {
                        serve_one(rustls::StreamOwned::new(conn, s), reqs);
                    }
                });
            }
        });
        Recorder { addr, requests }
    }

    /// Waits up to `timeout` for at least `n` requests; returns them all.
    pub fn wait(&self, n: usize, timeout: Duration) -> Vec<Recorded> {
        let deadline = Instant::now() + timeout;
        loop {
            let got = self.requests.lock().unwrap().clone();
            if got.len() >= n || Instant::now() > deadline {
                return got;
            }
            sleep_ms(20);
        }
    }
}

fn serve_one(mut s: impl Read + Write, reqs: Arc<Mutex<Vec<Recorded>>>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let (head_end, len) = loop {
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..i]).to_string();
            let len = head
                .lines()
                .find_map(|l| {
                    l.split_once(':')
                        .filter(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
                        .map(|(_, v)| v.trim().parse().unwrap_or(0))
                })
                .unwrap_or(0usize);
            break (i + 4, len);
        }
    };
    while buf.len() < head_end + len {
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let head = String::from_utf8_lossy(&buf[..head_end - 4]).to_string();
    let mut lines = head.split("\r\n");
    let first = lines.next().unwrap_or("");
    let mut parts = first.split(' ');
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("").to_string();
    let headers = lines
        .filter_map(|l| {
            l.split_once(':')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        })
        .collect();
    let body = buf[head_end..(head_end + len).min(buf.len())].to_vec();
    reqs.lock().unwrap().push(Recorded {
        method,
        path,
        headers,
        body,
    });
    let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    let _ = s.flush();
}

/// A fake nsqd (or any HTTP upstream): answers `GET <path>` (query ignored)
/// with the JSON `routes(port)` gives for that path, 404 otherwise. Returns its address.
pub fn fake_upstream(routes: impl FnOnce(u16) -> Vec<(&'static str, String)>) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let routes = Arc::new(routes(l.local_addr().unwrap().port()));
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let routes = routes.clone();
            std::thread::spawn(move || {
                s.set_read_timeout(Some(Duration::from_secs(5))).ok();
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&buf).to_string();
                let path = head
                    .split(' ')
                    .nth(1)
                    .unwrap_or("")
                    .split('?')
                    .next()
                    .unwrap_or("")
                    .to_string();
                let (status, body) = match routes.iter().find(|(p, _)| *p == path) {
                    Some((_, b)) => ("200 OK", b.clone()),
                    None => ("404 Not Found", r#"{"message":"NOT_FOUND"}"#.to_string()),
                };
                let resp = format!("HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
                let _ = s.write_all(resp.as_bytes());
            });
        }
    });
    addr
}

/// Checks that object `obj`'s keys are exactly `spec` in order, where keys
/// ending in `?` may be absent (nsqadmin's `omitempty` fields).
pub fn assert_keys(obj: &ojson::J, spec: &[&str], what: &str) {
    let keys = obj.keys();
    let mut i = 0;
    for s in spec {
        let (name, optional) = match s.strip_suffix('?') {
            Some(n) => (n, true),
            None => (*s, false),
        };
        if keys.get(i) == Some(&name) {
            i += 1;
        } else if !optional {
            panic!("{what}: expected key {name:?} at position {i}; keys are {keys:?}");
        }
    }
    assert_eq!(
        i,
        keys.len(),
        "{what}: unexpected extra keys {:?} (all keys {keys:?})",
        &keys[i..]
    );
}

pub const TOPIC_KEYS: &[&str] = &[
    "node",
    "hostname",
    "topic_name",
    "depth",
    "memory_depth",
    "backend_depth",
    "message_count",
    "delivery_msg_count",
    "zone_local_msg_count?",
    "region_local_msg_count?",
    "global_msg_count?",
    "nodes",
    "channels",
    "paused",
    "e2e_processing_latency",
];

pub const CHANNEL_KEYS: &[&str] = &[
    "node",
    "hostname",
    "topic_name",
    "channel_name",
    "depth",
    "memory_depth",
    "backend_depth",
    "in_flight_count",
    "deferred_count",
    "requeue_count",
    "timeout_count",
    "message_count",
    "delivery_msg_count?",
    "zone_local_msg_count?",
    "region_local_msg_count?",
    "global_msg_count?",
    "client_count",
    "nodes",
    "clients",
    "paused",
    "e2e_processing_latency",
];

pub const CLIENT_KEYS: &[&str] = &[
    "node",
    "remote_address",
    "version",
    "client_id",
    "hostname",
    "user_agent",
    "connect_ts",
    "connected",
    "in_flight_count",
    "ready_count",
    "finish_count",
    "requeue_count",
    "message_count",
    "sample_rate",
    "deflate",
    "snappy",
    "authed",
    "auth_identity",
    "auth_identity_url",
    "node_topology_region?",
    "node_topology_zone?",
    "topology_region?",
    "topology_zone?",
    "tls",
    "tls_cipher_suite",
    "tls_version",
    "tls_negotiated_protocol",
    "tls_negotiated_protocol_is_mutual",
];

pub const PRODUCER_KEYS: &[&str] = &[
    "remote_addresses",
    "remote_address",
    "hostname",
    "broadcast_address",
    "tcp_port",
    "http_port",
    "version",
    "topology_zone?",
    "topology_region?",
    "topics",
    "out_of_date",
];

pub const E2E_KEYS: &[&str] = &["count", "percentiles", "topic", "channel", "host"];

/// `spec` plus a trailing `message` key.
pub fn with_message<'a>(spec: &[&'a str]) -> Vec<&'a str> {
    let mut v = spec.to_vec();
    v.push("message");
    v
}

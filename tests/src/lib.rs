//! Black-box test harness for nsq-rs.
//!
//! Everything here treats the daemons as opaque binaries: start the real
//! executable on free 127.0.0.1 ports with a fresh data directory, talk to it
//! over real TCP (NSQ V2 protocol, byte for byte) and real HTTP/1.1, and kill it
//! afterwards. Nothing from the implementation crates is used, on purpose: the
//! expected bytes come from the spec (`/work/shared/spec`), not from the code
//! under test.
//!
//! Plain synchronous std code (`TcpStream` with timeouts); no async runtime.
//!
//! Parts:
//! * binary location: [`bin_dir`], [`bin_path`] (env `NSQ_BIN_DIR`, else
//!   `$CARGO_TARGET_DIR/debug`, else `<workspace>/target/debug`);
//! * [`Nsqd`]: a running nsqd child process (free ports, temp `--data-path`,
//!   waits for `GET /ping`, SIGTERM/SIGKILL + reap on drop);
//! * [`http_request`] and friends: a tiny HTTP/1.1 client (`Connection: close`);
//! * [`Conn`]: a raw V2 TCP client (magic, commands, frames, message parsing,
//!   closed-connection assertions);
//! * [`ojson`]: an order-preserving JSON parser used for key-order checks
//!   (serde_json's `preserve_order` feature is deliberately NOT enabled because
//!   Cargo feature unification would change the serde_json compiled into the
//!   daemons under test).
//!
//! nsqlookupd helpers live elsewhere (another engineer owns them).

#![forbid(unsafe_code)]

use std::fs;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub mod auth_server;
pub mod ledger;
pub mod netns;
pub mod pki;
mod ports;

pub use ports::{free_port, free_ports};

pub use serde_json;
pub use serde_json::Value;

// ---------------------------------------------------------------------------
// Locations
// ---------------------------------------------------------------------------

/// Workspace root = parent of this package's manifest dir.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// Directory holding the built binaries.
pub fn bin_dir() -> PathBuf {
    if let Ok(d) = std::env::var("NSQ_BIN_DIR") {
        if !d.is_empty() {
            return PathBuf::from(d);
        }
    }
    if let Ok(d) = std::env::var("CARGO_TARGET_DIR") {
        if !d.is_empty() {
            let p = PathBuf::from(d);
            let p = if p.is_absolute() {
                p
            } else {
                workspace_root().join(p)
            };
            return p.join("debug");
        }
    }
    workspace_root().join("target").join("debug")
}

/// Full path of a binary (e.g. `nsqd`). Panics with a helpful message if absent.
pub fn bin_path(name: &str) -> PathBuf {
    let p = bin_dir().join(name);
    assert!(
        p.exists(),
        "binary {} not found (build it with `cargo build --workspace --bins`, or set NSQ_BIN_DIR)",
        p.display()
    );
    p
}

/// `tests/fixtures/<name>` (copies of the spec samples, so the suite is self-contained).
pub fn fixture(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name);
    fs::read_to_string(&p).unwrap_or_else(|e| panic!("reading fixture {}: {e}", p.display()))
}

/// Sleep helper.
pub fn sleep_ms(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}

/// Poll `f` every 50 ms until it returns `Some`, or panic after `timeout` with `what`.
pub fn wait_for<T>(timeout: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for: {what}");
        }
        sleep_ms(50);
    }
}

/// Current Unix time in nanoseconds.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

/// Current Unix time in seconds.
pub fn now_secs() -> i64 {
    now_ns() / 1_000_000_000
}

// ---------------------------------------------------------------------------
// Process helpers
// ---------------------------------------------------------------------------

/// Send a signal (`libc::SIGTERM`, ...) to a pid; a bad pid or signal
/// number is ignored (the process is gone, or the test is wrong).
pub fn send_signal(pid: u32, sig: i32) {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw);
    let sig = rustix::process::Signal::from_named_raw(sig);
    if let (Some(pid), Some(sig)) = (pid, sig) {
        let _ = rustix::process::kill_process(pid, sig);
    }
}

/// SIGSTOP `pid` and wait (up to 10 s) until every one of its threads is
/// stopped. `kill` returns once one thread is told; the group stop reaches
/// the others only when that thread next runs, and on a loaded machine the
/// rest can go on serving requests for a while meanwhile (seen: a frozen
/// nsqd answering nsqadmin's `/stats` in CI). A process that is gone is
/// left alone.
pub fn freeze(pid: u32) {
    send_signal(pid, libc::SIGSTOP);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !all_threads_stopped(pid) {
        assert!(
            Instant::now() < deadline,
            "pid {pid} not stopped 10 s after SIGSTOP"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Every thread of `pid` in state `T` (or the process gone).
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    tasks.flatten().all(|t| {
        // `pid (comm) S ...`: the state follows the last ')'.
        fs::read_to_string(t.path().join("stat")).map_or(true, |st| {
            st.rsplit_once(')').is_some_and(|(_, rest)| {
                matches!(
                    rest.trim_start().chars().next(),
                    Some('T' | 't' | 'Z' | 'X')
                )
            })
        })
    })
}

/// Wait for a child with a timeout (polling). `None` on timeout.
pub fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(st)) => return Some(st),
            Ok(None) => {}
            Err(e) => panic!("try_wait: {e}"),
        }
        if Instant::now() >= deadline {
            return None;
        }
        sleep_ms(20);
    }
}

/// SIGTERM, wait `grace`, then SIGKILL; always reaps.
pub fn terminate(child: &mut Child, grace: Duration) -> ExitStatus {
    if let Ok(Some(st)) = child.try_wait() {
        return st;
    }
    send_signal(child.id(), libc::SIGTERM);
    if let Some(st) = wait_timeout(child, grace) {
        return st;
    }
    let _ = child.kill(); // SIGKILL, by pid
    child.wait().expect("wait after SIGKILL")
}

/// Output of a binary run to completion (see [`run_bin`]).
#[derive(Debug)]
pub struct RunOutput {
    pub status: Option<ExitStatus>, // None = timed out (and was killed)
    pub stdout: String,
    pub stderr: String,
}

/// Run `<bin_dir>/<name> args...` to completion (killed after `timeout`).
pub fn run_bin(name: &str, args: &[&str], timeout: Duration) -> RunOutput {
    let dir = tempfile::tempdir().unwrap();
    let out_p = dir.path().join("stdout");
    let err_p = dir.path().join("stderr");
    let mut child = Command::new(bin_path(name))
        .args(args)
        .stdin(Stdio::null())
        .stdout(fs::File::create(&out_p).unwrap())
        .stderr(fs::File::create(&err_p).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
    let status = wait_timeout(&mut child, timeout);
    if status.is_none() {
        terminate(&mut child, Duration::from_secs(2));
    }
    RunOutput {
        status,
        stdout: fs::read_to_string(&out_p).unwrap_or_default(),
        stderr: fs::read_to_string(&err_p).unwrap_or_default(),
    }
}

/// Runs nsqd with `args` after its listeners on free loopback ports and a
/// temporary data path, to completion (killed after `timeout`): for starts
/// that must fail.
pub fn run_nsqd_once(args: &[&str], timeout: Duration) -> RunOutput {
    let dir = tempfile::tempdir().unwrap();
    let tcp = format!("--tcp-address=127.0.0.1:{}", free_port());
    let http = format!("--http-address=127.0.0.1:{}", free_port());
    let dp = format!("--data-path={}", dir.path().display());
    let mut all: Vec<&str> = vec![&tcp, &http, &dp];
    all.extend_from_slice(args);
    run_bin("nsqd", &all, timeout)
}

// ---------------------------------------------------------------------------
// nsqd process
// ---------------------------------------------------------------------------

/// Addresses picked for one nsqd start (see [`Nsqd::start_with`]).
pub struct Ports {
    pub tcp: String,
    pub http: String,
    pub https: String,
    pub data_path: PathBuf,
}

/// The listener and data-path flags every started nsqd gets, then `extra`.
fn default_args(p: &Ports, extra: &[String]) -> Vec<String> {
    let mut args = vec![
        format!("--tcp-address={}", p.tcp),
        format!("--http-address={}", p.http),
        format!("--https-address={}", p.https),
        format!("--data-path={}", p.data_path.display()),
    ];
    args.extend(extra.iter().cloned());
    args
}

/// A running nsqd. Killed (SIGTERM, then SIGKILL after a grace) and reaped on drop.
pub struct Nsqd {
    child: Option<Child>,
    pid: u32,
    /// `127.0.0.1:<port>` of the TCP listener.
    pub tcp_addr: String,
    /// `127.0.0.1:<port>` of the HTTP listener.
    pub http_addr: String,
    /// `127.0.0.1:<port>` given as `--https-address` (only bound when TLS is configured).
    pub https_addr: String,
    pub tcp_port: u16,
    pub http_port: u16,
    data_path: PathBuf,
    _data_dir: Option<tempfile::TempDir>,
    log_dir: tempfile::TempDir,
    args: Vec<String>,
    exit_status: Option<ExitStatus>,
}

impl Nsqd {
    /// Start nsqd with a fresh temporary `--data-path` plus `extra` flags.
    pub fn start(extra: &[&str]) -> Nsqd {
        let dir = tempfile::Builder::new()
            .prefix("nsqd-data-")
            .tempdir()
            .unwrap();
        let mut n = Nsqd::start_in(dir.path(), extra);
        n._data_dir = Some(dir);
        n
    }

    /// Start nsqd on the given (caller-owned) `--data-path`.
    pub fn start_in(data_path: &Path, extra: &[&str]) -> Nsqd {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        Nsqd::start_with(data_path, move |p: &Ports| default_args(p, &extra))
    }

    /// Start nsqd with a fully custom argument list, built from freshly picked
    /// free addresses (retried on failure, e.g. a port race).
    pub fn start_with(data_path: &Path, build: impl Fn(&Ports) -> Vec<String>) -> Nsqd {
        let mut last_err = String::new();
        for _attempt in 0..6 {
            match Nsqd::try_start_with(data_path, &build) {
                Ok(n) => return n,
                Err(e) => {
                    // Most likely a port race (bound by someone between our probe and
                    // nsqd's bind): retry with fresh ports. Real startup failures will
                    // repeat and be reported below.
                    last_err = e;
                    sleep_ms(100);
                }
            }
        }
        panic!("nsqd failed to start (6 attempts); last error:\n{last_err}");
    }

    /// One attempt with the default flags: spawn and wait up to 20 s for `GET /ping` → 200 `OK`.
    pub fn try_start_in(data_path: &Path, extra: &[&str]) -> Result<Nsqd, String> {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        Nsqd::try_start_with(data_path, &move |p: &Ports| default_args(p, &extra))
    }

    /// [`Nsqd::start_in`] with the `nsqd` binary of another build (e.g.
    /// the previous one, for a rolling upgrade), retried on a port race.
    pub fn start_in_bin(bin_dir: &Path, data_path: &Path, extra: &[&str]) -> Nsqd {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let bin = bin_dir.join("nsqd");
        let mut last_err = String::new();
        for _attempt in 0..6 {
            let ports = (free_port(), free_port(), free_port());
            if ports.0 == ports.1 || ports.1 == ports.2 || ports.0 == ports.2 {
                continue;
            }
            let build = |p: &Ports| default_args(p, &extra);
            match Nsqd::spawn_bin(&bin, data_path, ports.0, ports.1, ports.2, &build) {
                Ok(n) => return n,
                Err(e) => {
                    last_err = e;
                    sleep_ms(100);
                }
            }
        }
        panic!(
            "{} failed to start (6 attempts); last error:\n{last_err}",
            bin.display()
        );
    }

    /// One attempt with custom arguments.
    pub fn try_start_with(
        data_path: &Path,
        build: &dyn Fn(&Ports) -> Vec<String>,
    ) -> Result<Nsqd, String> {
        let tcp_port = free_port();
        let mut http_port = free_port();
        while http_port == tcp_port {
            http_port = free_port();
        }
        let mut https_port = free_port();
        while https_port == tcp_port || https_port == http_port {
            https_port = free_port();
        }
        Nsqd::spawn_on(data_path, tcp_port, http_port, https_port, build)
    }

    /// Spawns nsqd on the given loopback ports and waits up to 20 s for
    /// `GET /ping` → `OK` and the TCP listener.
    fn spawn_on(
        data_path: &Path,
        tcp_port: u16,
        http_port: u16,
        https_port: u16,
        build: &dyn Fn(&Ports) -> Vec<String>,
    ) -> Result<Nsqd, String> {
        let bin = bin_path("nsqd");
        Nsqd::spawn_bin(&bin, data_path, tcp_port, http_port, https_port, build)
    }

    fn spawn_bin(
        bin: &Path,
        data_path: &Path,
        tcp_port: u16,
        http_port: u16,
        https_port: u16,
        build: &dyn Fn(&Ports) -> Vec<String>,
    ) -> Result<Nsqd, String> {
        let tcp_addr = format!("127.0.0.1:{tcp_port}");
        let http_addr = format!("127.0.0.1:{http_port}");
        let https_addr = format!("127.0.0.1:{https_port}");
        let args = build(&Ports {
            tcp: tcp_addr.clone(),
            http: http_addr.clone(),
            https: https_addr.clone(),
            data_path: data_path.to_path_buf(),
        });

        let log_dir = tempfile::Builder::new()
            .prefix("nsqd-log-")
            .tempdir()
            .unwrap();
        let child = Command::new(bin)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(fs::File::create(log_dir.path().join("stdout")).unwrap())
            .stderr(fs::File::create(log_dir.path().join("stderr")).unwrap())
            .spawn()
            .map_err(|e| format!("spawn nsqd: {e}"))?;
        let pid = child.id();
        let mut n = Nsqd {
            child: Some(child),
            pid,
            tcp_addr,
            http_addr,
            https_addr,
            tcp_port,
            http_port,
            data_path: data_path.to_path_buf(),
            _data_dir: None,
            log_dir,
            args,
            exit_status: None,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(st) = n.child.as_mut().unwrap().try_wait().unwrap() {
                n.exit_status = Some(st);
                n.child = None;
                return Err(format!(
                    "nsqd exited during startup with {st}\nargs: {:?}\nstderr:\n{}\nstdout:\n{}",
                    n.args,
                    n.stderr(),
                    n.stdout()
                ));
            }
            if let Ok(r) = http_request_timeout(
                &n.http_addr,
                "GET",
                "/ping",
                &[],
                None,
                Duration::from_secs(2),
            ) {
                if r.status == 200 && r.body == b"OK" {
                    // TCP must be up too.
                    if TcpStream::connect(&n.tcp_addr).is_ok() {
                        return Ok(n);
                    }
                }
            }
            if Instant::now() >= deadline {
                let log = format!("stderr:\n{}\nstdout:\n{}", n.stderr(), n.stdout());
                n.kill();
                return Err(format!(
                    "nsqd did not answer GET /ping within 20 s\nargs: {:?}\n{log}",
                    n.args
                ));
            }
            sleep_ms(50);
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn data_path(&self) -> &Path {
        &self.data_path
    }

    pub fn args(&self) -> &[String] {
        &self.args
    }

    /// nsqd's stderr so far.
    pub fn stderr(&self) -> String {
        fs::read_to_string(self.log_dir.path().join("stderr")).unwrap_or_default()
    }

    /// nsqd's stdout so far.
    pub fn stdout(&self) -> String {
        fs::read_to_string(self.log_dir.path().join("stdout")).unwrap_or_default()
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            None => false,
            Some(c) => match c.try_wait().unwrap() {
                None => true,
                Some(st) => {
                    self.exit_status = Some(st);
                    self.child = None;
                    false
                }
            },
        }
    }

    /// Send SIGTERM and wait (up to `timeout`) for the exit status.
    /// Panics if it has not exited by then (after SIGKILLing it).
    pub fn sigterm_and_wait(&mut self, timeout: Duration) -> ExitStatus {
        if let Some(st) = self.exit_status {
            return st;
        }
        let child = self.child.as_mut().expect("nsqd child");
        send_signal(child.id(), libc::SIGTERM);
        match wait_timeout(child, timeout) {
            Some(st) => {
                self.exit_status = Some(st);
                self.child = None;
                st
            }
            None => {
                let _ = child.kill();
                let _ = child.wait();
                self.child = None;
                panic!(
                    "nsqd did not exit within {timeout:?} after SIGTERM\nstderr:\n{}",
                    self.stderr()
                );
            }
        }
    }

    /// Wait (up to `timeout`) for the process to exit on its own; `None` if still running.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        if let Some(st) = self.exit_status {
            return Some(st);
        }
        let child = self.child.as_mut()?;
        let st = wait_timeout(child, timeout)?;
        self.exit_status = Some(st);
        self.child = None;
        Some(st)
    }

    /// Kill (SIGTERM, 3 s grace, SIGKILL) and reap.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let st = terminate(&mut c, Duration::from_secs(3));
            self.exit_status = Some(st);
        }
    }

    /// SIGKILL immediately (crash simulation) and reap.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            self.exit_status = Some(c.wait().unwrap());
        }
    }

    // ---- conveniences ----

    /// New V2 TCP connection (magic already sent).
    pub fn connect(&self) -> Conn {
        Conn::connect(&self.tcp_addr)
    }

    pub fn get(&self, path: &str) -> HttpResponse {
        http_get(&self.http_addr, path)
    }

    pub fn post(&self, path: &str, body: &[u8]) -> HttpResponse {
        http_post(&self.http_addr, path, body)
    }

    pub fn put(&self, path: &str, body: &[u8]) -> HttpResponse {
        http_request(&self.http_addr, "PUT", path, &[], Some(body)).expect("HTTP PUT")
    }

    /// `GET /stats?format=json` (+ `&extra` if non-empty), parsed.
    pub fn stats(&self, extra_query: &str) -> Value {
        let path = if extra_query.is_empty() {
            "/stats?format=json".to_string()
        } else {
            format!("/stats?format=json&{extra_query}")
        };
        let r = self.get(&path);
        assert_eq!(r.status, 200, "GET {path}: {}", r.text());
        r.json()
    }

    /// Stats of one topic (None if absent).
    pub fn topic_stats(&self, topic: &str) -> Option<Value> {
        find_topic(&self.stats(""), topic).cloned()
    }

    /// Stats of one channel (None if absent).
    pub fn channel_stats(&self, topic: &str, channel: &str) -> Option<Value> {
        find_channel(&self.stats(""), topic, channel).cloned()
    }

    /// Check the daemon still serves: `/ping` → OK, and a fresh TCP connection can PUB.
    pub fn assert_alive(&self) {
        let r = self.get("/ping");
        assert_eq!(
            (r.status, r.body.as_slice()),
            (200, &b"OK"[..]),
            "GET /ping after the previous client"
        );
        let mut c = self.connect();
        c.send(&pub_cmd("alive_check", b"x"));
        c.expect_ok();
    }

    /// Publish one message over HTTP (asserts 200 OK).
    pub fn http_pub(&self, topic: &str, body: &[u8]) {
        let r = self.post(&format!("/pub?topic={topic}"), body);
        assert_eq!(
            (r.status, r.text().as_str()),
            (200, "OK"),
            "POST /pub?topic={topic}"
        );
    }

    /// Read `<data-path>/nsqd.dat` if present.
    pub fn read_metadata(&self) -> Option<String> {
        fs::read_to_string(self.data_path.join("nsqd.dat")).ok()
    }
}

impl Drop for Nsqd {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Find a topic object in a `/stats?format=json` document.
pub fn find_topic<'a>(stats: &'a Value, topic: &str) -> Option<&'a Value> {
    stats["topics"]
        .as_array()?
        .iter()
        .find(|t| t["topic_name"] == topic)
}

/// Find a channel object in a `/stats?format=json` document.
pub fn find_channel<'a>(stats: &'a Value, topic: &str, channel: &str) -> Option<&'a Value> {
    find_topic(stats, topic)?["channels"]
        .as_array()?
        .iter()
        .find(|c| c["channel_name"] == channel)
}

/// Integer field helper (panics with context).
pub fn int(v: &Value, key: &str) -> i64 {
    v[key]
        .as_i64()
        .unwrap_or_else(|| panic!("field {key:?} is not an integer in {v}"))
}

// ---------------------------------------------------------------------------
// HTTP/1.1 client
// ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
pub struct HttpResponse {
    pub status: u16,
    pub reason: String,
    /// Header (name, value) pairs in received order, names as sent.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// First header with this name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("response body is not JSON ({e}): {:?}", self.text()))
    }

    /// Assert the NSQ "V1" JSON error convention: status, body `{"message":"<msg>"}`,
    /// `Content-Type: application/json; charset=utf-8`, `X-NSQ-Content-Type: nsq; version=1.0`.
    pub fn assert_error(&self, status: u16, msg: &str) {
        let want = format!("{{\"message\":\"{msg}\"}}");
        assert_eq!(
            (self.status, self.text()),
            (status, want),
            "expected {status} {{\"message\":\"{msg}\"}}; headers: {:?}",
            self.headers
        );
        assert_eq!(
            self.header("X-NSQ-Content-Type"),
            Some("nsq; version=1.0"),
            "X-NSQ-Content-Type on error {msg}; headers {:?}",
            self.headers
        );
        assert_eq!(
            self.header("Content-Type"),
            Some("application/json; charset=utf-8"),
            "Content-Type on error {msg}; headers {:?}",
            self.headers
        );
    }
}

/// One request with `Connection: close`; 10 s timeout.
pub fn http_request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> io::Result<HttpResponse> {
    http_request_timeout(addr, method, path, headers, body, Duration::from_secs(10))
}

/// Build the raw request bytes (Content-Length added when a body is given,
/// unless the caller supplied one).
pub fn build_http_request(
    method: &str,
    path: &str,
    host: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Vec<u8> {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nUser-Agent: nsq-tests\r\n");
    let has_cl = headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("content-length"));
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        if !has_cl {
            req.push_str(&format!("Content-Length: {}\r\n", b.len()));
        }
    } else if (method == "POST" || method == "PUT") && !has_cl {
        req.push_str("Content-Length: 0\r\n");
    }
    req.push_str("\r\n");
    let mut out = req.into_bytes();
    if let Some(b) = body {
        out.extend_from_slice(b);
    }
    out
}

pub fn http_request_timeout(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
    timeout: Duration,
) -> io::Result<HttpResponse> {
    let raw = build_http_request(method, path, addr, headers, body);
    http_raw(addr, &raw, timeout)
}

/// Send raw request bytes, read until the server closes, parse the response.
/// Write errors are ignored (the server may answer early and close, e.g. 413);
/// a reset after some bytes were read still yields what was read.
pub fn http_raw(addr: &str, raw: &[u8], timeout: Duration) -> io::Result<HttpResponse> {
    // The connect is bounded too: a partitioned host (cluster tests) never
    // answers the SYN, and the kernel would retry for minutes.
    let sock = std::net::ToSocketAddrs::to_socket_addrs(addr)?
        .next()
        .ok_or_else(|| io::Error::new(ErrorKind::InvalidInput, format!("no address for {addr}")))?;
    let mut s = TcpStream::connect_timeout(&sock, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    let _ = s.write_all(raw);
    let _ = s.flush();
    let mut buf = Vec::new();
    let deadline = Instant::now() + timeout;
    let mut chunk = [0u8; 65536];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                // Stop early when a complete response with a length is in hand.
                if let Some(done) = response_complete(&buf) {
                    if done {
                        break;
                    }
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if is_closed_err(&e) && !buf.is_empty() => break,
            Err(e) => return Err(e),
        }
        if Instant::now() >= deadline {
            return Err(io::Error::new(ErrorKind::TimedOut, "HTTP response timeout"));
        }
    }
    parse_http_response(&buf)
}

fn find_subslice(h: &[u8], n: &[u8]) -> Option<usize> {
    h.windows(n.len()).position(|w| w == n)
}

/// Some(true) if `buf` holds a complete response whose length is known
/// (Content-Length or complete chunked body), Some(false) if not yet, None if unknown framing.
fn response_complete(buf: &[u8]) -> Option<bool> {
    let end = match find_subslice(buf, b"\r\n\r\n") {
        Some(e) => e,
        None => return Some(false),
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_string();
    let body = &buf[end + 4..];
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    if status == 204 || status == 304 || (100..200).contains(&status) {
        return Some(true);
    }
    let mut chunked = false;
    let mut cl: Option<usize> = None;
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            let k = k.trim().to_ascii_lowercase();
            let v = v.trim();
            if k == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked") {
                chunked = true;
            }
            if k == "content-length" {
                cl = v.parse().ok();
            }
        }
    }
    if chunked {
        return Some(decode_chunked(body).is_some());
    }
    cl.map(|n| body.len() >= n)
}

fn decode_chunked(mut b: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let le = find_subslice(b, b"\r\n")?;
        let size_s = String::from_utf8_lossy(&b[..le]).to_string();
        let size_s = size_s.split(';').next().unwrap().trim().to_string();
        let size = usize::from_str_radix(&size_s, 16).ok()?;
        b = &b[le + 2..];
        if size == 0 {
            return Some(out);
        }
        if b.len() < size + 2 {
            return None;
        }
        out.extend_from_slice(&b[..size]);
        b = &b[size + 2..];
    }
}

pub fn parse_http_response(buf: &[u8]) -> io::Result<HttpResponse> {
    let bad = |m: &str| {
        io::Error::new(
            ErrorKind::InvalidData,
            format!("{m}: {:?}", String::from_utf8_lossy(buf)),
        )
    };
    let end = find_subslice(buf, b"\r\n\r\n").ok_or_else(|| bad("no header terminator"))?;
    let head = String::from_utf8_lossy(&buf[..end]).to_string();
    let rest = &buf[end + 4..];
    let mut lines = head.split("\r\n");
    let status_line = lines.next().ok_or_else(|| bad("empty response"))?;
    let mut parts = status_line.splitn(3, ' ');
    let _ver = parts.next();
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("bad status line"))?;
    let reason = parts.next().unwrap_or("").to_string();
    let mut headers = Vec::new();
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let chunked = headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("transfer-encoding") && v.to_ascii_lowercase().contains("chunked")
    });
    let cl: Option<usize> = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok());
    let body = if chunked {
        decode_chunked(rest).ok_or_else(|| bad("bad chunked body"))?
    } else if let Some(n) = cl {
        rest[..n.min(rest.len())].to_vec()
    } else {
        rest.to_vec()
    };
    Ok(HttpResponse {
        status,
        reason,
        headers,
        body,
    })
}

pub fn http_get(addr: &str, path: &str) -> HttpResponse {
    http_request(addr, "GET", path, &[], None).unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

pub fn http_post(addr: &str, path: &str, body: &[u8]) -> HttpResponse {
    http_request(addr, "POST", path, &[], Some(body)).unwrap_or_else(|e| panic!("POST {path}: {e}"))
}

pub fn http_put(addr: &str, path: &str, body: &[u8]) -> HttpResponse {
    http_request(addr, "PUT", path, &[], Some(body)).unwrap_or_else(|e| panic!("PUT {path}: {e}"))
}

// ---------------------------------------------------------------------------
// V2 TCP protocol helpers
// ---------------------------------------------------------------------------

pub const MAGIC_V2: &[u8; 4] = b"  V2";
/// How long a [`Conn`] waits for a frame nsqd must send (its default
/// `timeout`: `recv`, `expect_*`, a fatal error's close). A wait for
/// something that must come, sized for the test command's own load (every
/// suite side by side with the cluster under faults, pytest and the
/// browser on 2 cores), not for a quiet machine: with 5 s, a fresh-clone
/// run timed out in `long_defer` and `load` waiting for a PUB's or DPUB's
/// `OK`, which each suite gets within a second when run alone. A passing
/// test never waits it out; tests that judge timing pass their own bounds.
pub const FRAME_WAIT: Duration = Duration::from_secs(30);
pub const FRAME_RESPONSE: i32 = 0;
pub const FRAME_ERROR: i32 = 1;
pub const FRAME_MESSAGE: i32 = 2;
pub const HEARTBEAT: &[u8] = b"_heartbeat_";

/// Encode a frame: `[be32 4+len][be32 type][data]`.
pub fn frame(ftype: i32, data: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(8 + data.len());
    v.extend_from_slice(&((4 + data.len()) as i32).to_be_bytes());
    v.extend_from_slice(&ftype.to_be_bytes());
    v.extend_from_slice(data);
    v
}

/// `<line>\n<be32 size><body>`.
pub fn body_cmd(line: &str, body: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(line.len() + 5 + body.len());
    v.extend_from_slice(line.as_bytes());
    v.push(b'\n');
    v.extend_from_slice(&(body.len() as i32).to_be_bytes());
    v.extend_from_slice(body);
    v
}

pub fn pub_cmd(topic: &str, body: &[u8]) -> Vec<u8> {
    body_cmd(&format!("PUB {topic}"), body)
}

pub fn dpub_cmd(topic: &str, defer_ms: i64, body: &[u8]) -> Vec<u8> {
    body_cmd(&format!("DPUB {topic} {defer_ms}"), body)
}

/// MPUB body (without the leading body size): `<be32 count>(<be32 size><bytes>)*`.
/// Also the `/mpub?binary=true` HTTP body format.
pub fn mpub_body(bodies: &[&[u8]]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&(bodies.len() as i32).to_be_bytes());
    for b in bodies {
        v.extend_from_slice(&(b.len() as i32).to_be_bytes());
        v.extend_from_slice(b);
    }
    v
}

pub fn mpub_cmd(topic: &str, bodies: &[&[u8]]) -> Vec<u8> {
    body_cmd(&format!("MPUB {topic}"), &mpub_body(bodies))
}

pub fn identify_cmd(json: &str) -> Vec<u8> {
    body_cmd("IDENTIFY", json.as_bytes())
}

/// A server frame.
#[derive(Clone, PartialEq, Eq)]
pub struct Frame {
    pub ftype: i32,
    pub data: Vec<u8>,
}

impl Frame {
    pub fn bytes(&self) -> Vec<u8> {
        frame(self.ftype, &self.data)
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.data).into_owned()
    }
    pub fn is_heartbeat(&self) -> bool {
        self.ftype == FRAME_RESPONSE && self.data == HEARTBEAT
    }
    pub fn msg(&self) -> Msg {
        assert_eq!(
            self.ftype, FRAME_MESSAGE,
            "expected a message frame, got {self:?}"
        );
        Msg::parse(&self.data)
    }
}

impl std::fmt::Debug for Frame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.ftype {
            0 => "response",
            1 => "error",
            2 => "message",
            _ => "unknown",
        };
        if self.ftype == FRAME_MESSAGE && self.data.len() >= 26 {
            let m = Msg::parse(&self.data);
            write!(f, "Frame(message {m:?})")
        } else {
            write!(
                f,
                "Frame({kind}={}, {:?})",
                self.ftype,
                String::from_utf8_lossy(&self.data)
            )
        }
    }
}

/// A decoded message (data of a type-2 frame).
#[derive(Clone, PartialEq, Eq)]
pub struct Msg {
    pub ts: i64,
    pub attempts: u16,
    pub id: String,
    pub id_bytes: [u8; 16],
    pub body: Vec<u8>,
}

impl Msg {
    pub fn parse(d: &[u8]) -> Msg {
        assert!(d.len() >= 26, "message data shorter than 26 bytes: {d:?}");
        let ts = i64::from_be_bytes(d[0..8].try_into().unwrap());
        let attempts = u16::from_be_bytes(d[8..10].try_into().unwrap());
        let id_bytes: [u8; 16] = d[10..26].try_into().unwrap();
        Msg {
            ts,
            attempts,
            id: String::from_utf8_lossy(&id_bytes).into_owned(),
            id_bytes,
            body: d[26..].to_vec(),
        }
    }
    pub fn body_str(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Msg{{ts:{}, attempts:{}, id:{:?}, body:{:?}}}",
            self.ts,
            self.attempts,
            self.id,
            String::from_utf8_lossy(&self.body)
        )
    }
}

/// Result of a bounded read.
#[derive(Debug)]
pub enum ReadOutcome {
    Frame(Frame),
    Timeout,
    /// Server closed (EOF or reset). Holds any trailing bytes that did not form a frame.
    Closed(Vec<u8>),
}

/// Is this I/O error a "connection closed by peer" error (reset/aborted/broken pipe)?
pub fn is_closed_err(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::BrokenPipe
            | ErrorKind::UnexpectedEof
    )
}

fn is_timeout_err(e: &io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

/// A raw V2 TCP client connection.
pub struct Conn {
    pub stream: TcpStream,
    buf: Vec<u8>,
    closed: bool,
    /// Default timeout for the `expect_*` helpers.
    pub timeout: Duration,
    /// Number of heartbeats skipped (and answered with NOP) by [`Conn::recv`].
    pub heartbeats_seen: usize,
}

impl Conn {
    /// Connect and send the `"  V2"` magic.
    pub fn connect(addr: &str) -> Conn {
        let mut c = Conn::connect_raw(addr);
        c.send(MAGIC_V2);
        c
    }

    /// Connect without sending anything.
    pub fn connect_raw(addr: &str) -> Conn {
        let stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        stream.set_nodelay(true).ok();
        stream.set_write_timeout(Some(Duration::from_secs(10))).ok();
        Conn {
            stream,
            buf: Vec::new(),
            closed: false,
            timeout: FRAME_WAIT,
            heartbeats_seen: 0,
        }
    }

    /// Write raw bytes (panics on failure).
    pub fn send(&mut self, bytes: &[u8]) {
        self.stream
            .write_all(bytes)
            .unwrap_or_else(|e| panic!("write {} bytes: {e}", bytes.len()));
    }

    /// Write raw bytes, returning the error instead of panicking (server may have closed).
    pub fn try_send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Send a command line (a `\n` is appended).
    pub fn cmd(&mut self, line: &str) {
        let mut v = line.as_bytes().to_vec();
        v.push(b'\n');
        self.send(&v);
    }

    pub fn nop(&mut self) {
        self.cmd("NOP");
    }

    pub fn sub(&mut self, topic: &str, channel: &str) {
        self.cmd(&format!("SUB {topic} {channel}"));
        self.expect_ok();
    }

    pub fn rdy(&mut self, n: i64) {
        self.cmd(&format!("RDY {n}"));
    }

    pub fn fin(&mut self, id: &str) {
        self.cmd(&format!("FIN {id}"));
    }

    pub fn req(&mut self, id: &str, ms: i64) {
        self.cmd(&format!("REQ {id} {ms}"));
    }

    pub fn touch(&mut self, id: &str) {
        self.cmd(&format!("TOUCH {id}"));
    }

    /// PUB and expect `OK`.
    pub fn publish(&mut self, topic: &str, body: &[u8]) {
        self.send(&pub_cmd(topic, body));
        self.expect_ok();
    }

    /// MPUB and expect `OK`.
    pub fn mpublish(&mut self, topic: &str, bodies: &[&[u8]]) {
        self.send(&mpub_cmd(topic, bodies));
        self.expect_ok();
    }

    /// IDENTIFY and return the response frame (must be a response frame).
    pub fn identify(&mut self, json: &str) -> Frame {
        self.send(&identify_cmd(json));
        let f = self.recv();
        assert_eq!(f.ftype, FRAME_RESPONSE, "IDENTIFY {json} answered {f:?}");
        f
    }

    fn parse_frame(&mut self) -> Option<Frame> {
        if self.buf.len() < 4 {
            return None;
        }
        let size = i32::from_be_bytes(self.buf[0..4].try_into().unwrap());
        assert!(
            size >= 4,
            "invalid frame size {size} (buffer {:?})",
            self.buf
        );
        let total = 4 + size as usize;
        if self.buf.len() < total {
            return None;
        }
        let ftype = i32::from_be_bytes(self.buf[4..8].try_into().unwrap());
        let data = self.buf[8..total].to_vec();
        self.buf.drain(..total);
        Some(Frame { ftype, data })
    }

    /// Read one frame within `timeout` (heartbeats are returned like any frame).
    pub fn try_read_frame(&mut self, timeout: Duration) -> ReadOutcome {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(f) = self.parse_frame() {
                return ReadOutcome::Frame(f);
            }
            if self.closed {
                return ReadOutcome::Closed(self.buf.clone());
            }
            let now = Instant::now();
            if now >= deadline {
                return ReadOutcome::Timeout;
            }
            let rem = (deadline - now).max(Duration::from_millis(1));
            self.stream.set_read_timeout(Some(rem)).unwrap();
            let mut chunk = [0u8; 65536];
            match self.stream.read(&mut chunk) {
                Ok(0) => self.closed = true,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if is_timeout_err(&e) => {}
                Err(e) if is_closed_err(&e) => self.closed = true,
                Err(e) => panic!("read: {e}"),
            }
        }
    }

    /// Read one frame (heartbeats included) or panic after `self.timeout`.
    pub fn read_frame(&mut self) -> Frame {
        match self.try_read_frame(self.timeout) {
            ReadOutcome::Frame(f) => f,
            ReadOutcome::Timeout => panic!("timed out ({:?}) waiting for a frame", self.timeout),
            ReadOutcome::Closed(rest) => {
                panic!("connection closed while waiting for a frame (trailing bytes {rest:?})")
            }
        }
    }

    /// Next frame within `timeout` that is not a heartbeat; heartbeats are
    /// answered with `NOP`. `None` on timeout; panics if the connection closes.
    pub fn recv_timeout(&mut self, timeout: Duration) -> Option<Frame> {
        let deadline = Instant::now() + timeout;
        loop {
            let rem = deadline.saturating_duration_since(Instant::now());
            match self.try_read_frame(rem) {
                ReadOutcome::Frame(f) if f.is_heartbeat() => {
                    self.heartbeats_seen += 1;
                    let _ = self.try_send(b"NOP\n");
                }
                ReadOutcome::Frame(f) => return Some(f),
                ReadOutcome::Timeout => return None,
                ReadOutcome::Closed(rest) => {
                    panic!("connection closed unexpectedly (trailing bytes {rest:?})")
                }
            }
        }
    }

    /// Next non-heartbeat frame or panic after `self.timeout`.
    pub fn recv(&mut self) -> Frame {
        let t = self.timeout;
        self.recv_timeout(t)
            .unwrap_or_else(|| panic!("timed out ({t:?}) waiting for a frame"))
    }

    /// Expect exactly the response frame `F(0, data)`.
    pub fn expect_response(&mut self, data: &[u8]) {
        let f = self.recv();
        assert_eq!(
            f.bytes(),
            frame(FRAME_RESPONSE, data),
            "expected response {:?}, got {f:?}",
            String::from_utf8_lossy(data)
        );
    }

    /// Expect `F(0,"OK")`, i.e. exactly `00 00 00 06 00 00 00 00 4F 4B`.
    pub fn expect_ok(&mut self) {
        let f = self.recv();
        assert_eq!(
            f.bytes(),
            vec![0, 0, 0, 6, 0, 0, 0, 0, b'O', b'K'],
            "expected OK frame, got {f:?}"
        );
    }

    /// Expect a message frame and decode it.
    pub fn expect_msg(&mut self) -> Msg {
        let f = self.recv();
        assert_eq!(f.ftype, FRAME_MESSAGE, "expected a message, got {f:?}");
        f.msg()
    }

    /// Expect a message frame within `timeout`.
    pub fn expect_msg_within(&mut self, timeout: Duration) -> Msg {
        match self.recv_timeout(timeout) {
            Some(f) => {
                assert_eq!(f.ftype, FRAME_MESSAGE, "expected a message, got {f:?}");
                f.msg()
            }
            None => panic!("no message within {timeout:?}"),
        }
    }

    /// Assert no (non-heartbeat) frame arrives for `dur`.
    pub fn expect_nothing(&mut self, dur: Duration) {
        if let Some(f) = self.recv_timeout(dur) {
            panic!("expected no frame for {dur:?}, got {f:?}");
        }
    }

    /// Non-fatal error: expect exactly `F(1, msg)`, then prove the connection
    /// is still usable (`NOP`, then a `PUB` that gets `OK`).
    pub fn expect_error_nonfatal(&mut self, msg: &str) {
        let f = self.recv();
        assert_eq!(
            f.bytes(),
            frame(FRAME_ERROR, msg.as_bytes()),
            "expected non-fatal error {msg:?}, got {f:?}"
        );
        self.nop();
        self.send(&pub_cmd("nonfatal_check", b"still-open"));
        self.expect_ok();
    }

    /// Read everything until the server closes (EOF or reset), within `timeout`.
    /// Returns all bytes received (including already-buffered ones).
    /// Panics if the connection is still open after `timeout`.
    pub fn read_until_closed(&mut self, timeout: Duration) -> Vec<u8> {
        let deadline = Instant::now() + timeout;
        while !self.closed {
            let now = Instant::now();
            if now >= deadline {
                panic!(
                    "connection still open after {timeout:?} (received so far: {:?})",
                    String::from_utf8_lossy(&self.buf)
                );
            }
            self.stream.set_read_timeout(Some(deadline - now)).unwrap();
            let mut chunk = [0u8; 65536];
            match self.stream.read(&mut chunk) {
                Ok(0) => self.closed = true,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if is_timeout_err(&e) => {}
                Err(e) if is_closed_err(&e) => self.closed = true,
                Err(e) => panic!("read: {e}"),
            }
        }
        std::mem::take(&mut self.buf)
    }

    /// Fatal error: the server sends exactly `F(1, msg)` and then closes.
    /// Nothing but that frame may arrive (heartbeats excepted if they precede it).
    pub fn expect_error_fatal(&mut self, msg: impl AsRef<[u8]>) {
        let msg = msg.as_ref();
        let mut got = self.read_until_closed(self.timeout);
        // Strip leading heartbeats (possible on long tests only).
        let hb = frame(FRAME_RESPONSE, HEARTBEAT);
        while got.starts_with(&hb) {
            got.drain(..hb.len());
        }
        let want = frame(FRAME_ERROR, msg);
        assert!(
            got == want,
            "expected exactly error frame {:?} then close;\n got bytes {:?}\n (as text {:?})",
            String::from_utf8_lossy(msg),
            got,
            String::from_utf8_lossy(&got)
        );
    }

    /// Like [`Conn::expect_error_fatal`] but tolerates the TCP RST race where the
    /// error frame is lost: whatever arrived must be a prefix of `F(1,msg)`.
    /// Returns true if the full frame arrived.
    pub fn expect_error_fatal_or_reset(&mut self, msg: &str) -> bool {
        let got = self.read_until_closed(self.timeout);
        let want = frame(FRAME_ERROR, msg.as_bytes());
        assert!(
            want.starts_with(&got),
            "expected error frame {msg:?} (or a reset) then close; got {:?}",
            String::from_utf8_lossy(&got)
        );
        got == want
    }

    /// Assert the server closes within `timeout` and sends nothing at all before.
    pub fn expect_closed_silently(&mut self, timeout: Duration) {
        let got = self.read_until_closed(timeout);
        assert!(
            got.is_empty(),
            "expected a silent close, got bytes {:?}",
            String::from_utf8_lossy(&got)
        );
    }

    pub fn shutdown(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}

/// Consume `n` messages from `c` (answering heartbeats), FINing each if `fin`.
pub fn recv_msgs(c: &mut Conn, n: usize, timeout: Duration, fin: bool) -> Vec<Msg> {
    let deadline = Instant::now() + timeout;
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let rem = deadline.saturating_duration_since(Instant::now());
        let f = c.recv_timeout(rem).unwrap_or_else(|| {
            panic!(
                "received only {} of {n} messages within {timeout:?}",
                out.len()
            )
        });
        let m = f.msg();
        if fin {
            c.fin(&m.id);
        }
        out.push(m);
    }
    out
}

// ---------------------------------------------------------------------------
// Order-preserving JSON (for key-order assertions)
// ---------------------------------------------------------------------------

pub mod ojson {
    //! Minimal JSON parser that keeps object key order.

    #[derive(Debug, Clone, PartialEq)]
    pub enum J {
        Null,
        Bool(bool),
        Num(String),
        Str(String),
        Arr(Vec<J>),
        Obj(Vec<(String, J)>),
    }

    impl J {
        pub fn keys(&self) -> Vec<&str> {
            match self {
                J::Obj(kv) => kv.iter().map(|(k, _)| k.as_str()).collect(),
                _ => panic!("not an object: {self:?}"),
            }
        }
        pub fn get(&self, key: &str) -> Option<&J> {
            match self {
                J::Obj(kv) => kv.iter().find(|(k, _)| k == key).map(|(_, v)| v),
                _ => None,
            }
        }
        pub fn type_name(&self) -> &'static str {
            match self {
                J::Null => "null",
                J::Bool(_) => "bool",
                J::Num(_) => "number",
                J::Str(_) => "string",
                J::Arr(_) => "array",
                J::Obj(_) => "object",
            }
        }
    }

    pub fn parse(s: &str) -> Result<J, String> {
        let b = s.as_bytes();
        let mut p = P { b, i: 0 };
        p.ws();
        let v = p.value()?;
        p.ws();
        if p.i != b.len() {
            return Err(format!("trailing data at {}", p.i));
        }
        Ok(v)
    }

    struct P<'a> {
        b: &'a [u8],
        i: usize,
    }

    impl P<'_> {
        fn ws(&mut self) {
            while self.i < self.b.len() && matches!(self.b[self.i], b' ' | b'\t' | b'\n' | b'\r') {
                self.i += 1;
            }
        }
        fn peek(&self) -> Option<u8> {
            self.b.get(self.i).copied()
        }
        fn expect(&mut self, c: u8) -> Result<(), String> {
            if self.peek() == Some(c) {
                self.i += 1;
                Ok(())
            } else {
                Err(format!("expected {:?} at {}", c as char, self.i))
            }
        }
        fn lit(&mut self, s: &str, v: J) -> Result<J, String> {
            if self.b[self.i..].starts_with(s.as_bytes()) {
                self.i += s.len();
                Ok(v)
            } else {
                Err(format!("bad literal at {}", self.i))
            }
        }
        fn value(&mut self) -> Result<J, String> {
            self.ws();
            match self.peek() {
                Some(b'{') => {
                    self.i += 1;
                    let mut kv = Vec::new();
                    self.ws();
                    if self.peek() == Some(b'}') {
                        self.i += 1;
                        return Ok(J::Obj(kv));
                    }
                    loop {
                        self.ws();
                        let k = self.string()?;
                        self.ws();
                        self.expect(b':')?;
                        let v = self.value()?;
                        kv.push((k, v));
                        self.ws();
                        match self.peek() {
                            Some(b',') => self.i += 1,
                            Some(b'}') => {
                                self.i += 1;
                                return Ok(J::Obj(kv));
                            }
                            _ => return Err(format!("expected , or }} at {}", self.i)),
                        }
                    }
                }
                Some(b'[') => {
                    self.i += 1;
                    let mut a = Vec::new();
                    self.ws();
                    if self.peek() == Some(b']') {
                        self.i += 1;
                        return Ok(J::Arr(a));
                    }
                    loop {
                        a.push(self.value()?);
                        self.ws();
                        match self.peek() {
                            Some(b',') => self.i += 1,
                            Some(b']') => {
                                self.i += 1;
                                return Ok(J::Arr(a));
                            }
                            _ => return Err(format!("expected , or ] at {}", self.i)),
                        }
                    }
                }
                Some(b'"') => Ok(J::Str(self.string()?)),
                Some(b't') => self.lit("true", J::Bool(true)),
                Some(b'f') => self.lit("false", J::Bool(false)),
                Some(b'n') => self.lit("null", J::Null),
                Some(c) if c == b'-' || c.is_ascii_digit() => {
                    let st = self.i;
                    while self.i < self.b.len()
                        && matches!(
                            self.b[self.i],
                            b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'
                        )
                    {
                        self.i += 1;
                    }
                    Ok(J::Num(
                        String::from_utf8_lossy(&self.b[st..self.i]).into_owned(),
                    ))
                }
                _ => Err(format!("unexpected byte at {}", self.i)),
            }
        }
        fn string(&mut self) -> Result<String, String> {
            self.expect(b'"')?;
            let mut out = Vec::new();
            loop {
                let c = self.peek().ok_or("unterminated string")?;
                self.i += 1;
                match c {
                    b'"' => break,
                    b'\\' => {
                        let e = self.peek().ok_or("bad escape")?;
                        self.i += 1;
                        match e {
                            b'u' => {
                                let h = std::str::from_utf8(&self.b[self.i..self.i + 4])
                                    .map_err(|e| e.to_string())?;
                                let cp = u32::from_str_radix(h, 16).map_err(|e| e.to_string())?;
                                self.i += 4;
                                let ch = char::from_u32(cp).unwrap_or('\u{fffd}');
                                let mut tmp = [0u8; 4];
                                out.extend_from_slice(ch.encode_utf8(&mut tmp).as_bytes());
                            }
                            b'n' => out.push(b'\n'),
                            b't' => out.push(b'\t'),
                            b'r' => out.push(b'\r'),
                            b'b' => out.push(8),
                            b'f' => out.push(12),
                            other => out.push(other),
                        }
                    }
                    _ => out.push(c),
                }
            }
            Ok(String::from_utf8_lossy(&out).into_owned())
        }
    }

    /// Compare the key structure of `actual` against `expected`: at every object
    /// the key sequence must be identical (same keys, same order) and every value
    /// must have the same JSON type; arrays must have the same length and are
    /// compared element-wise. Leaf values are ignored. Returns all differences.
    pub fn shape_diff(expected: &J, actual: &J) -> Vec<String> {
        let mut out = Vec::new();
        walk(expected, actual, "$", &mut out);
        out
    }

    fn walk(e: &J, a: &J, path: &str, out: &mut Vec<String>) {
        if e.type_name() != a.type_name() {
            out.push(format!(
                "{path}: expected {} got {} ({a:?})",
                e.type_name(),
                a.type_name()
            ));
            return;
        }
        match (e, a) {
            (J::Obj(ekv), J::Obj(akv)) => {
                let ek: Vec<&str> = ekv.iter().map(|(k, _)| k.as_str()).collect();
                let ak: Vec<&str> = akv.iter().map(|(k, _)| k.as_str()).collect();
                if ek != ak {
                    out.push(format!(
                        "{path}: key order differs\n   expected {ek:?}\n   got      {ak:?}"
                    ));
                }
                for (k, ev) in ekv {
                    if let Some((_, av)) = akv.iter().find(|(ak, _)| ak == k) {
                        walk(ev, av, &format!("{path}.{k}"), out);
                    }
                }
            }
            (J::Arr(ea), J::Arr(aa)) => {
                if ea.len() != aa.len() {
                    out.push(format!(
                        "{path}: array length expected {} got {}",
                        ea.len(),
                        aa.len()
                    ));
                }
                for (i, (ev, av)) in ea.iter().zip(aa.iter()).enumerate() {
                    walk(ev, av, &format!("{path}[{i}]"), out);
                }
            }
            _ => {}
        }
    }
}

/// Assert that `actual_json` has the same key structure as `expected_json`
/// (see [`ojson::shape_diff`]).
pub fn assert_same_shape(expected_json: &str, actual_json: &str) {
    let e = ojson::parse(expected_json).expect("expected JSON parses");
    let a = ojson::parse(actual_json)
        .unwrap_or_else(|err| panic!("actual is not JSON ({err}): {actual_json}"));
    let d = ojson::shape_diff(&e, &a);
    assert!(
        d.is_empty(),
        "JSON shape differs from the reference:\n{}\nactual: {actual_json}",
        d.join("\n")
    );
}

// ---------------------------------------------------------------------------
// Small utilities
// ---------------------------------------------------------------------------

/// A unique-ish name for topics/channels in tests: `<prefix>_<counter>`.
pub fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    format!("{prefix}_{}", N.fetch_add(1, Ordering::SeqCst))
}

/// A fake TCP peer: accepts one connection on 127.0.0.1 and records what it
/// receives (used e.g. to check that nsqd dials a configured lookupd).
pub struct FakePeer {
    pub addr: String,
    rx: std::sync::mpsc::Receiver<Vec<u8>>,
}

impl FakePeer {
    pub fn start() -> FakePeer {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            if let Ok((mut s, _)) = l.accept() {
                s.set_read_timeout(Some(Duration::from_secs(30))).ok();
                let mut buf = [0u8; 4096];
                loop {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if tx.send(buf[..n].to_vec()).is_err() {
                                break;
                            }
                        }
                    }
                }
            }
        });
        FakePeer { addr, rx }
    }

    /// Bytes received within `timeout` until at least `min` bytes are in hand.
    pub fn received(&self, min: usize, timeout: Duration) -> Vec<u8> {
        let deadline = Instant::now() + timeout;
        let mut out = Vec::new();
        while out.len() < min {
            let rem = deadline.saturating_duration_since(Instant::now());
            if rem.is_zero() {
                break;
            }
            match self.rx.recv_timeout(rem) {
                Ok(b) => out.extend(b),
                Err(_) => break,
            }
        }
        out
    }
}

// ---------------------------------------------------------------------------
// nsqlookupd process
// ---------------------------------------------------------------------------

/// A running nsqlookupd on free loopback ports (broadcasting 127.0.0.1);
/// SIGTERM and reaped on drop.
pub struct Lookupd {
    child: Child,
    /// `127.0.0.1:<port>` of the TCP (V1) listener.
    pub tcp: String,
    /// `127.0.0.1:<port>` of the HTTP listener.
    pub http: String,
}

impl Lookupd {
    /// Starts nsqlookupd with `extra` flags and waits for `/ping`.
    pub fn start(extra: &[&str]) -> Lookupd {
        for _ in 0..5 {
            let (tcp, http) = (
                format!("127.0.0.1:{}", free_port()),
                format!("127.0.0.1:{}", free_port()),
            );
            let mut child = std::process::Command::new(bin_path("nsqlookupd"))
                .arg(format!("--tcp-address={tcp}"))
                .arg(format!("--http-address={http}"))
                .arg("--broadcast-address=127.0.0.1")
                .args(extra)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("spawn nsqlookupd");
            let up = (0..100).any(|_| {
                sleep_ms(50);
                http_request_timeout(&http, "GET", "/ping", &[], None, Duration::from_secs(1))
                    .map(|r| r.status == 200)
                    .unwrap_or(false)
            });
            if up {
                return Lookupd { child, tcp, http };
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("nsqlookupd did not start");
    }

    /// `GET /lookup?topic=` body, if the lookupd answers 200.
    pub fn lookup(&self, topic: &str) -> Option<Value> {
        let r = http_request_timeout(
            &self.http,
            "GET",
            &format!("/lookup?topic={topic}"),
            &[],
            None,
            Duration::from_secs(2),
        )
        .ok()?;
        (r.status == 200).then(|| r.json())
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM and wait (also done on drop).
    pub fn stop(&mut self) {
        terminate(&mut self.child, Duration::from_secs(5));
    }
}

impl Drop for Lookupd {
    fn drop(&mut self) {
        terminate(&mut self.child, Duration::from_secs(5));
    }
}

// ---------------------------------------------------------------------------
// Reliability helpers (faults.rs, hostile.rs): fixed-port restarts, RSS,
// seeded garbage.
// ---------------------------------------------------------------------------

/// Resident set size of `pid` in KiB (`VmRSS` in `/proc/<pid>/status`); 0 if unreadable.
pub fn rss_kib(pid: u32) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// Unsigned integer from env `name`, else `default` (for longer local runs).
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// A tiny seeded PRNG (xorshift64*): reproducible garbage without a dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// `len` random bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u64() as u8).collect()
    }
}

impl Nsqd {
    /// Restart-style start on fixed ports (e.g. the ports of a previous run on
    /// the same data path): retried for up to 15 s while the ports free up.
    pub fn start_on(data_path: &Path, tcp_port: u16, http_port: u16, extra: &[&str]) -> Nsqd {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            match Nsqd::try_start_on(data_path, tcp_port, http_port, extra) {
                Ok(n) => return n,
                Err(e) if Instant::now() >= deadline => {
                    panic!("nsqd did not start on fixed ports {tcp_port}/{http_port}: {e}")
                }
                Err(_) => sleep_ms(200),
            }
        }
    }

    fn try_start_on(
        data_path: &Path,
        tcp_port: u16,
        http_port: u16,
        extra: &[&str],
    ) -> Result<Nsqd, String> {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        Nsqd::spawn_on(data_path, tcp_port, http_port, free_port(), &|p: &Ports| {
            default_args(p, &extra)
        })
    }
}

impl Lookupd {
    /// nsqlookupd on the given addresses (e.g. to restart one on the same
    /// ports); retried for up to 15 s while the ports free up.
    pub fn start_on(tcp: &str, http: &str, extra: &[&str]) -> Lookupd {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let mut child = Command::new(bin_path("nsqlookupd"))
                .arg(format!("--tcp-address={tcp}"))
                .arg(format!("--http-address={http}"))
                .arg("--broadcast-address=127.0.0.1")
                .args(extra)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn nsqlookupd");
            let up = (0..60).any(|_| {
                sleep_ms(50);
                if matches!(child.try_wait(), Ok(Some(_))) {
                    return false;
                }
                http_request_timeout(http, "GET", "/ping", &[], None, Duration::from_secs(1))
                    .map(|r| r.status == 200)
                    .unwrap_or(false)
            });
            if up {
                return Lookupd {
                    child,
                    tcp: tcp.to_string(),
                    http: http.to_string(),
                };
            }
            terminate(&mut child, Duration::from_secs(2));
            if Instant::now() >= deadline {
                panic!("nsqlookupd did not start on {tcp} / {http}");
            }
            sleep_ms(200);
        }
    }
}

#[cfg(test)]
mod harness_tests {
    use super::*;

    #[test]
    fn frame_encoding_matches_spec_examples() {
        assert_eq!(frame(0, b"OK"), vec![0, 0, 0, 6, 0, 0, 0, 0, b'O', b'K']);
        let mut bp = vec![0, 0, 0, 0x12, 0, 0, 0, 1];
        bp.extend_from_slice(b"E_BAD_PROTOCOL");
        assert_eq!(frame(1, b"E_BAD_PROTOCOL"), bp);
        assert_eq!(&frame(0, HEARTBEAT)[..4], &[0, 0, 0, 0x0F]);
        assert_eq!(
            pub_cmd("t", b"hello"),
            b"PUB t\n\x00\x00\x00\x05hello".to_vec()
        );
        assert_eq!(
            mpub_body(&[b"a", b"b"]),
            vec![0, 0, 0, 2, 0, 0, 0, 1, b'a', 0, 0, 0, 1, b'b']
        );
    }

    #[test]
    fn message_parsing() {
        let mut d = 1234567890123i64.to_be_bytes().to_vec();
        d.extend_from_slice(&3u16.to_be_bytes());
        d.extend_from_slice(b"0123456789abcdef");
        d.extend_from_slice(b"body");
        let m = Msg::parse(&d);
        assert_eq!(
            (m.ts, m.attempts, m.id.as_str(), m.body.as_slice()),
            (1234567890123, 3, "0123456789abcdef", &b"body"[..])
        );
    }

    #[test]
    fn http_parsing_chunked_and_length() {
        let r =
            parse_http_response(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A: b\r\n\r\nOKextra")
                .unwrap();
        assert_eq!(
            (r.status, r.body.as_slice(), r.header("x-a")),
            (200, &b"OK"[..], Some("b"))
        );
        let r = parse_http_response(b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n").unwrap();
        assert_eq!((r.status, r.body.as_slice()), (404, &b"abcde"[..]));
        assert_eq!(
            response_complete(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab"),
            Some(false)
        );
    }

    #[test]
    fn json_shape_compares_key_order_and_types() {
        let stats = fixture("stats.json");
        let with_producer = fixture("stats_with_producer.json");
        assert!(ojson::shape_diff(
            &ojson::parse(&stats).unwrap(),
            &ojson::parse(&stats).unwrap()
        )
        .is_empty());
        let d = ojson::shape_diff(
            &ojson::parse(&stats).unwrap(),
            &ojson::parse(&with_producer).unwrap(),
        );
        assert!(!d.is_empty(), "pub_counts/producers/memory differ");
        let d = ojson::shape_diff(
            &ojson::parse(r#"{"a":1,"b":[{"c":null}]}"#).unwrap(),
            &ojson::parse(r#"{"b":[{"c":[]}],"a":1}"#).unwrap(),
        );
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(ojson::shape_diff(
            &ojson::parse(r#"{"a":"x"}"#).unwrap(),
            &ojson::parse(r#"{"a":"y\"z\u00e9"}"#).unwrap()
        )
        .is_empty());
    }
}

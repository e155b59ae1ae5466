//! Black-box tests of the `nsqlookupd` binary: checklist items 107–120 of the
//! spec (byte for byte), tombstones, producer inactivity, ephemeral channels,
//! connection-close cleanup, httprouter redirects/405/404, flags and clean
//! shutdown.
//!
//! Each test starts its own daemon on free 127.0.0.1 ports (see
//! [`Lookupd::start`]) and kills it by PID when dropped. Build the binary first:
//! `cargo build -p nsqlookupd-bin` (or set `NSQ_BIN_DIR`).
//!
//! Generic helpers (HTTP client, process helpers, binary location) come from
//! the shared harness `nsq_tests`; everything nsqlookupd-specific (the daemon
//! guard, the V1 TCP client) is in this file.

#![forbid(unsafe_code)]

use std::fs;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nsq_tests::{
    bin_path, free_port, http_request, sleep_ms, wait_for, wait_timeout, HttpResponse, Value,
};

const NSQ_V1: &str = "nsq; version=1.0";
const JSON_CT: &str = "application/json; charset=utf-8";
const BROADCAST: &str = "lookupd.example";

// ---------------------------------------------------------------------------
// Daemon guard
// ---------------------------------------------------------------------------

/// A running `nsqlookupd` child on free 127.0.0.1 ports; killed on drop.
struct Lookupd {
    child: Child,
    tcp_port: u16,
    http_port: u16,
    _dir: tempfile::TempDir,
    stderr_path: PathBuf,
}

impl Lookupd {
    /// Starts nsqlookupd with `--broadcast-address=lookupd.example` and
    /// `extra` flags, waiting for `GET /ping`. Retries with new ports if the
    /// picked ones were taken in the meantime.
    fn start(extra: &[&str]) -> Lookupd {
        let mut last_err = String::new();
        for _ in 0..5 {
            match Self::try_start(extra) {
                Ok(l) => return l,
                Err(e) => last_err = e,
            }
        }
        panic!("nsqlookupd did not start: {last_err}");
    }

    fn try_start(extra: &[&str]) -> Result<Lookupd, String> {
        let (tcp_port, http_port) = (free_port(), free_port());
        if tcp_port == http_port {
            return Err("same port picked twice".into());
        }
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let stderr_path = dir.path().join("stderr");
        let stderr = fs::File::create(&stderr_path).map_err(|e| e.to_string())?;
        let mut args = vec![
            format!("--tcp-address=127.0.0.1:{tcp_port}"),
            format!("--http-address=127.0.0.1:{http_port}"),
            format!("--broadcast-address={BROADCAST}"),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let child = Command::new(bin_path("nsqlookupd"))
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("spawn: {e}"))?;
        let mut l = Lookupd {
            child,
            tcp_port,
            http_port,
            _dir: dir,
            stderr_path,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(st)) = l.child.try_wait() {
                return Err(format!("exited early ({st}): {}", l.stderr()));
            }
            if let Ok(r) = http_request(&l.http_addr(), "GET", "/ping", &[], None) {
                if r.status == 200 {
                    return Ok(l);
                }
            }
            if Instant::now() > deadline {
                return Err(format!("no /ping within 10s: {}", l.stderr()));
            }
            sleep_ms(20);
        }
    }

    fn http_addr(&self) -> String {
        format!("127.0.0.1:{}", self.http_port)
    }

    fn tcp_addr(&self) -> String {
        format!("127.0.0.1:{}", self.tcp_port)
    }

    fn stderr(&self) -> String {
        fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    fn req(&self, method: &str, path: &str) -> HttpResponse {
        http_request(&self.http_addr(), method, path, &[], None)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    fn get(&self, path: &str) -> HttpResponse {
        self.req("GET", path)
    }

    fn post(&self, path: &str) -> HttpResponse {
        self.req("POST", path)
    }

    /// `GET path` → 200 JSON with NSQ's headers; returns the body text.
    fn get_json(&self, path: &str) -> String {
        let r = self.get(path);
        assert_eq!(r.status, 200, "GET {path}: {}", r.text());
        assert_v1_json(&r);
        r.text()
    }

    fn get_json_value(&self, path: &str) -> Value {
        serde_json::from_str(&self.get_json(path)).unwrap()
    }

    fn lookup(&self, topic: &str) -> Value {
        serde_json::from_str(&self.get_json(&format!("/lookup?topic={topic}"))).unwrap()
    }

    fn nodes(&self) -> Value {
        serde_json::from_str(&self.get_json("/nodes")).unwrap()
    }

    /// A V1 connection with the magic sent.
    fn v1(&self) -> V1 {
        let mut c = V1::connect(&self.tcp_addr());
        c.send(b"  V1");
        c
    }

    /// A V1 connection that has identified as an nsqd with this HTTP port.
    fn producer(&self, http_port: u16) -> V1 {
        let mut c = self.v1();
        c.identify(&producer_json(http_port));
        let resp = c.read_response().expect("IDENTIFY response");
        assert!(
            resp.starts_with(b"{\"broadcast_address\""),
            "{}",
            String::from_utf8_lossy(&resp)
        );
        c
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        wait_timeout(&mut self.child, timeout)
    }
}

impl Drop for Lookupd {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill(); // SIGKILL by pid
            let _ = self.child.wait();
        }
    }
}

fn assert_v1_json(r: &HttpResponse) {
    assert_eq!(
        r.header("Content-Type"),
        Some(JSON_CT),
        "headers {:?}",
        r.headers
    );
    assert_eq!(
        r.header("X-NSQ-Content-Type"),
        Some(NSQ_V1),
        "headers {:?}",
        r.headers
    );
}

/// A 200 with an empty body and only the X-NSQ header (NSQ's "V1, no data").
fn assert_v1_empty(r: &HttpResponse) {
    assert_eq!(
        (r.status, r.text()),
        (200, String::new()),
        "headers {:?}",
        r.headers
    );
    assert_eq!(r.header("X-NSQ-Content-Type"), Some(NSQ_V1));
    assert_eq!(r.header("Content-Type"), None);
}

fn producer_json(http_port: u16) -> String {
    format!(
        r#"{{"broadcast_address":"h{http_port}","hostname":"host{http_port}","tcp_port":{},"http_port":{http_port},"version":"1.3.0","topology_zone":"z","topology_region":"r"}}"#,
        http_port - 1
    )
}

fn hostname() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim_end_matches('\n')
        .to_string()
}

fn s(v: &Value) -> Vec<String> {
    let mut out: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect();
    out.sort();
    out
}

fn producer_ports(lookup: &Value) -> Vec<i64> {
    let mut out: Vec<i64> = lookup["producers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["http_port"].as_i64().unwrap())
        .collect();
    out.sort();
    out
}

// ---------------------------------------------------------------------------
// V1 TCP client
// ---------------------------------------------------------------------------

/// A raw nsqlookupd V1 client: responses are `<be32 size><data>`.
struct V1 {
    stream: TcpStream,
}

impl V1 {
    fn connect(addr: &str) -> V1 {
        let stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        stream.set_nodelay(true).unwrap();
        V1 { stream }
    }

    fn local_addr(&self) -> String {
        self.stream.local_addr().unwrap().to_string()
    }

    fn send(&mut self, b: &[u8]) {
        self.stream.write_all(b).unwrap();
    }

    fn identify(&mut self, json: &str) {
        let mut b = b"IDENTIFY\n".to_vec();
        b.extend_from_slice(&(json.len() as i32).to_be_bytes());
        b.extend_from_slice(json.as_bytes());
        self.send(&b);
    }

    /// Exactly `n` bytes, or `None` at EOF/reset before any byte.
    fn read_exact(&mut self, n: usize) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; n];
        let mut got = 0;
        while got < n {
            match self.stream.read(&mut buf[got..]) {
                Ok(0) => break,
                Ok(k) => got += k,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted
                    ) =>
                {
                    break
                }
                Err(e) => panic!("read: {e}"),
            }
        }
        match got {
            0 => None,
            g if g == n => Some(buf),
            g => panic!(
                "short read: {g} of {n} bytes: {:?}",
                String::from_utf8_lossy(&buf[..g])
            ),
        }
    }

    /// The next response's data.
    fn read_response(&mut self) -> Option<Vec<u8>> {
        let size = self.read_exact(4)?;
        let n = u32::from_be_bytes(size.try_into().unwrap()) as usize;
        if n == 0 {
            return Some(Vec::new());
        }
        Some(self.read_exact(n).expect("response body"))
    }

    /// Sends `cmd`, expects exactly `<size>want`.
    fn expect(&mut self, cmd: &[u8], want: &str) {
        self.send(cmd);
        self.expect_response(want);
    }

    fn expect_response(&mut self, want: &str) {
        let mut wire = (want.len() as u32).to_be_bytes().to_vec();
        wire.extend_from_slice(want.as_bytes());
        let got = self
            .read_exact(wire.len())
            .unwrap_or_else(|| panic!("connection closed, wanted {want:?}"));
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&wire)
        );
    }

    /// The server closes the connection (EOF or reset) without sending more.
    fn expect_closed(&mut self) {
        let mut b = [0u8; 64];
        match self.stream.read(&mut b) {
            Ok(0) => {}
            Ok(n) => panic!("expected close, got {:?}", String::from_utf8_lossy(&b[..n])),
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted
                ) => {}
            Err(e) => panic!("expected close, got error {e}"),
        }
    }

    /// Sends `cmd`, expects the fatal error `want` and then a close.
    fn expect_fatal(&mut self, cmd: &[u8], want: &str) {
        self.expect(cmd, want);
        self.expect_closed();
    }
}

// ---------------------------------------------------------------------------
// Checklist 107–112: TCP protocol
// ---------------------------------------------------------------------------

#[test]
fn item107_bad_magic_gets_unframed_error_and_close() {
    let l = Lookupd::start(&[]);
    let mut c = V1::connect(&l.tcp_addr());
    c.send(b"  V2");
    let got = c.read_exact(18).expect("response");
    assert_eq!(got, b"\x00\x00\x00\x0eE_BAD_PROTOCOL");
    c.expect_closed();
}

#[test]
fn item108_ping_before_identify_and_whitespace() {
    let l = Lookupd::start(&[]);
    let mut c = l.v1();
    c.send(b"PING\n");
    assert_eq!(c.read_exact(6).unwrap(), b"\x00\x00\x00\x02OK");
    c.expect(b"  PING  \r\n", "OK");
    c.expect(b"PING extra words\n", "OK");
}

#[test]
fn item109_register_before_identify() {
    let l = Lookupd::start(&[]);
    l.v1()
        .expect_fatal(b"REGISTER t\n", "E_INVALID client must IDENTIFY");
    l.v1()
        .expect_fatal(b"UNREGISTER t\n", "E_INVALID client must IDENTIFY");
}

#[test]
fn item110_identify_missing_fields() {
    let l = Lookupd::start(&[]);
    let mut c = l.v1();
    c.identify(r#"{"broadcast_address":"h","tcp_port":1,"http_port":2}"#);
    c.expect_response("E_BAD_BODY IDENTIFY missing fields");
    c.expect_closed();
    for body in [
        "{}",
        "null",
        r#"{"broadcast_address":"h","tcp_port":0,"http_port":2,"version":"v"}"#,
    ] {
        let mut c = l.v1();
        c.identify(body);
        c.expect_response("E_BAD_BODY IDENTIFY missing fields");
        c.expect_closed();
    }
}

#[test]
fn item111_identify_response_and_second_identify() {
    let l = Lookupd::start(&[]);
    let mut c = l.v1();
    c.identify(&producer_json(4151));
    let want = format!(
        r#"{{"broadcast_address":"{BROADCAST}","hostname":"{}","http_port":{},"tcp_port":{},"version":"1.3.0"}}"#,
        hostname(),
        l.http_port,
        l.tcp_port
    );
    c.expect_response(&want);
    c.expect(b"PING\n", "OK");
    c.identify(&producer_json(4151));
    c.expect_response("E_INVALID cannot IDENTIFY again");
    c.expect_closed();
}

#[test]
fn item112_bad_names_and_other_fatal_errors() {
    let l = Lookupd::start(&[]);
    let cases: &[(&[u8], &str)] = &[
        (
            b"REGISTER bad! \n",
            "E_BAD_TOPIC REGISTER topic name 'bad!' is not valid",
        ),
        (
            b"REGISTER t bad!\n",
            "E_BAD_CHANNEL REGISTER channel name 'bad!' is not valid",
        ),
        (
            b"UNREGISTER bad!\n",
            "E_BAD_TOPIC UNREGISTER topic name 'bad!' is not valid",
        ),
        (
            b"UNREGISTER t bad!\n",
            "E_BAD_CHANNEL UNREGISTER channel name 'bad!' is not valid",
        ),
        (
            b"REGISTER\n",
            "E_INVALID REGISTER insufficient number of params",
        ),
        (
            b"UNREGISTER \n",
            "E_INVALID UNREGISTER insufficient number of params",
        ),
        (b"FOO\n", "E_INVALID invalid command FOO"),
        (b"\n", "E_INVALID invalid command "),
        (b"register t\n", "E_INVALID invalid command register"),
    ];
    for (cmd, want) in cases {
        let mut c = l.producer(4151);
        c.expect_fatal(cmd, want);
    }
    // Unknown commands are fatal before IDENTIFY too.
    l.v1()
        .expect_fatal(b"FOO bar\n", "E_INVALID invalid command FOO");
}

#[test]
fn identify_body_errors() {
    let l = Lookupd::start(&[]);
    let body_cmd = |size: i32, body: &[u8]| {
        let mut b = b"IDENTIFY\n".to_vec();
        b.extend_from_slice(&size.to_be_bytes());
        b.extend_from_slice(body);
        b
    };
    for body in [
        &b"not json"[..],
        b"",
        b"[]",
        br#"{"tcp_port":"1"}"#,
        br#"{"http_port":1.5}"#,
    ] {
        l.v1().expect_fatal(
            &body_cmd(body.len() as i32, body),
            "E_BAD_BODY IDENTIFY failed to decode JSON body",
        );
    }
    // Negative size crashes Go's nsqlookupd; ours answers and stays up.
    l.v1().expect_fatal(
        &body_cmd(-5, b""),
        "E_BAD_BODY IDENTIFY failed to read body",
    );
    // Truncated body, then the client stops sending.
    let mut c = l.v1();
    c.send(&body_cmd(100, b"{\"a\":1"));
    c.stream.shutdown(Shutdown::Write).unwrap();
    c.expect_response("E_BAD_BODY IDENTIFY failed to read body");
    c.expect_closed();
    // Truncated size.
    let mut c = l.v1();
    c.send(b"IDENTIFY\n\x00\x00");
    c.stream.shutdown(Shutdown::Write).unwrap();
    c.expect_response("E_BAD_BODY IDENTIFY failed to read body size");
    c.expect_closed();
    // Still serving.
    l.v1().expect(b"PING\n", "OK");
    assert_eq!(l.get("/ping").text(), "OK");
}

#[test]
fn identify_ignores_client_remote_address_and_unknown_fields() {
    let l = Lookupd::start(&[]);
    let mut c = l.v1();
    c.identify(
        r#"{"remote_address":"1.2.3.4:5","broadcast_address":"b","hostname":"h","tcp_port":1,"http_port":2,"version":"v","unknown":{"x":[1,2]}}"#,
    );
    assert!(c.read_response().is_some());
    c.expect(b"REGISTER t\n", "OK");
    let nodes = l.nodes();
    assert_eq!(
        nodes["producers"][0]["remote_address"],
        c.local_addr().as_str()
    );
}

// ---------------------------------------------------------------------------
// Checklist 113–116: HTTP API
// ---------------------------------------------------------------------------

#[test]
fn item113_lookup_errors() {
    let l = Lookupd::start(&[]);
    l.get("/lookup?topic=none")
        .assert_error(404, "TOPIC_NOT_FOUND");
    l.get("/lookup").assert_error(400, "MISSING_ARG_TOPIC");
    l.get("/lookup?topic=%zz")
        .assert_error(400, "INVALID_REQUEST");
    l.get("/lookup?topic=a;b")
        .assert_error(400, "INVALID_REQUEST");
}

#[test]
fn item114_empty_state() {
    let l = Lookupd::start(&[]);
    assert_eq!(l.get_json("/topics"), r#"{"topics":[]}"#);
    assert_eq!(l.get_json("/channels?topic=x"), r#"{"channels":[]}"#);
    assert_eq!(l.get_json("/nodes"), r#"{"producers":[]}"#);
    assert_eq!(l.get_json("/debug"), "{}");
    assert_eq!(l.get_json("/info"), r#"{"version":"1.3.0"}"#);
    let ping = l.get("/ping");
    assert_eq!((ping.status, ping.text()), (200, "OK".to_string()));
    assert_eq!(
        ping.header("X-NSQ-Content-Type"),
        None,
        "/ping is PlainText"
    );
    assert_eq!(
        ping.header("Content-Type"),
        Some("text/plain; charset=utf-8")
    );
    // Go's canonical header spelling on the wire.
    let info = l.get("/info");
    assert!(
        info.headers.iter().any(|(k, _)| k == "X-Nsq-Content-Type"),
        "{:?}",
        info.headers
    );
}

#[test]
fn item115_topic_create_then_lookup() {
    let l = Lookupd::start(&[]);
    assert_v1_empty(&l.post("/topic/create?topic=t"));
    assert_eq!(
        l.get_json("/lookup?topic=t"),
        r#"{"channels":[],"producers":[]}"#
    );
    assert_eq!(l.get_json("/topics"), r#"{"topics":["t"]}"#);
    // Creating again is harmless.
    assert_v1_empty(&l.post("/topic/create?topic=t"));
    assert_eq!(l.get_json("/topics"), r#"{"topics":["t"]}"#);
}

#[test]
fn item116_channel_delete_not_found_and_param_errors() {
    let l = Lookupd::start(&[]);
    l.post("/channel/delete?topic=t&channel=none")
        .assert_error(404, "CHANNEL_NOT_FOUND");
    l.post("/topic/create")
        .assert_error(400, "MISSING_ARG_TOPIC");
    l.post("/topic/create?topic=bad!")
        .assert_error(400, "INVALID_ARG_TOPIC");
    l.post("/topic/create?topic=%")
        .assert_error(400, "INVALID_REQUEST");
    l.post("/topic/delete")
        .assert_error(400, "MISSING_ARG_TOPIC");
    l.post("/channel/create?channel=c")
        .assert_error(400, "MISSING_ARG_TOPIC");
    l.post("/channel/create?topic=bad!&channel=c")
        .assert_error(400, "INVALID_ARG_TOPIC");
    l.post("/channel/create?topic=t")
        .assert_error(400, "MISSING_ARG_CHANNEL");
    l.post("/channel/create?topic=t&channel=bad!")
        .assert_error(400, "INVALID_ARG_CHANNEL");
    l.post("/channel/delete?topic=t")
        .assert_error(400, "MISSING_ARG_CHANNEL");
    l.get("/channels").assert_error(400, "MISSING_ARG_TOPIC");
    // /topic/delete does not validate and always succeeds.
    assert_v1_empty(&l.post("/topic/delete?topic=bad!"));
    // create + delete channel round trip
    assert_v1_empty(&l.post("/channel/create?topic=t&channel=c"));
    assert_eq!(l.get_json("/channels?topic=t"), r#"{"channels":["c"]}"#);
    assert_eq!(l.get_json("/topics"), r#"{"topics":["t"]}"#);
    assert_v1_empty(&l.post("/channel/delete?topic=t&channel=c"));
    assert_eq!(l.get_json("/channels?topic=t"), r#"{"channels":[]}"#);
    assert_v1_empty(&l.post("/topic/delete?topic=t"));
    assert_eq!(l.get_json("/topics"), r#"{"topics":[]}"#);
    l.get("/lookup?topic=t")
        .assert_error(404, "TOPIC_NOT_FOUND");
}

#[test]
fn lookup_nodes_and_debug_json_exact() {
    let l = Lookupd::start(&[]);
    let mut c = l.producer(4151);
    c.expect(b"REGISTER sample c1\n", "OK");
    let remote = c.local_addr();
    let peer = format!(
        r#""remote_address":"{remote}","hostname":"host4151","broadcast_address":"h4151","tcp_port":4150,"http_port":4151,"version":"1.3.0","topology_zone":"z","topology_region":"r""#
    );
    assert_eq!(
        l.get_json("/lookup?topic=sample"),
        format!(r#"{{"channels":["c1"],"producers":[{{{peer}}}]}}"#)
    );
    assert_eq!(
        l.get_json("/nodes"),
        format!(r#"{{"producers":[{{{peer},"tombstones":[false],"topics":["sample"]}}]}}"#)
    );
    assert_eq!(
        l.get_json("/channels?topic=sample"),
        r#"{"channels":["c1"]}"#
    );
    assert_eq!(l.get_json("/topics"), r#"{"topics":["sample"]}"#);

    // /debug: keys sorted, Go's zero time for tombstoned_at, Unix ns last_update.
    let debug = l.get_json("/debug");
    let v: Value = serde_json::from_str(&debug).unwrap();
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["channel:sample:c1", "client::", "topic:sample:"]);
    assert!(debug.starts_with(r#"{"channel:sample:c1":[{"broadcast_address":"h4151","hostname":"host4151","http_port":4151,"id":""#), "{debug}");
    let client = &v["client::"][0];
    assert_eq!(client["id"], remote.as_str());
    assert_eq!(client["tombstoned"], false);
    assert_eq!(client["tombstoned_at"].as_i64(), Some(-6795364578871345152));
    let last = client["last_update"].as_i64().unwrap();
    assert!(
        (last - nsq_tests::now_ns()).abs() < 60_000_000_000,
        "last_update {last}"
    );
    let want_tail = r#","tcp_port":4150,"tombstoned":false,"tombstoned_at":-6795364578871345152,"topology_region":"r","topology_zone":"z","version":"1.3.0"}]"#;
    assert!(debug.contains(want_tail), "{debug}");
}

#[test]
fn connection_close_removes_producer_but_keeps_keys() {
    let l = Lookupd::start(&[]);
    let mut c = l.producer(4151);
    c.expect(b"REGISTER t c\n", "OK");
    assert_eq!(producer_ports(&l.lookup("t")), [4151]);
    drop(c);
    wait_for(Duration::from_secs(5), "producer removed", || {
        l.lookup("t")["producers"]
            .as_array()
            .unwrap()
            .is_empty()
            .then_some(())
    });
    assert_eq!(l.get_json("/topics"), r#"{"topics":["t"]}"#);
    assert_eq!(l.get_json("/channels?topic=t"), r#"{"channels":["c"]}"#);
    assert_eq!(l.get_json("/nodes"), r#"{"producers":[]}"#);
    assert_eq!(l.get_json("/debug"), "{}");
}

#[test]
fn two_producers_and_unregister_topic() {
    let l = Lookupd::start(&[]);
    let mut a = l.producer(4151);
    let mut b = l.producer(5151);
    a.expect(b"REGISTER t c\n", "OK");
    b.expect(b"REGISTER t\n", "OK");
    a.expect(b"REGISTER u\n", "OK");
    assert_eq!(producer_ports(&l.lookup("t")), [4151, 5151]);
    // UNREGISTER of something never registered is fine.
    a.expect(b"UNREGISTER never\n", "OK");
    // Topic-level UNREGISTER also leaves the topic's channels (keys stay).
    a.expect(b"UNREGISTER t\n", "OK");
    let t = l.lookup("t");
    assert_eq!(producer_ports(&t), [5151]);
    assert_eq!(s(&t["channels"]), ["c"]);
    assert_eq!(producer_ports(&l.lookup("u")), [4151]);
    b.expect(b"UNREGISTER t\n", "OK");
    assert_eq!(
        l.get_json("/lookup?topic=t"),
        r#"{"channels":["c"],"producers":[]}"#
    );
    assert_eq!(s(&l.get_json_value("/topics")["topics"]), ["t", "u"]);
}

// ---------------------------------------------------------------------------
// Checklist 117–120: tombstones, inactivity, ephemeral channels
// ---------------------------------------------------------------------------

#[test]
fn item117_tombstone_hides_producer_for_lifetime() {
    let l = Lookupd::start(&["--tombstone-lifetime=2s"]);
    let mut a = l.producer(4151);
    let mut b = l.producer(5151);
    a.expect(b"REGISTER t\n", "OK");
    a.expect(b"REGISTER u\n", "OK");
    b.expect(b"REGISTER t\n", "OK");
    assert_v1_empty(&l.post("/topic/tombstone?topic=t&node=h4151:4151"));
    let start = Instant::now();
    assert_eq!(producer_ports(&l.lookup("t")), [5151]);
    // Only that topic: the node still serves u.
    assert_eq!(producer_ports(&l.lookup("u")), [4151]);
    let nodes = l.nodes();
    let node_a = nodes["producers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["http_port"] == 4151)
        .unwrap();
    let pairs: Vec<(String, bool)> = node_a["topics"]
        .as_array()
        .unwrap()
        .iter()
        .zip(node_a["tombstones"].as_array().unwrap())
        .map(|(t, b)| (t.as_str().unwrap().to_string(), b.as_bool().unwrap()))
        .collect();
    assert!(
        pairs.contains(&("t".into(), true)) && pairs.contains(&("u".into(), false)),
        "{pairs:?}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "test too slow to observe the tombstone"
    );
    // /debug shows the raw flag.
    let debug = l.get_json_value("/debug");
    let a_in_t = debug["topic:t:"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["http_port"] == 4151)
        .unwrap();
    assert_eq!(a_in_t["tombstoned"], true);
    assert!(a_in_t["tombstoned_at"].as_i64().unwrap() > 0);
    // After the lifetime it is back (it is still registered).
    sleep_ms(2300);
    assert_eq!(producer_ports(&l.lookup("t")), [4151, 5151]);
    let nodes = l.nodes();
    let node_a = nodes["producers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["http_port"] == 4151)
        .unwrap();
    assert!(node_a["tombstones"]
        .as_array()
        .unwrap()
        .iter()
        .all(|b| b == false));
    // Tombstoning an unknown node or topic is a 200 no-op.
    assert_v1_empty(&l.post("/topic/tombstone?topic=t&node=nope:1"));
    assert_v1_empty(&l.post("/topic/tombstone?topic=none&node=h4151:4151"));
    assert_eq!(producer_ports(&l.lookup("t")), [4151, 5151]);
}

#[test]
fn item118_tombstone_missing_args() {
    let l = Lookupd::start(&[]);
    l.post("/topic/tombstone?topic=t")
        .assert_error(400, "MISSING_ARG_NODE");
    l.post("/topic/tombstone?node=n:1")
        .assert_error(400, "MISSING_ARG_TOPIC");
    l.post("/topic/tombstone?topic=%x")
        .assert_error(400, "INVALID_REQUEST");
}

#[test]
fn item119_inactive_producer_hidden_until_ping() {
    let l = Lookupd::start(&["--inactive-producer-timeout=2s"]);
    let mut a = l.producer(4151);
    let mut b = l.producer(5151);
    a.expect(b"REGISTER t\n", "OK");
    b.expect(b"REGISTER t\n", "OK");
    assert_eq!(producer_ports(&l.lookup("t")), [4151, 5151]);
    assert_eq!(l.nodes()["producers"].as_array().unwrap().len(), 2);
    // Keep b alive with PINGs; let a go quiet. REGISTER does not count.
    for _ in 0..5 {
        sleep_ms(500);
        b.expect(b"PING\n", "OK");
        a.expect(b"REGISTER t\n", "OK");
    }
    assert_eq!(producer_ports(&l.lookup("t")), [5151]);
    let nodes = l.nodes();
    let ports: Vec<i64> = nodes["producers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["http_port"].as_i64().unwrap())
        .collect();
    assert_eq!(ports, [5151]);
    // The topic itself is still known.
    assert_eq!(l.get_json("/topics"), r#"{"topics":["t"]}"#);
    // A PING brings it back.
    a.expect(b"PING\n", "OK");
    assert_eq!(producer_ports(&l.lookup("t")), [4151, 5151]);
    assert_eq!(l.nodes()["producers"].as_array().unwrap().len(), 2);
}

#[test]
fn item120_ephemeral_channel_removed_by_last_unregister() {
    let l = Lookupd::start(&[]);
    let mut a = l.producer(4151);
    let mut b = l.producer(5151);
    a.expect(b"REGISTER t c#ephemeral\n", "OK");
    b.expect(b"REGISTER t c#ephemeral\n", "OK");
    a.expect(b"REGISTER t c\n", "OK");
    assert_eq!(
        s(&l.get_json_value("/channels?topic=t")["channels"]),
        ["c", "c#ephemeral"]
    );
    a.expect(b"UNREGISTER t c#ephemeral\n", "OK");
    assert_eq!(
        s(&l.get_json_value("/channels?topic=t")["channels"]),
        ["c", "c#ephemeral"]
    );
    b.expect(b"UNREGISTER t c#ephemeral\n", "OK");
    assert_eq!(l.get_json("/channels?topic=t"), r#"{"channels":["c"]}"#);
    a.expect(b"UNREGISTER t c\n", "OK");
    assert_eq!(
        l.get_json("/channels?topic=t"),
        r#"{"channels":["c"]}"#,
        "non-ephemeral name stays"
    );
    // Ephemeral topics go when their last producer unregisters.
    a.expect(b"REGISTER e#ephemeral\n", "OK");
    assert_eq!(
        s(&l.get_json_value("/topics")["topics"]),
        ["e#ephemeral", "t"]
    );
    a.expect(b"UNREGISTER e#ephemeral\n", "OK");
    assert_eq!(l.get_json("/topics"), r#"{"topics":["t"]}"#);
}

// ---------------------------------------------------------------------------
// httprouter behaviour
// ---------------------------------------------------------------------------

#[test]
fn routing_404_405_options_and_redirects() {
    let l = Lookupd::start(&[]);
    for path in [
        "/nope",
        "/delete_topic?topic=t",
        "/tombstone_topic_producer",
        "/",
    ] {
        l.get(path).assert_error(404, "NOT_FOUND");
    }
    l.post("/create_topic?topic=t")
        .assert_error(404, "NOT_FOUND");
    l.post("/ping/").assert_error(404, "NOT_FOUND");

    let r = l.post("/ping");
    r.assert_error(405, "METHOD_NOT_ALLOWED");
    assert_eq!(r.header("Allow"), Some("GET, OPTIONS"));
    let r = l.get("/topic/create?topic=t");
    r.assert_error(405, "METHOD_NOT_ALLOWED");
    assert_eq!(r.header("Allow"), Some("OPTIONS, POST"));
    let r = l.req("PUT", "/debug/pprof/symbol");
    r.assert_error(405, "METHOD_NOT_ALLOWED");
    assert_eq!(r.header("Allow"), Some("GET, OPTIONS, POST"));
    assert_eq!(
        l.get_json("/topics"),
        r#"{"topics":[]}"#,
        "GET on a POST route changed nothing"
    );

    let r = l.req("OPTIONS", "/lookup");
    assert_eq!((r.status, r.text()), (200, String::new()));
    assert_eq!(r.header("Allow"), Some("GET, OPTIONS"));

    for (from, to) in [
        ("/ping/", "/ping"),
        ("/PING", "/ping"),
        ("//ping", "/ping"),
        ("/lookup/?topic=a&b=c", "/lookup?topic=a&b=c"),
    ] {
        let r = l.get(from);
        assert_eq!(r.status, 301, "GET {from}");
        assert_eq!(r.header("Location"), Some(to), "GET {from}");
        assert_eq!(r.header("Content-Type"), Some("text/html; charset=utf-8"));
        let href = to.replace('&', "&amp;");
        assert_eq!(
            r.text(),
            format!("<a href=\"{href}\">Moved Permanently</a>.\n\n")
        );
    }
    let r = l.post("/topic/create/?topic=t");
    assert_eq!(r.status, 307);
    assert_eq!(r.header("Location"), Some("/topic/create?topic=t"));
    assert_eq!(r.text(), "");
    assert_eq!(
        l.get_json("/topics"),
        r#"{"topics":[]}"#,
        "redirect did not run the handler"
    );
}

// ---------------------------------------------------------------------------
// Flags and process lifecycle
// ---------------------------------------------------------------------------

#[test]
fn sigterm_is_a_clean_shutdown() {
    let mut l = Lookupd::start(&[]);
    let mut c = l.producer(4151);
    c.expect(b"REGISTER t\n", "OK");
    nsq_tests::send_signal(l.pid(), libc::SIGTERM);
    let status = l
        .wait_exit(Duration::from_secs(10))
        .expect("exited after SIGTERM");
    assert_eq!(status.code(), Some(0), "stderr: {}", l.stderr());
    c.expect_closed();
    let log = l.stderr();
    assert!(
        log.contains("TCP: closing") && log.contains("HTTP: closing"),
        "{log}"
    );
}

#[test]
fn sigint_is_a_clean_shutdown() {
    let mut l = Lookupd::start(&[]);
    nsq_tests::send_signal(l.pid(), libc::SIGINT);
    let status = l
        .wait_exit(Duration::from_secs(10))
        .expect("exited after SIGINT");
    assert_eq!(status.code(), Some(0));
}

#[test]
fn version_flag() {
    for flag in ["--version", "-version"] {
        let out = nsq_tests::run_bin("nsqlookupd", &[flag], Duration::from_secs(10));
        assert_eq!(out.status.and_then(|s| s.code()), Some(0));
        assert!(
            out.stdout.starts_with("nsqlookupd v1.3.0 (built w/"),
            "{:?}",
            out.stdout
        );
        assert!(out.stdout.ends_with(")\n"), "{:?}", out.stdout);
    }
}

#[test]
fn bad_flags_exit_2() {
    for args in [
        &["--bogus"][..],
        &["--tombstone-lifetime=5"],
        &["--log-level=loud"],
        &["-inactive-producer-timeout", "x"],
    ] {
        let out = nsq_tests::run_bin("nsqlookupd", args, Duration::from_secs(10));
        assert_eq!(
            out.status.and_then(|s| s.code()),
            Some(2),
            "{args:?}: {}",
            out.stderr
        );
    }
}

#[test]
fn listen_failure_is_fatal_exit_1() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let tcp = format!("--tcp-address=127.0.0.1:{port}");
    let http = format!("--http-address=127.0.0.1:{}", free_port());
    let out = nsq_tests::run_bin("nsqlookupd", &[&tcp, &http], Duration::from_secs(10));
    assert_eq!(out.status.and_then(|s| s.code()), Some(1), "{}", out.stderr);
    let want = format!("listen (127.0.0.1:{port}) failed - listen tcp 127.0.0.1:{port}: bind: address already in use");
    assert!(
        out.stderr
            .contains("FATAL: failed to instantiate nsqlookupd")
            && out.stderr.contains(&want),
        "{}",
        out.stderr
    );
}

#[test]
fn go_style_flags_and_config_file() {
    // Single-dash flags with separate values; durations from the config file.
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("lookupd.toml");
    let (tcp_port, http_port) = (free_port(), free_port());
    fs::write(
        &cfg,
        format!("tcp_address = \"127.0.0.1:{tcp_port}\"\nbroadcast_address = \"from-config\"\ninactive_producer_timeout = \"1s\"\nlog_level = \"warn\"\n"),
    )
    .unwrap();
    let mut child = Command::new(bin_path("nsqlookupd"))
        .args([
            "-config",
            cfg.to_str().unwrap(),
            "-http-address",
            &format!("127.0.0.1:{http_port}"),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    struct Kill<'a>(&'a mut Child);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let guard = Kill(&mut child);
    let http = format!("127.0.0.1:{http_port}");
    wait_for(Duration::from_secs(10), "nsqlookupd /ping", || {
        http_request(&http, "GET", "/ping", &[], None)
            .ok()
            .filter(|r| r.status == 200)
    });
    let mut c = V1::connect(&format!("127.0.0.1:{tcp_port}"));
    c.send(b"  V1");
    c.identify(&producer_json(4151));
    let resp = String::from_utf8(c.read_response().unwrap()).unwrap();
    assert!(
        resp.starts_with(r#"{"broadcast_address":"from-config""#),
        "{resp}"
    );
    c.expect(b"REGISTER t\n", "OK");
    // inactive_producer_timeout = 1s from the config file.
    sleep_ms(1500);
    let r = http_request(&http, "GET", "/lookup?topic=t", &[], None).unwrap();
    assert_eq!(r.text(), r#"{"channels":[],"producers":[]}"#);
    drop(guard);
}

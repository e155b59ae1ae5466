//! nsqd security and observability, black-box: TLS (the IDENTIFY upgrade,
//! `--tls-required`, HTTPS, client certificates), Snappy and DEFLATE
//! streams, AUTH against an auth server run by the test, and `/metrics`.
//! Checklist items 41–44, 56–59, 92 (spec README).
//!
//! The client side is built from independent pieces — rustls for TLS, the
//! `snap` crate's frame codec, flate2 for raw DEFLATE, certificates made by
//! rcgen — so the server is checked against other implementations, not
//! against its own code.

#![forbid(unsafe_code)]

use std::cell::RefCell;
use std::io::{self, Cursor, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nsq_tests::pki::{https_request, Pki};
use nsq_tests::*;
use rustls::pki_types::ServerName;

const OK_FRAME: &[u8] = &[0, 0, 0, 6, 0, 0, 0, 0, b'O', b'K'];
const SNAPPY_ID: &[u8] = b"\xff\x06\x00\x00sNaPpY";

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

// ---------------------------------------------------------------------------
// A V2 client whose byte stream can be upgraded (TLS, Snappy, DEFLATE)
// ---------------------------------------------------------------------------

trait Io: Read + Write {}
impl<T: Read + Write> Io for T {}

/// The connection's current byte stream, shared by the reading and writing
/// layers stacked on it.
#[derive(Clone)]
struct Shared(Rc<RefCell<Box<dyn Io>>>);

impl Read for Shared {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        self.0.borrow_mut().read(b)
    }
}

impl Write for Shared {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0.borrow_mut().write(b)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.borrow_mut().flush()
    }
}

struct Wire {
    tcp: TcpStream,
    io: Shared,
    rx: Box<dyn Read>,
    tx: Box<dyn Write>,
}

impl Wire {
    /// Connects and sends the magic.
    fn connect(addr: &str) -> Wire {
        let tcp = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        tcp.set_nodelay(true).unwrap();
        tcp.set_read_timeout(Some(secs(5))).unwrap();
        tcp.set_write_timeout(Some(secs(5))).unwrap();
        let io = Shared(Rc::new(RefCell::new(Box::new(tcp.try_clone().unwrap()))));
        let mut w = Wire {
            tcp,
            rx: Box::new(io.clone()),
            tx: Box::new(io.clone()),
            io,
        };
        w.send(MAGIC_V2);
        w
    }

    fn send(&mut self, b: &[u8]) {
        self.tx.write_all(b).unwrap();
        self.tx.flush().unwrap();
    }

    fn try_frame(&mut self) -> io::Result<Frame> {
        let mut size = [0u8; 4];
        self.rx.read_exact(&mut size)?;
        let size = i32::from_be_bytes(size);
        assert!((4..=64 << 20).contains(&size), "bad frame size {size}");
        let mut data = vec![0u8; size as usize];
        self.rx.read_exact(&mut data)?;
        let ftype = i32::from_be_bytes(data[..4].try_into().unwrap());
        Ok(Frame {
            ftype,
            data: data[4..].to_vec(),
        })
    }

    /// The next frame that is not a heartbeat.
    fn frame(&mut self) -> Frame {
        loop {
            let f = self
                .try_frame()
                .unwrap_or_else(|e| panic!("reading a frame: {e}"));
            if !f.is_heartbeat() {
                return f;
            }
            self.send(b"NOP\n");
        }
    }

    fn expect_ok(&mut self) {
        let f = self.frame();
        assert_eq!(f.bytes(), OK_FRAME, "expected OK, got {f:?}");
    }

    fn identify(&mut self, json: &str) -> Value {
        self.send(&identify_cmd(json));
        let f = self.frame();
        assert_eq!(f.ftype, FRAME_RESPONSE, "IDENTIFY {json}: {f:?}");
        serde_json::from_slice(&f.data)
            .unwrap_or_else(|e| panic!("IDENTIFY answer is not JSON ({e}): {f:?}"))
    }

    fn expect_closed(&mut self) {
        let mut b = [0u8; 64];
        match self.rx.read(&mut b) {
            Ok(0) => {}
            Ok(n) => panic!("expected the connection to close, got {:?}", &b[..n]),
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::TimedOut =>
            {
                panic!("connection still open")
            }
            Err(_) => {} // reset, or TLS saying the peer left without close_notify
        }
    }

    fn start_tls(&mut self, cfg: Arc<rustls::ClientConfig>) {
        let conn =
            rustls::ClientConnection::new(cfg, ServerName::try_from("localhost").unwrap()).unwrap();
        let s = rustls::StreamOwned::new(conn, self.tcp.try_clone().unwrap());
        self.io = Shared(Rc::new(RefCell::new(Box::new(s))));
        self.rx = Box::new(self.io.clone());
        self.tx = Box::new(self.io.clone());
    }

    /// Snappy framing both ways. `id_consumed`: the stream identifier was
    /// already read off the wire by the caller.
    fn start_snappy(&mut self, id_consumed: bool) {
        let src: Box<dyn Read> = if id_consumed {
            Box::new(Cursor::new(SNAPPY_ID.to_vec()).chain(self.io.clone()))
        } else {
            Box::new(self.io.clone())
        };
        self.rx = Box::new(snap::read::FrameDecoder::new(src));
        self.tx = Box::new(snap::write::FrameEncoder::new(self.io.clone()));
    }

    fn start_deflate(&mut self, level: u32) {
        self.rx = Box::new(Inflate {
            inner: self.io.clone(),
            z: flate2::Decompress::new(false),
            out: Vec::new(),
            pos: 0,
        });
        self.tx = Box::new(flate2::write::DeflateEncoder::new(
            self.io.clone(),
            flate2::Compression::new(level),
        ));
    }

    /// Bytes exactly as they arrive on the current stream (below compression).
    fn raw(&mut self, n: usize) -> Vec<u8> {
        let mut b = vec![0u8; n];
        self.io.read_exact(&mut b).unwrap();
        b
    }

    fn publish(&mut self, topic: &str, body: &[u8]) {
        self.send(&pub_cmd(topic, body));
        self.expect_ok();
    }

    fn msg(&mut self) -> Msg {
        let f = self.frame();
        assert_eq!(f.ftype, FRAME_MESSAGE, "expected a message, got {f:?}");
        f.msg()
    }
}

/// Raw DEFLATE reader that hands out everything each sync flush completes
/// (flate2's `read::DeflateDecoder` waits for more input first, so it would
/// block on a request/response stream).
struct Inflate {
    inner: Shared,
    z: flate2::Decompress,
    out: Vec<u8>,
    pos: usize,
}

impl Read for Inflate {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.out.len() {
            let mut input = [0u8; 16384];
            let n = self.inner.read(&mut input)?;
            if n == 0 {
                return Ok(0);
            }
            self.out.clear();
            self.pos = 0;
            let mut used = 0;
            loop {
                self.out.reserve(65536);
                let (before_in, before_out) = (self.z.total_in(), self.z.total_out());
                self.z
                    .decompress_vec(
                        &input[used..n],
                        &mut self.out,
                        flate2::FlushDecompress::Sync,
                    )
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                let (consumed, produced) = (
                    (self.z.total_in() - before_in) as usize,
                    (self.z.total_out() - before_out) as usize,
                );
                used += consumed;
                if consumed == 0 && produced == 0 {
                    break;
                }
            }
        }
        let k = b.len().min(self.out.len() - self.pos);
        b[..k].copy_from_slice(&self.out[self.pos..self.pos + k]);
        self.pos += k;
        Ok(k)
    }
}

/// PUB on `p`, SUB/RDY/FIN on `c`: the bodies make the round trip intact.
fn round_trip(p: &mut Wire, c: &mut Wire, topic: &str, bodies: &[Vec<u8>]) {
    c.send(format!("SUB {topic} ch\n").as_bytes());
    c.expect_ok();
    c.send(format!("RDY {}\n", bodies.len()).as_bytes());
    for b in bodies {
        p.publish(topic, b);
    }
    let mut got = Vec::new();
    for _ in bodies {
        let m = c.msg();
        c.send(format!("FIN {}\n", m.id).as_bytes());
        got.push(m.body);
    }
    got.sort();
    let mut want = bodies.to_vec();
    want.sort();
    assert!(got == want, "bodies differ after the round trip");
}

fn big_body() -> Vec<u8> {
    (0..300_000u32)
        .map(|i| b"nsq-rs compresses this "[i as usize % 23])
        .collect()
}

fn client_json<'a>(stats: &'a Value, topic: &str) -> &'a Value {
    let ch = find_channel(stats, topic, "ch")
        .unwrap_or_else(|| panic!("no channel {topic}/ch in {stats}"));
    &ch["clients"][0]
}

// ---------------------------------------------------------------------------
// An nsqd whose plain HTTP may answer 403 (the harness waits for /ping 200)
// ---------------------------------------------------------------------------

struct Daemon {
    child: Child,
    tcp: String,
    http: String,
    https: String,
    _data: tempfile::TempDir,
    log: PathBuf,
    _logdir: tempfile::TempDir,
}

impl Daemon {
    fn start(extra: &[String]) -> Daemon {
        for _ in 0..5 {
            let data = tempfile::tempdir().unwrap();
            let logdir = tempfile::tempdir().unwrap();
            let log = logdir.path().join("stderr");
            let (tcp, http, https) = (free_port(), free_port(), free_port());
            let (tcp, http, https) = (
                format!("127.0.0.1:{tcp}"),
                format!("127.0.0.1:{http}"),
                format!("127.0.0.1:{https}"),
            );
            let mut args = vec![
                format!("--tcp-address={tcp}"),
                format!("--http-address={http}"),
                format!("--https-address={https}"),
                format!("--data-path={}", data.path().display()),
            ];
            args.extend(extra.iter().cloned());
            let mut child = Command::new(bin_path("nsqd"))
                .args(&args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .unwrap();
            let deadline = Instant::now() + secs(20);
            while Instant::now() < deadline {
                if child.try_wait().unwrap().is_some() {
                    break;
                }
                let up = http_request_timeout(&http, "GET", "/ping", &[], None, secs(1)).is_ok()
                    && TcpStream::connect(&tcp).is_ok();
                if up {
                    return Daemon {
                        child,
                        tcp,
                        http,
                        https,
                        _data: data,
                        log,
                        _logdir: logdir,
                    };
                }
                sleep_ms(50);
            }
            terminate(&mut child, secs(3));
        }
        panic!("nsqd {extra:?} did not start");
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        terminate(&mut self.child, secs(3));
    }
}

// ---------------------------------------------------------------------------
// TLS
// ---------------------------------------------------------------------------

#[test]
fn item43_tls_upgrade_after_identify_then_pub_sub() {
    let pki = Pki::new();
    let flags = pki.flags();
    let n = Nsqd::start(&flags.iter().map(String::as_str).collect::<Vec<_>>());
    let cfg = pki.client_config(None);
    let mut p = Wire::connect(&n.tcp_addr);
    let v = p.identify(r#"{"feature_negotiation":true,"tls_v1":true,"user_agent":"sec/1"}"#);
    assert_eq!(v["tls_v1"], true, "{v}");
    p.start_tls(cfg.clone());
    // the first frame through TLS is exactly F(0,"OK")
    let f = p.frame();
    assert_eq!(f.bytes(), OK_FRAME);
    let mut c = Wire::connect(&n.tcp_addr);
    assert_eq!(
        c.identify(r#"{"feature_negotiation":true,"tls_v1":true}"#)["tls_v1"],
        true
    );
    c.start_tls(cfg);
    c.expect_ok();
    round_trip(
        &mut p,
        &mut c,
        "tls_t",
        &[b"hello over tls".to_vec(), big_body()],
    );
    let s = n.stats("");
    let cl = client_json(&s, "tls_t");
    assert_eq!(cl["tls"], true, "{cl}");
    assert_eq!(cl["tls_version"], "TLS1.3", "{cl}");
    // Go names only some TLS 1.2 suites; TLS 1.3 ones are "Unknown <n>"
    assert!(
        cl["tls_cipher_suite"]
            .as_str()
            .unwrap()
            .starts_with("Unknown "),
        "{cl}"
    );
    assert_eq!(cl["tls_negotiated_protocol_is_mutual"], true);
    let prod = &s["producers"][0];
    assert_eq!(
        (prod["tls"].as_bool(), prod["user_agent"].as_str()),
        (Some(true), Some("sec/1")),
        "{prod}"
    );
}

#[test]
fn tls12_client_and_go_cipher_suite_names() {
    let pki = Pki::new();
    let flags = pki.flags();
    let n = Nsqd::start(&flags.iter().map(String::as_str).collect::<Vec<_>>());
    let mut provider = rustls::crypto::ring::default_provider();
    provider.cipher_suites =
        vec![rustls::crypto::ring::cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256];
    let cfg = pki.client_config_with(provider, None);
    let mut c = Wire::connect(&n.tcp_addr);
    c.identify(r#"{"feature_negotiation":true,"tls_v1":true}"#);
    c.start_tls(cfg);
    c.expect_ok();
    c.send(b"SUB tls12 ch\n");
    c.expect_ok();
    let s = n.stats("");
    let cl = client_json(&s, "tls12");
    assert_eq!(cl["tls_version"], "TLS1.2", "{cl}");
    assert_eq!(
        cl["tls_cipher_suite"], "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        "{cl}"
    );
}

#[test]
fn tls_not_offered_without_a_certificate() {
    let n = Nsqd::start(&[]);
    let mut c = Wire::connect(&n.tcp_addr);
    let v = c.identify(r#"{"feature_negotiation":true,"tls_v1":true}"#);
    assert_eq!(v["tls_v1"], false);
    c.publish("plain_t", b"x");
}

#[test]
fn tls_and_snappy_stack_in_nsqds_order() {
    let pki = Pki::new();
    let flags = pki.flags();
    let n = Nsqd::start(&flags.iter().map(String::as_str).collect::<Vec<_>>());
    let mut c = Wire::connect(&n.tcp_addr);
    let v = c.identify(r#"{"feature_negotiation":true,"tls_v1":true,"snappy":true}"#);
    assert_eq!(
        (v["tls_v1"].as_bool(), v["snappy"].as_bool()),
        (Some(true), Some(true))
    );
    c.start_tls(pki.client_config(None));
    c.expect_ok(); // encrypted, not compressed
    let mut want = SNAPPY_ID.to_vec();
    want.extend_from_slice(&[0x01, 0x0e, 0x00, 0x00, 0x26, 0x98, 0x2b, 0xcf]);
    want.extend_from_slice(OK_FRAME);
    assert_eq!(c.raw(want.len()), want, "snappy OK inside TLS");
    c.start_snappy(true);
    let mut p = Wire::connect(&n.tcp_addr);
    c.publish("tls_snappy", b"one");
    round_trip(&mut c, &mut p, "tls_snappy2", &[b"two".to_vec()]);
    let s = n.stats("");
    let prod = s["producers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["tls"] == true)
        .expect("TLS producer");
    assert_eq!(
        (prod["snappy"].as_bool(), prod["deflate"].as_bool()),
        (Some(true), Some(false))
    );
}

#[test]
fn tls_handshake_failure_is_identify_failed_in_plain_text() {
    let pki = Pki::new();
    let flags = pki.flags();
    let n = Nsqd::start(&flags.iter().map(String::as_str).collect::<Vec<_>>());
    let mut c = Wire::connect(&n.tcp_addr);
    c.identify(r#"{"feature_negotiation":true,"tls_v1":true}"#);
    c.send(b"NOT A TLS CLIENT HELLO\n");
    // rustls answers with a TLS alert record; the plain-text error frame follows
    let mut got = Vec::new();
    let _ = c.tcp.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got);
    let at = text
        .find("E_IDENTIFY_FAILED IDENTIFY failed ")
        .unwrap_or_else(|| panic!("no E_IDENTIFY_FAILED in {got:?}"));
    let size = i32::from_be_bytes(got[at - 8..at - 4].try_into().unwrap()) as usize;
    assert_eq!(
        (got[at - 4..at].to_vec(), at - 4 + size),
        (vec![0, 0, 0, 1], got.len()),
        "one error frame, then close: {text:?}"
    );
    n.assert_alive();
}

#[test]
fn item44_tls_required_refuses_every_command_but_identify() {
    let pki = Pki::new();
    let mut flags = pki.flags();
    flags.push("--tls-required=tcp-https".into());
    let n = Nsqd::start(&flags.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(n.get("/config/tls_required").text(), "1");
    let mut c = n.connect();
    c.send(&pub_cmd("t", b"x"));
    c.expect_error_fatal("E_INVALID cannot PUB in current state (TLS required)");
    for (cmd, name) in [
        (&b"NOP\n"[..], "NOP"),
        (b"FOO bar\n", "FOO"),
        (b"SUB t c\n", "SUB"),
        (b"AUTH\n", "AUTH"),
    ] {
        let mut c = n.connect();
        c.send(cmd);
        c.expect_error_fatal(format!(
            "E_INVALID cannot {name} in current state (TLS required)"
        ));
    }
    // IDENTIFY is still accepted; without the upgrade nothing else is
    let mut c = n.connect();
    let f = c.identify(r#"{"feature_negotiation":true}"#);
    assert!(f.text().contains("\"tls_v1\":false"), "{f:?}");
    c.cmd("NOP");
    c.expect_error_fatal("E_INVALID cannot NOP in current state (TLS required)");
    // after the upgrade everything works
    let mut w = Wire::connect(&n.tcp_addr);
    w.identify(r#"{"feature_negotiation":true,"tls_v1":true}"#);
    w.start_tls(pki.client_config(None));
    w.expect_ok();
    w.publish("t", b"over tls");
    // tcp-https: plain HTTP still serves
    n.http_pub("t", b"over http");
    assert_eq!(int(&n.topic_stats("t").unwrap(), "message_count"), 2);
}

#[test]
fn item92_tls_required_http_403_and_https_serves() {
    let pki = Pki::new();
    let mut flags = pki.flags();
    flags.push("--tls-required".into());
    let d = Daemon::start(&flags);
    let https_port = d.https.rsplit(':').next().unwrap().to_string();
    for (method, path) in [
        ("GET", "/ping"),
        ("POST", "/pub?topic=t"),
        ("GET", "/no/such/path"),
        ("GET", "/metrics"),
    ] {
        let r = http_request(
            &d.http,
            method,
            path,
            &[],
            if method == "POST" { Some(b"x") } else { None },
        )
        .unwrap();
        assert_eq!(r.status, 403, "{method} {path}");
        assert_eq!(
            r.text(),
            format!("{{\"message\": \"TLS_REQUIRED\", \"https_port\": {https_port}}}")
        );
        assert_eq!(r.header("X-NSQ-Content-Type"), Some("nsq; version=1.0"));
        assert_eq!(
            r.header("Content-Type"),
            Some("application/json; charset=utf-8")
        );
    }
    let cfg = pki.client_config(None);
    let r = https_request(&d.https, cfg.clone(), "GET", "/ping", None);
    assert_eq!((r.status, r.text().as_str()), (200, "OK"));
    let r = https_request(
        &d.https,
        cfg.clone(),
        "POST",
        "/pub?topic=https_t",
        Some(b"secure"),
    );
    assert_eq!((r.status, r.text().as_str()), (200, "OK"));
    let r = https_request(
        &d.https,
        cfg.clone(),
        "GET",
        "/stats?format=json&topic=https_t",
        None,
    );
    assert_eq!(r.json()["topics"][0]["message_count"], 1, "{}", r.text());
    assert_eq!(
        https_request(&d.https, cfg, "GET", "/config/tls_required", None).text(),
        "2"
    );
}

#[test]
fn client_certificates_require_verify_and_auth_common_name() {
    let pki = Pki::new();
    let auth = AuthServer::start(|_| {
        (200, r#"{"ttl":60,"identity":"cn-user","identity_url":"","authorizations":[{"topic":".*","channels":[".*"],"permissions":["publish"]}]}"#.into())
    });
    let mut flags = pki.flags();
    flags.push("--tls-client-auth-policy=require-verify".into());
    flags.push(format!("--tls-root-ca-file={}", pki.path("ca.pem")));
    flags.push(format!("--auth-http-address={}", auth.addr));
    let d = Daemon::start(&flags);
    // the policy alone makes TLS required
    assert_eq!(http_get(&d.http, "/ping").status, 403);
    // no client certificate: the handshake fails
    let mut c = Wire::connect(&d.tcp);
    c.identify(r#"{"feature_negotiation":true,"tls_v1":true}"#);
    c.start_tls(pki.client_config(None));
    assert!(
        c.try_frame().is_err(),
        "handshake without a client certificate must fail"
    );
    // a certificate from the CA: accepted, and its CN goes to the auth server
    let mut c = Wire::connect(&d.tcp);
    c.identify(r#"{"feature_negotiation":true,"tls_v1":true}"#);
    c.start_tls(pki.client_config(Some(pki.client_cert("worker-7"))));
    c.expect_ok();
    c.send(&body_cmd("AUTH", b"s3cret"));
    let f = c.frame();
    assert_eq!(
        f.text(),
        r#"{"identity":"cn-user","identity_url":"","permission_count":1}"#
    );
    let req = auth.requests().pop().unwrap();
    assert!(
        req.starts_with(
            "GET /auth?common_name=worker-7&remote_ip=127.0.0.1&secret=s3cret&tls=true HTTP/1.1"
        ),
        "{req}"
    );
    c.publish("cert_t", b"x");
    let cfg = pki.client_config(Some(pki.client_cert("admin")));
    assert_eq!(
        https_request(&d.https, cfg, "GET", "/config/tls_required", None).text(),
        "2",
        "{}",
        d.stderr()
    );
}

// ---------------------------------------------------------------------------
// Compression
// ---------------------------------------------------------------------------

#[test]
fn item41_snappy_exact_bytes_then_pub_sub() {
    let n = Nsqd::start(&[]);
    let mut c = Wire::connect(&n.tcp_addr);
    let v = c.identify(r#"{"feature_negotiation":true,"snappy":true}"#);
    assert_eq!(v["snappy"], true);
    let mut want = SNAPPY_ID.to_vec();
    want.extend_from_slice(&[0x01, 0x0e, 0x00, 0x00, 0x26, 0x98, 0x2b, 0xcf]);
    want.extend_from_slice(OK_FRAME);
    assert_eq!(c.raw(want.len()), want);
    c.start_snappy(true);
    let mut p = Wire::connect(&n.tcp_addr);
    p.identify(r#"{"feature_negotiation":true,"snappy":true}"#);
    p.start_snappy(false);
    p.expect_ok();
    round_trip(
        &mut p,
        &mut c,
        "snappy_t",
        &[b"small".to_vec(), big_body(), b"after big".to_vec()],
    );
    let s = n.stats("");
    assert_eq!(client_json(&s, "snappy_t")["snappy"], true);
    // uncompressed 0x01 chunks from the client are accepted too
    let mut u = Wire::connect(&n.tcp_addr);
    u.identify(r#"{"feature_negotiation":true,"snappy":true}"#);
    u.start_snappy(false);
    u.expect_ok();
    let cmd = pub_cmd("snappy_t", b"raw chunk");
    let mut chunk = SNAPPY_ID.to_vec();
    chunk.push(0x01);
    chunk.extend_from_slice(&((cmd.len() + 4) as u32).to_le_bytes()[..3]);
    chunk.extend_from_slice(&masked_crc32c(&cmd).to_le_bytes());
    chunk.extend_from_slice(&cmd);
    u.io.write_all(&chunk).unwrap();
    u.expect_ok();
}

/// Snappy's masked CRC-32C, written out here so the test does not trust the server's.
fn masked_crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    (!crc).rotate_right(15).wrapping_add(0xa282_ead8)
}

#[test]
fn snappy_corrupt_stream_closes_silently() {
    let n = Nsqd::start(&[]);
    let mut c = Wire::connect(&n.tcp_addr);
    c.identify(r#"{"feature_negotiation":true,"snappy":true}"#);
    c.start_snappy(false);
    c.expect_ok();
    // a data chunk before any stream identifier on a fresh stream is fine on
    // the wire only after one; here the checksum is wrong
    let mut bad = SNAPPY_ID.to_vec();
    bad.extend_from_slice(&[0x01, 0x08, 0, 0, 0, 0, 0, 0, b'N', b'O', b'P', b'\n']);
    c.io.write_all(&bad).unwrap();
    c.expect_closed();
    n.assert_alive();
}

#[test]
fn item42_deflate_levels_then_pub_sub() {
    let n = Nsqd::start(&[]);
    let mut c = Wire::connect(&n.tcp_addr);
    let v = c.identify(r#"{"feature_negotiation":true,"deflate":true,"deflate_level":9}"#);
    assert_eq!(
        (v["deflate"].as_bool(), v["deflate_level"].as_i64()),
        (Some(true), Some(6)),
        "clamped to --max-deflate-level: {v}"
    );
    c.start_deflate(6);
    c.expect_ok();
    let mut p = Wire::connect(&n.tcp_addr);
    let v = p.identify(r#"{"feature_negotiation":true,"deflate":true,"deflate_level":3}"#);
    assert_eq!(v["deflate_level"], 3);
    p.start_deflate(3);
    p.expect_ok();
    round_trip(
        &mut p,
        &mut c,
        "deflate_t",
        &[b"small".to_vec(), big_body(), b"after big".to_vec()],
    );
    let s = n.stats("");
    assert_eq!(client_json(&s, "deflate_t")["deflate"], true);
    let m = Nsqd::start(&["--max-deflate-level=9"]);
    let mut c = Wire::connect(&m.tcp_addr);
    assert_eq!(
        c.identify(r#"{"feature_negotiation":true,"deflate":true,"deflate_level":9}"#)
            ["deflate_level"],
        9
    );
    c.start_deflate(9);
    c.expect_ok();
    c.publish("d9", &big_body());
}

#[test]
fn compression_flags_turn_negotiation_off() {
    let n = Nsqd::start(&["--deflate=false"]);
    let mut c = Wire::connect(&n.tcp_addr);
    let v = c.identify(r#"{"feature_negotiation":true,"deflate":true}"#);
    assert_eq!(v["deflate"], false);
    c.publish("t", b"plain still");
}

// ---------------------------------------------------------------------------
// AUTH
// ---------------------------------------------------------------------------

/// A tiny auth server: answers every request with `respond(secret)` and
/// records the raw requests (head and body).
struct AuthServer {
    addr: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl AuthServer {
    fn start(respond: impl Fn(&str) -> (u16, String) + Send + 'static) -> AuthServer {
        AuthServer::start_with(None, respond)
    }

    /// With `tls`, the server speaks HTTPS.
    fn start_with(
        tls: Option<Arc<rustls::ServerConfig>>,
        respond: impl Fn(&str) -> (u16, String) + Send + 'static,
    ) -> AuthServer {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let log = Arc::new(Mutex::new(Vec::new()));
        let log2 = log.clone();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(s) = s else { continue };
                s.set_read_timeout(Some(secs(5))).ok();
                let mut s: Box<dyn Io> = match &tls {
                    None => Box::new(s),
                    Some(cfg) => Box::new(rustls::StreamOwned::new(
                        rustls::ServerConnection::new(cfg.clone()).unwrap(),
                        s,
                    )),
                };
                let mut req = Vec::new();
                let mut chunk = [0u8; 4096];
                let head_end = loop {
                    if let Some(i) = req.windows(4).position(|w| w == b"\r\n\r\n") {
                        break i + 4;
                    }
                    match s.read(&mut chunk) {
                        Ok(0) | Err(_) => break usize::MAX,
                        Ok(n) => req.extend_from_slice(&chunk[..n]),
                    }
                };
                if head_end == usize::MAX {
                    continue;
                }
                let head = String::from_utf8_lossy(&req[..head_end]).to_string();
                let len: usize = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse().unwrap_or(0))
                    })
                    .unwrap_or(0);
                while req.len() < head_end + len {
                    match s.read(&mut chunk) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => req.extend_from_slice(&chunk[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&req).to_string();
                let secret = secret_of(&text);
                log2.lock().unwrap().push(text);
                let (status, body) = respond(&secret);
                let resp = format!("HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
                let _ = s.write_all(resp.as_bytes());
                let _ = s.flush();
            }
        });
        AuthServer { addr, log }
    }

    fn requests(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

/// The secret of a GET query string or of a POST JSON body.
fn secret_of(req: &str) -> String {
    if let Some(i) = req.find("secret=") {
        let v: String = req[i + 7..]
            .chars()
            .take_while(|c| *c != '&' && *c != ' ')
            .collect();
        return v.replace('+', " ");
    }
    let body = req.split("\r\n\r\n").nth(1).unwrap_or("");
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v["secret"][0].as_str().map(String::from))
        .unwrap_or_default()
}

const GRANT_PUBLISH_ALLOWED: &str = r#"{"ttl":3600,"identity":"u","identity_url":"https://id.example/u","authorizations":[{"topic":"^allowed$","channels":[".*"],"permissions":["publish"]}]}"#;
const GRANT_SUBSCRIBE_ALL: &str = r#"{"ttl":3600,"identity":"s","identity_url":"","authorizations":[{"topic":".*","channels":[".*"],"permissions":["subscribe"]}]}"#;

fn standard_auth() -> AuthServer {
    AuthServer::start(|secret| match secret {
        "good" => (200, GRANT_PUBLISH_ALLOWED.into()),
        "subonly" => (200, GRANT_SUBSCRIBE_ALL.into()),
        "none" => (
            200,
            r#"{"ttl":60,"identity":"n","authorizations":[]}"#.into(),
        ),
        "badttl" => (200, r#"{"ttl":0,"authorizations":[]}"#.into()),
        _ => (401, r#"{"message":"denied"}"#.into()),
    })
}

fn auth(c: &mut Conn, secret: &str) {
    c.send(&body_cmd("AUTH", secret.as_bytes()));
}

#[test]
fn item57_auth_required_before_sub_and_pub() {
    let a = standard_auth();
    let n = Nsqd::start(&[&format!("--auth-http-address={}", a.addr)]);
    let mut c = n.connect();
    let f = c.identify(r#"{"feature_negotiation":true}"#);
    assert!(f.text().contains("\"auth_required\":true"), "{f:?}");
    c.cmd("SUB t c");
    c.expect_error_fatal("E_AUTH_FIRST AUTH required before SUB");
    let mut c = n.connect();
    c.send(&pub_cmd("allowed", b"x"));
    c.expect_error_fatal("E_AUTH_FIRST AUTH required before PUB");
    let mut c = n.connect();
    c.send(&dpub_cmd("allowed", 10, b"x"));
    c.expect_error_fatal("E_AUTH_FIRST AUTH required before DPUB");
    let mut c = n.connect();
    c.send(&mpub_cmd("allowed", &[b"x"]));
    c.expect_error_fatal("E_AUTH_FIRST AUTH required before MPUB");
    assert!(a.requests().is_empty(), "no AUTH, no query");
    // HTTP is never authorized
    n.http_pub("anything", b"x");
}

#[test]
fn item58_59_auth_grants_and_refusals() {
    let a = standard_auth();
    let n = Nsqd::start(&[&format!("--auth-http-address={}", a.addr)]);
    let mut c = n.connect();
    auth(&mut c, "good");
    c.expect_response(
        br#"{"identity":"u","identity_url":"https://id.example/u","permission_count":1}"#,
    );
    let req = a.requests().pop().unwrap();
    assert!(
        req.starts_with(
            "GET /auth?common_name=&remote_ip=127.0.0.1&secret=good&tls=false HTTP/1.1\r\n"
        ),
        "{req}"
    );
    assert!(
        req.to_ascii_lowercase()
            .contains("accept: application/vnd.nsq; version=1.0"),
        "{req}"
    );
    c.publish("allowed", b"ok");
    c.mpublish("allowed", &[b"a", b"b"]);
    c.send(&dpub_cmd("allowed", 5, b"d"));
    c.expect_ok();
    // /stats shows who the producer is
    let s = n.stats("");
    let p = &s["producers"][0];
    assert_eq!(
        (
            p["authed"].as_bool(),
            p["auth_identity"].as_str(),
            p["auth_identity_url"].as_str()
        ),
        (Some(true), Some("u"), Some("https://id.example/u")),
        "{p}"
    );
    auth(&mut c, "good");
    c.expect_error_fatal("E_INVALID AUTH already set");

    let mut c = n.connect();
    auth(&mut c, "good");
    c.recv();
    c.send(&pub_cmd("x", b"no"));
    c.expect_error_fatal(r#"E_UNAUTHORIZED AUTH failed for PUB on "x" """#);
    // MPUB is checked before its topic is created
    let mut c = n.connect();
    auth(&mut c, "good");
    c.recv();
    c.send(&mpub_cmd("mx", &[b"no"]));
    c.expect_error_fatal(r#"E_UNAUTHORIZED AUTH failed for MPUB on "mx" """#);
    assert!(
        n.topic_stats("mx").is_none(),
        "refused MPUB must not create its topic"
    );
    let mut c = n.connect();
    auth(&mut c, "good");
    c.recv();
    c.cmd("SUB allowed c");
    c.expect_error_fatal(r#"E_UNAUTHORIZED AUTH failed for SUB on "allowed" "c""#);

    // item 59: subscribe only
    let mut c = n.connect();
    auth(&mut c, "subonly");
    c.expect_response(br#"{"identity":"s","identity_url":"","permission_count":1}"#);
    c.sub("allowed", "c");
    let s = n.stats("");
    let cl = &find_channel(&s, "allowed", "c").unwrap()["clients"][0];
    assert_eq!(
        (cl["authed"].as_bool(), cl["auth_identity"].as_str()),
        (Some(true), Some("s"))
    );
    assert!(
        cl.get("auth_identity_url").is_none(),
        "empty identity_url is omitted: {cl}"
    );
    let mut c = n.connect();
    auth(&mut c, "subonly");
    c.recv();
    c.send(&pub_cmd("t", b"x"));
    c.expect_error_fatal(r#"E_UNAUTHORIZED AUTH failed for PUB on "t" """#);

    for (secret, err) in [
        ("bad", "E_AUTH_FAILED AUTH failed"),
        ("badttl", "E_AUTH_FAILED AUTH failed"),
        ("none", "E_UNAUTHORIZED AUTH no authorizations found"),
    ] {
        let mut c = n.connect();
        auth(&mut c, secret);
        c.expect_error_fatal(err);
    }
}

#[test]
fn item56_auth_disabled_without_auth_server() {
    let n = Nsqd::start(&[]);
    let mut c = n.connect();
    auth(&mut c, "x");
    c.expect_error_fatal("E_AUTH_DISABLED AUTH disabled");
}

#[test]
fn auth_post_method_ttl_expiry_and_requery() {
    let fail = Arc::new(Mutex::new(false));
    let f2 = fail.clone();
    let a = AuthServer::start(move |_| {
        if *f2.lock().unwrap() {
            (500, "{}".into())
        } else {
            (200, r#"{"ttl":1,"identity":"t","authorizations":[{"topic":".*","channels":[".*"],"permissions":["publish"]}]}"#.into())
        }
    });
    let n = Nsqd::start(&[
        &format!("--auth-http-address={}", a.addr),
        "--auth-http-request-method=post",
    ]);
    let mut c = n.connect();
    auth(&mut c, "good");
    c.expect_response(br#"{"identity":"t","identity_url":"","permission_count":1}"#);
    let req = a.requests().pop().unwrap();
    assert!(req.starts_with("POST /auth HTTP/1.1\r\n"), "{req}");
    assert!(
        req.to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{req}"
    );
    assert!(
        req.ends_with(
            r#"{"common_name":[""],"remote_ip":["127.0.0.1"],"secret":["good"],"tls":["false"]}"#
        ),
        "{req}"
    );
    c.publish("t", b"1");
    assert_eq!(a.requests().len(), 1, "within the TTL the answer is cached");
    sleep_ms(1300);
    c.publish("t", b"2");
    assert_eq!(
        a.requests().len(),
        2,
        "expired authorizations are queried again"
    );
    *fail.lock().unwrap() = true;
    sleep_ms(1300);
    c.send(&pub_cmd("t", b"3"));
    c.expect_error_fatal("E_AUTH_FAILED AUTH failed");
}

#[test]
fn auth_over_https_and_nsqd_style_403_redirect() {
    let pki = Pki::new();
    let secure = AuthServer::start_with(Some(pki.server_config()), |_| {
        (200, GRANT_PUBLISH_ALLOWED.into())
    });
    let https_port = secure.addr.rsplit(':').next().unwrap().to_string();
    // a plain server that, like an nsqd under --tls-required, points to HTTPS
    let plain = AuthServer::start(move |_| {
        (
            403,
            format!("{{\"message\": \"TLS_REQUIRED\", \"https_port\": {https_port}}}"),
        )
    });
    let ca = format!("--tls-root-ca-file={}", pki.path("ca.pem"));
    for addr in [format!("https://{}/auth", secure.addr), plain.addr.clone()] {
        let n = Nsqd::start(&[&format!("--auth-http-address={addr}"), &ca]);
        let mut c = n.connect();
        auth(&mut c, "good");
        c.expect_response(
            br#"{"identity":"u","identity_url":"https://id.example/u","permission_count":1}"#,
        );
        c.publish("allowed", b"x");
    }
    assert_eq!(plain.requests().len(), 1);
    assert_eq!(secure.requests().len(), 2);
    assert!(
        secure.requests()[1].starts_with(
            "GET /auth?common_name=&remote_ip=127.0.0.1&secret=good&tls=false HTTP/1.1"
        ),
        "{:?}",
        secure.requests()
    );
    // without the CA the HTTPS server is not trusted
    let n = Nsqd::start(&[&format!("--auth-http-address=https://{}/auth", secure.addr)]);
    let mut c = n.connect();
    auth(&mut c, "good");
    c.expect_error_fatal("E_AUTH_FAILED AUTH failed");
}

#[test]
fn tls_configuration_errors_are_fatal() {
    let out = run_bin(
        "nsqd",
        &[
            "--tls-required=true",
            "--tcp-address=127.0.0.1:0",
            "--http-address=127.0.0.1:0",
        ],
        secs(10),
    );
    assert_eq!(out.status.and_then(|s| s.code()), Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("FATAL: failed to instantiate nsqd - cannot require TLS client connections without TLS key and cert"), "{}", out.stderr);
    let out = run_bin(
        "nsqd",
        &[
            "--tls-client-auth-policy=require",
            "--tcp-address=127.0.0.1:0",
            "--http-address=127.0.0.1:0",
        ],
        secs(10),
    );
    assert!(
        out.stderr
            .contains("cannot require TLS client connections without TLS key and cert"),
        "{}",
        out.stderr
    );
    let out = run_bin(
        "nsqd",
        &[
            "--tls-cert=/nonexistent/c.pem",
            "--tls-key=/nonexistent/k.pem",
            "--tcp-address=127.0.0.1:0",
            "--http-address=127.0.0.1:0",
        ],
        secs(10),
    );
    assert_eq!(out.status.and_then(|s| s.code()), Some(1), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("FATAL: failed to instantiate nsqd - failed to build TLS config - "),
        "{}",
        out.stderr
    );

    // A file that is not PEM: Go's words, then the flag and the file, so the
    // operator knows which of the three to fix.
    let pki = Pki::new();
    let not_pem = pki.path("not.pem");
    std::fs::write(&not_pem, "not a certificate").unwrap();
    let (cert, key) = (
        format!("--tls-cert={}", pki.path("cert.pem")),
        format!("--tls-key={}", pki.path("key.pem")),
    );
    let cases = [
        (
            vec![format!("--tls-cert={not_pem}"), key.clone()],
            format!("tls: failed to find any PEM data in certificate input (--tls-cert={not_pem})"),
        ),
        (
            vec![cert.clone(), format!("--tls-key={not_pem}")],
            format!("tls: failed to find any PEM data in key input (--tls-key={not_pem})"),
        ),
        (
            vec![
                cert.clone(),
                key.clone(),
                "--tls-client-auth-policy=require-verify".to_string(),
                format!("--tls-root-ca-file={not_pem}"),
            ],
            format!("failed to append certificate to pool (--tls-root-ca-file={not_pem})"),
        ),
    ];
    for (flags, want) in cases {
        let mut args: Vec<&str> = flags.iter().map(String::as_str).collect();
        args.extend(["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0"]);
        let out = run_bin("nsqd", &args, secs(10));
        assert_eq!(out.status.and_then(|s| s.code()), Some(1), "{}", out.stderr);
        assert!(
            out.stderr.contains(&want),
            "want {want:?} in {}",
            out.stderr
        );
    }
}

#[test]
fn auth_full_url_and_failover_between_servers() {
    let a = standard_auth();
    // nothing listens here: that server fails, the other answers
    let dead = format!("127.0.0.1:{}", free_port());
    let n = Nsqd::start(&[
        &format!("--auth-http-address={dead}"),
        &format!("--auth-http-address=http://{}/custom/check", a.addr),
    ]);
    for _ in 0..4 {
        let mut c = n.connect();
        auth(&mut c, "good");
        c.expect_response(
            br#"{"identity":"u","identity_url":"https://id.example/u","permission_count":1}"#,
        );
    }
    assert!(
        a.requests()
            .iter()
            .all(|r| r.starts_with("GET /custom/check?common_name=")),
        "{:?}",
        a.requests()
    );
}

// ---------------------------------------------------------------------------
// GET /metrics (nsq-rs addition)
// ---------------------------------------------------------------------------

/// One Prometheus sample: name, labels, value.
type Sample = (String, Vec<(String, String)>, f64);

/// `name{labels} value` samples of a Prometheus text exposition, checking
/// every family has HELP and TYPE lines before its samples.
fn parse_prometheus(text: &str) -> Vec<Sample> {
    let mut typed = std::collections::HashSet::new();
    let mut helped = std::collections::HashSet::new();
    let mut out = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            helped.insert(rest.split(' ').next().unwrap().to_string());
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut it = rest.split(' ');
            let name = it.next().unwrap().to_string();
            let kind = it.next().unwrap();
            assert!(
                ["counter", "gauge", "summary", "histogram", "untyped"].contains(&kind),
                "bad TYPE line {line:?}"
            );
            typed.insert(name);
            continue;
        }
        assert!(
            !line.starts_with('#') && !line.is_empty(),
            "unexpected line {line:?}"
        );
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("no value in {line:?}"));
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value in {line:?}"));
        let (name, labels) = match series.split_once('{') {
            None => (series.to_string(), vec![]),
            Some((n, l)) => {
                let l = l
                    .strip_suffix('}')
                    .unwrap_or_else(|| panic!("unterminated labels in {line:?}"));
                let labels = l
                    .split(',')
                    .map(|kv| {
                        let (k, v) = kv.split_once('=').unwrap();
                        (k.to_string(), v.trim_matches('"').to_string())
                    })
                    .collect();
                (n.to_string(), labels)
            }
        };
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad metric name {name:?}"
        );
        assert!(
            typed.contains(&name) && helped.contains(&name),
            "{name} has no HELP/TYPE before its samples"
        );
        out.push((name, labels, value));
    }
    out
}

fn metric(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .find(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v))
                && l.len() == labels.len()
        })
        .unwrap_or_else(|| panic!("no sample {name}{labels:?}"))
        .2
}

#[test]
fn metrics_prometheus_text_agrees_with_stats() {
    let n = Nsqd::start(&["--e2e-processing-latency-percentile=0.99,0.5"]);
    let mut c = n.connect();
    c.sub("mt", "c1");
    for i in 0..5 {
        n.http_pub("mt", format!("m{i}").as_bytes());
    }
    assert_eq!(
        n.post("/channel/create?topic=mt&channel=c2", b"").status,
        200
    );
    n.http_pub("mt", b"late");
    c.rdy(3);
    let m1 = c.expect_msg();
    let m2 = c.expect_msg();
    c.expect_msg();
    c.rdy(0);
    c.fin(&m1.id);
    c.req(&m2.id, 0);
    wait_for(secs(5), "FIN and REQ applied", || {
        (int(&n.channel_stats("mt", "c1").unwrap(), "requeue_count") == 1).then_some(())
    });
    let r = n.get("/metrics");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("Content-Type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let samples = parse_prometheus(&r.text());
    let s = n.stats("");
    let t = find_topic(&s, "mt").unwrap();
    let tl = [("topic", "mt")];
    assert_eq!(
        metric(&samples, "nsqd_topic_messages_total", &tl),
        int(t, "message_count") as f64
    );
    assert_eq!(
        metric(&samples, "nsqd_topic_message_bytes_total", &tl),
        int(t, "message_bytes") as f64
    );
    assert_eq!(
        metric(&samples, "nsqd_topic_depth", &tl),
        int(t, "depth") as f64
    );
    assert_eq!(metric(&samples, "nsqd_topic_channels", &tl), 2.0);
    for ch in ["c1", "c2"] {
        let cs = find_channel(&s, "mt", ch).unwrap();
        let cl = [("topic", "mt"), ("channel", ch)];
        for (m, k) in [
            ("nsqd_channel_depth", "depth"),
            ("nsqd_channel_backend_depth", "backend_depth"),
            ("nsqd_channel_in_flight", "in_flight_count"),
            ("nsqd_channel_deferred", "deferred_count"),
            ("nsqd_channel_messages_total", "message_count"),
            ("nsqd_channel_requeued_total", "requeue_count"),
            ("nsqd_channel_timed_out_total", "timeout_count"),
            ("nsqd_channel_clients", "client_count"),
        ] {
            assert_eq!(metric(&samples, m, &cl), int(cs, k) as f64, "{m} of {ch}");
        }
    }
    assert_eq!(
        metric(
            &samples,
            "nsqd_channel_messages_total",
            &[("topic", "mt"), ("channel", "c1")]
        ),
        6.0
    );
    assert_eq!(
        metric(
            &samples,
            "nsqd_channel_messages_total",
            &[("topic", "mt"), ("channel", "c2")]
        ),
        1.0
    );
    assert_eq!(
        metric(
            &samples,
            "nsqd_channel_in_flight",
            &[("topic", "mt"), ("channel", "c1")]
        ),
        1.0
    );
    // one FIN: E2E quantiles exist, in seconds, close to the /stats ns value
    let p99 = find_channel(&s, "mt", "c1").unwrap()["e2e_processing_latency"]["percentiles"][0]
        ["value"]
        .as_f64()
        .unwrap();
    let q = metric(
        &samples,
        "nsqd_channel_e2e_processing_latency_seconds",
        &[("topic", "mt"), ("channel", "c1"), ("quantile", "0.99")],
    );
    assert!((q - p99 / 1e9).abs() < 1e-6, "{q} vs {p99}ns");
    assert_eq!(metric(&samples, "nsqd_clients", &[]), 1.0);
    assert_eq!(metric(&samples, "nsqd_up", &[]), 1.0);
    assert_eq!(
        metric(&samples, "nsqd_start_time_seconds", &[]),
        int(&s, "start_time") as f64
    );
}

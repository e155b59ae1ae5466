//! Hostile input on every port (issue 9, part 5), black-box: nsqd TCP and
//! HTTP, nsqlookupd TCP and HTTP, nsqadmin HTTP. Seeded garbage payloads
//! (`NSQ_HOSTILE_N` per port, default 2000), oversized headers and bodies,
//! half-open and slow connections, invalid UTF-8 in topic/channel names.
//!
//! After every phase each daemon still answers `/ping`, a normal client still
//! gets a PUB+SUB round trip on its own connections, and RSS stays bounded.

#![forbid(unsafe_code)]

#[path = "../src/admin_util.rs"]
mod admin_util;

use admin_util::*;
use nsq_tests::*;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// RSS may grow by at most this much over the whole run (KiB).
const RSS_BOUND_KIB: u64 = 200 * 1024;

/// The whole cluster under attack plus a well-behaved client.
struct Target {
    lookupd: Lookupd,
    nsqd: Nsqd,
    admin: Daemon,
    /// Normal client: a publisher and a subscriber on their own connections.
    publisher: Conn,
    subscriber: Conn,
    round_trips: usize,
}

impl Target {
    fn start() -> Target {
        let lookupd = Lookupd::start(&[]);
        let nsqd = Nsqd::start(&[
            &format!("--lookupd-tcp-address={}", lookupd.tcp),
            "--broadcast-address=127.0.0.1",
        ]);
        let admin = start_admin(&[&format!("--lookupd-http-address={}", lookupd.http)]);
        let mut publisher = nsqd.connect();
        publisher.publish("normal", b"warmup");
        let mut subscriber = nsqd.connect();
        subscriber.sub("normal", "c");
        subscriber.rdy(1);
        let m = subscriber.expect_msg_within(secs(5));
        subscriber.fin(&m.id);
        Target {
            lookupd,
            nsqd,
            admin,
            publisher,
            subscriber,
            round_trips: 0,
        }
    }

    /// One PUB+SUB round trip for the normal client; returns its latency.
    fn round_trip(&mut self) -> Duration {
        let t = Instant::now();
        let body = format!("normal-{}", self.round_trips);
        self.publisher.publish("normal", body.as_bytes());
        self.subscriber.rdy(1);
        let m = self.subscriber.expect_msg_within(secs(5));
        assert_eq!(
            m.body,
            body.as_bytes(),
            "the normal client gets its own message back"
        );
        self.subscriber.fin(&m.id);
        self.round_trips += 1;
        t.elapsed()
    }

    /// Every daemon answers `/ping`, and the normal client is served.
    fn check_alive(&mut self, phase: &str) {
        for (name, addr) in [
            ("nsqd", &self.nsqd.http_addr),
            ("nsqlookupd", &self.lookupd.http),
            ("nsqadmin", &self.admin.http_addr),
        ] {
            let r = http_request_timeout(addr, "GET", "/ping", &[], None, secs(5))
                .unwrap_or_else(|e| panic!("{name} /ping after {phase}: {e}"));
            assert_eq!(
                (r.status, r.body.as_slice()),
                (200, &b"OK"[..]),
                "{name} /ping after {phase}"
            );
        }
        let lat = self.round_trip();
        assert!(
            lat < secs(3),
            "normal round trip took {lat:?} after {phase}"
        );
    }

    fn rss(&self) -> [u64; 3] {
        [
            rss_kib(self.nsqd.pid()),
            rss_kib(self.lookupd.pid()),
            rss_kib(self.admin.pid()),
        ]
    }

    /// (name, address, is_http) of every port.
    fn ports(&self) -> Vec<(&'static str, String, bool)> {
        vec![
            ("nsqd-tcp", self.nsqd.tcp_addr.clone(), false),
            ("nsqd-http", self.nsqd.http_addr.clone(), true),
            ("nsqlookupd-tcp", self.lookupd.tcp.clone(), false),
            ("nsqlookupd-http", self.lookupd.http.clone(), true),
            ("nsqadmin-http", self.admin.http_addr.clone(), true),
        ]
    }
}

/// Send `payload`, half-close, and read until the server closes (or `timeout`).
/// Returns what came back, or `None` if the connection stayed open.
fn send_and_drain(addr: &str, payload: &[u8], timeout: Duration) -> Option<Vec<u8>> {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_write_timeout(Some(timeout)).ok();
    s.set_read_timeout(Some(Duration::from_millis(200))).ok();
    let _ = s.write_all(payload);
    let _ = s.shutdown(Shutdown::Write);
    let deadline = Instant::now() + timeout;
    let mut out = Vec::new();
    let mut buf = [0u8; 16384];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Some(out),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if is_closed_err(&e) => return Some(out),
            Err(_) => {}
        }
        if Instant::now() >= deadline {
            return None;
        }
    }
}

/// A seeded garbage payload shaped for the port: raw noise, or a valid prefix
/// (magic, command word, request line) followed by noise.
fn garbage(rng: &mut Rng, port: &str) -> Vec<u8> {
    let len = 1 + rng.below(600) as usize;
    let noise = rng.bytes(len);
    let prefixes: &[&[u8]] = match port {
        "nsqd-tcp" => &[
            b"",
            b"  V2",
            b"  V2PUB t\n",
            b"  V2MPUB t\n",
            b"  V2IDENTIFY\n",
            b"  V2SUB t c\n",
            b"  V2AUTH\n",
            b"  V2DPUB t 10\n",
        ],
        "nsqlookupd-tcp" => &[
            b"",
            b"  V1",
            b"  V1IDENTIFY\n",
            b"  V1REGISTER ",
            b"  V1PING\n",
        ],
        _ => &[
            b"",
            b"GET /",
            b"POST /pub?topic=g HTTP/1.1\r\n",
            b"POST /mpub?topic=g&binary=true HTTP/1.1\r\nContent-Length: 64\r\n\r\n",
            b"GET /stats HTTP/1.1\r\n",
            b"PUT /api/topics HTTP/1.1\r\n",
        ],
    };
    let mut p = prefixes[rng.below(prefixes.len() as u64) as usize].to_vec();
    p.extend_from_slice(&noise);
    p
}

#[test]
fn garbage_oversized_half_open_slow_and_bad_names_on_every_port() {
    let n_garbage = env_usize("NSQ_HOSTILE_N", 2000);
    let mut t = Target::start();
    let rss0 = t.rss();
    eprintln!(
        "RSS before (KiB): nsqd {} nsqlookupd {} nsqadmin {}",
        rss0[0], rss0[1], rss0[2]
    );

    // ---- 1. garbage ----------------------------------------------------
    let mut rng = Rng::new(0x6a72_6261_6765);
    for (name, addr, is_http) in t.ports() {
        let t0 = Instant::now();
        let (mut closed, mut answered) = (0usize, 0usize);
        for i in 0..n_garbage {
            let payload = garbage(&mut rng, name);
            let got = send_and_drain(&addr, &payload, secs(10)).unwrap_or_else(|| {
                panic!("{name}: garbage #{i} left the connection open after EOF: {payload:?}")
            });
            if is_http && !got.is_empty() {
                assert!(
                    got.starts_with(b"HTTP/1."),
                    "{name}: garbage #{i} answered with non-HTTP {:?}",
                    String::from_utf8_lossy(&got)
                );
                answered += 1;
            } else {
                closed += 1;
            }
            if i % 200 == 199 {
                let lat = t.round_trip();
                assert!(
                    lat < secs(3),
                    "{name}: normal round trip took {lat:?} during garbage"
                );
            }
        }
        eprintln!("{name}: {n_garbage} garbage payloads in {:?} ({answered} HTTP answers, {closed} closes)", t0.elapsed());
        t.check_alive(&format!("garbage on {name}"));
    }

    // ---- 2. oversized headers and bodies -------------------------------
    let huge_header = format!(
        "GET /ping HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(1 << 20)
    );
    for (name, addr, is_http) in t.ports() {
        if is_http {
            match http_raw(&addr, huge_header.as_bytes(), secs(10)) {
                Ok(r) => assert!(
                    r.status >= 400,
                    "{name}: 1 MiB header answered {}",
                    r.status
                ),
                Err(e) => assert!(
                    is_closed_err(&e) || e.kind() == std::io::ErrorKind::InvalidData,
                    "{name}: 1 MiB header: {e}"
                ),
            }
        } else {
            // A 1 MiB command line with no newline: nsqd/nsqlookupd must close.
            let magic: &[u8] = if name == "nsqd-tcp" { b"  V2" } else { b"  V1" };
            let mut p = magic.to_vec();
            p.extend(std::iter::repeat_n(b'A', 1 << 20));
            let mut c = Conn::connect_raw(&addr);
            let _ = c.try_send(&p);
            c.read_until_closed(secs(10));
        }
        t.check_alive(&format!("1 MiB header on {name}"));
    }
    let big = vec![b'z'; 20 << 20];
    for path in ["/pub?topic=big", "/mpub?topic=big"] {
        match http_request_timeout(&t.nsqd.http_addr, "POST", path, &[], Some(&big), secs(30)) {
            Ok(r) => {
                let want = if path.starts_with("/pub") {
                    "MSG_TOO_BIG"
                } else {
                    "BODY_TOO_BIG"
                };
                r.assert_error(413, want);
            }
            Err(e) => assert!(is_closed_err(&e), "20 MiB POST {path}: {e}"),
        }
        t.check_alive(&format!("20 MiB body to nsqd {path}"));
    }
    for (name, addr, path) in [
        (
            "nsqlookupd-http",
            t.lookupd.http.clone(),
            "/topic/create?topic=big",
        ),
        ("nsqadmin-http", t.admin.http_addr.clone(), "/api/topics"),
    ] {
        match http_request_timeout(&addr, "POST", path, &[], Some(&big), secs(30)) {
            Ok(r) => eprintln!("{name}: 20 MiB POST {path} → {}", r.status),
            Err(e) => eprintln!("{name}: 20 MiB POST {path} → {e}"),
        }
        t.check_alive(&format!("20 MiB body to {name}"));
    }
    // Over TCP: a 20 MiB PUB and MPUB are refused with NSQ's fatal errors.
    let mut c = t.nsqd.connect();
    let mut head = b"PUB big\n".to_vec();
    head.extend_from_slice(&(20u32 << 20).to_be_bytes());
    let _ = c.try_send(&head);
    c.expect_error_fatal_or_reset("E_BAD_MESSAGE PUB message too big 20971520 > 1048576");
    let mut c = t.nsqd.connect();
    let mut head = b"MPUB big\n".to_vec();
    head.extend_from_slice(&(20u32 << 20).to_be_bytes());
    let _ = c.try_send(&head);
    c.expect_error_fatal_or_reset("E_BAD_BODY MPUB body too big 20971520 > 5242880");
    t.check_alive("20 MiB bodies over TCP");

    // ---- 3. half-open connections -----------------------------------------
    let mut idle = Vec::new();
    for (_, addr, _) in t.ports() {
        for _ in 0..100 {
            idle.push(TcpStream::connect(&addr).unwrap());
        }
    }
    for _ in 0..5 {
        t.check_alive("500 half-open connections");
    }
    drop(idle);
    t.check_alive("half-open connections dropped");

    // ---- 4. slow connections: one byte per 100 ms ---------------------------
    let threads = slow_clients(&t, Duration::from_millis(100));
    let t0 = Instant::now();
    let mut worst = Duration::ZERO;
    while t0.elapsed() < secs(3) {
        worst = worst.max(t.round_trip());
        sleep_ms(50);
    }
    for th in threads {
        th.join().expect("slow client");
    }
    assert!(
        worst < secs(1),
        "a slow client delayed the normal client by {worst:?}"
    );
    t.check_alive("slow connections");

    // ---- 5. invalid UTF-8 (and other bad bytes) in names ---------------------
    let mut c = t.nsqd.connect();
    c.send(b"PUB \xff\xfe\n\x00\x00\x00\x01x");
    c.expect_error_fatal(b"E_BAD_TOPIC PUB topic name \"\\xff\\xfe\" is not valid");
    let mut c = t.nsqd.connect();
    c.send(b"SUB t\xc3 c\n");
    c.expect_error_fatal(b"E_BAD_TOPIC SUB topic name \"t\\xc3\" is not valid");
    let mut c = t.nsqd.connect();
    c.send(b"SUB t \xed\xa0\x80\n");
    c.expect_error_fatal(b"E_BAD_CHANNEL SUB channel name \"\\xed\\xa0\\x80\" is not valid");
    t.nsqd
        .post("/pub?topic=%FF%FE", b"x")
        .assert_error(400, "INVALID_TOPIC");
    t.nsqd
        .post("/topic/create?topic=t%C3", b"")
        .assert_error(400, "INVALID_TOPIC");
    t.nsqd
        .post("/channel/create?topic=t&channel=%ED%A0%80", b"")
        .assert_error(400, "INVALID_ARG_CHANNEL");
    http_post(&t.lookupd.http, "/topic/create?topic=%FF", b"")
        .assert_error(400, "INVALID_ARG_TOPIC");
    // nsqlookupd TCP: REGISTER with an invalid UTF-8 name, echoed as raw bytes.
    let mut l = Conn::connect_raw(&t.lookupd.tcp);
    let body = r#"{"broadcast_address":"127.0.0.1","tcp_port":1,"http_port":2,"version":"1.3.0"}"#;
    let mut p = b"  V1IDENTIFY\n".to_vec();
    p.extend_from_slice(&(body.len() as u32).to_be_bytes());
    p.extend_from_slice(body.as_bytes());
    p.extend_from_slice(b"REGISTER \xff\n");
    l.send(&p);
    let got = l.read_until_closed(secs(5));
    let msg: &[u8] = b"E_BAD_TOPIC REGISTER topic name '\xff' is not valid";
    let want = [&(msg.len() as u32).to_be_bytes()[..], msg].concat();
    assert!(
        got.ends_with(&want),
        "nsqlookupd REGISTER \\xff: got {:?}",
        String::from_utf8_lossy(&got)
    );
    // Raw (not percent-encoded) bad bytes in request lines: refused, never a 2xx or 5xx.
    for (name, addr, is_http) in t.ports() {
        if !is_http {
            continue;
        }
        for path in ["/topic/create?topic=\u{fffd}", "/api/topics/\u{fffd}"] {
            let raw = [
                &b"POST "[..],
                &path
                    .as_bytes()
                    .iter()
                    .map(|&b| if b >= 0x80 { 0xff } else { b })
                    .collect::<Vec<u8>>(),
                b" HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            ]
            .concat();
            match http_raw(&addr, &raw, secs(5)) {
                Ok(r) => assert!(
                    (400..500).contains(&r.status),
                    "{name}: raw \\xff in {path} answered {} {}",
                    r.status,
                    r.text()
                ),
                Err(e) => assert!(is_closed_err(&e), "{name}: raw \\xff in {path}: {e}"),
            }
        }
    }
    t.check_alive("invalid UTF-8 names");

    // ---- RSS -----------------------------------------------------------------
    let rss1 = t.rss();
    eprintln!(
        "RSS after (KiB): nsqd {} nsqlookupd {} nsqadmin {}; normal round trips: {}",
        rss1[0], rss1[1], rss1[2], t.round_trips
    );
    for (i, name) in ["nsqd", "nsqlookupd", "nsqadmin"].iter().enumerate() {
        assert!(rss1[i] > 0 && rss0[i] > 0, "{name} RSS readable");
        assert!(
            rss1[i] < rss0[i] + RSS_BOUND_KIB,
            "{name} RSS grew from {} KiB to {} KiB",
            rss0[i],
            rss1[i]
        );
    }
}

/// The issue's slow client, literally: one byte per second on every port, a
/// whole request over 8–22 s (within nsqd's 60 s read deadline), answered
/// correctly, while a normal client's round trips stay fast throughout.
#[test]
fn one_byte_per_second_clients_on_every_port_are_served_and_stall_no_one() {
    let mut t = Target::start();
    let longest = slow_requests(&t)
        .iter()
        .map(|(_, r, _)| r.len())
        .max()
        .unwrap_or(0) as u64;
    let threads = slow_clients(&t, secs(1));
    let t0 = Instant::now();
    let mut worst = Duration::ZERO;
    let mut trips = 0;
    while t0.elapsed() < secs(longest) {
        worst = worst.max(t.round_trip());
        trips += 1;
        sleep_ms(200);
    }
    for th in threads {
        let took = th.join().expect("slow client");
        eprintln!("one byte per second: request answered after {took:?}");
    }
    eprintln!("{trips} normal round trips meanwhile, worst {worst:?}");
    assert!(
        worst < secs(1),
        "a slow client delayed the normal client by {worst:?}"
    );
    t.check_alive("one-byte-per-second connections");
}

/// One short request per port, each with the start of its expected answer.
fn slow_requests(t: &Target) -> Vec<(String, Vec<u8>, Vec<u8>)> {
    vec![
        (
            t.nsqd.tcp_addr.clone(),
            b"  V2PUB s\n\x00\x00\x00\x01x".to_vec(),
            frame(FRAME_RESPONSE, b"OK"),
        ),
        (
            t.nsqd.http_addr.clone(),
            b"GET /ping HTTP/1.0\r\n\r\n".to_vec(),
            b"HTTP/1.0 200".to_vec(),
        ),
        (
            t.lookupd.tcp.clone(),
            b"  V1PING\n".to_vec(),
            [&2u32.to_be_bytes()[..], b"OK"].concat(),
        ),
        (
            t.lookupd.http.clone(),
            b"GET /ping HTTP/1.0\r\n\r\n".to_vec(),
            b"HTTP/1.0 200".to_vec(),
        ),
        (
            t.admin.http_addr.clone(),
            b"GET /ping HTTP/1.0\r\n\r\n".to_vec(),
            b"HTTP/1.0 200".to_vec(),
        ),
    ]
}

/// A client per port sending its request one byte every `per_byte`; each
/// thread checks the answer and returns how long the exchange took.
fn slow_clients(t: &Target, per_byte: Duration) -> Vec<std::thread::JoinHandle<Duration>> {
    slow_requests(t)
        .into_iter()
        .map(|(addr, req, want)| {
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(&addr).unwrap();
                s.set_nodelay(true).ok();
                let t0 = Instant::now();
                for b in &req {
                    s.write_all(&[*b]).unwrap_or_else(|e| {
                        panic!("{addr}: slow client cut off after {:?}: {e}", t0.elapsed())
                    });
                    std::thread::sleep(per_byte);
                }
                s.set_read_timeout(Some(secs(5))).ok();
                let mut got = vec![0u8; want.len()];
                s.read_exact(&mut got)
                    .unwrap_or_else(|e| panic!("{addr}: slow request unanswered: {e}"));
                assert_eq!(
                    got, want,
                    "{addr}: answer to a request sent one byte at a time"
                );
                t0.elapsed()
            })
        })
        .collect()
}

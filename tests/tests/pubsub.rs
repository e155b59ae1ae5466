//! nsq_pubsub and the simplequeue aliases, black-box: the upgrade path of
//! project issue 10. Publishers keep simplequeue's `POST /put` (and
//! `/mput`) against nsqd; pubsub subscribers keep a long-lived
//! `GET /sub` HTTP stream against nsq_pubsub, one message per line.
//!
//! Subscribers here are raw `TcpStream`s reading the chunked response as
//! `curl -N` would, so the framing itself is checked: one chunk per line.
//!
//! Build first: `cargo build -p nsq_pubsub -p nsqd-bin -p nsqlookupd-bin`.

#![forbid(unsafe_code)]

use std::collections::{BTreeSet, VecDeque};
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nsq_tests::*;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

// ---------------------------------------------------------------------------
// nsq_pubsub process
// ---------------------------------------------------------------------------

/// A running nsq_pubsub on a free 127.0.0.1 port; SIGTERM (then SIGKILL) and reap on drop.
struct Pubsub {
    child: Option<Child>,
    http: String,
    log: tempfile::TempDir,
}

impl Pubsub {
    /// `--nsqd-tcp-address=<nsqd>` plus `extra`.
    fn for_nsqd(n: &Nsqd, extra: &[&str]) -> Pubsub {
        let mut args = vec![format!("--nsqd-tcp-address={}", n.tcp_addr)];
        args.extend(extra.iter().map(|s| s.to_string()));
        Pubsub::start(&args)
    }

    fn start(args: &[String]) -> Pubsub {
        for _ in 0..5 {
            let http = format!("127.0.0.1:{}", free_port());
            let log = tempfile::Builder::new()
                .prefix("nsq_pubsub-log-")
                .tempdir()
                .unwrap();
            let child = Command::new(bin_path("nsq_pubsub"))
                .arg(format!("--http-address={http}"))
                .args(args)
                .stdin(Stdio::null())
                .stdout(std::fs::File::create(log.path().join("stdout")).unwrap())
                .stderr(std::fs::File::create(log.path().join("stderr")).unwrap())
                .spawn()
                .expect("spawn nsq_pubsub");
            let mut p = Pubsub {
                child: Some(child),
                http,
                log,
            };
            let up = (0..200).any(|_| {
                if p.child.as_mut().unwrap().try_wait().unwrap().is_some() {
                    return true;
                }
                let ok = http_request_timeout(&p.http, "GET", "/ping", &[], None, secs(1))
                    .map(|r| r.status == 200)
                    .unwrap_or(false);
                if !ok {
                    sleep_ms(50);
                }
                ok
            });
            if up && p.child.as_mut().unwrap().try_wait().unwrap().is_none() {
                return p;
            }
            // Most likely lost a port race; try another port.
            p.kill();
        }
        panic!("nsq_pubsub did not start");
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.log.path().join("stderr")).unwrap_or_default()
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    fn get(&self, path: &str) -> HttpResponse {
        http_get(&self.http, path)
    }

    fn stats(&self) -> Value {
        let r = self.get("/stats");
        assert_eq!(r.status, 200, "GET /stats: {}", r.text());
        assert_eq!(
            r.header("Content-Type"),
            Some("application/json; charset=utf-8")
        );
        r.json()
    }

    /// Subscribers of `topic`/`channel` according to `/stats` (0 if absent).
    fn subscribers(&self, topic: &str, channel: &str) -> i64 {
        let s = self.stats();
        let Some(t) = s["topics"]
            .as_array()
            .and_then(|ts| ts.iter().find(|t| t["topic_name"] == topic))
        else {
            return 0;
        };
        t["channels"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["channel_name"] == channel))
            .map_or(0, |c| int(c, "subscribers"))
    }

    fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        wait_timeout(self.child.as_mut()?, timeout)
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            terminate(&mut c, secs(10));
        }
    }
}

impl Drop for Pubsub {
    fn drop(&mut self) {
        self.kill();
    }
}

// ---------------------------------------------------------------------------
// A `curl -N` subscriber: raw socket, chunked decoding by hand
// ---------------------------------------------------------------------------

struct Sub {
    s: TcpStream,
    /// Received, not yet decoded.
    raw: Vec<u8>,
    /// Decoded chunk payloads, not yet split into lines.
    partial: Vec<u8>,
    lines: VecDeque<String>,
    /// Every chunk payload seen (to check the framing: one line per chunk).
    chunks: Vec<Vec<u8>>,
    /// The terminating zero-size chunk arrived.
    finished: bool,
    eof: bool,
}

impl Sub {
    /// `GET <path>` and the response head; panics unless it is a 200 chunked stream.
    fn open(addr: &str, path: &str) -> Sub {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: curl/8.0 (nsq-tests)\r\nAccept: */*\r\n\r\n").unwrap();
        let mut sub = Sub {
            s,
            raw: Vec::new(),
            partial: Vec::new(),
            lines: VecDeque::new(),
            chunks: Vec::new(),
            finished: false,
            eof: false,
        };
        let deadline = Instant::now() + secs(20);
        let end = loop {
            if let Some(e) = sub.raw.windows(4).position(|w| w == b"\r\n\r\n") {
                break e;
            }
            assert!(
                Instant::now() < deadline && !sub.eof,
                "no response head for {path}: {:?}",
                String::from_utf8_lossy(&sub.raw)
            );
            sub.read_raw();
        };
        let head = String::from_utf8_lossy(&sub.raw[..end]).to_string();
        sub.raw.drain(..end + 4);
        assert!(head.starts_with("HTTP/1.1 200 "), "GET {path}: {head}");
        let lower = head.to_ascii_lowercase();
        assert!(
            lower.contains("\r\ntransfer-encoding: chunked"),
            "GET {path} must stream chunked: {head}"
        );
        assert!(
            lower.contains("\r\ncontent-type: text/plain; charset=utf-8"),
            "{head}"
        );
        sub.decode();
        sub
    }

    /// One read (100 ms timeout); decodes whatever complete chunks arrived.
    fn fill(&mut self) {
        self.read_raw();
        self.decode();
    }

    fn read_raw(&mut self) {
        let mut buf = [0u8; 65536];
        match self.s.read(&mut buf) {
            Ok(0) => self.eof = true,
            Ok(n) => self.raw.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(e) if is_closed_err(&e) => self.eof = true,
            Err(e) => panic!("reading the stream: {e}"),
        }
    }

    fn decode(&mut self) {
        while !self.finished {
            let Some(le) = self.raw.windows(2).position(|w| w == b"\r\n") else {
                return;
            };
            let size = usize::from_str_radix(String::from_utf8_lossy(&self.raw[..le]).trim(), 16)
                .unwrap_or_else(|_| {
                    panic!(
                        "bad chunk size line {:?}",
                        String::from_utf8_lossy(&self.raw[..le])
                    )
                });
            if self.raw.len() < le + 2 + size + 2 {
                return;
            }
            let data = self.raw[le + 2..le + 2 + size].to_vec();
            assert_eq!(
                &self.raw[le + 2 + size..le + 4 + size],
                b"\r\n",
                "chunk not CRLF-terminated"
            );
            self.raw.drain(..le + 4 + size);
            if size == 0 {
                self.finished = true;
                return;
            }
            self.partial.extend_from_slice(&data);
            self.chunks.push(data);
            while let Some(nl) = self.partial.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.partial.drain(..=nl).collect();
                self.lines
                    .push_back(String::from_utf8_lossy(&line[..nl]).into_owned());
            }
        }
    }

    /// The next `n` lines (heartbeat lines skipped), or panic after `timeout`.
    fn lines(&mut self, n: usize, timeout: Duration) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            if let Some(l) = self.lines.pop_front() {
                if !l.starts_with("{\"_heartbeat_\":") {
                    out.push(l);
                }
                continue;
            }
            assert!(!self.eof, "stream ended after {} of {n} lines", out.len());
            assert!(
                Instant::now() < deadline,
                "only {} of {n} lines within {timeout:?}: {:?}",
                out.len(),
                short(&out)
            );
            self.fill();
        }
        out
    }

    /// Nothing more arrives for `dur`.
    fn expect_nothing(&mut self, dur: Duration) {
        let deadline = Instant::now() + dur;
        while Instant::now() < deadline {
            self.fill();
        }
        assert!(
            self.lines.is_empty() && self.partial.is_empty(),
            "unexpected data: {:?}",
            self.lines
        );
    }

    /// Closes the sending half (the server sees EOF: the client is gone),
    /// then reads until the server closes; returns every complete line
    /// received meanwhile (a cut-off last line is not a delivered message).
    fn leave_and_drain(mut self, timeout: Duration) -> Vec<String> {
        self.s.shutdown(Shutdown::Write).unwrap();
        self.drain(timeout)
    }

    /// Reads until the server closes the stream.
    fn drain(&mut self, timeout: Duration) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        while !self.eof {
            assert!(
                Instant::now() < deadline,
                "server did not close the stream within {timeout:?}"
            );
            self.fill();
        }
        self.lines.drain(..).collect()
    }

    fn assert_one_line_per_chunk(&self) {
        for c in &self.chunks {
            assert!(
                c.ends_with(b"\n") && c.iter().filter(|&&b| b == b'\n').count() == 1,
                "chunk is not exactly one line: {:?}",
                String::from_utf8_lossy(c)
            );
        }
    }
}

fn short(lines: &[String]) -> Vec<String> {
    lines.iter().map(|l| l.chars().take(20).collect()).collect()
}

fn set(v: &[String]) -> BTreeSet<String> {
    v.iter().cloned().collect()
}

/// Bodies `<prefix>-<i>-` padded with `x` to `size` bytes (distinct, recognisable by prefix).
fn big_bodies(prefix: &str, n: usize, size: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let mut b = format!("{prefix}-{i}-");
            b.push_str(&"x".repeat(size.saturating_sub(b.len())));
            b
        })
        .collect()
}

fn channel_int(n: &Nsqd, topic: &str, channel: &str, key: &str) -> i64 {
    n.channel_stats(topic, channel).map_or(0, |c| int(&c, key))
}

// ---------------------------------------------------------------------------
// simplequeue publishers → pubsub subscribers
// ---------------------------------------------------------------------------

#[test]
fn put_is_delivered_to_a_sub_stream() {
    let n = Nsqd::start(&[]);
    let p = Pubsub::for_nsqd(&n, &[]);
    let mut sub = Sub::open(&p.http, "/sub?topic=sq_put");
    // curl -d 'hello world' 'http://nsqd:4151/put?topic=sq_put'
    let r = n.post("/put?topic=sq_put", b"hello world");
    assert_eq!((r.status, r.text().as_str()), (200, "OK"));
    n.http_pub("sq_put", b"via /pub");
    assert_eq!(sub.lines(2, secs(10)), ["hello world", "via /pub"]);
    sub.assert_one_line_per_chunk();
    // FINed once written: nothing stays in flight on the subscriber's channel.
    let ch = wait_for(secs(10), "nsqd channel of the subscriber", || {
        let t = n.topic_stats("sq_put")?;
        let c = t["channels"].as_array()?.first()?.clone();
        (int(&c, "in_flight_count") == 0).then_some(c)
    });
    let name = ch["channel_name"].as_str().unwrap();
    assert!(
        name.starts_with("pubsub") && name.ends_with("#ephemeral"),
        "default channel {name}"
    );
    assert_eq!(
        (
            int(&ch, "message_count"),
            int(&ch, "requeue_count"),
            int(&ch, "depth")
        ),
        (2, 0, 0)
    );
    assert_eq!(
        ch["clients"][0]["user_agent"], "nsq_pubsub/1.3.0 nsq-rs",
        "{ch}"
    );
}

#[test]
fn mput_is_delivered_one_line_per_message() {
    let n = Nsqd::start(&[]);
    let p = Pubsub::for_nsqd(&n, &[]);
    let mut sub = Sub::open(&p.http, "/sub?topic=sq_mput&channel=archive");
    let r = n.post("/mput?topic=sq_mput", b"one\ntwo\nthree\n");
    assert_eq!((r.status, r.text().as_str()), (200, "OK"));
    let got = sub.lines(3, secs(10));
    assert_eq!(
        set(&got),
        set(&["one".into(), "two".into(), "three".into()])
    );
    sub.assert_one_line_per_chunk();
    sub.expect_nothing(Duration::from_millis(300));
    wait_for(secs(10), "3 FINs on channel archive", || {
        let c = n.channel_stats("sq_mput", "archive")?;
        (int(&c, "message_count") == 3 && int(&c, "in_flight_count") == 0 && int(&c, "depth") == 0)
            .then_some(())
    });
}

#[test]
fn two_subscribers_on_their_own_channels_each_get_every_message() {
    let n = Nsqd::start(&[]);
    let p = Pubsub::for_nsqd(&n, &[]);
    let mut a = Sub::open(&p.http, "/sub?topic=fanout");
    let mut b = Sub::open(&p.http, "/sub?topic=fanout&channel=");
    let bodies: Vec<String> = (0..50).map(|i| format!("message {i}")).collect();
    for body in &bodies {
        let r = n.post("/put?topic=fanout", body.as_bytes());
        assert_eq!(r.status, 200);
    }
    for sub in [&mut a, &mut b] {
        let got = sub.lines(50, secs(20));
        assert_eq!(set(&got), set(&bodies), "every message, once each");
        assert_eq!(got.len(), 50);
        sub.expect_nothing(Duration::from_millis(200));
        sub.assert_one_line_per_chunk();
    }
    // Two ephemeral channels on nsqd, one per HTTP subscriber.
    let t = n.topic_stats("fanout").unwrap();
    let chans: Vec<&str> = t["channels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["channel_name"].as_str().unwrap())
        .collect();
    assert_eq!(chans.len(), 2, "{chans:?}");
    assert!(chans.iter().all(|c| c.ends_with("#ephemeral")), "{chans:?}");
    // Counted as delivered once written and FINed.
    wait_for(secs(10), "100 deliveries in /stats", || {
        let s = p.stats();
        (int(&s, "subscribers") == 2 && int(&s, "total_messages") == 100).then_some(())
    });
}

#[test]
fn a_subscriber_leaving_mid_stream_loses_nothing_for_the_others() {
    let n = Nsqd::start(&[]);
    let p = Pubsub::for_nsqd(&n, &[]);
    let mut a = Sub::open(&p.http, "/sub?topic=leave");
    let mut b = Sub::open(&p.http, "/sub?topic=leave");
    for i in 0..10 {
        n.http_pub("leave", format!("before {i}").as_bytes());
    }
    assert_eq!(a.lines(10, secs(10)).len(), 10);
    assert_eq!(b.lines(10, secs(10)).len(), 10);
    drop(a); // the client goes away without a word
    wait_for(secs(10), "pubsub to notice the subscriber left", || {
        (int(&p.stats(), "subscribers") == 1).then_some(())
    });
    let after: Vec<String> = (0..20).map(|i| format!("after {i}")).collect();
    for body in &after {
        n.http_pub("leave", body.as_bytes());
    }
    assert_eq!(set(&b.lines(20, secs(10))), set(&after));
    // The leaver's ephemeral channel went with it.
    wait_for(secs(10), "one channel left on nsqd", || {
        (n.topic_stats("leave")?["channels"].as_array()?.len() == 1).then_some(())
    });
}

/// The leaver holds messages it could not write (its client stopped
/// reading): they are requeued at once (REQ, not a timeout) and the other
/// subscriber of the same named channel gets them.
#[test]
fn in_flight_messages_of_a_leaving_subscriber_are_requeued_to_its_channel() {
    const N: usize = 64;
    let n = Nsqd::start(&[]);
    let p = Pubsub::for_nsqd(&n, &[]);
    let a = Sub::open(&p.http, "/sub?topic=req&channel=shared");
    assert_eq!(p.subscribers("req", "shared"), 1);
    // 16 MB: far more than the socket buffers between pubsub and `a`, which reads nothing.
    let bodies = big_bodies("req", N, 256 * 1024);
    for body in &bodies {
        n.http_pub("req", body.as_bytes());
    }
    let held = wait_for(secs(20), "pubsub to hold messages it cannot write", || {
        let c = n.channel_stats("req", "shared")?;
        (int(&c, "in_flight_count") > 0
            && int(&c, "depth") + int(&c, "in_flight_count") + int(&c, "deferred_count") < N as i64)
            .then(|| int(&c, "in_flight_count"))
    });
    sleep_ms(300);
    assert_eq!(
        channel_int(&n, "req", "shared", "requeue_count"),
        0,
        "nothing requeued while the client is there"
    );
    assert_eq!(channel_int(&n, "req", "shared", "timeout_count"), 0);

    let got_a = a.leave_and_drain(secs(20));
    let requeued = wait_for(secs(10), "REQ of the leaver's in-flight messages", || {
        let c = n.channel_stats("req", "shared")?;
        (int(&c, "in_flight_count") == 0 && int(&c, "client_count") == 0)
            .then(|| int(&c, "requeue_count"))
    });
    assert!(requeued >= 1, "held {held} in flight, requeued {requeued}");
    assert_eq!(
        channel_int(&n, "req", "shared", "timeout_count"),
        0,
        "requeued by REQ, not by nsqd's timeout"
    );
    assert_eq!(p.subscribers("req", "shared"), 0);

    let mut b = Sub::open(&p.http, "/sub?topic=req&channel=shared");
    let want = set(&bodies);
    let have_a = set(&got_a);
    assert!(have_a.is_subset(&want), "a got only whole messages");
    let missing = want.difference(&have_a).count();
    // At least once: a line `a` read may have been requeued too (its bytes
    // reached the socket, but the peer was gone before the flush completed).
    let mut all = have_a.clone();
    let mut got_b = Vec::new();
    let deadline = Instant::now() + secs(30);
    while all.len() < N {
        assert!(
            Instant::now() < deadline,
            "a ({}) + b ({}) cover only {} of {N}",
            got_a.len(),
            got_b.len(),
            all.len()
        );
        let line = b.lines(1, secs(30)).remove(0);
        assert!(
            want.contains(&line),
            "unexpected line {:?}",
            &line[..20.min(line.len())]
        );
        all.insert(line.clone());
        got_b.push(line);
    }
    // Each unwritten message went back once: pubsub paused its consumer
    // (RDY 0) before the REQs, so nsqd did not bounce them back to it.
    assert!(
        (missing..=N).contains(&(requeued as usize)),
        "held {held}, a got {}, requeued {requeued}",
        got_a.len()
    );
    wait_for(secs(10), "everything FINed", || {
        let c = n.channel_stats("req", "shared")?;
        (int(&c, "depth") == 0 && int(&c, "in_flight_count") == 0).then_some(())
    });
}

#[test]
fn stats_counts_subscribers_per_topic_and_channel() {
    let n = Nsqd::start(&[]);
    let p = Pubsub::for_nsqd(&n, &[]);
    let s = p.stats();
    assert_eq!(
        (
            int(&s, "subscribers"),
            s["topics"].as_array().unwrap().len()
        ),
        (0, 0)
    );
    let _a1 = Sub::open(&p.http, "/sub?topic=st&channel=c");
    let a2 = Sub::open(&p.http, "/sub?topic=st&channel=c");
    let _e = Sub::open(&p.http, "/sub?topic=st");
    let _u = Sub::open(&p.http, "/sub?topic=su&channel=c");
    let s = p.stats();
    assert_eq!(int(&s, "subscribers"), 4);
    let topics = s["topics"].as_array().unwrap();
    assert_eq!(
        topics
            .iter()
            .map(|t| t["topic_name"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["st", "su"]
    );
    assert_eq!(int(&topics[0], "subscribers"), 3);
    assert_eq!(int(&topics[1], "subscribers"), 1);
    assert_eq!(p.subscribers("st", "c"), 2);
    assert_eq!(p.subscribers("su", "c"), 1);
    let st_chans = topics[0]["channels"].as_array().unwrap();
    assert_eq!(st_chans.len(), 2);
    let eph = st_chans.iter().find(|c| c["channel_name"] != "c").unwrap();
    assert_eq!(int(eph, "subscribers"), 1);
    let client = &st_chans.iter().find(|c| c["channel_name"] == "c").unwrap()["clients"][0];
    assert!(
        client["remote_address"]
            .as_str()
            .unwrap()
            .starts_with("127.0.0.1:"),
        "{client}"
    );
    assert!(
        int(client, "connect_ts") > 0 && int(client, "message_count") == 0,
        "{client}"
    );
    drop(a2);
    wait_for(secs(10), "the closed subscriber to leave /stats", || {
        (p.subscribers("st", "c") == 1).then_some(())
    });
    assert_eq!(int(&p.stats(), "subscribers"), 3);
}

#[test]
fn bad_requests() {
    let n = Nsqd::start(&[]);
    let p = Pubsub::for_nsqd(&n, &[]);
    for (path, code) in [
        ("/sub", "MISSING_ARG_TOPIC"),
        ("/sub?channel=c", "MISSING_ARG_TOPIC"),
        ("/sub?topic=", "MISSING_ARG_TOPIC"),
        ("/sub?topic=bad!", "INVALID_ARG_TOPIC"),
        ("/sub?topic=t&channel=bad!", "INVALID_ARG_CHANNEL"),
        (
            &format!("/sub?topic=t&channel={}", "c".repeat(65)),
            "INVALID_ARG_CHANNEL",
        ),
    ] {
        let r = p.get(path);
        assert_eq!((r.status, r.text().trim()), (400, code), "GET {path}");
        assert_eq!(r.header("Content-Type"), Some("text/plain; charset=utf-8"));
    }
    let r = p.get("/ping");
    assert_eq!((r.status, r.text().as_str()), (200, "OK"));
    assert_eq!(p.get("/nope").status, 404);
    assert_eq!(http_post(&p.http, "/sub?topic=t", b"").status, 405);
    assert_eq!(
        int(&p.stats(), "subscribers"),
        0,
        "refused requests never subscribe"
    );
    assert!(n.topic_stats("t").is_none(), "and never touch nsqd");
}

#[test]
fn unreachable_nsqd_is_a_502_not_a_silent_stream() {
    let dead = format!("127.0.0.1:{}", free_port());
    let p = Pubsub::start(&[format!("--nsqd-tcp-address={dead}")]);
    let r = p.get("/sub?topic=t");
    assert_eq!(r.status, 502, "{}", r.text());
    assert!(r.text().contains(&dead), "{}", r.text());
    assert_eq!(int(&p.stats(), "subscribers"), 0);
}

#[test]
fn flags_follow_nsqs_apps() {
    let r = run_bin("nsq_pubsub", &["--version"], secs(10));
    assert_eq!(r.status.map(|s| s.code()), Some(Some(0)));
    assert_eq!(r.stdout, "nsq_pubsub v1.3.0\n");
    for (args, text) in [
        (
            &[][..],
            "--nsqd-tcp-address or --lookupd-http-address required",
        ),
        (
            &[
                "--nsqd-tcp-address=127.0.0.1:4150",
                "--lookupd-http-address=127.0.0.1:4161",
            ][..],
            "use --nsqd-tcp-address or --lookupd-http-address not both",
        ),
        (
            &["--nsqd-tcp-address=127.0.0.1:4150", "--max-in-flight=0"][..],
            "--max-in-flight must be > 0",
        ),
    ] {
        let r = run_bin("nsq_pubsub", args, secs(10));
        assert_eq!(
            r.status.map(|s| s.code()),
            Some(Some(1)),
            "{args:?}: {}",
            r.stderr
        );
        assert!(r.stderr.contains(text), "{args:?}: {}", r.stderr);
    }
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let r = run_bin(
        "nsq_pubsub",
        &[
            "--nsqd-tcp-address=127.0.0.1:4150",
            &format!("--http-address={addr}"),
        ],
        secs(10),
    );
    assert_eq!(r.status.map(|s| s.code()), Some(Some(1)), "{}", r.stderr);
    assert!(
        r.stderr.contains(&format!("listen ({addr}) failed")),
        "{}",
        r.stderr
    );
    let r = run_bin("nsq_pubsub", &["--no-such-flag"], secs(10));
    assert_eq!(r.status.map(|s| s.code()), Some(Some(2)), "{}", r.stderr);
}

/// SIGTERM: every stream ends cleanly (terminating chunk), consumers close
/// (CLS), whatever pubsub held and had not written is requeued, exit 0.
#[test]
fn sigterm_ends_streams_requeues_and_exits_0() {
    const N: usize = 48;
    let n = Nsqd::start(&[]);
    let mut p = Pubsub::for_nsqd(&n, &[]);
    let mut a = Sub::open(&p.http, "/sub?topic=term&channel=shared");
    let mut e = Sub::open(&p.http, "/sub?topic=term");
    let bodies = big_bodies("term", N, 256 * 1024);
    for body in &bodies {
        n.http_pub("term", body.as_bytes());
    }
    // `e` reads along; `a` stalls, so pubsub holds some of its messages.
    assert_eq!(e.lines(N, secs(30)).len(), N);
    wait_for(secs(20), "pubsub to hold messages for `a`", || {
        (channel_int(&n, "term", "shared", "in_flight_count") > 0).then_some(())
    });

    send_signal(p.pid(), libc::SIGTERM);
    let got_a = a.drain(secs(20));
    assert!(a.finished, "a's stream ended with the terminating chunk");
    e.drain(secs(10));
    assert!(e.finished, "e's stream ended with the terminating chunk");
    let st = p
        .wait_exit(secs(20))
        .unwrap_or_else(|| panic!("nsq_pubsub did not exit\n{}", p.stderr()));
    assert_eq!(st.code(), Some(0), "{}", p.stderr());

    let c = n.channel_stats("term", "shared").unwrap();
    assert_eq!(
        (
            int(&c, "in_flight_count"),
            int(&c, "client_count"),
            int(&c, "timeout_count")
        ),
        (0, 0, 0),
        "{c}"
    );
    let depth = int(&c, "depth") as usize;
    assert_eq!(
        depth + got_a.len(),
        N,
        "written to `a` (FIN) or back in the channel (REQ): {c}"
    );
    assert_eq!(
        int(&c, "requeue_count") as usize,
        depth,
        "one REQ each, no bounce: {c}"
    );
    // What went back is still there for the next consumer of the channel.
    let mut conn = n.connect();
    conn.sub("term", "shared");
    conn.rdy(N as i64);
    let rest: Vec<String> = recv_msgs(&mut conn, depth, secs(20), true)
        .iter()
        .map(|m| m.body_str())
        .collect();
    let all: BTreeSet<String> = set(&got_a).union(&set(&rest)).cloned().collect();
    assert_eq!(all, set(&bodies));
}

/// Discovery through nsqlookupd, as pubsub users ran it.
#[test]
fn lookupd_discovery() {
    let (ltcp, lhttp) = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    let mut lookupd = Command::new(bin_path("nsqlookupd"))
        .args([
            format!("--tcp-address={ltcp}"),
            format!("--http-address={lhttp}"),
            "--broadcast-address=127.0.0.1".into(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn nsqlookupd");
    wait_for(secs(10), "nsqlookupd /ping", || {
        http_request_timeout(&lhttp, "GET", "/ping", &[], None, secs(1))
            .ok()
            .filter(|r| r.status == 200)
    });
    let n = Nsqd::start(&[
        &format!("--lookupd-tcp-address={ltcp}"),
        "--broadcast-address=127.0.0.1",
    ]);
    n.http_pub("disc", b"first");
    wait_for(secs(10), "topic registered in nsqlookupd", || {
        let r =
            http_request_timeout(&lhttp, "GET", "/lookup?topic=disc", &[], None, secs(1)).ok()?;
        (r.status == 200 && !r.json()["producers"].as_array()?.is_empty()).then_some(())
    });
    let p = Pubsub::start(&[format!("--lookupd-http-address={lhttp}")]);
    let mut sub = Sub::open(&p.http, "/sub?topic=disc&channel=c");
    assert_eq!(
        sub.lines(1, secs(10)),
        ["first"],
        "a new channel on an existing topic starts with what the topic holds"
    );
    n.post("/put?topic=disc", b"second");
    assert_eq!(sub.lines(1, secs(10)), ["second"]);
    drop(p);
    terminate(&mut lookupd, secs(5));
}

/// SIGTERM while a client reads nothing: its stream cannot be finished, so
/// after the drain timeout (5 s) the connection is dropped, what it held is
/// requeued, and nsq_pubsub still exits 0.
#[test]
fn sigterm_with_a_stalled_client_requeues_and_exits_0() {
    // 48 MiB: more than the socket buffers can take in (tcp_rmem's largest
    // autotuned size is commonly 6 or 32 MiB, tcp_wmem's 4 MiB), so pubsub's
    // write to `a` must block.
    const N: usize = 64;
    let n = Nsqd::start(&[]);
    let mut p = Pubsub::for_nsqd(&n, &[]);
    let mut a = Sub::open(&p.http, "/sub?topic=stall&channel=shared");
    let bodies = big_bodies("stall", N, 768 * 1024);
    for body in &bodies {
        n.http_pub("stall", body.as_bytes());
    }
    // Blocked, not just busy: messages held and no FIN for a whole second
    // (pubsub finishes a message once its bytes are in the socket).
    let mut last = (-1, Instant::now());
    wait_for(secs(30), "pubsub's write to `a` to block", || {
        let c = n.channel_stats("stall", "shared")?;
        let fin: i64 = c["clients"]
            .as_array()
            .map_or(0, |cl| cl.iter().map(|x| int(x, "finish_count")).sum());
        if fin != last.0 {
            last = (fin, Instant::now());
        }
        (int(&c, "in_flight_count") > 0
            && int(&c, "depth") == 0
            && last.1.elapsed() >= Duration::from_secs(1))
        .then_some(())
    });
    let t0 = Instant::now();
    send_signal(p.pid(), libc::SIGTERM);
    let st = p
        .wait_exit(secs(30))
        .unwrap_or_else(|| panic!("nsq_pubsub did not exit\n{}", p.stderr()));
    assert_eq!(st.code(), Some(0), "{}", p.stderr());
    assert!(
        t0.elapsed() >= Duration::from_secs(4),
        "waited for the client first ({:?})",
        t0.elapsed()
    );
    let c = n.channel_stats("stall", "shared").unwrap();
    assert_eq!(
        (
            int(&c, "in_flight_count"),
            int(&c, "client_count"),
            int(&c, "timeout_count")
        ),
        (0, 0, 0),
        "{c}"
    );
    assert!(int(&c, "requeue_count") > 0, "{c}");
    let got_a = a.drain(secs(10));
    assert!(!a.finished, "the stream was cut, not ended");
    let depth = int(&c, "depth") as usize;
    assert!(
        depth + got_a.len() >= N,
        "nothing lost: a got {}, depth {depth}",
        got_a.len()
    );
}

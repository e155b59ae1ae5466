//! Load, soak and full-disk tests (issue 9, items 4 and 6), black-box against
//! the real nsqd binary on 127.0.0.1.
//!
//! * `ten_thousand_connections`: `NSQ_LOAD_CONNS` consumers (default 2000 so
//!   CI stays fast; the issue's figure is 10,000) spread over 100 channels of
//!   one topic, each `SUB` + `RDY 1`, plus 4 publishers; every channel gets
//!   every message exactly once; nsqd's RSS per connection is printed and
//!   bounded. **File descriptors**: the test process holds one fd per
//!   connection and so does nsqd. The test raises its own soft
//!   `RLIMIT_NOFILE` to the hard limit *before* spawning nsqd, which inherits
//!   it (nsqd does not raise its own limit). 10,000 connections therefore need
//!   a hard limit (`ulimit -Hn`) of at least ~10,100, and `ulimit -n 20000`
//!   is the documented setting. The test fails early with a clear message if
//!   the limit is too low.
//! * `soak_mixed` (`#[ignore]`, `NSQ_SOAK_SECS`, default 600; run with
//!   `scripts/soak.sh [SECS]`): steady publishing, consumers that FIN most,
//!   REQ some and let some time out (`msg_timeout` 1000 via IDENTIFY); at the
//!   end every published body was FINed on every channel and RSS is flat.
//! * `full_disk_pub_fails_acknowledged_data_intact_and_recovers`: nsqd on a
//!   2 MiB tmpfs (mounted by the test; skipped with a message if `mount` is
//!   refused) with `--mem-queue-size=0`: PUB until it fails with
//!   `E_PUB_FAILED`, `/ping` NOK, HTTP `/pub` 503 `EXITING`; the tmpfs is
//!   then remounted bigger: every acknowledged message is delivered intact,
//!   publishing works again and `/ping` is OK.
//! * `read_only_disk_pub_fails_acknowledged_data_intact_and_recovers`: the
//!   same tmpfs set-up remounted read-only under nsqd: PUB/MPUB/DPUB fail with
//!   NSQ's errors, `/ping` NOK, consumers still get what is on disk; after
//!   `remount,rw` everything acknowledged is delivered and publishing works.
//!   `read_only_disk_pub_to_a_topic_with_channels_fails`: a PUB fanned out
//!   straight to a channel whose disk write fails is refused, not OK'd.

#![forbid(unsafe_code)]

use nsq_tests::*;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn create_channel(n: &Nsqd, topic: &str, channel: &str) {
    let r = n.post(&format!("/topic/create?topic={topic}"), b"");
    assert_eq!(r.status, 200, "topic create: {}", r.text());
    let r = n.post(
        &format!("/channel/create?topic={topic}&channel={channel}"),
        b"",
    );
    assert_eq!(r.status, 200, "channel create: {}", r.text());
}

/// Raise the soft `RLIMIT_NOFILE` of this process to the hard limit (children
/// such as nsqd inherit it). Returns (soft, hard) after the change.
fn raise_nofile_limit() -> (u64, u64) {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let rl = getrlimit(Resource::Nofile);
    if rl.current < rl.maximum {
        let raised = rustix::process::Rlimit {
            current: rl.maximum,
            maximum: rl.maximum,
        };
        if let Err(e) = setrlimit(Resource::Nofile, raised) {
            eprintln!("setrlimit(RLIMIT_NOFILE, {:?}) failed: {e}", rl.maximum);
        }
    }
    // None is RLIM_INFINITY
    let now = getrlimit(Resource::Nofile);
    (
        now.current.unwrap_or(u64::MAX),
        now.maximum.unwrap_or(u64::MAX),
    )
}

// ---------------------------------------------------------------------------
// 10,000 connections
// ---------------------------------------------------------------------------

const LOAD_CHANNELS: usize = 100;
const CONNS_PER_THREAD: usize = 500;

/// One non-blocking consumer connection driven by a poll loop.
struct PollConn {
    s: TcpStream,
    inb: Vec<u8>,
    out: Vec<u8>,
    ch: usize,
    subscribed: bool,
    closed: bool,
}

struct LoadShared {
    subscribed: AtomicUsize,
    delivered: AtomicUsize,
    closed: AtomicUsize,
    connected: AtomicUsize,
    stop: AtomicBool,
    errors: Mutex<Vec<String>>,
}

/// Connects `chans.len()` consumers (`SUB topic ch_<i>` + `RDY 1`, pipelined
/// with the magic), then polls them: FIN every message, NOP every
/// heartbeat. Returns per-channel counts of message index (`m<idx>` bodies).
fn load_worker(
    addr: String,
    topic: String,
    chans: Vec<usize>,
    total_msgs: usize,
    sh: Arc<LoadShared>,
) -> Vec<(usize, Vec<u16>)> {
    let mut conns: Vec<PollConn> = Vec::with_capacity(chans.len());
    for ch in chans {
        let mut s = loop {
            match TcpStream::connect(&addr) {
                Ok(s) => break s,
                Err(e) => {
                    if sh.stop.load(Ordering::SeqCst) {
                        return Vec::new();
                    }
                    // Backlog overflow under a connection storm: retry.
                    sh.errors
                        .lock()
                        .unwrap()
                        .push(format!("connect retry: {e}"));
                    sleep_ms(20);
                }
            }
        };
        s.set_nodelay(true).ok();
        s.write_all(format!("  V2SUB {topic} ch_{ch}\nRDY 1\n").as_bytes())
            .expect("write SUB");
        s.set_nonblocking(true).unwrap();
        sh.connected.fetch_add(1, Ordering::SeqCst);
        conns.push(PollConn {
            s,
            inb: Vec::new(),
            out: Vec::new(),
            ch,
            subscribed: false,
            closed: false,
        });
    }
    let mut counts: HashMap<usize, Vec<u16>> = HashMap::new();
    let mut chunk = vec![0u8; 16384];
    while !sh.stop.load(Ordering::SeqCst) {
        // the connections poll finds ready (closed ones are left out)
        let ready: Vec<usize> = {
            use rustix::event::{poll, PollFd, PollFlags, Timespec};
            let open: Vec<usize> = (0..conns.len()).filter(|&i| !conns[i].closed).collect();
            let mut fds: Vec<PollFd<'_>> = open
                .iter()
                .map(|&i| {
                    let c = &conns[i];
                    let mut ev = PollFlags::IN;
                    if !c.out.is_empty() {
                        ev |= PollFlags::OUT;
                    }
                    PollFd::new(&c.s, ev)
                })
                .collect();
            let timeout = Timespec {
                tv_sec: 0,
                tv_nsec: 100_000_000,
            };
            match poll(&mut fds, Some(&timeout)) {
                Ok(n) if n > 0 => {}
                _ => continue,
            }
            open.iter()
                .zip(&fds)
                .filter(|(_, fd)| !fd.revents().is_empty())
                .map(|(&i, _)| i)
                .collect()
        };
        for i in ready {
            let c = &mut conns[i];
            // Read everything available.
            loop {
                match c.s.read(&mut chunk) {
                    Ok(0) => {
                        c.closed = true;
                        break;
                    }
                    Ok(n) => c.inb.extend_from_slice(&chunk[..n]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => {
                        c.closed = true;
                        break;
                    }
                }
            }
            // Parse frames.
            let mut off = 0;
            while c.inb.len() - off >= 8 {
                let size = u32::from_be_bytes(c.inb[off..off + 4].try_into().unwrap()) as usize;
                if c.inb.len() - off < 4 + size {
                    break;
                }
                let ftype = i32::from_be_bytes(c.inb[off + 4..off + 8].try_into().unwrap());
                let data = &c.inb[off + 8..off + 4 + size];
                match ftype {
                    FRAME_RESPONSE if data == HEARTBEAT => c.out.extend_from_slice(b"NOP\n"),
                    FRAME_RESPONSE if data == b"OK" && !c.subscribed => {
                        c.subscribed = true;
                        sh.subscribed.fetch_add(1, Ordering::SeqCst);
                    }
                    FRAME_MESSAGE => {
                        let m = Msg::parse(data);
                        let idx: usize = std::str::from_utf8(&m.body[1..])
                            .ok()
                            .and_then(|s| s.parse().ok())
                            .unwrap_or(usize::MAX);
                        if idx < total_msgs {
                            counts.entry(c.ch).or_insert_with(|| vec![0; total_msgs])[idx] += 1;
                        } else {
                            sh.errors.lock().unwrap().push(format!(
                                "unexpected body {:?}",
                                String::from_utf8_lossy(&m.body)
                            ));
                        }
                        sh.delivered.fetch_add(1, Ordering::SeqCst);
                        c.out
                            .extend_from_slice(format!("FIN {}\n", m.id).as_bytes());
                    }
                    _ => sh.errors.lock().unwrap().push(format!(
                        "ch_{}: frame {ftype} {:?}",
                        c.ch,
                        String::from_utf8_lossy(data)
                    )),
                }
                off += 4 + size;
            }
            c.inb.drain(..off);
            // Flush pending output.
            while !c.out.is_empty() && !c.closed {
                match c.s.write(&c.out) {
                    Ok(n) => {
                        c.out.drain(..n);
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => c.closed = true,
                }
            }
            if c.closed {
                sh.closed.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
    counts.into_iter().collect()
}

/// `NSQ_LOAD_CONNS` consumers (default 2000; the issue asks for 10,000, which
/// needs `ulimit -n` ≥ ~10,100, see the module doc) over 100 channels, each
/// `SUB` + `RDY 1`; 4 publishers `PUB` `NSQ_LOAD_MSGS` messages each (default
/// 100). Every channel receives every message exactly once; nsqd's RSS per
/// connection (RSS with the consumers connected minus idle RSS, divided by
/// the number of connections) is printed and must stay below 64 KiB.
#[test]
fn ten_thousand_connections() {
    let conns = env_usize("NSQ_LOAD_CONNS", 2000);
    let per_pub = env_usize("NSQ_LOAD_MSGS", 100);
    let total_msgs = 4 * per_pub;
    let (soft, hard) = raise_nofile_limit();
    let needed = conns as u64 + 200;
    assert!(
        soft >= needed,
        "RLIMIT_NOFILE soft {soft} (hard {hard}) is too low for {conns} connections: need ≥ {needed}; run `ulimit -n 20000` (as root, or raise the hard limit) first"
    );
    eprintln!("RLIMIT_NOFILE {soft}/{hard}; {conns} consumers over {LOAD_CHANNELS} channels, {total_msgs} messages");

    // Spawned after the limit is raised: nsqd inherits it.
    let n = Nsqd::start(&[]);
    let topic = "load";
    for ch in 0..LOAD_CHANNELS {
        create_channel(&n, topic, &format!("ch_{ch}"));
    }
    sleep_ms(500);
    let rss_idle = rss_kib(n.pid());

    let sh = Arc::new(LoadShared {
        subscribed: AtomicUsize::new(0),
        delivered: AtomicUsize::new(0),
        closed: AtomicUsize::new(0),
        connected: AtomicUsize::new(0),
        stop: AtomicBool::new(false),
        errors: Mutex::new(Vec::new()),
    });
    let t0 = Instant::now();
    let mut workers = Vec::new();
    let all: Vec<usize> = (0..conns).map(|i| i % LOAD_CHANNELS).collect();
    for part in all.chunks(CONNS_PER_THREAD) {
        let (addr, topic, part, sh) = (
            n.tcp_addr.clone(),
            topic.to_string(),
            part.to_vec(),
            sh.clone(),
        );
        workers.push(std::thread::spawn(move || {
            load_worker(addr, topic, part, total_msgs, sh)
        }));
    }
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let deadline = secs(30 + conns as u64 / 100);
        wait_for(deadline, "all consumers subscribed", || {
            (sh.subscribed.load(Ordering::SeqCst) == conns).then_some(())
        });
        let t_connect = t0.elapsed();
        sleep_ms(1000);
        let rss_conn = rss_kib(n.pid());
        let st = n.stats("&topic=load&include_clients=false");
        let clients: i64 = find_topic(&st, topic).unwrap()["channels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| int(c, "client_count"))
            .sum();
        assert_eq!(clients as usize, conns, "client_count over all channels");
        let per_conn = (rss_conn.saturating_sub(rss_idle)) as f64 / conns as f64;
        eprintln!(
            "{conns} connections subscribed in {t_connect:?}; nsqd RSS idle {rss_idle} KiB, connected {rss_conn} KiB: {per_conn:.2} KiB per connection"
        );

        // 4 publishers.
        let t_pub = Instant::now();
        let pubs: Vec<_> = (0..4)
            .map(|p| {
                let addr = n.tcp_addr.clone();
                std::thread::spawn(move || {
                    let mut c = Conn::connect(&addr);
                    for i in p * per_pub..(p + 1) * per_pub {
                        c.publish("load", format!("m{i}").as_bytes());
                    }
                })
            })
            .collect();
        for p in pubs {
            p.join().expect("publisher");
        }
        let want = total_msgs * LOAD_CHANNELS;
        wait_for(
            secs(60 + want as u64 / 1000),
            "every channel receives every message",
            || (sh.delivered.load(Ordering::SeqCst) >= want).then_some(()),
        );
        let t_deliver = t_pub.elapsed();
        sleep_ms(500); // any duplicate would show up now
        let rss_after = rss_kib(n.pid());
        eprintln!(
            "{want} deliveries ({total_msgs} messages × {LOAD_CHANNELS} channels) in {t_deliver:?}; nsqd RSS after delivery {rss_after} KiB"
        );
        assert!(
            per_conn < 64.0,
            "nsqd RSS per connection {per_conn:.2} KiB ≥ 64 KiB"
        );
        (per_conn, rss_after)
    }));
    sh.stop.store(true, Ordering::SeqCst);
    let mut per_channel: BTreeMap<usize, Vec<u16>> = BTreeMap::new();
    for w in workers {
        for (ch, counts) in w.join().expect("worker") {
            let e = per_channel.entry(ch).or_insert_with(|| vec![0; total_msgs]);
            for (a, b) in e.iter_mut().zip(counts) {
                *a += b;
            }
        }
    }
    if let Err(e) = result {
        let errs = sh.errors.lock().unwrap();
        eprintln!(
            "connected {} subscribed {} closed {} delivered {}; first errors: {:?}",
            sh.connected.load(Ordering::SeqCst),
            sh.subscribed.load(Ordering::SeqCst),
            sh.closed.load(Ordering::SeqCst),
            sh.delivered.load(Ordering::SeqCst),
            errs.iter().take(10).collect::<Vec<_>>()
        );
        std::panic::resume_unwind(e);
    }
    let errs: Vec<String> = sh
        .errors
        .lock()
        .unwrap()
        .iter()
        .filter(|e| !e.starts_with("connect retry"))
        .cloned()
        .collect();
    assert!(
        errs.is_empty(),
        "unexpected frames: {:?}",
        &errs[..errs.len().min(10)]
    );
    assert_eq!(
        sh.closed.load(Ordering::SeqCst),
        0,
        "no consumer connection may be closed by nsqd"
    );
    assert_eq!(
        per_channel.len(),
        LOAD_CHANNELS,
        "every channel received messages"
    );
    for (ch, counts) in &per_channel {
        let bad: Vec<(usize, u16)> = counts
            .iter()
            .copied()
            .enumerate()
            .filter(|&(_, c)| c != 1)
            .take(5)
            .collect();
        assert!(
            bad.is_empty(),
            "ch_{ch}: messages not delivered exactly once (index, count): {bad:?}"
        );
    }
    n.assert_alive();
}

// ---------------------------------------------------------------------------
// Soak: mixed publish / FIN / REQ / timeout at a steady rate
// ---------------------------------------------------------------------------

#[derive(Default)]
struct SoakCounts {
    fin: AtomicUsize,
    req: AtomicUsize,
    timeout: AtomicUsize,
}

/// A consumer on `channel`: IDENTIFY msg_timeout 1000, SUB, RDY 20. With
/// `mixed`, a message on attempt < 4 is FINed (80 %), REQed with 0–200 ms
/// (10 %) or left to time out (10 %); later attempts and all messages when not
/// `mixed` are FINed. Records FINed message indexes.
fn soak_consumer(
    addr: &str,
    channel: &str,
    mixed: bool,
    fined: &Mutex<HashMap<usize, u32>>,
    counts: &SoakCounts,
    stop: &AtomicBool,
    seed: u64,
) {
    let mut c = Conn::connect(addr);
    c.identify(r#"{"msg_timeout":1000,"heartbeat_interval":5000}"#);
    c.sub("soak", channel);
    c.rdy(20);
    let mut rng = Rng::new(seed);
    while !stop.load(Ordering::SeqCst) {
        let Some(f) = c.recv_timeout(ms(200)) else {
            continue;
        };
        assert_eq!(f.ftype, FRAME_MESSAGE, "{channel}: unexpected frame {f:?}");
        let m = f.msg();
        let idx: usize = m.body_str()[1..].parse().expect("soak body s<idx>");
        let r = rng.below(100);
        if !mixed || m.attempts >= 4 || r < 80 {
            c.fin(&m.id);
            counts.fin.fetch_add(1, Ordering::Relaxed);
            *fined.lock().unwrap().entry(idx).or_insert(0) += 1;
        } else if r < 90 {
            c.req(&m.id, rng.below(200) as i64);
            counts.req.fetch_add(1, Ordering::Relaxed);
        } else {
            counts.timeout.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// `NSQ_SOAK_SECS` (default 600) of steady publishing (`NSQ_SOAK_RATE`
/// messages/s, default 100: one PUB per tick plus an MPUB of 10 every 100
/// ticks) to topic `soak` with two channels: `mixed` (2 consumers that FIN,
/// REQ or let time out) and `fin` (1 consumer that FINs all). At the end every
/// published body has been FINed on both channels, depth/in-flight/deferred
/// are 0, and nsqd's RSS at the end of the period is within max(10 MiB, 25 %)
/// of its RSS after a 10 s warm-up. RSS is sampled every 10 s and printed.
#[test]
#[ignore = "10-minute soak; run with scripts/soak.sh"]
fn soak_mixed() {
    let dur = secs(env_usize("NSQ_SOAK_SECS", 600) as u64);
    let rate = env_usize("NSQ_SOAK_RATE", 100).max(1);
    let n = Nsqd::start(&[]);
    create_channel(&n, "soak", "mixed");
    create_channel(&n, "soak", "fin");
    let stop = Arc::new(AtomicBool::new(false));
    let published = Arc::new(AtomicUsize::new(0));
    let counts = Arc::new(SoakCounts::default());
    let fined_mixed = Arc::new(Mutex::new(HashMap::new()));
    let fined_fin = Arc::new(Mutex::new(HashMap::new()));
    let mut consumers = Vec::new();
    for (i, (ch, mixed, fined)) in [
        ("mixed", true, &fined_mixed),
        ("mixed", true, &fined_mixed),
        ("fin", false, &fined_fin),
    ]
    .into_iter()
    .enumerate()
    {
        let (addr, fined, counts, stop) = (
            n.tcp_addr.clone(),
            fined.clone(),
            counts.clone(),
            stop.clone(),
        );
        consumers.push(std::thread::spawn(move || {
            soak_consumer(&addr, ch, mixed, &fined, &counts, &stop, 7 + i as u64)
        }));
    }
    let pub_stop = Arc::new(AtomicBool::new(false));
    let publisher = {
        let (addr, published, pub_stop) = (n.tcp_addr.clone(), published.clone(), pub_stop.clone());
        std::thread::spawn(move || {
            let mut c = Conn::connect(&addr);
            let tick = Duration::from_secs_f64(1.0 / rate as f64);
            let start = Instant::now();
            let mut ticks: u64 = 0;
            let mut next = 0usize;
            while !pub_stop.load(Ordering::SeqCst) {
                let due = start + tick * ticks as u32;
                if let Some(d) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(d);
                }
                if ticks % 100 == 99 {
                    let bodies: Vec<Vec<u8>> = (next..next + 10)
                        .map(|i| format!("s{i}").into_bytes())
                        .collect();
                    let refs: Vec<&[u8]> = bodies.iter().map(|b| b.as_slice()).collect();
                    c.mpublish("soak", &refs);
                    next += 10;
                } else {
                    c.publish("soak", format!("s{next}").as_bytes());
                    next += 1;
                }
                published.store(next, Ordering::SeqCst);
                ticks += 1;
            }
        })
    };

    let t0 = Instant::now();
    let mut samples: Vec<(u64, u64)> = Vec::new();
    let mut rss_start = 0;
    while t0.elapsed() < dur {
        sleep_ms(1000);
        let el = t0.elapsed().as_secs();
        if el.is_multiple_of(10) && samples.last().map(|s| s.0) != Some(el) {
            let rss = rss_kib(n.pid());
            samples.push((el, rss));
            if rss_start == 0 && el >= 10 {
                rss_start = rss;
            }
            eprintln!(
                "t={el:>4}s rss={rss} KiB published={} fin={} req={} timeout={}",
                published.load(Ordering::SeqCst),
                counts.fin.load(Ordering::Relaxed),
                counts.req.load(Ordering::Relaxed),
                counts.timeout.load(Ordering::Relaxed)
            );
            assert!(!publisher.is_finished(), "publisher died");
            assert!(
                consumers.iter().all(|c| !c.is_finished()),
                "a consumer died"
            );
        }
    }
    let rss_end = rss_kib(n.pid());
    if rss_start == 0 {
        rss_start = samples.first().map(|s| s.1).unwrap_or(rss_end);
    }
    pub_stop.store(true, Ordering::SeqCst);
    publisher.join().expect("publisher");
    let total = published.load(Ordering::SeqCst);
    // Drain: every published body FINed on both channels.
    let drained = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_for(
            secs(60),
            "every published message FINed on both channels",
            || {
                let a = fined_mixed.lock().unwrap();
                let b = fined_fin.lock().unwrap();
                ((0..total).all(|i| a.contains_key(&i) && b.contains_key(&i))).then_some(())
            },
        );
        wait_for(secs(10), "channels empty", || {
            let ok = ["mixed", "fin"].iter().all(|ch| {
                n.channel_stats("soak", ch)
                    .map(|c| {
                        int(&c, "depth") == 0
                            && int(&c, "in_flight_count") == 0
                            && int(&c, "deferred_count") == 0
                    })
                    .unwrap_or(false)
            });
            ok.then_some(())
        });
    }));
    stop.store(true, Ordering::SeqCst);
    for c in consumers {
        let _ = c.join();
    }
    let rss_drained = rss_kib(n.pid());
    let fm = fined_mixed.lock().unwrap();
    let dup_mixed = fm.values().filter(|&&v| v > 1).count();
    eprintln!(
        "soak {:?}: published {total}, FIN {} REQ {} timed out {}; FINed twice on mixed: {dup_mixed}; RSS start (t=10s) {rss_start} KiB, end {rss_end} KiB, after drain {rss_drained} KiB; samples {samples:?}",
        dur,
        counts.fin.load(Ordering::Relaxed),
        counts.req.load(Ordering::Relaxed),
        counts.timeout.load(Ordering::Relaxed)
    );
    if let Err(e) = drained {
        let missing: Vec<usize> = (0..total)
            .filter(|i| !fm.contains_key(i))
            .take(10)
            .collect();
        eprintln!(
            "not FINed on mixed (first 10): {missing:?}; stats {:?}",
            n.channel_stats("soak", "mixed")
        );
        std::panic::resume_unwind(e);
    }
    assert!(
        counts.req.load(Ordering::Relaxed) > 0 && counts.timeout.load(Ordering::Relaxed) > 0,
        "the mix includes REQ and timeouts"
    );
    let bound = (rss_start / 4).max(10 * 1024);
    assert!(
        rss_end <= rss_start + bound,
        "RSS grew from {rss_start} KiB to {rss_end} KiB (bound +{bound} KiB)"
    );
    n.assert_alive();
}

// ---------------------------------------------------------------------------
// Full data disk
// ---------------------------------------------------------------------------

/// A tmpfs mounted on a temp dir; unmounted (lazily if busy) on drop, even
/// when the test panics.
struct TmpfsMount {
    dir: tempfile::TempDir,
}

impl TmpfsMount {
    fn mount(size: &str) -> Result<TmpfsMount, String> {
        let dir = tempfile::Builder::new()
            .prefix("nsqd-tmpfs-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("running mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount -t tmpfs refused: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(TmpfsMount { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn resize(&self, size: &str) {
        let out = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(self.path())
            .output()
            .expect("mount remount");
        assert!(
            out.status.success(),
            "remount: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `mount -o remount,<opts>`; the error is mount's stderr (e.g. "mount
    /// point is busy" when going read-only while a file is open for writing).
    fn remount(&self, opts: &str) -> Result<(), String> {
        let out = Command::new("mount")
            .args(["-o", &format!("remount,{opts}")])
            .arg(self.path())
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
        }
    }
}

impl Drop for TmpfsMount {
    fn drop(&mut self) {
        let p: PathBuf = self.dir.path().to_path_buf();
        let ok = Command::new("umount")
            .arg(&p)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&p).status();
        }
    }
}

/// nsqd on a 2 MiB tmpfs with `--mem-queue-size=0 --max-bytes-per-file=262144`
/// and no channel (messages stay in the topic's disk queue): PUB 4 KiB bodies
/// until one fails. NSQ's answers: the failed PUB gets the fatal
/// `E_PUB_FAILED PUB failed <disk error>` and the connection closes; `/ping`
/// is 500 `NOK - <error>`; HTTP `/pub` is 503 `EXITING`. Then the tmpfs is
/// remounted at 16 MiB: a consumer gets every acknowledged message, intact
/// and exactly once; a new PUB is `OK` and `/ping` is `OK` again.
#[test]
fn full_disk_pub_fails_acknowledged_data_intact_and_recovers() {
    full_disk_scenario(false);
}

/// Known bug (see docs/reliability.md, "Known limits found"): after the disk
/// has space again, a PUB to a topic whose channels are attached is fanned out
/// straight to the channels, and a successful *channel* disk write does not
/// reset nsqd's health (Go's `channel.put` calls `SetHealth(err)` on every
/// backend write; nsq-rs only resets it on a topic-queue write). `/ping`
/// stays `500 NOK - ...` although publishing and consuming work again.
#[test]
fn full_disk_ping_recovers_after_a_successful_channel_write() {
    full_disk_scenario(true);
}

fn full_disk_scenario(check_ping_after_channel_write: bool) {
    let mnt = match TmpfsMount::mount("2m") {
        Ok(m) => m,
        Err(e) => {
            eprintln!("SKIPPED full_disk test: {e} (needs root / CAP_SYS_ADMIN)");
            return;
        }
    };
    let data = mnt.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let mut n = Nsqd::start_in(
        &data,
        &[
            "--mem-queue-size=0",
            "--max-bytes-per-file=262144",
            "--sync-every=1",
        ],
    );
    let r = n.post("/topic/create?topic=full", b"");
    assert_eq!(r.status, 200);

    let body = |i: usize| -> Vec<u8> {
        let mut b = format!("full:{i}:").into_bytes();
        while b.len() < 4096 {
            b.push(b'a' + (b.len() % 26) as u8);
        }
        b
    };
    let mut c = Conn::connect(&n.tcp_addr);
    let mut acked = 0usize;
    let failure = loop {
        assert!(
            acked < 4000,
            "2 MiB tmpfs never filled after {acked} × 4 KiB"
        );
        c.send(&pub_cmd("full", &body(acked)));
        let f = c.recv();
        if f.bytes() == frame(FRAME_RESPONSE, b"OK") {
            acked += 1;
        } else {
            break f;
        }
    };
    let err = failure.text();
    eprintln!(
        "PUB #{acked} failed on a full disk: {:?} ({} acknowledged)",
        err, acked
    );
    assert_eq!(failure.ftype, FRAME_ERROR, "{failure:?}");
    assert!(
        err.starts_with("E_PUB_FAILED PUB failed "),
        "NSQ's error for a failed disk write: {err:?}"
    );
    assert!(
        err.to_lowercase().contains("no space"),
        "error names the cause: {err:?}"
    );
    c.read_until_closed(FRAME_WAIT); // fatal: the connection closes
    assert!(acked > 100, "a 2 MiB disk holds > 100 × 4 KiB ({acked})");

    let ping = n.get("/ping");
    eprintln!("/ping while full: {} {:?}", ping.status, ping.text());
    assert_eq!(ping.status, 500, "/ping NOK while the disk is full");
    assert!(ping.text().starts_with("NOK - "), "{:?}", ping.text());
    // Same size as the PUB that failed (a small body could still fit in the
    // last partly used tmpfs page).
    let r = n.post("/pub?topic=full", &body(acked));
    eprintln!("HTTP /pub while full: {} {:?}", r.status, r.text());
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.text().contains("EXITING"), "{}", r.text());
    let mut c2 = Conn::connect(&n.tcp_addr);
    c2.send(&mpub_cmd("full", &[&body(acked), &body(acked + 1)]));
    let f = c2.recv();
    eprintln!("MPUB while full: {:?}", f.text());
    assert!(
        f.ftype == FRAME_ERROR && f.text().starts_with("E_MPUB_FAILED MPUB failed "),
        "{f:?}"
    );
    assert!(n.is_running(), "nsqd keeps running on a full disk");

    // Space returns.
    mnt.resize("16m");
    let mut cons = Conn::connect(&n.tcp_addr);
    cons.sub("full", "c");
    cons.rdy(100);
    let mut seen: HashSet<usize> = HashSet::new();
    let deadline = Instant::now() + secs(30);
    while seen.len() < acked {
        assert!(
            Instant::now() < deadline,
            "only {} of {acked} acknowledged messages delivered",
            seen.len()
        );
        let Some(f) = cons.recv_timeout(secs(5)) else {
            continue;
        };
        assert_eq!(f.ftype, FRAME_MESSAGE, "{f:?}");
        let m = f.msg();
        let i: usize = std::str::from_utf8(&m.body)
            .unwrap()
            .split(':')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            i < acked,
            "message #{i} was never acknowledged (the failed PUBs must not be stored)"
        );
        assert_eq!(m.body, body(i), "message #{i} intact");
        assert!(seen.insert(i), "message #{i} delivered twice");
        cons.fin(&m.id);
    }
    cons.expect_nothing(ms(500));

    let mut p = Conn::connect(&n.tcp_addr);
    p.publish("full", b"after-recovery");
    let m = cons.expect_msg_within(FRAME_WAIT);
    assert_eq!(m.body, b"after-recovery");
    cons.fin(&m.id);
    let ping = n.get("/ping");
    eprintln!(
        "/ping after a successful PUB fanned out to the channel: {} {:?}",
        ping.status,
        ping.text()
    );
    if check_ping_after_channel_write {
        assert_eq!(
            (ping.status, ping.text().as_str()),
            (200, "OK"),
            "/ping OK after a successful (channel) disk write"
        );
    }
    // A write to a topic's own disk queue (a topic without channels, so
    // nothing is fanned out) resets health, as in NSQ.
    p.publish("full_nochan", b"x");
    let ping = n.get("/ping");
    assert_eq!(
        (ping.status, ping.text().as_str()),
        (200, "OK"),
        "/ping OK after a successful topic-queue write"
    );
    let r = n.post("/pub?topic=full", b"http-after");
    assert_eq!(r.status, 200, "{}", r.text());
    eprintln!("recovered: {acked} acknowledged messages delivered intact, PUB OK, /ping OK");
    drop(cons);
    drop(p);
    drop(n); // before the unmount guard
}

// ---------------------------------------------------------------------------
// Read-only data disk
// ---------------------------------------------------------------------------

/// A 1 KiB body `<tag>:<i>:aaaa…` (the index is recoverable, the rest checks integrity).
/// A 16 MiB tmpfs of the test's own with a `data` dir in it, or `None`
/// (after a SKIPPED line) where mounting is not allowed.
fn read_only_test_dir() -> Option<(TmpfsMount, PathBuf)> {
    let mnt = match TmpfsMount::mount("16m") {
        Ok(m) => m,
        Err(e) => {
            eprintln!("SKIPPED read_only_disk test: {e} (needs root / CAP_SYS_ADMIN)");
            return None;
        }
    };
    let data = mnt.path().join("data");
    std::fs::create_dir(&data).unwrap();
    Some((mnt, data))
}

fn kib_body(tag: &str, i: usize) -> Vec<u8> {
    let mut b = format!("{tag}:{i}:").into_bytes();
    while b.len() < 1024 {
        b.push(b'a' + (b.len() % 26) as u8);
    }
    b
}

/// SUB `topic`/`channel`, FIN everything until nothing arrives for 2 s;
/// returns how often each body was delivered.
fn drain_counts(n: &Nsqd, topic: &str, channel: &str) -> HashMap<Vec<u8>, usize> {
    let mut c = n.connect();
    c.sub(topic, channel);
    c.rdy(100);
    let mut counts: HashMap<Vec<u8>, usize> = HashMap::new();
    let deadline = Instant::now() + secs(60);
    while let Some(f) = c.recv_timeout(secs(2)) {
        assert!(
            Instant::now() < deadline,
            "{topic}/{channel} still delivering after 60 s"
        );
        assert_eq!(f.ftype, FRAME_MESSAGE, "{topic}/{channel}: {f:?}");
        let m = f.msg();
        c.fin(&m.id);
        *counts.entry(m.body).or_default() += 1;
    }
    counts
}

/// The PUB-family command `cmd` must fail with NSQ's fatal `<code> <VERB>
/// failed <disk error>` naming the read-only file system, then the
/// connection closes.
fn expect_ro_failure(n: &Nsqd, cmd: &[u8], code: &str, verb: &str) -> String {
    let mut c = n.connect();
    c.send(cmd);
    let f = c.recv();
    let text = f.text();
    assert_eq!(f.ftype, FRAME_ERROR, "{verb} on a read-only disk: {f:?}");
    assert!(
        text.starts_with(&format!("{code} {verb} failed ")),
        "NSQ's error for a failed disk write: {text:?}"
    );
    assert!(
        text.contains("Read-only file system"),
        "error names the cause: {text:?}"
    );
    c.read_until_closed(FRAME_WAIT); // fatal, as in nsqd
    text
}

/// The data disk turns read-only under a running nsqd (`--mem-queue-size=0
/// --sync-every=1`, so every message goes to disk) and comes back.
///
/// Setup on a tmpfs mounted by the test: topic `ro` without channels (its
/// messages stay in the topic's disk queue) and topic `ro_ch` whose channel
/// `c` holds its messages in the channel's disk queue; 300 and 100
/// acknowledged 1 KiB messages. The kernel refuses `mount -o remount,ro`
/// while a file is open for writing on the filesystem ("mount point is busy")
/// and nsqd — like Go nsqd — keeps the current segment of every queue it
/// wrote to open, so nsqd is restarted cleanly first (SIGTERM, exit 0): a
/// fresh nsqd opens a segment for writing only at its next write. Then the
/// tmpfs is remounted read-only:
/// * PUB / MPUB / DPUB fail with nsqd's fatal `E_PUB_FAILED PUB failed …:
///   Read-only file system (os error 30)` (`E_MPUB_FAILED`, `E_DPUB_FAILED`),
///   HTTP `/pub` and `/mpub` with 503 `EXITING`, `/ping` is 500 `NOK - …`;
/// * nsqd keeps serving: `/ping` and `/stats` answer, and a consumer of
///   `ro_ch`/`c` gets all 100 messages from the read-only disk and FINs them
///   (the used segment files cannot be deleted meanwhile).
///
/// After `mount -o remount,rw`: PUB and HTTP `/pub` work, `/ping` is OK, all
/// 300 + new acknowledged messages of `ro` are delivered intact and exactly
/// once, the failed ones never; after one more clean restart nothing FINed
/// comes back.
#[test]
fn read_only_disk_pub_fails_acknowledged_data_intact_and_recovers() {
    let Some((mnt, data)) = read_only_test_dir() else {
        return;
    };
    let args = [
        "--mem-queue-size=0",
        "--max-bytes-per-file=65536",
        "--sync-every=1",
    ];
    let mut n = Nsqd::start_in(&data, &args);
    let r = n.post("/topic/create?topic=ro", b"");
    assert_eq!(r.status, 200);
    create_channel(&n, "ro_ch", "c");

    let (n_ro, n_ch) = (300usize, 100usize);
    let mut p = n.connect();
    for i in 0..n_ro {
        p.publish("ro", &kib_body("ro", i));
    }
    for i in 0..n_ch {
        p.publish("ro_ch", &kib_body("ro_ch", i));
    }
    drop(p);

    // Read-only now, or (the usual case) after a clean restart.
    match mnt.remount("ro") {
        Ok(()) => eprintln!("remount ro succeeded while nsqd was running"),
        Err(e) => {
            eprintln!("remount ro refused while nsqd holds its segments open for writing: {e}");
            let st = n.sigterm_and_wait(secs(15));
            assert!(st.success(), "nsqd exit status {st}\n{}", n.stderr());
            n = Nsqd::start_in(&data, &args);
            // nsqd may still be writing metadata right after its start
            wait_for(secs(10), "mount -o remount,ro accepted", || {
                mnt.remount("ro").ok()
            });
        }
    }
    assert!(
        std::fs::write(data.join("probe"), b"x").is_err(),
        "the data disk is read-only"
    );

    let err = expect_ro_failure(
        &n,
        &pub_cmd("ro", &kib_body("ro-failed", 0)),
        "E_PUB_FAILED",
        "PUB",
    );
    eprintln!("PUB on a read-only disk: {err:?}");
    let failed1 = kib_body("ro-failed", 1);
    let failed2 = kib_body("ro-failed", 2);
    let err = expect_ro_failure(
        &n,
        &mpub_cmd("ro", &[&failed1, &failed2]),
        "E_MPUB_FAILED",
        "MPUB",
    );
    eprintln!("MPUB on a read-only disk: {err:?}");
    let err = expect_ro_failure(
        &n,
        &dpub_cmd("ro", 1000, &kib_body("ro-failed", 3)),
        "E_DPUB_FAILED",
        "DPUB",
    );
    eprintln!("DPUB on a read-only disk: {err:?}");
    let r = n.post("/pub?topic=ro", &kib_body("ro-failed", 4));
    assert_eq!(
        (r.status, r.text().contains("EXITING")),
        (503, true),
        "HTTP /pub: {} {}",
        r.status,
        r.text()
    );
    let r = n.post(
        "/mpub?topic=ro",
        &[
            kib_body("ro-failed", 5),
            b"\n".to_vec(),
            kib_body("ro-failed", 6),
        ]
        .concat(),
    );
    assert_eq!(
        (r.status, r.text().contains("EXITING")),
        (503, true),
        "HTTP /mpub: {} {}",
        r.status,
        r.text()
    );

    let t = Instant::now();
    let ping = n.get("/ping");
    eprintln!(
        "/ping on a read-only disk: {} {:?} in {:?}",
        ping.status,
        ping.text(),
        t.elapsed()
    );
    assert_eq!(ping.status, 500, "/ping NOK while the disk is read-only");
    assert!(
        ping.text().starts_with("NOK - ") && ping.text().contains("Read-only file system"),
        "{:?}",
        ping.text()
    );
    let depth = n.topic_stats("ro").map(|t| int(&t, "depth"));
    assert_eq!(
        depth,
        Some(n_ro as i64),
        "/stats answers, nothing failed was counted"
    );

    // Consumers keep being served from the read-only disk.
    let counts = drain_counts(&n, "ro_ch", "c");
    for i in 0..n_ch {
        assert_eq!(
            counts.get(&kib_body("ro_ch", i)),
            Some(&1),
            "ro_ch message #{i} delivered once, intact, from the read-only disk"
        );
    }
    assert_eq!(counts.len(), n_ch, "nothing else on ro_ch");
    assert!(n.is_running(), "nsqd keeps running on a read-only disk");
    let ping = n.get("/ping");
    assert_eq!(ping.status, 500, "still NOK: nothing was written yet");

    // The disk is writable again.
    mnt.remount("rw").expect("mount -o remount,rw");
    let mut p = n.connect();
    let after: Vec<Vec<u8>> = (0..3).map(|i| kib_body("ro-after", i)).collect();
    for b in &after {
        p.publish("ro", b);
    }
    let ping = n.get("/ping");
    assert_eq!(
        (ping.status, ping.text().as_str()),
        (200, "OK"),
        "/ping OK after a successful disk write"
    );
    let r = n.post("/pub?topic=ro", &kib_body("ro-after", 3));
    assert_eq!(r.status, 200, "{}", r.text());

    let counts = drain_counts(&n, "ro", "c");
    let mut want: Vec<Vec<u8>> = (0..n_ro).map(|i| kib_body("ro", i)).collect();
    want.extend(after.iter().cloned());
    want.push(kib_body("ro-after", 3));
    for b in &want {
        assert_eq!(
            counts.get(b),
            Some(&1),
            "acknowledged {:?}… delivered once and intact",
            String::from_utf8_lossy(&b[..16])
        );
    }
    let extra: Vec<String> = counts
        .keys()
        .filter(|b| !want.contains(b))
        .map(|b| String::from_utf8_lossy(&b[..16]).into_owned())
        .collect();
    assert!(
        extra.is_empty(),
        "never acknowledged, yet delivered: {extra:?}"
    );
    n.assert_alive();

    // One more clean restart: what was FINed (also while read-only) stays FINed.
    let st = n.sigterm_and_wait(secs(15));
    assert!(st.success(), "nsqd exit status {st}\n{}", n.stderr());
    let mut files: Vec<String> = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    eprintln!("data dir after the read-only episode and a clean stop: {files:?}");
    // a segment consumed while read-only (its removal failed) is removed once writable
    assert!(
        !files.iter().any(|f| f == "ro_ch:c.diskqueue.000000.dat"),
        "consumed segment left behind: {files:?}"
    );
    let n = Nsqd::start_in(&data, &args);
    for (t, ch) in [("ro_ch", "c"), ("ro", "c")] {
        let again = drain_counts(&n, t, ch);
        assert!(
            again.is_empty(),
            "{t}/{ch}: {} FINed messages delivered again after restart",
            again.len()
        );
    }
    eprintln!("read-only disk: {n_ro} + {n_ch} acknowledged messages intact, {} after recovery, failed ones never delivered", want.len() - n_ro);
    drop(n); // before the unmount guard
}

/// A PUB to a topic with channels is written straight into the channels'
/// queues; when a channel's disk write fails (`--mem-queue-size=0`, disk
/// read-only) the PUB must get `E_PUB_FAILED`, never `OK` for a message no
/// channel kept (Go nsqd, writing the topic's own queue first, fails there
/// too). Found as a bug by this test (docs/reliability.md, limit 3).
#[test]
fn read_only_disk_pub_to_a_topic_with_channels_fails() {
    let Some((mnt, data)) = read_only_test_dir() else {
        return;
    };
    let args = ["--mem-queue-size=0", "--sync-every=1"];
    let n = Nsqd::start_in(&data, &args);
    create_channel(&n, "ro_fan", "c");
    wait_for(secs(10), "mount -o remount,ro accepted", || {
        mnt.remount("ro").ok()
    });
    let mut c = n.connect();
    c.send(&pub_cmd("ro_fan", b"must-not-be-acknowledged"));
    let f = c.recv();
    let ok = f.bytes() == frame(FRAME_RESPONSE, b"OK");
    mnt.remount("rw").expect("mount -o remount,rw");
    let delivered = drain_counts(&n, "ro_fan", "c");
    eprintln!(
        "PUB to a topic with a channel on a read-only disk: {:?}; delivered after remount rw: {}",
        f.text(),
        delivered.len()
    );
    assert!(
        f.text().starts_with("E_PUB_FAILED PUB failed "),
        "PUB to a topic with a channel on a read-only disk answered {:?} (acknowledged: {ok}); delivered after remount rw: {}",
        f.text(),
        delivered.len()
    );
    drop(c);
    drop(n);
}

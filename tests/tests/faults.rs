//! Faults between daemons and processes (issue 9, parts 3, 4 and 6), black-box:
//! nsqlookupd restarted under a running nsqd, nsqd restarted (SIGTERM) under a
//! reconnecting consumer, clean SIGTERM cycles with messages in flight and
//! deferred, a consumer that stops reading, and SIGKILL cycles under publish
//! load with `--mem-queue-size=0 --sync-every=1`.
//!
//! Every test is bounded (deadlines on every wait) and uses 127.0.0.1 only.
//! `NSQ_CRASH_CYCLES` (default 3) sets the number of SIGKILL cycles and
//! `NSQ_TERM_CYCLES` (default 3) the number of clean SIGTERM cycles under a
//! consumer that holds, REQueues and FINs; see `scripts/crash.sh` for longer
//! runs.

#![forbid(unsafe_code)]

use nsq_tests::*;
use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
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

/// Producer ports nsqlookupd lists for `topic` (empty if none or on error).
fn producer_tcp_ports(l: &Lookupd, topic: &str) -> Vec<i64> {
    l.lookup(topic)
        .and_then(|v| v["producers"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|p| p["tcp_port"].as_i64())
        .collect()
}

// ---------------------------------------------------------------------------
// nsqlookupd restarted while nsqd runs
// ---------------------------------------------------------------------------

/// nsqd pings its lookupd every 15 s; a ping (or any command) that finds
/// the connection closed reconnects at once and sends IDENTIFY plus every
/// REGISTER again. So a lookupd restarted on the same ports knows the nsqd's
/// topics and channels again within one ping interval (asserted with
/// slack: 20 s).
#[test]
fn lookupd_restarted_on_same_ports_nsqd_reregisters_within_one_ping_interval() {
    let mut l = Lookupd::start(&[]);
    let (ltcp, lhttp) = (l.tcp.clone(), l.http.clone());
    let n = Nsqd::start(&[
        &format!("--lookupd-tcp-address={ltcp}"),
        "--broadcast-address=127.0.0.1",
    ]);
    create_channel(&n, "reg", "c");
    wait_for(secs(10), "nsqd registers topic reg", || {
        producer_tcp_ports(&l, "reg")
            .contains(&(n.tcp_port as i64))
            .then_some(())
    });

    l.stop();
    let l = Lookupd::start_on(&ltcp, &lhttp, &[]);
    // nsqlookupd keeps nothing across a restart: whatever it lists now came
    // from the nsqd registering again. That can already have happened by
    // this line (a PING due just now finds the old connection closed and
    // re-registers at once), so there is no "empty at first" to check.
    let t0 = Instant::now();
    wait_for(
        secs(20),
        "nsqd re-registers with the restarted lookupd",
        || {
            producer_tcp_ports(&l, "reg")
                .contains(&(n.tcp_port as i64))
                .then_some(())
        },
    );
    let took = t0.elapsed();
    // Channels come back too.
    let chans = wait_for(secs(5), "channel c re-registered", || {
        let r = http_get(&l.http, "/channels?topic=reg");
        let v = r.json();
        let cs: Vec<String> = v["channels"]
            .as_array()?
            .iter()
            .filter_map(|c| c.as_str().map(String::from))
            .collect();
        cs.contains(&"c".to_string()).then_some(cs)
    });
    eprintln!("re-registered after {took:?}; channels {chans:?}");
    n.assert_alive();
}

// ---------------------------------------------------------------------------
// nsqd restarted (SIGTERM) under a reconnecting consumer
// ---------------------------------------------------------------------------

/// One consumer session: connect, SUB, RDY, FIN everything, record bodies.
/// Returns when the connection closes or `stop` is set. Panics (caught by the
/// caller) on protocol surprises during the shutdown race.
fn consume_session(
    addr: &str,
    topic: &str,
    channel: &str,
    got: &Mutex<Vec<Vec<u8>>>,
    stop: &AtomicBool,
) {
    let mut c = Conn::connect(addr);
    c.sub(topic, channel);
    c.rdy(20);
    while !stop.load(Ordering::SeqCst) {
        match c.try_read_frame(ms(200)) {
            ReadOutcome::Frame(f) if f.is_heartbeat() => {
                let _ = c.try_send(b"NOP\n");
            }
            ReadOutcome::Frame(f) if f.ftype == FRAME_MESSAGE => {
                let m = f.msg();
                // A slow consumer: leaves a few messages in flight at any time.
                sleep_ms(2);
                if c.try_send(format!("FIN {}\n", m.id).as_bytes()).is_err() {
                    return;
                }
                got.lock().unwrap().push(m.body);
            }
            ReadOutcome::Frame(_) => {}
            ReadOutcome::Timeout => {}
            ReadOutcome::Closed(_) => return,
        }
    }
}

#[test]
fn nsqd_sigterm_restart_under_consumer_delivers_everything_published_before_stop() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = Nsqd::start_in(dir.path(), &["--mem-queue-size=100"]);
    let (tcp_port, http_port, addr) = (n.tcp_port, n.http_port, n.tcp_addr.clone());
    create_channel(&n, "restart", "c");

    let got = Arc::new(Mutex::new(Vec::<Vec<u8>>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let sessions = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let consumer = {
        let (got, stop, sessions, addr) =
            (got.clone(), stop.clone(), sessions.clone(), addr.clone());
        std::thread::spawn(move || {
            let deadline = Instant::now() + secs(60);
            while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
                if std::net::TcpStream::connect(&addr).is_err() {
                    sleep_ms(100); // nsqd is down: the client retries
                    continue;
                }
                sessions.fetch_add(1, Ordering::SeqCst);
                let _ = catch_unwind(AssertUnwindSafe(|| {
                    consume_session(&addr, "restart", "c", &got, &stop)
                }));
                sleep_ms(100);
            }
        })
    };

    // 2000 messages: some go to memory, some overflow to disk, some are in
    // flight at the moment of SIGTERM.
    let bodies: Vec<Vec<u8>> = (0..2000)
        .map(|i| format!("restart-{i:05}").into_bytes())
        .collect();
    let mut p = n.connect();
    for chunk in bodies.chunks(100) {
        let refs: Vec<&[u8]> = chunk.iter().map(|b| b.as_slice()).collect();
        p.mpublish("restart", &refs);
    }
    // Let the consumer get part of the way.
    wait_for(secs(20), "consumer received some messages", || {
        (got.lock().unwrap().len() >= 100).then_some(())
    });
    let before = got.lock().unwrap().len();
    let st = n.sigterm_and_wait(secs(15));
    assert!(st.success(), "nsqd exit status {st}\n{}", n.stderr());
    drop(p);

    let n = Nsqd::start_on(dir.path(), tcp_port, http_port, &["--mem-queue-size=100"]);
    let want: BTreeSet<Vec<u8>> = bodies.iter().cloned().collect();
    let res = catch_unwind(AssertUnwindSafe(|| {
        wait_for(
            secs(40),
            "every message published before the stop delivered",
            || {
                let g = got.lock().unwrap();
                let have: BTreeSet<&Vec<u8>> = g.iter().collect();
                want.iter().all(|b| have.contains(b)).then_some(())
            },
        )
    }));
    stop.store(true, Ordering::SeqCst);
    consumer.join().unwrap();
    let g = got.lock().unwrap();
    let have: BTreeSet<&Vec<u8>> = g.iter().collect();
    let missing: Vec<String> = want
        .iter()
        .filter(|b| !have.contains(b))
        .take(20)
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .collect();
    eprintln!(
        "restart under consumer: {} published, {before} delivered before SIGTERM, {} deliveries in all ({} sessions)",
        bodies.len(),
        g.len(),
        sessions.load(Ordering::SeqCst)
    );
    assert!(
        res.is_ok() && missing.is_empty(),
        "lost across a clean restart (first 20): {missing:?}"
    );
    assert!(
        sessions.load(Ordering::SeqCst) >= 2,
        "the consumer reconnected"
    );
    n.assert_alive();
}

// ---------------------------------------------------------------------------
// A consumer that stops reading
// ---------------------------------------------------------------------------

/// Shrink the socket receive buffer so the stuck consumer's socket fills fast.
fn small_rcvbuf(c: &Conn) {
    let _ = rustix::net::sockopt::set_socket_recv_buffer_size(&c.stream, 4096);
}

fn channel_clients(n: &Nsqd, topic: &str, channel: &str) -> usize {
    n.channel_stats(topic, channel)
        .and_then(|c| c["clients"].as_array().map(|a| a.len()))
        .unwrap_or(0)
}

#[test]
fn stuck_consumer_stalls_no_one_and_is_disconnected_by_heartbeat_rules() {
    stuck_consumer_scenario(false);
}

/// Found by this suite (docs/reliability.md, limit 1): the stuck client left
/// `/stats` but its socket lingered in the kernel, still trickling a 64 KiB
/// message every ~1.6 s and no EOF once the client read again. nsqd now resets
/// a connection whose write deadline passed (SO_LINGER 0).
#[test]
fn stuck_consumer_socket_is_closed_after_disconnect() {
    stuck_consumer_scenario(true);
}

fn stuck_consumer_scenario(check_socket_closed: bool) {
    // msg-timeout 5 s: the dropped consumer's in-flight messages come back soon.
    let n = Nsqd::start(&["--msg-timeout=5s"]);
    create_channel(&n, "stuck", "stuck");
    create_channel(&n, "stuck", "live");

    // The stuck consumer: heartbeat 1 s, RDY 2500, then never reads or writes again.
    let mut s = n.connect();
    small_rcvbuf(&s);
    s.identify(r#"{"heartbeat_interval":1000}"#);
    s.sub("stuck", "stuck");
    s.rdy(2500);

    // The live consumer on another channel of the same topic.
    let mut live = n.connect();
    live.sub("stuck", "live");
    live.rdy(200);

    // 400 × 64 KiB = 25 MiB: far more than the stuck socket can hold.
    let body = vec![b'x'; 64 * 1024];
    let mut p = n.connect();
    let total = 400usize;
    let t0 = Instant::now();
    let mut live_got = 0usize;
    for batch in 0..(total / 40) {
        let bodies: Vec<Vec<u8>> = (0..40)
            .map(|i| {
                let mut b = body.clone();
                b[..12].copy_from_slice(format!("{:012}", batch * 40 + i).as_bytes());
                b
            })
            .collect();
        let refs: Vec<&[u8]> = bodies.iter().map(|b| b.as_slice()).collect();
        p.send(&mpub_cmd("stuck", &refs));
        // The publisher is never stalled by the stuck consumer.
        match p.recv_timeout(secs(5)) {
            Some(f) => assert_eq!(
                f.bytes(),
                frame(FRAME_RESPONSE, b"OK"),
                "MPUB {batch}: {f:?}"
            ),
            None => {
                panic!("MPUB batch {batch} not acknowledged within 5 s: the publisher is stalled")
            }
        }
        // Drain what the live consumer has so far.
        while let Some(f) = live.recv_timeout(ms(1)) {
            assert_eq!(f.ftype, FRAME_MESSAGE);
            live.fin(&f.msg().id);
            live_got += 1;
        }
    }
    let live_rest = recv_msgs(&mut live, total - live_got, secs(30), true);
    live_got += live_rest.len();
    let live_took = t0.elapsed();
    assert_eq!(live_got, total, "the live channel got every message");

    // Another topic is served normally meanwhile.
    let mut o = n.connect();
    o.publish("other", b"ping");
    o.sub("other", "c");
    o.rdy(1);
    assert_eq!(o.expect_msg_within(secs(5)).body, b"ping");

    // nsqd disconnects the stuck consumer: it missed heartbeats (no NOP for 2 ×
    // 1 s) and its writes cannot complete within the heartbeat interval.
    let t1 = Instant::now();
    wait_for(secs(15), "stuck consumer disconnected by nsqd", || {
        (channel_clients(&n, "stuck", "stuck") == 0).then_some(())
    });
    let gone_after = t1.elapsed();
    // Its in-flight messages went back to the channel: nothing lost.
    let st = n.channel_stats("stuck", "stuck").unwrap();
    let depth = int(&st, "depth") + int(&st, "in_flight_count") + int(&st, "deferred_count");
    eprintln!(
        "stuck consumer: live channel got {live_got} in {live_took:?}; stuck one closed {gone_after:?} after publishing ended; stuck channel holds {depth} + delivered-before-stall"
    );
    // Reading the stuck socket now ends in EOF/reset once its buffer is drained.
    // BUG (reported): nsq-rs drops the client from the channel but leaves its
    // socket open: reading it yields data and then no EOF. Diagnose, then assert.
    if !check_socket_closed {
        drop(s);
    } else {
        let mut received = 0usize;
        let mut frames = 0usize;
        let t2 = Instant::now();
        let closed = loop {
            match s.try_read_frame(secs(3)) {
                ReadOutcome::Frame(f) => {
                    frames += 1;
                    received += f.data.len() + 8;
                }
                ReadOutcome::Closed(_) => break true,
                ReadOutcome::Timeout => break false,
            }
            if t2.elapsed() > secs(30) {
                break false;
            }
        };
        eprintln!("stuck socket: {frames} frames / {received} bytes readable after the drop; closed={closed} after {:?}", t2.elapsed());
        assert!(closed, "nsqd removed the stuck client from the channel but never closed its socket ({frames} frames readable)");
    }

    // Drain the stuck channel with a fresh consumer: all 400 are there (a
    // message may be delivered twice: once into the dead socket, once now).
    let mut again = n.connect();
    again.sub("stuck", "stuck");
    again.rdy(200);
    let mut seen = BTreeSet::new();
    let deadline = Instant::now() + secs(60);
    while seen.len() < total && Instant::now() < deadline {
        if let Some(f) = again.recv_timeout(secs(10)) {
            let m = f.msg();
            again.fin(&m.id);
            seen.insert(m.body[..12].to_vec());
        } else {
            break;
        }
    }
    // Messages written into the stuck socket before it closed count as
    // delivered (at-least-once is about redelivery of unFINed ones: they all
    // come back here, since the stuck client never FINed anything).
    assert_eq!(
        seen.len(),
        total,
        "every message of the stuck channel is redelivered after its consumer was dropped"
    );
    n.assert_alive();
}

// ---------------------------------------------------------------------------
// SIGKILL cycles under publish load
// ---------------------------------------------------------------------------

/// Publishes `crash-<cycle>-<i>` bodies one PUB at a time until the connection
/// breaks; returns the bodies that got `OK`, and the ones sent without an answer.
fn publish_until_broken(
    addr: &str,
    cycle: usize,
    stop: &AtomicBool,
) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let mut ok = Vec::new();
    let mut unknown = Vec::new();
    let mut c = Conn::connect(addr);
    for i in 0.. {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let body = format!("crash-{cycle:03}-{i:06}").into_bytes();
        if c.try_send(&pub_cmd("crash", &body)).is_err() {
            unknown.push(body);
            break;
        }
        match c.try_read_frame(secs(5)) {
            ReadOutcome::Frame(f) if f.bytes() == frame(FRAME_RESPONSE, b"OK") => ok.push(body),
            ReadOutcome::Frame(f) => panic!("PUB answered {f:?}"),
            ReadOutcome::Timeout | ReadOutcome::Closed(_) => {
                unknown.push(body);
                break;
            }
        }
    }
    (ok, unknown)
}

#[test]
fn sigkill_cycles_under_publish_load_lose_no_acknowledged_message() {
    let cycles = env_usize("NSQ_CRASH_CYCLES", 3);
    let args = ["--mem-queue-size=0", "--sync-every=1"];
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(0x5eed_c0de);
    let mut n = Nsqd::start_in(dir.path(), &args);
    create_channel(&n, "crash", "c");
    let (mut acked_total, mut delivered_total, mut dup_total, mut unacked_delivered) =
        (0usize, 0usize, 0usize, 0usize);
    let (mut rss_min, mut rss_max, mut max_restart) = (u64::MAX, 0u64, Duration::ZERO);
    let started = Instant::now();
    for cycle in 0..cycles {
        let stop = Arc::new(AtomicBool::new(false));
        let publisher = {
            let (addr, stop) = (n.tcp_addr.clone(), stop.clone());
            std::thread::spawn(move || publish_until_broken(&addr, cycle, &stop))
        };
        // SIGKILL mid-stream, after a random 300–1300 ms of publishing.
        sleep_ms(300 + rng.below(1000));
        let rss = rss_kib(n.pid());
        rss_min = rss_min.min(rss);
        rss_max = rss_max.max(rss);
        n.kill9();
        let (acked, unknown) = publisher.join().expect("publisher thread");
        assert!(
            !acked.is_empty(),
            "cycle {cycle}: some PUBs were acknowledged before the kill"
        );

        let t_start = Instant::now();
        n = Nsqd::start_in(dir.path(), &args);
        max_restart = max_restart.max(t_start.elapsed());
        let mut c = n.connect();
        c.sub("crash", "c");
        c.rdy(500);
        let mut counts: BTreeMap<Vec<u8>, usize> = BTreeMap::new();
        while let Some(f) = c.recv_timeout(secs(3)) {
            assert_eq!(f.ftype, FRAME_MESSAGE, "cycle {cycle}: {f:?}");
            let m = f.msg();
            c.fin(&m.id);
            *counts.entry(m.body).or_default() += 1;
        }
        c.cmd("CLS");
        drop(c);
        // Next cycle's publishing starts only when no consumer is left: a
        // message handed to a closing consumer is in flight (memory only) and
        // a SIGKILL may legitimately lose it.
        wait_for(secs(10), "consumer gone from the channel", || {
            (channel_clients(&n, "crash", "c") == 0).then_some(())
        });
        let missing: Vec<String> = acked
            .iter()
            .filter(|b| !counts.contains_key(*b))
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect();
        assert!(
            missing.is_empty(),
            "cycle {cycle}: {} of {} acknowledged messages lost after SIGKILL with --sync-every=1: {:?}",
            missing.len(),
            acked.len(),
            &missing[..missing.len().min(20)]
        );
        let prefix = format!("crash-{cycle:03}-").into_bytes();
        let foreign: Vec<String> = counts
            .keys()
            .filter(|b| !b.starts_with(&prefix))
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect();
        // Earlier cycles' messages may come back (FIN is not durable across a
        // crash): at-least-once allows that, so just count them.
        dup_total += foreign.len() + counts.values().filter(|&&k| k > 1).count();
        unacked_delivered += unknown.iter().filter(|b| counts.contains_key(*b)).count();
        acked_total += acked.len();
        delivered_total += counts.len();
        eprintln!(
            "cycle {cycle}: {} acked, {} delivered after restart, {} redelivered from earlier cycles",
            acked.len(),
            counts.len(),
            foreign.len()
        );
    }
    eprintln!(
        "SIGKILL cycles: {cycles}; acknowledged {acked_total}; lost 0; delivered {delivered_total}; duplicates {dup_total}; unacknowledged-but-delivered {unacked_delivered}; \
         restart (recovery + /ping) max {max_restart:?}; nsqd RSS at kill {rss_min}..{rss_max} KiB; total {:?}",
        started.elapsed()
    );
    n.assert_alive();
}

/// A consumer that FINs most messages, REQs some (at once or after
/// 300 ms) and holds the rest, until its connection breaks; returns the
/// bodies it sent FIN for.
fn consume_until_broken(addr: &str, topic: &str, seed: u64) -> BTreeSet<Vec<u8>> {
    let mut rng = Rng::new(seed);
    let mut fin_sent = BTreeSet::new();
    let mut c = Conn::connect(addr);
    c.sub(topic, "c");
    c.rdy(50);
    while let ReadOutcome::Frame(f) = c.try_read_frame(secs(5)) {
        if f.ftype != FRAME_MESSAGE {
            if f.is_heartbeat() && c.try_send(b"NOP\n").is_err() {
                break;
            }
            continue;
        }
        let m = f.msg();
        let cmd = match rng.below(10) {
            0 => continue, // held: in flight until the kill
            1 => format!("REQ {} 0\n", m.id),
            2 => format!("REQ {} 300\n", m.id),
            _ => {
                fin_sent.insert(m.body.clone());
                format!("FIN {}\n", m.id)
            }
        };
        if c.try_send(cmd.as_bytes()).is_err() {
            break;
        }
    }
    fin_sent
}

/// With `--sync-every=1` a message handed to a consumer is not lost by a
/// SIGKILL either: every acknowledged message its consumer had not sent
/// FIN for when nsqd was killed (held in flight, REQueued at once or with
/// a delay, or never delivered) is delivered after the restart.
#[test]
fn sigkill_cycles_with_a_busy_consumer_lose_no_unfinished_message() {
    let cycles = env_usize("NSQ_CRASH_CYCLES", 3);
    let args = ["--mem-queue-size=0", "--sync-every=1"];
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(0xc0ffee);
    let mut n = Nsqd::start_in(dir.path(), &args);
    create_channel(&n, "crash", "c");
    let (mut must_total, mut dup_total) = (0usize, 0usize);
    for cycle in 0..cycles {
        let stop = Arc::new(AtomicBool::new(false));
        let publisher = {
            let (addr, stop) = (n.tcp_addr.clone(), stop.clone());
            std::thread::spawn(move || publish_until_broken(&addr, cycle, &stop))
        };
        let consumer = {
            let (addr, seed) = (n.tcp_addr.clone(), rng.below(u64::MAX));
            std::thread::spawn(move || consume_until_broken(&addr, "crash", seed))
        };
        sleep_ms(300 + rng.below(1000));
        n.kill9();
        let (acked, _) = publisher.join().expect("publisher thread");
        let fin_sent = consumer.join().expect("consumer thread");
        n = Nsqd::start_in(dir.path(), &args);
        let mut c = n.connect();
        c.sub("crash", "c");
        c.rdy(500);
        let mut drained: BTreeMap<Vec<u8>, usize> = BTreeMap::new();
        while let Some(f) = c.recv_timeout(secs(3)) {
            let m = f.msg();
            c.fin(&m.id);
            *drained.entry(m.body).or_default() += 1;
        }
        c.cmd("CLS");
        drop(c);
        wait_for(secs(10), "consumer gone from the channel", || {
            (channel_clients(&n, "crash", "c") == 0).then_some(())
        });
        let must: Vec<&Vec<u8>> = acked.iter().filter(|b| !fin_sent.contains(*b)).collect();
        let missing: Vec<String> = must
            .iter()
            .filter(|b| !drained.contains_key(**b))
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect();
        assert!(
            missing.is_empty(),
            "cycle {cycle}: {} of {} acknowledged, unfinished messages lost: {:?}",
            missing.len(),
            must.len(),
            &missing[..missing.len().min(20)]
        );
        let dups = drained.keys().filter(|b| fin_sent.contains(*b)).count();
        eprintln!(
            "cycle {cycle}: {} acked, {} FIN sent before the kill, {} unfinished all delivered again, {} finished ones delivered again",
            acked.len(),
            fin_sent.len(),
            must.len(),
            dups
        );
        must_total += must.len();
        dup_total += dups;
    }
    eprintln!("busy-consumer SIGKILL cycles: {cycles}; unfinished at the kill {must_total}, lost 0; finished ones delivered again {dup_total}");
    n.assert_alive();
}

// ---------------------------------------------------------------------------
// Clean SIGTERM cycles
// ---------------------------------------------------------------------------

/// What the SIGTERM-cycle consumer did with one delivery.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Fate {
    Fin,
    Hold,
    Req,
}

/// Per-body bookkeeping for the SIGTERM cycles.
#[derive(Default)]
struct TermLedger {
    /// Every acknowledged body.
    published: BTreeSet<Vec<u8>>,
    /// Bodies whose FIN nsqd has processed (checked through /stats).
    finned: BTreeSet<Vec<u8>>,
    /// Deliveries per body.
    deliveries: BTreeMap<Vec<u8>, usize>,
}

impl TermLedger {
    /// Records a delivery and checks the at-least-once rules: the body was
    /// published, was never FINed, and `attempts` counts every delivery
    /// (nsqd persists in-flight and deferred messages with their attempts).
    fn delivered(&mut self, m: &Msg, when: &str) {
        let name = String::from_utf8_lossy(&m.body).into_owned();
        assert!(
            self.published.contains(&m.body),
            "{when}: {name} was never acknowledged"
        );
        assert!(
            !self.finned.contains(&m.body),
            "{when}: {name} was FINed before, yet delivered again"
        );
        let k = self.deliveries.entry(m.body.clone()).or_default();
        *k += 1;
        assert_eq!(
            m.attempts as usize, *k,
            "{when}: {name}: attempts {} but delivery #{k}",
            m.attempts
        );
    }
}

/// One SIGTERM cycle's deliveries and what the consumer did with them.
#[derive(Default)]
struct TermCycle {
    seen: BTreeSet<Vec<u8>>,
    held: BTreeSet<Vec<u8>>,
    fins: Vec<Vec<u8>>,
    reqs: usize,
}

impl TermCycle {
    fn handle(&mut self, cycle: usize, m: &Msg, fate: Fate, c: &mut Conn, led: &mut TermLedger) {
        led.delivered(m, &format!("cycle {cycle}"));
        assert!(
            self.seen.insert(m.body.clone()),
            "cycle {cycle}: {} delivered twice in one cycle",
            m.body_str()
        );
        match fate {
            Fate::Fin => {
                c.fin(&m.id);
                self.fins.push(m.body.clone());
            }
            Fate::Hold => {
                self.held.insert(m.body.clone());
            }
            Fate::Req => {
                c.req(&m.id, 60_000);
                self.reqs += 1;
            }
        }
    }
}

/// `NSQ_TERM_CYCLES` (default 3) clean stops under a consumer that holds
/// messages: each cycle PUBs 30, MPUBs 10 and DPUBs 5 (deferred 60 s, longer
/// than the cycle) to topic `term`; a consumer on channel `c` takes up to 60
/// deliveries and, at random, FINs half, holds a quarter in flight and REQs a
/// quarter with 60 s; once /stats shows nsqd processed all of that (in flight
/// = held, deferred = DPUBs + REQs) nsqd gets SIGTERM, must exit 0, and is
/// restarted on the same data path (`--mem-queue-size=20`: memory, in-flight,
/// deferred and disk-queue messages all cross the restart). In-flight and
/// deferred messages persisted at shutdown come back at once after the
/// restart, as in nsqd. At the end everything left is consumed.
///
/// Checked: every acknowledged message is FINed in some cycle or delivered
/// by the final drain; a FINed message is never delivered again; a message
/// is delivered again only after a delivery that was held or REQueued (never
/// twice within a cycle or in the drain), and its `attempts` counts all its
/// deliveries.
#[test]
fn sigterm_cycles_under_consumer_lose_nothing_and_redeliver_only_unfinished() {
    let cycles = env_usize("NSQ_TERM_CYCLES", 3);
    let args = ["--mem-queue-size=20"];
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(0x7e5_7e57);
    let mut n = Nsqd::start_in(dir.path(), &args);
    create_channel(&n, "term", "c");
    let mut led = TermLedger::default();
    let (mut fin_n, mut hold_n, mut req_n, mut dpub_n) = (0usize, 0usize, 0usize, 0usize);
    let (mut max_exit, mut max_start) = (Duration::ZERO, Duration::ZERO);
    let (mut rss_min, mut rss_max) = (u64::MAX, 0u64);
    let started = Instant::now();
    const RDY: usize = 60;

    for cycle in 0..cycles {
        let t0 = Instant::now();
        let mut p = n.connect();
        for i in 0..30 {
            let b = format!("term-{cycle:04}-p{i:02}").into_bytes();
            p.publish("term", &b);
            led.published.insert(b);
        }
        let batch: Vec<Vec<u8>> = (0..10)
            .map(|i| format!("term-{cycle:04}-m{i:02}").into_bytes())
            .collect();
        let refs: Vec<&[u8]> = batch.iter().map(|b| b.as_slice()).collect();
        p.mpublish("term", &refs);
        led.published.extend(batch.iter().cloned());
        for i in 0..5 {
            let b = format!("term-{cycle:04}-d{i:02}").into_bytes();
            p.send(&dpub_cmd("term", 60_000, &b));
            p.expect_ok();
            led.published.insert(b);
        }
        dpub_n += 5;
        drop(p);

        let mut c = n.connect();
        c.sub("term", "c");
        c.rdy(RDY as i64);
        let mut got: Vec<Msg> = Vec::new();
        while got.len() < RDY {
            let wait = if got.is_empty() { secs(5) } else { ms(500) };
            let Some(f) = c.recv_timeout(wait) else { break };
            assert_eq!(f.ftype, FRAME_MESSAGE, "cycle {cycle}: {f:?}");
            got.push(f.msg());
        }
        assert!(!got.is_empty(), "cycle {cycle}: the consumer got messages");
        c.rdy(0);
        let mut cs = TermCycle::default();
        for m in &got {
            let fate = match rng.below(4) {
                0 | 1 => Fate::Fin,
                2 => Fate::Hold,
                _ => Fate::Req,
            };
            cs.handle(cycle, m, fate, &mut c, &mut led);
        }
        // Barrier: nsqd has processed every FIN/REQ (in flight = held) and
        // holds the DPUBs and REQs as deferred. A message it sent before the
        // RDY 0 arrived and we had not read yet is held too.
        let deadline = Instant::now() + secs(10);
        loop {
            while let Some(f) = c.recv_timeout(ms(50)) {
                assert_eq!(f.ftype, FRAME_MESSAGE, "cycle {cycle}: {f:?}");
                cs.handle(cycle, &f.msg(), Fate::Hold, &mut c, &mut led);
            }
            let st = n.channel_stats("term", "c").expect("channel term/c");
            let (inflight, deferred) = (
                int(&st, "in_flight_count") as usize,
                int(&st, "deferred_count") as usize,
            );
            if inflight == cs.held.len() && deferred == 5 + cs.reqs {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "cycle {cycle}: /stats in flight {inflight} (held {}), deferred {deferred} (want {})",
                cs.held.len(),
                5 + cs.reqs
            );
        }
        led.finned.extend(cs.fins.iter().cloned());
        fin_n += cs.fins.len();
        hold_n += cs.held.len();
        req_n += cs.reqs;

        let rss = rss_kib(n.pid());
        rss_min = rss_min.min(rss);
        rss_max = rss_max.max(rss);
        let t_stop = Instant::now();
        let st = n.sigterm_and_wait(secs(15));
        let exit_in = t_stop.elapsed();
        assert!(
            st.success(),
            "cycle {cycle}: nsqd exit status {st} after SIGTERM\n{}",
            n.stderr()
        );
        drop(c);
        let t_start = Instant::now();
        n = Nsqd::start_in(dir.path(), &args);
        let start_in = t_start.elapsed();
        max_exit = max_exit.max(exit_in);
        max_start = max_start.max(start_in);
        eprintln!(
            "cycle {cycle}: 45 published, {} delivered: {} FIN, {} held, {} REQ; exit 0 in {exit_in:?}, up again in {start_in:?}; RSS {rss} KiB; cycle {:?}",
            cs.seen.len(),
            cs.fins.len(),
            cs.held.len(),
            cs.reqs,
            t0.elapsed()
        );
    }

    // Drain: everything not FINed comes back, each exactly once.
    let mut c = n.connect();
    c.sub("term", "c");
    c.rdy(200);
    let mut drained: BTreeSet<Vec<u8>> = BTreeSet::new();
    let deadline = Instant::now() + secs(120);
    while let Some(f) = c.recv_timeout(secs(3)) {
        assert!(Instant::now() < deadline, "drain still running after 120 s");
        assert_eq!(f.ftype, FRAME_MESSAGE, "drain: {f:?}");
        let m = f.msg();
        led.delivered(&m, "drain");
        assert!(
            drained.insert(m.body.clone()),
            "drain: {} delivered twice",
            m.body_str()
        );
        c.fin(&m.id);
    }
    let missing: Vec<String> = led
        .published
        .iter()
        .filter(|b| !led.finned.contains(*b) && !drained.contains(*b))
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .collect();
    let redelivered = led.deliveries.values().filter(|&&k| k > 1).count();
    eprintln!(
        "SIGTERM cycles: {cycles}; published {} ({dpub_n} DPUB); FIN {fin_n}, held at stop {hold_n}, REQ {req_n}; drained {}; lost {}; \
         redelivered (held/REQ'd, at-least-once) {redelivered}; FINed delivered again 0; exit after SIGTERM max {max_exit:?}; \
         restart max {max_start:?}; nsqd RSS {rss_min}..{rss_max} KiB; total {:?}",
        led.published.len(),
        drained.len(),
        missing.len(),
        started.elapsed()
    );
    assert!(
        missing.is_empty(),
        "{} acknowledged, unFINed messages lost across clean restarts (first 20): {:?}",
        missing.len(),
        &missing[..missing.len().min(20)]
    );
    assert_eq!(
        led.finned.len() + drained.len(),
        led.published.len(),
        "every message FINed exactly once overall"
    );
    n.assert_alive();
}

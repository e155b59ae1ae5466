//! Deferrals longer than `--max-req-timeout` (nsq-rs, beyond NSQ):
//! `--max-defer-timeout` bounds DPUB and HTTP `/pub?defer=`; when it is not
//! set (0) `--max-req-timeout` does, byte for byte as NSQ 1.3. REQ stays
//! bounded by `--max-req-timeout` either way.
//!
//! `--deferred-spill` (off by default): a channel's deferred messages past
//! its mem-queue-size go to run files in due order and come back when due;
//! with `--sync-every=1` a DPUB is acknowledged once durable with its due
//! time, so it survives a SIGKILL.

#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use nsq_tests::*;

const DAY_MS: i64 = 24 * 3600 * 1000;

fn setup(n: &Nsqd) {
    assert_eq!(n.post("/topic/create?topic=t", b"").status, 200);
    assert_eq!(n.post("/channel/create?topic=t&channel=c", b"").status, 200);
}

fn deferred(n: &Nsqd) -> i64 {
    int(
        &n.channel_stats("t", "c").expect("channel t/c"),
        "deferred_count",
    )
}

#[test]
fn by_default_dpub_is_bounded_by_max_req_timeout_as_in_nsq() {
    let n = Nsqd::start(&["--max-req-timeout=2h"]);
    setup(&n);
    let mut c = n.connect();
    c.send(&dpub_cmd("t", 2 * 3600 * 1000, b"ok"));
    assert_eq!(c.read_frame().text(), "OK");
    c.send(&dpub_cmd("t", DAY_MS, b"too long"));
    assert_eq!(
        c.read_frame().text(),
        "E_INVALID DPUB timeout 86400000 out of range 0-7200000"
    );
    let r = n.post(&format!("/pub?topic=t&defer={DAY_MS}"), b"too long");
    assert_eq!(
        (r.status, r.text().as_str()),
        (400, r#"{"message":"INVALID_DEFER"}"#)
    );
    assert_eq!(n.get("/config/max_defer_timeout").text(), "0");
}

#[test]
fn max_defer_timeout_allows_a_day_over_tcp_and_http_while_req_keeps_its_bound() {
    let n = Nsqd::start(&["--max-defer-timeout=48h", "--max-req-timeout=2s"]);
    setup(&n);
    let mut p = n.connect();
    p.send(&dpub_cmd("t", DAY_MS, b"tomorrow"));
    assert_eq!(p.read_frame().text(), "OK");
    let r = n.post(&format!("/pub?topic=t&defer={DAY_MS}"), b"tomorrow too");
    assert_eq!((r.status, r.text().as_str()), (200, "OK"));
    p.send(&dpub_cmd("t", 49 * 3600 * 1000, b"too long"));
    assert_eq!(
        p.read_frame().text(),
        "E_INVALID DPUB timeout 176400000 out of range 0-172800000"
    );
    assert_eq!(deferred(&n), 2, "both long deferrals wait");
    assert_eq!(n.get("/config/max_defer_timeout").text(), "172800000000000");

    // REQ is still clamped to --max-req-timeout (2 s); E_INVALID closed p
    let mut p = n.connect();
    p.send(&pub_cmd("t", b"requeued"));
    assert_eq!(p.read_frame().text(), "OK");
    let mut c = n.connect();
    c.sub("t", "c");
    c.rdy(1);
    let m = recv_msgs(&mut c, 1, FRAME_WAIT, false).remove(0);
    assert_eq!(m.body_str(), "requeued");
    let t0 = Instant::now();
    c.req(&m.id, DAY_MS);
    let again = recv_msgs(&mut c, 1, Duration::from_secs(10), false).remove(0);
    assert_eq!(again.body_str(), "requeued");
    assert!(
        t0.elapsed() < Duration::from_secs(6),
        "REQ clamped to --max-req-timeout: {:?}",
        t0.elapsed()
    );
    c.fin(&again.id);
    assert_eq!(deferred(&n), 2, "the day-long ones still wait");
}

// ---- --deferred-spill: deferred messages past the memory bound go to disk ----

/// The data directory's run files of spilled deferred messages.
fn runs(dir: &std::path::Path) -> Vec<(String, u64)> {
    use std::os::unix::fs::MetadataExt;
    let mut v: Vec<(String, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let is_run = name.contains(".deferred.") && !name.contains(".meta.");
            is_run.then(|| (name, e.metadata().map(|m| m.ino()).unwrap_or(0)))
        })
        .collect();
    v.sort();
    v
}

fn now_ms() -> i64 {
    now_ns() / 1_000_000
}

/// DPUBs `n` messages on one connection, in batches (each body
/// `<due unix ms>:<i>:` padded to `size` bytes); the delay of message i is
/// `delay(i)` ms. Returns (i, due ms) per message.
fn dpub_many(
    n: &Nsqd,
    count: usize,
    size: usize,
    delay: impl Fn(usize) -> i64,
) -> Vec<(usize, i64)> {
    let mut c = n.connect();
    let mut out = Vec::with_capacity(count);
    for start in (0..count).step_by(500) {
        let end = (start + 500).min(count);
        let mut buf = Vec::new();
        for i in start..end {
            let d = delay(i);
            let due = now_ms() + d;
            let mut body = format!("{due}:{i}:").into_bytes();
            body.resize(size.max(body.len()), b'x');
            buf.extend(dpub_cmd("t", d, &body));
            out.push((i, due));
        }
        c.send(&buf);
        // on a loaded machine this outlasts nsqd's 30 s heartbeat
        for _ in start..end {
            assert_eq!(c.recv().text(), "OK");
        }
    }
    out
}

/// Receives `count` messages (FINed), each with the time it arrived.
fn consume(c: &mut Conn, count: usize, timeout: Duration) -> Vec<(usize, i64, i64)> {
    let deadline = Instant::now() + timeout;
    let mut got = Vec::with_capacity(count);
    while got.len() < count {
        let rem = deadline.saturating_duration_since(Instant::now());
        let f = c
            .recv_timeout(rem)
            .unwrap_or_else(|| panic!("got {} of {count} within {timeout:?}", got.len()));
        let at = now_ms();
        let m = f.msg();
        c.fin(&m.id);
        let body = m.body_str();
        let mut parts = body.split(':');
        let due: i64 = parts.next().unwrap().parse().unwrap();
        let i: usize = parts.next().unwrap().parse().unwrap();
        got.push((i, due, at));
    }
    got
}

/// Every message once, none before it was due, and in due order (within
/// `tolerance_ms`) among those due after `ordered_from` (ms): messages that
/// fell due before their consumer subscribed wait in the channel's queue,
/// which keeps no due order (NSQ promises none).
fn check_delivery(got: &[(usize, i64, i64)], count: usize, tolerance_ms: i64, ordered_from: i64) {
    let mut seen = vec![false; count];
    for &(i, due, at) in got {
        assert!(!seen[i], "message {i} delivered twice");
        seen[i] = true;
        assert!(
            at + 5 >= due,
            "message {i} delivered {} ms before it was due",
            due - at
        );
    }
    assert!(seen.iter().all(|s| *s), "every message delivered");
    let mut latest = i64::MIN;
    for &(i, due, _) in got.iter().filter(|g| g.1 > ordered_from) {
        assert!(
            due.saturating_add(tolerance_ms) >= latest,
            "message {i} (due {due}) came after one due {latest}"
        );
        latest = latest.max(due);
    }
}

#[test]
fn deferred_spill_is_off_by_default_and_writes_no_run_file() {
    let n = Nsqd::start(&["--mem-queue-size=5"]);
    setup(&n);
    dpub_many(&n, 50, 10, |_| 60_000);
    assert_eq!(deferred(&n), 50);
    assert!(
        runs(n.data_path()).is_empty(),
        "nothing spilled without the flag"
    );
    assert_eq!(n.get("/config/deferred_spill").text(), "false");
}

#[test]
fn deferred_spill_keeps_memory_bounded_and_delivers_each_once_when_due_in_order() {
    // 12,000 deferrals of 4 KiB (47 MiB of bodies), interleaving six
    // delays, with 100 kept in memory; due 30 s after they are sent, so
    // (unless the machine is very loaded) none falls due while the rest are
    // sent
    let (count, size) = (12_000, 4096);
    let n = Nsqd::start(&["--deferred-spill", "--mem-queue-size=100"]);
    setup(&n);
    let rss0 = rss_kib(n.pid());
    let sent = dpub_many(&n, count, size, |i| 30_000 + (i % 6) as i64 * 700);
    let rss1 = rss_kib(n.pid());
    let first_due = sent.iter().map(|s| s.1).min().unwrap();
    let on_time = now_ms() < first_due;
    // The topic hands DPUBs to the channel after answering them: every
    // message is either deferred or, once due, in the channel's queue.
    let (held, queued) = wait_for(Duration::from_secs(20), "every DPUB on the channel", || {
        let ch = n.channel_stats("t", "c")?;
        let (d, q) = (int(&ch, "deferred_count"), int(&ch, "depth"));
        (d + q == count as i64).then_some((d, q))
    });
    let due = sent.iter().filter(|s| s.1 <= now_ms()).count() as i64;
    assert!(
        held >= count as i64 - due && queued <= due,
        "spilled messages count as deferred until due: {held} deferred, {queued} queued, {due} due"
    );
    let files = runs(n.data_path());
    assert!(
        files.len() >= 6,
        "one run per interleaved delay at least: {files:?}"
    );
    let grew = rss1.saturating_sub(rss0);
    eprintln!("RSS {rss0} KiB -> {rss1} KiB with {count} x {size} B deferred (publishing ended before the first due time: {on_time}); runs {files:?}");
    if on_time {
        // Three quarters: the allocator keeps freed memory in an arena per
        // thread (more of them under load); held in memory, all 47 MiB
        // would show. Messages that fall due while the rest are sent are
        // loaded back and queued meanwhile, so only then is it judged.
        assert!(
            grew < (count * size / 1024 * 3 / 4) as u64,
            "RSS grew {grew} KiB for {} KiB deferred: memory is not bounded",
            count * size / 1024
        );
    } else {
        eprintln!(
            "RSS not judged: the machine was too slow to send every DPUB before the first was due"
        );
    }
    let last_due = sent.iter().map(|s| s.1).max().unwrap();
    let mut c = n.connect();
    let subscribed = now_ms();
    c.sub("t", "c");
    c.rdy(2500);
    let got = consume(
        &mut c,
        count,
        Duration::from_millis((last_due - now_ms()).max(0) as u64 + 60_000),
    );
    // Each once, none early, all of them; their order is not judged here.
    // With 47 MiB due within a few seconds the consumer falls behind on a
    // loaded machine, the channel's memory queue (100) overflows to its
    // disk queue and, as in NSQ, the two keep no order between them:
    // CI saw a message come 2.7 s after one due later. The merge of the
    // runs by due time is judged without a clock in
    // `core::deferred_tests::interleaved_delays_spill_to_separate_runs_and_merge_back_in_due_order`.
    check_delivery(&got, count, i64::MAX, subscribed);
    let mut late: Vec<i64> = got.iter().map(|g| g.2 - g.1).collect();
    late.sort_unstable();
    eprintln!(
        "delivered after their due time: p50 {} ms, p99 {} ms, max {} ms",
        late[late.len() / 2],
        late[late.len() * 99 / 100],
        late[late.len() - 1]
    );
    wait_for(Duration::from_secs(10), "consumed runs deleted", || {
        runs(n.data_path()).is_empty().then_some(())
    });
    assert_eq!(deferred(&n), 0);
}

#[test]
fn deferred_spill_takes_no_value_but_a_boolean() {
    let out = run_bin("nsqd", &["--deferred-spill=maybe"], Duration::from_secs(10));
    assert_ne!(
        out.status.and_then(|s| s.code()),
        Some(0),
        "a bad value is refused"
    );
    assert!(
        out.stderr.contains("deferred-spill"),
        "the error names the flag: {}",
        out.stderr
    );
}

#[test]
fn spilled_deferrals_keep_their_due_times_across_a_clean_restart_even_with_the_flag_off() {
    let dir = tempfile::tempdir().unwrap();
    let count = 300;
    let mut n = Nsqd::start_in(dir.path(), &["--deferred-spill", "--mem-queue-size=50"]);
    setup(&n);
    let sent = dpub_many(&n, count, 100, |i| 6_000 + (i as i64 % 3) * 500);
    assert_eq!(deferred(&n), count as i64);
    let before = runs(dir.path());
    assert!(!before.is_empty());
    let st = n.sigterm_and_wait(Duration::from_secs(20));
    assert!(st.success());
    let after = runs(dir.path());
    for r in &before {
        assert!(
            after.contains(r),
            "run {r:?} kept as it was (not rewritten): {after:?}"
        );
    }
    assert_eq!(
        after.len(),
        before.len() + 1,
        "what memory held, as a run of its own"
    );
    // restarted without the flag: what was spilled still comes back, on time
    let n = Nsqd::start_in(dir.path(), &["--mem-queue-size=50"]);
    assert_eq!(deferred(&n), count as i64);
    let mut c = n.connect();
    c.sub("t", "c");
    c.rdy(1000);
    let first_due = sent.iter().map(|s| s.1).min().unwrap();
    if first_due - now_ms() > 500 {
        assert!(
            matches!(
                c.try_read_frame(Duration::from_millis((first_due - now_ms() - 300) as u64)),
                ReadOutcome::Timeout
            ),
            "nothing before the first due time"
        );
    }
    let got = consume(&mut c, count, Duration::from_secs(30));
    check_delivery(&got, count, 1000, i64::MIN);
}

#[test]
fn with_sync_every_1_an_acknowledged_dpub_survives_sigkill_with_its_due_time() {
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--deferred-spill", "--mem-queue-size=0", "--sync-every=1"];
    let count = 200;
    let mut n = Nsqd::start_in(dir.path(), &flags);
    setup(&n);
    // nsqd.dat is written after the create is answered (by the lookup
    // loop, as nsqd's Notify does): a SIGKILL before that would lose the
    // channel, which is not what this test is about
    wait_for(FRAME_WAIT, "nsqd.dat listing channel t/c", || {
        std::fs::read_to_string(dir.path().join("nsqd.dat"))
            .ok()
            .filter(|m| m.contains("\"name\":\"c\""))
    });
    let sent = dpub_many(&n, count, 64, |i| 5_000 + (i as i64 % 4) * 250);
    n.kill9();
    let n = Nsqd::start_in(dir.path(), &flags);
    assert_eq!(
        deferred(&n),
        count as i64,
        "every acknowledged DPUB is on disk"
    );
    let mut c = n.connect();
    c.sub("t", "c");
    c.rdy(500);
    let got = consume(&mut c, count, Duration::from_secs(30));
    check_delivery(&got, count, 1000, i64::MIN);
    let first_due = sent.iter().map(|s| s.1).min().unwrap();
    assert!(got.iter().all(|g| g.2 + 5 >= first_due));
}

#[test]
fn emptying_or_deleting_a_spilling_channel_removes_its_run_files() {
    let n = Nsqd::start(&["--deferred-spill", "--mem-queue-size=10"]);
    setup(&n);
    dpub_many(&n, 100, 50, |_| 60_000);
    assert!(!runs(n.data_path()).is_empty());
    assert_eq!(n.post("/channel/empty?topic=t&channel=c", b"").status, 200);
    assert_eq!(deferred(&n), 0);
    wait_for(FRAME_WAIT, "run files removed by empty", || {
        runs(n.data_path()).is_empty().then_some(())
    });
    dpub_many(&n, 100, 50, |_| 60_000);
    assert_eq!(deferred(&n), 100, "spills again after an empty");
    assert!(!runs(n.data_path()).is_empty());
    assert_eq!(n.post("/channel/delete?topic=t&channel=c", b"").status, 200);
    assert!(runs(n.data_path()).is_empty(), "and a delete removes them");
}

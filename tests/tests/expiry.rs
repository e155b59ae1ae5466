//! Message expiry (nsq-rs, beyond NSQ; docs/features/expiry.md): off by
//! default (NSQ's behaviour and `/stats`); with `max_age` on a topic, a
//! channel (`/topic/config`, `/channel/config`) or every topic
//! (`--max-age`), a message older than it, counted from its publish
//! timestamp, is never delivered: in memory, on disk (after a restart
//! too, skipped without its body being read), deferred, or requeued. It is
//! counted (`expired_count`), and goes to the channel's dead-letter topic
//! when the channel has one. A channel's shorter `max_age` wins for that
//! channel only; a DPUB past the topic's is refused; settings persist in
//! `nsqd.dat`; bad values change nothing.
//!
//! Ages are made by waiting, then a `max_age` shorter than the wait is
//! set: no message these tests want delivered is near its age, however
//! loaded the machine is.

#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use nsq_tests::*;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn ok(r: HttpResponse) -> Value {
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

fn create(n: &Nsqd, topic: &str, channels: &[&str]) {
    assert_eq!(
        n.post(&format!("/topic/create?topic={topic}"), b"").status,
        200
    );
    for c in channels {
        let r = n.post(&format!("/channel/create?topic={topic}&channel={c}"), b"");
        assert_eq!(r.status, 200, "{}", r.text());
    }
}

fn channel_config(n: &Nsqd, topic: &str, channel: &str, set: &str) -> Value {
    ok(n.post(
        &format!("/channel/config?topic={topic}&channel={channel}&{set}"),
        b"",
    ))
}

fn topic_config(n: &Nsqd, topic: &str, set: &str) -> Value {
    ok(n.post(&format!("/topic/config?topic={topic}&{set}"), b""))
}

/// Waits until the channel's `expired_count` is `want` (and returns its stats).
fn expired(n: &Nsqd, topic: &str, channel: &str, want: i64) -> Value {
    wait_for(
        secs(30),
        &format!("{topic}/{channel} expired_count {want}"),
        || {
            let c = n.channel_stats(topic, channel)?;
            (count(&c, "expired_count") == want).then_some(c)
        },
    )
}

/// An nsq-rs counter of `/stats`, absent while 0.
fn count(v: &Value, key: &str) -> i64 {
    v.get(key).and_then(Value::as_i64).unwrap_or(0)
}

/// The bodies a new consumer of the channel receives within `within`.
fn drain(n: &Nsqd, topic: &str, channel: &str, within: Duration) -> Vec<String> {
    let mut c = n.connect();
    c.sub(topic, channel);
    c.rdy(100);
    let mut got = Vec::new();
    let deadline = Instant::now() + within;
    while let Some(f) = c.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        if f.is_heartbeat() {
            c.nop();
            continue;
        }
        let m = f.msg();
        c.fin(&m.id);
        got.push(m.body_str());
    }
    got
}

#[test]
fn off_by_default_old_messages_are_delivered_and_stats_are_nsqs() {
    let n = Nsqd::start(&[]);
    create(&n, "t", &["c"]);
    n.http_pub("t", b"old");
    sleep_ms(1500);
    let c = n.channel_stats("t", "c").expect("channel");
    assert!(
        c.get("expired_count").is_none() && c.get("max_age").is_none(),
        "{c}"
    );
    assert!(n.topic_stats("t").expect("topic").get("max_age").is_none());
    assert_eq!(drain(&n, "t", "c", secs(2)), ["old"]);
    let cfg = ok(n.get("/channel/config?topic=t&channel=c"));
    assert_eq!(cfg["max_age"], "0s");
}

#[test]
fn an_expired_message_in_memory_is_dropped_counted_and_never_delivered() {
    let n = Nsqd::start(&[]);
    create(&n, "t", &["c"]);
    n.http_pub("t", b"old");
    sleep_ms(2500);
    // the sweep on setting it drops the message with no consumer about
    let cfg = channel_config(&n, "t", "c", "max_age=1s");
    assert_eq!(cfg["max_age"], "1s");
    let c = expired(&n, "t", "c", 1);
    assert_eq!(int(&c, "depth"), 0);
    assert_eq!(c["max_age"], "1s");
    // a young one goes through once the age is back to an hour
    channel_config(&n, "t", "c", "max_age=1h");
    n.http_pub("t", b"young");
    assert_eq!(drain(&n, "t", "c", secs(3)), ["young"]);
    let metrics = n.get("/metrics").text();
    assert!(
        metrics.contains("nsqd_channel_expired_total{topic=\"t\",channel=\"c\"} 1\n"),
        "{metrics}"
    );
}

#[test]
fn a_channels_shorter_max_age_wins_for_that_channel_only() {
    let n = Nsqd::start(&[]);
    create(&n, "t", &["short", "long"]);
    topic_config(&n, "t", "max_age=1h");
    n.http_pub("t", b"m");
    sleep_ms(2500);
    let cfg = channel_config(&n, "t", "short", "max_age=1s");
    assert_eq!(cfg["max_age"], "1s");
    // a channel's longer one cannot outlive its topic's
    let cfg = channel_config(&n, "t", "long", "max_age=2h");
    assert_eq!(cfg["max_age"], "1h0m0s");
    expired(&n, "t", "short", 1);
    assert_eq!(drain(&n, "t", "long", secs(3)), ["m"]);
    assert!(drain(&n, "t", "short", secs(1)).is_empty());
    let long = n.channel_stats("t", "long").unwrap();
    assert!(long.get("expired_count").is_none(), "{long}");
}

#[test]
fn with_a_dead_letter_topic_expired_messages_arrive_there_bodies_unchanged() {
    let n = Nsqd::start(&[]);
    create(&n, "t", &["c"]);
    create(&n, "t.expired", &["dl"]);
    channel_config(&n, "t", "c", "dead_letter_topic=t.expired");
    n.http_pub("t", b"payload 1");
    n.http_pub("t", b"payload 2");
    sleep_ms(2500);
    channel_config(&n, "t", "c", "max_age=1s");
    expired(&n, "t", "c", 2);
    assert_eq!(
        drain(&n, "t.expired", "dl", secs(3)),
        ["payload 1", "payload 2"]
    );
    let c = n.channel_stats("t", "c").unwrap();
    assert!(
        c.get("dead_letter_count").is_none(),
        "expired, not past max_attempts: {c}"
    );
}

#[test]
fn expired_messages_on_disk_are_skipped_after_a_restart_without_reading_their_bodies() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--mem-queue-size=0", "--max-msg-size=2097152"];
    let mut n = Nsqd::start_in(dir.path(), &args);
    create(&n, "t", &["c"]);
    let body = vec![b'x'; 1 << 20];
    for _ in 0..24 {
        n.http_pub("t", &body);
    }
    assert_eq!(
        int(&n.channel_stats("t", "c").unwrap(), "backend_depth"),
        24
    );
    n.sigterm_and_wait(secs(30));
    let n = Nsqd::start_in(dir.path(), &args);
    assert_eq!(
        int(&n.channel_stats("t", "c").unwrap(), "backend_depth"),
        24
    );
    sleep_ms(2500);
    let read_before = rchar(n.pid());
    channel_config(&n, "t", "c", "max_age=1s");
    let c = expired(&n, "t", "c", 24);
    assert_eq!((int(&c, "depth"), int(&c, "backend_depth")), (0, 0));
    let read = rchar(n.pid()) - read_before;
    assert!(
        read < 8 << 20,
        "24 MiB of expired bodies on disk, {read} bytes read to skip them"
    );
    assert!(drain(&n, "t", "c", secs(1)).is_empty());
    // the setting and the skip survive a restart
    drop(n);
    let n = Nsqd::start_in(dir.path(), &args);
    let cfg = ok(n.get("/channel/config?topic=t&channel=c"));
    assert_eq!(cfg["max_age"], "1s");
    assert_eq!(int(&n.channel_stats("t", "c").unwrap(), "depth"), 0);
}

/// Bytes the process has read through read(2) and friends (`rchar`).
fn rchar(pid: u32) -> i64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).expect("/proc/<pid>/io");
    io.lines()
        .find_map(|l| l.strip_prefix("rchar: "))
        .and_then(|v| v.trim().parse().ok())
        .expect("rchar")
}

#[test]
fn a_deferral_that_comes_due_past_the_channels_max_age_expires_then() {
    let n = Nsqd::start(&[]);
    create(&n, "t", &["c"]);
    channel_config(&n, "t", "c", "max_age=1s");
    let mut p = n.connect();
    p.send(&dpub_cmd("t", 2000, b"late"));
    p.expect_ok();
    let mut c = n.connect();
    c.sub("t", "c");
    c.rdy(10);
    expired(&n, "t", "c", 1);
    c.expect_nothing(Duration::from_millis(500));
    assert_eq!(
        int(&n.channel_stats("t", "c").unwrap(), "deferred_count"),
        0
    );
}

#[test]
fn a_dpub_past_the_topics_max_age_is_refused_over_tcp_and_http() {
    let n = Nsqd::start(&[]);
    create(&n, "t", &["c"]);
    topic_config(&n, "t", "max_age=1m");
    let mut p = n.connect();
    p.send(&dpub_cmd("t", 60_000, b"never"));
    p.expect_error_nonfatal("E_DPUB_FAILED DPUB failed defer past the topic's max_age 1m0s");
    // the connection stays: a shorter one goes through
    p.send(&dpub_cmd("t", 59_000, b"in time"));
    p.expect_ok();
    n.post("/pub?topic=t&defer=120000", b"never")
        .assert_error(400, "DEFER_PAST_MAX_AGE");
    assert_eq!(
        int(&n.channel_stats("t", "c").unwrap(), "deferred_count"),
        1
    );
}

#[test]
fn a_requeue_of_an_expired_message_expires_it() {
    let n = Nsqd::start(&[]);
    create(&n, "t", &["c"]);
    n.http_pub("t", b"m");
    let mut c = n.connect();
    c.sub("t", "c");
    c.rdy(1);
    let m = c.expect_msg();
    sleep_ms(2500);
    channel_config(&n, "t", "c", "max_age=1s");
    c.req(&m.id, 0);
    expired(&n, "t", "c", 1);
    c.expect_nothing(Duration::from_millis(500));
    let s = n.channel_stats("t", "c").unwrap();
    assert_eq!((int(&s, "requeue_count"), int(&s, "depth")), (1, 0));
}

#[test]
fn a_topic_without_channels_loses_what_expires_in_its_backlog() {
    let n = Nsqd::start(&["--mem-queue-size=2"]);
    assert_eq!(n.post("/topic/create?topic=t", b"").status, 200);
    for i in 0..5 {
        n.http_pub("t", format!("m{i}").as_bytes());
    }
    sleep_ms(2500);
    assert_eq!(topic_config(&n, "t", "max_age=1s")["max_age"], "1s");
    let t = wait_for(secs(30), "the backlog expired", || {
        let t = n.topic_stats("t")?;
        (count(&t, "expired_count") == 5).then_some(t)
    });
    assert_eq!(int(&t, "depth"), 0, "memory and disk: {t}");
    // a channel made now sees none of them
    create(&n, "t", &["c"]);
    assert!(drain(&n, "t", "c", secs(1)).is_empty());
}

#[test]
fn the_flag_sets_every_topics_default_and_a_topic_may_say_never() {
    let dir = tempfile::tempdir().unwrap();
    let n = Nsqd::start_in(dir.path(), &["--max-age=1s"]);
    create(&n, "t", &["c"]);
    create(&n, "keep", &["c"]);
    assert_eq!(ok(n.get("/topic/config?topic=t"))["max_age"], "1s");
    assert_eq!(topic_config(&n, "keep", "max_age=0")["max_age"], "0s");
    n.http_pub("t", b"gone");
    n.http_pub("keep", b"kept");
    expired(&n, "t", "c", 1);
    sleep_ms(1500);
    assert_eq!(drain(&n, "keep", "c", secs(3)), ["kept"]);
    // empty: back to the flag's
    assert_eq!(topic_config(&n, "keep", "max_age=")["max_age"], "1s");
    let meta = n.read_metadata().expect("nsqd.dat");
    assert!(
        !meta.contains("max_age"),
        "the flag's default is not kept per topic: {meta}"
    );
}

#[test]
fn settings_persist_and_bad_values_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = Nsqd::start_in(dir.path(), &[]);
    create(&n, "t", &["c"]);
    topic_config(&n, "t", "max_age=90s");
    channel_config(&n, "t", "c", "max_age=30s");
    for bad in ["-1s", "soon", "1x"] {
        n.post(&format!("/topic/config?topic=t&max_age={bad}"), b"")
            .assert_error(400, "INVALID_ARG_MAX_AGE");
        n.post(
            &format!("/channel/config?topic=t&channel=c&max_age={bad}"),
            b"",
        )
        .assert_error(400, "INVALID_ARG_MAX_AGE");
    }
    assert_eq!(ok(n.get("/topic/config?topic=t"))["max_age"], "1m30s");
    let meta = n.read_metadata().expect("nsqd.dat");
    assert!(meta.contains("\"max_age\":90000000000"), "{meta}");
    assert!(meta.contains("\"max_age\":30000000000"), "{meta}");
    n.sigterm_and_wait(secs(30));
    let n = Nsqd::start_in(dir.path(), &[]);
    assert_eq!(ok(n.get("/topic/config?topic=t"))["max_age"], "1m30s");
    assert_eq!(
        ok(n.get("/channel/config?topic=t&channel=c"))["max_age"],
        "30s"
    );
    let t = n.topic_stats("t").unwrap();
    assert_eq!(
        (t["max_age"].as_str(), t["channels"][0]["max_age"].as_str()),
        (Some("1m30s"), Some("30s"))
    );
}

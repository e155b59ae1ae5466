//! Per-topic and per-channel limits (nsq-rs, beyond NSQ): a topic's own
//! `mem_queue_size`, and `max_depth` with a policy (`reject` or
//! `drop-oldest`) per topic and per channel, set with `/topic/config` and
//! `/channel/config`. Off by default (NSQ's behaviour and `/stats`); on,
//! a `reject` limit refuses a publish whole over TCP and HTTP and
//! `drop-oldest` keeps the depth at the limit and counts what it dropped;
//! bad settings change nothing; settings and queued messages survive a
//! restart. Deferred messages are not in the depth a limit counts (a DPUB
//! is refused only while the channel's depth is at its limit), and a
//! topic's `max_depth` bounds what waits in the topic, not its channels.

#![forbid(unsafe_code)]

use std::time::Duration;

use nsq_tests::*;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn create(n: &Nsqd, topic: &str, channels: &[&str]) {
    assert_eq!(
        n.post(&format!("/topic/create?topic={topic}"), b"").status,
        200
    );
    for c in channels {
        let r = n.post(&format!("/channel/create?topic={topic}&channel={c}"), b"");
        assert_eq!(r.status, 200);
    }
}

/// POSTs a config change and returns the settings it answers with.
fn set(n: &Nsqd, what: &str, query: &str) -> Value {
    let r = n.post(&format!("/{what}/config?{query}"), b"");
    assert_eq!(r.status, 200, "POST /{what}/config?{query}: {}", r.text());
    r.json()
}

fn get(n: &Nsqd, what: &str, query: &str) -> Value {
    let r = n.get(&format!("/{what}/config?{query}"));
    assert_eq!(r.status, 200, "GET /{what}/config?{query}: {}", r.text());
    r.json()
}

fn depth(n: &Nsqd, topic: &str, channel: &str) -> i64 {
    int(&n.channel_stats(topic, channel).unwrap(), "depth")
}

#[test]
fn off_by_default_nothing_is_limited_and_stats_are_nsqs() {
    let n = Nsqd::start(&["--mem-queue-size=5"]);
    create(&n, "t", &["c"]);
    let mut c = n.connect();
    for i in 0..40 {
        c.publish("t", format!("m{i}").as_bytes());
    }
    assert_eq!(depth(&n, "t", "c"), 40);
    let stats = n.get("/stats?format=json").text();
    for key in ["max_depth", "dropped_count", "mem_queue_size"] {
        assert!(!stats.contains(key), "NSQ's /stats, no {key}: {stats}");
    }
    let text = n.get("/stats").text();
    assert!(
        !text.contains("max-depth") && !text.contains("dropped"),
        "{text}"
    );
    let t = get(&n, "topic", "topic=t");
    assert_eq!(
        (
            &t["mem_queue_size"],
            &t["max_depth"],
            &t["max_depth_policy"]
        ),
        (&Value::from(5), &Value::from(0), &Value::from("reject"))
    );
    let ch = get(&n, "channel", "topic=t&channel=c");
    assert_eq!(ch["max_depth"], 0);
    assert!(!n.read_metadata().unwrap_or_default().contains("max_depth"));
}

#[test]
fn reject_refuses_whole_publishes_over_tcp_and_http_for_every_channel() {
    let n = Nsqd::start(&["--mem-queue-size=2"]);
    create(&n, "t", &["all", "bounded"]);
    let cfg = set(
        &n,
        "channel",
        "topic=t&channel=bounded&max_depth=3&max_depth_policy=reject",
    );
    assert_eq!(
        (cfg["max_depth"].as_i64(), cfg["max_depth_policy"].as_str()),
        (Some(3), Some("reject"))
    );
    let mut c = n.connect();
    c.mpublish("t", &[b"1", b"2"]);
    // two more would take `bounded` to 4: refused whole, for `all` too,
    // and the connection stays
    c.send(&mpub_cmd("t", &[b"3", b"4"]));
    c.expect_error_nonfatal("E_MPUB_FAILED MPUB failed channel bounded is at max_depth 3");
    assert_eq!((depth(&n, "t", "all"), depth(&n, "t", "bounded")), (2, 2));
    c.publish("t", b"3");
    c.send(&pub_cmd("t", b"4"));
    c.expect_error_nonfatal("E_PUB_FAILED PUB failed channel bounded is at max_depth 3");
    c.send(&dpub_cmd("t", 1000, b"4"));
    c.expect_error_nonfatal("E_DPUB_FAILED DPUB failed channel bounded is at max_depth 3");
    n.post("/pub?topic=t", b"4")
        .assert_error(503, "MAX_DEPTH_REACHED");
    n.post("/mpub?topic=t", b"4\n5")
        .assert_error(503, "MAX_DEPTH_REACHED");
    let t = n.topic_stats("t").unwrap();
    assert_eq!(int(&t, "message_count"), 3, "nothing refused was counted");
    assert_eq!((depth(&n, "t", "all"), depth(&n, "t", "bounded")), (3, 3));
    let ch = n.channel_stats("t", "bounded").unwrap();
    assert_eq!(ch["max_depth_policy"], "reject");

    // a consumer makes room: a message in flight is no longer in the depth
    let mut sub = n.connect();
    sub.sub("t", "bounded");
    sub.rdy(1);
    let m = recv_msgs(&mut sub, 1, secs(10), false).remove(0);
    assert_eq!(m.body, b"1");
    n.http_pub("t", b"4");
    assert_eq!(depth(&n, "t", "all"), 4);
}

#[test]
fn a_topics_own_limit_bounds_its_backlog() {
    let n = Nsqd::start(&["--mem-queue-size=1"]);
    // no channel: what is published waits in the topic, memory then disk
    create(&n, "lonely", &[]);
    set(&n, "topic", "topic=lonely&max_depth=3");
    let mut c = n.connect();
    c.mpublish("lonely", &[b"a", b"b", b"c"]);
    c.send(&pub_cmd("lonely", b"d"));
    c.expect_error_nonfatal("E_PUB_FAILED PUB failed topic is at max_depth 3");
    let t = n.topic_stats("lonely").unwrap();
    assert_eq!((int(&t, "depth"), int(&t, "backend_depth")), (3, 2));
    assert_eq!(
        (t["max_depth"].as_i64(), t["max_depth_policy"].as_str()),
        (Some(3), Some("reject"))
    );

    // drop-oldest instead: the topic keeps the newest three
    set(&n, "topic", "topic=lonely&max_depth_policy=drop-oldest");
    c.mpublish("lonely", &[b"d", b"e"]);
    let t = n.topic_stats("lonely").unwrap();
    assert_eq!((int(&t, "depth"), int(&t, "dropped_count")), (3, 2));
    let mut sub = n.connect();
    sub.sub("lonely", "late");
    sub.rdy(10);
    let mut got: Vec<String> = recv_msgs(&mut sub, 3, secs(10), true)
        .iter()
        .map(|m| m.body_str())
        .collect();
    got.sort();
    assert_eq!(got, ["c", "d", "e"]);
    let metrics = n.get("/metrics").text();
    assert!(
        metrics.contains("nsqd_topic_dropped_total{topic=\"lonely\"} 2\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("nsqd_topic_max_depth{topic=\"lonely\"} 3\n"),
        "{metrics}"
    );
}

#[test]
fn drop_oldest_keeps_a_channel_at_max_depth_and_counts_what_it_dropped() {
    // memory 2: most of the channel is on disk, and its oldest go from there
    let n = Nsqd::start(&["--mem-queue-size=2"]);
    create(&n, "t", &["c"]);
    set(
        &n,
        "channel",
        "topic=t&channel=c&max_depth=5&max_depth_policy=drop-oldest",
    );
    let mut c = n.connect();
    for i in 0..10 {
        c.publish("t", format!("p{i}").as_bytes());
    }
    c.mpublish("t", &[b"m0", b"m1", b"m2"]);
    // a batch larger than the limit keeps its newest five
    let big: Vec<Vec<u8>> = (0..8).map(|i| format!("b{i}").into_bytes()).collect();
    let big: Vec<&[u8]> = big.iter().map(|b| b.as_slice()).collect();
    c.mpublish("t", &big);
    let ch = n.channel_stats("t", "c").unwrap();
    assert_eq!(
        (
            int(&ch, "depth"),
            int(&ch, "dropped_count"),
            int(&ch, "message_count")
        ),
        (5, 16, 21)
    );
    assert!(
        int(&ch, "backend_depth") > 0,
        "the disk was part of it: {ch}"
    );
    let text = n.get("/stats").text();
    assert!(
        text.contains("max-depth: 5 (drop-oldest) dropped: 16"),
        "{text}"
    );
    let metrics = n.get("/metrics").text();
    assert!(
        metrics.contains("nsqd_channel_dropped_total{topic=\"t\",channel=\"c\"} 16\n"),
        "{metrics}"
    );
    let mut sub = n.connect();
    sub.sub("t", "c");
    sub.rdy(100);
    let mut got: Vec<String> = recv_msgs(&mut sub, 5, secs(10), true)
        .iter()
        .map(|m| m.body_str())
        .collect();
    got.sort();
    assert_eq!(got, ["b3", "b4", "b5", "b6", "b7"]);
    sub.expect_nothing(Duration::from_millis(300));
}

#[test]
fn a_topics_mem_queue_size_overrides_the_flag_for_it_and_its_channels() {
    let n = Nsqd::start(&["--mem-queue-size=100"]);
    create(&n, "small", &["c"]);
    create(&n, "big", &["c"]);
    let cfg = set(&n, "topic", "topic=small&mem_queue_size=2");
    assert_eq!(cfg["mem_queue_size"], 2);
    let mut c = n.connect();
    let bodies: Vec<&[u8]> = vec![b"x"; 10];
    c.mpublish("small", &bodies);
    c.mpublish("big", &bodies);
    let small = n.channel_stats("small", "c").unwrap();
    assert_eq!(
        (int(&small, "depth"), int(&small, "backend_depth")),
        (10, 8)
    );
    let big = n.channel_stats("big", "c").unwrap();
    assert_eq!(
        int(&big, "backend_depth"),
        0,
        "other topics keep the flag's"
    );
    assert_eq!(n.topic_stats("small").unwrap()["mem_queue_size"], 2);
    // a channel created later takes the topic's size too
    create(&n, "small", &["later"]);
    c.mpublish("small", &bodies);
    let later = n.channel_stats("small", "later").unwrap();
    assert_eq!(int(&later, "backend_depth"), 8);
    // back to the flag's
    let cfg = set(&n, "topic", "topic=small&mem_queue_size=");
    assert_eq!(cfg["mem_queue_size"], 100);
    assert!(!n
        .get("/stats?format=json")
        .text()
        .contains("mem_queue_size"));
}

#[test]
fn bad_settings_get_a_clear_error_and_change_nothing() {
    let n = Nsqd::start(&[]);
    create(&n, "t", &["c"]);
    set(&n, "channel", "topic=t&channel=c&max_depth=7");
    for (what, q, want) in [
        ("topic", "topic=t&max_depth=-1", "INVALID_ARG_MAX_DEPTH"),
        ("topic", "topic=t&max_depth=x", "INVALID_ARG_MAX_DEPTH"),
        (
            "topic",
            "topic=t&max_depth=5&max_depth_policy=drop_oldest",
            "INVALID_ARG_MAX_DEPTH_POLICY",
        ),
        (
            "topic",
            "topic=t&mem_queue_size=-1&max_depth=5",
            "INVALID_ARG_MEM_QUEUE_SIZE",
        ),
        ("topic", "topic=bad!name", "INVALID_ARG_TOPIC"),
        (
            "channel",
            "topic=t&channel=c&max_depth=3&max_depth_policy=oldest",
            "INVALID_ARG_MAX_DEPTH_POLICY",
        ),
        (
            "channel",
            "topic=t&channel=c&max_attempts=2&max_depth=1.5",
            "INVALID_ARG_MAX_DEPTH",
        ),
    ] {
        n.post(&format!("/{what}/config?{q}"), b"")
            .assert_error(400, want);
    }
    n.post("/topic/config?max_depth=1", b"")
        .assert_error(400, "MISSING_ARG_TOPIC");
    n.post("/topic/config?topic=nope&max_depth=1", b"")
        .assert_error(404, "TOPIC_NOT_FOUND");
    n.post("/channel/config?topic=t&channel=nope&max_depth=1", b"")
        .assert_error(404, "CHANNEL_NOT_FOUND");
    let t = get(&n, "topic", "topic=t");
    assert_eq!(
        (t["max_depth"].as_i64(), t["mem_queue_size"].as_i64()),
        (Some(0), Some(10000))
    );
    let ch = get(&n, "channel", "topic=t&channel=c");
    assert_eq!(
        (
            ch["max_depth"].as_i64(),
            ch["max_depth_policy"].as_str(),
            ch["max_attempts"].as_i64()
        ),
        (Some(7), Some("reject"), Some(0)),
        "bad settings changed nothing"
    );
}

#[test]
fn settings_and_queued_messages_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = Nsqd::start_in(dir.path(), &["--mem-queue-size=100"]);
    create(&n, "t", &["c", "free"]);
    set(
        &n,
        "topic",
        "topic=t&mem_queue_size=1&max_depth=50&max_depth_policy=drop-oldest",
    );
    set(&n, "channel", "topic=t&channel=c&max_depth=4");
    let mut c = n.connect();
    c.mpublish("t", &[b"1", b"2", b"3", b"4"]);
    let meta = n.read_metadata().unwrap();
    for key in [
        "\"mem_queue_size\":1",
        "\"max_depth\":50",
        "\"max_depth_policy\":\"drop-oldest\"",
        "\"max_depth\":4",
    ] {
        assert!(meta.contains(key), "{key} in {meta}");
    }
    n.sigterm_and_wait(secs(15));

    let n = Nsqd::start_in(dir.path(), &["--mem-queue-size=100"]);
    let t = get(&n, "topic", "topic=t");
    assert_eq!(
        (
            t["mem_queue_size"].as_i64(),
            t["max_depth"].as_i64(),
            t["max_depth_policy"].as_str()
        ),
        (Some(1), Some(50), Some("drop-oldest"))
    );
    assert_eq!(get(&n, "channel", "topic=t&channel=c")["max_depth"], 4);
    assert_eq!((depth(&n, "t", "c"), depth(&n, "t", "free")), (4, 4));
    let mut c = n.connect();
    c.send(&pub_cmd("t", b"5"));
    c.expect_error_nonfatal("E_PUB_FAILED PUB failed channel c is at max_depth 4");
    let mut sub = n.connect();
    sub.sub("t", "c");
    sub.rdy(10);
    let got: Vec<String> = recv_msgs(&mut sub, 4, secs(10), true)
        .iter()
        .map(|m| m.body_str())
        .collect();
    let mut sorted = got.clone();
    sorted.sort();
    assert_eq!(sorted, ["1", "2", "3", "4"]);
}

#[test]
fn drop_oldest_with_durable_acknowledgements_drops_from_disk_for_good() {
    // --sync-every=1 --mem-queue-size=0: every message is a disk record
    // the channel must acknowledge; dropped ones are acknowledged too, so a
    // restart does not bring them back
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--sync-every=1", "--mem-queue-size=0"];
    let mut n = Nsqd::start_in(dir.path(), &flags);
    create(&n, "t", &["c"]);
    set(
        &n,
        "channel",
        "topic=t&channel=c&max_depth=3&max_depth_policy=drop-oldest",
    );
    let mut c = n.connect();
    for i in 0..6 {
        c.publish("t", format!("d{i}").as_bytes());
    }
    let ch = n.channel_stats("t", "c").unwrap();
    assert_eq!((int(&ch, "depth"), int(&ch, "dropped_count")), (3, 3));
    n.sigterm_and_wait(secs(15));

    let n = Nsqd::start_in(dir.path(), &flags);
    assert_eq!(depth(&n, "t", "c"), 3, "the dropped stay dropped");
    let mut sub = n.connect();
    sub.sub("t", "c");
    sub.rdy(10);
    let mut got: Vec<String> = recv_msgs(&mut sub, 3, secs(10), true)
        .iter()
        .map(|m| m.body_str())
        .collect();
    got.sort();
    assert_eq!(got, ["d3", "d4", "d5"]);
    sub.expect_nothing(Duration::from_millis(300));
}

#[test]
fn concurrent_producers_never_take_a_channel_past_its_limit() {
    // four connections at once, most of the channel on disk: reject
    // accepts exactly max_depth, drop-oldest ends exactly at max_depth
    // with every other message counted as dropped
    let n = Nsqd::start(&["--mem-queue-size=10"]);
    create(&n, "r", &["c"]);
    create(&n, "d", &["c"]);
    set(&n, "channel", "topic=r&channel=c&max_depth=100");
    set(
        &n,
        "channel",
        "topic=d&channel=c&max_depth=100&max_depth_policy=drop-oldest",
    );
    let oks = std::thread::scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|w| {
                let n = &n;
                s.spawn(move || {
                    let mut c = n.connect();
                    let mut ok = 0;
                    for i in 0..50 {
                        c.publish("d", format!("{w}-{i}").as_bytes());
                        c.send(&mpub_cmd("r", &[b"a", b"b"]));
                        if c.recv().bytes() == frame(FRAME_RESPONSE, b"OK") {
                            ok += 2;
                        }
                    }
                    ok
                })
            })
            .collect();
        workers.into_iter().map(|h| h.join().unwrap()).sum::<i64>()
    });
    let r = n.channel_stats("r", "c").unwrap();
    assert_eq!((oks, int(&r, "depth")), (100, 100), "{r}");
    let d = n.channel_stats("d", "c").unwrap();
    assert_eq!(
        (int(&d, "depth"), int(&d, "dropped_count")),
        (100, 100),
        "{d}"
    );
}

#[test]
fn reject_does_not_count_deferred_messages_nor_refuse_them_when_they_fall_due() {
    let n = Nsqd::start(&[]);
    create(&n, "t", &["c"]);
    set(&n, "channel", "topic=t&channel=c&max_depth=2");
    let mut c = n.connect();
    // Deferred messages are not in the depth: five DPUBs pass a limit of 2.
    for i in 0..5 {
        c.send(&dpub_cmd("t", 1500, format!("d{i}").as_bytes()));
        c.expect_ok();
    }
    let ch = n.channel_stats("t", "c").unwrap();
    assert_eq!((int(&ch, "depth"), int(&ch, "deferred_count")), (0, 5));
    // Due, they join the depth whatever the limit: they were accepted.
    wait_for(secs(20), "every deferred message due and queued", || {
        let ch = n.channel_stats("t", "c")?;
        (int(&ch, "depth") == 5).then_some(())
    });
    // Now the channel is past its limit: a PUB and a DPUB are refused.
    c.send(&pub_cmd("t", b"p"));
    c.expect_error_nonfatal("E_PUB_FAILED PUB failed channel c is at max_depth 2");
    c.send(&dpub_cmd("t", 1000, b"d"));
    c.expect_error_nonfatal("E_DPUB_FAILED DPUB failed channel c is at max_depth 2");
}

#[test]
fn a_topics_max_depth_bounds_its_own_backlog_not_its_channels() {
    let n = Nsqd::start(&[]);
    create(&n, "t", &["c"]);
    set(&n, "topic", "topic=t&max_depth=1");
    // With a channel the topic flows straight to it: nothing waits in the
    // topic, and the channel's depth is not the topic's limit.
    let mut c = n.connect();
    c.mpublish("t", &[b"1", b"2", b"3"]);
    assert_eq!(depth(&n, "t", "c"), 3);
    assert_eq!(int(&n.topic_stats("t").unwrap(), "depth"), 0);
    // Paused, the topic keeps what is published: there its limit applies.
    assert_eq!(n.post("/topic/pause?topic=t", b"").status, 200);
    c.publish("t", b"4");
    c.send(&pub_cmd("t", b"5"));
    c.expect_error_nonfatal("E_PUB_FAILED PUB failed topic is at max_depth 1");
    assert_eq!(int(&n.topic_stats("t").unwrap(), "depth"), 1);
}

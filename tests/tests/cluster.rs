//! The cluster, black-box: nsqlookupd + nsqd(s) as NSQ's quick start runs
//! them, and discovery the way consumers do it (ask every lookupd
//! `/lookup?topic=`, union the producers, connect to
//! `broadcast_address:tcp_port`). Project issue 4's "must show" list.

#![forbid(unsafe_code)]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use nsq_tests::*;

fn nsqd_for(lookupds: &[&Lookupd], extra: &[&str]) -> Nsqd {
    let mut args: Vec<String> = lookupds
        .iter()
        .map(|l| format!("--lookupd-tcp-address={}", l.tcp))
        .collect();
    args.push("--broadcast-address=127.0.0.1".into());
    args.extend(extra.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    Nsqd::start(&refs)
}

/// What a consumer does: union of `broadcast_address:tcp_port` over every
/// lookupd that answers.
fn discover(lookupds: &[&Lookupd], topic: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for l in lookupds {
        if let Some(v) = l.lookup(topic) {
            for p in v["producers"].as_array().into_iter().flatten() {
                out.insert(format!(
                    "{}:{}",
                    p["broadcast_address"].as_str().unwrap_or(""),
                    p["tcp_port"]
                ));
            }
        }
    }
    out
}

fn discover_n(lookupds: &[&Lookupd], topic: &str, n: usize) -> BTreeSet<String> {
    wait_for(
        Duration::from_secs(10),
        &format!("{n} producers of {topic} in lookupd"),
        || {
            let d = discover(lookupds, topic);
            (d.len() == n).then_some(d)
        },
    )
}

fn bodies(msgs: &[Msg]) -> BTreeSet<String> {
    msgs.iter().map(|m| m.body_str()).collect()
}

#[test]
fn quick_start_consumer_via_lookupd_gets_messages_from_before_and_after() {
    let l = Lookupd::start(&[]);
    let n = nsqd_for(&[&l], &[]);
    for i in 0..10 {
        n.http_pub("test", format!("before-{i}").as_bytes());
    }
    let producers = discover_n(&[&l], "test", 1);
    assert_eq!(producers, BTreeSet::from([n.tcp_addr.clone()]));
    let addr = producers.iter().next().unwrap().clone();
    let mut c = Conn::connect(&addr);
    c.sub("test", "ch");
    c.rdy(100);
    for i in 0..10 {
        n.http_pub("test", format!("after-{i}").as_bytes());
    }
    let got = recv_msgs(&mut c, 20, Duration::from_secs(10), true);
    let want: BTreeSet<String> = (0..10)
        .flat_map(|i| [format!("before-{i}"), format!("after-{i}")])
        .collect();
    assert_eq!(bodies(&got), want);
    // the channel made by SUB is known to the lookupd too
    wait_for(Duration::from_secs(5), "channel registered", || {
        let v = l.lookup("test")?;
        (v["channels"] == serde_json::json!(["ch"])).then_some(())
    });
}

#[test]
fn one_consumer_receives_from_two_nsqds() {
    let l = Lookupd::start(&[]);
    let a = nsqd_for(&[&l], &[]);
    let b = nsqd_for(&[&l], &[]);
    a.http_pub("t", b"from-a");
    b.http_pub("t", b"from-b");
    let producers = discover_n(&[&l], "t", 2);
    let mut got = Vec::new();
    let mut conns: Vec<Conn> = producers
        .iter()
        .map(|p| {
            let mut c = Conn::connect(p);
            c.sub("t", "c");
            c.rdy(10);
            c
        })
        .collect();
    for c in conns.iter_mut() {
        got.extend(recv_msgs(c, 1, Duration::from_secs(5), true));
    }
    assert_eq!(
        bodies(&got),
        BTreeSet::from(["from-a".to_string(), "from-b".to_string()])
    );
}

#[test]
fn discovery_survives_one_of_two_lookupds_stopping() {
    let mut l1 = Lookupd::start(&[]);
    let l2 = Lookupd::start(&[]);
    let n = nsqd_for(&[&l1, &l2], &[]);
    n.http_pub("t", b"x");
    discover_n(&[&l1], "t", 1);
    discover_n(&[&l2], "t", 1);
    l1.stop();
    let d = discover(&[&l1, &l2], "t");
    assert_eq!(d, BTreeSet::from([n.tcp_addr.clone()]));
    // nsqd keeps working with its other lookupd: a new topic still registers
    n.http_pub("t2", b"y");
    discover_n(&[&l1, &l2], "t2", 1);
    n.assert_alive();
}

#[test]
fn tombstoned_producer_is_hidden_for_the_lifetime_and_new_channels_do_not_revive_it() {
    let l = Lookupd::start(&["--tombstone-lifetime=3s"]);
    let n = nsqd_for(&[&l], &[]);
    n.http_pub("t", b"x");
    discover_n(&[&l], "t", 1);
    let node = format!("127.0.0.1:{}", n.http_port);
    let r = http_request_timeout(
        &l.http,
        "POST",
        &format!("/topic/tombstone?topic=t&node={node}"),
        &[],
        None,
        Duration::from_secs(2),
    )
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let started = Instant::now();
    assert!(
        discover(&[&l], "t").is_empty(),
        "tombstoned producer still returned"
    );
    // a new channel on the nsqd sends REGISTER t c2: the producer stays hidden
    let r = n.post("/channel/create?topic=t&channel=c2", b"");
    assert_eq!(r.status, 200);
    wait_for(Duration::from_secs(2), "c2 registered", || {
        let v = http_request_timeout(
            &l.http,
            "GET",
            "/channels?topic=t",
            &[],
            None,
            Duration::from_secs(1),
        )
        .ok()?
        .json();
        v["channels"]
            .as_array()?
            .iter()
            .any(|c| c == "c2")
            .then_some(())
    });
    if started.elapsed() < Duration::from_secs(3) {
        assert!(
            discover(&[&l], "t").is_empty(),
            "REGISTER of a channel revived a tombstoned producer"
        );
    }
    // after the lifetime it is back (still registered)
    discover_n(&[&l], "t", 1);
    assert!(
        started.elapsed() >= Duration::from_millis(2900),
        "reappeared after {:?}",
        started.elapsed()
    );
}

#[test]
fn clean_stop_leaves_lookup_at_once() {
    let l = Lookupd::start(&[]);
    let mut n = nsqd_for(&[&l], &[]);
    n.http_pub("t", b"x");
    discover_n(&[&l], "t", 1);
    let st = n.sigterm_and_wait(Duration::from_secs(10));
    assert_eq!(st.code(), Some(0));
    discover_n(&[&l], "t", 0);
    // the topic itself stays known
    let r =
        http_request_timeout(&l.http, "GET", "/topics", &[], None, Duration::from_secs(2)).unwrap();
    assert_eq!(r.json()["topics"], serde_json::json!(["t"]));
}

#[test]
fn silent_nsqd_is_dropped_after_inactive_producer_timeout_and_killed_one_at_once() {
    let l = Lookupd::start(&["--inactive-producer-timeout=2s"]);
    let n = nsqd_for(&[&l], &[]);
    n.http_pub("t", b"x");
    discover_n(&[&l], "t", 1);
    // a frozen nsqd keeps its TCP connection but stops PINGing
    freeze(n.pid());
    let frozen = Instant::now();
    discover_n(&[&l], "t", 0);
    let waited = frozen.elapsed();
    send_signal(n.pid(), libc::SIGCONT);
    assert!(
        waited >= Duration::from_millis(1500),
        "dropped after only {waited:?}"
    );
    // SIGKILL: the kernel closes the connection and lookupd drops it
    let l2 = Lookupd::start(&[]);
    let mut m = nsqd_for(&[&l2], &[]);
    m.http_pub("t", b"x");
    discover_n(&[&l2], "t", 1);
    m.kill9();
    discover_n(&[&l2], "t", 0);
    drop(n);
}

#[test]
fn new_topic_gets_the_channels_lookupd_knows_before_its_first_message() {
    let l = Lookupd::start(&[]);
    let a = nsqd_for(&[&l], &[]);
    // channels c1, c2 exist for topic t on another node
    let r = a.post("/topic/create?topic=t", b"");
    assert_eq!(r.status, 200);
    for c in ["c1", "c2", "c3%23ephemeral"] {
        assert_eq!(
            a.post(&format!("/channel/create?topic=t&channel={c}"), b"")
                .status,
            200
        );
    }
    wait_for(Duration::from_secs(5), "channels registered", || {
        let v = http_request_timeout(
            &l.http,
            "GET",
            "/channels?topic=t",
            &[],
            None,
            Duration::from_secs(1),
        )
        .ok()?
        .json();
        (v["channels"].as_array()?.len() >= 3).then_some(())
    });
    // b learns the lookupd's HTTP address from the answer to its IDENTIFY;
    // a lookupd that never answers comes first, so b's first identify round
    // takes a second (its IDENTIFY read times out) and the publish below
    // makes t before b knows whom to ask. nsqd's topic waits for that round
    // (NSQ's would start with no channels and c1, c2 would miss "first").
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_addr = format!("--lookupd-tcp-address={}", silent.local_addr().unwrap());
    let b = nsqd_for(&[&l], &[silent_addr.as_str()]);
    b.http_pub("t", b"first");
    let chans = wait_for(Duration::from_secs(5), "pre-created channels on b", || {
        let ch = b.topic_stats("t")?["channels"]
            .as_array()?
            .iter()
            .map(|c| c["channel_name"].as_str().unwrap_or("").to_string())
            .collect::<BTreeSet<_>>();
        (ch.len() >= 2).then_some(ch)
    });
    assert_eq!(
        chans,
        BTreeSet::from(["c1".to_string(), "c2".to_string()]),
        "ephemeral channels are not pre-created"
    );
    for c in ["c1", "c2"] {
        let ch = b.channel_stats("t", c).unwrap();
        assert_eq!(int(&ch, "depth"), 1, "first message reached {c}");
    }
}

/// nsqlookupd's Prometheus `/metrics` (an nsq-rs addition) agrees with
/// `/nodes`, `/topics`, `/lookup` and `/channels`.
#[test]
fn lookupd_metrics_agree_with_its_json() {
    let l = Lookupd::start(&["--tombstone-lifetime=30s"]);
    let a = nsqd_for(&[&l], &[]);
    let b = nsqd_for(&[&l], &[]);
    a.http_pub("t", b"x");
    b.http_pub("t", b"x");
    a.http_pub("u", b"x");
    assert_eq!(
        a.post("/channel/create?topic=t&channel=c1", b"").status,
        200
    );
    discover_n(&[&l], "t", 2);
    discover_n(&[&l], "u", 1);
    // REGISTER of the channel reaches the lookupd asynchronously
    wait_for(Duration::from_secs(5), "c1 registered", || {
        let v = http_request_timeout(
            &l.http,
            "GET",
            "/channels?topic=t",
            &[],
            None,
            Duration::from_secs(1),
        )
        .ok()?
        .json();
        v["channels"]
            .as_array()?
            .iter()
            .any(|c| c == "c1")
            .then_some(())
    });
    let node = format!("127.0.0.1:{}", b.http_port);
    let r = http_request_timeout(
        &l.http,
        "POST",
        &format!("/topic/tombstone?topic=t&node={node}"),
        &[],
        None,
        Duration::from_secs(2),
    )
    .unwrap();
    assert_eq!(r.status, 200);
    let m = http_request_timeout(
        &l.http,
        "GET",
        "/metrics",
        &[],
        None,
        Duration::from_secs(2),
    )
    .unwrap();
    assert_eq!(m.status, 200);
    assert!(
        m.header("Content-Type")
            .unwrap_or("")
            .starts_with("text/plain; version=0.0.4"),
        "{:?}",
        m.headers
    );
    let text = m.text();
    let value = |series: &str| -> f64 {
        text.lines()
            .find(|l| !l.starts_with('#') && l.rsplit_once(' ').map(|(k, _)| k) == Some(series))
            .and_then(|l| l.rsplit_once(' ')?.1.parse().ok())
            .unwrap_or_else(|| panic!("no series {series} in\n{text}"))
    };
    for l in text.lines().filter(|l| !l.is_empty()) {
        assert!(
            l.starts_with("# HELP ") || l.starts_with("# TYPE ") || l.starts_with("nsqlookupd_"),
            "not Prometheus text: {l}"
        );
    }
    assert_eq!(value("nsqlookupd_up"), 1.0);
    assert_eq!(value("nsqlookupd_producers"), 2.0);
    assert_eq!(value("nsqlookupd_topics"), 2.0);
    assert_eq!(
        value("nsqlookupd_topic_producers{topic=\"t\"}"),
        discover(&[&l], "t").len() as f64
    );
    assert_eq!(
        value("nsqlookupd_topic_producers{topic=\"t\"}"),
        1.0,
        "the tombstoned one is not counted"
    );
    assert_eq!(
        value("nsqlookupd_topic_tombstoned_producers{topic=\"t\"}"),
        1.0
    );
    assert_eq!(value("nsqlookupd_topic_producers{topic=\"u\"}"), 1.0);
    assert_eq!(value("nsqlookupd_topic_channels{topic=\"t\"}"), 1.0);
}

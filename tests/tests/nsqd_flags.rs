//! nsqd command line, config file, statsd and E2E latency, black-box
//! (nsqd.md §5.1, §7.6 E2E object, §7.7, §9, §10, §11; flags/nsqd.md).

#![forbid(unsafe_code)]

use nsq_tests::*;
use std::fs;
use std::net::UdpSocket;
use std::time::{Duration, Instant};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn cfg(n: &Nsqd, opt: &str) -> String {
    let r = n.get(&format!("/config/{opt}"));
    assert_eq!(r.status, 200, "GET /config/{opt}: {}", r.text());
    r.text()
}

#[test]
fn version_flag() {
    let out = run_bin("nsqd", &["--version"], secs(10));
    let st = out.status.expect("--version exits");
    assert_eq!(st.code(), Some(0), "{out:?}");
    assert!(
        out.stdout.starts_with("nsqd v1.3.0 (built w/"),
        "stdout {:?}",
        out.stdout
    );
}

#[test]
fn go_style_flag_syntax_single_dash_and_separate_values() {
    let dir = tempfile::tempdir().unwrap();
    let n = Nsqd::start_with(dir.path(), |p| {
        vec![
            "-tcp-address".into(),
            p.tcp.clone(),
            format!("-http-address={}", p.http),
            "--data-path".into(),
            p.data_path.display().to_string(),
            "-max-rdy-count".into(),
            "42".into(),
            "-snappy=false".into(),
            "-deflate".into(), // bare boolean
            "-msg-timeout=1m30s".into(),
        ]
    });
    assert_eq!(cfg(&n, "max_rdy_count"), "42");
    assert_eq!(cfg(&n, "msg_timeout"), "90000000000");
    let mut c = n.connect();
    let f = c.identify(r#"{"feature_negotiation":true,"snappy":true}"#);
    let v: Value = serde_json::from_slice(&f.data).unwrap();
    assert_eq!(v["snappy"], false, "--snappy=false must refuse snappy: {v}");
    assert_eq!(v["max_rdy_count"], 42);
    assert_eq!(v["msg_timeout"], 90000);
}

#[test]
fn repeatable_lookupd_flag_accumulates() {
    let a = FakePeer::start();
    let b = FakePeer::start();
    let n = Nsqd::start(&[
        &format!("--lookupd-tcp-address={}", a.addr),
        &format!("--lookupd-tcp-address={}", b.addr),
    ]);
    let v: Value = serde_json::from_str(&cfg(&n, "nsqlookupd_tcp_addresses")).unwrap();
    assert_eq!(v, serde_json::json!([a.addr, b.addr]));
}

#[test]
fn duration_flags_and_config_values() {
    let n = Nsqd::start(&[
        "--max-req-timeout=1h30m",
        "--sync-timeout=250ms",
        "--mem-queue-size=7",
        "--max-msg-size=2048",
    ]);
    assert_eq!(cfg(&n, "max_req_timeout"), "5400000000000");
    assert_eq!(cfg(&n, "sync_timeout"), "250000000");
    assert_eq!(cfg(&n, "mem_queue_size"), "7");
    assert_eq!(cfg(&n, "max_msg_size"), "2048");
    let mut c = n.connect();
    c.cmd("DPUB t 5400001");
    c.expect_error_fatal("E_INVALID DPUB timeout 5400001 out of range 0-5400000");
}

#[test]
fn config_file_toml_and_flag_precedence() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("nsqd.cfg");
    fs::write(
        &conf,
        "mem_queue_size = 5\nmsg_timeout = \"2s\"\nmax_req_timeout = 5000\nmax_rdy_count = 100\nlog_level = \"warn\"\n",
    )
    .unwrap();
    let data = tempfile::tempdir().unwrap();
    let conf_arg = format!("--config={}", conf.display());
    let n = Nsqd::start_in(data.path(), &[&conf_arg, "--max-rdy-count=200"]);
    assert_eq!(cfg(&n, "mem_queue_size"), "5");
    assert_eq!(cfg(&n, "msg_timeout"), "2000000000");
    assert_eq!(
        cfg(&n, "max_req_timeout"),
        "5000000000",
        "integer durations in the config file are milliseconds"
    );
    assert_eq!(
        cfg(&n, "max_rdy_count"),
        "200",
        "command-line flag beats config file"
    );
    assert_eq!(cfg(&n, "log_level"), "3");
}

fn expect_fatal_start(args: &[&str], needle: &str) {
    let out = run_nsqd_once(args, secs(10));
    let st = out
        .status
        .unwrap_or_else(|| panic!("nsqd {args:?} must exit (fatal config error), it kept running"));
    assert_eq!(
        st.code(),
        Some(1),
        "exit status for {args:?}; stderr:\n{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("FATAL: ") && out.stderr.contains(needle),
        "stderr for {args:?} must contain FATAL and {needle:?}:\n{}",
        out.stderr
    );
}

#[test]
fn a_taken_port_is_fatal_in_gos_words() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let out = run_bin(
        "nsqd",
        &[
            &format!("--tcp-address={addr}"),
            &format!("--http-address=127.0.0.1:{}", free_port()),
            &format!("--data-path={}", dir.path().display()),
        ],
        secs(10),
    );
    assert_eq!(out.status.and_then(|s| s.code()), Some(1), "{out:?}");
    let want = format!(
        "FATAL: failed to instantiate nsqd - listen ({addr}) failed - listen tcp {addr}: bind: address already in use"
    );
    assert!(out.stderr.contains(&want), "{}", out.stderr);
}

#[test]
fn invalid_options_are_fatal() {
    expect_fatal_start(
        &["--max-deflate-level=10"],
        "--max-deflate-level must be [1,9]",
    );
    expect_fatal_start(&["--node-id=1024"], "--node-id must be [0,1024)");
    expect_fatal_start(
        &["--auth-http-request-method=put"],
        "--auth-http-request-method must be post or get",
    );
    expect_fatal_start(
        &["--e2e-processing-latency-percentile=1.5"],
        "invalid E2E processing latency percentile: 1.5",
    );
}

// ---------------------------------------------------------------------------
// E2E processing latency (stats structure)
// ---------------------------------------------------------------------------

#[test]
fn e2e_percentiles_in_stats_descending() {
    let n = Nsqd::start(&[
        "--e2e-processing-latency-percentile=0.5,0.99",
        "--e2e-processing-latency-percentile=0.95",
    ]);
    let v: Value = serde_json::from_str(&cfg(&n, "e2e_processing_latency_percentiles")).unwrap();
    assert_eq!(
        v,
        serde_json::json!([0.99, 0.95, 0.5]),
        "stored sorted descending"
    );
    let mut c = n.connect();
    c.sub("t", "c");
    c.rdy(10);
    let mut p = n.connect();
    for i in 0..5 {
        p.publish("t", format!("e{i}").as_bytes());
    }
    recv_msgs(&mut c, 5, secs(5), true);
    let body = wait_for(secs(5), "e2e count >= 5", || {
        let b = n.get("/stats?format=json").text();
        let v: Value = serde_json::from_str(&b).ok()?;
        let ch = find_channel(&v, "t", "c")?;
        (ch["e2e_processing_latency"]["count"].as_i64()? >= 5).then_some(b)
    });
    let v: Value = serde_json::from_str(&body).unwrap();
    for obj in [
        &find_channel(&v, "t", "c").unwrap()["e2e_processing_latency"],
        &find_topic(&v, "t").unwrap()["e2e_processing_latency"],
    ] {
        let ps = obj["percentiles"]
            .as_array()
            .unwrap_or_else(|| panic!("percentiles array: {obj}"));
        let qs: Vec<f64> = ps.iter().map(|p| p["quantile"].as_f64().unwrap()).collect();
        assert_eq!(qs, vec![0.99, 0.95, 0.5], "{obj}");
        for p in ps {
            assert!(
                p["value"].as_f64().map(|x| x >= 0.0).unwrap_or(false),
                "{p}"
            );
        }
    }
    // key order inside the objects
    let j = ojson::parse(&body).unwrap();
    let ch_e2e = match j.get("topics") {
        Some(ojson::J::Arr(ts)) => ts[0].get("channels").and_then(|c| match c {
            ojson::J::Arr(cs) => cs[0].get("e2e_processing_latency").cloned(),
            _ => None,
        }),
        _ => None,
    }
    .expect("channel e2e object");
    assert_eq!(ch_e2e.keys(), ["count", "percentiles"]);
    match ch_e2e.get("percentiles") {
        Some(ojson::J::Arr(ps)) => assert_eq!(ps[0].keys(), ["quantile", "value"]),
        other => panic!("{other:?}"),
    }
}

// ---------------------------------------------------------------------------
// statsd
// ---------------------------------------------------------------------------

fn collect_statsd(
    sock: &UdpSocket,
    dur: Duration,
    until: impl Fn(&[String]) -> bool,
) -> (Vec<String>, Vec<Vec<u8>>) {
    let deadline = Instant::now() + dur;
    let mut lines = Vec::new();
    let mut grams = Vec::new();
    let mut buf = [0u8; 65536];
    while Instant::now() < deadline && !until(&lines) {
        sock.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        if let Ok(n) = sock.recv(&mut buf) {
            grams.push(buf[..n].to_vec());
            for l in String::from_utf8_lossy(&buf[..n]).split('\n') {
                if !l.is_empty() {
                    lines.push(l.to_string());
                }
            }
        }
    }
    (lines, grams)
}

#[test]
fn statsd_metrics_with_explicit_prefix() {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = sock.local_addr().unwrap().to_string();
    let n = Nsqd::start(&[
        &format!("--statsd-address={addr}"),
        "--statsd-interval=2s",
        "--statsd-prefix=nsqtest",
        "--statsd-mem-stats=false",
    ]);
    let r = n.post("/topic/create?topic=t", b"");
    assert_eq!(r.status, 200);
    assert_eq!(n.post("/channel/create?topic=t&channel=c", b"").status, 200);
    for _ in 0..3 {
        n.http_pub("t", b"abcd");
    }
    let want = [
        "nsqtest.topic.t.message_count:3|c",
        "nsqtest.topic.t.message_bytes:12|c",
        "nsqtest.topic.t.channel.c.message_count:3|c",
        "nsqtest.topic.t.channel.c.depth:3|g",
        "nsqtest.topic.t.channel.c.clients:0|g",
    ];
    let (lines, grams) = collect_statsd(&sock, secs(10), |ls| {
        want.iter().all(|w| ls.iter().any(|l| l == w))
    });
    for w in want {
        assert!(
            lines.iter().any(|l| l == w),
            "missing statsd line {w:?}; got {lines:?}"
        );
    }
    for name in [
        "topic.t.depth",
        "topic.t.backend_depth",
        "topic.t.channel.c.backend_depth",
        "topic.t.channel.c.in_flight_count",
        "topic.t.channel.c.deferred_count",
    ] {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&format!("nsqtest.{name}:")) && l.ends_with("|g")),
            "missing gauge {name}; got {lines:?}"
        );
    }
    for name in [
        "topic.t.channel.c.requeue_count",
        "topic.t.channel.c.timeout_count",
    ] {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&format!("nsqtest.{name}:")) && l.ends_with("|c")),
            "missing counter {name}; got {lines:?}"
        );
    }
    assert!(
        !lines.iter().any(|l| l.contains(".mem.")),
        "--statsd-mem-stats=false: {lines:?}"
    );
    for g in &grams {
        assert!(
            g.len() <= 508,
            "datagram larger than --statsd-udp-packet-size: {}",
            g.len()
        );
        assert!(
            g.ends_with(b"\n"),
            "lines are never split across datagrams: {:?}",
            String::from_utf8_lossy(g)
        );
    }
    // counters are deltas: the next round reports 0 new messages
    let (lines2, _) = collect_statsd(&sock, secs(6), |ls| {
        ls.iter()
            .any(|l| l.starts_with("nsqtest.topic.t.message_count:"))
    });
    let mc: Vec<&String> = lines2
        .iter()
        .filter(|l| l.starts_with("nsqtest.topic.t.message_count:"))
        .collect();
    assert!(!mc.is_empty(), "no second round within 6 s");
    assert!(
        mc.iter()
            .all(|l| l.as_str() == "nsqtest.topic.t.message_count:0|c"),
        "delta counters: {mc:?}"
    );
    // GET /config/statsd_prefix returns the processed value (nsqd.md §7.7)
    assert_eq!(
        cfg(&n, "statsd_prefix"),
        "nsqtest.",
        "trailing dot appended"
    );
}

#[test]
fn statsd_default_prefix_and_one_second_interval_does_not_crash() {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = sock.local_addr().unwrap().to_string();
    let mut n = Nsqd::start(&[
        &format!("--statsd-address={addr}"),
        "--statsd-interval=1s",
        "--broadcast-address=127.0.0.1",
    ]);
    let prefix = format!("nsq.127_0_0_1_{}.", n.http_port);
    n.http_pub("t", b"x");
    let (lines, _) = collect_statsd(&sock, secs(6), |ls| {
        ls.iter()
            .any(|l| l.starts_with(&format!("{prefix}topic.t.message_count:")))
    });
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&format!("{prefix}topic.t.message_count:"))),
        "no topic metric with default prefix {prefix:?}: {lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&format!("{prefix}mem."))),
        "mem stats on by default: {lines:?}"
    );
    sleep_ms(1500);
    assert!(
        n.is_running(),
        "nsqd must survive --statsd-interval=1s\nstderr:\n{}",
        n.stderr()
    );
    n.assert_alive();
    assert_eq!(
        cfg(&n, "statsd_prefix"),
        prefix,
        "GET /config/statsd_prefix returns the processed value"
    );
}

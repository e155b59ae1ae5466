//! nsqadmin, black-box, against a live cluster started from the built
//! binaries (`nsqlookupd`, two `nsqd`, `nsqadmin`): every route of its API,
//! the admin actions taking effect on nsqd/nsqlookupd, admin users,
//! notifications, `/config`, partial and total upstream failures, and
//! nsq-rs's `/api/history`.
//! Spec: /work/shared/spec/nsqadmin.md, checklist items 121–130.

#![forbid(unsafe_code)]

#[path = "../src/admin_util.rs"]
mod admin_util;

use admin_util::*;
use nsq_tests::*;
use std::time::Duration;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn oj(r: &HttpResponse) -> ojson::J {
    ojson::parse(&r.text()).unwrap_or_else(|e| panic!("not JSON ({e}): {}", r.text()))
}

fn assert_v1_json(r: &HttpResponse) {
    assert_eq!(
        r.header("Content-Type"),
        Some("application/json; charset=utf-8"),
        "{:?}",
        r.headers
    );
    assert_eq!(
        r.header("X-NSQ-Content-Type"),
        Some("nsq; version=1.0"),
        "{:?}",
        r.headers
    );
}

/// Publishes `n` messages to `topic` on nsqd `i` over HTTP.
fn publish(c: &Cluster, i: usize, topic: &str, n: usize) {
    for k in 0..n {
        c.nsqds[i].http_pub(topic, format!("msg {k}").as_bytes());
    }
}

/// A topic on both nsqds with channel `ch` created on each, `n` messages per node.
fn seed(c: &Cluster, topic: &str, ch: &str, n: usize) {
    for i in 0..2 {
        let r = c.nsqds[i].post(&format!("/topic/create?topic={topic}"), b"");
        assert_eq!(r.status, 200, "{}", r.text());
        let r = c.nsqds[i].post(&format!("/channel/create?topic={topic}&channel={ch}"), b"");
        assert_eq!(r.status, 200, "{}", r.text());
        publish(c, i, topic, n);
    }
    c.wait_producers(topic, 2);
    c.wait_channel_producers(topic, ch, 2);
}

fn nsqd_channel(n: &Nsqd, topic: &str, ch: &str) -> Value {
    n.channel_stats(topic, ch)
        .unwrap_or_else(|| panic!("channel {topic}/{ch} missing on nsqd {}", n.http_addr))
}

// ---------------------------------------------------------------------------
// 121: /ping, the page, static assets
// ---------------------------------------------------------------------------

#[test]
fn item121_ping_index_and_assets() {
    let c = Cluster::start(&[]);
    let r = c.admin.get("/ping");
    assert_eq!((r.status, r.text().as_str()), (200, "OK"));
    assert_eq!(r.header("X-NSQ-Content-Type"), None);
    for path in [
        "/",
        "/topics",
        "/topics/t",
        "/topics/t/c",
        "/nodes",
        "/nodes/127.0.0.1:4151",
        "/counter",
        "/lookup",
    ] {
        let r = c.admin.get(path);
        assert_eq!(r.status, 200, "GET {path}");
        assert_eq!(r.header("Content-Type"), Some("text/html"), "GET {path}");
        let html = r.text();
        assert!(
            html.contains(&format!("\"NSQLOOKUPD\":[\"{}\"]", c.lookupd.http_addr)),
            "{html}"
        );
        assert!(
            html.contains("\"IS_ADMIN\":true")
                && html.contains("\"BASE_PATH\":\"/\"")
                && html.contains("\"VERSION\":\"1.3.0\""),
            "{html}"
        );
        assert!(
            html.contains("/static/main.js") && html.contains("/static/base.css"),
            "{html}"
        );
    }
    let r = c.admin.get("/static/main.js");
    assert_eq!(
        (r.status, r.header("Content-Type")),
        (200, Some("text/javascript; charset=utf-8"))
    );
    assert!(r.text().contains("/api/topics"));
    let r = c.admin.get("/static/base.css");
    assert_eq!(
        (r.status, r.header("Content-Type")),
        (200, Some("text/css; charset=utf-8"))
    );
    let r = c.admin.get("/static/nope.js");
    assert_eq!((r.status, r.text().as_str()), (404, "NOT_FOUND"));
    // router conventions
    c.admin.get("/api/nope").assert_error(404, "NOT_FOUND");
    let r = c.admin.req("PUT", "/api/topics", &[], Some(b"x"));
    r.assert_error(405, "METHOD_NOT_ALLOWED");
    // httprouter v1.3.0 (nsqadmin's router) sorts the methods of `Allow`.
    assert_eq!(r.header("Allow"), Some("GET, OPTIONS, POST"));
    let r = c.admin.get("/topics/");
    assert_eq!((r.status, r.header("Location")), (301, Some("/topics")));
    // compression when asked for
    let r = c
        .admin
        .req("GET", "/api/topics", &[("Accept-Encoding", "gzip")], None);
    assert_eq!(
        (r.status, r.header("Content-Encoding"), r.header("Vary")),
        (200, Some("gzip"), Some("Accept-Encoding"))
    );
    assert_eq!(&r.body[..2], &[0x1f, 0x8b], "gzip magic");
}

#[test]
fn base_path_prefixes_every_route() {
    let lookupd = start_lookupd();
    let admin = start_admin(&[
        &format!("--lookupd-http-address={}", lookupd.http_addr),
        "--base-path=admin/",
    ]);
    let r = admin.get("/admin/ping");
    assert_eq!((r.status, r.text().as_str()), (200, "OK"));
    let r = admin.get("/admin/api/topics");
    assert_eq!(
        (r.status, r.text().as_str()),
        (200, r#"{"topics":null,"message":""}"#)
    );
    assert!(admin
        .get("/admin/topics")
        .text()
        .contains("\"BASE_PATH\":\"/admin\""));
    assert!(admin.get("/admin").text().contains("/admin/static/main.js"));
    assert_eq!(admin.get("/api/topics").status, 404);
}

#[test]
fn startup_checks_and_version() {
    let out = run_bin("nsqadmin", &["--http-address=127.0.0.1:0"], secs(10));
    assert_eq!(out.status.and_then(|s| s.code()), Some(1), "{out:?}");
    assert!(
        out.stderr
            .contains("FATAL: failed to instantiate nsqadmin - --nsqd-http-address or --lookupd-http-address required"),
        "{}",
        out.stderr
    );
    let out = run_bin(
        "nsqadmin",
        &[
            "--http-address=127.0.0.1:0",
            "--nsqd-http-address=127.0.0.1:1",
            "--lookupd-http-address=127.0.0.1:2",
        ],
        secs(10),
    );
    assert!(
        out.stderr
            .contains("use --nsqd-http-address or --lookupd-http-address not both"),
        "{}",
        out.stderr
    );
    let out = run_bin(
        "nsqadmin",
        &[
            "--http-address=127.0.0.1:0",
            "--nsqd-http-address=127.0.0.1:1",
            "--allow-config-from-cidr=x",
        ],
        secs(10),
    );
    assert!(
        out.stderr
            .contains("failed to parse --allow-config-from-cidr (x) - "),
        "{}",
        out.stderr
    );
    let out = run_bin("nsqadmin", &["--version"], secs(10));
    assert!(
        out.stdout.starts_with("nsqadmin v1.3.0 (built w/"),
        "{out:?}"
    );
}

// ---------------------------------------------------------------------------
// 122, topics, topic, channel, nodes, node, counter (lookupd mode)
// ---------------------------------------------------------------------------

#[test]
fn item122_topics_lists_lookupd_topics() {
    let c = Cluster::start(&[]);
    let r = c.admin.get("/api/topics");
    assert_eq!(
        (r.status, r.text().as_str()),
        (200, r#"{"topics":null,"message":""}"#)
    );
    assert_v1_json(&r);
    publish(&c, 0, "t", 1);
    publish(&c, 1, "a", 1);
    c.wait_producers("t", 1);
    c.wait_producers("a", 1);
    let r = c.admin.get("/api/topics");
    assert_eq!(
        (r.status, r.text().as_str()),
        (200, r#"{"topics":["a","t"],"message":""}"#)
    );
}

#[test]
fn topic_stats_aggregate_both_nsqds() {
    let c = Cluster::start(&[]);
    seed(&c, "orders", "archive", 3);
    publish(&c, 1, "orders", 2); // node 1: 5 messages
    let r = c.admin.get("/api/topics/orders");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_v1_json(&r);
    let j = oj(&r);
    assert_keys(&j, &with_message(TOPIC_KEYS), "topic");
    let v = r.json();
    assert_eq!(
        (
            v["node"].as_str(),
            v["hostname"].as_str(),
            v["message"].as_str()
        ),
        (Some("*"), Some(""), Some(""))
    );
    assert_eq!(
        (v["message_count"].as_i64(), v["depth"].as_i64()),
        (Some(8), Some(0))
    );
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    let mut names: Vec<String> = nodes
        .iter()
        .map(|n| n["node"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    let mut want = vec![c.node(0), c.node(1)];
    want.sort();
    assert_eq!(names, want);
    for (i, n) in nodes.iter().enumerate() {
        assert_keys(
            j.get("nodes")
                .map(|a| {
                    if let ojson::J::Arr(a) = a {
                        &a[i]
                    } else {
                        unreachable!()
                    }
                })
                .unwrap(),
            TOPIC_KEYS,
            "per-node topic",
        );
        let idx = if n["node"] == c.node(0) { 0 } else { 1 };
        let s = c.nsqds[idx].topic_stats("orders").unwrap();
        assert_eq!(n["message_count"], s["message_count"]);
        assert_eq!(n["depth"], s["depth"]);
        assert!(n["nodes"].is_null());
        assert_eq!(
            n["e2e_processing_latency"],
            serde_json::json!({"count":0,"percentiles":null,"topic":"","channel":"","host":""})
        );
    }
    let ch = &v["channels"][0];
    assert_eq!(
        (
            ch["channel_name"].as_str(),
            ch["node"].as_str(),
            ch["depth"].as_i64(),
            ch["message_count"].as_i64()
        ),
        (Some("archive"), Some("*"), Some(8), Some(8))
    );
    assert_eq!(ch["nodes"].as_array().unwrap().len(), 2);
    assert!(
        ch["clients"].is_null(),
        "topic stats are fetched without clients"
    );
    assert_eq!(
        v["e2e_processing_latency"],
        serde_json::json!({"count":0,"percentiles":null,"topic":"orders","channel":"","host":"*"})
    );
}

#[test]
fn channel_stats_with_clients() {
    let c = Cluster::start(&[]);
    seed(&c, "orders", "live", 2);
    let mut conn = c.nsqds[0].connect();
    conn.identify(r#"{"client_id":"worker-1","hostname":"consumer-host","user_agent":"probe/1.0","feature_negotiation":true}"#);
    conn.sub("orders", "live");
    conn.rdy(1);
    let m = conn.read_frame(); // one in flight
    assert_eq!(m.ftype, FRAME_MESSAGE);
    wait_for(secs(5), "client visible in nsqd stats", || {
        (nsqd_channel(&c.nsqds[0], "orders", "live")["in_flight_count"] == 1).then_some(())
    });
    let r = c.admin.get("/api/topics/orders/live");
    assert_eq!(r.status, 200, "{}", r.text());
    let j = oj(&r);
    assert_keys(&j, &with_message(CHANNEL_KEYS), "channel");
    let v = r.json();
    assert_eq!(
        (
            v["node"].as_str(),
            v["depth"].as_i64(),
            v["in_flight_count"].as_i64(),
            v["client_count"].as_i64(),
            v["message_count"].as_i64()
        ),
        (Some("*"), Some(3), Some(1), Some(1), Some(4))
    );
    assert_eq!(v["e2e_processing_latency"]["host"], "*");
    assert_eq!(v["e2e_processing_latency"]["channel"], "live");
    let clients = v["clients"].as_array().unwrap();
    assert_eq!(clients.len(), 1);
    if let Some(ojson::J::Arr(cl)) = j.get("clients") {
        assert_keys(&cl[0], CLIENT_KEYS, "client");
    }
    let cl = &clients[0];
    assert_eq!(
        (
            cl["node"].as_str(),
            cl["client_id"].as_str(),
            cl["hostname"].as_str(),
            cl["user_agent"].as_str()
        ),
        (
            Some(c.node(0).as_str()),
            Some("worker-1"),
            Some("consumer-host"),
            Some("probe/1.0")
        )
    );
    assert_eq!(
        (
            cl["in_flight_count"].as_i64(),
            cl["ready_count"].as_i64(),
            cl["version"].as_str()
        ),
        (Some(1), Some(1), Some("V2"))
    );
    let connected = cl["connected"].as_i64().unwrap();
    assert!(
        connected >= 0 && connected % 1_000_000_000 == 0,
        "connected is whole seconds in ns: {connected}"
    );
    // per-node entries carry their own clients
    for n in v["nodes"].as_array().unwrap() {
        let want = if n["node"] == c.node(0) { 1 } else { 0 };
        assert_eq!(n["clients"].as_array().map(|a| a.len()), Some(want), "{n}");
    }
    // an unknown channel: nsqadmin 1.3.0 answers 500
    c.admin
        .get("/api/topics/orders/nope")
        .assert_error(500, "INTERNAL_ERROR");
}

#[test]
fn unknown_topic_and_topic_without_producers_are_upstream_errors() {
    let c = Cluster::start(&[]);
    let r = c.admin.get("/api/topics/none");
    assert_eq!(
        (r.status, r.text()),
        (
            502,
            r#"{"message":"UPSTREAM_ERROR: failed to query any nsqlookupd: got response 404 Not Found \"{\\\"message\\\":\\\"TOPIC_NOT_FOUND\\\"}\""}"#
                .to_string()
        )
    );
    let r = c.admin.post_json("/api/topics", r#"{"topic":"empty"}"#);
    assert_eq!((r.status, r.text().as_str()), (200, r#"{"message":""}"#));
    c.admin
        .get("/api/topics/empty")
        .assert_error(502, "UPSTREAM_ERROR: failed to query any nsqd: ");
}

#[test]
fn nodes_and_node() {
    let c = Cluster::start(&[]);
    seed(&c, "orders", "archive", 2);
    publish(&c, 0, "clicks", 3);
    c.wait_producers("clicks", 1);
    let r = c.admin.get("/api/nodes");
    assert_eq!(r.status, 200, "{}", r.text());
    let j = oj(&r);
    assert_eq!(j.keys(), vec!["nodes", "message"]);
    if let Some(ojson::J::Arr(ns)) = j.get("nodes") {
        for n in ns {
            assert_keys(n, PRODUCER_KEYS, "producer");
        }
    }
    let v = r.json();
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    let n0 = nodes
        .iter()
        .find(|n| n["http_port"] == c.nsqds[0].http_port)
        .unwrap();
    assert_eq!(
        (
            n0["broadcast_address"].as_str(),
            n0["tcp_port"].as_u64(),
            n0["version"].as_str(),
            n0["out_of_date"].as_bool()
        ),
        (
            Some("127.0.0.1"),
            Some(c.nsqds[0].tcp_port as u64),
            Some("1.3.0"),
            Some(false)
        )
    );
    let ra = n0["remote_addresses"].as_array().unwrap();
    assert_eq!(ra.len(), 1);
    assert_eq!(
        ra[0].as_str().unwrap(),
        format!(
            "{}/{}",
            c.lookupd.http_addr,
            n0["remote_address"].as_str().unwrap()
        )
    );
    assert_eq!(
        n0["topics"],
        serde_json::json!([{"topic":"clicks","tombstoned":false},{"topic":"orders","tombstoned":false}])
    );

    let r = c.admin.get(&format!("/api/nodes/{}", c.node(0)));
    assert_eq!(r.status, 200, "{}", r.text());
    let j = oj(&r);
    assert_eq!(
        j.keys(),
        vec![
            "node",
            "topics",
            "total_messages",
            "total_clients",
            "message"
        ]
    );
    let v = r.json();
    assert_eq!(
        (
            v["node"].as_str(),
            v["total_messages"].as_i64(),
            v["total_clients"].as_i64()
        ),
        (Some(c.node(0).as_str()), Some(5), Some(0))
    );
    let topics = v["topics"].as_array().unwrap();
    assert_eq!(
        topics
            .iter()
            .map(|t| t["topic_name"].as_str().unwrap())
            .collect::<Vec<_>>(),
        vec!["clicks", "orders"]
    );
    assert_eq!(topics[1]["channels"][0]["clients"], serde_json::json!([]));
    assert_eq!(topics[1]["node"].as_str(), Some(c.node(0).as_str()));
    // 128
    c.admin
        .get("/api/nodes/unknown:1")
        .assert_error(404, "NODE_NOT_FOUND");
}

#[test]
fn counter_has_one_entry_per_channel_per_node() {
    let c = Cluster::start(&[]);
    seed(&c, "orders", "archive", 2);
    publish(&c, 1, "orders", 1);
    let r = c.admin.get("/api/counter");
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let stats = v["stats"].as_object().unwrap();
    assert_eq!(stats.len(), 2);
    for i in 0..2 {
        let key = format!("orders:archive:{}", c.node(i));
        let e = &stats[&key];
        assert_eq!(
            e,
            &serde_json::json!({"node": c.node(i), "topic_name": "orders", "channel_name": "archive", "message_count": if i == 0 { 2 } else { 3 }})
        );
        assert_eq!(
            e["message_count"],
            nsqd_channel(&c.nsqds[i], "orders", "archive")["message_count"]
        );
    }
    assert_eq!(v["message"], "");
}

// ---------------------------------------------------------------------------
// 123–127: actions, admin users, notifications
// ---------------------------------------------------------------------------

#[test]
fn item123_pause_unpause_empty_take_effect_on_nsqd() {
    let c = Cluster::start(&[]);
    seed(&c, "orders", "archive", 2);
    let r = c
        .admin
        .post_json("/api/topics/orders", r#"{"action":"pause"}"#);
    assert_eq!((r.status, r.text().as_str()), (200, r#"{"message":""}"#));
    assert_v1_json(&r);
    for n in &c.nsqds {
        assert_eq!(
            n.topic_stats("orders").unwrap()["paused"],
            true,
            "topic paused on {}",
            n.http_addr
        );
    }
    assert_eq!(c.admin.get("/api/topics/orders").json()["paused"], true);
    let r = c
        .admin
        .post_json("/api/topics/orders", r#"{"action":"unpause"}"#);
    assert_eq!(r.status, 200, "{}", r.text());
    for n in &c.nsqds {
        assert_eq!(n.topic_stats("orders").unwrap()["paused"], false);
    }
    let r = c
        .admin
        .post_json("/api/topics/orders/archive", r#"{"action":"pause"}"#);
    assert_eq!((r.status, r.text().as_str()), (200, r#"{"message":""}"#));
    for n in &c.nsqds {
        assert_eq!(nsqd_channel(n, "orders", "archive")["paused"], true);
    }
    assert_eq!(
        c.admin.get("/api/topics/orders/archive").json()["paused"],
        true
    );
    let r = c
        .admin
        .post_json("/api/topics/orders/archive", r#"{"action":"empty"}"#);
    assert_eq!(r.status, 200, "{}", r.text());
    for n in &c.nsqds {
        assert_eq!(nsqd_channel(n, "orders", "archive")["depth"], 0);
    }
    publish(&c, 0, "orders", 1);
    let r = c
        .admin
        .post_json("/api/topics/orders/archive", r#"{"action":"unpause"}"#);
    assert_eq!(r.status, 200);
    assert_eq!(
        nsqd_channel(&c.nsqds[0], "orders", "archive")["paused"],
        false
    );
    let r = c
        .admin
        .post_json("/api/topics/orders", r#"{"action":"empty"}"#);
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn item124_bad_action_bodies() {
    let c = Cluster::start(&[]);
    seed(&c, "orders", "archive", 1);
    c.admin
        .post_json("/api/topics/orders", r#"{"action":"bogus"}"#)
        .assert_error(400, "INVALID_ACTION");
    c.admin
        .post_json("/api/topics/orders/archive", r#"{"action":"bogus"}"#)
        .assert_error(400, "INVALID_ACTION");
    c.admin
        .post_json("/api/topics/orders", "")
        .assert_error(400, "EOF");
    c.admin
        .post_json("/api/topics/orders", r#"{"action":"pa"#)
        .assert_error(400, "unexpected EOF");
    c.admin
        .post_json("/api/topics", r#"{"topic":"bad!"}"#)
        .assert_error(400, "INVALID_TOPIC");
    c.admin
        .post_json("/api/topics", r#"{"topic":"ok","channel":"bad!"}"#)
        .assert_error(400, "INVALID_CHANNEL");
    c.admin
        .post_json("/api/topics", "")
        .assert_error(400, "EOF");
    c.admin
        .delete(&format!("/api/nodes/{}", c.node(0)), Some("nope"))
        .assert_error(400, "INVALID_BODY");
    c.admin
        .delete(
            &format!("/api/nodes/{}", c.node(0)),
            Some(r#"{"topic":"bad!"}"#),
        )
        .assert_error(400, "INVALID_TOPIC");
}

#[test]
fn item125_admin_users() {
    let c = Cluster::start(&["--admin-user=alice", "--admin-user=bob"]);
    seed(&c, "orders", "archive", 1);
    let forbidden: Vec<(&str, String, Option<&str>)> = vec![
        ("POST", "/api/topics".into(), Some(r#"{"topic":"x"}"#)),
        (
            "POST",
            "/api/topics/orders".into(),
            Some(r#"{"action":"pause"}"#),
        ),
        (
            "POST",
            "/api/topics/orders/archive".into(),
            Some(r#"{"action":"pause"}"#),
        ),
        ("DELETE", "/api/topics/orders".into(), None),
        ("DELETE", "/api/topics/orders/archive".into(), None),
        (
            "DELETE",
            format!("/api/nodes/{}", c.node(0)),
            Some(r#"{"topic":"orders"}"#),
        ),
    ];
    for (m, p, b) in &forbidden {
        c.admin
            .req(m, p, &[], b.map(str::as_bytes))
            .assert_error(403, "FORBIDDEN");
        c.admin
            .req(
                m,
                p,
                &[("X-Forwarded-User", "mallory")],
                b.map(str::as_bytes),
            )
            .assert_error(403, "FORBIDDEN");
    }
    assert_eq!(
        nsqd_channel(&c.nsqds[0], "orders", "archive")["paused"],
        false,
        "nothing happened"
    );
    assert!(c.admin.get("/").text().contains("\"IS_ADMIN\":false"));
    let r = c
        .admin
        .req("GET", "/", &[("X-Forwarded-User", "alice")], None);
    assert!(r.text().contains("\"IS_ADMIN\":true"));
    let r = c.admin.req(
        "POST",
        "/api/topics/orders/archive",
        &[("X-Forwarded-User", "bob")],
        Some(br#"{"action":"pause"}"#),
    );
    assert_eq!((r.status, r.text().as_str()), (200, r#"{"message":""}"#));
    assert_eq!(
        nsqd_channel(&c.nsqds[0], "orders", "archive")["paused"],
        true
    );
    // reads stay open
    assert_eq!(c.admin.get("/api/topics").status, 200);
    // a custom header
    let c2 = start_admin(&[
        &format!("--lookupd-http-address={}", c.lookupd.http_addr),
        "--admin-user=alice",
        "--acl-http-header=X-User",
    ]);
    c2.req(
        "POST",
        "/api/topics/orders",
        &[("X-Forwarded-User", "alice")],
        Some(br#"{"action":"pause"}"#),
    )
    .assert_error(403, "FORBIDDEN");
    let r = c2.req(
        "POST",
        "/api/topics/orders",
        &[("X-User", "alice")],
        Some(br#"{"action":"unpause"}"#),
    );
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn item126_notifications_are_posted() {
    let rec = Recorder::start();
    let endpoint = format!(
        "--notification-http-endpoint=http://{}/notify?src=nsqadmin",
        rec.addr
    );
    let c = Cluster::start(&[&endpoint]);
    seed(&c, "orders", "archive", 1);
    let r = c.admin.req(
        "POST",
        "/api/topics/orders/archive?x=1",
        &[
            ("Authorization", "Basic dXNlcjpwYXNz"),
            ("Content-Type", "application/json"),
        ],
        Some(br#"{"action":"pause"}"#),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let got = rec.wait(1, secs(5));
    assert_eq!(got.len(), 1, "one notification");
    let n = &got[0];
    assert_eq!(
        (n.method.as_str(), n.path.as_str(), n.header("Content-Type")),
        ("POST", "/notify?src=nsqadmin", Some("application/json"))
    );
    let body = String::from_utf8(n.body.clone()).unwrap();
    let j = ojson::parse(&body).unwrap();
    assert_eq!(
        j.keys(),
        vec![
            "action",
            "topic",
            "channel",
            "timestamp",
            "user",
            "remote_ip",
            "user_agent",
            "url",
            "via"
        ],
        "{body}"
    );
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (
            v["action"].as_str(),
            v["topic"].as_str(),
            v["channel"].as_str(),
            v["user"].as_str()
        ),
        (
            Some("pause_channel"),
            Some("orders"),
            Some("archive"),
            Some("user")
        )
    );
    assert_eq!(v["user_agent"], "nsq-tests", "the harness's User-Agent");
    assert_eq!(
        v["url"].as_str().unwrap(),
        format!("http://{}/api/topics/orders/archive?x=1", c.admin.http_addr)
    );
    assert!(v["remote_ip"].as_str().unwrap().starts_with("127.0.0.1:"));
    assert!((v["timestamp"].as_i64().unwrap() - now_secs()).abs() < 30);
    assert!(!v["via"].as_str().unwrap().is_empty());

    // every action notifies, in order
    let actions: Vec<(&str, String, Option<String>)> = vec![
        (
            "POST",
            "/api/topics/orders".into(),
            Some(r#"{"action":"pause"}"#.into()),
        ),
        (
            "POST",
            "/api/topics/orders".into(),
            Some(r#"{"action":"unpause"}"#.into()),
        ),
        (
            "POST",
            "/api/topics/orders".into(),
            Some(r#"{"action":"empty"}"#.into()),
        ),
        (
            "POST",
            "/api/topics/orders/archive".into(),
            Some(r#"{"action":"unpause"}"#.into()),
        ),
        (
            "POST",
            "/api/topics/orders/archive".into(),
            Some(r#"{"action":"empty"}"#.into()),
        ),
        (
            "POST",
            "/api/topics".into(),
            Some(r#"{"topic":"fresh","channel":"c"}"#.into()),
        ),
        ("DELETE", "/api/topics/orders/archive".into(), None),
        (
            "DELETE",
            format!("/api/nodes/{}", c.node(1)),
            Some(r#"{"topic":"orders"}"#.into()),
        ),
        ("DELETE", "/api/topics/orders".into(), None),
    ];
    for (m, p, b) in &actions {
        let r = c.admin.req(m, p, &[], b.as_deref().map(str::as_bytes));
        assert_eq!(r.status, 200, "{m} {p}: {}", r.text());
    }
    let got = rec.wait(11, secs(10));
    let seen: Vec<(String, String, String, String)> = got
        .iter()
        .map(|r| {
            let v: Value = serde_json::from_slice(&r.body).unwrap();
            let s = |k: &str| v[k].as_str().unwrap_or("").to_string();
            (s("action"), s("topic"), s("channel"), s("node"))
        })
        .collect();
    let want: Vec<(String, String, String, String)> = [
        ("pause_channel", "orders", "archive", ""),
        ("pause_topic", "orders", "", ""),
        ("unpause_topic", "orders", "", ""),
        ("empty_topic", "orders", "", ""),
        ("unpause_channel", "orders", "archive", ""),
        ("empty_channel", "orders", "archive", ""),
        ("create_topic", "fresh", "", ""),
        ("create_channel", "fresh", "c", ""),
        ("delete_channel", "orders", "archive", ""),
        ("tombstone_topic_producer", "orders", "", c.node(1).as_str()),
        ("delete_topic", "orders", "", ""),
    ]
    .iter()
    .map(|(a, b, c, d)| (a.to_string(), b.to_string(), c.to_string(), d.to_string()))
    .collect();
    assert_eq!(seen, want);
}

#[test]
fn item127_delete_topic_and_channel_reach_lookupd_and_nsqds() {
    let c = Cluster::start(&[]);
    seed(&c, "orders", "archive", 1);
    let r = c.admin.post_json("/api/topics/orders/archive", "");
    r.assert_error(400, "EOF");
    let r = c.admin.delete("/api/topics/orders/archive", None);
    assert_eq!((r.status, r.text().as_str()), (200, r#"{"message":""}"#));
    for n in &c.nsqds {
        assert!(
            n.channel_stats("orders", "archive").is_none(),
            "channel deleted on {}",
            n.http_addr
        );
    }
    assert_eq!(
        c.lookupd.get("/channels?topic=orders").json()["channels"],
        serde_json::json!([])
    );
    let r = c.admin.delete("/api/topics/orders", None);
    assert_eq!((r.status, r.text().as_str()), (200, r#"{"message":""}"#));
    for n in &c.nsqds {
        assert!(
            n.topic_stats("orders").is_none(),
            "topic deleted on {}",
            n.http_addr
        );
    }
    wait_for(secs(5), "topic gone from nsqlookupd", || {
        (c.lookupd.get("/lookup?topic=orders").status == 404).then_some(())
    });
    assert_eq!(
        c.admin.get("/api/topics").text(),
        r#"{"topics":null,"message":""}"#
    );
}

#[test]
fn create_topic_and_channel_and_inactive_topics() {
    let c = Cluster::start(&[]);
    let r = c.admin.post_json("/api/topics", r#"{"topic":"planned"}"#);
    assert_eq!((r.status, r.text().as_str()), (200, r#"{"message":""}"#));
    let r = c
        .admin
        .post_json("/api/topics", r#"{"topic":"planned2","channel":"c1"}"#);
    assert_eq!((r.status, r.text().as_str()), (200, r#"{"message":""}"#));
    assert_eq!(
        c.lookupd.get("/channels?topic=planned2").json()["channels"],
        serde_json::json!(["c1"])
    );
    let r = c.admin.get("/api/topics?inactive=true");
    assert_eq!(
        (r.status, r.text().as_str()),
        (
            200,
            r#"{"topics":{"planned":null,"planned2":["c1"]},"message":""}"#
        )
    );
    // a topic with producers gets the channel created on them too
    publish(&c, 0, "live", 1);
    c.wait_producers("live", 1);
    let r = c
        .admin
        .post_json("/api/topics", r#"{"topic":"live","channel":"fresh"}"#);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        c.nsqds[0].channel_stats("live", "fresh").is_some(),
        "channel created on the producer"
    );
    let r = c.admin.get("/api/topics?inactive=true");
    assert!(!r.text().contains("\"live\""), "{}", r.text());
}

#[test]
fn tombstone_topic_producer() {
    let c = Cluster::start(&[]);
    seed(&c, "orders", "archive", 1);
    let node = c.node(1);
    let r = c
        .admin
        .delete(&format!("/api/nodes/{node}"), Some(r#"{"topic":"orders"}"#));
    assert_eq!((r.status, r.text().as_str()), (200, r#"{"message":""}"#));
    assert!(
        c.nsqds[1].topic_stats("orders").is_none(),
        "topic deleted on the tombstoned node"
    );
    assert!(
        c.nsqds[0].topic_stats("orders").is_some(),
        "other node untouched"
    );
    let lookup = c.lookupd.get("/lookup?topic=orders").json();
    let producers: Vec<i64> = lookup["producers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["http_port"].as_i64().unwrap())
        .collect();
    assert_eq!(producers, vec![c.nsqds[0].http_port as i64]);
    // an unreachable node: the nsqd lookup fails entirely → 502
    let r = c
        .admin
        .delete("/api/nodes/127.0.0.1:1", Some(r#"{"topic":"orders"}"#));
    assert_eq!(r.status, 502, "{}", r.text());
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .starts_with("UPSTREAM_ERROR: failed to query any nsqd: Get \"http://127.0.0.1:1/info\": dial tcp 127.0.0.1:1: connect: connection refused"),
        "{}",
        r.text()
    );
}

// ---------------------------------------------------------------------------
// 129: /config
// ---------------------------------------------------------------------------

#[test]
fn item129_config() {
    let c = Cluster::start(&[]);
    let r = c.admin.get("/config/nsqlookupd_http_addresses");
    assert_eq!(
        (r.status, r.text()),
        (200, format!("[\"{}\"]", c.lookupd.http_addr))
    );
    assert_v1_json(&r);
    let r = c.admin.get("/config/http_address");
    assert_eq!((r.status, r.text()), (200, c.admin.http_addr.clone()));
    assert_eq!(r.header("Content-Type"), Some("text/plain; charset=utf-8"));
    assert_eq!(c.admin.get("/config/base_path").text(), "/");
    assert_eq!(c.admin.get("/config/log_level").text(), "2");
    assert_eq!(
        c.admin.get("/config/http_client_request_timeout").text(),
        "2000000000"
    );
    assert_eq!(c.admin.get("/config/statsd_interval").text(), "60000000000");
    assert_eq!(c.admin.get("/config/nsqd_http_addresses").text(), "[]");
    assert_eq!(c.admin.get("/config/admin_users").text(), "[]");
    assert_eq!(c.admin.get("/config/proxy_graphite").text(), "false");
    c.admin
        .get("/config/nope")
        .assert_error(400, "INVALID_OPTION");
    let r = c.admin.req("PUT", "/config/log_level", &[], Some(b"debug"));
    assert_eq!((r.status, r.text().as_str()), (200, "1"));
    c.admin
        .req("PUT", "/config/log_level", &[], Some(b"loud"))
        .assert_error(400, "INVALID_VALUE");
    c.admin
        .req("PUT", "/config/base_path", &[], Some(b"/x"))
        .assert_error(400, "INVALID_OPTION");
    c.admin
        .req("PUT", "/config/log_level", &[], Some(b""))
        .assert_error(413, "INVALID_VALUE");
    let big = vec![b'x'; (1 << 20) + 1];
    c.admin
        .req("PUT", "/config/log_level", &[], Some(&big))
        .assert_error(413, "INVALID_VALUE");
    // swap the lookupds at run time
    let other = start_lookupd();
    let body = format!("[\"{}\"]", other.http_addr);
    let r = c.admin.req(
        "PUT",
        "/config/nsqlookupd_http_addresses",
        &[],
        Some(body.as_bytes()),
    );
    assert_eq!((r.status, r.text()), (200, body.clone()));
    c.admin
        .req(
            "PUT",
            "/config/nsqlookupd_http_addresses",
            &[],
            Some(b"nope"),
        )
        .assert_error(400, "INVALID_VALUE");
    assert_eq!(
        c.admin.get("/api/nodes").text(),
        r#"{"nodes":null,"message":""}"#,
        "now asking the empty lookupd"
    );
    // only from the allowed CIDR
    let c2 = start_admin(&[
        &format!("--lookupd-http-address={}", c.lookupd.http_addr),
        "--allow-config-from-cidr=10.0.0.0/8",
    ]);
    c2.get("/config/nsqlookupd_http_addresses")
        .assert_error(403, "FORBIDDEN");
    c2.req("PUT", "/config/log_level", &[], Some(b"debug"))
        .assert_error(403, "FORBIDDEN");
    let c3 = start_admin(&[
        &format!("--lookupd-http-address={}", c.lookupd.http_addr),
        "--allow-config-from-cidr=",
    ]);
    assert_eq!(c3.get("/config/allow_config_from_cidr").text(), "");
}

// ---------------------------------------------------------------------------
// 130: total and partial upstream failures
// ---------------------------------------------------------------------------

#[test]
fn item130_lookupds_down() {
    let c = Cluster::start(&[]);
    publish(&c, 0, "t", 1);
    c.wait_producers("t", 1);
    let dead = format!("127.0.0.1:{}", free_port());
    let all_down = start_admin(&[&format!("--lookupd-http-address={dead}")]);
    let r = all_down.get("/api/topics");
    assert_eq!(
        (r.status, r.text()),
        (
            502,
            format!(
                r#"{{"message":"UPSTREAM_ERROR: failed to query any nsqlookupd: Get \"http://{dead}/topics\": dial tcp {dead}: connect: connection refused"}}"#
            )
        )
    );
    assert_eq!(all_down.get("/api/nodes").status, 502);
    let half = start_admin(&[
        &format!("--lookupd-http-address={}", c.lookupd.http_addr),
        &format!("--lookupd-http-address={dead}"),
    ]);
    let r = half.get("/api/topics");
    assert_eq!(
        (r.status, r.text()),
        (
            200,
            format!(
                r#"{{"topics":["t"],"message":"WARNING: Get \"http://{dead}/topics\": dial tcp {dead}: connect: connection refused"}}"#
            )
        )
    );
    let r = half.get("/api/topics/t");
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["message_count"], 1);
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .starts_with(&format!("WARNING: Get \"http://{dead}/lookup?topic=t\"")),
        "{v}"
    );
    let r = half.get("/api/nodes");
    assert_eq!(r.status, 200);
    assert!(r.json()["message"]
        .as_str()
        .unwrap()
        .starts_with("WARNING: "));
}

#[test]
fn one_nsqd_down_is_a_warning_not_a_failure() {
    let mut c = Cluster::start(&[]);
    seed(&c, "orders", "archive", 2);
    // Frozen, not dead: nsqlookupd keeps listing it, its HTTP never answers.
    freeze(c.nsqds[1].pid());
    let r = c.admin.get("/api/topics/orders");
    send_signal(c.nsqds[1].pid(), libc::SIGCONT);
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(
        (
            v["message_count"].as_i64(),
            v["nodes"].as_array().unwrap().len()
        ),
        (Some(2), 1)
    );
    let msg = v["message"].as_str().unwrap();
    assert!(
        msg.starts_with(&format!(
            "WARNING: Get \"http://{}/stats?format=json&topic=orders&include_clients=false\": ",
            c.node(1)
        )),
        "{msg}"
    );
    // killed: nsqd mode with one address refusing connections
    let dead_port = c.nsqds[1].http_port;
    c.nsqds[1].kill();
    let admin = start_admin(&[
        &format!("--nsqd-http-address={}", c.nsqds[0].http_addr),
        &format!("--nsqd-http-address=127.0.0.1:{dead_port}"),
    ]);
    let r = admin.get("/api/topics");
    assert_eq!(
        (r.status, r.text()),
        (
            200,
            format!(
                r#"{{"topics":["orders"],"message":"WARNING: Get \"http://127.0.0.1:{dead_port}/stats?format=json\": dial tcp 127.0.0.1:{dead_port}: connect: connection refused"}}"#
            )
        )
    );
    let r = admin.get("/api/nodes");
    assert_eq!(r.status, 200);
    assert!(r.json()["message"].as_str().unwrap().starts_with(&format!(
        "WARNING: Get \"http://127.0.0.1:{dead_port}/info\""
    )));
    let r = admin.get("/api/topics/orders");
    assert_eq!(
        (r.status, r.json()["message_count"].as_i64()),
        (200, Some(2))
    );
}

// ---------------------------------------------------------------------------
// nsqd mode
// ---------------------------------------------------------------------------

/// nsq-rs settings through nsqadmin's API: `{"action":"config", …}` on a
/// topic or channel sets them on every nsqd that has it (checked first: a
/// bad value changes no nsqd), and the topic and channel answers carry
/// them with the counters (`dropped_count`, `dead_letter_count`).
#[test]
fn nsq_rs_settings_and_counters_through_the_api() {
    let n1 = Nsqd::start(&["--broadcast-address=127.0.0.1"]);
    let n2 = Nsqd::start(&["--broadcast-address=127.0.0.1"]);
    for n in [&n1, &n2] {
        assert_eq!(n.post("/topic/create?topic=b", b"").status, 200);
        for c in ["c", "d"] {
            let r = n.post(&format!("/channel/create?topic=b&channel={c}"), b"");
            assert_eq!(r.status, 200);
        }
    }
    let admin = start_admin(&[
        &format!("--nsqd-http-address={}", n1.http_addr),
        &format!("--nsqd-http-address={}", n2.http_addr),
    ]);
    let v = admin.get("/api/topics/b/c").json();
    assert!(
        v.get("max_depth").is_none() && v.get("dropped_count").is_none(),
        "{v}"
    );

    let r = admin.post_json(
        "/api/topics/b/c",
        r#"{"action":"config","max_depth":2,"max_depth_policy":"drop-oldest"}"#,
    );
    assert_eq!((r.status, r.text().as_str()), (200, r#"{"message":""}"#));
    for n in [&n1, &n2] {
        let c = n.get("/channel/config?topic=b&channel=c").json();
        assert_eq!(
            (c["max_depth"].as_i64(), c["max_depth_policy"].as_str()),
            (Some(2), Some("drop-oldest"))
        );
    }
    admin
        .post_json("/api/topics/b/c", r#"{"action":"config","max_depth":-1}"#)
        .assert_error(400, "INVALID_ARG_MAX_DEPTH");
    admin
        .post_json(
            "/api/topics/b",
            r#"{"action":"config","max_depth_policy":"oldest"}"#,
        )
        .assert_error(400, "INVALID_ARG_MAX_DEPTH_POLICY");
    assert_eq!(
        n1.get("/channel/config?topic=b&channel=c").json()["max_depth"],
        2,
        "unchanged"
    );
    let r = admin.post_json(
        "/api/topics/b",
        r#"{"action":"config","mem_queue_size":"7"}"#,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(n2.get("/topic/config?topic=b").json()["mem_queue_size"], 7);

    // counters add up over the nodes, settings come through
    let r = n1.post("/mpub?topic=b", b"1\n2\n3\n4\n5");
    assert_eq!(r.status, 200);
    let r = admin.post_json("/api/topics/b/d", r#"{"action":"config","max_attempts":1}"#);
    assert_eq!(r.status, 200, "{}", r.text());
    let mut sub = n1.connect();
    sub.sub("b", "d");
    sub.rdy(1);
    // each of the five is requeued once; its second delivery would be
    // attempt 2, so it goes to b.d.dead instead
    for _ in 0..5 {
        let m = recv_msgs(&mut sub, 1, Duration::from_secs(10), false).remove(0);
        sub.req(&m.id, 0);
    }
    wait_for(Duration::from_secs(10), "five dead letters", || {
        (n1.channel_stats("b", "d").unwrap()["dead_letter_count"].as_i64() == Some(5)).then_some(())
    });
    let c = admin.get("/api/topics/b/c").json();
    assert_eq!(
        (
            c["max_depth"].as_i64(),
            c["max_depth_policy"].as_str(),
            c["dropped_count"].as_i64(),
            c["depth"].as_i64()
        ),
        (Some(2), Some("drop-oldest"), Some(3), Some(2))
    );
    let d = admin.get("/api/topics/b/d").json();
    assert_eq!(
        (
            d["max_attempts"].as_i64(),
            d["dead_letter_topic"].as_str(),
            d["dead_letter_count"].as_i64()
        ),
        (Some(1), Some("b.d.dead"), Some(5))
    );
    let t = admin.get("/api/topics/b").json();
    assert_eq!(t["mem_queue_size"], 7);
}

#[test]
fn nsqd_mode() {
    let n1 = Nsqd::start(&["--broadcast-address=127.0.0.1"]);
    let n2 = Nsqd::start(&["--broadcast-address=127.0.0.1"]);
    n1.http_pub("b", b"1");
    n2.http_pub("a", b"1");
    n2.http_pub("b", b"2");
    let admin = start_admin(&[
        &format!("--nsqd-http-address={}", n1.http_addr),
        &format!("--nsqd-http-address={}", n2.http_addr),
    ]);
    assert_eq!(
        admin.get("/api/topics").text(),
        r#"{"topics":["a","b"],"message":""}"#
    );
    assert_eq!(
        admin.get("/api/topics?inactive=true").text(),
        r#"{"topics":{},"message":""}"#
    );
    let v = admin.get("/api/nodes").json();
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    assert!(nodes
        .iter()
        .all(|n| n["remote_addresses"].is_null() && n["remote_address"] == ""));
    let v = admin.get("/api/topics/b").json();
    assert_eq!(
        (
            v["message_count"].as_i64(),
            v["nodes"].as_array().unwrap().len()
        ),
        (Some(2), 2)
    );
    assert_eq!(
        admin.get("/api/topics/a").json()["nodes"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    admin
        .get("/api/topics/none")
        .assert_error(502, "UPSTREAM_ERROR: failed to query any nsqd: ");
    let r = admin.post_json("/api/topics/b", r#"{"action":"pause"}"#);
    assert_eq!((r.status, r.text().as_str()), (200, r#"{"message":""}"#));
    assert_eq!(n1.topic_stats("b").unwrap()["paused"], true);
    assert_eq!(n2.topic_stats("b").unwrap()["paused"], true);
    // creating a channel needs nsqlookupd to find producers: total failure over zero lookupds
    admin
        .post_json("/api/topics", r#"{"topic":"b","channel":"c"}"#)
        .assert_error(502, "UPSTREAM_ERROR: failed to query any nsqlookupd: ");
    assert_eq!(
        admin.post_json("/api/topics", r#"{"topic":"b"}"#).text(),
        r#"{"message":""}"#
    );
    let r = admin.get(&format!("/api/nodes/127.0.0.1:{}", n2.http_port));
    assert_eq!(
        (r.status, r.json()["total_messages"].as_i64()),
        (200, Some(2))
    );
    let r = admin.delete("/api/topics/a", None);
    assert_eq!(r.status, 200);
    assert!(n2.topic_stats("a").is_none());
}

// ---------------------------------------------------------------------------
// nsq-rs: /api/history
// ---------------------------------------------------------------------------

#[test]
fn history_samples_depth_and_rates() {
    let c = Cluster::start(&[]);
    seed(&c, "orders", "archive", 3);
    // wait for two samples that include the topic (the poller samples every 5 s)
    let v = wait_for(secs(20), "two history samples of orders", || {
        let v = c.admin.get("/api/history").json();
        (v["topics"]["orders"]["ts"]
            .as_array()
            .map_or(0, |a| a.len())
            >= 2)
            .then_some(v)
    });
    assert_eq!(
        (
            v["interval_ms"].as_i64(),
            v["window_ms"].as_i64(),
            v["message"].as_str()
        ),
        (Some(5000), Some(1_800_000), Some(""))
    );
    let t = &v["topics"]["orders"];
    assert_eq!(
        t["depth"].as_array().unwrap().last().unwrap(),
        6,
        "topic + channel depth"
    );
    assert_eq!(t["messages"].as_array().unwrap().last().unwrap(), 6);
    assert!(t["rate"][0].is_null());
    assert_eq!(
        v["cluster"]["messages"].as_array().unwrap().last().unwrap(),
        6,
        "channel messages, cluster-wide"
    );
    let r = c.admin.get("/api/history/topics/orders?points=1");
    assert_eq!(r.status, 200);
    let h = r.json();
    assert_eq!(h["total"]["ts"].as_array().unwrap().len(), 1);
    assert_eq!(h["nodes"].as_object().unwrap().len(), 2);
    assert!(h["nodes"][c.node(0)]["depth"].is_array());
    assert_eq!(
        h["channels"]["archive"]["depth"]
            .as_array()
            .unwrap()
            .last()
            .unwrap(),
        6
    );
    // The channel's samples may start a poll later than its topic's.
    let h = wait_for(secs(20), "two history samples of orders/archive", || {
        let h = c.admin.get("/api/history/topics/orders/archive").json();
        (h["total"]["ts"].as_array().map_or(0, |a| a.len()) >= 2).then_some(h)
    });
    assert_eq!(
        (h["topic"].as_str(), h["channel"].as_str()),
        (Some("orders"), Some("archive"))
    );
    assert_eq!(h["nodes"].as_object().unwrap().len(), 2);
    let h = c.admin.get("/api/history/topics/nope").json();
    assert_eq!(h["total"]["ts"], serde_json::json!([]));
}

// ---------------------------------------------------------------------------
// graphite: /api/graphite argument checks, the /render proxy
// ---------------------------------------------------------------------------

#[test]
fn graphite_proxy_and_rate_arguments() {
    let graphite = Recorder::start();
    let lookupd = start_lookupd();
    let admin = start_admin(&[
        &format!("--lookupd-http-address={}", lookupd.http_addr),
        &format!("--graphite-url=http://user:pw@{}", graphite.addr),
        "--proxy-graphite",
    ]);
    let html = admin.get("/").text();
    assert!(
        html.contains("\"GRAPHITE_URL\":\"\"") && html.contains("\"GRAPH_ENABLED\":true"),
        "{html}"
    );
    let r = admin.get("/render?target=sumSeries(a.b)&format=png");
    assert_eq!(r.status, 200);
    let got = graphite.wait(1, secs(5));
    assert_eq!(got[0].path, "/render?target=sumSeries(a.b)&format=png");
    assert_eq!(got[0].header("Authorization"), Some("Basic dXNlcjpwdw=="));
    admin
        .get("/api/graphite")
        .assert_error(400, "INVALID_ARG_METRIC");
    admin
        .get("/api/graphite?metric=rate")
        .assert_error(400, "INVALID_ARG_TARGET");
    // graphite answers an empty body here: not JSON → 500
    admin
        .get("/api/graphite?metric=rate&target=x")
        .assert_error(500, "INTERNAL_ERROR");
    let got = graphite.wait(2, secs(5));
    assert_eq!(
        got[1].path,
        "/render?format=json&from=-120sec&target=x&until=-60sec"
    );
    // without --proxy-graphite there is no /render
    let plain = start_admin(&[
        &format!("--lookupd-http-address={}", lookupd.http_addr),
        "--graphite-url=http://graphite.example",
    ]);
    assert_eq!(plain.get("/render").status, 404);
    assert!(plain
        .get("/")
        .text()
        .contains("\"GRAPHITE_URL\":\"http://graphite.example\""));
}

#[test]
fn sigterm_stops_promptly() {
    let lookupd = start_lookupd();
    let mut admin = start_admin(&[&format!("--lookupd-http-address={}", lookupd.http_addr)]);
    // an idle keep-alive connection must not hold the shutdown up
    let _idle = std::net::TcpStream::connect(&admin.http_addr).unwrap();
    let start = std::time::Instant::now();
    send_signal(admin.pid(), libc::SIGTERM);
    let st = admin
        .wait_exit(secs(5))
        .expect("nsqadmin exits after SIGTERM");
    assert!(st.success(), "{st:?}");
    assert!(start.elapsed() < secs(5));
}

// ---------------------------------------------------------------------------
// Any NSQ: an older nsqd (1.2-style JSON, no topology keys) with E2E percentiles
// ---------------------------------------------------------------------------

#[test]
fn old_nsqd_with_e2e_percentiles() {
    // What an nsqd 1.2 with --e2e-processing-latency-percentile=0.99,0.5 answers:
    // client objects and /info without any topology_* key.
    let connect_ts = now_secs() - 60;
    let fake = |p99: u64| {
        move |port: u16| {
            let e2e = format!(
                r#"{{"count":7,"percentiles":[{{"quantile":0.99,"value":{p99}}},{{"quantile":0.5,"value":1000}}]}}"#
            );
            let client = format!(
                r#"{{"client_id":"w1","hostname":"worker-{port}","version":"V2","remote_address":"10.0.0.9:5555","state":3,"ready_count":25,"in_flight_count":3,"message_count":900,"finish_count":897,"requeue_count":2,"connect_ts":{connect_ts},"sample_rate":0,"deflate":false,"snappy":true,"user_agent":"go-nsq/1.0.8","tls":false,"tls_cipher_suite":"","tls_version":"","tls_negotiated_protocol":"","tls_negotiated_protocol_is_mutual":false}}"#
            );
            let stats = format!(
                r#"{{"version":"1.2.1","health":"OK","start_time":1,"topics":[{{"topic_name":"lat","channels":[{{"channel_name":"c","depth":12,"backend_depth":4,"in_flight_count":3,"deferred_count":1,"message_count":912,"requeue_count":2,"timeout_count":1,"client_count":1,"clients":[{client}],"paused":false,"e2e_processing_latency":{e2e}}}],"depth":0,"backend_depth":0,"message_count":912,"message_bytes":100,"paused":false,"e2e_processing_latency":{e2e}}}],"producers":[]}}"#
            );
            let info = format!(
                r#"{{"version":"1.2.1","broadcast_address":"127.0.0.1","hostname":"old-{port}","http_port":{port},"tcp_port":1,"start_time":1}}"#
            );
            vec![("/stats", stats), ("/info", info)]
        }
    };
    let a = fake_upstream(fake(3000));
    let b = fake_upstream(fake(1000));
    let admin = start_admin(&[
        &format!("--nsqd-http-address={a}"),
        &format!("--nsqd-http-address={b}"),
    ]);
    let r = admin.get("/api/topics/lat");
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["message"], "");
    assert_eq!(v["nodes"].as_array().unwrap().len(), 2);
    // per node: nsqd's values plus min/max/average/count (keys sorted, like Go's map)
    let n0 = ojson::parse(&r.text()).unwrap();
    if let Some(ojson::J::Arr(nodes)) = n0.get("nodes") {
        let e = nodes[0].get("e2e_processing_latency").unwrap();
        assert_keys(e, E2E_KEYS, "e2e");
        if let Some(ojson::J::Arr(ps)) = e.get("percentiles") {
            assert_eq!(
                ps[0].keys(),
                vec!["average", "count", "max", "min", "quantile", "value"]
            );
        }
    }
    // aggregate: count-weighted average, max of maxes, host "*"
    let e = &v["e2e_processing_latency"];
    assert_eq!(
        (e["count"].as_i64(), e["topic"].as_str(), e["host"].as_str()),
        (Some(14), Some("lat"), Some("*"))
    );
    let p99 = &e["percentiles"][0];
    assert_eq!(
        (
            p99["quantile"].as_f64(),
            p99["average"].as_i64(),
            p99["count"].as_i64(),
            p99["max"].as_i64()
        ),
        (Some(0.99), Some(2000), Some(14), Some(3000))
    );
    // nsqadmin's min is the last merged node's max (its arithmetic, kept as is)
    assert!(
        matches!(p99["min"].as_i64(), Some(1000) | Some(3000)),
        "{p99}"
    );
    assert!(
        p99.get("value").is_none(),
        "merged percentiles carry no value"
    );
    assert_eq!(e["percentiles"][1]["average"], 1000);
    let r = admin.get("/api/topics/lat/c");
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(
        (
            v["depth"].as_i64(),
            v["memory_depth"].as_i64(),
            v["backend_depth"].as_i64(),
            v["client_count"].as_i64()
        ),
        (Some(24), Some(16), Some(8), Some(2))
    );
    let clients = v["clients"].as_array().unwrap();
    assert_eq!(clients.len(), 2);
    for c in clients {
        assert_eq!(
            (
                c["authed"].as_bool(),
                c["auth_identity"].as_str(),
                c["snappy"].as_bool()
            ),
            (Some(false), Some(""), Some(true))
        );
        assert!(
            c.get("topology_zone").is_none(),
            "empty topology keys are omitted"
        );
        assert_eq!(
            c["connected"].as_i64().map(|n| n / 1_000_000_000 >= 60),
            Some(true)
        );
    }
    assert_eq!(v["e2e_processing_latency"]["channel"], "c");
    let nodes = admin.get("/api/nodes").json();
    assert_eq!(nodes["nodes"][0]["version"], "1.2.1");
}

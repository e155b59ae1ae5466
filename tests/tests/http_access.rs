//! The opt-in access control of the daemons' HTTP APIs
//! (`--http-auth-required`, docs/features/http-auth.md): for each endpoint class of
//! nsqd and nsqlookupd, no secret (401), a wrong secret (401), a secret
//! lacking the permission (403) and the right one; listings cut to what the
//! secret may see; the auth server down or answering garbage (503, nothing
//! done); bad secrets cached; the connection cap; the feature off; nsqadmin
//! and the apps through guarded daemons. The auth server is a real HTTP
//! server the test runs, as the TCP AUTH tests do.

#![forbid(unsafe_code)]

#[path = "../src/admin_util.rs"]
mod admin_util;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use admin_util::*;
use nsq_tests::auth_server::{grant, AuthServer};
use nsq_tests::*;

/// The secrets the test's auth server knows.
fn auth_server() -> AuthServer {
    AuthServer::start(|secret| match secret {
        "pub-t" => (
            200,
            grant(
                "publisher",
                r#"[{"topic":"^t$","channels":[".*"],"permissions":["publish"]}]"#,
            ),
        ),
        "sub-tc" => (
            200,
            grant(
                "subscriber",
                r#"[{"topic":"^t$","channels":["^c$"],"permissions":["subscribe"]}]"#,
            ),
        ),
        "admin-t" => (
            200,
            grant(
                "topic-admin",
                r#"[{"topic":"^t$","channels":[".*"],"permissions":["admin"]}]"#,
            ),
        ),
        "admin-u" => (
            200,
            grant(
                "other-admin",
                r#"[{"topic":"^u$","channels":[".*"],"permissions":["admin"]}]"#,
            ),
        ),
        "sub-all" => (
            200,
            grant(
                "reader",
                r#"[{"topic":".*","channels":[".*"],"permissions":["subscribe"]}]"#,
            ),
        ),
        "root" => (
            200,
            grant(
                "root",
                r#"[{"topic":".*","channels":[".*"],"permissions":["subscribe","publish","admin"]}]"#,
            ),
        ),
        "nothing" => (200, grant("nobody", "[]")),
        "garbage" => (200, "this is not JSON".into()),
        "broken" => (500, r#"{"message":"oops"}"#.into()),
        _ => (403, r#"{"message":"unknown secret"}"#.into()),
    })
}

/// A port nothing listens on.
fn closed_port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let a = l.local_addr().unwrap().to_string();
    drop(l);
    a
}

fn req(addr: &str, method: &str, path: &str, secret: Option<&str>) -> HttpResponse {
    let bearer = secret.map(|s| format!("Bearer {s}"));
    let headers: Vec<(&str, &str)> = bearer
        .as_deref()
        .map(|b| vec![("Authorization", b)])
        .unwrap_or_default();
    let body: Option<&[u8]> = match method {
        "POST" | "PUT" => Some(if path.starts_with("/config") {
            b"warn"
        } else {
            b"hello"
        }),
        _ => None,
    };
    http_request(addr, method, path, &headers, body).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// No secret → 401, a wrong secret → 401, the auth server's empty grant →
/// 401, `lacking` → 403, `right` → 200.
fn check_class(addr: &str, method: &str, path: &str, lacking: &str, right: &str) {
    check_secret_needed(addr, method, path);
    req(addr, method, path, Some(lacking)).assert_error(403, "FORBIDDEN");
    let r = req(addr, method, path, Some(right));
    assert_eq!(r.status, 200, "{method} {path} with {right}: {}", r.text());
}

/// No secret → 401, a wrong secret → 401, the auth server's empty grant → 401.
fn check_secret_needed(addr: &str, method: &str, path: &str) {
    let r = req(addr, method, path, None);
    r.assert_error(401, "UNAUTHORIZED");
    assert_eq!(r.header("WWW-Authenticate"), Some("Bearer"), "{path}");
    for wrong in ["wrong", "nothing"] {
        let r = req(addr, method, path, Some(wrong));
        r.assert_error(401, "UNAUTHORIZED");
        assert_eq!(
            r.header("WWW-Authenticate"),
            Some("Bearer error=\"invalid_token\""),
            "{path}"
        );
    }
}

fn guarded_nsqd(auth: &AuthServer, extra: &[&str]) -> Nsqd {
    let a = format!("--auth-http-address={}", auth.addr);
    let mut flags = vec![a.as_str(), "--http-auth-required"];
    flags.extend_from_slice(extra);
    Nsqd::start(&flags)
}

fn topic_names(stats: &Value) -> Vec<String> {
    stats["topics"]
        .as_array()
        .map(|ts| {
            ts.iter()
                .map(|t| t["topic_name"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn nsqd_endpoint_classes() {
    let auth = auth_server();
    let n = guarded_nsqd(&auth, &[]);
    let a = n.http_addr.as_str();

    // open: /ping, no secret
    let r = req(a, "GET", "/ping", None);
    assert_eq!((r.status, r.text().as_str()), (200, "OK"));

    // publish
    check_class(a, "POST", "/pub?topic=t", "sub-tc", "pub-t");
    check_class(a, "POST", "/mpub?topic=t", "admin-t", "pub-t");
    req(a, "POST", "/pub?topic=u", Some("pub-t")).assert_error(403, "FORBIDDEN");

    // admin of topics and channels
    check_class(a, "POST", "/topic/create?topic=t", "pub-t", "admin-t");
    check_class(
        a,
        "POST",
        "/channel/create?topic=t&channel=c",
        "sub-tc",
        "admin-t",
    );
    check_class(
        a,
        "POST",
        "/channel/pause?topic=t&channel=c",
        "pub-t",
        "admin-t",
    );
    check_class(
        a,
        "POST",
        "/channel/unpause?topic=t&channel=c",
        "pub-t",
        "admin-t",
    );
    check_class(a, "POST", "/topic/pause?topic=t", "sub-tc", "admin-t");
    check_class(a, "POST", "/topic/unpause?topic=t", "sub-tc", "admin-t");
    req(a, "POST", "/topic/create?topic=u", Some("admin-t")).assert_error(403, "FORBIDDEN");
    // node-wide: an admin of one topic may not change nsqd's settings
    check_class(a, "PUT", "/config/log_level", "admin-t", "root");

    // the root secret makes what the others must not see
    for p in [
        "/topic/create?topic=u",
        "/channel/create?topic=t&channel=d",
        "/channel/create?topic=u&channel=c",
    ] {
        assert_eq!(req(a, "POST", p, Some("root")).status, 200, "{p}");
    }

    // listings: any granted secret, cut to what it may see
    check_secret_needed(a, "GET", "/stats?format=json");
    let stats = |secret| req(a, "GET", "/stats?format=json", Some(secret)).json();
    assert_eq!(topic_names(&stats("root")), ["t", "u"]);
    assert_eq!(topic_names(&stats("pub-t")), ["t"]);
    let sub = stats("sub-tc");
    assert_eq!(topic_names(&sub), ["t"]);
    let channels: Vec<&str> = sub["topics"][0]["channels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["channel_name"].as_str().unwrap())
        .collect();
    assert_eq!(channels, ["c"], "only the channel it may subscribe to");
    let text = req(a, "GET", "/stats", Some("pub-t")).text();
    assert!(text.contains("[t ") && !text.contains("[u "), "{text}");
    let metrics = req(a, "GET", "/metrics", Some("sub-tc")).text();
    assert!(metrics.contains("topic=\"t\""), "{metrics}");
    assert!(!metrics.contains("topic=\"u\""), "{metrics}");
    assert!(!metrics.contains("channel=\"d\""), "{metrics}");
    check_secret_needed(a, "GET", "/metrics");
    assert_eq!(req(a, "GET", "/info", Some("sub-tc")).status, 200);
    check_secret_needed(a, "GET", "/info");

    // destructive admin last
    check_class(
        a,
        "POST",
        "/channel/empty?topic=t&channel=c",
        "sub-tc",
        "admin-t",
    );
    check_class(a, "POST", "/topic/empty?topic=t", "pub-t", "admin-t");
    check_class(
        a,
        "POST",
        "/channel/delete?topic=t&channel=c",
        "sub-tc",
        "admin-t",
    );
    check_class(a, "POST", "/topic/delete?topic=t", "pub-t", "admin-t");
    assert_eq!(topic_names(&stats("root")), ["u"]);

    // a refused secret is remembered briefly: a flood of it is one question
    let before = auth.asked("flood");
    for _ in 0..20 {
        req(a, "GET", "/stats", Some("flood")).assert_error(401, "UNAUTHORIZED");
    }
    assert_eq!(auth.asked("flood") - before, 1);
    // and a granted one for its TTL
    assert_eq!(auth.asked("pub-t"), 1, "granted answers are cached");
}

#[test]
fn auth_server_down_or_garbage_is_503_and_nothing_is_done() {
    let auth = auth_server();
    let n = guarded_nsqd(&auth, &[]);
    let a = n.http_addr.as_str();
    for secret in ["garbage", "broken"] {
        for _ in 0..2 {
            req(a, "POST", "/topic/create?topic=x", Some(secret))
                .assert_error(503, "AUTH_UNAVAILABLE");
            req(a, "POST", "/pub?topic=x", Some(secret)).assert_error(503, "AUTH_UNAVAILABLE");
        }
        // never cached: each request asked again
        assert_eq!(auth.asked(secret), 4, "{secret}");
    }
    let stats = req(a, "GET", "/stats?format=json", Some("root")).json();
    assert!(topic_names(&stats).is_empty(), "nothing was done: {stats}");

    // no auth server at all
    let down = Nsqd::start(&[
        &format!("--auth-http-address={}", closed_port()),
        "--http-auth-required",
        "--http-client-connect-timeout=500ms",
    ]);
    let d = down.http_addr.as_str();
    req(d, "POST", "/topic/create?topic=x", Some("root")).assert_error(503, "AUTH_UNAVAILABLE");
    req(d, "GET", "/stats", None).assert_error(401, "UNAUTHORIZED");
    assert_eq!(req(d, "GET", "/ping", None).status, 200);
}

/// One request over HTTPS to `addr`, trusting `cert_der`.
fn https_req(addr: &str, cert_der: &[u8], path: &str, secret: Option<&str>) -> HttpResponse {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from(cert_der.to_vec()))
        .unwrap();
    let cfg = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let conn = rustls::ClientConnection::new(std::sync::Arc::new(cfg), name).unwrap();
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let auth = secret.map_or(String::new(), |s| format!("Authorization: Bearer {s}\r\n"));
    let raw = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{auth}\r\n");
    tls.write_all(raw.as_bytes()).unwrap();
    let mut buf = Vec::new();
    let _ = tls.read_to_end(&mut buf);
    parse_http_response(&buf).unwrap()
}

#[test]
fn https_is_guarded_too_and_the_auth_server_told_tls() {
    let auth = auth_server();
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (cert_path, key_path) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_path, cert.cert.pem()).unwrap();
    std::fs::write(&key_path, cert.key_pair.serialize_pem()).unwrap();
    let n = guarded_nsqd(
        &auth,
        &[
            &format!("--tls-cert={}", cert_path.display()),
            &format!("--tls-key={}", key_path.display()),
        ],
    );
    let der = cert.cert.der().to_vec();
    let h = n.https_addr.as_str();
    let r = https_req(h, &der, "/ping", None);
    assert_eq!((r.status, r.text().as_str()), (200, "OK"));
    https_req(h, &der, "/stats?format=json", None).assert_error(401, "UNAUTHORIZED");
    https_req(h, &der, "/stats?format=json", Some("wrong")).assert_error(401, "UNAUTHORIZED");
    assert_eq!(
        https_req(h, &der, "/stats?format=json", Some("pub-t")).status,
        200
    );
    let lines = auth.request_lines();
    let asked = lines
        .iter()
        .find(|l| l.contains("secret=pub-t"))
        .expect("asked about pub-t");
    assert!(
        asked.contains("remote_ip=127.0.0.1") && asked.contains("tls=true"),
        "{asked}"
    );
    // the plain listener asks separately, with tls=false
    assert_eq!(req(&n.http_addr, "GET", "/info", Some("pub-t")).status, 200);
    assert!(auth
        .request_lines()
        .iter()
        .any(|l| l.contains("secret=pub-t") && l.contains("tls=false")));
}

#[test]
fn feature_off_is_nsqs_behaviour_even_with_an_auth_server() {
    let auth = auth_server();
    let n = Nsqd::start(&[&format!("--auth-http-address={}", auth.addr)]);
    let a = n.http_addr.as_str();
    let r = req(a, "POST", "/pub?topic=t", None);
    assert_eq!((r.status, r.text().as_str()), (200, "OK"));
    assert_eq!(
        req(a, "POST", "/topic/create?topic=u", Some("wrong")).status,
        200
    );
    assert_eq!(
        topic_names(&req(a, "GET", "/stats?format=json", None).json()),
        ["t", "u"]
    );
    assert_eq!(
        auth.asked("wrong"),
        0,
        "the auth server is not asked over HTTP"
    );
    let lookupd = start_lookupd();
    assert_eq!(lookupd.get("/topics").status, 200);
}

#[test]
fn flag_errors_are_fatal() {
    for bin in ["nsqd", "nsqlookupd"] {
        let out = run_bin(bin, &["--http-auth-required"], Duration::from_secs(10));
        assert_eq!(out.status.and_then(|s| s.code()), Some(1), "{bin}: {out:?}");
        assert!(
            out.stderr.contains("FATAL: ")
                && out
                    .stderr
                    .contains("--http-auth-required needs --auth-http-address"),
            "{bin}: {}",
            out.stderr
        );
    }
}

#[test]
fn connections_beyond_the_cap_wait_for_one_to_close() {
    let auth = auth_server();
    let n = guarded_nsqd(&auth, &["--http-max-connections=2"]);
    let a = n.http_addr.as_str();
    // two idle connections take both places
    let mut held: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(a).unwrap()).collect();
    // let nsqd accept them before the third arrives
    sleep_ms(200);
    let mut third = TcpStream::connect(a).unwrap();
    third
        .write_all(b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    third
        .set_read_timeout(Some(Duration::from_millis(700)))
        .unwrap();
    let mut buf = [0u8; 64];
    assert!(
        third.read(&mut buf).is_err(),
        "the third connection is not served while two are open"
    );
    drop(held.pop());
    third
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let got = third.read(&mut buf).unwrap();
    assert!(
        buf[..got].starts_with(b"HTTP/1.1 200 OK"),
        "{:?}",
        String::from_utf8_lossy(&buf[..got])
    );
    // an idle connection does not keep its place: closed after 10 s
    // without a request
    let idle = &mut held[0];
    idle.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let start = std::time::Instant::now();
    assert!(matches!(idle.read(&mut buf), Ok(0) | Err(_)));
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_secs(3) && waited < Duration::from_secs(19),
        "closed after {waited:?}"
    );
}

#[test]
fn nsqlookupd_endpoint_classes() {
    let auth = auth_server();
    let lookupd = start_lookupd_with(&[
        &format!("--auth-http-address={}", auth.addr),
        "--http-auth-required",
    ]);
    let a = lookupd.http_addr.as_str();
    // an nsqd (no HTTP access control) registers topics t and u over TCP
    let nsqd = start_nsqd_with_lookupd(&lookupd);
    for p in [
        "/topic/create?topic=t",
        "/topic/create?topic=u",
        "/channel/create?topic=t&channel=c",
        "/channel/create?topic=t&channel=d",
        "/channel/create?topic=u&channel=c",
    ] {
        let r = nsqd.post(p, b"");
        assert_eq!(r.status, 200, "{p}: {}", r.text());
    }
    wait_for(Duration::from_secs(10), "registrations", || {
        let r = req(a, "GET", "/channels?topic=t", Some("root")).json();
        (r["channels"].as_array().map_or(0, Vec::len) == 2).then_some(())
    });

    assert_eq!(req(a, "GET", "/ping", None).status, 200);
    check_class(a, "GET", "/lookup?topic=t", "admin-u", "pub-t");
    req(a, "GET", "/lookup?topic=u", Some("pub-t")).assert_error(403, "FORBIDDEN");
    let names = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect()
    };
    let lookup = req(a, "GET", "/lookup?topic=t", Some("sub-tc")).json();
    assert_eq!(names(&lookup["channels"]), ["c"]);
    assert_eq!(lookup["producers"].as_array().unwrap().len(), 1);
    let channels = req(a, "GET", "/channels?topic=t", Some("sub-tc")).json();
    assert_eq!(names(&channels["channels"]), ["c"]);
    req(a, "GET", "/channels?topic=u", Some("sub-tc")).assert_error(403, "FORBIDDEN");
    check_secret_needed(a, "GET", "/topics");
    assert_eq!(
        names(&req(a, "GET", "/topics", Some("pub-t")).json()["topics"]),
        ["t"]
    );
    assert_eq!(
        names(&req(a, "GET", "/topics", Some("root")).json()["topics"]),
        ["t", "u"]
    );
    let nodes = req(a, "GET", "/nodes", Some("sub-tc")).json();
    let node = &nodes["producers"][0];
    assert_eq!(names(&node["topics"]), ["t"]);
    assert_eq!(node["tombstones"].as_array().unwrap().len(), 1);
    let metrics = req(a, "GET", "/metrics", Some("pub-t")).text();
    assert!(
        metrics.contains("topic=\"t\"") && !metrics.contains("topic=\"u\""),
        "{metrics}"
    );
    check_class(a, "GET", "/debug", "admin-t", "root");
    check_secret_needed(a, "GET", "/info");
    assert_eq!(req(a, "GET", "/info", Some("pub-t")).status, 200);

    let node_id = format!("127.0.0.1:{}", nsqd.http_port);
    check_class(
        a,
        "POST",
        &format!("/topic/tombstone?topic=t&node={node_id}"),
        "pub-t",
        "admin-t",
    );
    check_class(
        a,
        "POST",
        "/channel/delete?topic=t&channel=d",
        "sub-tc",
        "admin-t",
    );
    check_class(a, "POST", "/topic/create?topic=t2", "admin-t", "root");
    check_class(a, "POST", "/topic/delete?topic=t", "pub-t", "admin-t");
}

#[test]
fn nsqadmin_acts_through_guarded_daemons_with_its_own_secret() {
    let auth = auth_server();
    let auth_flag = format!("--auth-http-address={}", auth.addr);
    let lookupd = start_lookupd_with(&[&auth_flag, "--http-auth-required"]);
    let nsqd = Nsqd::start(&[
        &format!("--lookupd-tcp-address={}", lookupd.tcp_addr),
        "--broadcast-address=127.0.0.1",
        &auth_flag,
        "--http-auth-required",
    ]);
    let r = req(&nsqd.http_addr, "POST", "/pub?topic=t", Some("pub-t"));
    assert_eq!(r.status, 200);
    assert_eq!(
        req(
            &nsqd.http_addr,
            "POST",
            "/channel/create?topic=t&channel=c",
            Some("admin-t")
        )
        .status,
        200
    );
    let lookupd_flag = format!("--lookupd-http-address={}", lookupd.http_addr);
    wait_for(Duration::from_secs(10), "registration", || {
        (req(&lookupd.http_addr, "GET", "/channels?topic=t", Some("root")).json()["channels"]
            .as_array()
            .map_or(0, Vec::len)
            == 1)
            .then_some(())
    });

    // nsqadmin with the root secret: sees and acts; its admin users decide who
    // may make it act
    let admin = start_admin(&[
        &lookupd_flag,
        "--http-secret=root",
        "--admin-user=alice",
        "--http-client-request-timeout=2s",
    ]);
    let topics = admin.get("/api/topics").json();
    assert_eq!(topics["topics"], serde_json::json!(["t"]), "{topics}");
    let as_user = |user: &str, path: &str, body: &str| {
        admin.req(
            "POST",
            path,
            &[
                ("Content-Type", "application/json"),
                ("X-Forwarded-User", user),
            ],
            Some(body.as_bytes()),
        )
    };
    let r = as_user("mallory", "/api/topics/t/c", r#"{"action":"pause"}"#);
    assert_eq!(r.status, 403, "{}", r.text());
    let r = as_user("alice", "/api/topics/t/c", r#"{"action":"pause"}"#);
    assert_eq!(r.status, 200, "{}", r.text());
    let stats = req(&nsqd.http_addr, "GET", "/stats?format=json", Some("root")).json();
    assert_eq!(stats["topics"][0]["channels"][0]["paused"], true, "{stats}");
    let r = as_user("alice", "/api/topics/t", r#"{"action":"empty"}"#);
    assert_eq!(r.status, 200, "{}", r.text());
    // the secret is nsqadmin's to send, never to show
    let r = admin.get("/config/http_secret");
    assert_eq!(r.status, 400, "{}", r.text());

    // an nsqadmin whose secret may only publish: the daemons refuse its admin action
    let weak = start_admin(&[
        &lookupd_flag,
        "--http-secret=pub-t",
        "--http-client-request-timeout=2s",
    ]);
    // (nsqadmin reports a failed nsqd as a warning, as NSQ's does)
    let r = weak.post_json("/api/topics/t/c", r#"{"action":"unpause"}"#);
    assert!(r.text().contains("403 Forbidden"), "{}", r.text());
    let stats = req(&nsqd.http_addr, "GET", "/stats?format=json", Some("root")).json();
    assert_eq!(stats["topics"][0]["channels"][0]["paused"], true, "{stats}");
    // and one without a secret lists nothing
    let none = start_admin(&[&lookupd_flag, "--http-client-request-timeout=2s"]);
    let r = none.get("/api/topics");
    assert!(
        r.status != 200 || r.json()["topics"] != serde_json::json!(["t"]),
        "{}",
        r.text()
    );
}

#[test]
fn apps_pass_their_secret_to_guarded_daemons() {
    let auth = auth_server();
    let auth_flag = format!("--auth-http-address={}", auth.addr);
    let lookupd = start_lookupd_with(&[&auth_flag, "--http-auth-required"]);
    let nsqd = Nsqd::start(&[
        &format!("--lookupd-tcp-address={}", lookupd.tcp_addr),
        "--broadcast-address=127.0.0.1",
        &auth_flag,
        "--http-auth-required",
    ]);
    let r = req(&nsqd.http_addr, "POST", "/pub?topic=t", Some("pub-t"));
    assert_eq!(r.status, 200);
    let r = req(
        &nsqd.http_addr,
        "POST",
        "/channel/create?topic=t&channel=c",
        Some("root"),
    );
    assert_eq!(r.status, 200);
    wait_for(Duration::from_secs(10), "registration", || {
        (req(&lookupd.http_addr, "GET", "/topics", Some("root")).json()["topics"]
            .as_array()
            .map_or(0, Vec::len)
            == 1)
            .then_some(())
    });
    let lookupd_flag = format!("--lookupd-http-address={}", lookupd.http_addr);
    // nsq_tail finds the nsqd through the guarded lookupd (TCP to nsqd is
    // plain: nsqd's TCP AUTH is a separate matter)
    let out = run_bin(
        "nsq_tail",
        &[
            &lookupd_flag,
            "--topic=t",
            "--channel=c",
            "-n=1",
            "--http-secret=sub-all",
            "--consumer-opt=auth_secret,sub-all",
        ],
        Duration::from_secs(20),
    );
    assert!(out.stdout.contains("hello"), "{out:?}");
    // nsq_stat reads /lookup and /stats
    let out = run_bin(
        "nsq_stat",
        &[
            &lookupd_flag,
            "--topic=t",
            "--channel=c",
            "--count=1",
            "--http-secret=root",
        ],
        Duration::from_secs(20),
    );
    assert_eq!(out.status.and_then(|s| s.code()), Some(0), "{out:?}");
    assert!(out.stdout.contains("depth"), "{out:?}");
    // without a secret, nsq_tail cannot find the nsqd
    let out = run_bin(
        "nsq_tail",
        &[
            &lookupd_flag,
            "--topic=t",
            "-n=1",
            "--consumer-opt=auth_secret,sub-all",
        ],
        Duration::from_secs(5),
    );
    assert!(!out.stdout.contains("hello"), "{out:?}");
    assert!(out.stderr.contains("401"), "{out:?}");
}

//! TLS between the daemons, black-box (issue 16, part 4): nsqlookupd
//! serving its HTTP API over HTTPS (`--https-address`) and its TCP listener
//! over TLS (`--tls-required`), nsqd registering with a `tls://` lookupd
//! address and verifying its certificate, the consumers (nsq_tail,
//! nsq_to_file with topic discovery, nsq_to_nsq, nsq_to_http), nsq_stat and
//! nsqadmin finding nsqds through an `https://` lookupd, nsqadmin reading
//! an nsqd over HTTPS, and the bad settings refused with a clear error.
//! The certificates are made at test time (`nsq_tests::pki`).

#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "../src/admin_util.rs"]
mod admin_util;

use admin_util::{start_admin, Recorder};
use nsq_tests::pki::{https_request, try_https_request, Pki};
use nsq_tests::*;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// An nsqlookupd with TLS flags, on free ports; stopped on drop.
struct TlsLookupd {
    child: Child,
    /// How the test's own HTTPS requests reach it.
    cfg: Arc<rustls::ClientConfig>,
    tcp: String,
    https: String,
    log: tempfile::TempDir,
}

impl TlsLookupd {
    /// `--https-address` and `--tls-required` with the PKI's server
    /// certificate, no plain HTTP listener, plus `extra`; waits until
    /// `/ping` answers over HTTPS.
    fn start(pki: &Pki, extra: &[&str]) -> TlsLookupd {
        TlsLookupd::start_as(pki, extra, pki.client_config(None))
    }

    /// [`TlsLookupd::start`], the test's requests made with `cfg`.
    fn start_as(pki: &Pki, extra: &[&str], cfg: Arc<rustls::ClientConfig>) -> TlsLookupd {
        let tcp = format!("127.0.0.1:{}", free_port());
        let https = format!("127.0.0.1:{}", free_port());
        TlsLookupd::start_on(pki, extra, cfg, tcp, https)
    }

    /// [`TlsLookupd::start_as`] on the given addresses (a restart).
    fn start_on(
        pki: &Pki,
        extra: &[&str],
        cfg: Arc<rustls::ClientConfig>,
        tcp: String,
        https: String,
    ) -> TlsLookupd {
        let log = tempfile::tempdir().unwrap();
        let child = Command::new(bin_path("nsqlookupd"))
            .arg(format!("--tcp-address={tcp}"))
            .arg("--http-address=")
            .arg(format!("--https-address={https}"))
            .arg("--tls-required")
            .arg(format!("--tls-cert={}", pki.path("cert.pem")))
            .arg(format!("--tls-key={}", pki.path("key.pem")))
            .arg("--broadcast-address=127.0.0.1")
            .args(extra)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log.path().join("stderr")).unwrap())
            .spawn()
            .expect("spawn nsqlookupd");
        let mut d = TlsLookupd {
            child,
            cfg,
            tcp,
            https,
            log,
        };
        let deadline = Instant::now() + secs(20);
        loop {
            if let Ok(Some(st)) = d.child.try_wait() {
                panic!("nsqlookupd exited with {st}: {}", d.stderr());
            }
            if let Ok(r) = try_https_request(&d.https, d.cfg.clone(), "GET", "/ping", None) {
                if r.status == 200 {
                    return d;
                }
            }
            assert!(Instant::now() < deadline, "no HTTPS /ping: {}", d.stderr());
            sleep_ms(50);
        }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.log.path().join("stderr")).unwrap_or_default()
    }

    /// The producers `/lookup?topic=` lists, asked over HTTPS.
    fn producers(&self, topic: &str) -> Vec<serde_json::Value> {
        let r = https_request(
            &self.https,
            self.cfg.clone(),
            "GET",
            &format!("/lookup?topic={topic}"),
            None,
        );
        if r.status != 200 {
            return Vec::new();
        }
        r.json()["producers"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

impl Drop for TlsLookupd {
    fn drop(&mut self) {
        terminate(&mut self.child, secs(5));
    }
}

/// An nsqd registered with `lookupd` over TLS (its CA given), holding a
/// message on `topic`, once the lookupd lists it.
fn registered_nsqd(pki: &Pki, lookupd: &TlsLookupd, topic: &str, extra: &[&str]) -> Nsqd {
    let mut args = vec![
        format!("--lookupd-tcp-address=tls://{}", lookupd.tcp),
        format!("--tls-root-ca-file={}", pki.path("ca.pem")),
        "--broadcast-address=127.0.0.1".to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let n = Nsqd::start(&args.iter().map(String::as_str).collect::<Vec<_>>());
    n.http_pub(topic, b"over tls");
    wait_for(secs(15), "the lookupd to list the nsqd", || {
        let p = lookupd.producers(topic);
        (p.len() == 1).then_some(())
    });
    n
}

/// An nsqd with `--tls-required=true` (its HTTP port answers only 403
/// naming the HTTPS port), registered with `lookupd` over TLS; stopped on
/// drop. The harness's `Nsqd` waits for a plain `/ping`, so this one is
/// started here and waited for over HTTPS.
struct TlsOnlyNsqd {
    child: Child,
    https: String,
    _data: tempfile::TempDir,
}

impl TlsOnlyNsqd {
    fn start(pki: &Pki, lookupd: &TlsLookupd) -> TlsOnlyNsqd {
        let data = tempfile::tempdir().unwrap();
        let https = format!("127.0.0.1:{}", free_port());
        let child = Command::new(bin_path("nsqd"))
            .arg(format!("--tcp-address=127.0.0.1:{}", free_port()))
            .arg(format!("--http-address=127.0.0.1:{}", free_port()))
            .arg(format!("--https-address={https}"))
            .arg(format!("--data-path={}", data.path().display()))
            .arg(format!("--lookupd-tcp-address=tls://{}", lookupd.tcp))
            .arg(format!("--tls-root-ca-file={}", pki.path("ca.pem")))
            .arg("--broadcast-address=127.0.0.1")
            .arg("--tls-required=true")
            .args(pki.flags())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn nsqd");
        let mut n = TlsOnlyNsqd {
            child,
            https,
            _data: data,
        };
        let deadline = Instant::now() + secs(20);
        loop {
            if let Ok(Some(st)) = n.child.try_wait() {
                panic!("nsqd exited with {st}");
            }
            let ping = try_https_request(&n.https, pki.client_config(None), "GET", "/ping", None);
            if ping.is_ok_and(|r| r.status == 200) {
                return n;
            }
            assert!(Instant::now() < deadline, "no HTTPS /ping from nsqd");
            sleep_ms(50);
        }
    }
}

impl Drop for TlsOnlyNsqd {
    fn drop(&mut self) {
        terminate(&mut self.child, secs(5));
    }
}

#[test]
fn nsqd_registers_over_tls_and_nsq_tail_finds_it_through_https_lookupd() {
    let pki = Pki::new();
    let lookupd = TlsLookupd::start(&pki, &[]);
    let n = registered_nsqd(&pki, &lookupd, "tls_t", &[]);
    let p = &lookupd.producers("tls_t")[0];
    assert_eq!(p["tcp_port"], n.tcp_port, "{p}");
    assert_eq!(p["http_port"], n.http_port, "{p}");

    // The TCP listener speaks TLS from the first byte: a plain V1 client
    // gets no V1 answer, only a closed connection (or TLS alert bytes).
    let mut plain = TcpStream::connect(&lookupd.tcp).unwrap();
    plain.set_read_timeout(Some(secs(5))).unwrap();
    plain.write_all(b"  V1PING\n").unwrap();
    let mut buf = Vec::new();
    let _ = plain.read_to_end(&mut buf);
    assert!(
        !buf.windows(2).any(|w| w == b"OK"),
        "plain V1 answered: {buf:?}"
    );

    // A consumer given the lookupd as https:// and the CA finds the nsqd.
    let out = run_bin(
        "nsq_tail",
        &[
            &format!("--lookupd-http-address=https://{}", lookupd.https),
            &format!("--consumer-opt=tls_root_ca_file,{}", pki.path("ca.pem")),
            "--topic=tls_t",
            "--n=1",
        ],
        secs(30),
    );
    assert!(out.status.is_some_and(|s| s.success()), "nsq_tail: {out:?}");
    assert_eq!(out.stdout, "over tls\n", "{out:?}");

    // nsq_stat (no TLS flags of its own) trusts what the system trusts,
    // which SSL_CERT_FILE names, as in Go.
    assert_eq!(
        n.post("/channel/create?topic=tls_t&channel=ch", b"").status,
        200
    );
    n.http_pub("tls_t", b"for nsq_stat");
    let dir = tempfile::tempdir().unwrap();
    let stdout = dir.path().join("stdout");
    let mut stat = Command::new(bin_path("nsq_stat"))
        .arg(format!("--lookupd-http-address=https://{}", lookupd.https))
        .args([
            "--topic=tls_t",
            "--channel=ch",
            "--interval=1s",
            "--count=1",
        ])
        .env("SSL_CERT_FILE", pki.path("ca.pem"))
        .stdout(std::fs::File::create(&stdout).unwrap())
        .stderr(std::fs::File::create(dir.path().join("stderr")).unwrap())
        .spawn()
        .expect("spawn nsq_stat");
    let st = wait_timeout(&mut stat, secs(20));
    if st.is_none() {
        terminate(&mut stat, secs(2));
    }
    let out = std::fs::read_to_string(&stdout).unwrap_or_default();
    let err = std::fs::read_to_string(dir.path().join("stderr")).unwrap_or_default();
    assert!(
        st.is_some_and(|s| s.success()),
        "nsq_stat: {st:?} {out} {err}"
    );
    // two header lines, then one row: the channel's depth (total, mem) is
    // the message published, read from the nsqd the lookupd listed.
    let row = out.lines().nth(2).unwrap_or_default();
    let depth: Vec<&str> = row
        .split('|')
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(depth.get(..2), Some(&["1", "1"][..]), "{out}");
}

#[test]
fn nsqadmin_reads_an_https_lookupd_and_an_https_nsqd() {
    let pki = Pki::new();
    let lookupd = TlsLookupd::start(&pki, &[]);
    let tls_flags = pki.flags();
    let extra: Vec<&str> = tls_flags.iter().map(String::as_str).collect();
    let n = registered_nsqd(&pki, &lookupd, "admin_tls", &extra);
    let ca = format!("--http-client-tls-root-ca-file={}", pki.path("ca.pem"));

    let through_lookupd = start_admin(&[
        &format!("--lookupd-http-address=https://{}", lookupd.https),
        &ca,
    ]);
    let r = through_lookupd.get("/api/topics");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["topics"], serde_json::json!(["admin_tls"]));
    // ... and from there the nsqd's own stats (over its HTTP port).
    let r = through_lookupd.get("/api/topics/admin_tls");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["depth"], 1, "{}", r.text());

    // An nsqd with --tls-required=true refuses its HTTP port (403 naming
    // the HTTPS port): nsqadmin, sent there by the lookupd, follows it.
    let tls_only = TlsOnlyNsqd::start(&pki, &lookupd);
    let r = https_request(
        &tls_only.https,
        pki.client_config(None),
        "POST",
        "/pub?topic=admin_tls",
        Some(b"to the tls-only nsqd"),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    wait_for(secs(15), "the lookupd to list both nsqds", || {
        (lookupd.producers("admin_tls").len() == 2).then_some(())
    });
    let r = through_lookupd.get("/api/topics/admin_tls");
    assert_eq!(r.status, 200, "{}", r.text());
    let j = r.json();
    assert_eq!(j["depth"], 2, "{j}");
    assert_eq!(j["nodes"].as_array().map(Vec::len), Some(2), "{j}");

    let direct = start_admin(&[
        &format!("--nsqd-http-address=https://{}", n.https_addr),
        &ca,
    ]);
    let r = direct.get("/api/topics");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["topics"], serde_json::json!(["admin_tls"]));
}

#[test]
fn an_untrusted_lookupd_certificate_is_refused() {
    let pki = Pki::new();
    let other = Pki::new();
    let lookupd = TlsLookupd::start(&pki, &[]);
    // nsqd trusts another CA: it never registers.
    let n = Nsqd::start(&[
        &format!("--lookupd-tcp-address=tls://{}", lookupd.tcp),
        &format!("--tls-root-ca-file={}", other.path("ca.pem")),
    ]);
    n.http_pub("untrusted", b"x");
    let deadline = Instant::now() + secs(3);
    while Instant::now() < deadline {
        assert!(lookupd.producers("untrusted").is_empty());
        sleep_ms(200);
    }
    wait_for(secs(10), "nsqd to log the TLS failure", || {
        let log = n.stderr();
        (log.contains("LOOKUPD connect failed") && log.contains("TLS: invalid peer certificate"))
            .then_some(())
    });

    // nsq_tail trusting another CA cannot query the lookupd and says why.
    let out = run_bin(
        "nsq_tail",
        &[
            &format!("--lookupd-http-address=https://{}", lookupd.https),
            &format!("--consumer-opt=tls_root_ca_file,{}", other.path("ca.pem")),
            "--topic=untrusted",
        ],
        secs(3),
    );
    assert!(out.status.is_none(), "nsq_tail keeps retrying: {out:?}");
    assert!(
        out.stderr.contains("error querying nsqlookupd"),
        "{}",
        out.stderr
    );
}

#[test]
fn bad_tls_settings_are_clear_startup_errors() {
    let pki = Pki::new();
    let port = || format!("127.0.0.1:{}", free_port());
    let fails = |args: &[&str], want: &str| {
        let out = run_bin("nsqlookupd", args, secs(10));
        assert_eq!(
            out.status.and_then(|s| s.code()),
            Some(1),
            "{args:?}: {out:?}"
        );
        assert!(
            out.stderr.contains(want),
            "{args:?}: want {want:?} in {}",
            out.stderr
        );
    };
    let (tcp, http, https) = (
        format!("--tcp-address={}", port()),
        format!("--http-address={}", port()),
        format!("--https-address={}", port()),
    );
    fails(
        &[&tcp, &http, &https],
        "--https-address and --tls-required need --tls-cert and --tls-key",
    );
    fails(
        &[&tcp, &http, "--tls-required"],
        "--https-address and --tls-required need --tls-cert and --tls-key",
    );
    let cert = format!("--tls-cert={}", pki.path("cert.pem"));
    let key = format!("--tls-key={}", pki.path("key.pem"));
    fails(&[&tcp, &http, &cert, &key], "nothing serves TLS");
    fails(
        &[&tcp, &http, &https, &cert, "--tls-key=/nonexistent/key.pem"],
        "open /nonexistent/key.pem",
    );
    fails(
        &[
            &tcp,
            &http,
            &https,
            &cert,
            &key,
            "--tls-client-auth-policy=maybe",
        ],
        "--tls-client-auth-policy must be require or require-verify",
    );
    fails(
        &[&tcp, "--http-address=", &cert, &key],
        "--http-address or --https-address required",
    );
    let not_pem = pki.path("not.pem");
    std::fs::write(&not_pem, "not a certificate").unwrap();
    fails(
        &[
            &tcp,
            &http,
            &https,
            &cert,
            &key,
            "--tls-client-auth-policy=require-verify",
            &format!("--tls-root-ca-file={not_pem}"),
        ],
        &format!("failed to append certificate to pool (--tls-root-ca-file={not_pem})"),
    );
    // A certificate or key file that is not PEM: Go's words, the flag and the file.
    fails(
        &[&tcp, &http, &https, &format!("--tls-cert={not_pem}"), &key],
        &format!("tls: failed to find any PEM data in certificate input (--tls-cert={not_pem})"),
    );
    fails(
        &[&tcp, &http, &https, &cert, &format!("--tls-key={not_pem}")],
        &format!("tls: failed to find any PEM data in key input (--tls-key={not_pem})"),
    );

    // A consumer with an unreadable CA file fails at once, naming it.
    let out = run_bin(
        "nsq_tail",
        &[
            "--lookupd-http-address=https://127.0.0.1:1",
            "--consumer-opt=tls_root_ca_file,/nonexistent/ca.pem",
            "--topic=t",
        ],
        secs(10),
    );
    assert_eq!(out.status.and_then(|s| s.code()), Some(1), "{out:?}");
    assert!(out.stderr.contains("/nonexistent/ca.pem"), "{}", out.stderr);
}

#[test]
fn lookupd_tls_client_auth_require_verify() {
    let pki = Pki::new();
    let lookupd = TlsLookupd::start_as(
        &pki,
        &[
            "--tls-client-auth-policy=require-verify",
            &format!("--tls-root-ca-file={}", pki.path("ca.pem")),
        ],
        pki.client_config(Some(pki.client_cert("nsqadmin"))),
    );
    // Without a client certificate the HTTPS request is refused.
    assert!(try_https_request(
        &lookupd.https,
        pki.client_config(None),
        "GET",
        "/ping",
        None
    )
    .is_err());
    // An nsqd without a certificate cannot register over TLS ...
    let anonymous = Nsqd::start(&[
        &format!("--lookupd-tcp-address=tls://{}", lookupd.tcp),
        &format!("--tls-root-ca-file={}", pki.path("ca.pem")),
    ]);
    anonymous.http_pub("anon", b"x");
    // ... one presenting its --tls-cert, signed by the CA, can.
    let tls_flags = pki.flags();
    let extra: Vec<&str> = tls_flags.iter().map(String::as_str).collect();
    let _n = registered_nsqd(&pki, &lookupd, "mutual", &extra);
    assert!(lookupd.producers("anon").is_empty());
    wait_for(secs(10), "the refused nsqd to log it", || {
        anonymous
            .stderr()
            .contains("LOOKUPD connect failed")
            .then_some(())
    });
}

#[test]
fn nsqadmin_posts_notifications_to_an_https_endpoint() {
    let pki = Pki::new();
    let rec = Recorder::start_tls(pki.server_config());
    let port = rec.addr.rsplit_once(':').unwrap().1.to_string();
    let n = Nsqd::start(&[]);
    n.http_pub("notify_t", b"x");
    let admin = start_admin(&[
        &format!("--nsqd-http-address={}", n.http_addr),
        &format!("--notification-http-endpoint=https://localhost:{port}/notify"),
        &format!("--http-client-tls-root-ca-file={}", pki.path("ca.pem")),
    ]);
    let r = admin.req(
        "POST",
        "/api/topics/notify_t",
        &[("Content-Type", "application/json")],
        Some(br#"{"action":"pause"}"#),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let got = rec.wait(1, secs(10));
    assert_eq!(
        got.len(),
        1,
        "one notification over HTTPS: {}",
        admin.stderr()
    );
    assert_eq!(
        (got[0].method.as_str(), got[0].path.as_str()),
        ("POST", "/notify")
    );
    let body = String::from_utf8_lossy(&got[0].body).to_string();
    assert!(body.contains(r#""action":"pause_topic""#), "{body}");
}

#[test]
fn nsqd_registers_again_over_tls_after_the_lookupd_restarts() {
    let pki = Pki::new();
    let lookupd = TlsLookupd::start(&pki, &[]);
    let (tcp, https) = (lookupd.tcp.clone(), lookupd.https.clone());
    let _n = registered_nsqd(&pki, &lookupd, "restart_t", &[]);
    drop(lookupd);
    // The same addresses, an empty registry: nsqd's next PING finds the
    // connection gone, reconnects over TLS and registers everything again.
    let lookupd = TlsLookupd::start_on(&pki, &[], pki.client_config(None), tcp, https);
    wait_for(secs(40), "nsqd to register again", || {
        (lookupd.producers("restart_t").len() == 1).then_some(())
    });
}

/// A utility app running until the test stops it, its output kept.
struct Running {
    child: Child,
    name: &'static str,
    logs: tempfile::TempDir,
}

impl Running {
    fn start(name: &'static str, args: &[String]) -> Running {
        let logs = tempfile::tempdir().unwrap();
        let child = Command::new(bin_path(name))
            .args(args)
            .stdout(std::fs::File::create(logs.path().join("stdout")).unwrap())
            .stderr(std::fs::File::create(logs.path().join("stderr")).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        Running { child, name, logs }
    }

    fn output(&self) -> String {
        let read = |f: &str| std::fs::read_to_string(self.logs.path().join(f)).unwrap_or_default();
        format!(
            "{} stdout:\n{}\nstderr:\n{}",
            self.name,
            read("stdout"),
            read("stderr")
        )
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        terminate(&mut self.child, secs(5));
    }
}

#[test]
fn nsq_to_file_nsq_to_nsq_and_nsq_to_http_find_nsqds_through_an_https_lookupd() {
    let pki = Pki::new();
    let lookupd = TlsLookupd::start(&pki, &[]);
    let src = registered_nsqd(&pki, &lookupd, "tls_apps", &[]);
    // The message registered_nsqd left went to no channel yet: each app's
    // channel exists before the one all three must receive.
    for ch in ["file", "copy", "http"] {
        let r = src.post(&format!("/channel/create?topic=tls_apps&channel={ch}"), b"");
        assert_eq!(r.status, 200);
    }
    src.http_pub("tls_apps", b"to all three");
    let dst = Nsqd::start(&[]);
    let lookupd_url = format!("--lookupd-http-address=https://{}", lookupd.https);
    let ca = format!("--consumer-opt=tls_root_ca_file,{}", pki.path("ca.pem"));

    // nsq_to_file discovers the topic by pattern (lookupd's /topics over
    // HTTPS), then consumes it through the same lookupd.
    let out_dir = tempfile::tempdir().unwrap();
    let to_file = Running::start(
        "nsq_to_file",
        &[
            lookupd_url.clone(),
            ca.clone(),
            "--topic-pattern=^tls_apps$".into(),
            "--topic-refresh=1s".into(),
            "--channel=file".into(),
            format!("--output-dir={}", out_dir.path().display()),
            "--sync-interval=100ms".into(),
        ],
    );
    let to_nsq = Running::start(
        "nsq_to_nsq",
        &[
            lookupd_url.clone(),
            ca.clone(),
            "--topic=tls_apps".into(),
            "--channel=copy".into(),
            format!("--destination-nsqd-tcp-address=127.0.0.1:{}", dst.tcp_port),
            "--destination-topic=copied".into(),
        ],
    );
    let to_http = Running::start(
        "nsq_to_http",
        &[
            lookupd_url,
            ca,
            "--topic=tls_apps".into(),
            "--channel=http".into(),
            format!("--post=http://127.0.0.1:{}/pub?topic=posted", dst.http_port),
        ],
    );

    let in_files = || -> String {
        std::fs::read_dir(out_dir.path())
            .map(|d| {
                d.flatten()
                    .filter_map(|e| std::fs::read_to_string(e.path()).ok())
                    .collect()
            })
            .unwrap_or_default()
    };
    let depth = |topic: &str| dst.topic_stats(topic).map_or(0, |t| int(&t, "depth"));
    let deadline = Instant::now() + secs(30);
    let done =
        || in_files().contains("to all three") && depth("copied") >= 1 && depth("posted") >= 1;
    while !done() && Instant::now() < deadline {
        sleep_ms(100);
    }
    assert!(
        done(),
        "files {:?}, copied {}, posted {}\n{}\n{}\n{}",
        in_files(),
        depth("copied"),
        depth("posted"),
        to_file.output(),
        to_nsq.output(),
        to_http.output()
    );
    drop(src);
}

//! nsq_to_file and nsq_to_http, black-box: the real binaries against a real
//! nsqlookupd + nsqd, files checked on disk, HTTP checked at a small server
//! written here (std `TcpListener`, keep-alive aware).
//!
//! * NSQ's quick start, ending with nsq_to_file started before its topic
//!   exists; messages from before and after it connects land in
//!   `test.<host>.<datetime>.log` exactly once, FINed only after a sync.
//! * File naming, rotation by size and by interval, `--skip-empty-files`,
//!   gzip (multi-member) with `--work-dir`, topic discovery by pattern.
//! * nsq_to_http in GET (`%s`) and POST form, with round-robin, all-endpoint
//!   and hostpool modes, and a failing endpoint making nsqd redeliver.

#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nsq_tests::*;

// ---------------------------------------------------------------------------
// nsqlookupd (same starter as cluster.rs)
// ---------------------------------------------------------------------------

fn nsqd_for(l: &Lookupd) -> Nsqd {
    let a = format!("--lookupd-tcp-address={}", l.tcp);
    Nsqd::start(&[a.as_str(), "--broadcast-address=127.0.0.1"])
}

// ---------------------------------------------------------------------------
// the apps as child processes
// ---------------------------------------------------------------------------

/// nsq_to_file / nsq_to_http running with stderr kept for diagnostics.
struct App {
    child: Child,
    name: &'static str,
    logs: tempfile::TempDir,
}

impl App {
    fn start(name: &'static str, args: &[String]) -> App {
        let logs = tempfile::Builder::new()
            .prefix("app-log-")
            .tempdir()
            .unwrap();
        let child = Command::new(bin_path(name))
            .args(args)
            .stdin(Stdio::null())
            .stdout(fs::File::create(logs.path().join("stdout")).unwrap())
            .stderr(fs::File::create(logs.path().join("stderr")).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        App { child, name, logs }
    }

    fn stderr(&self) -> String {
        fs::read_to_string(self.logs.path().join("stderr")).unwrap_or_default()
    }

    /// SIGTERM; the exit status (panics with the log if it does not exit).
    fn sigterm(&mut self, timeout: Duration) -> ExitStatus {
        send_signal(self.child.id(), libc::SIGTERM);
        wait_timeout(&mut self.child, timeout).unwrap_or_else(|| {
            panic!(
                "{} did not exit after SIGTERM; stderr:\n{}",
                self.name,
                self.stderr()
            )
        })
    }

    fn assert_running(&mut self) {
        if let Ok(Some(st)) = self.child.try_wait() {
            panic!("{} exited with {st}; stderr:\n{}", self.name, self.stderr());
        }
    }
}

impl Drop for App {
    fn drop(&mut self) {
        terminate(&mut self.child, Duration::from_secs(5));
    }
}

fn short_hostname() -> String {
    let h = fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    h.trim().split('.').next().unwrap().to_string()
}

/// Sorted file names in `dir`.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

/// Every line of every plain file in `dir`.
fn all_lines(dir: &Path) -> Vec<String> {
    names(dir)
        .iter()
        .flat_map(|n| {
            fs::read_to_string(dir.join(n))
                .unwrap()
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// `<prefix>` + `YYYY-MM-DD_HH` + `<suffix>`?
fn is_dated(name: &str, prefix: &str, suffix: &str) -> bool {
    let Some(mid) = name
        .strip_prefix(prefix)
        .and_then(|r| r.strip_suffix(suffix))
    else {
        return false;
    };
    let b = mid.as_bytes();
    b.len() == 13
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'_',
            _ => c.is_ascii_digit(),
        })
}

/// Waits until the channel exists and has `n` clients.
fn wait_clients(n: &Nsqd, topic: &str, channel: &str, count: usize) {
    wait_for(
        Duration::from_secs(20),
        &format!("{count} client(s) on {topic}/{channel}"),
        || {
            let c = n.channel_stats(topic, channel)?;
            (c["clients"].as_array().map_or(0, |a| a.len()) == count).then_some(())
        },
    );
}

/// Asserts nsqd considers every message of the channel done.
fn assert_drained(n: &Nsqd, topic: &str, channel: &str, messages: i64, requeued: i64) {
    let c = wait_for(Duration::from_secs(10), "channel drained", || {
        let c = n.channel_stats(topic, channel)?;
        (int(&c, "depth") == 0 && int(&c, "in_flight_count") == 0).then_some(c)
    });
    assert_eq!(int(&c, "message_count"), messages, "{c}");
    assert_eq!(int(&c, "requeue_count"), requeued, "{c}");
    assert_eq!(int(&c, "timeout_count"), 0, "{c}");
}

/// `gzip -dc` of a file (multi-member streams included).
fn gunzip(path: &Path) -> String {
    let out = Command::new("gzip")
        .arg("-dc")
        .arg(path)
        .output()
        .expect("run gzip -dc");
    assert!(
        out.status.success(),
        "gzip -dc {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

// ---------------------------------------------------------------------------
// nsq_to_file
// ---------------------------------------------------------------------------

#[test]
fn quick_start_nsq_to_file_started_before_the_topic_exists() {
    let l = Lookupd::start(&[]);
    let n = nsqd_for(&l);
    let out = tempfile::tempdir().unwrap();
    let mut app = App::start(
        "nsq_to_file",
        &[
            "--topic=test".to_string(),
            format!("--output-dir={}", out.path().display()),
            format!("--lookupd-http-address={}", l.http),
            "--consumer-opt=lookupd_poll_interval,1s".to_string(),
        ],
    );
    // Let it make its first (empty) lookup, then create the topic.
    sleep_ms(300);
    app.assert_running();
    for i in 0..5 {
        n.http_pub("test", format!("before {i}").as_bytes());
    }
    let clients = n
        .channel_stats("test", "nsq_to_file")
        .and_then(|c| c["clients"].as_array().map(Vec::len))
        .unwrap_or(0);
    assert_eq!(clients, 0, "connected before the messages were published");
    wait_clients(&n, "test", "nsq_to_file", 1);
    for i in 0..5 {
        n.http_pub("test", format!("after {i}").as_bytes());
    }
    wait_for(Duration::from_secs(10), "10 lines written", || {
        (all_lines(out.path()).len() == 10).then_some(())
    });
    // Written but not synced yet (--sync-interval 30s), so not FINed --
    // except the first: opening a file forces a sync in NSQ's loop.
    let c = n.channel_stats("test", "nsq_to_file").unwrap();
    assert_eq!(
        int(&c, "in_flight_count"),
        9,
        "messages FINed before a sync: {c}\nstderr:\n{}",
        app.stderr()
    );

    let st = app.sigterm(Duration::from_secs(20));
    assert_eq!(st.code(), Some(0), "stderr:\n{}", app.stderr());
    let files = names(out.path());
    assert_eq!(files.len(), 1, "{files:?}");
    // Default format, no <REV>: test.<short host>.<YYYY-MM-DD_HH>.log
    assert!(
        is_dated(&files[0], &format!("test.{}.", short_hostname()), ".log"),
        "{files:?}"
    );
    let mut lines = all_lines(out.path());
    lines.sort();
    let mut want: Vec<String> = (0..5)
        .flat_map(|i| [format!("before {i}"), format!("after {i}")])
        .collect();
    want.sort();
    assert_eq!(lines, want, "every message exactly once");
    assert_drained(&n, "test", "nsq_to_file", 10, 0);
    assert!(
        app.stderr().contains("syncing 9 records to disk"),
        "stderr:\n{}",
        app.stderr()
    );
}

#[test]
fn rotation_by_size_numbers_revisions() {
    let n = Nsqd::start(&[]);
    let out = tempfile::tempdir().unwrap();
    let mut app = App::start(
        "nsq_to_file",
        &[
            "--topic=rot".to_string(),
            format!("--nsqd-tcp-address={}", n.tcp_addr),
            format!("--output-dir={}", out.path().display()),
            "--rotate-size=50".to_string(),
        ],
    );
    wait_clients(&n, "rot", "nsq_to_file", 1);
    // 20 lines of 11 bytes: a file is left once it holds more than 50 bytes.
    for i in 0..20 {
        n.http_pub("rot", format!("message-{i:02}").as_bytes());
    }
    wait_for(Duration::from_secs(10), "20 lines written", || {
        (all_lines(out.path()).len() == 20).then_some(())
    });
    assert_eq!(
        app.sigterm(Duration::from_secs(20)).code(),
        Some(0),
        "stderr:\n{}",
        app.stderr()
    );
    let files = names(out.path());
    assert_eq!(files.len(), 4, "{files:?}");
    let host = short_hostname();
    for (rev, f) in files.iter().enumerate() {
        assert!(
            is_dated(f, &format!("rot.{host}-{rev:06}."), ".log"),
            "{files:?}"
        );
        let text = fs::read_to_string(out.path().join(f)).unwrap();
        assert_eq!(text.len(), 55, "{f}: {text:?}");
    }
    let lines: BTreeSet<String> = all_lines(out.path()).into_iter().collect();
    assert_eq!(lines, (0..20).map(|i| format!("message-{i:02}")).collect());
    assert_drained(&n, "rot", "nsq_to_file", 20, 0);
}

#[test]
fn rotation_by_interval_with_skip_empty_files() {
    let n = Nsqd::start(&[]);
    let out = tempfile::tempdir().unwrap();
    let mut app = App::start(
        "nsq_to_file",
        &[
            "--topic=tick".to_string(),
            format!("--nsqd-tcp-address={}", n.tcp_addr),
            format!("--output-dir={}", out.path().display()),
            "--rotate-interval=1s".to_string(),
            "--sync-interval=300ms".to_string(),
            "--skip-empty-files".to_string(),
        ],
    );
    wait_clients(&n, "tick", "nsq_to_file", 1);
    for batch in 0..3 {
        for i in 0..3 {
            n.http_pub("tick", format!("b{batch}-{i}").as_bytes());
        }
        wait_for(Duration::from_secs(10), "batch written", || {
            (all_lines(out.path()).len() == 3 * (batch + 1)).then_some(())
        });
        // Synced (and so FINed) by the ticker, well before the 30 s default.
        wait_for(Duration::from_secs(5), "batch FINed", || {
            let c = n.channel_stats("tick", "nsq_to_file")?;
            (int(&c, "in_flight_count") == 0).then_some(())
        });
        sleep_ms(1800);
    }
    assert_eq!(
        app.sigterm(Duration::from_secs(20)).code(),
        Some(0),
        "stderr:\n{}",
        app.stderr()
    );
    let files = names(out.path());
    // One file per batch; the ticker closed each when it expired instead
    // of opening empty ones.
    assert_eq!(files.len(), 3, "{files:?}\nstderr:\n{}", app.stderr());
    let host = short_hostname();
    for (rev, f) in files.iter().enumerate() {
        assert!(
            is_dated(f, &format!("tick.{host}-{rev:06}."), ".log"),
            "{files:?}"
        );
        let text = fs::read_to_string(out.path().join(f)).unwrap();
        assert_eq!(text, format!("b{rev}-0\nb{rev}-1\nb{rev}-2\n"), "{f}");
    }
    assert_drained(&n, "tick", "nsq_to_file", 9, 0);
}

#[test]
fn gzip_with_work_dir_moves_a_multi_member_file() {
    let n = Nsqd::start(&[]);
    let out = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let mut app = App::start(
        "nsq_to_file",
        &[
            "--topic=gz".to_string(),
            format!("--nsqd-tcp-address={}", n.tcp_addr),
            format!("--output-dir={}", out.path().display()),
            format!("--work-dir={}", work.path().display()),
            "--gzip".to_string(),
            "--gzip-level=9".to_string(),
            "--sync-interval=200ms".to_string(),
        ],
    );
    wait_clients(&n, "gz", "nsq_to_file", 1);
    for i in 0..10 {
        n.http_pub("gz", format!("first {i}").as_bytes());
    }
    wait_for(Duration::from_secs(10), "first batch synced", || {
        let c = n.channel_stats("gz", "nsq_to_file")?;
        (int(&c, "message_count") == 10 && int(&c, "in_flight_count") == 0).then_some(())
    });
    for i in 0..10 {
        n.http_pub("gz", format!("second {i}").as_bytes());
    }
    wait_for(Duration::from_secs(10), "second batch synced", || {
        let c = n.channel_stats("gz", "nsq_to_file")?;
        (int(&c, "message_count") == 20 && int(&c, "in_flight_count") == 0).then_some(())
    });
    // In progress: in the work dir, nothing in the output dir yet.
    assert_eq!(names(work.path()).len(), 1);
    assert!(names(out.path()).is_empty());
    assert_eq!(
        app.sigterm(Duration::from_secs(20)).code(),
        Some(0),
        "stderr:\n{}",
        app.stderr()
    );

    assert!(
        names(work.path()).is_empty(),
        "left in work dir: {:?}",
        names(work.path())
    );
    let files = names(out.path());
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(
        is_dated(
            &files[0],
            &format!("gz.{}-000000.", short_hostname()),
            ".log.gz"
        ),
        "{files:?}"
    );
    let path = out.path().join(&files[0]);
    let raw = fs::read(&path).unwrap();
    let members = raw.windows(3).filter(|w| *w == [0x1f, 0x8b, 0x08]).count();
    assert!(members >= 2, "one gzip member per sync, got {members}");
    let mut lines: Vec<String> = gunzip(&path).lines().map(str::to_string).collect();
    lines.sort();
    let mut want: Vec<String> = (0..10)
        .flat_map(|i| [format!("first {i}"), format!("second {i}")])
        .collect();
    want.sort();
    assert_eq!(lines, want);
    assert_drained(&n, "gz", "nsq_to_file", 20, 0);
}

#[test]
fn sighup_closes_and_moves_the_file_and_the_next_message_opens_a_new_revision() {
    let n = Nsqd::start(&[]);
    let out = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let mut app = App::start(
        "nsq_to_file",
        &[
            "--topic=hup".to_string(),
            format!("--nsqd-tcp-address={}", n.tcp_addr),
            format!("--output-dir={}", out.path().display()),
            format!("--work-dir={}", work.path().display()),
        ],
    );
    wait_clients(&n, "hup", "nsq_to_file", 1);
    for i in 0..3 {
        n.http_pub("hup", format!("one {i}").as_bytes());
    }
    wait_for(Duration::from_secs(10), "3 lines in the work dir", || {
        (all_lines(work.path()).len() == 3).then_some(())
    });
    send_signal(app.child.id(), libc::SIGHUP);
    // Synced (FINed), closed and moved to the output dir.
    wait_for(Duration::from_secs(10), "file moved on SIGHUP", || {
        (names(out.path()).len() == 1 && names(work.path()).is_empty()).then_some(())
    });
    wait_for(Duration::from_secs(5), "FINed on SIGHUP", || {
        let c = n.channel_stats("hup", "nsq_to_file")?;
        (int(&c, "in_flight_count") == 0).then_some(())
    });
    n.http_pub("hup", b"two");
    wait_for(
        Duration::from_secs(10),
        "a new file for the next message",
        || (all_lines(work.path()).len() == 1).then_some(()),
    );
    app.assert_running();
    assert_eq!(
        app.sigterm(Duration::from_secs(20)).code(),
        Some(0),
        "stderr:\n{}",
        app.stderr()
    );
    let files = names(out.path());
    let host = short_hostname();
    assert_eq!(files.len(), 2, "{files:?}");
    assert!(
        is_dated(&files[0], &format!("hup.{host}-000000."), ".log"),
        "{files:?}"
    );
    assert!(
        is_dated(&files[1], &format!("hup.{host}-000001."), ".log"),
        "{files:?}"
    );
    assert_eq!(
        fs::read_to_string(out.path().join(&files[0])).unwrap(),
        "one 0\none 1\none 2\n"
    );
    assert_eq!(
        fs::read_to_string(out.path().join(&files[1])).unwrap(),
        "two\n"
    );
    assert_drained(&n, "hup", "nsq_to_file", 4, 0);
}

#[test]
fn topic_pattern_discovers_new_topics_through_lookupd() {
    let l = Lookupd::start(&[]);
    let n = nsqd_for(&l);
    let out = tempfile::tempdir().unwrap();
    let mut app = App::start(
        "nsq_to_file",
        &[
            "--topic-pattern=^disc".to_string(),
            "--topic-refresh=500ms".to_string(),
            format!("--output-dir={}", out.path().display()),
            format!("--lookupd-http-address={}", l.http),
            "--filename-format=<TOPIC>/<HOST>.log".to_string(),
            "--host-identifier=id-<SHORT_HOST>".to_string(),
        ],
    );
    sleep_ms(300);
    app.assert_running();
    n.http_pub("disc_a", b"a1");
    n.http_pub("other", b"o1");
    wait_clients(&n, "disc_a", "nsq_to_file", 1);
    n.http_pub("disc_a", b"a2");
    let file = out
        .path()
        .join("disc_a")
        .join(format!("id-{}.log", short_hostname()));
    wait_for(Duration::from_secs(10), "disc_a file has 2 lines", || {
        (fs::read_to_string(&file).ok()?.lines().count() == 2).then_some(())
    });
    assert_eq!(
        app.sigterm(Duration::from_secs(20)).code(),
        Some(0),
        "stderr:\n{}",
        app.stderr()
    );
    assert_eq!(fs::read_to_string(&file).unwrap(), "a1\na2\n");
    assert_eq!(
        names(out.path()),
        ["disc_a"],
        "only the matching topic is archived"
    );
    assert!(n.channel_stats("other", "nsq_to_file").is_none());
    assert!(
        app.stderr()
            .contains("skipping topic other (doesn't match pattern ^disc)"),
        "stderr:\n{}",
        app.stderr()
    );
}

#[test]
fn nsq_to_file_command_line() {
    let r = run_bin("nsq_to_file", &["--version"], Duration::from_secs(5));
    assert_eq!(
        (r.status.and_then(|s| s.code()), r.stdout.as_str()),
        (Some(0), "nsq_to_file v1.3.0\n")
    );
    let r = run_bin("nsq_to_file", &["--help"], Duration::from_secs(5));
    assert_eq!(r.status.and_then(|s| s.code()), Some(0));
    assert!(r.stderr.starts_with("Usage of nsqd:\n"), "{}", r.stderr);
    assert!(
        r.stderr.contains("  -rotate-size rotate-size\n"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("(default \"<TOPIC>.<HOST><REV>.<DATETIME>.log\")"),
        "{}",
        r.stderr
    );
    let r = run_bin("nsq_to_file", &["--bogus"], Duration::from_secs(5));
    assert_eq!(r.status.and_then(|s| s.code()), Some(2));
    assert!(
        r.stderr
            .starts_with("flag provided but not defined: -bogus\nUsage of nsqd:\n"),
        "{}",
        r.stderr
    );
    for (a, msg) in [
        (
            vec!["--topic=t"],
            "--nsqd-tcp-address or --lookupd-http-address required.",
        ),
        (
            vec![
                "--topic=t",
                "--nsqd-tcp-address=a",
                "--lookupd-http-address=b",
            ],
            "use --nsqd-tcp-address or --lookupd-http-address not both",
        ),
        (
            vec!["--nsqd-tcp-address=a"],
            "--topic or --topic-pattern required",
        ),
        (
            vec!["--nsqd-tcp-address=a", "--topic-pattern=x"],
            "--lookupd-http-address must be specified when no --topic specified",
        ),
        (
            vec!["--topic=t", "--nsqd-tcp-address=a", "--gzip-level=10"],
            "invalid --gzip-level value (10), should be 1-9",
        ),
        (
            vec!["--topic=t", "--nsqd-tcp-address=a", "--channel="],
            "--channel is required",
        ),
        (
            vec!["--topic=t", "--nsqd-tcp-address=a", "extra"],
            "unknown arguments: [extra]",
        ),
    ] {
        let r = run_bin("nsq_to_file", &a, Duration::from_secs(5));
        assert_eq!(
            r.status.and_then(|s| s.code()),
            Some(1),
            "{a:?}: {}",
            r.stderr
        );
        assert!(r.stderr.trim_end().ends_with(msg), "{a:?}: {}", r.stderr);
    }
}

// ---------------------------------------------------------------------------
// nsq_to_http: a recording HTTP/1.1 server
// ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Req {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    status: u16,
}

impl Req {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn body_str(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

type Respond = Arc<dyn Fn(&Req, &[Req]) -> u16 + Send + Sync>;

/// Answers every request with the status `respond` picks (given the
/// request and all earlier ones) and records it. Keep-alive is honoured.
struct TestServer {
    addr: String,
    reqs: Arc<Mutex<Vec<Req>>>,
}

impl TestServer {
    fn start(respond: impl Fn(&Req, &[Req]) -> u16 + Send + Sync + 'static) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let reqs: Arc<Mutex<Vec<Req>>> = Arc::default();
        let respond: Respond = Arc::new(respond);
        let r = reqs.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let (r, respond) = (r.clone(), respond.clone());
                std::thread::spawn(move || serve_conn(conn, r, respond));
            }
        });
        TestServer { addr, reqs }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn requests(&self) -> Vec<Req> {
        self.reqs.lock().unwrap().clone()
    }

    fn wait_requests(&self, n: usize) -> Vec<Req> {
        wait_for(
            Duration::from_secs(20),
            &format!("{n} HTTP requests"),
            || {
                let r = self.requests();
                (r.len() >= n).then_some(r)
            },
        )
    }
}

fn serve_conn(conn: TcpStream, reqs: Arc<Mutex<Vec<Req>>>, respond: Respond) {
    conn.set_read_timeout(Some(Duration::from_secs(30))).ok();
    let mut w = conn.try_clone().unwrap();
    let mut r = BufReader::new(conn);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let (method, target) = (
            parts.next().unwrap_or_default().to_string(),
            parts.next().unwrap_or_default().to_string(),
        );
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.push((k.trim().to_string(), v.trim().to_string()));
            }
        }
        let len: usize = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; len];
        if r.read_exact(&mut body).is_err() {
            return;
        }
        let mut req = Req {
            method,
            target,
            headers,
            body,
            status: 0,
        };
        let status = {
            let mut all = reqs.lock().unwrap();
            req.status = respond(&req, &all);
            all.push(req.clone());
            req.status
        };
        let resp = format!(
            "HTTP/1.1 {status} X\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"
        );
        if w.write_all(resp.as_bytes()).is_err() {
            return;
        }
    }
}

fn start_to_http(n: &Nsqd, topic: &str, extra: &[String]) -> App {
    let mut a = vec![
        format!("--topic={topic}"),
        format!("--nsqd-tcp-address={}", n.tcp_addr),
    ];
    a.extend_from_slice(extra);
    let app = App::start("nsq_to_http", &a);
    wait_clients(n, topic, "nsq_to_http", 1);
    app
}

// ---------------------------------------------------------------------------
// nsq_to_http
// ---------------------------------------------------------------------------

#[test]
fn nsq_to_http_get_substitutes_the_escaped_body() {
    let n = Nsqd::start(&[]);
    let srv = TestServer::start(|_, _| 200);
    let mut app = start_to_http(
        &n,
        "hget",
        &[
            format!("--get={}", srv.url("/in?m=%s&x=1")),
            "--header=X-Test: yes".into(),
        ],
    );
    let bodies = ["plain", "a b&c=d/é", "50%"];
    for b in bodies {
        n.http_pub("hget", b.as_bytes());
    }
    let reqs = srv.wait_requests(3);
    let targets: BTreeSet<String> = reqs.iter().map(|r| r.target.clone()).collect();
    let want: BTreeSet<String> = [
        "/in?m=plain&x=1",
        "/in?m=a+b%26c%3Dd%2F%C3%A9&x=1",
        "/in?m=50%25&x=1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(targets, want);
    for r in &reqs {
        assert_eq!(r.method, "GET");
        assert_eq!(r.header("User-Agent"), Some("nsq_to_http v1.3.0"));
        assert_eq!(r.header("X-Test"), Some("yes"));
    }
    assert_drained(&n, "hget", "nsq_to_http", 3, 0);
    sleep_ms(300);
    assert_eq!(srv.requests().len(), 3, "each message sent once");
    assert_eq!(
        app.sigterm(Duration::from_secs(20)).code(),
        Some(0),
        "stderr:\n{}",
        app.stderr()
    );
}

#[test]
fn nsq_to_http_post_sends_the_body() {
    let n = Nsqd::start(&[]);
    let srv = TestServer::start(|_, _| 201);
    let mut app = start_to_http(
        &n,
        "hpost",
        &[
            format!("--post={}", srv.url("/post")),
            "--content-type=text/plain".into(),
        ],
    );
    for i in 0..20 {
        n.http_pub("hpost", format!("body {i}\nwith newline").as_bytes());
    }
    let reqs = srv.wait_requests(20);
    let got: BTreeSet<String> = reqs.iter().map(Req::body_str).collect();
    assert_eq!(
        got,
        (0..20).map(|i| format!("body {i}\nwith newline")).collect()
    );
    for r in &reqs {
        assert_eq!((r.method.as_str(), r.target.as_str()), ("POST", "/post"));
        assert_eq!(r.header("Content-Type"), Some("text/plain"));
        assert_eq!(r.header("User-Agent"), Some("nsq_to_http v1.3.0"));
    }
    // Any 2xx is success for POST.
    assert_drained(&n, "hpost", "nsq_to_http", 20, 0);
    assert_eq!(
        app.sigterm(Duration::from_secs(20)).code(),
        Some(0),
        "stderr:\n{}",
        app.stderr()
    );
}

/// Requests per path.
fn per_path(reqs: &[Req]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for r in reqs {
        *m.entry(r.target.clone()).or_default() += 1;
    }
    m
}

#[test]
fn nsq_to_http_modes_over_several_endpoints() {
    let n = Nsqd::start(&[]);
    let srv = TestServer::start(|_, _| 200);
    let endpoints = [
        format!("--post={}", srv.url("/a")),
        format!("--post={}", srv.url("/b")),
    ];

    // round-robin: a shared counter, evenly split.
    let mut rr = start_to_http(
        &n,
        "rr",
        &[
            endpoints[0].clone(),
            endpoints[1].clone(),
            "--mode=round-robin".into(),
        ],
    );
    for i in 0..10 {
        n.http_pub("rr", format!("rr {i}").as_bytes());
    }
    let reqs = srv.wait_requests(10);
    assert_eq!(
        per_path(&reqs),
        BTreeMap::from([("/a".to_string(), 5), ("/b".to_string(), 5)])
    );
    assert_drained(&n, "rr", "nsq_to_http", 10, 0);
    assert_eq!(rr.sigterm(Duration::from_secs(20)).code(), Some(0));

    // Any unknown mode is "all": every endpoint gets every message.
    let srv = TestServer::start(|_, _| 200);
    let endpoints = [
        format!("--post={}", srv.url("/a")),
        format!("--post={}", srv.url("/b")),
    ];
    let mut all = start_to_http(
        &n,
        "all",
        &[
            endpoints[0].clone(),
            endpoints[1].clone(),
            "--mode=fanout".into(),
        ],
    );
    for i in 0..10 {
        n.http_pub("all", format!("all {i}").as_bytes());
    }
    let reqs = srv.wait_requests(20);
    assert_eq!(
        per_path(&reqs),
        BTreeMap::from([("/a".to_string(), 10), ("/b".to_string(), 10)])
    );
    for path in ["/a", "/b"] {
        let bodies: BTreeSet<String> = reqs
            .iter()
            .filter(|r| r.target == path)
            .map(Req::body_str)
            .collect();
        assert_eq!(
            bodies,
            (0..10).map(|i| format!("all {i}")).collect(),
            "{path}"
        );
    }
    assert_drained(&n, "all", "nsq_to_http", 10, 0);
    assert_eq!(all.sigterm(Duration::from_secs(20)).code(), Some(0));

    // hostpool (the default): healthy hosts in turn; a failing one is
    // avoided after its first failure and its message goes elsewhere.
    let srv = TestServer::start(|r, _| if r.target == "/down" { 503 } else { 200 });
    let mut hp = start_to_http(
        &n,
        "hp",
        &[
            format!("--post={}", srv.url("/up")),
            format!("--post={}", srv.url("/down")),
            "--n=1".into(),
            "--consumer-opt=default_requeue_delay,0".into(),
            "--consumer-opt=max_backoff_duration,0".into(),
        ],
    );
    for i in 0..10 {
        n.http_pub("hp", format!("hp {i}").as_bytes());
    }
    assert_drained(&n, "hp", "nsq_to_http", 10, 1);
    let reqs = srv.requests();
    let counts = per_path(&reqs);
    assert_eq!(counts.get("/down"), Some(&1), "{counts:?}");
    let ok: BTreeSet<String> = reqs
        .iter()
        .filter(|r| r.status == 200)
        .map(Req::body_str)
        .collect();
    assert_eq!(ok, (0..10).map(|i| format!("hp {i}")).collect());
    assert_eq!(hp.sigterm(Duration::from_secs(20)).code(), Some(0));
}

#[test]
fn nsq_to_http_failures_are_requeued_and_redelivered() {
    let n = Nsqd::start(&[]);
    // POST: the first attempt of "fail-me" gets a 500.
    let srv = TestServer::start(|r, earlier| {
        let seen = earlier.iter().any(|e| e.body == r.body);
        if r.body == b"fail-me" && !seen {
            500
        } else {
            200
        }
    });
    let opts = [
        "--consumer-opt=default_requeue_delay,100ms".to_string(),
        "--consumer-opt=max_backoff_duration,0".to_string(),
    ];
    let mut app = start_to_http(
        &n,
        "h5xx",
        &[
            format!("--post={}", srv.url("/p")),
            opts[0].clone(),
            opts[1].clone(),
        ],
    );
    n.http_pub("h5xx", b"ok-1");
    n.http_pub("h5xx", b"fail-me");
    n.http_pub("h5xx", b"ok-2");
    let reqs = srv.wait_requests(4);
    assert_drained(&n, "h5xx", "nsq_to_http", 3, 1);
    let fails: Vec<u16> = reqs
        .iter()
        .filter(|r| r.body == b"fail-me")
        .map(|r| r.status)
        .collect();
    assert_eq!(
        fails,
        [500, 200],
        "the server sees the message again after the 500"
    );
    assert_eq!(srv.requests().len(), 4);
    assert_eq!(app.sigterm(Duration::from_secs(20)).code(), Some(0));

    // GET succeeds only on exactly 200: a 201 is a failure too.
    let srv = TestServer::start(|r, earlier| {
        if earlier.iter().any(|e| e.target == r.target) {
            200
        } else {
            201
        }
    });
    let mut app = start_to_http(
        &n,
        "hget201",
        &[
            format!("--get={}", srv.url("/g?%s")),
            opts[0].clone(),
            opts[1].clone(),
        ],
    );
    n.http_pub("hget201", b"once");
    srv.wait_requests(2);
    assert_drained(&n, "hget201", "nsq_to_http", 1, 1);
    assert_eq!(
        srv.requests().iter().map(|r| r.status).collect::<Vec<_>>(),
        [201, 200]
    );
    assert_eq!(app.sigterm(Duration::from_secs(20)).code(), Some(0));
}

#[test]
fn nsq_to_http_command_line() {
    let r = run_bin("nsq_to_http", &["--version"], Duration::from_secs(5));
    assert_eq!(
        (r.status.and_then(|s| s.code()), r.stdout.as_str()),
        (Some(0), "nsq_to_http v1.3.0\n")
    );
    let r = run_bin(
        "nsq_to_http",
        &["--consumer-opt=bogus,1"],
        Duration::from_secs(5),
    );
    assert_eq!(r.status.and_then(|s| s.code()), Some(2));
    assert!(
        r.stderr.starts_with(
            "invalid value \"bogus,1\" for flag -consumer-opt: invalid option bogus\nUsage of "
        ),
        "{}",
        r.stderr
    );
    for (a, msg) in [
        (
            vec!["--header=nocolon"],
            "--header value format should be 'key=value'",
        ),
        (
            vec!["--post=http://x/"],
            "--topic and --channel are required",
        ),
        (
            vec!["--topic=t", "--content-type=x", "--get=http://h/%s"],
            "--content-type only used with --post",
        ),
        (
            vec!["--topic=t", "--content-type=", "--post=http://h/"],
            "--content-type requires a value when used",
        ),
        (
            vec!["--topic=t", "--post=http://h/"],
            "--nsqd-tcp-address or --lookupd-http-address required",
        ),
        (
            vec!["--topic=t", "--nsqd-tcp-address=a"],
            "--get or --post required",
        ),
        (
            vec![
                "--topic=t",
                "--nsqd-tcp-address=a",
                "--get=http://h/",
                "--post=http://h/",
            ],
            "use --get or --post not both",
        ),
        (
            vec!["--topic=t", "--nsqd-tcp-address=a", "--get=http://h/%s/%s"],
            "invalid GET address - must be a printf string",
        ),
        (
            vec![
                "--topic=t",
                "--nsqd-tcp-address=a",
                "--post=http://h/",
                "--sample=2",
            ],
            "ERROR: --sample must be between 0.0 and 1.0",
        ),
    ] {
        let r = run_bin("nsq_to_http", &a, Duration::from_secs(5));
        assert_eq!(
            r.status.and_then(|s| s.code()),
            Some(1),
            "{a:?}: {}",
            r.stderr
        );
        assert!(r.stderr.trim_end().ends_with(msg), "{a:?}: {}", r.stderr);
    }
}

//! The utility apps, black-box: nsq_tail, to_nsq, nsq_to_nsq and nsq_stat
//! run as processes against real nsqd (and nsqlookupd) processes, checked
//! against apps.md: what they print, what arrives where, exit codes, and
//! Go's flag and `log.Fatal` messages.

#![forbid(unsafe_code)]

use std::fs;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use nsq_tests::*;

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// A running app with stdout/stderr captured to files; SIGTERM + reap on drop.
struct App {
    child: Child,
    dir: tempfile::TempDir,
    status: Option<ExitStatus>,
}

impl App {
    fn start(name: &str, args: &[String]) -> App {
        App::start_with_stdin(name, args, Stdio::null())
    }

    fn start_with_stdin(name: &str, args: &[String], stdin: Stdio) -> App {
        let dir = tempfile::Builder::new().prefix("app-").tempdir().unwrap();
        let child = Command::new(bin_path(name))
            .args(args)
            .stdin(stdin)
            .stdout(fs::File::create(dir.path().join("stdout")).unwrap())
            .stderr(fs::File::create(dir.path().join("stderr")).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        App {
            child,
            dir,
            status: None,
        }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn stdout(&self) -> String {
        fs::read_to_string(self.file("stdout")).unwrap_or_default()
    }

    fn stderr(&self) -> String {
        fs::read_to_string(self.file("stderr")).unwrap_or_default()
    }

    /// Waits for the exit; panics (with the output) after `timeout`.
    fn wait(&mut self, timeout: Duration) -> ExitStatus {
        if let Some(st) = self.status {
            return st;
        }
        match wait_timeout(&mut self.child, timeout) {
            Some(st) => {
                self.status = Some(st);
                st
            }
            None => panic!(
                "app did not exit within {timeout:?}\nstdout:\n{}\nstderr:\n{}",
                self.stdout(),
                self.stderr()
            ),
        }
    }

    fn sigterm_and_wait(&mut self, timeout: Duration) -> ExitStatus {
        send_signal(self.child.id(), libc::SIGTERM);
        self.wait(timeout)
    }
}

impl Drop for App {
    fn drop(&mut self) {
        if self.status.is_none() {
            terminate(&mut self.child, Duration::from_secs(3));
        }
    }
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// Runs an app to completion with no stdin.
fn run(name: &str, args: &[&str]) -> RunOutput {
    run_bin(name, args, Duration::from_secs(10))
}

/// The message of a Go `log.Fatal` line (`2006/01/02 15:04:05 <msg>`), checking the timestamp's shape.
fn log_message(line: &str) -> &str {
    let (stamp, msg) = line.split_at(line.len().min(20));
    let shape: String = stamp
        .chars()
        .map(|c| if c.is_ascii_digit() { '9' } else { c })
        .collect();
    assert_eq!(shape, "9999/99/99 99:99:99 ", "not a Go log line: {line:?}");
    msg
}

/// Asserts a `log.Fatal` exit: status 1, the message as stderr's last line.
fn assert_fatal(out: &RunOutput, msg: &str) {
    assert_eq!(
        out.status.and_then(|s| s.code()),
        Some(1),
        "exit status; stderr:\n{}",
        out.stderr
    );
    let last = out.stderr.lines().last().unwrap_or_default();
    assert_eq!(log_message(last), msg, "stderr:\n{}", out.stderr);
}

/// Asserts a Go flag-parse failure: status 2, the message, then the usage.
fn assert_flag_error(out: &RunOutput, msg: &str) {
    assert_eq!(
        out.status.and_then(|s| s.code()),
        Some(2),
        "exit status; stderr:\n{}",
        out.stderr
    );
    let mut lines = out.stderr.lines();
    assert_eq!(lines.next(), Some(msg), "stderr:\n{}", out.stderr);
    assert!(
        lines.next().unwrap_or_default().starts_with("Usage of "),
        "stderr:\n{}",
        out.stderr
    );
    assert!(out.stdout.is_empty());
}

/// Waits until `topic` has a channel (named `channel`, or any when `None`)
/// with a connected client; returns the channel's name.
fn wait_subscribed(nsqd: &Nsqd, topic: &str, channel: Option<&str>) -> String {
    wait_for(
        Duration::from_secs(10),
        &format!("a subscriber on {topic}"),
        || {
            let t = nsqd.topic_stats(topic)?;
            t["channels"]
                .as_array()?
                .iter()
                .find(|c| {
                    !matches!(channel, Some(n) if c["channel_name"] != n)
                        && c["client_count"].as_i64().unwrap_or(0) > 0
                })
                .map(|c| c["channel_name"].as_str().unwrap_or_default().to_string())
        },
    )
}

fn create_channel(nsqd: &Nsqd, topic: &str, channel: &str) {
    assert_eq!(
        nsqd.post(&format!("/topic/create?topic={topic}"), b"")
            .status,
        200
    );
    assert_eq!(
        nsqd.post(
            &format!("/channel/create?topic={topic}&channel={channel}"),
            b""
        )
        .status,
        200
    );
}

// ---------------------------------------------------------------------------
// to_nsq + nsq_tail
// ---------------------------------------------------------------------------

#[test]
fn to_nsq_piped_into_nsq_tail_round_trips_n_lines() {
    let nsqd = Nsqd::start(&[]);
    let topic = unique("roundtrip");
    const N: usize = 25;
    let mut tail = App::start(
        "nsq_tail",
        &strings(&[
            &format!("--topic={topic}"),
            &format!("--n={N}"),
            &format!("--nsqd-tcp-address={}", nsqd.tcp_addr),
        ]),
    );
    let channel = wait_subscribed(&nsqd, &topic, None);
    // Default channel: tail<6 digits>#ephemeral.
    let digits = channel
        .strip_prefix("tail")
        .and_then(|s| s.strip_suffix("#ephemeral"))
        .unwrap_or_default();
    assert!(
        digits.len() == 6 && digits.bytes().all(|b| b.is_ascii_digit()),
        "channel {channel:?}"
    );

    let lines: Vec<String> = (0..N).map(|i| format!("line {i}")).collect();
    let mut to = App::start_with_stdin(
        "to_nsq",
        &strings(&[
            &format!("--topic={topic}"),
            &format!("--nsqd-tcp-address={}", nsqd.tcp_addr),
        ]),
        Stdio::piped(),
    );
    {
        let mut stdin = to.child.stdin.take().unwrap();
        for l in &lines {
            writeln!(stdin, "{l}").unwrap();
        }
    } // EOF
    assert!(
        to.wait(Duration::from_secs(10)).success(),
        "to_nsq stderr:\n{}",
        to.stderr()
    );
    assert!(
        tail.wait(Duration::from_secs(10)).success(),
        "nsq_tail stderr:\n{}",
        tail.stderr()
    );
    let got: Vec<String> = tail.stdout().lines().map(String::from).collect();
    assert_eq!(got, lines);
    assert_eq!(
        log_message(tail.stderr().lines().next().unwrap()),
        format!("Adding consumer for topic: {topic}")
    );
}

#[test]
fn to_nsq_drops_the_last_byte_and_skips_empty_pieces_and_honours_delimiter() {
    let nsqd = Nsqd::start(&[]);
    let topic = unique("quirk");
    let mut tail = App::start(
        "nsq_tail",
        &strings(&[
            &format!("--topic={topic}"),
            "--n=3",
            "--print-topic",
            "--channel=c",
            &format!("--nsqd-tcp-address={}", nsqd.tcp_addr),
        ]),
    );
    wait_subscribed(&nsqd, &topic, Some("c"));
    let mut to = App::start_with_stdin(
        "to_nsq",
        &strings(&[
            &format!("--topic={topic}"),
            "--delimiter=,",
            &format!("--nsqd-tcp-address={}", nsqd.tcp_addr),
        ]),
        Stdio::piped(),
    );
    to.child
        .stdin
        .take()
        .unwrap()
        .write_all(b"a,bb,,xyz")
        .unwrap();
    assert!(
        to.wait(Duration::from_secs(10)).success(),
        "to_nsq stderr:\n{}",
        to.stderr()
    );
    assert!(
        tail.wait(Duration::from_secs(10)).success(),
        "nsq_tail stderr:\n{}",
        tail.stderr()
    );
    assert_eq!(
        tail.stdout(),
        format!("{topic} | a\n{topic} | bb\n{topic} | xy\n")
    );
}

#[test]
fn to_nsq_publishes_every_message_to_every_nsqd() {
    let (a, b) = (Nsqd::start(&[]), Nsqd::start(&[]));
    let topic = unique("fanout");
    let out = Command::new(bin_path("to_nsq"))
        .args([
            format!("--topic={topic}"),
            format!("--nsqd-tcp-address={}", a.tcp_addr),
            format!("--nsqd-tcp-address={}", b.tcp_addr),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            c.stdin.take().unwrap().write_all(b"1\n2\n3\n")?;
            c.wait_with_output()
        })
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for n in [&a, &b] {
        assert_eq!(
            int(&n.topic_stats(&topic).expect("topic"), "message_count"),
            3
        );
    }
}

#[test]
fn nsq_tail_two_topics_print_topic_and_stop_on_sigterm() {
    let nsqd = Nsqd::start(&[]);
    let (t1, t2) = (unique("tail_a"), unique("tail_b"));
    let mut tail = App::start(
        "nsq_tail",
        &strings(&[
            &format!("--topic={t1}"),
            &format!("--topic={t2}"),
            "--print-topic",
            &format!("--nsqd-tcp-address={}", nsqd.tcp_addr),
        ]),
    );
    let c1 = wait_subscribed(&nsqd, &t1, None);
    let c2 = wait_subscribed(&nsqd, &t2, None);
    assert_eq!(c1, c2, "one channel for all topics");
    nsqd.http_pub(&t1, b"one");
    nsqd.http_pub(&t2, b"two");
    let out = wait_for(Duration::from_secs(10), "both messages printed", || {
        let s = tail.stdout();
        (s.lines().count() == 2).then_some(s)
    });
    let mut got: Vec<&str> = out.lines().collect();
    got.sort();
    let mut want = vec![format!("{t1} | one"), format!("{t2} | two")];
    want.sort();
    assert_eq!(got, want);
    // Printed messages are FINed.
    wait_for(Duration::from_secs(5), "in-flight drained", || {
        let ch = nsqd.channel_stats(&t1, &c1)?;
        (int(&ch, "in_flight_count") == 0).then_some(())
    });
    assert!(
        tail.sigterm_and_wait(Duration::from_secs(10)).success(),
        "stderr:\n{}",
        tail.stderr()
    );
    let stderr = tail.stderr();
    let adds: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("Adding consumer"))
        .map(log_message)
        .collect();
    assert_eq!(
        adds,
        [
            format!("Adding consumer for topic: {t1}"),
            format!("Adding consumer for topic: {t2}")
        ]
    );
}

#[test]
fn nsq_tail_finds_nsqds_through_lookupd() {
    let lookupd = Lookupd::start(&[]);
    let nsqd = Nsqd::start(&[
        &format!("--lookupd-tcp-address={}", lookupd.tcp),
        "--broadcast-address=127.0.0.1",
    ]);
    let topic = unique("tail_lk");
    nsqd.http_pub(&topic, b"first");
    nsqd.http_pub(&topic, b"second");
    wait_for(Duration::from_secs(10), "topic registered", || {
        let r = http_get(&lookupd.http, &format!("/lookup?topic={topic}"));
        (r.status == 200 && r.json()["producers"].as_array().map_or(0, |p| p.len()) == 1)
            .then_some(())
    });
    let mut tail = App::start(
        "nsq_tail",
        &strings(&[
            &format!("--topic={topic}"),
            "--n=2",
            &format!("--lookupd-http-address={}", lookupd.http),
        ]),
    );
    assert!(
        tail.wait(Duration::from_secs(15)).success(),
        "stderr:\n{}",
        tail.stderr()
    );
    assert_eq!(tail.stdout(), "first\nsecond\n");
}

// ---------------------------------------------------------------------------
// nsq_to_nsq
// ---------------------------------------------------------------------------

#[test]
fn nsq_to_nsq_copies_a_topic_between_nsqds() {
    let (src, dst) = (Nsqd::start(&[]), Nsqd::start(&[]));
    let (from, to) = (unique("copy_src"), unique("copy_dst"));
    const N: usize = 50;
    let bodies: Vec<String> = (0..N).map(|i| format!("msg-{i}")).collect();
    for b in &bodies {
        src.http_pub(&from, b.as_bytes());
    }
    let mut copier = App::start(
        "nsq_to_nsq",
        &strings(&[
            &format!("--topic={from}"),
            &format!("--nsqd-tcp-address={}", src.tcp_addr),
            &format!("--destination-nsqd-tcp-address={}", dst.tcp_addr),
            &format!("--destination-topic={to}"),
        ]),
    );
    wait_for(
        Duration::from_secs(15),
        "all messages at the destination",
        || {
            let t = dst.topic_stats(&to)?;
            (int(&t, "message_count") == N as i64).then_some(())
        },
    );
    // Every copy was confirmed, so every source message is FINed.
    wait_for(Duration::from_secs(10), "source channel drained", || {
        let ch = src.channel_stats(&from, "nsq_to_nsq")?;
        (int(&ch, "depth") == 0
            && int(&ch, "in_flight_count") == 0
            && int(&ch, "message_count") == N as i64)
            .then_some(())
    });
    let mut c = dst.connect();
    c.sub(&to, "check");
    c.rdy(N as i64);
    let mut got: Vec<String> = recv_msgs(&mut c, N, Duration::from_secs(10), true)
        .iter()
        .map(|m| m.body_str())
        .collect();
    got.sort();
    let mut want = bodies.clone();
    want.sort();
    assert_eq!(got, want);
    assert!(
        copier.sigterm_and_wait(Duration::from_secs(10)).success(),
        "stderr:\n{}",
        copier.stderr()
    );
}

#[test]
fn nsq_to_nsq_json_filters_and_round_robin() {
    let src = Nsqd::start(&[]);
    let (d1, d2) = (Nsqd::start(&[]), Nsqd::start(&[]));
    let topic = unique("json");
    let inputs: [&[u8]; 6] = [
        br#"{"kind":"click","a":1.0,"z":"<x>","drop":true}"#,
        br#"{"kind":"view","a":2}"#,
        br#"{"kind":"click","a":2.5}"#,
        br#"{"a":3}"#,
        b"not json",
        br#"{"kind":"click","a":4,"z":[1,2]}"#,
    ];
    for b in inputs {
        src.http_pub(&topic, b);
    }
    let mut copier = App::start(
        "nsq_to_nsq",
        &strings(&[
            &format!("--topic={topic}"),
            &format!("--nsqd-tcp-address={}", src.tcp_addr),
            &format!("--destination-nsqd-tcp-address={}", d1.tcp_addr),
            &format!("--destination-nsqd-tcp-address={}", d2.tcp_addr),
            "--mode=round-robin",
            "--require-json-field=kind",
            "--whitelist-json-field=a",
            "--whitelist-json-field=z",
        ]),
    );
    // Messages without "kind" and non-JSON ones are dropped (FINed), none requeued.
    wait_for(Duration::from_secs(10), "source channel drained", || {
        let ch = src.channel_stats(&topic, "nsq_to_nsq")?;
        (int(&ch, "message_count") == 6
            && int(&ch, "depth") == 0
            && int(&ch, "in_flight_count") == 0)
            .then_some(())
    });
    let count = |n: &Nsqd| {
        n.topic_stats(&topic)
            .map(|t| int(&t, "message_count"))
            .unwrap_or(0)
    };
    // Four have "kind" (no value is required), so they pass.
    assert_eq!(count(&d1) + count(&d2), 4);
    assert!(
        count(&d1) == 2 && count(&d2) == 2,
        "round-robin alternates: {} / {}",
        count(&d1),
        count(&d2)
    );
    let mut got = Vec::new();
    for d in [&d1, &d2] {
        let mut c = d.connect();
        c.sub(&topic, "check");
        c.rdy(10);
        got.extend(
            recv_msgs(&mut c, 2, Duration::from_secs(10), true)
                .iter()
                .map(|m| m.body_str()),
        );
    }
    got.sort();
    assert_eq!(
        got,
        [
            r#"{"a":1,"z":"\u003cx\u003e"}"#,
            r#"{"a":2.5}"#,
            r#"{"a":2}"#,
            r#"{"a":4,"z":[1,2]}"#
        ]
    );
    assert!(
        copier.sigterm_and_wait(Duration::from_secs(10)).success(),
        "stderr:\n{}",
        copier.stderr()
    );
}

// ---------------------------------------------------------------------------
// nsq_stat
// ---------------------------------------------------------------------------

const HEADER: &str = "------rate------+----------------depth----------------+--------------metadata---------------\n\
                      ingress  egress |   total     mem    disk inflt   def |     req     t-o         msgs clients\n";

#[test]
fn nsq_stat_prints_header_and_rows_for_a_live_channel() {
    let nsqd = Nsqd::start(&["--broadcast-address=127.0.0.1"]);
    let topic = unique("stat");
    create_channel(&nsqd, &topic, "ch");
    for i in 0..3 {
        nsqd.http_pub(&topic, format!("m{i}").as_bytes());
    }
    let out = run_bin(
        "nsq_stat",
        &[
            &format!("--topic={topic}"),
            "--channel=ch",
            &format!("--nsqd-http-address={}", nsqd.http_addr),
            "--interval=200ms",
            "--count=2",
        ],
        Duration::from_secs(10),
    );
    assert_eq!(
        out.status.and_then(|s| s.code()),
        Some(0),
        "stderr:\n{}",
        out.stderr
    );
    let row = "      0       0 |       3       3       0     0     0 |       0       0            3       0\n";
    assert_eq!(out.stdout, format!("{HEADER}{row}{row}"));
}

#[test]
fn nsq_stat_via_lookupd_sums_nsqds_and_computes_rates() {
    let lookupd = Lookupd::start(&[]);
    let lk = format!("--lookupd-tcp-address={}", lookupd.tcp);
    let a = Nsqd::start(&[&lk, "--broadcast-address=127.0.0.1"]);
    let b = Nsqd::start(&[&lk, "--broadcast-address=127.0.0.1"]);
    let topic = unique("statlk");
    for n in [&a, &b] {
        create_channel(n, &topic, "ch");
        n.http_pub(&topic, b"x");
    }
    wait_for(Duration::from_secs(10), "both producers registered", || {
        let r = http_get(&lookupd.http, &format!("/lookup?topic={topic}"));
        (r.status == 200 && r.json()["producers"].as_array().map_or(0, |p| p.len()) == 2)
            .then_some(())
    });
    let mut stat = App::start(
        "nsq_stat",
        &strings(&[
            &format!("--topic={topic}"),
            "--channel=ch",
            &format!("--lookupd-http-address={}", lookupd.http),
            "--interval=1s",
        ]),
    );
    // After the baseline poll, publish 4 more (2 per nsqd) before the next one.
    wait_for(Duration::from_secs(10), "header printed", || {
        (stat.stdout().lines().count() >= 2).then_some(())
    });
    for n in [&a, &b] {
        n.http_pub(&topic, b"y");
        n.http_pub(&topic, b"z");
    }
    let out = wait_for(Duration::from_secs(10), "two rows", || {
        let s = stat.stdout();
        (s.lines().count() >= 4).then_some(s)
    });
    let rows: Vec<&str> = out.lines().skip(2).collect();
    // ingress = messages/s over the 1 s interval; nothing consumed, so egress 0.
    let with_new = "      4       0 |       6       6       0     0     0 |       0       0            6       0";
    let steady = "      0       0 |       6       6       0     0     0 |       0       0            6       0";
    assert_eq!(rows[0], with_new, "rows:\n{out}");
    assert_eq!(rows[1], steady, "rows:\n{out}");
    assert!(stat.sigterm_and_wait(Duration::from_secs(5)).success());
}

#[test]
fn nsq_stat_fatal_errors() {
    let nsqd = Nsqd::start(&["--broadcast-address=127.0.0.1"]);
    let topic = unique("staterr");
    nsqd.http_pub(&topic, b"x");
    let addr = format!("--nsqd-http-address={}", nsqd.http_addr);
    let out = run(
        "nsq_stat",
        &[&format!("--topic={topic}"), "--channel=nope", &addr],
    );
    assert_fatal(
        &out,
        &format!("ERROR: failed to find channel(nope) in stats metadata for topic({topic})"),
    );
    // A topic no nsqd has: no producers, and cluster-info reports that as "failed to query any nsqd".
    let out = run("nsq_stat", &["--topic=absent", "--channel=c", &addr]);
    assert_fatal(
        &out,
        "ERROR: failed to get nsqd stats - failed to query any nsqd: ",
    );
    let out = run(
        "nsq_stat",
        &[
            "--topic=t",
            "--channel=c",
            "--nsqd-http-address=127.0.0.1:1",
        ],
    );
    assert_fatal(
        &out,
        "ERROR: failed to get topic producers - failed to query any nsqd: Get \"http://127.0.0.1:1/stats?format=json&topic=t&include_clients=false\": dial tcp 127.0.0.1:1: connect: connection refused",
    );
}

// ---------------------------------------------------------------------------
// Flags, versions, validation
// ---------------------------------------------------------------------------

#[test]
fn versions() {
    for app in ["nsq_tail", "nsq_to_nsq", "nsq_stat"] {
        let out = run(app, &["--version"]);
        assert_eq!(out.status.and_then(|s| s.code()), Some(0));
        assert_eq!(out.stdout, format!("{app} v1.3.0\n"));
    }
    // to_nsq has no --version flag.
    assert_flag_error(
        &run("to_nsq", &["--version"]),
        "flag provided but not defined: -version",
    );
}

#[test]
fn help_and_bad_flags() {
    for app in ["nsq_tail", "to_nsq", "nsq_to_nsq", "nsq_stat"] {
        let out = run(app, &["-h"]);
        assert_eq!(out.status.and_then(|s| s.code()), Some(0), "{app} -h");
        assert!(out.stderr.starts_with("Usage of "), "{app}: {}", out.stderr);
        assert_flag_error(
            &run(app, &["--bogus"]),
            "flag provided but not defined: -bogus",
        );
        assert_flag_error(&run(app, &["-topic"]), "flag needs an argument: -topic");
    }
    assert!(run("nsq_tail", &["-h"])
        .stderr
        .contains("  -max-in-flight int\n    \t"));
    assert!(run("nsq_tail", &["-h"]).stderr.contains("(default 200)\n"));
    assert!(run("to_nsq", &["-h"])
        .stderr
        .contains("(default \"\\n\")\n"));
    assert!(run("nsq_to_nsq", &["-h"])
        .stderr
        .contains("(default \"hostpool\")\n"));
    assert!(run("nsq_stat", &["-h"])
        .stderr
        .contains("  -interval duration\n    \t"));
    assert_flag_error(
        &run("nsq_tail", &["--n=x"]),
        "invalid value \"x\" for flag -n: parse error",
    );
    assert_flag_error(
        &run("nsq_tail", &["--print-topic=maybe"]),
        "invalid boolean value \"maybe\" for -print-topic: parse error",
    );
    assert_flag_error(
        &run("nsq_tail", &["--consumer-opt=nope,1"]),
        "invalid value \"nope,1\" for flag -consumer-opt: invalid option nope",
    );
    assert_flag_error(
        &run("to_nsq", &["--producer-opt=max_in_flight,x"]),
        "invalid value \"max_in_flight,x\" for flag -producer-opt: failed to coerce option max_in_flight (x) - strconv.ParseInt: parsing \"x\": invalid syntax",
    );
    assert_flag_error(
        &run("nsq_stat", &["--interval=soon"]),
        "invalid value \"soon\" for flag -interval: parse error",
    );
    assert_flag_error(
        &run("nsq_stat", &["--count=x"]),
        "invalid value \"x\" for flag -count: strconv.ParseInt: parsing \"x\": invalid syntax",
    );
}

#[test]
fn validation_messages() {
    let cases: &[(&str, &[&str], &str)] = &[
        (
            "nsq_tail",
            &[],
            "--nsqd-tcp-address or --lookupd-http-address required",
        ),
        (
            "nsq_tail",
            &["--nsqd-tcp-address=a:1", "--lookupd-http-address=b:2"],
            "use --nsqd-tcp-address or --lookupd-http-address not both",
        ),
        ("nsq_tail", &["--nsqd-tcp-address=a:1"], "--topic required"),
        ("to_nsq", &[], "--topic required"),
        (
            "to_nsq",
            &["--topic=t", "--delimiter=ab"],
            "--delimiter must be a single byte",
        ),
        (
            "to_nsq",
            &["--topic=t", "--delimiter="],
            "--delimiter must be a single byte",
        ),
        ("to_nsq", &["--topic=t"], "--nsqd-tcp-address required"),
        ("nsq_to_nsq", &[], "--topic and --channel are required"),
        (
            "nsq_to_nsq",
            &["--topic=t", "--channel="],
            "--topic and --channel are required",
        ),
        ("nsq_to_nsq", &["--topic=bad!"], "--topic is invalid"),
        (
            "nsq_to_nsq",
            &["--topic=t", "--destination-topic=bad!"],
            "--destination-topic is invalid",
        ),
        (
            "nsq_to_nsq",
            &["--topic=t", "--channel=bad!"],
            "--channel is invalid",
        ),
        (
            "nsq_to_nsq",
            &["--topic=t"],
            "--nsqd-tcp-address or --lookupd-http-address required",
        ),
        (
            "nsq_to_nsq",
            &[
                "--topic=t",
                "--nsqd-tcp-address=a:1",
                "--lookupd-http-address=b:2",
            ],
            "use --nsqd-tcp-address or --lookupd-http-address not both",
        ),
        (
            "nsq_to_nsq",
            &["--topic=t", "--nsqd-tcp-address=a:1"],
            "--destination-nsqd-tcp-address required",
        ),
        ("nsq_stat", &[], "--topic and --channel are required"),
        (
            "nsq_stat",
            &["--topic=t", "--channel=c", "--interval=0"],
            "--interval should be positive",
        ),
        (
            "nsq_stat",
            &["--topic=t", "--channel=c", "--interval=-1s"],
            "--interval should be positive",
        ),
        (
            "nsq_stat",
            &[
                "--topic=t",
                "--channel=c",
                "--http-client-connect-timeout=0",
            ],
            "--http-client-connect-timeout should be positive",
        ),
        (
            "nsq_stat",
            &[
                "--topic=t",
                "--channel=c",
                "--http-client-request-timeout=0s",
            ],
            "--http-client-request-timeout should be positive",
        ),
        (
            "nsq_stat",
            &["--topic=t", "--channel=c", "--count=0"],
            "--count should be positive",
        ),
        (
            "nsq_stat",
            &["--topic=t", "--channel=c"],
            "--nsqd-http-address or --lookupd-http-address required",
        ),
        (
            "nsq_stat",
            &[
                "--topic=t",
                "--channel=c",
                "--nsqd-http-address=a:1",
                "--lookupd-http-address=b:2",
            ],
            "use --nsqd-http-address or --lookupd-http-address not both",
        ),
        (
            "nsq_stat",
            &["--topic=t", "--channel=c", "--nsqd-http-address=http://a:1"],
            "--nsqd-http-address error - address should not contain scheme",
        ),
        (
            "nsq_stat",
            &[
                "--topic=t",
                "--channel=c",
                "--lookupd-http-address=http://a:1",
            ],
            "--lookupd-http-address error - address should not contain scheme",
        ),
    ];
    for (app, args, msg) in cases {
        let out = run(app, args);
        assert_fatal(&out, msg);
        assert!(
            out.stdout.is_empty(),
            "{app} {args:?}: stdout {:?}",
            out.stdout
        );
    }
}

#[test]
fn nsq_tail_fails_when_nsqd_is_unreachable() {
    let port = free_port();
    let out = run(
        "nsq_tail",
        &["--topic=t", &format!("--nsqd-tcp-address=127.0.0.1:{port}")],
    );
    assert_eq!(
        out.status.and_then(|s| s.code()),
        Some(1),
        "stderr:\n{}",
        out.stderr
    );
}

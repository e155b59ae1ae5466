//! The daemons' log lines: NSQ's form by default (`[nsqd] 2026/12/01
//! 11:14:06.629604 INFO: TCP: listening on 127.0.0.1:4150`, no Rust debug
//! formatting), and one JSON object per line with `--log-format=json`
//! (nsq-rs, for log pipelines); a bad format is FATAL.

#![forbid(unsafe_code)]

use std::time::Duration;

use nsq_tests::*;

/// `[name] YYYY/MM/DD HH:MM:SS.micro LEVEL: message`
fn assert_nsq_line(line: &str, name: &str) {
    let rest = line
        .strip_prefix(&format!("[{name}] "))
        .unwrap_or_else(|| panic!("prefix [{name}]: {line:?}"));
    let (date, rest) = rest.split_at(10);
    assert!(
        date.len() == 10 && &date[4..5] == "/" && &date[7..8] == "/",
        "date: {line:?}"
    );
    let (time, rest) = rest[1..].split_at(15);
    assert!(&time[2..3] == ":" && &time[8..9] == ".", "time: {line:?}");
    let (level, msg) = rest[1..].split_once(": ").expect("LEVEL: message");
    assert!(
        ["DEBUG", "INFO", "WARNING", "ERROR", "FATAL"].contains(&level),
        "level {level:?}: {line:?}"
    );
    assert!(
        !msg.contains("Some(") && !msg.contains("None"),
        "Rust debug formatting: {line:?}"
    );
}

#[test]
fn nsqd_logs_in_nsqs_form_by_default() {
    let n = Nsqd::start(&[]);
    let err = n.stderr();
    let lines: Vec<&str> = err.lines().collect();
    assert!(!lines.is_empty(), "nsqd logged nothing");
    for l in &lines {
        assert_nsq_line(l, "nsqd");
    }
    assert!(
        lines
            .iter()
            .any(|l| l.ends_with(&format!("INFO: TCP: listening on {}", n.tcp_addr))),
        "{err}"
    );
}

#[test]
fn nsqlookupd_and_nsqadmin_log_in_nsqs_form() {
    for (name, args) in [
        (
            "nsqlookupd",
            vec!["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0"],
        ),
        (
            "nsqadmin",
            vec![
                "--http-address=127.0.0.1:0",
                "--nsqd-http-address=127.0.0.1:1",
            ],
        ),
    ] {
        let out = run_bin(name, &args, Duration::from_secs(1));
        let lines: Vec<&str> = out.stderr.lines().collect();
        assert!(
            lines
                .iter()
                .any(|l| l.contains("HTTP: listening on 127.0.0.1:")),
            "{name}: {}",
            out.stderr
        );
        for l in lines {
            assert_nsq_line(l, name);
        }
    }
}

#[test]
fn log_format_json_writes_one_object_per_line() {
    let n = Nsqd::start(&["--log-format=json"]);
    let err = n.stderr();
    let objs: Vec<Value> = err
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    let listening = objs
        .iter()
        .find(|o| o["message"] == format!("TCP: listening on {}", n.tcp_addr).as_str())
        .unwrap_or_else(|| panic!("no TCP listening line: {err}"));
    assert_eq!(listening["level"], "INFO");
    let time = listening["time"].as_str().expect("time");
    assert!(
        time.len() == 27 && time.ends_with('Z') && &time[10..11] == "T",
        "RFC 3339 with microseconds: {time}"
    );
    let start = &objs[0];
    assert_eq!(start["version"], "1.3.0", "fields kept: {start}");
}

#[test]
fn a_bad_log_format_is_fatal() {
    let out = run_bin("nsqd", &["--log-format=xml"], Duration::from_secs(5));
    assert_eq!(out.status.and_then(|s| s.code()), Some(1));
    assert!(
        out.stderr
            .trim_end()
            .ends_with("FATAL: invalid --log-format \"xml\" (nsq or json)"),
        "{}",
        out.stderr
    );
}

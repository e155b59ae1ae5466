//! Every binary's command line against NSQ 1.3.0's: `--help` is read as Go's
//! flag listing (`Usage of <name>:`, then `  -name type` / `    \tusage
//! (default ...)` per flag, sorted) and its names, types and defaults are
//! compared with the spec's tables (`tests/fixtures/flags/*.md`, copies of
//! the spec's `flags/`); plus Go's exit codes and messages: `-h` → usage,
//! exit 0; an unknown flag or a bad value → Go's message and the usage,
//! exit 2; `--version` → the daemons' `name v1.3.0 (built w/...)` or the
//! apps' `name v1.3.0`, exit 0.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use nsq_tests::{bin_path, fixture, run_bin, RunOutput};

/// (name in `Usage of`, spec file, whether it is a daemon).
const BINARIES: &[(&str, &str, bool)] = &[
    ("nsqd", "nsqd", true),
    ("nsqlookupd", "nsqlookupd", true),
    ("nsqadmin", "nsqadmin", true),
    ("nsq_tail", "nsq_tail", false),
    ("to_nsq", "to_nsq", false),
    ("nsq_to_nsq", "nsq_to_nsq", false),
    ("nsq_stat", "nsq_stat", false),
    ("nsq_to_file", "nsq_to_file", false),
    ("nsq_to_http", "nsq_to_http", false),
];

/// nsq-rs's own flags (binary, flag, type, default as Go prints it), listed
/// beside NSQ's and documented in docs/ (each daemon's page, and the
/// feature's); every other flag is NSQ's.
const ADDITIONS: &[(&str, &str, &str, &str)] = &[
    ("nsqd", "max-attempts", "int", ""),
    ("nsqd", "max-age", "duration", ""),
    ("nsqd", "max-defer-timeout", "duration", ""),
    ("nsqd", "deferred-spill", "", ""),
    ("nsqd", "log-format", "string", "\"nsq\""),
    ("nsqlookupd", "log-format", "string", "\"nsq\""),
    ("nsqadmin", "log-format", "string", "\"nsq\""),
    // HTTP access control (docs/features/http-auth.md)
    ("nsqd", "http-auth-required", "", ""),
    ("nsqd", "http-max-connections", "int", "1024"),
    ("nsqlookupd", "http-auth-required", "", ""),
    ("nsqlookupd", "http-max-connections", "int", "1024"),
    ("nsqlookupd", "auth-http-address", "value", ""),
    (
        "nsqlookupd",
        "auth-http-request-method",
        "string",
        "\"get\"",
    ),
    (
        "nsqlookupd",
        "http-client-connect-timeout",
        "duration",
        "2s",
    ),
    (
        "nsqlookupd",
        "http-client-request-timeout",
        "duration",
        "5s",
    ),
    ("nsqlookupd", "tls-root-ca-file", "string", ""),
    // TLS between the daemons (docs/features/tls-between-daemons.md)
    ("nsqlookupd", "https-address", "string", ""),
    ("nsqlookupd", "tls-required", "", ""),
    ("nsqlookupd", "tls-cert", "string", ""),
    ("nsqlookupd", "tls-key", "string", ""),
    ("nsqlookupd", "tls-client-auth-policy", "string", ""),
    ("nsqlookupd", "tls-min-version", "value", "tls1.0"),
    // Replicated topics (docs/replication.md, "nsqd integration")
    ("nsqd", "replication-address", "string", ""),
    ("nsqd", "replication-peer", "value", ""),
    ("nsqd", "replication-groups", "int", "16"),
    ("nsqd", "replication-election-timeout", "duration", "1s"),
    ("nsqd", "replication-snapshot-entries", "int", "10000"),
    ("nsqadmin", "http-secret", "string", ""),
    ("nsq_tail", "http-secret", "string", ""),
    ("nsq_to_nsq", "http-secret", "string", ""),
    ("nsq_stat", "http-secret", "string", ""),
    ("nsq_to_file", "http-secret", "string", ""),
    ("nsq_to_http", "http-secret", "string", ""),
];

fn run(bin: &str, args: &[&str]) -> RunOutput {
    run_bin(bin, args, Duration::from_secs(10))
}

fn code(out: &RunOutput) -> Option<i32> {
    out.status.and_then(|s| s.code())
}

/// What `Usage of` names: the daemons their flag set, the apps (Go's global
/// flag set) their argv[0], nsq_to_file its flag set "nsqd" as NSQ's does.
fn usage_name(bin: &str, daemon: bool) -> String {
    match bin {
        "nsq_to_file" => "nsqd".into(),
        _ if daemon => bin.into(),
        _ => bin_path(bin).display().to_string(),
    }
}

/// One flag of a listing or a spec table: type name ("" for bools) and
/// default ("" when Go prints none).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    type_name: String,
    default: String,
}

/// Go's `PrintDefaults` output, read back.
fn parse_listing(text: &str) -> BTreeMap<String, Entry> {
    let mut out = BTreeMap::new();
    let mut lines = text.lines().skip(1).peekable();
    while let Some(line) = lines.next() {
        let head = line
            .strip_prefix("  -")
            .unwrap_or_else(|| panic!("not a flag line: {line:?}\n{text}"));
        let (name, type_name, inline_usage) = match head.split_once('\t') {
            // a one-letter bool keeps its usage on its own line
            Some((name, usage)) => (name.to_string(), String::new(), Some(usage.to_string())),
            None => match head.split_once(' ') {
                Some((n, t)) => (n.to_string(), t.to_string(), None),
                None => (head.to_string(), String::new(), None),
            },
        };
        let usage = match inline_usage {
            Some(u) => u,
            None => lines
                .next()
                .and_then(|l| l.strip_prefix("    \t"))
                .unwrap_or_else(|| panic!("no usage line after -{name}\n{text}"))
                .to_string(),
        };
        let default = usage
            .find(" (default ")
            .filter(|_| usage.ends_with(')'))
            .map(|i| usage[i + " (default ".len()..usage.len() - 1].to_string())
            .unwrap_or_default();
        out.insert(name, Entry { type_name, default });
    }
    out
}

/// The spec's table (`| --flag | type | default |`), with what its
/// extraction from real help texts left in the defaults undone: a default
/// is the text of the last `(default ` in Go's line; a bool's type column
/// is `bool` (Go prints none); a string's default is quoted, an unquoted
/// one (or an int's non-number) came from the usage text, so Go printed no
/// default; `vm` is the spec machine's host name.
fn parse_spec(text: &str, hostname: &str) -> BTreeMap<String, Entry> {
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("| `--")) {
        let cols: Vec<&str> = line.split('|').map(str::trim).collect();
        let name = cols[1]
            .trim_matches('`')
            .trim_start_matches("--")
            .to_string();
        let type_name = match cols[2] {
            "bool" => String::new(),
            t => t.to_string(),
        };
        let mut default = cols[3].to_string();
        if let Some(i) = default.rfind("(default ") {
            default = default[i + "(default ".len()..].to_string();
        }
        let from_usage = match type_name.as_str() {
            "string" => !default.is_empty() && !default.starts_with('"'),
            "int" => !default.is_empty() && default.parse::<i64>().is_err(),
            _ => false,
        };
        if from_usage {
            default.clear();
        }
        if default == "\"vm\"" {
            default = format!("{:?}", hostname);
        }
        out.insert(name, Entry { type_name, default });
    }
    out
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("hostname")
        .trim_end()
        .to_string()
}

#[test]
fn help_lists_nsqs_flags_names_types_and_defaults() {
    let host = hostname();
    for &(bin, spec, daemon) in BINARIES {
        for help in ["--help", "-h", "-help"] {
            let out = run(bin, &[help]);
            assert_eq!(code(&out), Some(0), "{bin} {help}: {out:?}");
            assert!(out.stdout.is_empty(), "{bin} {help} writes to stderr");
        }
        let out = run(bin, &["--help"]);
        let header = format!("Usage of {}:\n", usage_name(bin, daemon));
        assert!(
            out.stderr.starts_with(&header),
            "{bin}: {header:?} expected:\n{}",
            out.stderr
        );
        let mut got = parse_listing(&out.stderr);
        let want = parse_spec(&fixture(&format!("flags/{spec}.md")), &host);
        let names: Vec<&String> = got.keys().collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted, "{bin}: Go lists flags sorted");
        // nsqd's default node id is a hash of the host's name (617 for the spec's).
        if let Some(id) = got.get_mut("node-id") {
            let n: i64 = id.default.parse().unwrap_or(-1);
            assert!((0..1024).contains(&n), "node-id default {n}");
            id.default = "617".into();
        }
        for &(_, flag, type_name, default) in ADDITIONS.iter().filter(|a| a.0 == bin) {
            let entry = got
                .remove(flag)
                .unwrap_or_else(|| panic!("{bin}: nsq-rs's -{flag} is missing"));
            assert_eq!(entry.type_name, type_name, "{bin} -{flag}: type");
            assert_eq!(entry.default, default, "{bin} -{flag}: default");
        }
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>(),
            "{bin}: flag names"
        );
        for (name, w) in &want {
            assert_eq!(&got[name], w, "{bin} -{name}: type and default");
        }
    }
}

#[test]
fn unknown_flags_and_bad_values_are_gos_errors_exit_2() {
    for &(bin, _, daemon) in BINARIES {
        let out = run(bin, &["--bogus"]);
        assert_eq!(code(&out), Some(2), "{bin} --bogus: {out:?}");
        let usage = format!(
            "flag provided but not defined: -bogus\nUsage of {}:\n",
            usage_name(bin, daemon)
        );
        assert!(out.stderr.starts_with(&usage), "{bin}:\n{}", out.stderr);
        let out = run(bin, &["-x=1"]);
        assert_eq!(code(&out), Some(2), "{bin} -x=1: {out:?}");
    }
    let bad: &[(&str, &[&str], &str)] = &[
        (
            "nsqd",
            &["--mem-queue-size=lots"],
            "invalid value \"lots\" for flag -mem-queue-size: parse error",
        ),
        (
            "nsqd",
            &["--msg-timeout", "5"],
            "invalid value \"5\" for flag -msg-timeout: parse error",
        ),
        (
            "nsqd",
            &["--snappy=maybe"],
            "invalid boolean value \"maybe\" for -snappy: parse error",
        ),
        (
            "nsqd",
            &["--log-level=loud"],
            "invalid value \"loud\" for flag -log-level: invalid log level 'loud' (debug, info, warn, error, fatal)",
        ),
        (
            "nsqd",
            &["--tls-min-version=tls9"],
            "invalid value \"tls9\" for flag -tls-min-version: unknown tlsVersionOption \"tls9\"",
        ),
        ("nsqd", &["--data-path"], "flag needs an argument: -data-path"),
        (
            "nsqlookupd",
            &["-tombstone-lifetime", "x"],
            "invalid value \"x\" for flag -tombstone-lifetime: parse error",
        ),
        (
            "nsqadmin",
            &["--proxy-graphite=2"],
            "invalid boolean value \"2\" for -proxy-graphite: parse error",
        ),
        (
            "nsq_tail",
            &["--max-in-flight=1.5"],
            "invalid value \"1.5\" for flag -max-in-flight: parse error",
        ),
    ];
    for (bin, args, message) in bad {
        let out = run(bin, args);
        assert_eq!(code(&out), Some(2), "{bin} {args:?}: {out:?}");
        assert!(
            out.stderr.starts_with(&format!("{message}\nUsage of ")),
            "{bin} {args:?}:\n{}",
            out.stderr
        );
    }
}

#[test]
fn version_formats() {
    for &(bin, _, daemon) in BINARIES {
        if bin == "to_nsq" {
            continue; // NSQ's to_nsq has no --version
        }
        for flag in ["--version", "-version", "--version=true"] {
            let out = run(bin, &[flag]);
            assert_eq!(code(&out), Some(0), "{bin} {flag}: {out:?}");
            if daemon {
                let prefix = format!("{bin} v1.3.0 (built w/rust");
                assert!(
                    out.stdout.starts_with(&prefix) && out.stdout.ends_with(")\n"),
                    "{bin}: {:?}",
                    out.stdout
                );
            } else {
                assert_eq!(out.stdout, format!("{bin} v1.3.0\n"), "{bin}");
            }
        }
    }
}

#[test]
fn go_flag_syntax_everywhere() {
    // `-flag value`, `--flag=value`, a bool as `-flag`, and the first
    // non-flag argument ending the flags: nsqlookupd starts with all four.
    let tcp = format!("127.0.0.1:{}", nsq_tests::free_port());
    let http = format!("127.0.0.1:{}", nsq_tests::free_port());
    let mut child = std::process::Command::new(bin_path("nsqlookupd"))
        .args([
            "-tcp-address",
            &tcp,
            &format!("--http-address={http}"),
            "-verbose",
            "positional",
            "--bogus-after-positional",
        ])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn nsqlookupd");
    let up = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        nsq_tests::http_request_timeout(&http, "GET", "/ping", &[], None, Duration::from_secs(1))
            .map(|r| r.status == 200)
            .unwrap_or(false)
    });
    nsq_tests::terminate(&mut child, Duration::from_secs(5));
    assert!(up, "nsqlookupd took Go's flag syntax");
}

#[test]
fn listing_parser_reads_go_output() {
    let text = "Usage of x:\n  -a\tone-letter bool\n  -b int\n    \tnumber (default 5)\n  -c string\n    \ttext (default \"d (default x)\")\n  -d value\n    \tlevel (default INFO)\n";
    let got = parse_listing(text);
    assert_eq!(got["a"].type_name, "");
    assert_eq!(got["b"].default, "5");
    assert_eq!(got["c"].default, "\"d (default x)\"");
    assert_eq!(got["d"].default, "INFO");
    let spec = "| `--broadcast-address` | string | to the OS hostname) (default \"vm\" |\n| `--max-channel-consumers` | int | 0, i.e., unlimited |\n| `--destination-topic` | string | is consumed topic name |\n| `--verbose` | bool |  |\n";
    let want = parse_spec(spec, "h");
    assert_eq!(want["broadcast-address"].default, "\"h\"");
    assert_eq!(want["max-channel-consumers"].default, "");
    assert_eq!(want["destination-topic"].default, "");
    assert_eq!(want["verbose"].type_name, "");
}

/// nsq_pubsub (NSQ's apps/nsq_pubsub, no table in the spec) and nsq_bench
/// (ours, the mode first): the same mechanism, so the same Go behaviour.
#[test]
fn binaries_without_a_spec_table_behave_the_same() {
    let cases: &[(&str, &[&str], &str)] = &[
        ("nsq_pubsub", &[], "Usage of nsq_pubsub:\n"),
        (
            "nsq_bench",
            &["pub"],
            "Usage of nsq_bench <pub|sub|pubsub|latency|defer>:\n",
        ),
    ];
    for &(bin, mode, header) in cases {
        let with = |extra: &'static str| -> Vec<&str> {
            let mut a = mode.to_vec();
            a.push(extra);
            a
        };
        let out = run(bin, &with("--help"));
        assert_eq!(code(&out), Some(0), "{bin} --help: {out:?}");
        assert!(out.stderr.starts_with(header), "{bin}:\n{}", out.stderr);
        let listing = parse_listing(&out.stderr);
        assert!(listing.len() > 3, "{bin}: {listing:?}");
        let out = run(bin, &with("--bogus"));
        assert_eq!(code(&out), Some(2), "{bin} --bogus: {out:?}");
        let want = format!("flag provided but not defined: -bogus\n{header}");
        assert!(out.stderr.starts_with(&want), "{bin}:\n{}", out.stderr);
    }
    let out = run("nsq_pubsub", &["--version"]);
    assert_eq!(
        (code(&out), out.stdout.as_str()),
        (Some(0), "nsq_pubsub v1.3.0\n")
    );
}

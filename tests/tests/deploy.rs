//! The example configuration files in deploy/config/ (the ones the systemd
//! units in deploy/systemd/ point at): each daemon starts with its file, and
//! every key in the file takes effect.
//!
//! Only the listen addresses and nsqd's data path are given on the command
//! line (a flag wins over the file), so the cluster runs on free loopback
//! ports in temporary directories. For nsqd, every other key of nsqd.toml is
//! read back through `GET /config/<key>` and compared with the file.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nsq_tests::*;
use serde_json::Value;

fn example(name: &str) -> PathBuf {
    workspace_root().join("deploy").join("config").join(name)
}

fn example_table(name: &str) -> toml::Table {
    let path = example(name);
    let text =
        fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    text.parse()
        .unwrap_or_else(|e| panic!("{} is not valid TOML: {e}", path.display()))
}

/// nsqlookupd or nsqadmin on free ports; SIGTERM (then SIGKILL) on drop.
struct Daemon {
    child: Child,
    http_addr: String,
    tcp_addr: String,
    stderr_path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Daemon {
    /// Starts `name` with `args(tcp_addr, http_addr)` and waits for its
    /// `/ping`; retries with new ports when the picked ones were taken.
    fn start(name: &str, args: impl Fn(&str, &str) -> Vec<String>) -> Daemon {
        let mut last = String::new();
        for _ in 0..5 {
            match Self::try_start(name, &args) {
                Ok(d) => return d,
                Err(e) => last = e,
            }
        }
        panic!("{name} did not start: {last}");
    }

    fn try_start(name: &str, args: &dyn Fn(&str, &str) -> Vec<String>) -> Result<Daemon, String> {
        let (tcp, http) = (free_port(), free_port());
        if tcp == http {
            return Err("same port picked twice".into());
        }
        let (tcp_addr, http_addr) = (format!("127.0.0.1:{tcp}"), format!("127.0.0.1:{http}"));
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let stderr_path = dir.path().join("stderr");
        let stderr = fs::File::create(&stderr_path).map_err(|e| e.to_string())?;
        let child = Command::new(bin_path(name))
            .args(args(&tcp_addr, &http_addr))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("spawn: {e}"))?;
        let mut d = Daemon {
            child,
            http_addr,
            tcp_addr,
            stderr_path,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(st)) = d.child.try_wait() {
                return Err(format!("exited early ({st}): {}", d.stderr()));
            }
            if let Ok(r) = http_request(&d.http_addr, "GET", "/ping", &[], None) {
                if r.status == 200 {
                    return Ok(d);
                }
            }
            if Instant::now() > deadline {
                return Err(format!("no /ping within 20 s: {}", d.stderr()));
            }
            sleep_ms(20);
        }
    }

    fn stderr(&self) -> String {
        fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        terminate(&mut self.child, Duration::from_secs(5));
    }
}

/// A Go duration as nsqd's /config reports it (nanoseconds): "1m0s", "2s",
/// "10m0s", "500ms" or an integer of milliseconds, as the config files allow.
fn duration_ns(v: &toml::Value) -> i64 {
    let s = match v {
        toml::Value::Integer(ms) => return ms * 1_000_000,
        toml::Value::String(s) => s.as_str(),
        other => panic!("duration {other} is neither a string nor an integer"),
    };
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or_else(|| panic!("duration {s:?} has a number without a unit"));
        let n: f64 = rest[..end].parse().expect("a number");
        rest = &rest[end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "h" => 3.6e12,
            "m" => 6e10,
            "s" => 1e9,
            "ms" => 1e6,
            "us" | "µs" => 1e3,
            "ns" => 1.0,
            u => panic!("duration {s:?}: unit {u:?}"),
        };
        total += n * scale;
        rest = &rest[unit_end..];
    }
    total as i64
}

/// nsqlookupd and nsqadmin have no /config for most keys: each key of their
/// example file must at least be one of their flags (`--help`), with the
/// list keys' plural names mapped as the daemons map them.
fn assert_keys_are_flags(name: &str, file: &str, renames: &[(&str, &str)]) {
    let out = run_bin(name, &["--help"], Duration::from_secs(10));
    let help = format!("{}{}", out.stdout, out.stderr);
    for key in example_table(file).keys() {
        let flag = renames
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, f)| f.to_string())
            .unwrap_or_else(|| key.replace('_', "-"));
        assert!(
            help.contains(&format!("-{flag} ")) || help.contains(&format!("-{flag}=")),
            "{file}: key {key} is not a flag of {name} (-{flag}):\n{help}"
        );
    }
}

#[test]
fn daemons_start_with_the_example_configs_and_apply_every_key() {
    let lookupd = Daemon::start("nsqlookupd", |tcp, http| {
        vec![
            format!("--config={}", example("nsqlookupd.toml").display()),
            format!("--tcp-address={tcp}"),
            format!("--http-address={http}"),
            "--broadcast-address=127.0.0.1".into(),
        ]
    });

    let overridden = [
        "tcp_address",
        "http_address",
        "https_address",
        "data_path",
        "broadcast_address",
        "nsqlookupd_tcp_addresses",
    ];
    let data = tempfile::tempdir().unwrap();
    let lookupd_tcp = lookupd.tcp_addr.clone();
    let nsqd = Nsqd::start_with(data.path(), |p: &Ports| {
        vec![
            format!("--config={}", example("nsqd.toml").display()),
            format!("--tcp-address={}", p.tcp),
            format!("--http-address={}", p.http),
            format!("--data-path={}", p.data_path.display()),
            "--broadcast-address=127.0.0.1".into(),
            format!("--lookupd-tcp-address={lookupd_tcp}"),
        ]
    });
    assert_eq!(nsqd.data_path(), Path::new(data.path()));

    // Every key of the file reached nsqd's options.
    let table = example_table("nsqd.toml");
    assert!(table.len() > 5, "nsqd.toml sets only {} keys", table.len());
    for (key, want) in &table {
        if overridden.contains(&key.as_str()) {
            continue;
        }
        let r = nsqd.get(&format!("/config/{key}"));
        assert_eq!(r.status, 200, "GET /config/{key}: {}", r.text());
        let got = r.text();
        match (key.as_str(), want) {
            ("log_level", toml::Value::String(level)) => {
                let num = ["debug", "info", "warn", "error", "fatal"]
                    .iter()
                    .position(|l| l == level)
                    .unwrap_or_else(|| panic!("log_level {level:?}"))
                    + 1;
                assert_eq!(got, num.to_string(), "log_level");
            }
            (k, v) if k.ends_with("_timeout") || k.ends_with("_time") => {
                assert_eq!(got, duration_ns(v).to_string(), "{k} = {v}");
            }
            (k, toml::Value::Integer(i)) => assert_eq!(got, i.to_string(), "{k}"),
            (k, toml::Value::Boolean(b)) => assert_eq!(got, b.to_string(), "{k}"),
            (k, toml::Value::String(s)) => assert_eq!(&got, s, "{k}"),
            (k, toml::Value::Array(items)) => {
                let got: Value = serde_json::from_str(&got).expect("a JSON list");
                let got = got.as_array().expect("a JSON list");
                assert_eq!(got.len(), items.len(), "{k}: {got:?} vs {items:?}");
                for (g, w) in got.iter().zip(items) {
                    let w = match w {
                        toml::Value::Float(f) => *f,
                        toml::Value::Integer(i) => *i as f64,
                        other => panic!("{k}: item {other}"),
                    };
                    assert_eq!(g.as_f64(), Some(w), "{k}: {got:?} vs {items:?}");
                }
            }
            (k, v) => panic!("{k} = {v}: no comparison for this type"),
        }
    }

    let admin = Daemon::start("nsqadmin", |_, http| {
        vec![
            format!("--config={}", example("nsqadmin.toml").display()),
            format!("--http-address={http}"),
            format!("--lookupd-http-address={}", lookupd.http_addr),
        ]
    });

    // The cluster works end to end: nsqd registers the topic with nsqlookupd,
    // nsqadmin finds it there.
    nsqd.http_pub("deployed", b"hello");
    wait_for(Duration::from_secs(20), "nsqadmin lists the topic", || {
        let r = http_request(&admin.http_addr, "GET", "/api/topics", &[], None).ok()?;
        let v: Value = serde_json::from_slice(&r.body).ok()?;
        v["topics"]
            .as_array()?
            .iter()
            .any(|t| t == "deployed")
            .then_some(())
    });
    drop(admin);
    drop(lookupd);

    assert_keys_are_flags("nsqlookupd", "nsqlookupd.toml", &[]);
    assert_keys_are_flags(
        "nsqadmin",
        "nsqadmin.toml",
        &[("nsqlookupd_http_addresses", "lookupd-http-address")],
    );
}

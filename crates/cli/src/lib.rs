//! The plumbing every nsq-rs binary shares, so each `main` stays a page of
//! wiring: Go-compatible command lines (`-flag`, `--flag=value`), the TOML
//! `--config` file (flag names with `_`, command line wins), log setup with
//! a runtime-adjustable level, and SIGINT/SIGTERM as one cancellation token.

pub mod goflag;
pub mod golog;

use std::ffi::OsString;
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{ArgMatches, Command};
use tokio_util::sync::CancellationToken;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::prelude::*;
use tracing_subscriber::reload;

/// Go's `flag` rules for a clap command (nsqd, nsqlookupd, nsqadmin, nsq_pubsub):
/// rewrites `args` (after the program name) so that `-name` becomes
/// `--name`, a flag that takes a value gets the next argument verbatim
/// (even one starting with `-`) as `--name=value`, `-h`/`-help` become
/// `--help`, and everything from the first non-flag argument (or `--`) on
/// is passed after `--`. A flag takes a value when its clap action stores
/// values and it does not use `require_equals` (the Go-bool form
/// `-name`/`-name=<bool>`).
pub fn go_flag_args(cmd: &Command, args: impl IntoIterator<Item = OsString>) -> Vec<String> {
    let takes_value = |name: &str| {
        cmd.get_arguments().any(|a| {
            a.get_long() == Some(name)
                && a.get_action().takes_values()
                && !a.is_require_equals_set()
        })
    };
    let mut it = args.into_iter().map(|a| a.to_string_lossy().into_owned());
    let mut out = Vec::new();
    while let Some(arg) = it.next() {
        if arg == "--" {
            out.push(arg);
            out.extend(it.by_ref());
            break;
        }
        if !arg.starts_with('-') || arg == "-" {
            out.push("--".into());
            out.push(arg);
            out.extend(it.by_ref());
            break;
        }
        let body = arg.strip_prefix("--").unwrap_or(&arg[1..]);
        let (name, value) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (body, None),
        };
        if value.is_none() && (name == "h" || name == "help") {
            out.push("--help".into());
        } else if takes_value(name) {
            match value.map(str::to_owned).or_else(|| it.next()) {
                Some(v) => out.push(format!("--{name}={v}")),
                None => out.push(format!("--{name}")), // clap reports the missing value
            }
        } else {
            out.push(format!("--{body}"));
        }
    }
    out
}

/// A whole argv (program name first) through [`go_flag_args`], ready for clap.
pub fn go_args(cmd: &Command, argv: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let mut argv = argv.into_iter();
    let mut out: Vec<OsString> = argv.next().into_iter().collect();
    out.extend(go_flag_args(cmd, argv).into_iter().map(OsString::from));
    out
}

/// Parses the command line, then fills every flag the command line did not
/// set from the TOML file named by `--config` (keys are flag names with `-`
/// replaced by `_`; `renames` maps config keys that differ, e.g. `id` →
/// `node-id`). Durations may be strings or integer milliseconds.
pub fn parse_with_config(cmd: Command, renames: &[(&str, &str)]) -> Result<ArgMatches, String> {
    let args = go_args(&cmd, std::env::args_os());
    let matches = cmd
        .clone()
        .try_get_matches_from(&args)
        .map_err(|e| e.render().to_string())?;
    let Some(path) = matches
        .get_one::<String>("config")
        .filter(|p| !p.is_empty())
    else {
        return Ok(matches);
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("failed to load config file {path} - {e}"))?;
    let table: toml::Table = text
        .parse()
        .map_err(|e| format!("failed to load config file {path} - {e}"))?;
    let mut extra: Vec<OsString> = Vec::new();
    for (key, value) in table {
        let flag = renames
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, f)| f.to_string())
            .unwrap_or_else(|| key.replace('_', "-"));
        let Some(arg) = cmd
            .get_arguments()
            .find(|a| a.get_long() == Some(flag.as_str()))
        else {
            tracing::warn!(key, "unknown key in config file, ignored");
            continue;
        };
        if matches.value_source(arg.get_id().as_str()) == Some(ValueSource::CommandLine) {
            continue;
        }
        let is_duration = arg
            .get_value_names()
            .is_some_and(|v| v.iter().any(|n| n.as_str() == "DURATION"));
        let values: Vec<String> = match value {
            toml::Value::Array(items) => items
                .iter()
                .map(|v| toml_scalar(v, is_duration))
                .collect::<Result<_, _>>()?,
            v => vec![toml_scalar(&v, is_duration)?],
        };
        for v in values {
            extra.push(OsString::from(format!("--{flag}={v}")));
        }
    }
    let mut all = args;
    all.extend(extra);
    cmd.try_get_matches_from(&all)
        .map_err(|e| e.render().to_string())
}

fn toml_scalar(v: &toml::Value, is_duration: bool) -> Result<String, String> {
    Ok(match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(i) if is_duration => format!("{i}ms"),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        other => return Err(format!("unsupported config value {other}")),
    })
}

/// A clap value parser for Go durations.
pub fn duration_arg(s: &str) -> Result<Duration, String> {
    nsq_protocol::duration::parse(s)
}

/// A clap value parser for Go booleans (`true`, `1`, `t`, `false`, ...).
pub fn bool_arg(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(format!("parse error: invalid boolean {s:?}")),
    }
}

/// Changes the log level at run time (nsqd's `PUT /config/log_level`).
pub type LevelSetter = Box<dyn Fn(&str) -> bool + Send + Sync>;

fn level_filter(level: &str) -> Option<LevelFilter> {
    Some(match level.to_lowercase().as_str() {
        "debug" => LevelFilter::DEBUG,
        "info" => LevelFilter::INFO,
        "warn" | "warning" => LevelFilter::WARN,
        "error" | "fatal" => LevelFilter::ERROR,
        _ => return None,
    })
}

/// Logs to stderr at `level`; returns a setter for later changes.
pub fn init_logging(level: &str, prefix: &str) -> Result<LevelSetter, String> {
    let filter = level_filter(level).ok_or_else(|| format!("invalid log level {level:?}"))?;
    let (layer, handle) = reload::Layer::new(filter);
    let prefix = prefix.to_string();
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(false)
        .with_timer(PrefixTimer(prefix));
    tracing_subscriber::registry().with(layer).with(fmt).init();
    Ok(Box::new(move |l: &str| match level_filter(l) {
        Some(f) => handle.modify(|cur| *cur = f).is_ok(),
        None => false,
    }))
}

/// Writes `<prefix><timestamp>` as Go's logger does.
struct PrefixTimer(String);

impl tracing_subscriber::fmt::time::FormatTime for PrefixTimer {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        write!(w, "{}{}", self.0, timestamp())
    }
}

/// `2006/01/02 15:04:05.000000` in UTC (the daemons' log timestamp).
pub fn timestamp() -> String {
    timestamp_at(std::time::SystemTime::now())
}

/// [`timestamp`] of a given time.
pub fn timestamp_at(t: std::time::SystemTime) -> String {
    let since = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let (y, m, d, hh, mm, ss) = nsq_protocol::duration::civil_utc(since.as_secs() as i64);
    format!(
        "{y:04}/{m:02}/{d:02} {hh:02}:{mm:02}:{ss:02}.{:06}",
        since.subsec_micros()
    )
}

/// Prints `<prefix><ts> FATAL: <msg>` to stderr, as Go's daemons do before exiting 1.
pub fn fatal(prefix: &str, msg: &str) -> ! {
    eprintln!("{prefix}{} FATAL: {msg}", timestamp());
    std::process::exit(1)
}

/// A token cancelled by the first SIGINT or SIGTERM.
pub fn shutdown_on_signals() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut int), Ok(mut term)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) else {
            tracing::error!("cannot install signal handlers");
            return;
        };
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        tracing::info!("signal received, shutting down");
        t.cancel();
    });
    token
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn daemon_timestamp() {
        let t = std::time::UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456);
        assert_eq!(timestamp_at(t), "2023/11/14 22:13:20.123456");
    }

    #[test]
    fn go_flag_rules_for_clap() {
        use clap::{Arg, ArgAction};
        let cmd = Command::new("d")
            .arg(Arg::new("addr").long("addr"))
            .arg(
                Arg::new("v")
                    .long("v")
                    .num_args(0..=1)
                    .require_equals(true)
                    .default_missing_value("true"),
            )
            .arg(Arg::new("on").long("on").action(ArgAction::SetTrue));
        let out = go_flag_args(
            &cmd,
            ["-addr", "-x", "-v", "-on", "--addr=1", "pos", "-addr=2"].map(OsString::from),
        );
        assert_eq!(
            out,
            [
                "--addr=-x",
                "--v",
                "--on",
                "--addr=1",
                "--",
                "pos",
                "-addr=2"
            ]
        );
        assert_eq!(go_flag_args(&cmd, ["-h"].map(OsString::from)), ["--help"]);
        assert_eq!(
            go_flag_args(&cmd, ["-addr"].map(OsString::from)),
            ["--addr"]
        );
        assert_eq!(
            go_flag_args(&cmd, ["--", "-v"].map(OsString::from)),
            ["--", "-v"]
        );
    }

    #[test]
    fn go_bools() {
        assert_eq!(bool_arg("false"), Ok(false));
        assert_eq!(bool_arg("1"), Ok(true));
        assert!(bool_arg("yes").is_err());
    }
}

//! The plumbing every nsq-rs binary shares, so each `main` stays a page of
//! wiring: Go-compatible command lines (`-flag`, `--flag=value`), the TOML
//! `--config` file (flag names with `_`, command line wins), log setup with
//! a runtime-adjustable level, and SIGINT/SIGTERM as one cancellation token.

pub mod goflag;

use std::ffi::OsString;
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{ArgMatches, Command};
use tokio_util::sync::CancellationToken;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::prelude::*;
use tracing_subscriber::reload;

/// Go's flag package takes `-name` as well as `--name`; clap wants the latter.
pub fn go_style_args(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    args.into_iter()
        .enumerate()
        .map(|(i, a)| {
            let s = a.to_string_lossy();
            if i > 0 && s.starts_with('-') && !s.starts_with("--") && s.len() > 2 {
                OsString::from(format!("-{s}"))
            } else {
                a
            }
        })
        .collect()
}

/// Parses the command line, then fills every flag the command line did not
/// set from the TOML file named by `--config` (keys are flag names with `-`
/// replaced by `_`; `renames` maps config keys that differ, e.g. `id` →
/// `node-id`). Durations may be strings or integer milliseconds.
pub fn parse_with_config(cmd: Command, renames: &[(&str, &str)]) -> Result<ArgMatches, String> {
    let args = go_style_args(std::env::args_os());
    let matches = cmd.clone().try_get_matches_from(&args).map_err(|e| e.render().to_string())?;
    let Some(path) = matches.get_one::<String>("config").filter(|p| !p.is_empty()) else { return Ok(matches) };
    let text = std::fs::read_to_string(path).map_err(|e| format!("failed to load config file {path} - {e}"))?;
    let table: toml::Table = text.parse().map_err(|e| format!("failed to load config file {path} - {e}"))?;
    let mut extra: Vec<OsString> = Vec::new();
    for (key, value) in table {
        let flag = renames.iter().find(|(k, _)| *k == key).map(|(_, f)| f.to_string()).unwrap_or_else(|| key.replace('_', "-"));
        let Some(arg) = cmd.get_arguments().find(|a| a.get_long() == Some(flag.as_str())) else {
            tracing::warn!(key, "unknown key in config file, ignored");
            continue;
        };
        if matches.value_source(arg.get_id().as_str()) == Some(ValueSource::CommandLine) {
            continue;
        }
        let is_duration = arg.get_value_names().is_some_and(|v| v.iter().any(|n| n.as_str() == "DURATION"));
        let values: Vec<String> = match value {
            toml::Value::Array(items) => items.iter().map(|v| toml_scalar(v, is_duration)).collect::<Result<_, _>>()?,
            v => vec![toml_scalar(&v, is_duration)?],
        };
        for v in values {
            extra.push(OsString::from(format!("--{flag}={v}")));
        }
    }
    let mut all = args;
    all.extend(extra);
    cmd.try_get_matches_from(&all).map_err(|e| e.render().to_string())
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

/// `2006/01/02 15:04:05.000000` in UTC.
pub fn timestamp() -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let (y, m, d, hh, mm, ss) = nsq_protocol::duration::civil_utc(now.as_secs() as i64);
    format!("{y:04}/{m:02}/{d:02} {hh:02}:{mm:02}:{ss:02}.{:06}", now.subsec_micros())
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
        let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) else {
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
    fn single_dash_long_flags_become_double() {
        let out = go_style_args(["nsqd", "-tcp-address=1", "--http-address", "x", "-", "-v"].map(OsString::from));
        let out: Vec<String> = out.into_iter().map(|s| s.into_string().unwrap()).collect();
        assert_eq!(out, ["nsqd", "--tcp-address=1", "--http-address", "x", "-", "-v"]);
    }

    #[test]
    fn go_bools() {
        assert_eq!(bool_arg("false"), Ok(false));
        assert_eq!(bool_arg("1"), Ok(true));
        assert!(bool_arg("yes").is_err());
    }
}

//! nsqlookupd's command line and config file, as Go's nsqlookupd reads them.
//!
//! * Go `flag` syntax: `-name` and `--name`, `=value` or a separate value
//!   (taken verbatim even if it starts with `-`); booleans only as `-name` or
//!   `-name=<bool>`; parsing stops at the first non-flag argument or `--`.
//!   [`nsq_cli::go_flag_args`] rewrites that into a form clap parses unambiguously.
//! * `--config <file>`: TOML whose keys are the flag names with `-` → `_`.
//!   Precedence: flag given on the command line > config file > default
//!   (NSQ's go-options `Resolve`), including its value coercions (an integer
//!   duration means milliseconds).

use std::ffi::OsString;

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser};

use crate::duration::{self, GoDuration};

/// nsqlookupd's flags, names and defaults exactly as NSQ 1.3.0's.
#[derive(Parser, Debug)]
#[command(
    name = "nsqlookupd",
    about = "nsqlookupd: the NSQ discovery daemon",
    disable_version_flag = true,
    after_help = "Flags may be given as -name or --name, with =value or a separate value."
)]
pub struct Flags {
    /// path to config file (TOML; keys are flag names with '-' replaced by '_')
    #[arg(
        long,
        default_value = "",
        hide_default_value = true,
        value_name = "string"
    )]
    pub config: String,

    /// print version string
    #[arg(long, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true,
          default_value = "false", default_missing_value = "true", value_parser = parse_bool,
          hide_default_value = true, value_name = "bool")]
    pub version: bool,

    /// set log verbosity: debug, info, warn, error, or fatal
    #[arg(long, default_value = "INFO", value_parser = parse_log_level, value_name = "value")]
    pub log_level: LogLevel,

    /// log message prefix
    #[arg(long, default_value = "[nsqlookupd] ", value_name = "string")]
    pub log_prefix: String,

    /// [deprecated] has no effect, use --log-level
    #[arg(long, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true,
          default_value = "false", default_missing_value = "true", value_parser = parse_bool,
          hide_default_value = true, value_name = "bool")]
    pub verbose: bool,

    /// <addr>:<port> to listen on for TCP clients
    #[arg(long, default_value = "0.0.0.0:4160", value_name = "string")]
    pub tcp_address: String,

    /// <addr>:<port> to listen on for HTTP clients
    #[arg(long, default_value = "0.0.0.0:4161", value_name = "string")]
    pub http_address: String,

    /// address of this lookupd node, (default to the OS hostname)
    #[arg(long, value_name = "string")]
    pub broadcast_address: Option<String>,

    /// duration of time a producer will remain in the active list since its last ping
    #[arg(long, default_value = "5m0s", value_parser = parse_duration, value_name = "duration")]
    pub inactive_producer_timeout: GoDuration,

    /// duration of time a producer will remain tombstoned if registration remains
    #[arg(long, default_value = "45s", value_parser = parse_duration, value_name = "duration")]
    pub tombstone_lifetime: GoDuration,

    /// Arguments after the flags; Go's nsqlookupd ignores them.
    #[arg(hide = true, num_args = 0..)]
    pub args: Vec<String>,
}

/// `--log-level` values (case-insensitive on input).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Debug,
    Info,
    Warn,
    Error,
    Fatal,
}

fn parse_log_level(s: &str) -> Result<LogLevel, String> {
    match s.to_lowercase().as_str() {
        "debug" => Ok(LogLevel::Debug),
        "info" => Ok(LogLevel::Info),
        "warn" => Ok(LogLevel::Warn),
        "error" => Ok(LogLevel::Error),
        "fatal" => Ok(LogLevel::Fatal),
        _ => Err(format!(
            "invalid log level '{s}' (debug, info, warn, error, fatal)"
        )),
    }
}

/// Go's `strconv.ParseBool`.
fn parse_bool(s: &str) -> Result<bool, String> {
    nsq_cli::bool_arg(s).map_err(|_| "parse error".into())
}

fn parse_duration(s: &str) -> Result<GoDuration, String> {
    duration::parse(s).map_err(|_| "parse error".to_string())
}

/// Parses the process arguments; clap's error (exit 2, or 0 for help) on
/// failure.
pub fn parse(argv: impl IntoIterator<Item = OsString>) -> Result<(Flags, ArgMatches), clap::Error> {
    let cmd = Flags::command();
    let matches = cmd
        .clone()
        .try_get_matches_from(nsq_cli::go_args(&cmd, argv))?;
    let flags = Flags::from_arg_matches(&matches)?;
    Ok((flags, matches))
}

/// Everything `main` needs after resolution.
#[derive(Debug)]
pub struct Resolved {
    pub opts: nsqlookupd::Options,
    pub log_level: LogLevel,
    pub log_prefix: String,
}

/// A fatal configuration problem; the message is what NSQ logs as FATAL.
#[derive(Debug)]
pub struct ConfigError(pub String);

/// Applies NSQ's precedence: command line > config file > defaults.
/// `config_text` is the config file's contents, if `--config` was given.
pub fn resolve(
    flags: Flags,
    matches: &ArgMatches,
    config_text: Option<&str>,
) -> Result<Resolved, ConfigError> {
    let table: toml::Table = match config_text {
        Some(text) => text.parse().map_err(|e| {
            ConfigError(format!("failed to load config file {} - {e}", flags.config))
        })?,
        None => toml::Table::new(),
    };
    let on_cli = |id: &str| matches.value_source(id) == Some(ValueSource::CommandLine);
    // The flag value wins if given; else the config key, if present.
    let from_config = |id: &str| if on_cli(id) { None } else { table.get(id) };

    let log_level = match from_config("log_level") {
        Some(v) => parse_log_level(&go_sprint_v(v))
            .map_err(|_| ConfigError(format!("failed parsing log_level {}", go_sprint_v(v))))?,
        None => flags.log_level,
    };
    let string = |id: &str, flag: String| from_config(id).map(go_sprint_s).unwrap_or(flag);
    let duration = |id: &str, field: &str, flag: GoDuration| -> Result<GoDuration, ConfigError> {
        match from_config(id) {
            None => Ok(flag),
            Some(toml::Value::String(s)) => {
                duration::parse(s).map_err(|e| coerce_error(s, field, &e.to_string()))
            }
            Some(toml::Value::Integer(ms)) => Ok(GoDuration(ms.saturating_mul(1_000_000))),
            Some(other) => Err(coerce_error(
                &go_sprint_v(other),
                field,
                &format!("invalid time.Duration value type {}", go_type(other)),
            )),
        }
    };

    let broadcast_address = match (from_config("broadcast_address"), flags.broadcast_address) {
        (Some(v), _) => go_sprint_s(v),
        (None, Some(flag)) => flag,
        (None, None) => nsqlookupd::hostname().map_err(|e| ConfigError(e.to_string()))?,
    };
    let opts = nsqlookupd::Options {
        tcp_address: string("tcp_address", flags.tcp_address),
        http_address: string("http_address", flags.http_address),
        broadcast_address,
        inactive_producer_timeout: duration(
            "inactive_producer_timeout",
            "InactiveProducerTimeout",
            flags.inactive_producer_timeout,
        )?
        .to_std(),
        tombstone_lifetime: duration(
            "tombstone_lifetime",
            "TombstoneLifetime",
            flags.tombstone_lifetime,
        )?
        .to_std(),
    };
    Ok(Resolved {
        opts,
        log_level,
        log_prefix: string("log_prefix", flags.log_prefix),
    })
}

fn coerce_error(value: &str, field: &str, why: &str) -> ConfigError {
    ConfigError(format!(
        "Resolve failed to coerce value {value} for field {field} - {why}"
    ))
}

/// Go's `fmt.Sprintf("%v", v)` of a decoded TOML value.
fn go_sprint_v(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Go's `fmt.Sprintf("%s", v)` (go-options' string coercion): strings as
/// is, anything else in Go's `%!s(type=value)` form.
fn go_sprint_s(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => format!("%!s({}={})", go_type(other), other),
    }
}

fn go_type(v: &toml::Value) -> &'static str {
    match v {
        toml::Value::String(_) => "string",
        toml::Value::Integer(_) => "int64",
        toml::Value::Float(_) => "float64",
        toml::Value::Boolean(_) => "bool",
        toml::Value::Datetime(_) => "toml.Datetime",
        toml::Value::Array(_) => "[]interface {}",
        toml::Value::Table(_) => "map[string]interface {}",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn args(a: &[&str]) -> Vec<OsString> {
        std::iter::once("nsqlookupd")
            .chain(a.iter().copied())
            .map(OsString::from)
            .collect()
    }

    fn resolved(a: &[&str], config: Option<&str>) -> Result<Resolved, ConfigError> {
        let (flags, m) = parse(args(a)).unwrap();
        resolve(flags, &m, config)
    }

    #[test]
    fn defaults() {
        let r = resolved(&[], None).unwrap();
        assert_eq!(r.opts.tcp_address, "0.0.0.0:4160");
        assert_eq!(r.opts.http_address, "0.0.0.0:4161");
        assert_eq!(r.opts.broadcast_address, nsqlookupd::hostname().unwrap());
        assert_eq!(r.opts.inactive_producer_timeout, Duration::from_secs(300));
        assert_eq!(r.opts.tombstone_lifetime, Duration::from_secs(45));
        assert_eq!(r.log_level, LogLevel::Info);
        assert_eq!(r.log_prefix, "[nsqlookupd] ");
    }

    #[test]
    fn go_flag_syntax() {
        let r = resolved(
            &[
                "-tcp-address=127.0.0.1:1",
                "--http-address",
                "127.0.0.1:2",
                "-broadcast-address",
                "-weird",
                "--tombstone-lifetime=2s",
                "-inactive-producer-timeout",
                "1m30s",
                "-log-level=WARN",
                "-verbose",
                "positional",
                "-tcp-address=ignored",
            ],
            None,
        )
        .unwrap();
        assert_eq!(r.opts.tcp_address, "127.0.0.1:1");
        assert_eq!(r.opts.http_address, "127.0.0.1:2");
        assert_eq!(r.opts.broadcast_address, "-weird");
        assert_eq!(r.opts.tombstone_lifetime, Duration::from_secs(2));
        assert_eq!(r.opts.inactive_producer_timeout, Duration::from_secs(90));
        assert_eq!(r.log_level, LogLevel::Warn);
    }

    #[test]
    fn booleans() {
        assert!(parse(args(&["-version"])).unwrap().0.version);
        assert!(parse(args(&["--version=true"])).unwrap().0.version);
        assert!(!parse(args(&["--version=0"])).unwrap().0.version);
        assert!(!parse(args(&[])).unwrap().0.version);
    }

    #[test]
    fn errors_exit_2() {
        for bad in [
            &["--bogus"][..],
            &["--tombstone-lifetime=5"],
            &["--log-level=loud"],
            &["--version=maybe"],
            &["--tcp-address"],
        ] {
            let e = parse(args(bad)).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad:?}");
        }
        assert_eq!(parse(args(&["-h"])).unwrap_err().exit_code(), 0);
        assert_eq!(parse(args(&["-help"])).unwrap_err().exit_code(), 0);
    }

    #[test]
    fn config_file_precedence_and_coercion() {
        let config = r#"
            tcp_address = "127.0.0.1:10"
            http_address = "127.0.0.1:11"
            broadcast_address = "cfg-host"
            inactive_producer_timeout = "10s"
            tombstone_lifetime = 1500
            log_level = "debug"
            log_prefix = "[cfg] "
            unknown_key = 1
        "#;
        let r = resolved(
            &["--config=x.toml", "--http-address=127.0.0.1:99"],
            Some(config),
        )
        .unwrap();
        assert_eq!(r.opts.tcp_address, "127.0.0.1:10");
        assert_eq!(r.opts.http_address, "127.0.0.1:99"); // flag wins
        assert_eq!(r.opts.broadcast_address, "cfg-host");
        assert_eq!(r.opts.inactive_producer_timeout, Duration::from_secs(10));
        assert_eq!(r.opts.tombstone_lifetime, Duration::from_millis(1500)); // integer = ms
        assert_eq!(r.log_level, LogLevel::Debug);
        assert_eq!(r.log_prefix, "[cfg] ");
    }

    #[test]
    fn config_errors() {
        let e = |c: &str| resolved(&["--config=x.toml"], Some(c)).unwrap_err().0;
        assert_eq!(e("log_level = \"loud\""), "failed parsing log_level loud");
        assert!(e("tombstone_lifetime = \"5\"")
            .starts_with("Resolve failed to coerce value 5 for field TombstoneLifetime"));
        assert!(e("not toml =").starts_with("failed to load config file x.toml - "));
        let r = resolved(&["--config=x.toml"], Some("tcp_address = 4160")).unwrap();
        assert_eq!(r.opts.tcp_address, "%!s(int64=4160)");
    }
}

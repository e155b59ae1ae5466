//! The types an option can have, each parsed and printed as Go's `flag`
//! package does it (`strconv`'s bools, ints in any base, floats, Go's
//! durations, repeatable strings) and shown as `/config/<opt>` shows it.
//! The declaration and parsing mechanism is the parent module's.

use std::time::Duration;

use super::{go_sprint_v, go_type, ConfigValue, Json, TomlError, Value};

impl Value for bool {
    const TYPE: &'static str = "";
    const BOOL: bool = true;

    fn set(&mut self, s: &str) -> Result<(), String> {
        *self = parse_bool(s).ok_or("parse error")?;
        Ok(())
    }

    fn show(&self) -> String {
        self.to_string()
    }

    fn config(&self) -> ConfigValue {
        ConfigValue::Json(Json::Bool(*self))
    }
}

/// Go's `strconv.ParseBool`.
pub fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

macro_rules! int_value {
    ($($t:ty),*) => {$(
        impl Value for $t {
            const TYPE: &'static str = "int";

            fn set(&mut self, s: &str) -> Result<(), String> {
                *self = <$t>::try_from(parse_go_int(s)?).map_err(|_| "value out of range")?;
                Ok(())
            }

            fn show(&self) -> String {
                self.to_string()
            }

            fn config(&self) -> ConfigValue {
                ConfigValue::Json(Json::from(*self))
            }
        }
    )*};
}

int_value!(i64, i32, u16, u32, u64, usize);

/// `strconv.ParseInt(s, 0, 64)` as the flag package reports it (`parse
/// error` or `value out of range`): sign, `0x`/`0o`/`0b`/`0` prefixes, and
/// `_` only between digits or after a base prefix, as Go allows with base 0.
pub fn parse_go_int(s: &str) -> Result<i64, String> {
    let (neg, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let lower = digits.to_ascii_lowercase();
    let (radix, body, prefixed) = if let Some(r) = lower.strip_prefix("0x") {
        (16, r, true)
    } else if let Some(r) = lower.strip_prefix("0b") {
        (2, r, true)
    } else if let Some(r) = lower.strip_prefix("0o") {
        (8, r, true)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..], true)
    } else {
        (10, lower.as_str(), false)
    };
    let bad_underscores =
        body.contains("__") || body.ends_with('_') || (body.starts_with('_') && !prefixed);
    let clean: String = body.chars().filter(|&c| c != '_').collect();
    if clean.is_empty() || bad_underscores || !clean.chars().all(|c| c.is_digit(radix)) {
        return Err("parse error".into());
    }
    let magnitude =
        u128::from_str_radix(&clean, radix).map_err(|_| "value out of range".to_string())?;
    let v: i128 = if neg {
        -(magnitude as i128)
    } else {
        magnitude as i128
    };
    i64::try_from(v).map_err(|_| "value out of range".to_string())
}

impl Value for f64 {
    const TYPE: &'static str = "float";

    fn set(&mut self, s: &str) -> Result<(), String> {
        *self = parse_go_float(s)?;
        Ok(())
    }

    fn show(&self) -> String {
        nsq_protocol::gofmt::go_float(*self)
    }

    fn config(&self) -> ConfigValue {
        ConfigValue::Json(Json::from(*self))
    }
}

/// `strconv.ParseFloat(s, 64)` for the forms people type.
fn parse_go_float(s: &str) -> Result<f64, String> {
    let t = s.replace('_', "");
    match t.to_ascii_lowercase().trim_start_matches(['+', '-']) {
        "inf" | "infinity" | "nan" => {}
        other if other.chars().any(|c| c.is_ascii_alphabetic() && c != 'e') => {
            return Err("parse error".into())
        }
        _ => {}
    }
    let v: f64 = t.parse().map_err(|_| "parse error".to_string())?;
    if v.is_infinite() && !t.to_ascii_lowercase().contains("inf") {
        return Err("value out of range".into());
    }
    Ok(v)
}

impl Value for String {
    const TYPE: &'static str = "string";
    const QUOTED: bool = true;

    fn set(&mut self, s: &str) -> Result<(), String> {
        s.clone_into(self);
        Ok(())
    }

    fn show(&self) -> String {
        self.clone()
    }

    fn config(&self) -> ConfigValue {
        ConfigValue::Text(self.clone())
    }

    /// go-options: `fmt.Sprintf("%s", v)`, so a number becomes `%!s(int64=1)`.
    fn set_toml(&mut self, v: &toml::Value) -> Result<(), TomlError> {
        *self = match v {
            toml::Value::String(s) => s.clone(),
            other => format!("%!s({}={})", go_type(other), other),
        };
        Ok(())
    }
}

/// Go durations; a negative one (Go allows them) acts as zero, which has
/// the same effect wherever NSQ compares them.
impl Value for Duration {
    const TYPE: &'static str = "duration";

    fn set(&mut self, s: &str) -> Result<(), String> {
        let ns = nsq_protocol::duration::parse_signed(s).map_err(|_| "parse error")?;
        *self = Duration::from_nanos(u64::try_from(ns).unwrap_or(0));
        Ok(())
    }

    fn show(&self) -> String {
        nsq_protocol::duration::format(*self)
    }

    fn config(&self) -> ConfigValue {
        ConfigValue::Json(Json::from(
            i64::try_from(self.as_nanos()).unwrap_or(i64::MAX),
        ))
    }

    /// A string in Go's syntax, or an integer number of milliseconds.
    fn set_toml(&mut self, v: &toml::Value) -> Result<(), TomlError> {
        match v {
            toml::Value::String(s) => {
                let ns = nsq_protocol::duration::parse_signed(s).map_err(TomlError::Coerce)?;
                *self = Duration::from_nanos(u64::try_from(ns).unwrap_or(0));
                Ok(())
            }
            toml::Value::Integer(ms) => {
                *self = Duration::from_millis(u64::try_from(*ms).unwrap_or(0));
                Ok(())
            }
            other => Err(TomlError::Coerce(format!(
                "invalid time.Duration value type {}",
                go_type(other)
            ))),
        }
    }
}

/// A repeatable string option (NSQ's `app.StringArray`).
impl Value for Vec<String> {
    const TYPE: &'static str = "value";

    fn set(&mut self, s: &str) -> Result<(), String> {
        self.push(s.to_string());
        Ok(())
    }

    fn show(&self) -> String {
        self.join(",")
    }

    fn config(&self) -> ConfigValue {
        ConfigValue::Json(Json::from(self.clone()))
    }
}

/// The non-positive durations Go code tests with `<= 0`, as `None`.
pub fn positive(d: Duration) -> Option<Duration> {
    (!d.is_zero()).then_some(d)
}

/// NSQ's log levels (`--log-level`): `debug`, `info`, `warn`, `error`,
/// `fatal` in any case; printed as NSQ prints them (`INFO`, `WARNING`);
/// `/config/log_level` shows the number (1 to 5).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Debug,
    #[default]
    Info,
    Warn,
    Error,
    Fatal,
}

impl LogLevel {
    /// NSQ's number for the level (`/config/log_level`).
    pub fn number(self) -> i64 {
        self as i64 + 1
    }

    /// The lower-case name (`info`).
    pub fn name(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
            LogLevel::Fatal => "fatal",
        }
    }
}

impl std::str::FromStr for LogLevel {
    type Err = String;

    /// NSQ's `lg.ParseLogLevel`, with its error text.
    fn from_str(s: &str) -> Result<LogLevel, String> {
        Ok(match s.to_lowercase().as_str() {
            "debug" => LogLevel::Debug,
            "info" => LogLevel::Info,
            "warn" => LogLevel::Warn,
            "error" => LogLevel::Error,
            "fatal" => LogLevel::Fatal,
            _ => {
                return Err(format!(
                    "invalid log level '{s}' (debug, info, warn, error, fatal)"
                ))
            }
        })
    }
}

impl Value for LogLevel {
    const TYPE: &'static str = "value";

    fn set(&mut self, s: &str) -> Result<(), String> {
        *self = s.parse()?;
        Ok(())
    }

    fn show(&self) -> String {
        match self {
            LogLevel::Debug => "DEBUG",
            LogLevel::Info => "INFO",
            LogLevel::Warn => "WARNING",
            LogLevel::Error => "ERROR",
            LogLevel::Fatal => "FATAL",
        }
        .into()
    }

    /// NSQ's levels have no printable zero value, so Go always shows the default.
    fn is_zero(&self) -> bool {
        false
    }

    fn config(&self) -> ConfigValue {
        ConfigValue::Json(Json::from(self.number()))
    }

    /// The daemons' config check: `failed parsing log_level <v>`.
    fn set_toml(&mut self, v: &toml::Value) -> Result<(), TomlError> {
        let text = go_sprint_v(v);
        self.set(&text)
            .map_err(|_| TomlError::Fatal(format!("failed parsing log_level {text}")))
    }
}

/// `--tls-min-version` of nsqd and nsqlookupd: the TLS protocol number
/// (`/config` shows 769 for tls1.0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TlsMinVersion(pub u16);

impl Value for TlsMinVersion {
    const TYPE: &'static str = "value";

    fn set(&mut self, s: &str) -> Result<(), String> {
        self.0 = match s.to_lowercase().as_str() {
            // empty keeps the value, as in nsqd
            "" => return Ok(()),
            "ssl3.0" => 0x0300,
            "tls1.0" => 0x0301,
            "tls1.1" => 0x0302,
            "tls1.2" => 0x0303,
            "tls1.3" => 0x0304,
            v => {
                return Err(format!(
                    "unknown tlsVersionOption {}",
                    nsq_protocol::gofmt::quote(v)
                ))
            }
        };
        Ok(())
    }

    fn show(&self) -> String {
        match self.0 {
            0x0300 => "ssl3.0",
            0x0301 => "tls1.0",
            0x0302 => "tls1.1",
            0x0303 => "tls1.2",
            0x0304 => "tls1.3",
            _ => "",
        }
        .into()
    }

    fn config(&self) -> ConfigValue {
        ConfigValue::Json(Json::from(self.0))
    }

    fn set_toml(&mut self, v: &toml::Value) -> Result<(), TomlError> {
        let text = go_sprint_v(v);
        self.set(&text)
            .map_err(|_| TomlError::Fatal(format!("failed parsing tls_min_version {text}")))
    }
}

//! Client settings shared by [`crate::Producer`] and [`crate::Consumer`].
//!
//! Names, defaults and ranges are go-nsq's (`config.go`), so an operator who
//! knows `--max-in-flight` or `lookupd_poll_interval` from the Go tools finds
//! the same knob here. This module only holds values and checks them; it
//! never opens a socket.

use std::time::Duration;

/// Every tunable of a producer or consumer connection. Build one with
/// [`Config::default`] and change the fields you need.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Timeout for the TCP dial to nsqd (and to nsqlookupd's HTTP port).
    pub dial_timeout: Duration,
    /// A connection that receives nothing (not even a heartbeat) for this long is dead.
    pub read_timeout: Duration,
    /// Deadline for one write to nsqd.
    pub write_timeout: Duration,

    /// Time between nsqlookupd polls; without lookupds, the delay before
    /// reconnecting to a lost nsqd.
    pub lookupd_poll_interval: Duration,
    /// Fraction (0..=1) of the poll interval used as a random delay before
    /// the periodic polls start, so consumers restarted together spread out.
    pub lookupd_poll_jitter: f64,
    /// Deadline for one `/lookup` request.
    pub lookupd_poll_timeout: Duration,

    /// Upper bound of the automatic requeue delay.
    pub max_requeue_delay: Duration,
    /// Requeue delay for a failed message = this × attempts (capped above).
    pub default_requeue_delay: Duration,
    /// Longest backoff; `0` disables backoff entirely.
    pub max_backoff_duration: Duration,
    /// Backoff for level `n` is `backoff_multiplier × 2^n`.
    pub backoff_multiplier: Duration,
    /// Messages delivered more often than this are finished without calling
    /// the handler (`0` = never give up).
    pub max_attempts: u16,

    /// In RDY redistribution mode, a connection without a message for this
    /// long gives its RDY back.
    pub low_rdy_idle_timeout: Duration,
    /// In RDY redistribution mode, a connection holding RDY for this long gives it back.
    pub low_rdy_timeout: Duration,
    /// How often RDY is redistributed when connections outnumber `max_in_flight`.
    pub rdy_redistribute_interval: Duration,

    /// Sent in IDENTIFY (default: short host name).
    pub client_id: String,
    /// Sent in IDENTIFY (default: host name).
    pub hostname: String,
    /// Sent in IDENTIFY (default `nsq-rs-client/<crate version>`).
    pub user_agent: String,
    pub topology_region: String,
    pub topology_zone: String,

    /// Heartbeat interval asked of nsqd; must be below `read_timeout`.
    pub heartbeat_interval: Duration,
    /// Percentage (0..=99) of the channel's messages to receive; 0 = all.
    pub sample_rate: i32,
    /// nsqd's per-connection output buffer, bytes.
    pub output_buffer_size: i64,
    /// nsqd's output buffer flush timeout.
    pub output_buffer_timeout: Duration,
    /// Most messages this consumer holds unacknowledged, over all connections.
    pub max_in_flight: i64,
    /// Server-side message timeout for this client; zero = nsqd's default.
    pub msg_timeout: Duration,
    /// Largest frame accepted from nsqd, bytes; 0 = no limit.
    pub max_msg_size: u32,
    /// Secret for nsqd AUTH, used when nsqd says `auth_required`.
    pub auth_secret: Option<String>,
    /// nsq-rs: secret for the lookupds' HTTP API when they run with
    /// `--http-auth-required` (sent as `Authorization: Bearer`).
    pub http_secret: Option<String>,

    /// Ask nsqd for TLS (the connection is upgraded when nsqd agrees).
    pub tls_v1: bool,
    /// PEM file of the CAs that may sign nsqd's certificate; without it the
    /// system's CAs, as Go finds them.
    pub tls_root_ca_file: Option<String>,
    /// Accept any server certificate (testing only).
    pub tls_insecure_skip_verify: bool,
    /// Name checked against nsqd's certificate; default: the host of the address.
    pub tls_server_name: Option<String>,
    /// Ask nsqd for snappy compression (not together with `deflate`).
    pub snappy: bool,
    /// Ask nsqd for deflate compression (not together with `snappy`).
    pub deflate: bool,
    /// Deflate level (1..=9) for both directions; nsqd caps its side at `--max-deflate-level`.
    pub deflate_level: i32,
}

/// The user agent this crate announces.
pub const USER_AGENT: &str = concat!("nsq-rs-client/", env!("CARGO_PKG_VERSION"));

impl Default for Config {
    fn default() -> Self {
        let hostname = local_hostname();
        Config {
            dial_timeout: Duration::from_secs(1),
            read_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(1),
            lookupd_poll_interval: Duration::from_secs(60),
            lookupd_poll_jitter: 0.3,
            lookupd_poll_timeout: Duration::from_secs(60),
            max_requeue_delay: Duration::from_secs(15 * 60),
            default_requeue_delay: Duration::from_secs(90),
            max_backoff_duration: Duration::from_secs(120),
            backoff_multiplier: Duration::from_secs(1),
            max_attempts: 5,
            low_rdy_idle_timeout: Duration::from_secs(10),
            low_rdy_timeout: Duration::from_secs(30),
            rdy_redistribute_interval: Duration::from_secs(5),
            client_id: hostname.split('.').next().unwrap_or_default().to_string(),
            hostname,
            user_agent: USER_AGENT.to_string(),
            topology_region: String::new(),
            topology_zone: String::new(),
            heartbeat_interval: Duration::from_secs(30),
            sample_rate: 0,
            output_buffer_size: 16384,
            output_buffer_timeout: Duration::from_millis(250),
            max_in_flight: 1,
            msg_timeout: Duration::ZERO,
            max_msg_size: 0,
            auth_secret: None,
            http_secret: None,
            tls_v1: false,
            tls_root_ca_file: None,
            tls_insecure_skip_verify: false,
            tls_server_name: None,
            snappy: false,
            deflate: false,
            deflate_level: 6,
        }
    }
}

/// A setting outside go-nsq's accepted range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid config: {0}")]
pub struct ConfigError(pub String);

impl Config {
    /// Checks the ranges go-nsq enforces (`min`/`max` struct tags and the
    /// heartbeat < read timeout rule).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |s: String| Err(ConfigError(s));
        let secs = Duration::from_secs;
        let in_range = |name: &str, v: Duration, lo: Duration, hi: Duration| {
            if v < lo || v > hi {
                Err(ConfigError(format!(
                    "{name} {v:?} out of range {lo:?}..={hi:?}"
                )))
            } else {
                Ok(())
            }
        };
        in_range(
            "read_timeout",
            self.read_timeout,
            Duration::from_millis(100),
            secs(300),
        )?;
        in_range(
            "write_timeout",
            self.write_timeout,
            Duration::from_millis(100),
            secs(300),
        )?;
        in_range(
            "lookupd_poll_interval",
            self.lookupd_poll_interval,
            Duration::from_millis(10),
            secs(300),
        )?;
        in_range(
            "max_requeue_delay",
            self.max_requeue_delay,
            Duration::ZERO,
            secs(3600),
        )?;
        in_range(
            "default_requeue_delay",
            self.default_requeue_delay,
            Duration::ZERO,
            secs(3600),
        )?;
        in_range(
            "max_backoff_duration",
            self.max_backoff_duration,
            Duration::ZERO,
            secs(3600),
        )?;
        in_range(
            "backoff_multiplier",
            self.backoff_multiplier,
            Duration::ZERO,
            secs(3600),
        )?;
        in_range(
            "low_rdy_idle_timeout",
            self.low_rdy_idle_timeout,
            secs(1),
            secs(300),
        )?;
        in_range("low_rdy_timeout", self.low_rdy_timeout, secs(1), secs(300))?;
        in_range(
            "rdy_redistribute_interval",
            self.rdy_redistribute_interval,
            Duration::from_millis(1),
            secs(5),
        )?;
        if !(0.0..=1.0).contains(&self.lookupd_poll_jitter) {
            return err(format!(
                "lookupd_poll_jitter {} out of range 0..=1",
                self.lookupd_poll_jitter
            ));
        }
        if !(0..=99).contains(&self.sample_rate) {
            return err(format!(
                "sample_rate {} out of range 0..=99",
                self.sample_rate
            ));
        }
        if self.max_in_flight < 0 {
            return err(format!("max_in_flight {} must be >= 0", self.max_in_flight));
        }
        if !(1..=9).contains(&self.deflate_level) {
            return err(format!(
                "deflate_level {} out of range 1..=9",
                self.deflate_level
            ));
        }
        if self.snappy && self.deflate {
            return err("cannot enable both deflate and snappy compression".to_string());
        }
        if self.heartbeat_interval >= self.read_timeout {
            return err(format!(
                "heartbeat_interval {:?} must be less than read_timeout {:?}",
                self.heartbeat_interval, self.read_timeout
            ));
        }
        Ok(())
    }

    /// The requeue delay go-nsq uses for a failed message: linear in the
    /// attempts, capped at `max_requeue_delay`.
    pub fn requeue_delay(&self, attempts: u16) -> Duration {
        self.default_requeue_delay
            .saturating_mul(u32::from(attempts))
            .min(self.max_requeue_delay)
    }
}

/// A `--consumer-opt`/`--producer-opt` value before it is coerced to the
/// option's type: text after the comma, or a bare key (go-nsq passes `true`).
#[derive(Clone, Copy)]
enum OptValue<'a> {
    Text(&'a str),
    BareTrue,
}

impl std::fmt::Display for OptValue<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OptValue::Text(s) => f.write_str(s),
            OptValue::BareTrue => f.write_str("true"),
        }
    }
}

impl Config {
    /// go-nsq's `Config.Set(option, value)` for the string values the apps
    /// pass through: `-` in `key` becomes `_`; durations are Go strings
    /// (`250ms`, `1m`) or — an extension the Go flag path lacks — integer
    /// milliseconds; booleans follow Go's `strconv.ParseBool`. Ranges are
    /// checked as go-nsq checks them, with its messages. Client certificates
    /// (`tls_cert`, `tls_key`), `tls_min_version` and `local_addr` are
    /// recognised but refused: this client does not implement them yet.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        self.set_value(key, OptValue::Text(value))
    }

    /// Whether `opt` would be accepted by [`Config::set_opt`], as the error
    /// text a command-line flag reports (the apps' `--consumer-opt` and
    /// `--producer-opt` validators).
    pub fn check_opt(opt: &str) -> Result<(), String> {
        Config::default().set_opt(opt).map_err(|e| e.0)
    }

    /// go-nsq's `ConfigFlag.Set`: `key,value`, or a bare `key` meaning `true`.
    pub fn set_opt(&mut self, opt: &str) -> Result<(), ConfigError> {
        match opt.split_once(',') {
            Some((key, value)) => self.set_value(key, OptValue::Text(value)),
            None => self.set_value(opt, OptValue::BareTrue),
        }
    }

    fn set_value(&mut self, key: &str, value: OptValue<'_>) -> Result<(), ConfigError> {
        let option = key.replace('-', "_");
        let o = option.as_str();
        let ms = Duration::from_millis;
        let secs = Duration::from_secs;
        let max = Duration::MAX;
        match o {
            "dial_timeout" => self.dial_timeout = opt_duration(o, value, Duration::ZERO, max)?,
            "read_timeout" => self.read_timeout = opt_duration(o, value, ms(100), secs(300))?,
            "write_timeout" => self.write_timeout = opt_duration(o, value, ms(100), secs(300))?,
            "lookupd_poll_interval" => {
                self.lookupd_poll_interval = opt_duration(o, value, ms(10), secs(300))?
            }
            "lookupd_poll_timeout" => {
                self.lookupd_poll_timeout = opt_duration(o, value, Duration::ZERO, max)?
            }
            "max_requeue_delay" => {
                self.max_requeue_delay = opt_duration(o, value, Duration::ZERO, secs(3600))?
            }
            "default_requeue_delay" => {
                self.default_requeue_delay = opt_duration(o, value, Duration::ZERO, secs(3600))?
            }
            "max_backoff_duration" => {
                self.max_backoff_duration = opt_duration(o, value, Duration::ZERO, secs(3600))?
            }
            "backoff_multiplier" => {
                self.backoff_multiplier = opt_duration(o, value, Duration::ZERO, secs(3600))?
            }
            "low_rdy_idle_timeout" => {
                self.low_rdy_idle_timeout = opt_duration(o, value, secs(1), secs(300))?
            }
            "low_rdy_timeout" => self.low_rdy_timeout = opt_duration(o, value, secs(1), secs(300))?,
            "rdy_redistribute_interval" => {
                self.rdy_redistribute_interval = opt_duration(o, value, ms(1), secs(5))?
            }
            "heartbeat_interval" => {
                self.heartbeat_interval = opt_duration(o, value, Duration::ZERO, max)?
            }
            "output_buffer_timeout" => {
                self.output_buffer_timeout = opt_duration(o, value, Duration::ZERO, max)?
            }
            "msg_timeout" => self.msg_timeout = opt_duration(o, value, Duration::ZERO, max)?,
            "lookupd_poll_jitter" => {
                let v: f64 = opt_parse(o, value, |s| {
                    s.parse::<f64>().map_err(|_| go_num_err("ParseFloat", s))
                })?;
                if v < 0.0 {
                    return Err(ConfigError(format!("invalid {o} ! {v} < 0")));
                }
                if v > 1.0 {
                    return Err(ConfigError(format!("invalid {o} ! {v} > 1")));
                }
                self.lookupd_poll_jitter = v;
            }
            "max_attempts" => self.max_attempts = opt_int(o, value, 0, 65535)? as u16,
            "sample_rate" => self.sample_rate = opt_int(o, value, 0, 99)? as i32,
            "max_in_flight" => self.max_in_flight = opt_int(o, value, 0, i64::MAX)?,
            "output_buffer_size" => {
                self.output_buffer_size = opt_int(o, value, i64::MIN, i64::MAX)?
            }
            "max_msg_size" => self.max_msg_size = opt_int(o, value, 0, i64::from(i32::MAX))? as u32,
            "client_id" => self.client_id = value.to_string(),
            "hostname" => self.hostname = value.to_string(),
            "user_agent" => self.user_agent = value.to_string(),
            "topology_region" => self.topology_region = value.to_string(),
            "topology_zone" => self.topology_zone = value.to_string(),
            "auth_secret" => self.auth_secret = Some(value.to_string()),
            "http_secret" => self.http_secret = Some(value.to_string()),
            "backoff_strategy" => match value {
                OptValue::Text("" | "exponential") => {}
                OptValue::Text("full_jitter") => return Err(unsupported(o, value)),
                _ => {
                    return Err(ConfigError(format!(
                        "failed to coerce option {o} ({value}) - invalid value type"
                    )))
                }
            },
            // Only meaningful once lookupd queries carry the auth secret,
            // which they do not; the value is checked and otherwise ignored.
            "skip_lookupd_authorization" => {
                opt_bool(o, value)?;
            }
            "tls_v1" => self.tls_v1 = opt_bool(o, value)?,
            "tls_insecure_skip_verify" => self.tls_insecure_skip_verify = opt_bool(o, value)?,
            "snappy" => self.snappy = opt_bool(o, value)?,
            "deflate" => self.deflate = opt_bool(o, value)?,
            "deflate_level" => self.deflate_level = opt_int(o, value, 1, 9)? as i32,
            "tls_root_ca_file" => {
                self.tls_root_ca_file = Some(value.to_string()).filter(|s| !s.is_empty())
            }
            "tls_server_name" => {
                self.tls_server_name = Some(value.to_string()).filter(|s| !s.is_empty())
            }
            "tls_cert" | "tls_key" | "tls_min_version" | "tls_config" | "local_addr" => {
                return Err(unsupported(o, value))
            }
            _ => return Err(ConfigError(format!("invalid option {o}"))),
        }
        Ok(())
    }
}

fn unsupported(option: &str, value: OptValue<'_>) -> ConfigError {
    ConfigError(format!(
        "option {option} ({value}) is not supported by the nsq-rs client yet"
    ))
}

/// The text of `value`, or go-nsq's coercion error for a bare key given to a
/// non-boolean option.
fn opt_parse<T>(
    option: &str,
    value: OptValue<'_>,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<T, ConfigError> {
    let coerce_err =
        |e: String| ConfigError(format!("failed to coerce option {option} ({value}) - {e}"));
    match value {
        OptValue::Text(s) => parse(s).map_err(coerce_err),
        OptValue::BareTrue => Err(coerce_err("invalid value type".into())),
    }
}

fn go_num_err(func: &str, s: &str) -> String {
    format!("strconv.{func}: parsing {s:?}: invalid syntax")
}

fn opt_duration(
    option: &str,
    value: OptValue<'_>,
    lo: Duration,
    hi: Duration,
) -> Result<Duration, ConfigError> {
    let d = opt_parse(option, value, |s| match s.parse::<u64>() {
        Ok(n) => Ok(Duration::from_millis(n)),
        Err(_) => nsq_protocol::duration::parse(s),
    })?;
    let fmt = nsq_protocol::duration::format;
    if d < lo {
        return Err(ConfigError(format!(
            "invalid {option} ! {} < {}",
            fmt(d),
            fmt(lo)
        )));
    }
    if d > hi {
        return Err(ConfigError(format!(
            "invalid {option} ! {} > {}",
            fmt(d),
            fmt(hi)
        )));
    }
    Ok(d)
}

fn opt_int(option: &str, value: OptValue<'_>, lo: i64, hi: i64) -> Result<i64, ConfigError> {
    let v = opt_parse(option, value, |s| {
        s.parse::<i64>().map_err(|e| match e.kind() {
            std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
                format!("strconv.ParseInt: parsing {s:?}: value out of range")
            }
            _ => go_num_err("ParseInt", s),
        })
    })?;
    if v < lo {
        return Err(ConfigError(format!("invalid {option} ! {v} < {lo}")));
    }
    if v > hi {
        return Err(ConfigError(format!("invalid {option} ! {v} > {hi}")));
    }
    Ok(v)
}

fn opt_bool(option: &str, value: OptValue<'_>) -> Result<bool, ConfigError> {
    match value {
        OptValue::BareTrue => Ok(true),
        OptValue::Text(s) => match s {
            "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
            "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
            _ => Err(ConfigError(format!(
                "failed to coerce option {option} ({value}) - {}",
                go_num_err("ParseBool", s)
            ))),
        },
    }
}

/// The machine's host name, read without libc (Linux proc file, then the
/// environment); "unknown" when neither says.
fn local_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_go_nsq_defaults() {
        let c = Config::default();
        assert_eq!(c.max_in_flight, 1);
        assert_eq!(c.max_attempts, 5);
        assert_eq!(c.lookupd_poll_interval, Duration::from_secs(60));
        assert_eq!(c.max_backoff_duration, Duration::from_secs(120));
        assert!(c.user_agent.starts_with("nsq-rs-client/"));
        assert!(!c.client_id.contains('.'));
        c.validate().unwrap();
    }

    #[test]
    fn requeue_delay_is_linear_and_capped() {
        let c = Config::default();
        assert_eq!(c.requeue_delay(1), Duration::from_secs(90));
        assert_eq!(c.requeue_delay(3), Duration::from_secs(270));
        assert_eq!(c.requeue_delay(100), Duration::from_secs(900));
    }

    #[test]
    fn validation() {
        let c = Config {
            sample_rate: 100,
            ..Config::default()
        };
        assert!(c.validate().is_err());
        let c = Config {
            heartbeat_interval: Duration::from_secs(60),
            ..Config::default()
        };
        assert!(c.validate().is_err());
        let c = Config {
            low_rdy_idle_timeout: Duration::from_millis(10),
            ..Config::default()
        };
        assert!(c.validate().is_err());
        let c = Config {
            max_in_flight: -1,
            ..Config::default()
        };
        assert!(c.validate().is_err());
    }

    #[test]
    fn check_opt_is_set_opt_on_a_scratch_config() {
        assert_eq!(Config::check_opt("max_attempts,10"), Ok(()));
        assert_eq!(Config::check_opt("tls_v1"), Ok(()));
        assert_eq!(
            Config::check_opt("nope,1"),
            Err("invalid option nope".to_string())
        );
    }

    #[test]
    fn set_opt_parses_go_nsq_options() {
        let mut c = Config::default();
        c.set_opt("max_in_flight,50").unwrap();
        c.set_opt("max-attempts,7").unwrap();
        c.set_opt("heartbeat_interval,10s").unwrap();
        c.set_opt("msg_timeout,1500").unwrap();
        c.set_opt("lookupd_poll_jitter,0.5").unwrap();
        c.set_opt("user_agent,a,b").unwrap();
        c.set_opt("auth_secret,s3cret").unwrap();
        c.set("output_buffer_timeout", "0").unwrap();
        c.set("sample_rate", "10").unwrap();
        assert_eq!(c.max_in_flight, 50);
        assert_eq!(c.max_attempts, 7);
        assert_eq!(c.heartbeat_interval, Duration::from_secs(10));
        assert_eq!(c.msg_timeout, Duration::from_millis(1500));
        assert_eq!(c.lookupd_poll_jitter, 0.5);
        assert_eq!(c.user_agent, "a,b");
        assert_eq!(c.auth_secret.as_deref(), Some("s3cret"));
        assert_eq!(c.output_buffer_timeout, Duration::ZERO);
        assert_eq!(c.sample_rate, 10);
        c.validate().unwrap();
    }

    #[test]
    fn set_reports_go_nsq_errors() {
        let mut c = Config::default();
        let err = |c: &mut Config, opt: &str| c.set_opt(opt).unwrap_err().0;
        assert_eq!(err(&mut c, "nope,1"), "invalid option nope");
        assert_eq!(
            err(&mut c, "max_in_flight,abc"),
            "failed to coerce option max_in_flight (abc) - strconv.ParseInt: parsing \"abc\": invalid syntax"
        );
        assert_eq!(
            err(&mut c, "max_in_flight"),
            "failed to coerce option max_in_flight (true) - invalid value type"
        );
        assert_eq!(
            err(&mut c, "sample_rate,100"),
            "invalid sample_rate ! 100 > 99"
        );
        assert_eq!(
            err(&mut c, "read_timeout,10ms"),
            "invalid read_timeout ! 10ms < 100ms"
        );
        assert_eq!(
            err(&mut c, "max_requeue_delay,2h"),
            "invalid max_requeue_delay ! 2h0m0s > 1h0m0s"
        );
        assert_eq!(
            err(&mut c, "dial_timeout,5x"),
            "failed to coerce option dial_timeout (5x) - time: unknown unit \"x\" in duration \"5x\""
        );
        assert_eq!(
            err(&mut c, "deflate_level,0"),
            "invalid deflate_level ! 0 < 1"
        );
        assert_eq!(c, Config::default(), "failed sets change nothing");
    }

    #[test]
    fn tls_and_compression_options() {
        let mut c = Config::default();
        assert_eq!(
            (c.tls_v1, c.snappy, c.deflate, c.deflate_level),
            (false, false, false, 6)
        );
        c.set_opt("tls-v1").unwrap();
        c.set_opt("tls_root_ca_file,/x/ca.pem").unwrap();
        c.set_opt("tls_insecure_skip_verify,true").unwrap();
        c.set_opt("tls_server_name,nsqd.local").unwrap();
        c.set_opt("snappy,1").unwrap();
        c.set_opt("deflate_level,9").unwrap();
        assert!(c.tls_v1 && c.tls_insecure_skip_verify && c.snappy && !c.deflate);
        assert_eq!(c.tls_root_ca_file.as_deref(), Some("/x/ca.pem"));
        assert_eq!(c.tls_server_name.as_deref(), Some("nsqd.local"));
        assert_eq!(c.deflate_level, 9);
        c.validate().unwrap();
        c.set_opt("deflate").unwrap();
        assert!(c
            .validate()
            .unwrap_err()
            .0
            .contains("both deflate and snappy"));
        c.set_opt("snappy,false").unwrap();
        c.validate().unwrap();
        for opt in [
            "tls_cert,/x",
            "tls_key,/x",
            "tls_min_version,tls1.2",
            "local_addr,1.2.3.4",
        ] {
            let e = c.set_opt(opt).unwrap_err().0;
            assert!(e.contains("not supported"), "{opt}: {e}");
        }
        assert!(c
            .set_opt("snappy,maybe")
            .unwrap_err()
            .0
            .contains("ParseBool"));
        assert_eq!(
            c.set_opt("deflate_level,10").unwrap_err().0,
            "invalid deflate_level ! 10 > 9"
        );
    }
}

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
                Err(ConfigError(format!("{name} {v:?} out of range {lo:?}..={hi:?}")))
            } else {
                Ok(())
            }
        };
        in_range("read_timeout", self.read_timeout, Duration::from_millis(100), secs(300))?;
        in_range("write_timeout", self.write_timeout, Duration::from_millis(100), secs(300))?;
        in_range("lookupd_poll_interval", self.lookupd_poll_interval, Duration::from_millis(10), secs(300))?;
        in_range("max_requeue_delay", self.max_requeue_delay, Duration::ZERO, secs(3600))?;
        in_range("default_requeue_delay", self.default_requeue_delay, Duration::ZERO, secs(3600))?;
        in_range("max_backoff_duration", self.max_backoff_duration, Duration::ZERO, secs(3600))?;
        in_range("backoff_multiplier", self.backoff_multiplier, Duration::ZERO, secs(3600))?;
        in_range("low_rdy_idle_timeout", self.low_rdy_idle_timeout, secs(1), secs(300))?;
        in_range("low_rdy_timeout", self.low_rdy_timeout, secs(1), secs(300))?;
        in_range("rdy_redistribute_interval", self.rdy_redistribute_interval, Duration::from_millis(1), secs(5))?;
        if !(0.0..=1.0).contains(&self.lookupd_poll_jitter) {
            return err(format!("lookupd_poll_jitter {} out of range 0..=1", self.lookupd_poll_jitter));
        }
        if !(0..=99).contains(&self.sample_rate) {
            return err(format!("sample_rate {} out of range 0..=99", self.sample_rate));
        }
        if self.max_in_flight < 0 {
            return err(format!("max_in_flight {} must be >= 0", self.max_in_flight));
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
        self.default_requeue_delay.saturating_mul(u32::from(attempts)).min(self.max_requeue_delay)
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
        let c = Config { sample_rate: 100, ..Config::default() };
        assert!(c.validate().is_err());
        let c = Config { heartbeat_interval: Duration::from_secs(60), ..Config::default() };
        assert!(c.validate().is_err());
        let c = Config { low_rdy_idle_timeout: Duration::from_millis(10), ..Config::default() };
        assert!(c.validate().is_err());
        let c = Config { max_in_flight: -1, ..Config::default() };
        assert!(c.validate().is_err());
    }
}

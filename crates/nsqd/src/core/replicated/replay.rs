//! The words of retention and replay on a replicated topic (nsq-rs;
//! docs/features/replay.md): what a `to=` (`/channel/reset`) or `start=`
//! (`/channel/create`) names, and what a `retention=` (`/topic/config`)
//! sets, checked before anything is proposed. Owns those syntaxes
//! (RFC 3339 times included). Never: the log, the clock, or what a reset
//! does (`progress_retention.rs`).

use nsq_protocol::duration::parse_signed;

/// Where a channel's position goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetTo {
    /// The oldest message the topic retains.
    Earliest,
    /// After the newest: only what is published from now on (NSQ's new
    /// channel).
    Latest,
    /// The first message published at or after this time (Unix ns).
    Time(i64),
}

/// Why a `to=`, `start=` or `retention=` is refused: the 400's text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    #[error(
        "INVALID_ARG_TO {0:?} is not earliest, latest or an RFC 3339 time (2026-12-07T21:00:00Z)"
    )]
    To(String),
    #[error("INVALID_ARG_RETENTION {0:?} is not a duration (24h), a size (10GiB), both (24h,10GiB) or 0")]
    Retention(String),
}

impl ResetTo {
    /// The value of `to=` or `start=`.
    pub fn parse(s: &str) -> Result<ResetTo, ReplayError> {
        match s {
            "earliest" => Ok(ResetTo::Earliest),
            "latest" => Ok(ResetTo::Latest),
            _ => parse_rfc3339(s)
                .map(ResetTo::Time)
                .ok_or_else(|| ReplayError::To(s.to_string())),
        }
    }
}

/// A topic's retention: how long (ms) and how many body bytes of its
/// finished messages its group's log keeps; 0 for a bound not set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionSpec {
    pub age_ms: u64,
    pub bytes: u64,
}

impl RetentionSpec {
    /// `retention=`: `0` (none), a duration in Go's syntax (`90m`), a size
    /// (`500MB`, `10GiB`, `1024B`), or a duration and a size separated by a
    /// comma. Negative, unparseable, or two of a kind: refused.
    pub fn parse(s: &str) -> Result<RetentionSpec, ReplayError> {
        let bad = || ReplayError::Retention(s.to_string());
        let mut spec = RetentionSpec::default();
        let (mut age, mut size) = (false, false);
        for part in s.split(',').map(str::trim) {
            if part == "0" {
                continue;
            }
            if let Some(bytes) = parse_size(part) {
                if std::mem::replace(&mut size, true) {
                    return Err(bad());
                }
                spec.bytes = bytes;
            } else {
                let ns = parse_signed(part).map_err(|_| bad())?;
                if ns < 0 || std::mem::replace(&mut age, true) {
                    return Err(bad());
                }
                // Rounded up: a positive age below a millisecond is kept.
                spec.age_ms = (ns as u64).div_ceil(1_000_000);
            }
        }
        Ok(spec)
    }

    pub fn is_off(&self) -> bool {
        self.age_ms == 0 && self.bytes == 0
    }
}

impl std::fmt::Display for RetentionSpec {
    /// As `retention=` takes it: `0`, `24h0m0s`, `1073741824B`, or both.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let age = nsq_protocol::duration::format(std::time::Duration::from_millis(self.age_ms));
        match (self.age_ms, self.bytes) {
            (0, 0) => f.write_str("0"),
            (_, 0) => f.write_str(&age),
            (0, b) => write!(f, "{b}B"),
            (_, b) => write!(f, "{age},{b}B"),
        }
    }
}

/// A size with its unit: `B`, decimal `KB` `MB` `GB` `TB`, binary `KiB`
/// `MiB` `GiB` `TiB`. None for anything else (a plain number is not a
/// size: `0` alone means none).
fn parse_size(s: &str) -> Option<u64> {
    let split = s.find(|c: char| !c.is_ascii_digit())?;
    let (n, unit) = s.split_at(split);
    let n: u64 = n.parse().ok()?;
    let mult: u64 = match unit {
        "B" => 1,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// An RFC 3339 time (`2026-12-07T21:00:00Z`, `...00.5+01:00`; `t` and `z`
/// in either case, a space for the `T`) as Unix nanoseconds.
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20 || !b.is_ascii() {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = &s[r];
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    let sep = |i: usize, c: &[u8]| c.contains(&b[i]);
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt ") && sep(13, b":") && sep(16, b":")) {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, min, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || min > 59
        || sec > 60
    {
        return None;
    }
    let mut at = 19;
    let mut frac_ns = 0i64;
    if b[at] == b'.' {
        let digits = b[at + 1..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        if digits == 0 {
            return None;
        }
        let kept = digits.min(9);
        frac_ns = num(at + 1..at + 1 + kept)? * 10i64.pow(9 - kept as u32);
        at += 1 + digits;
    }
    let offset_s = match &s[at..] {
        "Z" | "z" => 0,
        z if z.len() == 6 && (z.starts_with('+') || z.starts_with('-')) && sep(at + 3, b":") => {
            let (h, m) = (num(at + 1..at + 3)?, num(at + 4..at + 6)?);
            if h > 23 || m > 59 {
                return None;
            }
            let o = h * 3600 + m * 60;
            if z.starts_with('-') {
                -o
            } else {
                o
            }
        }
        _ => return None,
    };
    let secs = days_from_civil(year, month, day) * 86_400 + hour * 3600 + min * 60 + sec - offset_s;
    secs.checked_mul(1_000_000_000)?.checked_add(frac_ns)
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// algorithm, as `duration::civil_utc` goes the other way).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn to_names_earliest_latest_or_a_time() {
        assert_eq!(ResetTo::parse("earliest"), Ok(ResetTo::Earliest));
        assert_eq!(ResetTo::parse("latest"), Ok(ResetTo::Latest));
        assert_eq!(
            ResetTo::parse("2026-11-30T04:16:40Z"),
            Ok(ResetTo::Time(1_796_012_200 * 1_000_000_000))
        );
        for bad in ["", "now", "Earliest", "2026-11-30", "1796012200", "-1h"] {
            assert!(
                matches!(ResetTo::parse(bad), Err(ReplayError::To(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn rfc3339_times_with_fractions_and_offsets() {
        let base = 1_796_012_200 * 1_000_000_000;
        assert_eq!(
            parse_rfc3339("2026-11-30T04:16:40.5Z"),
            Some(base + 500_000_000)
        );
        assert_eq!(
            parse_rfc3339("2026-11-30t04:16:40.123456789123z"),
            Some(base + 123_456_789)
        );
        assert_eq!(parse_rfc3339("2026-11-30T05:16:40+01:00"), Some(base));
        assert_eq!(parse_rfc3339("2026-11-30 03:46:40-00:30"), Some(base));
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339("2024-02-29T00:00:00Z"),
            Some(1_709_164_800 * 1_000_000_000)
        );
        for bad in [
            "2026-02-29T00:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-11-30T24:00:00Z",
            "2026-11-30T04:16:40",
            "2026-11-30T04:16:40.Z",
            "2026-11-30T04:16:40+1:00",
            "2026-11-30T04:16:40+01:00x",
            "+026-11-30T04:16:40Z",
            "2026-11-30T04:16:4éZ",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn retention_is_a_duration_a_size_both_or_none() {
        let spec = |age_ms, bytes| RetentionSpec { age_ms, bytes };
        assert_eq!(RetentionSpec::parse("0"), Ok(spec(0, 0)));
        assert_eq!(RetentionSpec::parse("24h"), Ok(spec(86_400_000, 0)));
        assert_eq!(RetentionSpec::parse("10GiB"), Ok(spec(0, 10 << 30)));
        assert_eq!(
            RetentionSpec::parse("1h30m, 500MB"),
            Ok(spec(5_400_000, 500_000_000))
        );
        assert_eq!(RetentionSpec::parse("1KB,1ns"), Ok(spec(1, 1_000)));
        for bad in [
            "",
            "-1h",
            "1h,2h",
            "1MB,1MB",
            "100",
            "10XB",
            "1h;1MB",
            "99999999999TB",
        ] {
            assert!(RetentionSpec::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(spec(0, 0).to_string(), "0");
        assert_eq!(spec(86_400_000, 0).to_string(), "24h0m0s");
        assert_eq!(spec(60_000, 1024).to_string(), "1m0s,1024B");
        for s in ["0", "24h0m0s", "1024B", "1m0s,1024B"] {
            assert_eq!(RetentionSpec::parse(s).unwrap().to_string(), s);
        }
    }
}

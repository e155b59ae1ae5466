//! Go's duration syntax (`250ms`, `1m0s`, `1h30m`, `1.5s`), which every NSQ
//! binary uses for its duration flags and config keys, parsed and printed.

use std::time::Duration;

/// Parses a Go duration string; negative durations are refused.
pub fn parse(s: &str) -> Result<Duration, String> {
    let orig = s;
    let bad = || format!("time: invalid duration \"{orig}\"");
    let s = s.strip_prefix('+').unwrap_or(s);
    if s.starts_with('-') {
        return Err(bad());
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(bad());
    }
    let mut total: f64 = 0.0;
    let mut rest = s;
    while !rest.is_empty() {
        let num_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(|| format!("time: missing unit in duration \"{orig}\""))?;
        if num_end == 0 {
            return Err(bad());
        }
        let value: f64 = rest[..num_end].parse().map_err(|_| bad())?;
        rest = &rest[num_end..];
        let unit_end = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let unit = &rest[..unit_end];
        rest = &rest[unit_end..];
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => return Err(format!("time: missing unit in duration \"{orig}\"")),
            _ => return Err(format!("time: unknown unit \"{unit}\" in duration \"{orig}\"")),
        };
        total += value * scale;
    }
    Ok(Duration::from_nanos((total * 1e9).round() as u64))
}

/// Formats like Go's `Duration.String()`: `1h0m0s`, `250ms`, `1.5s`.
pub fn format(d: Duration) -> String {
    let ns = d.as_nanos() as u64;
    if ns == 0 {
        return "0s".into();
    }
    if ns < 1_000 {
        return format!("{ns}ns");
    }
    if ns < 1_000_000 {
        return format!("{}µs", trim(ns as f64 / 1e3));
    }
    if ns < 1_000_000_000 {
        return format!("{}ms", trim(ns as f64 / 1e6));
    }
    let h = ns / 3_600_000_000_000;
    let m = ns / 60_000_000_000 % 60;
    let s = ns % 60_000_000_000;
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if h > 0 || m > 0 {
        out.push_str(&format!("{m}m"));
    }
    let (whole, frac) = (s / 1_000_000_000, s % 1_000_000_000);
    if frac == 0 {
        out.push_str(&format!("{whole}s"));
    } else {
        out.push_str(&format!("{whole}.{}s", format!("{frac:09}").trim_end_matches('0')));
    }
    out
}

fn trim(v: f64) -> String {
    let s = format!("{v:.6}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_forms() {
        assert_eq!(parse("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse("1m0s").unwrap(), Duration::from_secs(60));
        assert_eq!(parse("1h0m0s").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse("10us").unwrap(), Duration::from_micros(10));
        assert_eq!(parse("0").unwrap(), Duration::ZERO);
        assert!(parse("5").is_err());
        assert!(parse("x").is_err());
        assert!(parse("-1s").is_err());
        assert!(parse("").is_err());
    }

    #[test]
    fn formats_like_go() {
        for s in ["1h0m0s", "15m0s", "1m0s", "250ms", "2s", "45s", "5m0s", "10m0s", "1.5s", "25ms", "30s"] {
            assert_eq!(format(parse(s).unwrap()), s);
        }
    }
}

/// Calendar date and time (UTC) of a Unix timestamp in seconds:
/// `(year, month, day, hour, minute, second)`. Logs, `/stats` text and
/// nsqadmin print dates; this keeps one copy of the arithmetic.
pub fn civil_utc(unix_secs: i64) -> (i64, u32, u32, u32, u32, u32) {
    let days = unix_secs.div_euclid(86_400);
    let secs = unix_secs.rem_euclid(86_400);
    // days → civil date (Howard Hinnant's algorithm)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + if m <= 2 { 1 } else { 0 };
    (y, m, d, (secs / 3600) as u32, (secs % 3600 / 60) as u32, (secs % 60) as u32)
}

/// RFC 3339 in UTC, as Go's `time.RFC3339` prints a UTC time.
pub fn rfc3339(unix_secs: i64) -> String {
    let (y, m, d, hh, mm, ss) = civil_utc(unix_secs);
    format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}Z")
}

#[cfg(test)]
mod civil_tests {
    #[test]
    fn dates() {
        assert_eq!(super::rfc3339(1_796_012_200), "2026-11-30T04:16:40Z");
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    }
}

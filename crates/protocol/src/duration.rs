//! Go's duration syntax (`250ms`, `1m0s`, `1h30m`, `1.5s`), which every NSQ
//! binary uses for its duration flags and config keys, parsed and printed.

use std::time::Duration;

/// Parses a Go duration string; negative durations are refused.
pub fn parse(s: &str) -> Result<Duration, String> {
    if s.strip_prefix('+').unwrap_or(s).starts_with('-') {
        return Err(format!("time: invalid duration {}", quote(s)));
    }
    parse_signed(s).map(|ns| Duration::from_nanos(ns.unsigned_abs()))
}

const LIMIT: u64 = 1 << 63;

fn quote(s: &str) -> String {
    format!("\"{s}\"")
}

fn unit_nanos(unit: &str) -> Option<u64> {
    Some(match unit {
        "ns" => 1,
        "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return None,
    })
}

/// Go's `time.ParseDuration` exactly, in signed nanoseconds: `45s`, `5m0s`,
/// `1.5h`, `-1s`, `+2s`, `.5s`, `1h2m3.5s`, units `ns us µs μs ms s m h`, a
/// bare `0`, with Go's overflow limits and error texts.
pub fn parse_signed(orig: &str) -> Result<i64, String> {
    let invalid = || format!("time: invalid duration {}", quote(orig));
    let mut s = orig;
    let mut neg = false;
    if let Some(c) = s.chars().next() {
        if c == '-' || c == '+' {
            neg = c == '-';
            s = &s[1..];
        }
    }
    if s == "0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    let mut total: u64 = 0;
    while !s.is_empty() {
        let b = s.as_bytes();
        if !(b[0] == b'.' || b[0].is_ascii_digit()) {
            return Err(invalid());
        }
        // [0-9]*
        let digits = b.iter().take_while(|c| c.is_ascii_digit()).count();
        let mut v: u64 = 0;
        for &c in &b[..digits] {
            if v > LIMIT / 10 {
                return Err(invalid());
            }
            v = v * 10 + u64::from(c - b'0');
            if v > LIMIT {
                return Err(invalid());
            }
        }
        let pre = digits > 0;
        s = &s[digits..];
        // (\.[0-9]*)?
        let (mut f, mut scale, mut post) = (0u64, 1f64, false);
        if let Some(rest) = s.strip_prefix('.') {
            let fb = rest.as_bytes();
            let fdigits = fb.iter().take_while(|c| c.is_ascii_digit()).count();
            let mut overflow = false;
            for &c in &fb[..fdigits] {
                if overflow {
                    continue;
                }
                if f > (LIMIT - 1) / 10 {
                    overflow = true;
                    continue;
                }
                let y = f * 10 + u64::from(c - b'0');
                if y > LIMIT {
                    overflow = true;
                    continue;
                }
                f = y;
                scale *= 10.0;
            }
            post = fdigits > 0;
            s = &rest[fdigits..];
        }
        if !pre && !post {
            return Err(invalid());
        }
        // unit: everything up to the next '.' or digit
        let ulen = s
            .bytes()
            .take_while(|c| !(*c == b'.' || c.is_ascii_digit()))
            .count();
        if ulen == 0 {
            return Err(format!("time: missing unit in duration {}", quote(orig)));
        }
        let (u, rest) = s.split_at(ulen);
        s = rest;
        let unit = unit_nanos(u).ok_or_else(|| {
            format!(
                "time: unknown unit {} in duration {}",
                quote(u),
                quote(orig)
            )
        })?;
        if v > LIMIT / unit {
            return Err(invalid());
        }
        v *= unit;
        if f > 0 {
            // Go computes the fraction in float64 the same way.
            v += (f as f64 * (unit as f64 / scale)) as u64;
            if v > LIMIT {
                return Err(invalid());
            }
        }
        total += v;
        if total > LIMIT {
            return Err(invalid());
        }
    }
    if neg {
        // total ≤ 2^63, so the negation fits (2^63 → i64::MIN).
        return Ok((total as i128).wrapping_neg() as i64);
    }
    i64::try_from(total).map_err(|_| invalid())
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
        out.push_str(&format!(
            "{whole}.{}s",
            format!("{frac:09}").trim_end_matches('0')
        ));
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
        for s in [
            "1h0m0s", "15m0s", "1m0s", "250ms", "2s", "45s", "5m0s", "10m0s", "1.5s", "25ms", "30s",
        ] {
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
    (
        y,
        m,
        d,
        (secs / 3600) as u32,
        (secs % 3600 / 60) as u32,
        (secs % 60) as u32,
    )
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

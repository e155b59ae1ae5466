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

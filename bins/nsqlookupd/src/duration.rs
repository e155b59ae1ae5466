//! Go's `time.ParseDuration`, because nsqlookupd's duration flags and config
//! values use Go syntax: `45s`, `5m0s`, `1.5h`, `-1s`, `300ms`, `1h2m3.5s`,
//! units `ns us µs μs ms s m h`, a bare `0`. (humantime rejects fractions,
//! signs and `µs`, and accepts spellings Go rejects.)

use std::time::Duration;

/// A Go duration in nanoseconds (may be negative, like Go's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GoDuration(pub i64);

impl GoDuration {
    /// As a std `Duration`; negative values become zero, which has the same
    /// effect in nsqlookupd (every comparison against them is already false
    /// or already true at zero).
    pub fn to_std(self) -> Duration {
        Duration::from_nanos(u64::try_from(self.0).unwrap_or(0))
    }
}

/// Parse error, worded like Go's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(String);

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ParseError {}

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

/// Parses like Go's `time.ParseDuration`.
pub fn parse(orig: &str) -> Result<GoDuration, ParseError> {
    let invalid = || ParseError(format!("time: invalid duration {}", quote(orig)));
    let mut s = orig;
    let mut neg = false;
    if let Some(c) = s.chars().next() {
        if c == '-' || c == '+' {
            neg = c == '-';
            s = &s[1..];
        }
    }
    if s == "0" {
        return Ok(GoDuration(0));
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
            return Err(ParseError(format!(
                "time: missing unit in duration {}",
                quote(orig)
            )));
        }
        let (u, rest) = s.split_at(ulen);
        s = rest;
        let unit = unit_nanos(u).ok_or_else(|| {
            ParseError(format!(
                "time: unknown unit {} in duration {}",
                quote(u),
                quote(orig)
            ))
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
        return Ok(GoDuration((total as i128).wrapping_neg() as i64));
    }
    i64::try_from(total).map(GoDuration).map_err(|_| invalid())
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    #[test]
    fn parses_go_syntax() {
        for (input, want) in [
            ("0", 0),
            ("-0", 0),
            ("45s", 45 * S),
            ("5m0s", 300 * S),
            ("5m", 300 * S),
            ("1h", 3600 * S),
            ("1.5h", 5400 * S),
            ("1h2m3.5s", 3723 * S + S / 2),
            ("300ms", 300_000_000),
            ("2us", 2_000),
            ("2µs", 2_000),
            ("2μs", 2_000),
            ("7ns", 7),
            ("-1s", -S),
            ("+2s", 2 * S),
            (".5s", S / 2),
            ("1.s", S),
            ("2562047h47m16.854775807s", i64::MAX),
            ("-2562047h47m16.854775808s", i64::MIN),
        ] {
            assert_eq!(parse(input), Ok(GoDuration(want)), "{input}");
        }
    }

    #[test]
    fn rejects_like_go() {
        let e = |s: &str| parse(s).unwrap_err().to_string();
        assert_eq!(e(""), r#"time: invalid duration """#);
        assert_eq!(e("1"), r#"time: missing unit in duration "1""#);
        assert_eq!(e("1x"), r#"time: unknown unit "x" in duration "1x""#);
        assert_eq!(e("1 s"), r#"time: unknown unit " s" in duration "1 s""#);
        assert_eq!(e("s"), r#"time: invalid duration "s""#);
        assert_eq!(e(".s"), r#"time: invalid duration ".s""#);
        assert_eq!(e("-"), r#"time: invalid duration "-""#);
        assert_eq!(
            e("2562047h47m16.854775808s"),
            r#"time: invalid duration "2562047h47m16.854775808s""#
        );
        assert_eq!(
            e("9999999999999999999h"),
            r#"time: invalid duration "9999999999999999999h""#
        );
    }

    #[test]
    fn std_conversion() {
        assert_eq!(GoDuration(-5).to_std(), Duration::ZERO);
        assert_eq!(GoDuration(45 * S).to_std(), Duration::from_secs(45));
    }
}

//! nsqlookupd's duration flags and config values: Go's `time.ParseDuration`
//! ([`nsq_protocol::duration::parse_signed`]), signed like Go's — `-1s` is
//! accepted and acts as zero (see the tests for the accepted forms).

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

/// Parses like Go's `time.ParseDuration`; the error is worded like Go's.
pub fn parse(s: &str) -> Result<GoDuration, String> {
    nsq_protocol::duration::parse_signed(s).map(GoDuration)
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

//! Local wall-clock time and nsq_to_file's `<DATETIME>` formatting.
//!
//! NSQ turns `--datetime-format` (strftime) into a Go time layout and then
//! formats with Go's `time.Format`. Doing the same two steps keeps its
//! quirk: characters outside `%` directives that happen to be Go layout
//! tokens (`1`, `2`, `Jan`, `MST`, `.000`, ...) are formatted too, so
//! `--datetime-format=v1_%H` gives `v<month>_<hour>` exactly as in NSQ.
//!
//! Time comes from `nsq_cli::sys::LocalTime` (the C library's
//! `localtime_r`, which reads `TZ` and `/etc/localtime` as Go's
//! `time.Local` does).

pub use nsq_cli::sys::LocalTime;

/// NSQ's `strftime`: each known `%x` becomes a Go layout element, anything
/// else is copied into the layout as is; the layout is then formatted.
pub fn strftime(format: &str, t: &LocalTime) -> String {
    let mut layout = String::new();
    let b = format.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 1 < b.len() {
            let element = match b[i + 1] {
                b'B' => Some("January"),
                b'b' => Some("Jan"),
                b'm' => Some("01"),
                b'A' => Some("Monday"),
                b'a' => Some("Mon"),
                b'd' => Some("02"),
                b'H' => Some("15"),
                b'I' => Some("03"),
                b'M' => Some("04"),
                b'S' => Some("05"),
                b'Y' => Some("2006"),
                b'y' => Some("06"),
                b'p' => Some("PM"),
                b'Z' => Some("MST"),
                b'z' => Some("-0700"),
                b'%' => Some("%"),
                _ => None,
            };
            if let Some(e) = element {
                layout.push_str(e);
                i += 2;
                continue;
            }
        }
        // Copy one UTF-8 character.
        let len = utf8_len(b[i]);
        layout.push_str(&format[i..(i + len).min(b.len())]);
        i += len;
    }
    go_format(&layout, t)
}

fn utf8_len(first: u8) -> usize {
    match first {
        0xf0..=0xff => 4,
        0xe0..=0xef => 3,
        0xc0..=0xdf => 2,
        _ => 1,
    }
}

/// The elements of a Go time layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Std {
    LongMonth,
    Month,
    NumMonth,
    ZeroMonth,
    LongWeekDay,
    WeekDay,
    Day,
    UnderDay,
    ZeroDay,
    UnderYearDay,
    ZeroYearDay,
    Hour,
    Hour12,
    ZeroHour12,
    Minute,
    ZeroMinute,
    Second,
    ZeroSecond,
    LongYear,
    Year,
    PM,
    Pm,
    TZ,
    Iso8601TZ,
    Iso8601SecondsTZ,
    Iso8601ShortTZ,
    Iso8601ColonTZ,
    Iso8601ColonSecondsTZ,
    NumTZ,
    NumSecondsTz,
    NumShortTZ,
    NumColonTZ,
    NumColonSecondsTZ,
    /// `.000` / `,000` (digits = count, separator kept)
    FracSecond0(usize, char),
    /// `.999` / `,999`
    FracSecond9(usize, char),
}

fn starts_with_lower(s: &str) -> bool {
    s.as_bytes().first().is_some_and(|c| c.is_ascii_lowercase())
}

/// Go's `nextStdChunk`: the text before the first layout element, the
/// element, and the rest.
fn next_std_chunk(layout: &str) -> (&str, Option<Std>, &str) {
    let b = layout.as_bytes();
    let has = |i: usize, s: &str| layout[i..].starts_with(s);
    for i in 0..b.len() {
        if !layout.is_char_boundary(i) {
            continue;
        }
        let (pre, after) = (&layout[..i], |n: usize| &layout[i + n..]);
        match b[i] {
            b'J' if has(i, "Jan") => {
                if has(i, "January") {
                    return (pre, Some(Std::LongMonth), after(7));
                }
                if !starts_with_lower(after(3)) {
                    return (pre, Some(Std::Month), after(3));
                }
            }
            b'M' => {
                if has(i, "Mon") {
                    if has(i, "Monday") {
                        return (pre, Some(Std::LongWeekDay), after(6));
                    }
                    if !starts_with_lower(after(3)) {
                        return (pre, Some(Std::WeekDay), after(3));
                    }
                }
                if has(i, "MST") {
                    return (pre, Some(Std::TZ), after(3));
                }
            }
            b'0' => {
                if i + 1 < b.len() && (b'1'..=b'6').contains(&b[i + 1]) {
                    let std = [
                        Std::ZeroMonth,
                        Std::ZeroDay,
                        Std::ZeroHour12,
                        Std::ZeroMinute,
                        Std::ZeroSecond,
                        Std::Year,
                    ][(b[i + 1] - b'1') as usize];
                    return (pre, Some(std), after(2));
                }
                if has(i, "002") {
                    return (pre, Some(Std::ZeroYearDay), after(3));
                }
            }
            b'1' => {
                if has(i, "15") {
                    return (pre, Some(Std::Hour), after(2));
                }
                return (pre, Some(Std::NumMonth), after(1));
            }
            b'2' => {
                if has(i, "2006") {
                    return (pre, Some(Std::LongYear), after(4));
                }
                return (pre, Some(Std::Day), after(1));
            }
            b'_' => {
                if has(i, "_2") {
                    // `_2006` is a literal `_` then the long year.
                    if has(i + 1, "2006") {
                        return (&layout[..i + 1], Some(Std::LongYear), after(5));
                    }
                    return (pre, Some(Std::UnderDay), after(2));
                }
                if has(i, "__2") {
                    return (pre, Some(Std::UnderYearDay), after(3));
                }
            }
            b'3' => return (pre, Some(Std::Hour12), after(1)),
            b'4' => return (pre, Some(Std::Minute), after(1)),
            b'5' => return (pre, Some(Std::Second), after(1)),
            b'P' if has(i, "PM") => return (pre, Some(Std::PM), after(2)),
            b'p' if has(i, "pm") => return (pre, Some(Std::Pm), after(2)),
            b'-' => {
                for (tok, std) in [
                    ("-070000", Std::NumSecondsTz),
                    ("-07:00:00", Std::NumColonSecondsTZ),
                    ("-0700", Std::NumTZ),
                    ("-07:00", Std::NumColonTZ),
                    ("-07", Std::NumShortTZ),
                ] {
                    if has(i, tok) {
                        return (pre, Some(std), after(tok.len()));
                    }
                }
            }
            b'Z' => {
                for (tok, std) in [
                    ("Z070000", Std::Iso8601SecondsTZ),
                    ("Z07:00:00", Std::Iso8601ColonSecondsTZ),
                    ("Z0700", Std::Iso8601TZ),
                    ("Z07:00", Std::Iso8601ColonTZ),
                    ("Z07", Std::Iso8601ShortTZ),
                ] {
                    if has(i, tok) {
                        return (pre, Some(std), after(tok.len()));
                    }
                }
            }
            c @ (b'.' | b',') if i + 1 < b.len() && (b[i + 1] == b'0' || b[i + 1] == b'9') => {
                let ch = b[i + 1];
                let mut j = i + 1;
                while j < b.len() && b[j] == ch {
                    j += 1;
                }
                // Only a fractional second if no digit follows.
                if !(j < b.len() && b[j].is_ascii_digit()) {
                    let n = j - (i + 1);
                    let std = if ch == b'0' {
                        Std::FracSecond0(n, c as char)
                    } else {
                        Std::FracSecond9(n, c as char)
                    };
                    return (pre, Some(std), &layout[j..]);
                }
            }
            _ => {}
        }
    }
    (layout, None, "")
}

const LONG_MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const LONG_DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// Go's `Time.Format(layout)`.
pub fn go_format(layout: &str, t: &LocalTime) -> String {
    let mut out = String::new();
    let mut rest = layout;
    loop {
        let (prefix, std, suffix) = next_std_chunk(rest);
        out.push_str(prefix);
        let Some(std) = std else { break };
        rest = suffix;
        let hour12 = match t.hour % 12 {
            0 => 12,
            h => h,
        };
        match std {
            Std::LongMonth => out.push_str(LONG_MONTHS[(t.month - 1) as usize]),
            Std::Month => out.push_str(&LONG_MONTHS[(t.month - 1) as usize][..3]),
            Std::NumMonth => out.push_str(&t.month.to_string()),
            Std::ZeroMonth => out.push_str(&format!("{:02}", t.month)),
            Std::LongWeekDay => out.push_str(LONG_DAYS[t.weekday as usize]),
            Std::WeekDay => out.push_str(&LONG_DAYS[t.weekday as usize][..3]),
            Std::Day => out.push_str(&t.day.to_string()),
            Std::UnderDay => out.push_str(&format!("{:>2}", t.day)),
            Std::ZeroDay => out.push_str(&format!("{:02}", t.day)),
            Std::UnderYearDay => out.push_str(&format!("{:>3}", t.yearday)),
            Std::ZeroYearDay => out.push_str(&format!("{:03}", t.yearday)),
            Std::Hour => out.push_str(&format!("{:02}", t.hour)),
            Std::Hour12 => out.push_str(&hour12.to_string()),
            Std::ZeroHour12 => out.push_str(&format!("{hour12:02}")),
            Std::Minute => out.push_str(&t.minute.to_string()),
            Std::ZeroMinute => out.push_str(&format!("{:02}", t.minute)),
            Std::Second => out.push_str(&t.second.to_string()),
            Std::ZeroSecond => out.push_str(&format!("{:02}", t.second)),
            Std::LongYear => {
                if t.year < 0 {
                    out.push_str(&format!("-{:04}", -t.year));
                } else {
                    out.push_str(&format!("{:04}", t.year));
                }
            }
            Std::Year => out.push_str(&format!("{:02}", t.year.rem_euclid(100))),
            Std::PM => out.push_str(if t.hour >= 12 { "PM" } else { "AM" }),
            Std::Pm => out.push_str(if t.hour >= 12 { "pm" } else { "am" }),
            Std::TZ => {
                if !t.zone.is_empty() {
                    out.push_str(&t.zone);
                } else {
                    // No abbreviation: -0700 form (hours and minutes).
                    let (sign, z) = if t.offset < 0 {
                        ('-', -t.offset / 60)
                    } else {
                        ('+', t.offset / 60)
                    };
                    out.push_str(&format!("{sign}{:02}{:02}", z / 60, z % 60));
                }
            }
            Std::Iso8601TZ
            | Std::Iso8601SecondsTZ
            | Std::Iso8601ShortTZ
            | Std::Iso8601ColonTZ
            | Std::Iso8601ColonSecondsTZ
            | Std::NumTZ
            | Std::NumSecondsTz
            | Std::NumShortTZ
            | Std::NumColonTZ
            | Std::NumColonSecondsTZ => {
                let iso = matches!(
                    std,
                    Std::Iso8601TZ
                        | Std::Iso8601SecondsTZ
                        | Std::Iso8601ShortTZ
                        | Std::Iso8601ColonTZ
                        | Std::Iso8601ColonSecondsTZ
                );
                if iso && t.offset == 0 {
                    out.push('Z');
                    continue;
                }
                let (sign, abs) = if t.offset < 0 {
                    ('-', -t.offset)
                } else {
                    ('+', t.offset)
                };
                let (h, m, s) = (abs / 3600, (abs / 60) % 60, abs % 60);
                out.push(sign);
                out.push_str(&format!("{h:02}"));
                let colon = matches!(
                    std,
                    Std::Iso8601ColonTZ
                        | Std::Iso8601ColonSecondsTZ
                        | Std::NumColonTZ
                        | Std::NumColonSecondsTZ
                );
                if !matches!(std, Std::Iso8601ShortTZ | Std::NumShortTZ) {
                    if colon {
                        out.push(':');
                    }
                    out.push_str(&format!("{m:02}"));
                }
                if matches!(
                    std,
                    Std::Iso8601SecondsTZ
                        | Std::NumSecondsTz
                        | Std::Iso8601ColonSecondsTZ
                        | Std::NumColonSecondsTZ
                ) {
                    if colon {
                        out.push(':');
                    }
                    out.push_str(&format!("{s:02}"));
                }
            }
            Std::FracSecond0(n, sep) => {
                let digits = format!("{:09}", t.nanos);
                out.push(sep);
                out.push_str(&digits[..n.min(9)]);
            }
            Std::FracSecond9(n, sep) => {
                let digits = format!("{:09}", t.nanos);
                let d = digits[..n.min(9)].trim_end_matches('0');
                if !d.is_empty() {
                    out.push(sep);
                    out.push_str(d);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t() -> LocalTime {
        // 2024-03-05 14:07:09.123456789, a Tuesday, day 65, at +01:00 CET.
        LocalTime {
            year: 2024,
            month: 3,
            day: 5,
            hour: 14,
            minute: 7,
            second: 9,
            nanos: 123_456_789,
            weekday: 2,
            yearday: 65,
            offset: 3600,
            zone: "CET".into(),
        }
    }

    #[test]
    fn nsq_defaults() {
        assert_eq!(strftime("%Y-%m-%d_%H", &t()), "2024-03-05_14");
    }

    #[test]
    fn every_directive() {
        assert_eq!(
            strftime("%B %b %m %A %a %d %H %I %M %S %Y %y %p %Z %z %%", &t()),
            "March Mar 03 Tuesday Tue 05 14 02 07 09 2024 24 PM CET +0100 %"
        );
        // Unknown directives are copied; a trailing % too.
        assert_eq!(strftime("%q%", &t()), "%q%");
    }

    #[test]
    fn go_layout_quirks_survive() {
        // Literal digits are Go layout elements after the translation.
        assert_eq!(strftime("v1_%H", &t()), "v3_14");
        assert_eq!(strftime("x.000", &t()), "x.123");
        assert_eq!(strftime("Jane", &t()), "Jane");
        assert_eq!(
            go_format("Z07:00 -07 _2 __2 002 3 4 5 pm", &t()),
            "+01:00 +01  5  65 065 2 7 9 pm"
        );
    }

    #[test]
    fn utc_fallback_calendar() {
        let u = LocalTime::utc(1_709_647_629, 0); // 2024-03-05T14:07:09Z
        assert_eq!(
            (u.year, u.month, u.day, u.hour, u.minute, u.second, u.weekday, u.yearday),
            (2024, 3, 5, 14, 7, 9, 2, 65)
        );
    }
}

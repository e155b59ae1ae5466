//! The Go-visible surface every NSQ utility app shares, so swapping a Go
//! binary for ours changes nothing a script can see:
//!
//! * [`FlagSet`]: Go's `flag` package — `-name`/`--name`, `=value` or the
//!   next argument, bools only with `=`, parsing stops at the first
//!   non-flag or `--`; its error texts (`flag provided but not defined: -x`),
//!   `Usage of <argv0>:` with `PrintDefaults`' layout, exit 2 (0 for `-h`);
//! * [`log`] and [`fatal`]: Go's standard logger (`2006/01/02 15:04:05 msg`
//!   on stderr; `log.Fatal` exits 1).
//!
//! Shared by the apps through `#[path]` (it is std-only apart from the
//! duration helpers of `nsq-protocol`); it never touches the network.

#![allow(dead_code)] // each app uses a different subset

use std::io::Write;

/// What a flag holds, which decides how Go parses and lists it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Bool,
    Int,
    String,
    Duration,
    /// `flag.Var` types (repeatable lists, go-nsq's config flag, ...).
    Value,
}

/// Stores one command-line value into the bound variable, or says why not.
type Setter<'a> = Box<dyn FnMut(&str) -> Result<(), String> + 'a>;

struct Flag<'a> {
    name: &'static str,
    kind: Kind,
    usage: &'static str,
    /// `DefValue` as Go prints it; "" or the type's zero value is not listed.
    default: String,
    set: Setter<'a>,
}

/// A Go `flag.FlagSet` with `ExitOnError`, binding flags to the caller's variables.
pub struct FlagSet<'a> {
    program: String,
    flags: Vec<Flag<'a>>,
}

impl<'a> FlagSet<'a> {
    /// `program` is argv[0], printed in `Usage of <program>:`.
    pub fn new(program: &str) -> FlagSet<'a> {
        FlagSet { program: program.to_string(), flags: Vec::new() }
    }

    fn add(
        &mut self,
        name: &'static str,
        kind: Kind,
        usage: &'static str,
        default: String,
        set: impl FnMut(&str) -> Result<(), String> + 'a,
    ) {
        self.flags.push(Flag { name, kind, usage, default, set: Box::new(set) });
    }

    /// `flag.Bool`.
    pub fn bool(&mut self, var: &'a mut bool, name: &'static str, usage: &'static str) {
        let default = var.to_string();
        self.add(name, Kind::Bool, usage, default, move |s| {
            *var = parse_bool(s).ok_or("parse error")?;
            Ok(())
        });
    }

    /// `flag.Int` / `flag.Int64` (base prefixes and `_` as Go's `ParseInt(s, 0, 64)`).
    pub fn int(&mut self, var: &'a mut i64, name: &'static str, usage: &'static str) {
        let default = var.to_string();
        self.add(name, Kind::Int, usage, default, move |s| {
            *var = parse_int(s)?;
            Ok(())
        });
    }

    /// `flag.String`.
    pub fn string(&mut self, var: &'a mut String, name: &'static str, usage: &'static str) {
        let default = var.clone();
        self.add(name, Kind::String, usage, default, move |s| {
            *var = s.to_string();
            Ok(())
        });
    }

    /// `flag.Duration`, in signed nanoseconds (Go accepts `-1s`; apps reject
    /// non-positive values themselves, with their own message).
    pub fn duration(&mut self, var: &'a mut i64, name: &'static str, usage: &'static str) {
        let default = format_duration(*var);
        self.add(name, Kind::Duration, usage, default, move |s| {
            *var = parse_duration(s).ok_or("parse error")?;
            Ok(())
        });
    }

    /// A repeatable string flag (NSQ's `app.StringArray`).
    pub fn strings(&mut self, var: &'a mut Vec<String>, name: &'static str, usage: &'static str) {
        self.add(name, Kind::Value, usage, String::new(), move |s| {
            var.push(s.to_string());
            Ok(())
        });
    }

    /// `flag.Var` with a custom setter; its error text follows `invalid value ... :`.
    pub fn var(&mut self, name: &'static str, usage: &'static str, set: impl FnMut(&str) -> Result<(), String> + 'a) {
        self.add(name, Kind::Value, usage, String::new(), set);
    }

    /// Parses `args` (without argv[0]) into the bound variables; on error
    /// prints the message and the usage to stderr and exits 2, on `-h`/`-help`
    /// prints the usage and exits 0. Returns the arguments after the flags.
    pub fn parse(mut self, args: &[String]) -> Vec<String> {
        match self.try_parse(args) {
            Ok(rest) => rest,
            Err(None) => {
                self.usage();
                std::process::exit(0)
            }
            Err(Some(msg)) => {
                eprintln!("{msg}");
                self.usage();
                std::process::exit(2)
            }
        }
    }

    /// `Err(None)` = help asked for; `Err(Some(msg))` = Go's failure text.
    fn try_parse(&mut self, args: &[String]) -> Result<Vec<String>, Option<String>> {
        let mut i = 0;
        while i < args.len() {
            let s = &args[i];
            if s.len() < 2 || !s.starts_with('-') {
                break;
            }
            let dashes = if s.as_bytes()[1] == b'-' { 2 } else { 1 };
            if s == "--" {
                i += 1;
                break;
            }
            let body = &s[dashes..];
            if body.is_empty() || body.starts_with('-') || body.starts_with('=') {
                return Err(Some(format!("bad flag syntax: {s}")));
            }
            i += 1;
            let (name, value) = match body[1..].find('=') {
                Some(p) => (&body[..p + 1], Some(&body[p + 2..])),
                None => (body, None),
            };
            let Some(flag) = self.flags.iter_mut().find(|f| f.name == name) else {
                if name == "help" || name == "h" {
                    return Err(None);
                }
                return Err(Some(format!("flag provided but not defined: -{name}")));
            };
            if flag.kind == Kind::Bool {
                if let Some(v) = value {
                    (flag.set)(v).map_err(|e| Some(format!("invalid boolean value {} for -{name}: {e}", go_quote(v))))?;
                } else {
                    (flag.set)("true").map_err(|e| Some(format!("invalid boolean flag {name}: {e}")))?;
                }
                continue;
            }
            let value = match value {
                Some(v) => v,
                None if i < args.len() => {
                    i += 1;
                    args[i - 1].as_str()
                }
                None => return Err(Some(format!("flag needs an argument: -{name}"))),
            };
            (flag.set)(value).map_err(|e| Some(format!("invalid value {} for flag -{name}: {e}", go_quote(value))))?;
        }
        Ok(args[i..].to_vec())
    }

    /// `Usage of <program>:` plus Go's `PrintDefaults` listing, to stderr.
    pub fn usage(&self) {
        let mut out = format!("Usage of {}:\n", self.program);
        let mut flags: Vec<&Flag<'a>> = self.flags.iter().collect();
        flags.sort_by_key(|f| f.name);
        for f in flags {
            let mut line = format!("  -{}", f.name);
            let type_name = match f.kind {
                Kind::Bool => "",
                Kind::Int => "int",
                Kind::String => "string",
                Kind::Duration => "duration",
                Kind::Value => "value",
            };
            if !type_name.is_empty() {
                line.push(' ');
                line.push_str(type_name);
            }
            // Go puts a one-letter bool's usage on the same line.
            line.push_str(if line.len() <= 4 { "\t" } else { "\n    \t" });
            line.push_str(&f.usage.replace('\n', "\n    \t"));
            let zero = match f.kind {
                Kind::Bool => "false",
                Kind::Int => "0",
                Kind::Duration => "0s",
                Kind::String | Kind::Value => "",
            };
            if f.default != zero {
                if f.kind == Kind::String {
                    line.push_str(&format!(" (default {})", go_quote(&f.default)));
                } else {
                    line.push_str(&format!(" (default {})", f.default));
                }
            }
            out.push_str(&line);
            out.push('\n');
        }
        let _ = std::io::stderr().write_all(out.as_bytes());
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

/// Go's `strconv.ParseInt(s, 0, 64)` as the flag package reports it:
/// `parse error` or `value out of range`.
fn parse_int(s: &str) -> Result<i64, String> {
    let (neg, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let lower = digits.to_ascii_lowercase();
    let (radix, body, prefixed) = if let Some(r) = lower.strip_prefix("0x") {
        (16, r.to_string(), true)
    } else if let Some(r) = lower.strip_prefix("0b") {
        (2, r.to_string(), true)
    } else if let Some(r) = lower.strip_prefix("0o") {
        (8, r.to_string(), true)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, lower[1..].to_string(), true)
    } else {
        (10, lower.clone(), false)
    };
    // Underscores only between digits (or after a base prefix), as Go allows with base 0.
    let bad_underscores = body.contains("__") || body.ends_with('_') || (body.starts_with('_') && !prefixed);
    let clean: String = body.chars().filter(|&c| c != '_').collect();
    if clean.is_empty() || bad_underscores || !clean.chars().all(|c| c.is_digit(radix)) {
        return Err("parse error".into());
    }
    let magnitude = u128::from_str_radix(&clean, radix).map_err(|_| "value out of range".to_string())?;
    let v: i128 = if neg { -(magnitude as i128) } else { magnitude as i128 };
    i64::try_from(v).map_err(|_| "value out of range".to_string())
}

/// Go's `time.ParseDuration`, signed, in nanoseconds.
pub fn parse_duration(s: &str) -> Option<i64> {
    let (neg, rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest.starts_with(['-', '+']) {
        return None;
    }
    let d = nsq_protocol::duration::parse(rest).ok()?;
    let ns = i64::try_from(d.as_nanos()).ok()?;
    Some(if neg { -ns } else { ns })
}

/// Go's `Duration.String()` for signed nanoseconds.
pub fn format_duration(ns: i64) -> String {
    let s = nsq_protocol::duration::format(std::time::Duration::from_nanos(ns.unsigned_abs()));
    if ns < 0 {
        format!("-{s}")
    } else {
        s
    }
}

/// Go's `%q` for the strings flags see (printable text kept, the rest escaped).
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\x07' => out.push_str("\\a"),
            '\x08' => out.push_str("\\b"),
            '\x0c' => out.push_str("\\f"),
            '\x0b' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `2006/01/02 15:04:05`, Go's standard log timestamp (UTC here).
pub fn log_time() -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let (y, m, d, hh, mm, ss) = nsq_protocol::duration::civil_utc(now.as_secs() as i64);
    format!("{y:04}/{m:02}/{d:02} {hh:02}:{mm:02}:{ss:02}")
}

/// Go's `log.Print`: one stderr line with the timestamp.
pub fn log(msg: &str) {
    let line = format!("{} {}\n", log_time(), msg.strip_suffix('\n').unwrap_or(msg));
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// Go's `log.Fatal`: [`log`], then exit 1.
pub fn fatal(msg: &str) -> ! {
    log(msg);
    std::process::exit(1)
}

/// argv as strings (lossy for non-UTF-8), as the Go apps see them.
pub fn args() -> Vec<String> {
    std::env::args_os().map(|a| a.to_string_lossy().into_owned()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn go_flag_rules() {
        let (mut b, mut n, mut s, mut d, mut list) = (false, 200i64, String::from("\n"), 2_000_000_000i64, Vec::new());
        let mut fs = FlagSet::new("prog");
        fs.bool(&mut b, "print-topic", "p");
        fs.int(&mut n, "n", "n");
        fs.string(&mut s, "delimiter", "d");
        fs.duration(&mut d, "interval", "i");
        fs.strings(&mut list, "topic", "t");
        let rest = fs
            .try_parse(&argv(&["-print-topic", "--n", "-5", "--delimiter=,", "-interval=-1s", "--topic", "a", "-topic=b", "x", "--n=1"]))
            .unwrap();
        drop(fs);
        assert_eq!((b, n, s.as_str(), d, list), (true, -5, ",", -1_000_000_000, vec!["a".to_string(), "b".to_string()]));
        assert_eq!(rest, argv(&["x", "--n=1"]));
    }

    #[test]
    fn go_flag_errors() {
        let (mut b, mut n) = (false, 0i64);
        let mut fs = FlagSet::new("prog");
        fs.bool(&mut b, "print-topic", "p");
        fs.int(&mut n, "n", "n");
        let err = |fs: &mut FlagSet<'_>, a: &[&str]| fs.try_parse(&argv(a)).unwrap_err();
        assert_eq!(err(&mut fs, &["--version"]), Some("flag provided but not defined: -version".into()));
        assert_eq!(err(&mut fs, &["--n"]), Some("flag needs an argument: -n".into()));
        assert_eq!(err(&mut fs, &["--n=x"]), Some("invalid value \"x\" for flag -n: parse error".into()));
        assert_eq!(
            err(&mut fs, &["--n=99999999999999999999"]),
            Some("invalid value \"99999999999999999999\" for flag -n: value out of range".into())
        );
        assert_eq!(err(&mut fs, &["--print-topic=yes"]), Some("invalid boolean value \"yes\" for -print-topic: parse error".into()));
        assert_eq!(err(&mut fs, &["---n"]), Some("bad flag syntax: ---n".into()));
        assert_eq!(err(&mut fs, &["-h"]), None);
        assert_eq!(fs.try_parse(&argv(&["--n=0x10", "--", "--n=3"])).unwrap(), argv(&["--n=3"]));
        drop(fs);
        assert_eq!(n, 16);
    }

    #[test]
    fn go_ints() {
        assert_eq!(parse_int("010"), Ok(8));
        assert_eq!(parse_int("1_000"), Ok(1000));
        assert_eq!(parse_int("-0b11"), Ok(-3));
        assert!(parse_int("1__0").is_err());
        assert!(parse_int("").is_err());
        assert!(parse_int("09").is_err());
    }

    #[test]
    fn quoting_and_durations() {
        assert_eq!(go_quote("\n"), "\"\\n\"");
        assert_eq!(format_duration(-1_500_000_000), "-1.5s");
        assert_eq!(parse_duration("2s"), Some(2_000_000_000));
        assert_eq!(parse_duration("x"), None);
    }
}

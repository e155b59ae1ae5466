//! Go's `flag` package, as NSQ's apps see it: `-name` or `--name`,
//! `=value` or a separate value, bool flags only as `-name` / `-name=v`,
//! parsing stops at the first non-flag argument or `--`, the last value of
//! a non-repeatable flag wins, and errors are Go's words followed by the
//! usage (exit 2). `-h`/`-help` print the usage and exit 0.
//!
//! clap cannot be bent into these rules (positional cut-off, `-flag value`
//! for bools, repeated scalars), and the apps' users script against them,
//! so this small parser owns the command line. It only parses; the apps
//! validate meaning (`log.Fatal` errors) themselves.
//!
//! Used by the apps that reproduce Go's command line to the letter
//! (nsq_tail, to_nsq, nsq_to_nsq, nsq_stat, nsq_to_file, nsq_to_http);
//! their `log.Fatal` checks use [`crate::golog`].

use std::collections::HashMap;
use std::time::Duration;

use nsq_protocol::gofmt::quote as go_quote;

/// The Go type behind a flag, which fixes its parser and its `--help` name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Bool,
    Int,
    Float,
    Str,
    Duration,
    /// `app.StringArray` or another `flag.Value`: repeatable, shown as `value`.
    List,
}

/// Validates one value of a `List` flag (a `flag.Value` whose `Set` can fail).
pub type Check = fn(&str) -> Result<(), String>;

/// One flag: name, type, default (as Go's `DefValue` text) and help text.
/// A word in backquotes in `usage` becomes the type name in `--help`, as
/// Go's `UnquoteUsage` does.
pub struct Flag {
    pub name: &'static str,
    pub kind: Kind,
    pub default: &'static str,
    pub usage: &'static str,
    /// Extra check for `List` values (a `flag.Value` whose `Set` can fail).
    pub check: Option<Check>,
}

impl Flag {
    pub const fn new(
        name: &'static str,
        kind: Kind,
        default: &'static str,
        usage: &'static str,
    ) -> Flag {
        Flag {
            name,
            kind,
            default,
            usage,
            check: None,
        }
    }

    /// The same flag with a `Set` check (for `List` flags).
    pub const fn checked(self, check: Check) -> Flag {
        Flag {
            check: Some(check),
            ..self
        }
    }
}

/// A parsed value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    /// Go durations may be negative; the apps compare against zero.
    Duration {
        negative: bool,
        value: Duration,
    },
    List(Vec<String>),
}

/// argv as strings (lossy for non-UTF-8), as the Go apps see them.
pub fn args() -> Vec<String> {
    std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

/// The result of a successful parse.
pub struct Parsed {
    values: HashMap<&'static str, Value>,
    /// Arguments left after the flags (Go's `fs.Args()`).
    pub args: Vec<String>,
}

/// How a parse ended without values: print and exit with this code.
#[derive(Debug)]
pub enum Exit {
    /// `-h`/`-help`: usage on stderr, exit 0.
    Help(String),
    /// A bad command line: message + usage on stderr, exit 2.
    Error(String),
}

impl Exit {
    /// Prints and exits the way Go's `flag.ExitOnError` does.
    pub fn exit(self) -> ! {
        match self {
            Exit::Help(text) => {
                eprint!("{text}");
                std::process::exit(0)
            }
            Exit::Error(text) => {
                eprint!("{text}");
                std::process::exit(2)
            }
        }
    }
}

pub struct FlagSet {
    /// Shown as `Usage of <name>:`.
    pub name: String,
    pub flags: Vec<Flag>,
}

impl FlagSet {
    /// Go's `PrintDefaults` output under `Usage of <name>:`.
    pub fn usage(&self) -> String {
        let mut out = if self.name.is_empty() {
            "Usage:\n".to_string()
        } else {
            format!("Usage of {}:\n", self.name)
        };
        let mut flags: Vec<&Flag> = self.flags.iter().collect();
        flags.sort_by_key(|f| f.name);
        for f in flags {
            let (type_name, usage) = unquote_usage(f);
            let mut line = format!("  -{}", f.name);
            if !type_name.is_empty() {
                line.push(' ');
                line.push_str(&type_name);
            }
            // One-letter bools keep their help on the same line.
            if line.len() <= 4 {
                line.push('\t');
            } else {
                line.push_str("\n    \t");
            }
            line.push_str(&usage.replace('\n', "\n    \t"));
            if !is_zero_default(f) {
                if f.kind == Kind::Str {
                    line.push_str(&format!(" (default {})", go_quote(f.default)));
                } else {
                    line.push_str(&format!(" (default {})", f.default));
                }
            }
            out.push_str(&line);
            out.push('\n');
        }
        out
    }

    /// [`FlagSet::parse`], printing and exiting as Go's `ExitOnError` does on failure.
    pub fn parse_or_exit(&self, args: &[String]) -> Parsed {
        self.parse(args).unwrap_or_else(|e| e.exit())
    }

    /// Parses `args` (without the program name).
    pub fn parse(&self, args: &[String]) -> Result<Parsed, Exit> {
        let mut values: HashMap<&'static str, Value> = HashMap::new();
        for f in &self.flags {
            let v = parse_value(f.kind, f.default)
                .unwrap_or_else(|_| panic!("bad default for -{}", f.name));
            values.insert(
                f.name,
                if f.kind == Kind::List {
                    Value::List(Vec::new())
                } else {
                    v
                },
            );
        }
        let fail = |msg: String| Exit::Error(format!("{msg}\n{}", self.usage()));
        let mut i = 0;
        while i < args.len() {
            let s = &args[i];
            if s.len() < 2 || !s.starts_with('-') {
                break;
            }
            let mut minuses = 1;
            if s.as_bytes()[1] == b'-' {
                minuses = 2;
                if s.len() == 2 {
                    i += 1;
                    break;
                }
            }
            let name = &s[minuses..];
            if name.is_empty() || name.starts_with('-') || name.starts_with('=') {
                return Err(fail(format!("bad flag syntax: {s}")));
            }
            i += 1;
            let (name, inline) = match name.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (name, None),
            };
            let Some(flag) = self.flags.iter().find(|f| f.name == name) else {
                if name == "help" || name == "h" {
                    return Err(Exit::Help(self.usage()));
                }
                return Err(fail(format!("flag provided but not defined: -{name}")));
            };
            if flag.kind == Kind::Bool {
                let v = inline.unwrap_or_else(|| "true".to_string());
                match parse_bool(&v) {
                    Some(b) => {
                        values.insert(flag.name, Value::Bool(b));
                    }
                    None => {
                        return Err(fail(format!(
                            "invalid boolean value {} for -{name}: parse error",
                            go_quote(&v)
                        )))
                    }
                }
                continue;
            }
            let v = match inline {
                Some(v) => v,
                None if i < args.len() => {
                    i += 1;
                    args[i - 1].clone()
                }
                None => return Err(fail(format!("flag needs an argument: -{name}"))),
            };
            let invalid = |e: String| {
                fail(format!(
                    "invalid value {} for flag -{name}: {e}",
                    go_quote(&v)
                ))
            };
            if flag.kind == Kind::List {
                if let Some(check) = flag.check {
                    check(&v).map_err(invalid)?;
                }
                if let Some(Value::List(list)) = values.get_mut(flag.name) {
                    list.push(v);
                }
                continue;
            }
            let parsed = parse_value(flag.kind, &v).map_err(invalid)?;
            values.insert(flag.name, parsed);
        }
        Ok(Parsed {
            values,
            args: args[i..].to_vec(),
        })
    }
}

impl Parsed {
    fn get(&self, name: &str) -> &Value {
        self.values
            .get(name)
            .unwrap_or_else(|| panic!("flag -{name} is not defined"))
    }

    pub fn bool(&self, name: &str) -> bool {
        matches!(self.get(name), Value::Bool(true))
    }

    pub fn int(&self, name: &str) -> i64 {
        match self.get(name) {
            Value::Int(n) => *n,
            v => panic!("-{name} is not an int: {v:?}"),
        }
    }

    pub fn float(&self, name: &str) -> f64 {
        match self.get(name) {
            Value::Float(n) => *n,
            v => panic!("-{name} is not a float: {v:?}"),
        }
    }

    pub fn string(&self, name: &str) -> String {
        match self.get(name) {
            Value::Str(s) => s.clone(),
            v => panic!("-{name} is not a string: {v:?}"),
        }
    }

    /// The duration, or `None` when it is zero or negative (Go code only
    /// ever asks `> 0` / `<= 0` of these).
    pub fn positive_duration(&self, name: &str) -> Option<Duration> {
        match self.get(name) {
            Value::Duration {
                negative: false,
                value,
            } if !value.is_zero() => Some(*value),
            Value::Duration { .. } => None,
            v => panic!("-{name} is not a duration: {v:?}"),
        }
    }

    pub fn list(&self, name: &str) -> Vec<String> {
        match self.get(name) {
            Value::List(l) => l.clone(),
            v => panic!("-{name} is not a list: {v:?}"),
        }
    }
}

fn parse_value(kind: Kind, s: &str) -> Result<Value, String> {
    Ok(match kind {
        Kind::Bool => Value::Bool(parse_bool(s).ok_or("parse error")?),
        Kind::Int => Value::Int(parse_go_int(s)?),
        Kind::Float => Value::Float(parse_go_float(s)?),
        Kind::Str => Value::Str(s.to_string()),
        Kind::Duration => {
            let (negative, body) = match s.strip_prefix('-') {
                Some(rest) => (true, rest),
                None => (false, s.strip_prefix('+').unwrap_or(s)),
            };
            if body.starts_with(['-', '+']) {
                return Err("parse error".into());
            }
            let value =
                nsq_protocol::duration::parse(body).map_err(|_| "parse error".to_string())?;
            Value::Duration {
                negative: negative && !value.is_zero(),
                value,
            }
        }
        Kind::List => Value::List(if s.is_empty() {
            Vec::new()
        } else {
            vec![s.to_string()]
        }),
    })
}

/// `strconv.ParseBool`.
pub fn parse_bool(s: &str) -> Option<bool> {
    crate::bool_arg(s).ok()
}

/// `strconv.ParseInt(s, 0, 64)` as the flag package reports it (`parse
/// error` or `value out of range`): sign, `0x`/`0o`/`0b`/`0` prefixes, and
/// `_` only between digits or after a base prefix, as Go allows with base 0.
fn parse_go_int(s: &str) -> Result<i64, String> {
    let (neg, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let lower = digits.to_ascii_lowercase();
    let (radix, body, prefixed) = if let Some(r) = lower.strip_prefix("0x") {
        (16, r, true)
    } else if let Some(r) = lower.strip_prefix("0b") {
        (2, r, true)
    } else if let Some(r) = lower.strip_prefix("0o") {
        (8, r, true)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..], true)
    } else {
        (10, lower.as_str(), false)
    };
    let bad_underscores =
        body.contains("__") || body.ends_with('_') || (body.starts_with('_') && !prefixed);
    let clean: String = body.chars().filter(|&c| c != '_').collect();
    if clean.is_empty() || bad_underscores || !clean.chars().all(|c| c.is_digit(radix)) {
        return Err("parse error".into());
    }
    let magnitude =
        u128::from_str_radix(&clean, radix).map_err(|_| "value out of range".to_string())?;
    let v: i128 = if neg {
        -(magnitude as i128)
    } else {
        magnitude as i128
    };
    i64::try_from(v).map_err(|_| "value out of range".to_string())
}

/// `strconv.ParseFloat(s, 64)` for the forms people type.
fn parse_go_float(s: &str) -> Result<f64, String> {
    let t = s.replace('_', "");
    match t.to_ascii_lowercase().trim_start_matches(['+', '-']) {
        "inf" | "infinity" | "nan" => {}
        other if other.chars().any(|c| c.is_ascii_alphabetic() && c != 'e') => {
            return Err("parse error".into())
        }
        _ => {}
    }
    let v: f64 = t.parse().map_err(|_| "parse error".to_string())?;
    if v.is_infinite() && !t.to_ascii_lowercase().contains("inf") {
        return Err("value out of range".into());
    }
    Ok(v)
}

/// Go's `UnquoteUsage`: the backquoted word (if any) names the value and
/// loses its quotes; otherwise the name comes from the type.
fn unquote_usage(f: &Flag) -> (String, String) {
    let u = f.usage;
    if let Some(start) = u.find('`') {
        if let Some(len) = u[start + 1..].find('`') {
            let name = &u[start + 1..start + 1 + len];
            let usage = format!("{}{}{}", &u[..start], name, &u[start + 2 + len..]);
            return (name.to_string(), usage);
        }
    }
    let name = match f.kind {
        Kind::Bool => "",
        Kind::Int => "int",
        Kind::Float => "float",
        Kind::Str => "string",
        Kind::Duration => "duration",
        Kind::List => "value",
    };
    (name.to_string(), u.to_string())
}

fn is_zero_default(f: &Flag) -> bool {
    match f.kind {
        Kind::Bool => f.default == "false" || f.default.is_empty(),
        Kind::Int => f.default == "0" || f.default.is_empty(),
        Kind::Float => f.default == "0" || f.default.is_empty(),
        Kind::Duration => f.default == "0s" || f.default.is_empty(),
        Kind::Str | Kind::List => f.default.is_empty(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set() -> FlagSet {
        FlagSet {
            name: "app".into(),
            flags: vec![
                Flag::new("gzip", Kind::Bool, "false", "gzip output"),
                Flag::new("n", Kind::Int, "100", "number"),
                Flag::new(
                    "topic",
                    Kind::List,
                    "",
                    "topic (may be given multiple times)",
                ),
                Flag::new("channel", Kind::Str, "nsq_to_file", "channel"),
                Flag::new("sync-interval", Kind::Duration, "30s", "sync every"),
                Flag::new(
                    "rotate-size",
                    Kind::Int,
                    "0",
                    "rotate above `rotate-size` bytes",
                ),
                Flag::new("sample", Kind::Float, "1", "fraction"),
            ],
        }
    }

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn go_parsing_rules() {
        let p = set()
            .parse(&args(&[
                "-gzip",
                "--topic=a",
                "-topic",
                "b",
                "-n",
                "5",
                "--n=0x10",
                "x",
                "--channel=c",
            ]))
            .unwrap();
        assert!(p.bool("gzip"));
        assert_eq!(p.list("topic"), ["a", "b"]);
        assert_eq!(p.int("n"), 16);
        assert_eq!(p.string("channel"), "nsq_to_file");
        assert_eq!(p.args, ["x", "--channel=c"]);
        let p = set().parse(&args(&["-gzip", "false"])).unwrap();
        assert!(p.bool("gzip"));
        assert_eq!(p.args, ["false"]);
        let p = set().parse(&args(&["--", "-gzip"])).unwrap();
        assert!(!p.bool("gzip"));
        assert_eq!(
            p.positive_duration("sync-interval"),
            Some(Duration::from_secs(30))
        );
        let p = set().parse(&args(&["-sync-interval=-1s"])).unwrap();
        assert_eq!(p.positive_duration("sync-interval"), None);
    }

    #[test]
    fn go_errors() {
        let err = |a: &[&str]| match set().parse(&args(a)) {
            Err(Exit::Error(e)) => e.lines().next().unwrap().to_string(),
            _ => panic!("no error for {a:?}"),
        };
        assert_eq!(err(&["-nope"]), "flag provided but not defined: -nope");
        assert_eq!(err(&["-n"]), "flag needs an argument: -n");
        assert_eq!(
            err(&["-n=x"]),
            "invalid value \"x\" for flag -n: parse error"
        );
        assert_eq!(
            err(&["-n=99999999999999999999"]),
            "invalid value \"99999999999999999999\" for flag -n: value out of range"
        );
        assert_eq!(
            err(&["-gzip=yes"]),
            "invalid boolean value \"yes\" for -gzip: parse error"
        );
        assert_eq!(
            err(&["-sync-interval=5"]),
            "invalid value \"5\" for flag -sync-interval: parse error"
        );
        assert_eq!(err(&["---x"]), "bad flag syntax: ---x");
        assert!(matches!(set().parse(&args(&["-h"])), Err(Exit::Help(_))));
    }

    #[test]
    fn go_ints() {
        assert_eq!(parse_go_int("010"), Ok(8));
        assert_eq!(parse_go_int("1_000"), Ok(1000));
        assert_eq!(parse_go_int("-0b11"), Ok(-3));
        assert_eq!(parse_go_int("0x_1f"), Ok(31));
        assert!(parse_go_int("1__0").is_err());
        assert!(parse_go_int("0x1__0").is_err());
        assert!(parse_go_int("").is_err());
        assert!(parse_go_int("09").is_err());
        assert!(parse_go_int("--1").is_err());
        assert_eq!(
            parse_go_int("99999999999999999999"),
            Err("value out of range".into())
        );
    }

    #[test]
    fn usage_matches_go_print_defaults() {
        let u = set().usage();
        let want = "Usage of app:\n  -channel string\n    \tchannel (default \"nsq_to_file\")\n  -gzip\n    \tgzip output\n  -n int\n    \tnumber (default 100)\n  -rotate-size rotate-size\n    \trotate above rotate-size bytes\n  -sample float\n    \tfraction (default 1)\n  -sync-interval duration\n    \tsync every (default 30s)\n  -topic value\n    \ttopic (may be given multiple times)\n";
        assert_eq!(u, want);
    }
}

//! The one command-line mechanism of every nsq-rs binary, in the form of
//! Go's `flag` package as NSQ's daemons and apps use it, with go-options'
//! TOML `--config` file for the daemons.
//!
//! Each option is declared once, with [`crate::flags!`]: a struct field
//! with its type, default and usage text. From that declaration come the
//! typed struct itself (a misspelt option fails to compile), parsing,
//! `--help`, the `--config` keys, and the `/config/<opt>` view of nsqd
//! and nsqadmin. A field's type says how it parses and prints
//! ([`Value`]).
//!
//! Go's rules: `-name` or `--name`, `=value` or a separate value (taken
//! verbatim, even if it starts with `-`); booleans only as `-name` or
//! `-name=<bool>`; parsing stops at the first non-flag argument or `--`;
//! the last value of a non-repeatable flag wins. `-h`/`-help` print
//! `Usage of <name>:` and Go's listing (sorted, each flag with its type and
//! `(default ...)`), exit 0; an unknown flag or a bad value prints Go's
//! message and the listing, exit 2.

use std::collections::HashSet;

use nsq_protocol::gofmt::quote as go_quote;

pub use serde_json::Value as Json;

mod values;
pub use values::*;

/// What `/config/<opt>` answers for an option: JSON, or a string sent raw
/// (NSQ sends string options unquoted).
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigValue {
    Json(Json),
    Text(String),
}

/// Why a `--config` file value was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TomlError {
    /// go-options could not coerce it; the reason (the option's Go field
    /// name and the value are added around it).
    Coerce(String),
    /// The whole message (the daemons' own config checks word it).
    Fatal(String),
}

/// How an option's type parses, prints and reports itself.
pub trait Value: Default + Sized {
    /// Go's name for the type in `--help` (`int`, `string`, `duration`,
    /// `value`), empty for booleans.
    const TYPE: &'static str;
    /// `-name` alone sets it (Go's `IsBoolFlag`).
    const BOOL: bool = false;
    /// Its default is shown quoted (Go quotes only string flags).
    const QUOTED: bool = false;

    /// One command-line value (Go's `Set`): replaces the value, or appends
    /// for a repeatable option. The error is what Go prints after the
    /// flag's name (`parse error`).
    fn set(&mut self, s: &str) -> Result<(), String>;

    /// Go's `String()`: the `(default ...)` text of `--help`.
    fn show(&self) -> String;

    /// Whether this is the type's zero value (Go shows no default then).
    fn is_zero(&self) -> bool {
        self.show() == Self::default().show()
    }

    /// What `/config/<opt>` answers.
    fn config(&self) -> ConfigValue;

    /// A value from the `--config` file, coerced as go-options coerces.
    fn set_toml(&mut self, v: &toml::Value) -> Result<(), TomlError> {
        match v {
            toml::Value::Array(items) => {
                for item in items {
                    self.set(&go_sprint_v(item)).map_err(TomlError::Coerce)?;
                }
                Ok(())
            }
            v => self.set(&go_sprint_v(v)).map_err(TomlError::Coerce),
        }
    }
}

/// One option as the listing, the parser and the config file see it.
#[derive(Debug, Clone)]
pub struct Flag {
    /// The flag's name (`max-in-flight`).
    pub name: String,
    /// Its key in the `--config` file and `/config/<opt>`; `None` for
    /// options of the command line only (`--config`, `--version`).
    pub cfg: Option<&'static str>,
    /// Go's field name (`MaxInFlight`), for config-file errors.
    pub field: String,
    pub type_name: &'static str,
    pub is_bool: bool,
    /// The default as Go's `String()` prints it.
    pub default: String,
    pub default_is_zero: bool,
    pub quoted: bool,
    pub usage: String,
}

impl Flag {
    #[doc(hidden)]
    pub fn new<T: Value>(
        name: String,
        field: &str,
        cfg: Option<&'static str>,
        default: &T,
        usage: &[&str],
    ) -> Flag {
        Flag {
            name,
            cfg,
            field: field
                .split('_')
                .map(|w| {
                    let mut c = w.chars();
                    c.next()
                        .map(|f| f.to_uppercase().chain(c).collect::<String>())
                        .unwrap_or_default()
                })
                .collect(),
            type_name: T::TYPE,
            is_bool: T::BOOL,
            default: default.show(),
            default_is_zero: default.is_zero(),
            quoted: T::QUOTED,
            usage: usage.iter().map(|l| l.trim()).collect::<Vec<_>>().join(" "),
        }
    }
}

/// A struct of options, implemented by [`crate::flags!`].
pub trait Flags: Default {
    /// Every option, in declaration order.
    fn flags() -> Vec<Flag>;
    /// Sets option `name` from a command-line value; `None` if no such flag.
    fn set_flag(&mut self, name: &str, value: &str) -> Option<Result<(), String>>;
    /// Sets the option whose config key is `key`; `None` if no such key.
    fn set_config(&mut self, key: &str, v: &toml::Value) -> Option<Result<(), TomlError>>;
    /// The `/config/<opt>` view of the option whose config key is `key`.
    fn config_value(&self, key: &str) -> Option<ConfigValue>;
    /// The field named `field`, for code shared by several declarations
    /// (`crate::start_daemon` reads `version`, `config`, `log_level`).
    fn field(&self, field: &str) -> Option<&dyn std::any::Any>;
}

/// The value an option starts with: its declared default, as Go text.
/// An invalid default is a programming error, caught by every binary's
/// unit tests (which build the defaults).
#[doc(hidden)]
pub fn default_value<T: Value>(name: &str, text: &str) -> T {
    let mut v = T::default();
    if !text.is_empty() {
        if let Err(e) = v.set(text) {
            panic!("bad default {text:?} for -{name}: {e}");
        }
    }
    v
}

/// Declares a struct of options: every field is one flag. The flag's name
/// is the field's with `_` → `-` (or `flag = "..."`), its config key the
/// field's name (or `cfg = "..."`, empty for none), its usage the doc
/// comment (a word in backquotes names the value, as in Go), and `check`
/// a validation run before a command-line value is accepted.
///
/// ```ignore
/// nsq_cli::flags! {
///     pub struct Options {
///         /// topic to consume (may be given multiple times)
///         topic: Vec<String> = "";
///         /// messages allowed in flight
///         max_in_flight: i64 = 200;
///         /// the node's id
///         node_id: i64 = 7, cfg = "id";
///     }
/// }
/// ```
#[macro_export]
macro_rules! flags {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $(
                $(#[doc = $doc:literal])*
                $field:ident : $ty:ty = $default:expr
                $(, flag = $flag:literal)?
                $(, cfg = $cfg:literal)?
                $(, check = $check:expr)?
                ;
            )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq)]
        $vis struct $name {
            $( $(#[doc = $doc])* pub $field: $ty, )*
        }

        impl ::std::default::Default for $name {
            fn default() -> Self {
                $name {
                    $( $field: $crate::flags::default_value::<$ty>(
                        &$crate::__flag_name!($field $(, $flag)?),
                        &::std::string::ToString::to_string(&$default),
                    ), )*
                }
            }
        }

        impl $crate::flags::Flags for $name {
            fn flags() -> ::std::vec::Vec<$crate::flags::Flag> {
                let d = <$name as ::std::default::Default>::default();
                ::std::vec![ $( $crate::flags::Flag::new::<$ty>(
                    $crate::__flag_name!($field $(, $flag)?),
                    stringify!($field),
                    $crate::__flag_cfg!($field $(, $cfg)?),
                    &d.$field,
                    &[$($doc),*],
                ), )* ]
            }

            fn set_flag(
                &mut self,
                name: &str,
                value: &str,
            ) -> ::std::option::Option<::std::result::Result<(), ::std::string::String>> {
                $(
                    if name == $crate::__flag_name!($field $(, $flag)?) {
                        $( if let ::std::result::Result::Err(e) = ($check)(value) {
                            return ::std::option::Option::Some(::std::result::Result::Err(e));
                        } )?
                        return ::std::option::Option::Some(
                            $crate::flags::Value::set(&mut self.$field, value),
                        );
                    }
                )*
                ::std::option::Option::None
            }

            fn set_config(
                &mut self,
                key: &str,
                v: &$crate::toml::Value,
            ) -> ::std::option::Option<::std::result::Result<(), $crate::flags::TomlError>> {
                $(
                    if ::std::option::Option::Some(key) == $crate::__flag_cfg!($field $(, $cfg)?) {
                        return ::std::option::Option::Some(
                            $crate::flags::Value::set_toml(&mut self.$field, v),
                        );
                    }
                )*
                ::std::option::Option::None
            }

            fn field(&self, field: &str) -> ::std::option::Option<&dyn ::std::any::Any> {
                $(
                    if field == stringify!($field) {
                        return ::std::option::Option::Some(&self.$field);
                    }
                )*
                ::std::option::Option::None
            }

            fn config_value(&self, key: &str) -> ::std::option::Option<$crate::flags::ConfigValue> {
                $(
                    if ::std::option::Option::Some(key) == $crate::__flag_cfg!($field $(, $cfg)?) {
                        return ::std::option::Option::Some($crate::flags::Value::config(&self.$field));
                    }
                )*
                ::std::option::Option::None
            }
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __flag_name {
    ($field:ident) => {
        stringify!($field).replace('_', "-")
    };
    ($field:ident, $flag:literal) => {
        ::std::string::String::from($flag)
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __flag_cfg {
    ($field:ident) => {
        ::std::option::Option::Some(stringify!($field))
    };
    ($field:ident, $cfg:literal) => {
        match $cfg {
            "" => ::std::option::Option::None,
            c => ::std::option::Option::Some(c),
        }
    };
}

/// A parsed command line.
#[derive(Debug)]
pub struct Parsed<T> {
    pub flags: T,
    /// Arguments after the flags (Go's `fs.Args()`).
    pub args: Vec<String>,
    /// Flags given on the command line (they win over the config file).
    given: HashSet<String>,
}

/// How a parse ended without options: print and exit with this code.
#[derive(Debug, PartialEq, Eq)]
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

/// argv as strings (lossy for non-UTF-8), as Go programs see them.
pub fn args() -> Vec<String> {
    std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

/// Parses the process's command line (the `program` name shows in
/// `Usage of <program>:`), printing and exiting as Go's `ExitOnError`
/// does on `-h` or an error.
pub fn parse_or_exit<T: Flags>(program: &str) -> Parsed<T> {
    let argv = args();
    parse(program, argv.get(1..).unwrap_or_default()).unwrap_or_else(|e| e.exit())
}

/// [`parse_or_exit`] named as Go's global `flag.CommandLine` is: after
/// `argv[0]` (NSQ's apps use it).
pub fn parse_command_line<T: Flags>() -> Parsed<T> {
    let argv = args();
    let program = argv.first().cloned().unwrap_or_default();
    parse(&program, argv.get(1..).unwrap_or_default()).unwrap_or_else(|e| e.exit())
}

/// Go's `PrintDefaults` under `Usage of <program>:`.
pub fn usage<T: Flags>(program: &str) -> String {
    let mut out = format!("Usage of {program}:\n");
    let mut flags = T::flags();
    flags.sort_by(|a, b| a.name.cmp(&b.name));
    for f in flags {
        let (type_name, usage) = unquote_usage(&f);
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
        if !f.default_is_zero {
            if f.quoted {
                line.push_str(&format!(" (default {})", go_quote(&f.default)));
            } else {
                line.push_str(&format!(" (default {})", f.default));
            }
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// Go's `UnquoteUsage`: a backquoted word names the value and loses its
/// quotes; otherwise the name is the type's.
fn unquote_usage(f: &Flag) -> (String, String) {
    let u = &f.usage;
    if let Some(start) = u.find('`') {
        if let Some(len) = u[start + 1..].find('`') {
            let name = &u[start + 1..start + 1 + len];
            let usage = format!("{}{}{}", &u[..start], name, &u[start + 2 + len..]);
            return (name.to_string(), usage);
        }
    }
    (f.type_name.to_string(), u.clone())
}

/// Parses `args` (without the program name) with Go's `flag` rules.
pub fn parse<T: Flags>(program: &str, args: &[String]) -> Result<Parsed<T>, Exit> {
    let flags = T::flags();
    let mut out = T::default();
    let mut given = HashSet::new();
    let fail = |msg: String| Exit::Error(format!("{msg}\n{}", usage::<T>(program)));
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
        let body = &s[minuses..];
        if body.is_empty() || body.starts_with('-') || body.starts_with('=') {
            return Err(fail(format!("bad flag syntax: {s}")));
        }
        i += 1;
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (body, None),
        };
        let Some(flag) = flags.iter().find(|f| f.name == name) else {
            if name == "help" || name == "h" {
                return Err(Exit::Help(usage::<T>(program)));
            }
            return Err(fail(format!("flag provided but not defined: -{name}")));
        };
        if flag.is_bool {
            let v = inline.unwrap_or_else(|| "true".to_string());
            if let Some(Err(e)) = out.set_flag(&flag.name, &v) {
                return Err(fail(format!(
                    "invalid boolean value {} for -{name}: {e}",
                    go_quote(&v)
                )));
            }
            given.insert(flag.name.clone());
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
        if let Some(Err(e)) = out.set_flag(&flag.name, &v) {
            return Err(fail(format!(
                "invalid value {} for flag -{name}: {e}",
                go_quote(&v)
            )));
        }
        given.insert(flag.name.clone());
    }
    Ok(Parsed {
        flags: out,
        args: args[i..].to_vec(),
        given,
    })
}

impl<T: Flags> Parsed<T> {
    /// Whether the flag was given on the command line.
    pub fn given(&self, name: &str) -> bool {
        self.given.contains(name)
    }

    /// Applies a TOML `--config` file as go-options' `Resolve` does: a key
    /// sets its option unless the command line gave that flag; unknown keys
    /// are ignored. The error is what the daemon prints after `FATAL: `.
    pub fn apply_config(&mut self, path: &str, text: &str) -> Result<(), String> {
        let table: toml::Table = text
            .parse()
            .map_err(|e| format!("failed to load config file {path} - {e}"))?;
        let flags = T::flags();
        for (key, value) in &table {
            let Some(flag) = flags.iter().find(|f| f.cfg == Some(key.as_str())) else {
                continue;
            };
            if self.given.contains(&flag.name) {
                continue;
            }
            match self.flags.set_config(key, value) {
                None | Some(Ok(())) => {}
                Some(Err(TomlError::Fatal(msg))) => return Err(msg),
                Some(Err(TomlError::Coerce(why))) => {
                    return Err(format!(
                        "Resolve failed to coerce value {} for field {} - {why}",
                        go_sprint_v(value),
                        flag.field
                    ))
                }
            }
        }
        Ok(())
    }

    /// Reads and applies the `--config` file at `path` ([`Parsed::apply_config`]).
    pub fn load_config(&mut self, path: &str) -> Result<(), String> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            format!(
                "failed to load config file {path} - open {path}: {}",
                crate::go_errno(&e)
            )
        })?;
        self.apply_config(path, &text)
    }
}

/// Go's `fmt.Sprintf("%v", v)` of a decoded TOML value.
pub fn go_sprint_v(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Array(items) => format!(
            "[{}]",
            items.iter().map(go_sprint_v).collect::<Vec<_>>().join(" ")
        ),
        other => other.to_string(),
    }
}

/// Go's name of a decoded TOML value's type.
fn go_type(v: &toml::Value) -> &'static str {
    match v {
        toml::Value::String(_) => "string",
        toml::Value::Integer(_) => "int64",
        toml::Value::Float(_) => "float64",
        toml::Value::Boolean(_) => "bool",
        toml::Value::Datetime(_) => "toml.Datetime",
        toml::Value::Array(_) => "[]interface {}",
        toml::Value::Table(_) => "map[string]interface {}",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    crate::flags! {
        /// A test set.
        struct App {
            /// gzip output
            gzip: bool = false;
            /// number
            n: i64 = 100;
            /// topic (may be given multiple times)
            topic: Vec<String> = "";
            /// channel
            channel: String = "nsq_to_file";
            /// sync every
            sync_interval: Duration = "30s";
            /// rotate above `rotate-size` bytes
            rotate_size: i64 = 0;
            /// fraction
            sample: f64 = 1;
            /// level
            log_level: LogLevel = "info";
            /// the id
            node_id: i64 = 7, cfg = "id";
            /// print version
            version: bool = false, cfg = "";
            /// a checked option
            opt: Vec<String> = "", flag = "consumer-opt", check = |s: &str| if s.contains(',') { Ok(()) } else { Err(format!("bad {s}")) };
        }
    }

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    fn parse_app(a: &[&str]) -> Result<Parsed<App>, Exit> {
        parse::<App>("app", &args(a))
    }

    #[test]
    fn go_parsing_rules() {
        let p = parse_app(&[
            "-gzip",
            "--topic=a",
            "-topic",
            "b",
            "-n",
            "5",
            "--n=0x10",
            "x",
            "--channel=c",
        ])
        .unwrap();
        assert!(p.flags.gzip);
        assert_eq!(p.flags.topic, ["a", "b"]);
        assert_eq!(p.flags.n, 16);
        assert_eq!(p.flags.channel, "nsq_to_file");
        assert_eq!(p.args, ["x", "--channel=c"]);
        assert!(p.given("n") && !p.given("channel"));
        let p = parse_app(&["-gzip", "false"]).unwrap();
        assert!(p.flags.gzip);
        assert_eq!(p.args, ["false"]);
        let p = parse_app(&["--", "-gzip"]).unwrap();
        assert!(!p.flags.gzip);
        assert_eq!(
            positive(p.flags.sync_interval),
            Some(Duration::from_secs(30))
        );
        let p = parse_app(&["-sync-interval=-1s", "--consumer-opt", "a,1"]).unwrap();
        assert_eq!(positive(p.flags.sync_interval), None);
        assert_eq!(p.flags.opt, ["a,1"]);
        let p = parse_app(&["-log-level=WARN", "-node-id", "-5"]).unwrap();
        assert_eq!((p.flags.log_level, p.flags.node_id), (LogLevel::Warn, -5));
    }

    #[test]
    fn go_errors() {
        let err = |a: &[&str]| match parse_app(a) {
            Err(Exit::Error(e)) => {
                assert!(e.contains("\nUsage of app:\n"), "{e}");
                e.lines().next().unwrap().to_string()
            }
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
        assert_eq!(
            err(&["-log-level=loud"]),
            "invalid value \"loud\" for flag -log-level: invalid log level 'loud' (debug, info, warn, error, fatal)"
        );
        assert_eq!(
            err(&["-consumer-opt=x"]),
            "invalid value \"x\" for flag -consumer-opt: bad x"
        );
        assert_eq!(err(&["---x"]), "bad flag syntax: ---x");
        assert!(matches!(parse_app(&["-h"]), Err(Exit::Help(_))));
        assert!(matches!(parse_app(&["--help"]), Err(Exit::Help(_))));
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
        let u = usage::<App>("app");
        let want = "Usage of app:\n  -channel string\n    \tchannel (default \"nsq_to_file\")\n  -consumer-opt value\n    \ta checked option\n  -gzip\n    \tgzip output\n  -log-level value\n    \tlevel (default INFO)\n  -n int\n    \tnumber (default 100)\n  -node-id int\n    \tthe id (default 7)\n  -rotate-size rotate-size\n    \trotate above rotate-size bytes\n  -sample float\n    \tfraction (default 1)\n  -sync-interval duration\n    \tsync every (default 30s)\n  -topic value\n    \ttopic (may be given multiple times)\n  -version\n    \tprint version\n";
        assert_eq!(u, want);
    }

    #[test]
    fn config_file_and_config_values() {
        let mut p = parse_app(&["-n=3"]).unwrap();
        p.apply_config(
            "x.toml",
            "n = 9\nchannel = \"c\"\nsync_interval = 1500\nid = 12\ntopic = [\"a\", \"b\"]\nversion = true\nunknown = 1\nlog_level = \"debug\"",
        )
        .unwrap();
        let f = &p.flags;
        assert_eq!(f.n, 3, "the command line wins");
        assert_eq!(f.channel, "c");
        assert_eq!(f.sync_interval, Duration::from_millis(1500));
        assert_eq!(f.node_id, 12);
        assert_eq!(f.topic, ["a", "b"]);
        assert!(!f.version, "not a config key");
        assert_eq!(f.log_level, LogLevel::Debug);
        let e = |c: &str| {
            parse_app(&[])
                .unwrap()
                .apply_config("x.toml", c)
                .unwrap_err()
        };
        assert_eq!(e("log_level = \"loud\""), "failed parsing log_level loud");
        assert!(e("sync_interval = \"5\"")
            .starts_with("Resolve failed to coerce value 5 for field SyncInterval - "));
        assert!(e("not toml =").starts_with("failed to load config file x.toml - "));
        let mut p = parse_app(&[]).unwrap();
        p.apply_config("x.toml", "channel = 4160").unwrap();
        assert_eq!(p.flags.channel, "%!s(int64=4160)");
        assert_eq!(
            p.flags.config_value("sync_interval"),
            Some(ConfigValue::Json(Json::from(30_000_000_000i64)))
        );
        assert_eq!(
            p.flags.config_value("channel"),
            Some(ConfigValue::Text("%!s(int64=4160)".into()))
        );
        assert_eq!(
            p.flags.config_value("log_level"),
            Some(ConfigValue::Json(Json::from(2)))
        );
        assert_eq!(p.flags.config_value("version"), None);
        assert_eq!(p.flags.config_value("node_id"), None);
    }
}

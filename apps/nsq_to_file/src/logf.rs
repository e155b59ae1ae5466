//! NSQ's app logging (`internal/lg` over Go's `log`): lines
//! `<prefix>2006/01/02 15:04:05.000000 LEVEL: message` on stderr, local
//! time, filtered by `--log-level`. A FATAL line is always printed and ends
//! the process with status 1.
//!
//! Also Go's plain `log.Fatal`, used for command-line validation before the
//! app logger exists: `2006/01/02 15:04:05 message`, exit 1.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

use nsq_cli::golog;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Debug = 1,
    Info = 2,
    Warn = 3,
    Error = 4,
    Fatal = 5,
}

impl Level {
    /// `lg.ParseLogLevel`: case-insensitive `debug`, `info`, `warn`, `error`, `fatal`.
    pub fn parse(s: &str) -> Option<Level> {
        Some(match s.to_lowercase().as_str() {
            "debug" => Level::Debug,
            "info" => Level::Info,
            "warn" => Level::Warn,
            "error" => Level::Error,
            "fatal" => Level::Fatal,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Level::Debug => "DEBUG",
            Level::Info => "INFO",
            Level::Warn => "WARNING",
            Level::Error => "ERROR",
            Level::Fatal => "FATAL",
        }
    }
}

static LEVEL: AtomicU8 = AtomicU8::new(Level::Info as u8);
static PREFIX: OnceLock<String> = OnceLock::new();

pub fn init(prefix: &str, level: Level) {
    let _ = PREFIX.set(prefix.to_string());
    LEVEL.store(level as u8, Ordering::Relaxed);
}

pub fn logf(level: Level, msg: impl std::fmt::Display) {
    if (level as u8) < LEVEL.load(Ordering::Relaxed) {
        return;
    }
    let prefix = PREFIX.get().map(String::as_str).unwrap_or("");
    eprintln!("{prefix}{} {}: {msg}", golog::timestamp(true), level.name());
}

pub fn info(msg: impl std::fmt::Display) {
    logf(Level::Info, msg)
}

pub fn warn(msg: impl std::fmt::Display) {
    logf(Level::Warn, msg)
}

pub fn error(msg: impl std::fmt::Display) {
    logf(Level::Error, msg)
}

/// `logf(FATAL, ...)` followed by `os.Exit(1)`.
pub fn fatal(msg: impl std::fmt::Display) -> ! {
    logf(Level::Fatal, msg);
    std::process::exit(1)
}

/// Go's `log.Fatal`: standard logger format, exit 1.
pub use golog::fatal as go_log_fatal;

/// An I/O error worded like Go's `*PathError` (`open /x: permission denied`).
pub fn path_err(op: &str, path: &str, e: &std::io::Error) -> String {
    format!("{op} {path}: {}", errno_text(e))
}

/// The text of an OS error the way Go's `syscall.Errno` prints it.
pub use nsq_protocol::gofmt::errno_text;

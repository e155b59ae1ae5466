//! The daemons' logs on stderr, with the level changeable at run time
//! (nsqd's and nsqadmin's `PUT /config/log_level`).
//!
//! Two line forms: NSQ's own, `<prefix><YYYY/MM/DD HH:MM:SS.micro>
//! <LEVEL>: <message>` (structured fields of an event follow the message
//! as `key=value`), which nsqlookupd writes; and tracing's formatter behind
//! the same prefix and timestamp (nsqd, nsqadmin and the apps).
//! Timestamps are UTC (Go uses the local zone; containers usually run UTC).

use std::fmt;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::prelude::*;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::reload;

use crate::flags::LogLevel;

/// A line as NSQ's `lg.Logf` writes it.
pub fn line(prefix: &str, level: &str, message: &str) -> String {
    format!("{prefix}{} {level}: {message}", crate::timestamp())
}

/// How log lines look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// `[nsqlookupd] 2026/12/01 11:14:06.629604 INFO: message k=v`.
    Nsq,
    /// `[nsqd] 2026/12/01 11:14:06.629604  INFO message k=v` (tracing's).
    Tracing,
}

/// Changes the log level at run time.
pub type LevelSetter = Box<dyn Fn(LogLevel) -> bool + Send + Sync>;

fn filter(level: LogLevel) -> LevelFilter {
    match level {
        LogLevel::Debug => LevelFilter::DEBUG,
        LogLevel::Info => LevelFilter::INFO,
        LogLevel::Warn => LevelFilter::WARN,
        LogLevel::Error => LevelFilter::ERROR,
        // `fatal` shows nothing but the FATAL lines `main` prints itself.
        LogLevel::Fatal => LevelFilter::OFF,
    }
}

/// Logs to stderr at `level` behind `prefix`; returns a setter for later changes.
pub fn init(level: LogLevel, prefix: &str, form: Form) -> LevelSetter {
    let (layer, handle) = reload::Layer::new(filter(level));
    let prefix = prefix.to_string();
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false);
    let registry = tracing_subscriber::registry().with(layer);
    match form {
        Form::Nsq => registry.with(fmt.event_format(NsqFormat { prefix })).init(),
        Form::Tracing => registry
            .with(fmt.with_target(false).with_timer(PrefixTimer(prefix)))
            .init(),
    }
    Box::new(move |l: LogLevel| handle.modify(|cur| *cur = filter(l)).is_ok())
}

/// NSQ's line form.
struct NsqFormat {
    prefix: String,
}

impl<S, N> FormatEvent<S, N> for NsqFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let level = match *event.metadata().level() {
            Level::ERROR => "ERROR",
            Level::WARN => "WARNING",
            Level::INFO => "INFO",
            Level::DEBUG | Level::TRACE => "DEBUG",
        };
        write!(writer, "{}{} {level}: ", self.prefix, crate::timestamp())?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// Writes `<prefix><timestamp>` where tracing puts its timestamp.
struct PrefixTimer(String);

impl tracing_subscriber::fmt::time::FormatTime for PrefixTimer {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        write!(w, "{}{}", self.0, crate::timestamp())
    }
}

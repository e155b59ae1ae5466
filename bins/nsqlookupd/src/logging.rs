//! Log output in NSQ's format: `<prefix><YYYY/MM/DD HH:MM:SS.micro> <LEVEL>: <message>`
//! on stderr, e.g. `[nsqlookupd] 2025/01/27 10:00:00.123456 INFO: TCP: listening on 0.0.0.0:4160`.
//! Structured fields of an event follow the message as `key=value`.
//! Timestamps are UTC (Go uses the local zone; containers usually run UTC).

use std::fmt;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use crate::flags::LogLevel;

/// A line as NSQ's `lg.Logf` writes it.
pub fn line(prefix: &str, level: &str, message: &str) -> String {
    format!("{prefix}{} {level}: {message}", nsq_cli::timestamp())
}

struct GoFormat {
    prefix: String,
}

impl<S, N> FormatEvent<S, N> for GoFormat
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
        write!(writer, "{}{} {level}: ", self.prefix, nsq_cli::timestamp())?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// Installs the global subscriber. `fatal` shows nothing but the FATAL lines
/// `main` prints itself.
pub fn init(level: LogLevel, prefix: &str) {
    let filter = match level {
        LogLevel::Debug => LevelFilter::DEBUG,
        LogLevel::Info => LevelFilter::INFO,
        LogLevel::Warn => LevelFilter::WARN,
        LogLevel::Error => LevelFilter::ERROR,
        LogLevel::Fatal => LevelFilter::OFF,
    };
    tracing_subscriber::fmt()
        .with_max_level(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .event_format(GoFormat {
            prefix: prefix.to_owned(),
        })
        .init();
}

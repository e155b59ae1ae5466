//! The daemons' logs on stderr, with the level changeable at run time
//! (nsqd's and nsqadmin's `PUT /config/log_level`).
//!
//! Three line forms: NSQ's own, `<prefix><YYYY/MM/DD HH:MM:SS.micro>
//! <LEVEL>: <message>` (structured fields of an event follow the message
//! as `key=value`), which the daemons write; JSON, one object per line with
//! `time` (RFC 3339, UTC, microseconds), `level`, `message` and the event's
//! fields, for log pipelines (the daemons' `--log-format=json`, beyond
//! NSQ); and tracing's formatter behind the same prefix and timestamp (the
//! apps). Timestamps are UTC (Go uses the local zone; containers usually
//! run UTC).

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
    /// `{"time":"2026-12-01T11:14:06.629604Z","level":"INFO","message":"...","k":"v"}`.
    Json,
}

impl Form {
    /// A daemon's `--log-format`: `nsq` (NSQ's lines) or `json`.
    pub fn from_flag(s: &str) -> Result<Form, String> {
        match s {
            "nsq" | "" => Ok(Form::Nsq),
            "json" => Ok(Form::Json),
            _ => Err(format!("invalid --log-format {s:?} (nsq or json)")),
        }
    }
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
        Form::Json => registry.with(fmt.event_format(JsonFormat)).init(),
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
        let level = level_name(event.metadata().level());
        write!(writer, "{}{} {level}: ", self.prefix, crate::timestamp())?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

fn level_name(level: &Level) -> &'static str {
    match *level {
        Level::ERROR => "ERROR",
        Level::WARN => "WARNING",
        Level::INFO => "INFO",
        Level::DEBUG | Level::TRACE => "DEBUG",
    }
}

/// One JSON object per line; see [`Form::Json`].
struct JsonFormat;

impl<S, N> FormatEvent<S, N> for JsonFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut fields = JsonFields(serde_json::Map::new());
        event.record(&mut fields);
        let mut obj = serde_json::Map::new();
        obj.insert("time".into(), rfc3339_now().into());
        obj.insert("level".into(), level_name(event.metadata().level()).into());
        obj.insert(
            "message".into(),
            fields.0.remove("message").unwrap_or_default(),
        );
        obj.extend(fields.0);
        writeln!(writer, "{}", serde_json::Value::Object(obj))
    }
}

/// An event's fields as JSON values (numbers and booleans kept as such).
struct JsonFields(serde_json::Map<String, serde_json::Value>);

impl tracing::field::Visit for JsonFields {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_i64(&mut self, field: &tracing::field::Field, value: i64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_bool(&mut self, field: &tracing::field::Field, value: bool) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_f64(&mut self, field: &tracing::field::Field, value: f64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().into(), format!("{value:?}").into());
    }
}

/// `2026-12-01T11:14:06.629604Z`.
fn rfc3339_now() -> String {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let (y, m, d, hh, mm, ss) = nsq_protocol::duration::civil_utc(since.as_secs() as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}.{:06}Z",
        since.subsec_micros()
    )
}

/// Writes `<prefix><timestamp>` where tracing puts its timestamp.
struct PrefixTimer(String);

impl tracing_subscriber::fmt::time::FormatTime for PrefixTimer {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        write!(w, "{}{}", self.0, crate::timestamp())
    }
}

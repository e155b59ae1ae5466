//! What every nsq-rs binary shares, so each `main` stays a page of wiring:
//! the command line in Go's `flag` form with the TOML `--config` file
//! ([`flags`]), `--version`, log setup with a runtime-adjustable level
//! ([`log`]), Go's `log` package for the apps ([`golog`]), `FATAL` exits,
//! SIGINT/SIGTERM as one cancellation token, and the host's name
//! ([`sys`], the one module of the workspace that calls into libc); and
//! what NSQ's apps share from Go libraries: go-hostpool ([`hostpool`]) and
//! bitly/timer_metrics ([`timer_metrics`]).
//!
//! Never: anything a daemon decides.

#![deny(unsafe_code)]

pub mod flags;
pub mod golog;
pub mod hostpool;
pub mod log;
pub mod sys;
pub mod timer_metrics;

pub use flags::LogLevel;
pub use sys::hostname;
/// The TOML parser of `--config` files (for [`flags!`]).
pub use toml;

use tokio_util::sync::CancellationToken;

/// NSQ's version, which every binary reports.
pub use nsq_protocol::VERSION;

/// A daemon's `--version` line, as Go's `version.String(name)` prints it:
/// `nsqd v1.3.0 (built w/rust1.80.0)`.
pub fn version(name: &str) -> String {
    format!("{name} v{VERSION} (built w/{})", env!("NSQ_RUSTC_VERSION"))
}

/// An app's `--version` line, as NSQ's apps print it: `nsq_tail v1.3.0`.
pub fn app_version(name: &str) -> String {
    format!("{name} v{VERSION}")
}

/// The start of every daemon's `main`, in NSQ's order: the command line
/// (`Usage of <name>:`), `--version`, the `--config` file (a bad one is
/// FATAL, exit 1), then logging, in NSQ's line form or as JSON
/// (`--log-format`). Returns the options and the setter of the log level.
/// The options must declare `version`, `config`, `log_level`, `log_prefix`
/// and `log_format`.
pub fn start_daemon<T: flags::Flags>(name: &str) -> (T, log::LevelSetter) {
    fn get<'a, V: 'static>(f: &'a impl flags::Flags, field: &str) -> &'a V {
        f.field(field)
            .and_then(|v| v.downcast_ref::<V>())
            .unwrap_or_else(|| panic!("a daemon's options declare {field}"))
    }
    let mut parsed = flags::parse_or_exit::<T>(name);
    if *get::<bool>(&parsed.flags, "version") {
        println!("{}", version(name));
        std::process::exit(0);
    }
    let config = get::<String>(&parsed.flags, "config").clone();
    if !config.is_empty() {
        if let Err(e) = parsed.load_config(&config) {
            daemon_fatal(name, &e);
        }
    }
    let level = *get::<LogLevel>(&parsed.flags, "log_level");
    let prefix = get::<String>(&parsed.flags, "log_prefix").clone();
    let form = log::Form::from_flag(get::<String>(&parsed.flags, "log_format"))
        .unwrap_or_else(|e| daemon_fatal(name, &e));
    let set_level = log::init(level, &prefix, form);
    (parsed.flags, set_level)
}

/// What a daemon's start and run return: its future, boxed by the library
/// that defines it. rustc compiles an async fn's state machine in the crate
/// that polls it, so a `main` that awaited `Nsqd::run` itself compiled the
/// whole server a second time, in the binary's crate (97 s of the 373 s
/// release build of the quick start, 2 cores); boxed in the library, it is
/// compiled once, there, and the binary only calls through the box.
pub type DaemonFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

/// A daemon's `FATAL` line and exit 1; NSQ's daemons prefix it with their
/// name whatever `--log-prefix` says.
pub fn daemon_fatal(name: &str, msg: &str) -> ! {
    fatal(&format!("[{name}] "), msg)
}

/// The tokio runtime of a daemon (FATAL if it cannot be built).
pub fn daemon_runtime(name: &str) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| daemon_fatal(name, &format!("failed to start runtime - {e}")))
}

/// The start of an app's work once its flags are checked: the client
/// library's logs (warnings, errors) on stderr at INFO, and the tokio
/// runtime (`log.Fatal` if it cannot be built).
pub fn app_runtime() -> tokio::runtime::Runtime {
    let _ = log::init(LogLevel::Info, "", log::Form::Tracing);
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| golog::fatal(e.to_string()))
}

/// `2006/01/02 15:04:05.000000` in UTC (the daemons' log timestamp).
pub fn timestamp() -> String {
    timestamp_at(std::time::SystemTime::now())
}

/// [`timestamp`] of a given time.
pub fn timestamp_at(t: std::time::SystemTime) -> String {
    let since = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let (y, m, d, hh, mm, ss) = nsq_protocol::duration::civil_utc(since.as_secs() as i64);
    format!(
        "{y:04}/{m:02}/{d:02} {hh:02}:{mm:02}:{ss:02}.{:06}",
        since.subsec_micros()
    )
}

/// Prints `<prefix><ts> FATAL: <msg>` to stderr, as Go's daemons do before exiting 1.
pub fn fatal(prefix: &str, msg: &str) -> ! {
    eprintln!("{}", log::line(prefix, "FATAL", msg));
    std::process::exit(1)
}

/// An OS error in Go's wording (`no such file or directory`).
pub use nsq_protocol::gofmt::errno_text as go_errno;

/// A token cancelled by the first SIGINT or SIGTERM.
pub fn shutdown_on_signals() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut int), Ok(mut term)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) else {
            tracing::error!("cannot install signal handlers");
            return;
        };
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        tracing::info!("signal received, shutting down");
        t.cancel();
    });
    token
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn daemon_timestamp() {
        let t = std::time::UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456);
        assert_eq!(timestamp_at(t), "2023/11/14 22:13:20.123456");
    }

    #[test]
    fn versions() {
        assert!(version("nsqd").starts_with("nsqd v1.3.0 (built w/rust"));
        assert_eq!(app_version("nsq_tail"), "nsq_tail v1.3.0");
        assert_eq!(
            go_errno(&std::io::Error::from_raw_os_error(2)),
            "no such file or directory"
        );
    }
}

//! The `nsqlookupd` binary: flags and config file, logging, signals, then
//! [`nsqlookupd::NsqLookupd`]. No logic worth testing lives here beyond the
//! flag handling in [`flags`] and [`duration`].
//!
//! Exit status: 0 after SIGINT/SIGTERM (or `--version`/`--help`), 1 on a
//! fatal startup error, 2 on a flag error — as Go's nsqlookupd.

#![forbid(unsafe_code)]

mod duration;
mod flags;
mod logging;

use std::process::ExitCode;

use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;

/// NSQ's fatal-error prefix (hard-coded there, whatever `--log-prefix` is).
const FATAL_PREFIX: &str = "[nsqlookupd] ";

fn version_string() -> String {
    format!(
        "nsqlookupd v{} (built w/{})",
        nsqlookupd::VERSION,
        env!("NSQ_RUSTC_VERSION")
    )
}

fn fatal(message: &str) -> ExitCode {
    eprintln!("{}", logging::line(FATAL_PREFIX, "FATAL", message));
    ExitCode::from(1)
}

fn main() -> ExitCode {
    let (flags, matches) = match flags::parse(std::env::args_os()) {
        Ok(parsed) => parsed,
        Err(e) => e.exit(),
    };
    if flags.version {
        println!("{}", version_string());
        return ExitCode::SUCCESS;
    }
    let config_text = if flags.config.is_empty() {
        None
    } else {
        match std::fs::read_to_string(&flags.config) {
            Ok(text) => Some(text),
            Err(e) => {
                return fatal(&format!(
                    "failed to load config file {} - open {}: {}",
                    flags.config,
                    flags.config,
                    go_errno(&e)
                ))
            }
        }
    };
    let resolved = match flags::resolve(flags, &matches, config_text.as_deref()) {
        Ok(r) => r,
        Err(e) => return fatal(&e.0),
    };
    logging::init(resolved.log_level, &resolved.log_prefix);
    tracing::info!("{}", version_string());

    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fatal(&format!("failed to start runtime - {e}")),
    };
    runtime.block_on(serve(resolved.opts))
}

async fn serve(opts: nsqlookupd::Options) -> ExitCode {
    let daemon = match nsqlookupd::NsqLookupd::bind(opts).await {
        Ok(d) => d,
        // Go's nsqlookupd passes the error as an extra argument to a format
        // string without a verb, so this is literally what it prints.
        Err(e) => {
            return fatal(&format!(
                "failed to instantiate nsqlookupd%!(EXTRA *errors.errorString={e})"
            ))
        }
    };
    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(shutdown.clone()));
    match daemon.serve(shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fatal(&e.to_string()),
    }
}

/// SIGINT or SIGTERM → graceful shutdown.
async fn cancel_on_signal(shutdown: CancellationToken) {
    let (mut int, mut term) = match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(int), Ok(term)) => (int, term),
        (Err(e), _) | (_, Err(e)) => {
            tracing::error!(error = %e, "cannot install signal handlers");
            return;
        }
    };
    tokio::select! {
        _ = int.recv() => {}
        _ = term.recv() => {}
    }
    shutdown.cancel();
}

/// An OS error in Go's wording ("no such file or directory").
fn go_errno(e: &std::io::Error) -> String {
    let text = e.to_string();
    let text = text.split(" (os error").next().unwrap_or_default();
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

//! `nsqlookupd`: flags and config file → [`nsqlookupd::Options`], logging,
//! signals, then [`nsqlookupd::NsqLookupd`].
//!
//! Exit status: 0 after SIGINT/SIGTERM (or `--version`/`--help`), 1 on a
//! fatal startup error, 2 on a flag error — as Go's nsqlookupd.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use nsqlookupd::Options;

/// NSQ's fatal-error prefix (hard-coded there, whatever `--log-prefix` is).
const FATAL_PREFIX: &str = "[nsqlookupd] ";

fn main() -> ExitCode {
    let mut parsed = nsq_cli::flags::parse_or_exit::<Options>("nsqlookupd");
    if parsed.flags.version {
        println!("{}", nsq_cli::version("nsqlookupd"));
        return ExitCode::SUCCESS;
    }
    if !parsed.flags.config.is_empty() {
        let path = parsed.flags.config.clone();
        if let Err(e) = parsed.load_config(&path) {
            nsq_cli::fatal(FATAL_PREFIX, &e);
        }
    }
    let opts = parsed.flags;
    // nsqlookupd has no /config to change the level later.
    let _ = nsq_cli::log::init(opts.log_level, &opts.log_prefix, nsq_cli::log::Form::Nsq);
    tracing::info!("{}", nsq_cli::version("nsqlookupd"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| {
            nsq_cli::fatal(FATAL_PREFIX, &format!("failed to start runtime - {e}"))
        });
    runtime.block_on(async move {
        let daemon = match nsqlookupd::NsqLookupd::bind(opts).await {
            Ok(d) => d,
            // Go's nsqlookupd passes the error as an extra argument to a
            // format string without a verb, so this is literally what it prints.
            Err(e) => nsq_cli::fatal(
                FATAL_PREFIX,
                &format!("failed to instantiate nsqlookupd%!(EXTRA *errors.errorString={e})"),
            ),
        };
        match daemon.serve(nsq_cli::shutdown_on_signals()).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => nsq_cli::fatal(FATAL_PREFIX, &e.to_string()),
        }
    })
}

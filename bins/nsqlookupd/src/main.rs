//! `nsqlookupd`: flags and config file → [`nsqlookupd::Options`], logging,
//! signals, then [`nsqlookupd::NsqLookupd`].
//!
//! Exit status: 0 after SIGINT/SIGTERM (or `--version`/`--help`), 1 on a
//! fatal startup error, 2 on a flag error — as Go's nsqlookupd.

#![forbid(unsafe_code)]

fn main() {
    // nsqlookupd has no /config to change the level later.
    let (opts, _) = nsq_cli::start_daemon::<nsqlookupd::Options>("nsqlookupd");
    let fatal = |msg: &str| -> ! { nsq_cli::daemon_fatal("nsqlookupd", msg) };
    tracing::info!("{}", nsq_cli::version("nsqlookupd"));
    if let Err(e) = opts.validate() {
        fatal(&e);
    }
    nsq_cli::daemon_runtime("nsqlookupd").block_on(async move {
        let daemon = match nsqlookupd::NsqLookupd::bind(opts).await {
            Ok(d) => d,
            // Go's nsqlookupd passes the error as an extra argument to a
            // format string without a verb, so this is literally what it prints.
            Err(e) => fatal(&format!(
                "failed to instantiate nsqlookupd%!(EXTRA *errors.errorString={e})"
            )),
        };
        if let Err(e) = daemon.serve(nsq_cli::shutdown_on_signals()).await {
            fatal(&e.to_string());
        }
    });
}

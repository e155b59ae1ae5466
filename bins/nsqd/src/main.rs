//! `nsqd`: flags and config file → [`nsqd::Options`], logging, signals, run.
//!
//! Exit status: 0 after SIGINT/SIGTERM (or `--version`/`--help`), 1 on a
//! fatal startup error, 2 on a flag error — as Go's nsqd.

#![forbid(unsafe_code)]

fn main() {
    let (opts, set_level) = nsq_cli::start_daemon::<nsqd::Options>("nsqd");
    let fatal = |msg: &str| -> ! { nsq_cli::daemon_fatal("nsqd", msg) };
    nsq_cli::daemon_runtime("nsqd").block_on(async move {
        let nsqd = match nsqd::Nsqd::new(opts).await {
            Ok(n) => n,
            Err(e) => fatal(&format!("failed to instantiate nsqd - {e}")),
        };
        *nsqd.inner().log_level_hook.lock() = Some(set_level);
        if let Err(e) = nsqd.run(nsq_cli::shutdown_on_signals()).await {
            fatal(&e.to_string());
        }
    });
}

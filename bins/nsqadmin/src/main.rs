//! `nsqadmin`: flags and config file → [`nsqadmin::Options`], logging,
//! signals, run.
//!
//! Exit status: 0 after SIGINT/SIGTERM (or `--version`/`--help`), 1 on a
//! fatal startup error, 2 on a flag error — as Go's nsqadmin.

#![forbid(unsafe_code)]

fn main() {
    let (opts, set_level) = nsq_cli::start_daemon::<nsqadmin::Options>("nsqadmin");
    let fatal = |msg: &str| -> ! { nsq_cli::daemon_fatal("nsqadmin", msg) };
    nsq_cli::daemon_runtime("nsqadmin").block_on(async move {
        let admin = match nsqadmin::Nsqadmin::new(opts).await {
            Ok(a) => a,
            Err(e) => fatal(&format!("failed to instantiate nsqadmin - {e}")),
        };
        admin.set_log_level_hook(set_level);
        if let Err(e) = admin.run(nsq_cli::shutdown_on_signals()).await {
            fatal(&e.to_string());
        }
    });
}

//! `nsqd`: flags and config file → [`nsqd::Options`], logging, signals, run.
//!
//! Exit status: 0 after SIGINT/SIGTERM (or `--version`/`--help`), 1 on a
//! fatal startup error, 2 on a flag error — as Go's nsqd.

#![forbid(unsafe_code)]

use nsqd::Options;

fn main() {
    let mut parsed = nsq_cli::flags::parse_or_exit::<Options>("nsqd");
    if parsed.flags.version {
        println!("{}", nsq_cli::version("nsqd"));
        return;
    }
    let prefix = parsed.flags.log_prefix.clone();
    if !parsed.flags.config.is_empty() {
        let path = parsed.flags.config.clone();
        if let Err(e) = parsed.load_config(&path) {
            nsq_cli::fatal(&prefix, &e);
        }
    }
    let opts = parsed.flags;
    let prefix = opts.log_prefix.clone();
    let set_level = nsq_cli::log::init(opts.log_level, &prefix, nsq_cli::log::Form::Tracing);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| nsq_cli::fatal(&prefix, &e.to_string()));
    rt.block_on(async move {
        let nsqd = match nsqd::Nsqd::new(opts).await {
            Ok(n) => n,
            Err(e) => nsq_cli::fatal(&prefix, &format!("failed to instantiate nsqd - {e}")),
        };
        *nsqd.inner().log_level_hook.lock() = Some(set_level);
        let shutdown = nsq_cli::shutdown_on_signals();
        if let Err(e) = nsqd.run(shutdown).await {
            nsq_cli::fatal(&prefix, &e.to_string());
        }
    });
}

//! `nsq_pubsub`: a pubsub-style HTTP streaming interface to NSQ topics, as
//! NSQ 0.x shipped it for simplehttp pubsub users moving to NSQ.
//!
//! `GET /sub?topic=T[&channel=C]` streams every message of the topic (or of
//! channel `C`, shared with its other subscribers), one body per line;
//! `GET /stats` counts the subscribers; `GET /ping` answers `OK`.
//!
//! This file wires flags, logging and signals; [`server`] serves HTTP,
//! [`subscriber`] runs one subscriber's consumer and stream, [`wire`]
//! decides FIN or REQ from what reached the socket, [`stats`] counts.

#![forbid(unsafe_code)]
#![deny(rust_2018_idioms, unused_must_use)]

mod server;
mod stats;
mod subscriber;
mod wire;

const PREFIX: &str = "[nsq_pubsub] ";

nsq_cli::flags! {
    /// NSQ's nsq_pubsub flags, names and defaults.
    struct Flags {
        /// print the version and exit
        version: bool = false;
        /// <addr>:<port> to listen on for HTTP clients
        http_address: String = "0.0.0.0:8080";
        /// messages allowed in flight per subscriber
        max_in_flight: i64 = 100;
        /// nsqd TCP address (may be given several times)
        nsqd_tcp_address: Vec<String> = "";
        /// nsqlookupd HTTP address (may be given several times)
        lookupd_http_address: Vec<String> = "";
        /// nsq-rs: secret for the HTTP API of nsqlookupd started with --http-auth-required (sent as Authorization: Bearer)
        http_secret: String = "";
    }
}

/// The checks NSQ's apps make, with their texts.
fn options(cli: Flags) -> Result<server::Options, String> {
    if cli.max_in_flight <= 0 {
        return Err("--max-in-flight must be > 0".into());
    }
    if cli.nsqd_tcp_address.is_empty() && cli.lookupd_http_address.is_empty() {
        return Err("--nsqd-tcp-address or --lookupd-http-address required".into());
    }
    if !cli.nsqd_tcp_address.is_empty() && !cli.lookupd_http_address.is_empty() {
        return Err("use --nsqd-tcp-address or --lookupd-http-address not both".into());
    }
    Ok(server::Options {
        nsqd_tcp_addresses: cli.nsqd_tcp_address,
        lookupd_http_addresses: cli.lookupd_http_address,
        max_in_flight: cli.max_in_flight,
        http_secret: cli.http_secret,
    })
}

fn main() {
    let cli = nsq_cli::flags::parse_or_exit::<Flags>("nsq_pubsub").flags;
    if cli.version {
        println!("{}", nsq_cli::app_version("nsq_pubsub"));
        return;
    }
    let http_address = cli.http_address.clone();
    let opts = options(cli).unwrap_or_else(|e| nsq_cli::fatal(PREFIX, &e));
    // No runtime log-level changes: the setter is not kept.
    let _ = nsq_cli::log::init(nsq_cli::LogLevel::Info, PREFIX, nsq_cli::log::Form::Tracing);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| nsq_cli::fatal(PREFIX, &e.to_string()));
    rt.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(&http_address).await {
            Ok(l) => l,
            Err(e) => nsq_cli::fatal(PREFIX, &format!("listen ({http_address}) failed - {e}")),
        };
        let local = listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or(http_address);
        tracing::info!("listening on {local}");
        let shutdown = nsq_cli::shutdown_on_signals();
        server::run(listener, opts, shutdown).await;
        tracing::info!("exiting");
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli(args: &[&str]) -> Flags {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        nsq_cli::flags::parse::<Flags>("nsq_pubsub", &args)
            .unwrap()
            .flags
    }

    #[test]
    fn defaults_are_nsq_pubsubs() {
        let c = cli(&["-nsqd-tcp-address=127.0.0.1:4150"]);
        assert_eq!(
            (c.http_address.as_str(), c.max_in_flight, c.version),
            ("0.0.0.0:8080", 100, false)
        );
        let o = options(c).unwrap();
        assert_eq!(o.nsqd_tcp_addresses, ["127.0.0.1:4150"]);
    }

    #[test]
    fn repeatable_addresses_and_nsq_error_texts() {
        let c = cli(&[
            "--lookupd-http-address=a:4161",
            "--lookupd-http-address",
            "b:4161",
        ]);
        assert_eq!(
            options(c).unwrap().lookupd_http_addresses,
            ["a:4161", "b:4161"]
        );
        assert_eq!(
            options(cli(&[])).unwrap_err(),
            "--nsqd-tcp-address or --lookupd-http-address required"
        );
        let both = cli(&["--lookupd-http-address=a:4161", "--nsqd-tcp-address=b:4150"]);
        assert_eq!(
            options(both).unwrap_err(),
            "use --nsqd-tcp-address or --lookupd-http-address not both"
        );
        let zero = cli(&["--nsqd-tcp-address=b:4150", "--max-in-flight=0"]);
        assert_eq!(options(zero).unwrap_err(), "--max-in-flight must be > 0");
    }
}

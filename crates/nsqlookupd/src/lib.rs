//! nsqlookupd: the NSQ discovery daemon, wire-compatible with nsqlookupd 1.3.0.
//!
//! nsqd nodes connect over TCP (the "V1" protocol, [`tcp`]) and register the
//! topics and channels they have; consumers and tools ask over HTTP (`http`)
//! where a topic lives. All state is the in-memory [`registration`] database;
//! nothing is persisted and lookupd instances never talk to each other.
//!
//! Module map, following the data:
//! * [`registration`] — the registry itself: a plain struct, time passed in.
//! * [`tcp`] — [`tcp::v1`] the protocol logic; `tcp::listener` the listener
//!   and connection shell.
//! * `http` — the HTTP API's routes on `nsq_http`'s server; `http::api`
//!   the endpoint logic.
//! * `context` — what the TCP and HTTP sides share while serving.
//! * `daemon` — options, listeners, start and shutdown: `NsqLookupd`.
//!
//! The default `server` feature is the daemon (tokio, the HTTP server,
//! TLS). Without it the crate is [`registration`] and [`tcp::v1`] alone,
//! which need neither, so the fuzz targets that drive them build in a
//! fraction of the time.

#![forbid(unsafe_code)]
#![deny(rust_2018_idioms, unused_must_use)]

#[cfg(feature = "server")]
mod context;
#[cfg(feature = "server")]
mod daemon;
#[cfg(feature = "server")]
mod http;
pub mod registration;
pub mod tcp;

#[cfg(feature = "server")]
pub use daemon::{run, Error, NsqLookupd, Options};

/// The NSQ version this implementation answers as (`/info`, IDENTIFY).
pub const VERSION: &str = "1.3.0";

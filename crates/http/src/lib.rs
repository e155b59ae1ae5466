//! nsq-rs's one HTTP layer.
//!
//! * [`client`]: the HTTP client every daemon and app uses for its
//!   outgoing requests (nsqd → auth servers and lookupds, nsqadmin →
//!   lookupds, nsqds, graphite and its notification endpoint, the client
//!   library and the apps → lookupds and nsqds, nsq_to_http → anything),
//!   behaving as Go's `http.Client` does for NSQ's tools: NSQ's transport
//!   settings, redirects, Go-worded errors, `https://` with Go's choice of
//!   CA certificates, header names in Go's canonical case.
//! * [`router`] and `server` (feature `server`): the daemons' side —
//!   httprouter's routing rules as a pure table, one serving path for HTTP
//!   and HTTPS on hyper with Go's header case, NSQ's response conventions,
//!   and the daemons' axum routers behind them; [`reply`] (feature
//!   `server`): NSQ's response conventions, which the server, the guard and
//!   the daemons' handlers answer in.
//! * [`auth`]: the auth server (`--auth-http-address`), asked by nsqd's TCP
//!   `AUTH` and by [`guard`] (feature `server`), the opt-in access control
//!   of the daemons' HTTP APIs.
//! * [`tls`]: the CA certificates Go trusts by default.
//! * [`url`]: URL and header text as Go's `net/url` and `net/http` write it.
//!
//! Never: NSQ's endpoint logic (the daemons own it) or JSON shapes
//! (`nsq_protocol` owns them).

#![forbid(unsafe_code)]

pub mod auth;
pub mod client;
#[cfg(feature = "server")]
pub mod guard;
#[cfg(feature = "server")]
pub mod reply;
pub mod router;
#[cfg(feature = "server")]
pub mod server;
pub mod stream;
pub mod tls;
pub mod url;

pub use client::{Client, ClientOptions, Error, Response};

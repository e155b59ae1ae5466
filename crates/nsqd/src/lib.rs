//! nsqd: receives, queues and delivers messages.
//!
//! Two layers. [`core`] is every rule about where a message goes and when —
//! topics, channels, their memory queues and overflow, delivery with RDY
//! credit, in-flight timeouts, deferrals, message ids, E2E latency — as
//! plain state machines with time and seeds passed in, returning what to
//! do. [`server`] does it: the TCP V2 and HTTP servers, the topics and
//! channels behind their locks with their disk queues and timers, the
//! lookupd loop, metadata, stats and shutdown.
//!
//! The path of one message, PUB to FIN: `server::tcp::reader` decodes it,
//! `server::tcp::publish` calls `server::topic::Topic::publish`, which runs
//! `core::topic::Topic::publish` (id, timestamp, fan-out or backlog) and
//! hands a copy to each `server::channel::Channel`, which runs
//! `core::channel::Channel::put` (memory or backend, then delivery to a
//! client with credit: the frame is encoded, the message is in flight). The
//! frames go to the client's outbox, `server::tcp::writer` writes them;
//! the client's FIN comes back through the reader to
//! `core::channel::Channel::finish`.

#![forbid(unsafe_code)]

// Public for the benchmarks (`benches/benches/channel.rs`).
pub mod core;
mod options;
mod server;

pub use nsq_protocol::VERSION;
pub use options::{Options, Percentiles, TlsMinVersion, TlsRequired};
pub use server::nsqd::{Error, NsqdInner};
pub use server::Nsqd;

/// What the benchmarks (`benches/`) drive directly.
#[doc(hidden)]
pub mod bench {
    pub use crate::server::client::Client;
    pub use crate::server::outbox::{Control, Outbox};
}

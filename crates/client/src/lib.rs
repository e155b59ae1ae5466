//! nsq-client: a Rust NSQ client with go-nsq's behaviour.
//!
//! * [`Producer`] publishes (PUB, MPUB, DPUB) to one nsqd, pipelining
//!   concurrent requests on one connection.
//! * [`Consumer`] subscribes to a topic's channel on any number of nsqds,
//!   found directly or through nsqlookupd, and runs a [`Handler`] per
//!   message with go-nsq's RDY management, backoff and requeue rules.
//!
//! The path of a message through the crate: [`consumer`]'s connection task
//! reads the frame → the consumer core counts it in [`rdy::RdyState`] →
//! a handler task gets a [`Message`] → its answer goes back through the core
//! (FIN/REQ, RDY bookkeeping) to the connection. All wire encoding is
//! `nsq_protocol`'s; this crate owns sockets, tasks and the client rules.
//!
//! TLS (`tls_v1`, rustls) and snappy or deflate compression are negotiated
//! in IDENTIFY from [`Config`]; the codecs are `nsq_protocol::compress`, the
//! same ones nsqd uses.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use nsq_client::{handler_fn, Config, Consumer, Message, Producer};
//!
//! let producer = Producer::new("127.0.0.1:4150", Config::default())?;
//! producer.publish("events", b"hello").await?;
//!
//! let consumer = Consumer::new("events", "archive", Config { max_in_flight: 10, ..Config::default() })?;
//! consumer.add_handler(handler_fn(|m: Message| async move {
//!     println!("{:?}", m.body());
//!     Ok(())
//! }))?;
//! consumer.connect_to_nsqd_lookupd("127.0.0.1:4161").await?;
//! // ...
//! consumer.stop().await;
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]
#![deny(rust_2018_idioms, unused_must_use)]

pub mod config;
mod conn;
pub mod consumer;
pub mod error;
pub mod lookup;
pub mod producer;
pub mod rdy;
mod transport;

pub use config::{Config, ConfigError, USER_AGENT};
/// The handler contract; it lives with the consumer, which alone delivers
/// messages, and keeps its public path here.
pub use consumer::message;
pub use consumer::message::{handler_fn, Handler, HandlerError, HandlerFn, HandlerResult, Message};
pub use consumer::{Consumer, ConsumerStats};
pub use error::{ConnectError, ConsumerError, LookupError, PublishError};
pub use nsq_protocol::MessageId;
pub use producer::Producer;

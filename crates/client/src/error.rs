//! Error types, one enum per operation: connecting to nsqd, publishing,
//! running a consumer, querying nsqlookupd. Errors nsqd reports in an error
//! frame keep its text verbatim (`E_BAD_TOPIC PUB topic name "a b" is not valid`).

use std::time::Duration;

pub use crate::config::ConfigError;

/// Opening, IDENTIFYing (and AUTHing / SUBscribing) one nsqd connection.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("dial {addr}: {source}")]
    Dial {
        addr: String,
        source: std::io::Error,
    },
    #[error("dial {addr}: timed out after {timeout:?}")]
    DialTimeout { addr: String, timeout: Duration },
    #[error("connection I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("timed out waiting for nsqd")]
    Timeout,
    #[error("nsqd closed the connection")]
    Closed,
    #[error("bad frame from nsqd: {0}")]
    Frame(String),
    /// nsqd answered IDENTIFY with an error frame or unreadable JSON.
    #[error("IDENTIFY failed: {0}")]
    Identify(String),
    /// nsqd negotiated something this client cannot do (e.g. snappy and deflate at once).
    #[error("nsqd negotiated unsupported feature {0}")]
    Unsupported(&'static str),
    /// The TLS upgrade failed (configuration, handshake, certificate).
    #[error("TLS: {0}")]
    Tls(String),
    #[error("nsqd requires AUTH and no auth_secret is configured")]
    AuthRequired,
    #[error("AUTH failed: {0}")]
    Auth(String),
    /// nsqd's error frame for SUB, verbatim.
    #[error("SUB failed: {0}")]
    Subscribe(String),
    #[error("unexpected response from nsqd: {0}")]
    Unexpected(String),
}

/// A PUB, MPUB or DPUB that did not get `OK`.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// nsqd's error frame, verbatim (e.g. `E_BAD_TOPIC ...`, `E_BAD_MESSAGE ...`).
    #[error("nsqd error: {0}")]
    Protocol(String),
    #[error("connect: {0}")]
    Connect(#[from] ConnectError),
    /// The connection broke before the answer arrived; the next publish reconnects.
    #[error("not connected: {0}")]
    Disconnected(String),
    #[error("producer stopped")]
    Stopped,
}

impl PublishError {
    /// The `E_*` code of an nsqd error frame, if this is one.
    pub fn code(&self) -> Option<&str> {
        match self {
            PublishError::Protocol(s) => s.split(' ').next(),
            _ => None,
        }
    }
}

/// Setting up or driving a [`crate::Consumer`].
#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("invalid topic name {0:?}")]
    InvalidTopic(String),
    #[error("invalid channel name {0:?}")]
    InvalidChannel(String),
    #[error("a Consumer must be created inside a tokio runtime")]
    NoRuntime,
    #[error("no handler added")]
    NoHandler,
    #[error("handlers must be added before connecting")]
    AlreadyConnecting,
    #[error("consumer stopped")]
    Stopped,
    #[error("already connected to {0}")]
    AlreadyConnected(String),
    #[error("not connected to {0}")]
    NotConnected(String),
    #[error("nsqd {addr}: {source}")]
    Connect { addr: String, source: ConnectError },
    #[error(transparent)]
    Lookup(#[from] LookupError),
}

/// One `/lookup` query.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    #[error("bad nsqlookupd address {0:?}")]
    BadAddress(String),
    #[error("nsqlookupd {addr}: {source}")]
    Http {
        addr: String,
        source: nsq_http::Error,
    },
    /// The TLS settings for `https://` lookupds cannot be used.
    #[error("nsqlookupd TLS: {0}")]
    Tls(String),
}

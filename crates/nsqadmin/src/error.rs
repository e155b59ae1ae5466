//! Why nsqadmin could not start or stopped (the binary prints these as FATAL).

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Invalid or inconsistent options (nsqadmin's own wording).
    #[error("{0}")]
    Config(String),
    #[error("listen ({addr}) failed - {}", nsq_protocol::gofmt::listen_error(.addr, .source))]
    Listen {
        addr: String,
        source: std::io::Error,
    },
}

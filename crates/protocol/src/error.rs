//! Protocol errors as nsqd reports them: an error frame `"<CODE> <description>"`,
//! fatal (the connection is closed after it) or not.

/// An error to send to a client as a type-1 frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code} {}", String::from_utf8_lossy(desc))]
pub struct ProtocolError {
    pub code: &'static str,
    /// Bytes, not a `String`: nsqd echoes a client's raw bytes (an unknown
    /// command name, say) back verbatim, valid UTF-8 or not.
    pub desc: Vec<u8>,
    /// Fatal errors close the connection after the frame is sent. Only
    /// E_FIN_FAILED, E_REQ_FAILED and E_TOUCH_FAILED are not.
    pub fatal: bool,
}

impl ProtocolError {
    pub fn fatal(code: &'static str, desc: impl Into<Vec<u8>>) -> ProtocolError {
        ProtocolError {
            code,
            desc: desc.into(),
            fatal: true,
        }
    }

    pub fn non_fatal(code: &'static str, desc: impl Into<Vec<u8>>) -> ProtocolError {
        ProtocolError {
            code,
            desc: desc.into(),
            fatal: false,
        }
    }

    /// `E_INVALID <desc>`, the most common fatal error.
    pub fn invalid(desc: impl Into<Vec<u8>>) -> ProtocolError {
        ProtocolError::fatal(E_INVALID, desc)
    }

    /// The error frame's payload.
    pub fn payload(&self) -> Vec<u8> {
        let mut p = self.code.as_bytes().to_vec();
        if !self.desc.is_empty() {
            p.push(b' ');
            p.extend_from_slice(&self.desc);
        }
        p
    }

    /// The payload as text, for logs and tests.
    pub fn payload_lossy(&self) -> String {
        String::from_utf8_lossy(&self.payload()).into_owned()
    }

    /// The code without its `E_` prefix, as the HTTP API reports MPUB errors.
    pub fn http_code(&self) -> &'static str {
        self.code.strip_prefix("E_").unwrap_or(self.code)
    }
}

pub const E_BAD_PROTOCOL: &str = "E_BAD_PROTOCOL";
pub const E_INVALID: &str = "E_INVALID";
pub const E_BAD_BODY: &str = "E_BAD_BODY";
pub const E_BAD_TOPIC: &str = "E_BAD_TOPIC";
pub const E_BAD_CHANNEL: &str = "E_BAD_CHANNEL";
pub const E_BAD_MESSAGE: &str = "E_BAD_MESSAGE";
pub const E_PUB_FAILED: &str = "E_PUB_FAILED";
pub const E_MPUB_FAILED: &str = "E_MPUB_FAILED";
pub const E_DPUB_FAILED: &str = "E_DPUB_FAILED";
pub const E_FIN_FAILED: &str = "E_FIN_FAILED";
pub const E_REQ_FAILED: &str = "E_REQ_FAILED";
pub const E_TOUCH_FAILED: &str = "E_TOUCH_FAILED";
pub const E_SUB_FAILED: &str = "E_SUB_FAILED";
pub const E_IDENTIFY_FAILED: &str = "E_IDENTIFY_FAILED";
pub const E_AUTH_DISABLED: &str = "E_AUTH_DISABLED";
pub const E_AUTH_FAILED: &str = "E_AUTH_FAILED";
pub const E_AUTH_FIRST: &str = "E_AUTH_FIRST";
pub const E_UNAUTHORIZED: &str = "E_UNAUTHORIZED";
pub const E_AUTH_ERROR: &str = "E_AUTH_ERROR";

/// Go's `%q`, as the errors quote names ([`crate::gofmt::quote`]).
pub use crate::gofmt::{quote as go_quote, quote_bytes as go_quote_bytes};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads() {
        assert_eq!(
            ProtocolError::invalid("invalid command ").payload(),
            b"E_INVALID invalid command "
        );
        assert_eq!(
            ProtocolError::fatal(E_BAD_PROTOCOL, "").payload(),
            b"E_BAD_PROTOCOL"
        );
        let mut raw = b"invalid command ".to_vec();
        raw.extend_from_slice(&[1, 0xff, b'X']);
        assert_eq!(
            &ProtocolError::invalid(raw).payload()[10..],
            b"invalid command \x01\xffX"
        );
        assert_eq!(
            ProtocolError::fatal(E_BAD_BODY, "x").http_code(),
            "BAD_BODY"
        );
    }
}

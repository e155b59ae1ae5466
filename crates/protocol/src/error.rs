//! Protocol errors as nsqd reports them: an error frame `"<CODE> <description>"`,
//! fatal (the connection is closed after it) or not.

/// An error to send to a client as a type-1 frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code} {desc}")]
pub struct ProtocolError {
    pub code: &'static str,
    pub desc: String,
    /// Fatal errors close the connection after the frame is sent. Only
    /// E_FIN_FAILED, E_REQ_FAILED and E_TOUCH_FAILED are not.
    pub fatal: bool,
}

impl ProtocolError {
    pub fn fatal(code: &'static str, desc: impl Into<String>) -> ProtocolError {
        ProtocolError { code, desc: desc.into(), fatal: true }
    }

    pub fn non_fatal(code: &'static str, desc: impl Into<String>) -> ProtocolError {
        ProtocolError { code, desc: desc.into(), fatal: false }
    }

    /// `E_INVALID <desc>`, the most common fatal error.
    pub fn invalid(desc: impl Into<String>) -> ProtocolError {
        ProtocolError::fatal(E_INVALID, desc)
    }

    /// The error frame's payload.
    pub fn payload(&self) -> String {
        if self.desc.is_empty() {
            self.code.to_string()
        } else {
            format!("{} {}", self.code, self.desc)
        }
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

/// Go's `%q` for the strings we quote in errors: double quotes, with
/// backslash escapes for quotes, backslashes and control bytes.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads() {
        assert_eq!(ProtocolError::invalid("invalid command ").payload(), "E_INVALID invalid command ");
        assert_eq!(ProtocolError::fatal(E_BAD_PROTOCOL, "").payload(), "E_BAD_PROTOCOL");
        assert_eq!(ProtocolError::fatal(E_BAD_BODY, "x").http_code(), "BAD_BODY");
    }

    #[test]
    fn quoting() {
        assert_eq!(go_quote("bad!topic"), "\"bad!topic\"");
        assert_eq!(go_quote("a\"b\n"), "\"a\\\"b\\n\"");
    }
}

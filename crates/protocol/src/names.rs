//! Topic and channel name rules, shared by nsqd, nsqlookupd and nsqadmin.
//!
//! A name is 1..=64 bytes of `[.a-zA-Z0-9_-]`, optionally followed by the
//! literal suffix `#ephemeral` (which counts toward the 64). Ephemeral topics
//! and channels never touch disk and are deleted when no longer used.

/// Longest valid name in bytes, `#ephemeral` suffix included.
pub const MAX_NAME_LEN: usize = 64;

/// Suffix that marks a topic or channel as ephemeral.
pub const EPHEMERAL_SUFFIX: &str = "#ephemeral";

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-'
}

/// The one rule topics and channels share (NSQ checks both with the same regex).
pub fn is_valid_name(name: &str) -> bool {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return false;
    }
    let base = name.strip_suffix(EPHEMERAL_SUFFIX).unwrap_or(name);
    !base.is_empty() && base.bytes().all(is_name_byte)
}

pub fn is_valid_topic_name(name: &str) -> bool {
    is_valid_name(name)
}

pub fn is_valid_channel_name(name: &str) -> bool {
    is_valid_name(name)
}

/// Whether a (valid) name is ephemeral.
pub fn is_ephemeral(name: &str) -> bool {
    name.ends_with(EPHEMERAL_SUFFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_names() {
        for n in [
            "a",
            "my-topic.v2",
            "x_y#ephemeral",
            "A.b-C_9",
            &"a".repeat(64),
        ] {
            assert!(is_valid_name(n), "{n} should be valid");
        }
        let long_eph = format!("{}#ephemeral", "a".repeat(54));
        assert!(is_valid_name(&long_eph));
    }

    #[test]
    fn invalid_names() {
        let too_long_eph = format!("{}#ephemeral", "a".repeat(55));
        for n in [
            "",
            "a b",
            "a#b",
            "#ephemeral",
            &"a".repeat(65),
            "a/b",
            "a:b",
            "bad!topic",
            "é",
            &too_long_eph,
            "a#ephemeral#ephemeral",
        ] {
            assert!(!is_valid_name(n), "{n:?} should be invalid");
        }
    }

    #[test]
    fn ephemeral() {
        assert!(is_ephemeral("t#ephemeral"));
        assert!(!is_ephemeral("t"));
    }
}

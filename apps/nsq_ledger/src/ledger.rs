//! The ledger file: one line per event, appended with a single `write(2)`
//! each, so a line is whole on disk the moment the event happened — even if
//! the process is SIGKILLed right after (a host crash in the cluster test).
//!
//! Line formats (space-separated, times in Unix nanoseconds):
//!
//! ```text
//! P   <id> <sent_ns>                                  producer: about to send it
//! OK  <id> <sent_ns> <ok_ns>                          producer: nsqd answered OK
//! ERR <id> <sent_ns> <error text>                     producer: no OK (may still be delivered)
//! R   <channel> <id> <recv_ns> <attempts> <nsqd>      consumer: handler got the message
//! F   <channel> <id> <fin_ns>                         consumer: handler done, FIN sent
//! ```
//!
//! A message body is `<id> <sent_ns>`; ids are `<prefix>.<seq>` and unique
//! per producer incarnation. The `P` line comes first, so a message sent by
//! a producer killed before the answer is still known (and, if delivered,
//! counted as delivered without `OK`, which at-least-once allows). The reader of these lines is
//! `tests/src/ledger.rs`; `tests/python/ledger_consumer.py` writes the same
//! consumer lines from pynsq.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// An append-only ledger shared by every task of the process.
pub struct Ledger {
    file: File,
}

impl Ledger {
    pub fn open(path: &Path) -> std::io::Result<Ledger> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Ledger { file })
    }

    /// Appends `line` and a newline in one write (O_APPEND keeps
    /// concurrent writers' lines whole).
    pub fn write(&self, line: &str) -> std::io::Result<()> {
        let mut buf = Vec::with_capacity(line.len() + 1);
        buf.extend_from_slice(line.as_bytes());
        buf.push(b'\n');
        (&self.file).write_all(&buf)
    }
}

/// Now, Unix nanoseconds.
pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// The id a body starts with (the whole body if it has no space).
pub fn body_id(body: &[u8]) -> String {
    let end = body.iter().position(|&b| b == b' ').unwrap_or(body.len());
    String::from_utf8_lossy(&body[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_is_the_first_word() {
        assert_eq!(body_id(b"n1.0.42 1700000000000000000"), "n1.0.42");
        assert_eq!(body_id(b"bare"), "bare");
        assert_eq!(body_id(b""), "");
    }

    #[test]
    fn lines_are_appended_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger");
        Ledger::open(&path).unwrap().write("OK a 1 2").unwrap();
        Ledger::open(&path).unwrap().write("OK b 3 4").unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "OK a 1 2\nOK b 3 4\n"
        );
    }
}

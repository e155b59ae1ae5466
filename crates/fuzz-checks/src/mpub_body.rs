//! `nsq_protocol::command::parse_mpub_body` with nsqd's default limits.
//! Never panics; on success the count matches, the bodies are non-empty,
//! within the message limit, and their framing fits inside the input.

use bytes::Bytes;
use nsq_protocol::command::{parse_mpub_body, Limits};

pub fn check(data: &[u8]) {
    let limits = Limits::default();
    if let Ok(bodies) = parse_mpub_body(Bytes::copy_from_slice(data), &limits) {
        assert!(!bodies.is_empty());
        let count = match data {
            [a, b, c, d, ..] => i32::from_be_bytes([*a, *b, *c, *d]),
            _ => panic!("accepted a body without its 4-byte count"),
        };
        assert_eq!(count as usize, bodies.len());
        let mut framed = 4usize;
        for b in &bodies {
            assert!(!b.is_empty());
            assert!(b.len() as i64 <= limits.max_msg_size);
            framed += 4 + b.len();
        }
        assert!(framed <= data.len(), "bodies claim more bytes than given");
    }
}

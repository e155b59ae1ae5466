//! HTTP `/mpub?binary=true`: `parse_mpub_body` under varied nsqd limits
//! (`--max-msg-size`, `--max-body-size`), plus the HTTP error code mapping it
//! feeds. (Text mode, the default, is `http_mpub_text`.) Bytes 0..2 are
//! `--max-msg-size - 1`, bytes 2..4 `--max-body-size - 5` (little-endian);
//! the rest is the body. Never panics; on `Ok` as `mpub_body`, and the count
//! is at most `(max_body_size - 4) / 5`; on `Err` the HTTP code is non-empty
//! and has no `E_` prefix.

use bytes::Bytes;
use nsq_protocol::command::{parse_mpub_body, Limits};

pub fn check(data: &[u8]) {
    if data.len() < 4 {
        return;
    }
    // Limits as an operator could set them (--max-msg-size, --max-body-size):
    // positive and small enough to be exercised by fuzz-sized inputs.
    let msg = u16::from_le_bytes([data[0], data[1]]) as i64 + 1;
    let body = u16::from_le_bytes([data[2], data[3]]) as i64 + 5;
    let limits = Limits {
        max_msg_size: msg,
        max_body_size: body,
        ..Limits::default()
    };
    let input = &data[4..];
    match parse_mpub_body(Bytes::copy_from_slice(input), &limits) {
        Ok(bodies) => {
            assert!(!bodies.is_empty());
            assert!(bodies.len() as i64 <= (limits.max_body_size - 4) / 5);
            let total: usize = bodies.iter().map(|b| 4 + b.len()).sum::<usize>() + 4;
            assert!(total <= input.len());
            for b in &bodies {
                assert!(!b.is_empty() && b.len() as i64 <= limits.max_msg_size);
            }
        }
        Err(e) => {
            // What the HTTP handler returns as the 413 body.
            let code = e.http_code();
            assert!(
                !code.is_empty() && !code.starts_with("E_"),
                "bad http code {code:?}"
            );
        }
    }
}

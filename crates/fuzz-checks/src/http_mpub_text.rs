//! HTTP `/mpub` in text mode (the default): `nsq_protocol::split_mpub_text`,
//! the function nsqd's `mpublish` calls, under fuzzed limits. Bytes 0..2 are
//! `--max-msg-size` (0..=65535), bytes 2..4 `--max-body-size` (0..=65535); the
//! rest is the request body (it may exceed the body limit: the splitter must
//! then answer `BODY_TOO_BIG` unless an earlier line is `MSG_TOO_BIG`).
//!
//! Checked beyond "no panic", against an independent model of nsqd 1.3.0's
//! `doMPUB` loop (`bufio.Reader.ReadBytes('\n')` over
//! `io.LimitReader(body, MaxBodySize+1)`):
//! * the result (messages or error) equals the model's;
//! * on `Ok`: the body fits the limit, every message is non-empty, has no `\n`,
//!   is ≤ `max_msg_size`, is a zero-copy slice of the input at increasing
//!   offsets, and the messages are exactly the non-empty `\n`-separated pieces
//!   of the body; raising the body limit changes nothing;
//! * on `Err`: the HTTP code is `MSG_TOO_BIG` or `BODY_TOO_BIG`, and
//!   `BODY_TOO_BIG` only when the body is over the limit.

use bytes::Bytes;
use nsq_protocol::mpub_text::{split_mpub_text, MpubTextError};

/// nsqd's loop, written the Go way: a limited reader handing out
/// `ReadBytes('\n')` blocks until EOF.
fn model(body: &[u8], max_msg: i64, max_body: i64) -> Result<Vec<Vec<u8>>, MpubTextError> {
    let read_max = max_body + 1; // limits here are small: no overflow
    let mut rest = &body[..body.len().min(read_max as usize)];
    let mut total = 0i64;
    let mut msgs = Vec::new();
    loop {
        let (mut block, eof) = match rest.iter().position(|&b| b == b'\n') {
            Some(i) => (&rest[..=i], false),
            None => (rest, true),
        };
        rest = &rest[block.len()..];
        total += block.len() as i64;
        if total == read_max {
            return Err(MpubTextError::BodyTooBig);
        }
        if block.last() == Some(&b'\n') {
            block = &block[..block.len() - 1];
        }
        if !block.is_empty() {
            if block.len() as i64 > max_msg {
                return Err(MpubTextError::MsgTooBig);
            }
            msgs.push(block.to_vec());
        }
        if eof {
            return Ok(msgs);
        }
    }
}

pub fn check(data: &[u8]) {
    if data.len() < 4 {
        return;
    }
    let max_msg = u16::from_le_bytes([data[0], data[1]]) as i64;
    let max_body = u16::from_le_bytes([data[2], data[3]]) as i64;
    let input = Bytes::copy_from_slice(&data[4..]);
    let got = split_mpub_text(input.clone(), max_msg, max_body);

    let as_vecs = got
        .as_ref()
        .map(|v| v.iter().map(|b| b.to_vec()).collect::<Vec<_>>())
        .map_err(|e| *e);
    assert_eq!(
        as_vecs,
        model(&input, max_msg, max_body),
        "differs from nsqd's doMPUB loop"
    );

    match got {
        Ok(msgs) => {
            assert!(
                input.len() as i64 <= max_body,
                "accepted a body over the limit"
            );
            let base = input.as_ptr() as usize;
            let mut last_end = 0usize;
            for m in &msgs {
                assert!(!m.is_empty() && !m.contains(&b'\n') && m.len() as i64 <= max_msg);
                let off = m.as_ptr() as usize - base;
                assert!(
                    off >= last_end && off + m.len() <= input.len(),
                    "not an in-order slice of the body"
                );
                last_end = off + m.len();
            }
            let pieces: Vec<&[u8]> = input
                .split(|&b| b == b'\n')
                .filter(|p| !p.is_empty())
                .collect();
            assert_eq!(msgs.len(), pieces.len());
            assert!(msgs.iter().zip(&pieces).all(|(m, p)| &m[..] == *p));
            // a larger body limit accepts the same body the same way
            let again = split_mpub_text(input.clone(), max_msg, i64::MAX)
                .expect("still OK with no body limit");
            assert_eq!(again, msgs);
        }
        Err(e) => {
            let code = e.http_code();
            assert!(
                code == "MSG_TOO_BIG" || code == "BODY_TOO_BIG",
                "bad http code {code:?}"
            );
            if e == MpubTextError::BodyTooBig {
                assert!(
                    input.len() as i64 > max_body,
                    "BODY_TOO_BIG for a body within the limit"
                );
            }
        }
    }
}

//! HTTP `/mpub` in text mode (the default, `binary` absent or false): the
//! request body holds one message per `\n`-terminated line.
//!
//! Sans-IO: [`split_mpub_text`] takes the body already read and returns the
//! message bodies or the HTTP error code, so the splitting can be unit-tested
//! and fuzzed (`fuzz/fuzz_targets/http_mpub_text.rs`) without a server.
//!
//! Semantics are nsqd 1.3.0's `doMPUB` (`nsqd/http.go`), which reads the body
//! with `bufio.Reader.ReadBytes('\n')` through an
//! `io.LimitReader(body, MaxBodySize + 1)`:
//!
//! * a line is everything up to (not including) `\n`; a final line without
//!   `\n` is a message too, so a trailing `\n` adds nothing;
//! * empty lines (`\n\n`, a leading `\n`) are silently skipped (nsqd's
//!   "pre 0.2.22" behaviour), so an empty body or one of only `\n`s yields no
//!   messages (and the handler answers `OK`);
//! * nothing else is stripped: `\r` before `\n`, spaces and any other byte
//!   (including invalid UTF-8 and NUL) stay in the message;
//! * lines are checked in order and the first error wins: a line longer than
//!   `max_msg_size` → `MSG_TOO_BIG` (413); reaching byte `max_body_size + 1`
//!   of the body → `BODY_TOO_BIG` (413). A body of exactly `max_body_size`
//!   bytes is accepted. nsqd's HTTP handler already refuses bodies over
//!   `max_body_size` before splitting (as nsqd does from `Content-Length`),
//!   so the second check only matters to callers that pass a longer body.
//!   (One corner differs from nsqd: a *chunked* body over the limit whose
//!   early line is too long gets `BODY_TOO_BIG` from nsq-rs, which reads the
//!   body first, and `MSG_TOO_BIG` from nsqd, which stops at that line.)
//!
//! Limits are nsqd's `--max-msg-size` and `--max-body-size`; any `i64` is
//! handled without overflow (`max_body_size` = `i64::MAX` means no body limit,
//! where nsqd's `MaxBodySize+1` would wrap).

use bytes::Bytes;

/// Why a text `/mpub` body was refused; [`MpubTextError::http_code`] is the
/// body of the 413 response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MpubTextError {
    /// A line is longer than `max_msg_size` (HTTP 413 `MSG_TOO_BIG`).
    MsgTooBig,
    /// The body is longer than `max_body_size` (HTTP 413 `BODY_TOO_BIG`).
    BodyTooBig,
}

impl MpubTextError {
    /// nsqd's HTTP error code for this error (all are status 413).
    pub fn http_code(self) -> &'static str {
        match self {
            MpubTextError::MsgTooBig => "MSG_TOO_BIG",
            MpubTextError::BodyTooBig => "BODY_TOO_BIG",
        }
    }
}

impl std::fmt::Display for MpubTextError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.http_code())
    }
}

impl std::error::Error for MpubTextError {}

/// Splits a text-mode `/mpub` body into message bodies (see the module docs
/// for the exact rules). The returned bodies are slices of `body` (no copy),
/// each non-empty, without `\n`, and at most `max_msg_size` bytes long.
pub fn split_mpub_text(
    body: Bytes,
    max_msg_size: i64,
    max_body_size: i64,
) -> Result<Vec<Bytes>, MpubTextError> {
    // nsqd reads through io.LimitReader(body, MaxBodySize+1) and fails when
    // the running total equals that limit; bytes past it are never seen.
    let read_max = max_body_size.saturating_add(1);
    if read_max <= 0 {
        // A LimitReader with nothing left returns EOF at once: one empty
        // block, total 0. (Only reachable with a negative --max-body-size.)
        return if read_max == 0 {
            Err(MpubTextError::BodyTooBig)
        } else {
            Ok(Vec::new())
        };
    }
    let visible = usize::try_from(read_max).map_or(body.len(), |m| body.len().min(m));
    let mut out = Vec::new();
    let mut total: i64 = 0;
    let mut start = 0;
    while start < visible {
        // One ReadBytes('\n') block: up to and including '\n', or to the end.
        let (end, block_end) = match body[start..visible].iter().position(|&b| b == b'\n') {
            Some(i) => (start + i, start + i + 1),
            None => (visible, visible),
        };
        total = total.saturating_add((block_end - start) as i64);
        if total == read_max {
            return Err(MpubTextError::BodyTooBig);
        }
        let line_len = end - start;
        if line_len > 0 {
            if line_len as i64 > max_msg_size {
                return Err(MpubTextError::MsgTooBig);
            }
            out.push(body.slice(start..end));
        }
        start = block_end;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSG: i64 = 1_048_576;
    const BODY: i64 = 5_242_880;

    fn split(body: &[u8]) -> Result<Vec<Vec<u8>>, MpubTextError> {
        split_with(body, MSG, BODY)
    }

    fn split_with(body: &[u8], msg: i64, max_body: i64) -> Result<Vec<Vec<u8>>, MpubTextError> {
        split_mpub_text(Bytes::copy_from_slice(body), msg, max_body)
            .map(|v| v.iter().map(|b| b.to_vec()).collect())
    }

    fn v(items: &[&[u8]]) -> Vec<Vec<u8>> {
        items.iter().map(|b| b.to_vec()).collect()
    }

    #[test]
    fn one_message_per_line_trailing_newline_adds_nothing() {
        assert_eq!(split(b"a\nbb\nccc").unwrap(), v(&[b"a", b"bb", b"ccc"]));
        assert_eq!(split(b"a\nbb\nccc\n").unwrap(), v(&[b"a", b"bb", b"ccc"]));
        assert_eq!(split(b"single").unwrap(), v(&[b"single"]));
    }

    #[test]
    fn empty_lines_and_empty_bodies_are_skipped() {
        assert_eq!(split(b"").unwrap(), v(&[]));
        assert_eq!(split(b"\n").unwrap(), v(&[]));
        assert_eq!(split(b"\n\n\n").unwrap(), v(&[]));
        assert_eq!(split(b"\na\n\n\nb\n\n").unwrap(), v(&[b"a", b"b"]));
    }

    #[test]
    fn nothing_but_newline_is_stripped() {
        assert_eq!(
            split(b"a\r\n \n\t\n\0\n\xff\xfe").unwrap(),
            v(&[b"a\r", b" ", b"\t", b"\0", b"\xff\xfe"])
        );
        assert_eq!(split(b"\r").unwrap(), v(&[b"\r"]));
    }

    #[test]
    fn bodies_are_slices_of_the_input() {
        let body = Bytes::from_static(b"hello\nworld\n");
        let out = split_mpub_text(body.clone(), MSG, BODY).unwrap();
        assert_eq!(out[0].as_ptr(), body.as_ptr());
        assert_eq!(out[1].as_ptr(), body[6..].as_ptr());
    }

    #[test]
    fn line_over_max_msg_size_is_msg_too_big() {
        assert_eq!(
            split_with(b"abcd\nabcde\n", 5, BODY).unwrap(),
            v(&[b"abcd", b"abcde"])
        );
        assert_eq!(
            split_with(b"abcd\nabcdef\n", 5, BODY),
            Err(MpubTextError::MsgTooBig)
        );
        // the newline does not count towards the message size
        assert_eq!(split_with(b"abcde\n", 5, BODY).unwrap(), v(&[b"abcde"]));
        // a last line without newline is checked too
        assert_eq!(
            split_with(b"a\nabcdef", 5, BODY),
            Err(MpubTextError::MsgTooBig)
        );
        // the whole body fails, even if earlier lines were fine
        assert_eq!(
            split_with(b"a\nb\nabcdefgh\nc", 5, BODY),
            Err(MpubTextError::MsgTooBig)
        );
        assert_eq!(MpubTextError::MsgTooBig.http_code(), "MSG_TOO_BIG");
    }

    #[test]
    fn body_of_exactly_max_body_size_is_accepted_one_more_byte_is_not() {
        assert_eq!(split_with(b"ab\ncd", 10, 5).unwrap(), v(&[b"ab", b"cd"]));
        assert_eq!(
            split_with(b"ab\ncd\n", 10, 5),
            Err(MpubTextError::BodyTooBig)
        );
        assert_eq!(
            split_with(b"ab\ncde", 10, 5),
            Err(MpubTextError::BodyTooBig)
        );
        assert_eq!(
            split_with(b"\n\n\n\n\n\n", 10, 5),
            Err(MpubTextError::BodyTooBig)
        );
        assert_eq!(MpubTextError::BodyTooBig.http_code(), "BODY_TOO_BIG");
    }

    #[test]
    fn first_error_in_body_order_wins_as_in_nsqd() {
        // an oversize line before the body limit is reached: MSG_TOO_BIG
        assert_eq!(
            split_with(b"abcdefg\nxxxxxxxxxx", 3, 10),
            Err(MpubTextError::MsgTooBig)
        );
        // the limit is reached inside an oversize line: BODY_TOO_BIG
        assert_eq!(
            split_with(b"ab\nabcdefghijklmnop", 3, 10),
            Err(MpubTextError::BodyTooBig)
        );
    }

    #[test]
    fn extreme_limits_do_not_overflow() {
        assert_eq!(
            split_with(b"a\nb", i64::MAX, i64::MAX).unwrap(),
            v(&[b"a", b"b"])
        );
        assert_eq!(split_with(b"a", 0, BODY), Err(MpubTextError::MsgTooBig));
        assert_eq!(split_with(b"\n", 0, BODY).unwrap(), v(&[]));
        assert_eq!(split_with(b"", 1, 0).unwrap(), v(&[]));
        assert_eq!(split_with(b"a", 1, 0), Err(MpubTextError::BodyTooBig));
        // negative body limits, as nsqd's LimitReader(MaxBodySize+1) has them
        assert_eq!(split_with(b"", 1, -1), Err(MpubTextError::BodyTooBig));
        assert_eq!(split_with(b"a", 1, -5).unwrap(), v(&[]));
    }
}

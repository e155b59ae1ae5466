//! Client → server commands: `<NAME>[ <param>]*\n[<be32 size><body>]`.
//!
//! [`decode`] is a streaming, sans-IO parser: hand it the connection's read
//! buffer and it splits off one complete command, or says it needs more
//! bytes. It applies every check NSQ makes, in NSQ's order, with NSQ's exact
//! error strings — including the ones nsqd makes *before* it reads a body
//! (an oversized PUB is refused as soon as its size word arrives). Checks that
//! depend on connection state (state machine, TLS policy, heartbeats) are
//! the server's; it passes them in as the `precheck` callback, which runs
//! right after the command line is split, exactly where nsqd runs them.

use bytes::{Buf, Bytes, BytesMut};

use crate::error::*;
use crate::message::MessageId;
use crate::names::{is_valid_channel_name, is_valid_topic_name};

/// Longest command line nsqd reads, `\n` included.
pub const MAX_LINE_LEN: usize = 16 * 1024;

/// Server limits the parser enforces (from nsqd's flags).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_msg_size: i64,
    pub max_body_size: i64,
    pub max_rdy_count: i64,
    /// The longest DPUB delay in milliseconds: nsqd's `--max-req-timeout`
    /// (or nsq-rs's `--max-defer-timeout`).
    pub max_defer_timeout_ms: i64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_msg_size: 1_048_576,
            max_body_size: 5_242_880,
            max_rdy_count: 2500,
            max_defer_timeout_ms: 3_600_000,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Raw JSON body (decoded by [`crate::identify`]).
    Identify(Bytes),
    Auth(Bytes),
    Sub {
        topic: String,
        channel: String,
    },
    Pub {
        topic: String,
        body: Bytes,
    },
    Mpub {
        topic: String,
        bodies: Vec<Bytes>,
    },
    Dpub {
        topic: String,
        defer_ms: i64,
        body: Bytes,
    },
    Rdy(i64),
    Fin(MessageId),
    /// Timeout as sent (not yet clamped to `--max-req-timeout`); may be
    /// negative only through the wrap-around nsqd's digit parser has.
    Req {
        id: MessageId,
        timeout_ms: i64,
    },
    Touch(MessageId),
    Nop,
    Cls,
    /// A command the precheck asked to swallow (RDY while closing).
    Ignored,
}

/// What the server's precheck decides for a command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Precheck {
    /// Go on validating and parsing.
    Proceed,
    /// Consume the line, do nothing (nsqd ignores RDY while closing).
    Ignore,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Send the error frame (and close if it is fatal).
    #[error("{0}")]
    Protocol(#[from] ProtocolError),
    /// The line exceeded [`MAX_LINE_LEN`]: nsqd closes without an error frame.
    #[error("command line too long")]
    LineTooLong,
}

/// Splits one command off `buf`. `Ok(None)`: need more bytes (nothing consumed).
/// On `Err`, the buffer's contents are unspecified; the connection must not be
/// parsed further unless the error is non-fatal (never the case here).
pub fn decode<F>(
    buf: &mut BytesMut,
    limits: &Limits,
    mut precheck: F,
) -> Result<Option<Command>, DecodeError>
where
    F: FnMut(&[u8], &[&[u8]]) -> Result<Precheck, ProtocolError>,
{
    let scan_len = buf.len().min(MAX_LINE_LEN);
    let nl = match buf[..scan_len].iter().position(|&b| b == b'\n') {
        Some(i) => i,
        None if buf.len() >= MAX_LINE_LEN => return Err(DecodeError::LineTooLong),
        None => return Ok(None),
    };
    let mut line_end = nl;
    if line_end > 0 && buf[line_end - 1] == b'\r' {
        line_end -= 1;
    }
    let line = &buf[..line_end];
    let mut parts = line.split(|&b| b == b' ');
    let name = parts.next().unwrap_or(&[]);
    // Commands take at most two parameters; a line with more spills into a
    // Vec, so the common case allocates nothing.
    let mut inline: [&[u8]; 4] = [&[]; 4];
    let mut spilled: Vec<&[u8]> = Vec::new();
    let mut n = 0;
    for p in parts {
        if n < inline.len() {
            inline[n] = p;
        } else {
            if spilled.is_empty() {
                spilled.extend_from_slice(&inline);
            }
            spilled.push(p);
        }
        n += 1;
    }
    let params: &[&[u8]] = if spilled.is_empty() {
        &inline[..n]
    } else {
        &spilled
    };

    if precheck(name, params)? == Precheck::Ignore {
        buf.advance(nl + 1);
        return Ok(Some(Command::Ignored));
    }

    let body_start = nl + 1;
    let rest = &buf[body_start..];
    // `parsed` is the command plus how many bytes after the line it used.
    let parsed: Option<(Command, usize)> = match name {
        b"NOP" => Some((Command::Nop, 0)),
        b"CLS" => Some((Command::Cls, 0)),
        b"RDY" => Some((Command::Rdy(parse_rdy(params, limits)?), 0)),
        b"FIN" => Some((Command::Fin(parse_id(params, "FIN")?), 0)),
        b"TOUCH" => Some((Command::Touch(parse_id(params, "TOUCH")?), 0)),
        b"REQ" => {
            if params.len() < 2 {
                return Err(ProtocolError::invalid("REQ insufficient number of params").into());
            }
            let id = parse_id(params, "REQ")?;
            let timeout_ms = parse_base10(params[1]).ok_or_else(|| {
                ProtocolError::invalid(cat("REQ could not parse timeout ", params[1]))
            })?;
            Some((Command::Req { id, timeout_ms }, 0))
        }
        b"SUB" => {
            if params.len() < 2 {
                return Err(ProtocolError::invalid("SUB insufficient number of parameters").into());
            }
            let topic = checked_topic(params[0], "SUB", E_BAD_TOPIC)?;
            let channel = match std::str::from_utf8(params[1]) {
                Ok(c) if is_valid_channel_name(c) => c.to_string(),
                _ => {
                    let desc = format!(
                        "SUB channel name {} is not valid",
                        go_quote_bytes(params[1])
                    );
                    return Err(ProtocolError::fatal(E_BAD_CHANNEL, desc).into());
                }
            };
            Some((Command::Sub { topic, channel }, 0))
        }
        b"PUB" => {
            let topic = match params.first() {
                Some(t) => checked_topic(t, "PUB", E_BAD_TOPIC)?,
                None => {
                    return Err(
                        ProtocolError::invalid("PUB insufficient number of parameters").into(),
                    )
                }
            };
            read_message_body(rest, "PUB", limits)?.map(|r| {
                (
                    Command::Pub {
                        topic,
                        body: body_from(buf, body_start, &r),
                    },
                    r.end,
                )
            })
        }
        b"DPUB" => {
            if params.len() < 2 {
                return Err(
                    ProtocolError::invalid("DPUB insufficient number of parameters").into(),
                );
            }
            let topic = checked_topic(params[0], "DPUB", E_BAD_TOPIC)?;
            let defer_ms = parse_base10(params[1]).ok_or_else(|| {
                ProtocolError::invalid(cat("DPUB could not parse timeout ", params[1]))
            })?;
            if defer_ms < 0 || defer_ms > limits.max_defer_timeout_ms {
                return Err(ProtocolError::invalid(format!(
                    "DPUB timeout {} out of range 0-{}",
                    defer_ms, limits.max_defer_timeout_ms
                ))
                .into());
            }
            read_message_body(rest, "DPUB", limits)?.map(|r| {
                (
                    Command::Dpub {
                        topic,
                        defer_ms,
                        body: body_from(buf, body_start, &r),
                    },
                    r.end,
                )
            })
        }
        b"MPUB" => {
            let topic = match params.first() {
                // nsqd really does repeat the code inside the description here.
                Some(t) => checked_topic(t, "E_BAD_TOPIC MPUB", E_BAD_TOPIC)?,
                None => {
                    return Err(
                        ProtocolError::invalid("MPUB insufficient number of parameters").into(),
                    )
                }
            };
            match sized_body(
                rest,
                "MPUB",
                limits.max_body_size,
                E_BAD_BODY,
                "body too big",
                "invalid body size",
            )? {
                None => None,
                Some(range) => {
                    let used = range.end;
                    let bodies = parse_mpub_copied(
                        &buf[body_start + range.start..body_start + range.end],
                        limits,
                    )?;
                    Some((Command::Mpub { topic, bodies }, used))
                }
            }
        }
        b"IDENTIFY" => sized_body(
            rest,
            "IDENTIFY",
            limits.max_body_size,
            E_BAD_BODY,
            "body too big",
            "invalid body size",
        )?
        .map(|r| (Command::Identify(body_from(buf, body_start, &r)), r.end)),
        b"AUTH" => {
            if !params.is_empty() {
                return Err(ProtocolError::invalid("AUTH invalid number of parameters").into());
            }
            sized_body(
                rest,
                "AUTH",
                limits.max_body_size,
                E_BAD_BODY,
                "body too big",
                "invalid body size",
            )?
            .map(|r| (Command::Auth(body_from(buf, body_start, &r)), r.end))
        }
        other => return Err(ProtocolError::invalid(cat("invalid command ", other)).into()),
    };

    match parsed {
        None => Ok(None),
        Some((cmd, used)) => {
            buf.advance(body_start + used);
            Ok(Some(cmd))
        }
    }
}

/// Total bytes the command at the front of `buf` needs, known once its line
/// and body size word have arrived (PUB, DPUB, MPUB, IDENTIFY, AUTH), so a
/// reader can make room for a large body at once instead of growing its
/// buffer a read at a time. Never more than a line plus `max_body_size`.
pub fn pending_len(buf: &[u8], limits: &Limits) -> Option<usize> {
    let nl = buf[..buf.len().min(MAX_LINE_LEN)]
        .iter()
        .position(|&b| b == b'\n')?;
    let name = buf[..nl].split(|&b| b == b' ').next()?;
    if !matches!(name, b"PUB" | b"DPUB" | b"MPUB" | b"IDENTIFY" | b"AUTH") {
        return None;
    }
    let w = buf.get(nl + 1..nl + 5)?;
    let size = i32::from_be_bytes([w[0], w[1], w[2], w[3]]);
    let max = limits.max_body_size.max(limits.max_msg_size);
    if size <= 0 || size as i64 > max {
        return None;
    }
    Some(nl + 5 + size as usize)
}

/// A command's body, copied out of the read buffer once it is complete. The
/// copy is deliberate: a queued message must not pin the connection's whole
/// read buffer for as long as it waits in a channel.
fn body_from(buf: &BytesMut, body_start: usize, range: &std::ops::Range<usize>) -> Bytes {
    Bytes::copy_from_slice(&buf[body_start + range.start..body_start + range.end])
}

/// `text` followed by a client's raw bytes, echoed back unchanged as nsqd does.
fn cat(text: &str, raw: &[u8]) -> Vec<u8> {
    let mut v = text.as_bytes().to_vec();
    v.extend_from_slice(raw);
    v
}

fn checked_topic(raw: &[u8], what: &str, code: &'static str) -> Result<String, ProtocolError> {
    match std::str::from_utf8(raw) {
        Ok(t) if is_valid_topic_name(t) => Ok(t.to_string()),
        _ => Err(ProtocolError::fatal(
            code,
            format!("{what} topic name {} is not valid", go_quote_bytes(raw)),
        )),
    }
}

fn parse_id(params: &[&[u8]], cmd: &str) -> Result<MessageId, ProtocolError> {
    let raw = params
        .first()
        .ok_or_else(|| ProtocolError::invalid(format!("{cmd} insufficient number of params")))?;
    MessageId::from_slice(raw).ok_or_else(|| ProtocolError::invalid("invalid message ID"))
}

fn parse_rdy(params: &[&[u8]], limits: &Limits) -> Result<i64, ProtocolError> {
    let count = match params.first() {
        None => 1,
        Some(raw) => parse_base10(raw)
            .ok_or_else(|| ProtocolError::invalid(cat("RDY could not parse count ", raw)))?,
    };
    if count < 0 || count > limits.max_rdy_count {
        return Err(ProtocolError::invalid(format!(
            "RDY count {} out of range 0-{}",
            count, limits.max_rdy_count
        )));
    }
    Ok(count)
}

/// nsqd's decimal parser: digits only (no sign), empty is 0, and overflow
/// wraps modulo 2^64 — so huge values come out as odd numbers, not errors.
pub fn parse_base10(raw: &[u8]) -> Option<i64> {
    let mut n: u64 = 0;
    for &b in raw {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n.wrapping_mul(10).wrapping_add((b - b'0') as u64);
    }
    Some(n as i64)
}

/// A `[be32 size][size bytes]` body at the start of `rest`: `Ok(None)` until
/// it is all there; the returned range is the body within `rest`.
/// Size checks happen as soon as the size word has arrived.
fn sized_body(
    rest: &[u8],
    cmd: &str,
    max: i64,
    code: &'static str,
    too_big: &str,
    invalid: &str,
) -> Result<Option<std::ops::Range<usize>>, ProtocolError> {
    if rest.len() < 4 {
        return Ok(None);
    }
    let size = i32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as i64;
    if size > max {
        return Err(ProtocolError::fatal(
            code,
            format!("{cmd} {too_big} {size} > {max}"),
        ));
    }
    if size <= 0 {
        return Err(ProtocolError::fatal(
            code,
            format!("{cmd} {invalid} {size}"),
        ));
    }
    let end = 4 + size as usize;
    if rest.len() < end {
        return Ok(None);
    }
    Ok(Some(4..end))
}

/// PUB/DPUB body: size ≤ 0 is checked before the maximum (unlike IDENTIFY).
fn read_message_body(
    rest: &[u8],
    cmd: &str,
    limits: &Limits,
) -> Result<Option<std::ops::Range<usize>>, ProtocolError> {
    if rest.len() < 4 {
        return Ok(None);
    }
    let size = i32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as i64;
    if size <= 0 {
        return Err(ProtocolError::fatal(
            E_BAD_MESSAGE,
            format!("{cmd} invalid message body size {size}"),
        ));
    }
    if size > limits.max_msg_size {
        return Err(ProtocolError::fatal(
            E_BAD_MESSAGE,
            format!("{cmd} message too big {size} > {}", limits.max_msg_size),
        ));
    }
    let end = 4 + size as usize;
    if rest.len() < end {
        return Ok(None);
    }
    Ok(Some(4..end))
}

/// Parses an MPUB payload `[be32 count]([be32 size][bytes])*`, sharing `body`'s
/// allocation. Used by HTTP `/mpub?binary=true` (which reports these errors
/// as 413 + code without `E_`).
pub fn parse_mpub_body(body: Bytes, limits: &Limits) -> Result<Vec<Bytes>, ProtocolError> {
    parse_mpub_with(&body, limits, |r| body.slice(r))
}

/// Like [`parse_mpub_body`], but each message gets its own copy of its
/// bytes (what TCP MPUB does straight from the read buffer): a message
/// then pins nothing but itself while it waits in a channel, and dropping
/// it touches no reference count shared with the rest of its batch (which
/// other threads are busy finishing).
pub fn parse_mpub_copied(body: &[u8], limits: &Limits) -> Result<Vec<Bytes>, ProtocolError> {
    parse_mpub_with(body, limits, |r| Bytes::copy_from_slice(&body[r]))
}

fn parse_mpub_with(
    body: &[u8],
    limits: &Limits,
    mut take: impl FnMut(std::ops::Range<usize>) -> Bytes,
) -> Result<Vec<Bytes>, ProtocolError> {
    if body.len() < 4 {
        return Err(ProtocolError::fatal(
            E_BAD_BODY,
            "MPUB failed to read message count",
        ));
    }
    let count = i32::from_be_bytes([body[0], body[1], body[2], body[3]]) as i64;
    let max_count = (limits.max_body_size - 4) / 5;
    if count <= 0 || count > max_count {
        return Err(ProtocolError::fatal(
            E_BAD_BODY,
            format!("MPUB invalid message count {count}"),
        ));
    }
    // each message needs at least 5 bytes: do not let a claimed count allocate more
    let mut out = Vec::with_capacity((count as usize).min(body.len() / 5));
    let mut pos = 4usize;
    for i in 0..count {
        if body.len() < pos + 4 {
            return Err(ProtocolError::fatal(
                E_BAD_MESSAGE,
                format!("MPUB failed to read message({i}) body size"),
            ));
        }
        let size =
            i32::from_be_bytes([body[pos], body[pos + 1], body[pos + 2], body[pos + 3]]) as i64;
        pos += 4;
        if size <= 0 {
            return Err(ProtocolError::fatal(
                E_BAD_MESSAGE,
                format!("MPUB invalid message({i}) body size {size}"),
            ));
        }
        if size > limits.max_msg_size {
            return Err(ProtocolError::fatal(
                E_BAD_MESSAGE,
                format!("MPUB message too big {size} > {}", limits.max_msg_size),
            ));
        }
        let end = pos + size as usize;
        if body.len() < end {
            return Err(ProtocolError::fatal(
                E_BAD_MESSAGE,
                "MPUB failed to read message body",
            ));
        }
        out.push(take(pos..end));
        pos = end;
    }
    Ok(out)
}

/// Client side: appends a command line.
pub fn encode_line(buf: &mut BytesMut, name: &str, params: &[&str]) {
    buf.extend_from_slice(name.as_bytes());
    for p in params {
        buf.extend_from_slice(b" ");
        buf.extend_from_slice(p.as_bytes());
    }
    buf.extend_from_slice(b"\n");
}

/// Client side: appends a `[be32 size][bytes]` body.
pub fn encode_body(buf: &mut BytesMut, body: &[u8]) {
    buf.extend_from_slice(&(body.len() as i32).to_be_bytes());
    buf.extend_from_slice(body);
}

/// Client side: appends a whole MPUB command.
pub fn encode_mpub<B: AsRef<[u8]>>(buf: &mut BytesMut, topic: &str, bodies: &[B]) {
    encode_line(buf, "MPUB", &[topic]);
    let total: usize = 4 + bodies.iter().map(|b| 4 + b.as_ref().len()).sum::<usize>();
    buf.extend_from_slice(&(total as i32).to_be_bytes());
    buf.extend_from_slice(&(bodies.len() as i32).to_be_bytes());
    for b in bodies {
        encode_body(buf, b.as_ref());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(bytes: &[u8]) -> Result<Option<Command>, DecodeError> {
        let mut b = BytesMut::from(bytes);
        decode(&mut b, &Limits::default(), |_, _| Ok(Precheck::Proceed))
    }

    fn err(bytes: &[u8]) -> String {
        match dec(bytes) {
            Err(DecodeError::Protocol(e)) => {
                assert!(e.fatal);
                e.payload_lossy()
            }
            other => panic!("expected protocol error, got {other:?}"),
        }
    }

    #[test]
    fn precheck_sees_every_parameter_past_the_inline_ones() {
        let mut seen = Vec::new();
        let mut b = BytesMut::from(&b"RDY 1 2 3 4 5 6\n"[..]);
        let r = decode(&mut b, &Limits::default(), |name, params| {
            seen.push(name.to_vec());
            seen.extend(params.iter().map(|p| p.to_vec()));
            Ok(Precheck::Proceed)
        });
        assert_eq!(
            r,
            Ok(Some(Command::Rdy(1))),
            "extra parameters are ignored, as by nsqd"
        );
        let want: Vec<&[u8]> = vec![b"RDY", b"1", b"2", b"3", b"4", b"5", b"6"];
        assert_eq!(seen, want);
        assert_eq!(err(b"FIN\n"), "E_INVALID FIN insufficient number of params");
    }

    #[test]
    fn pending_len_once_line_and_size_are_in() {
        let l = Limits::default();
        assert_eq!(pending_len(b"MPUB t", &l), None, "no line yet");
        assert_eq!(pending_len(b"MPUB t\n\x00\x00", &l), None, "no size yet");
        assert_eq!(
            pending_len(b"MPUB t\n\x00\x00\x9f\x60", &l),
            Some(7 + 4 + 0x9f60)
        );
        assert_eq!(
            pending_len(b"PUB t\n\x00\x00\x00\x05he", &l),
            Some(6 + 4 + 5)
        );
        assert_eq!(pending_len(b"FIN 0123456789abcdef\n", &l), None, "no body");
        assert_eq!(
            pending_len(b"PUB t\n\xff\xff\xff\xff", &l),
            None,
            "negative size"
        );
        assert_eq!(
            pending_len(b"PUB t\n\x7f\xff\xff\xff", &l),
            None,
            "over the limits"
        );
    }

    #[test]
    fn pub_ok_and_partial() {
        let mut b = BytesMut::from(&b"PUB t\n\x00\x00\x00\x05hel"[..]);
        assert_eq!(
            decode(&mut b, &Limits::default(), |_, _| Ok(Precheck::Proceed)),
            Ok(None)
        );
        b.extend_from_slice(b"loNOP\n");
        let c = decode(&mut b, &Limits::default(), |_, _| Ok(Precheck::Proceed))
            .unwrap()
            .unwrap();
        assert_eq!(
            c,
            Command::Pub {
                topic: "t".into(),
                body: Bytes::from_static(b"hello")
            }
        );
        assert_eq!(&b[..], b"NOP\n");
        assert_eq!(
            decode(&mut b, &Limits::default(), |_, _| Ok(Precheck::Proceed)).unwrap(),
            Some(Command::Nop)
        );
        assert!(b.is_empty());
    }

    #[test]
    fn checklist_errors() {
        assert_eq!(
            err(b"PUB bad!topic\n"),
            "E_BAD_TOPIC PUB topic name \"bad!topic\" is not valid"
        );
        assert_eq!(
            err(b"PUB t\n\x00\x00\x00\x00"),
            "E_BAD_MESSAGE PUB invalid message body size 0"
        );
        assert_eq!(
            err(b"PUB t\n\x00\x10\x00\x01"),
            "E_BAD_MESSAGE PUB message too big 1048577 > 1048576"
        );
        assert_eq!(
            err(b"PUB\n"),
            "E_INVALID PUB insufficient number of parameters"
        );
        assert_eq!(err(b"FOO\n"), "E_INVALID invalid command FOO");
        assert_eq!(err(b"\n"), "E_INVALID invalid command ");
        let mut b = BytesMut::from(&b"\x01\xffX\n"[..]);
        match decode(&mut b, &Limits::default(), |_, _| Ok(Precheck::Proceed)) {
            Err(DecodeError::Protocol(e)) => {
                assert_eq!(e.payload(), b"E_INVALID invalid command \x01\xffX")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            err(b"SUB t\n"),
            "E_INVALID SUB insufficient number of parameters"
        );
        assert_eq!(
            err(b"SUB t bad/chan\n"),
            "E_BAD_CHANNEL SUB channel name \"bad/chan\" is not valid"
        );
        assert_eq!(err(b"FIN abc\n"), "E_INVALID invalid message ID");
        assert_eq!(
            err(b"REQ 0123456789abcdef\n"),
            "E_INVALID REQ insufficient number of params"
        );
        assert_eq!(
            err(b"RDY 2501\n"),
            "E_INVALID RDY count 2501 out of range 0-2500"
        );
        assert_eq!(err(b"RDY -1\n"), "E_INVALID RDY could not parse count -1");
        assert_eq!(err(b"RDY 1a\n"), "E_INVALID RDY could not parse count 1a");
        assert_eq!(
            err(b"RDY 99999999999999999999\n"),
            "E_INVALID RDY count 7766279631452241919 out of range 0-2500"
        );
        assert_eq!(
            err(b"DPUB t 3600001\n"),
            "E_INVALID DPUB timeout 3600001 out of range 0-3600000"
        );
        assert_eq!(
            err(b"DPUB t abc\n"),
            "E_INVALID DPUB could not parse timeout abc"
        );
        assert_eq!(
            err(b"DPUB t\n"),
            "E_INVALID DPUB insufficient number of parameters"
        );
        assert_eq!(
            err(b"MPUB x!\n"),
            "E_BAD_TOPIC E_BAD_TOPIC MPUB topic name \"x!\" is not valid"
        );
        assert_eq!(
            err(b"MPUB t\n\x00\x50\x00\x01"),
            "E_BAD_BODY MPUB body too big 5242881 > 5242880"
        );
        assert_eq!(
            err(b"MPUB t\n\x00\x00\x00\x04\x00\x00\x00\x00"),
            "E_BAD_BODY MPUB invalid message count 0"
        );
        assert_eq!(
            err(b"IDENTIFY\n\x00\x00\x00\x00"),
            "E_BAD_BODY IDENTIFY invalid body size 0"
        );
        assert_eq!(
            err(b"AUTH x\n"),
            "E_INVALID AUTH invalid number of parameters"
        );
        assert_eq!(
            err(b"TOUCH\n"),
            "E_INVALID TOUCH insufficient number of params"
        );
        assert_eq!(err(b"FIN\n"), "E_INVALID FIN insufficient number of params");
    }

    #[test]
    fn mpub_second_message_empty() {
        let mut b = BytesMut::new();
        b.extend_from_slice(b"MPUB t\n");
        let payload: &[u8] = b"\x00\x00\x00\x02\x00\x00\x00\x01a\x00\x00\x00\x00";
        b.extend_from_slice(&(payload.len() as i32).to_be_bytes());
        b.extend_from_slice(payload);
        assert_eq!(err(&b), "E_BAD_MESSAGE MPUB invalid message(1) body size 0");
    }

    #[test]
    fn mpub_ok() {
        let mut b = BytesMut::new();
        encode_mpub(&mut b, "t", &[b"a".as_ref(), b"bc".as_ref()]);
        let c = dec(&b).unwrap().unwrap();
        assert_eq!(
            c,
            Command::Mpub {
                topic: "t".into(),
                bodies: vec![Bytes::from_static(b"a"), Bytes::from_static(b"bc")]
            }
        );
    }

    #[test]
    fn rdy_forms_and_crlf() {
        assert_eq!(dec(b"RDY\n").unwrap(), Some(Command::Rdy(1)));
        assert_eq!(dec(b"RDY \n").unwrap(), Some(Command::Rdy(0)));
        assert_eq!(dec(b"RDY 5\r\n").unwrap(), Some(Command::Rdy(5)));
        assert_eq!(
            dec(b"PUB t\r\n\x00\x00\x00\x01x").unwrap(),
            Some(Command::Pub {
                topic: "t".into(),
                body: Bytes::from_static(b"x")
            })
        );
        assert_eq!(
            dec(b"PUB t extra\n\x00\x00\x00\x01x").unwrap(),
            Some(Command::Pub {
                topic: "t".into(),
                body: Bytes::from_static(b"x")
            })
        );
    }

    #[test]
    fn line_length_limit() {
        let mut line = vec![b'N'; MAX_LINE_LEN - 1];
        line.push(b'\n');
        // exactly 16384 bytes with the newline: parsed (as an unknown command)
        assert!(matches!(dec(&line), Err(DecodeError::Protocol(_))));
        let long = vec![b'N'; MAX_LINE_LEN];
        assert_eq!(dec(&long), Err(DecodeError::LineTooLong));
        assert_eq!(dec(&long[..100]), Ok(None));
    }

    #[test]
    fn precheck_runs_first_and_can_ignore() {
        let mut b = BytesMut::from(&b"RDY bogus\nNOP\n"[..]);
        let c = decode(&mut b, &Limits::default(), |_, _| Ok(Precheck::Ignore)).unwrap();
        assert_eq!(c, Some(Command::Ignored));
        assert_eq!(&b[..], b"NOP\n");
        let mut b = BytesMut::from(&b"FOO\n"[..]);
        let e = decode(&mut b, &Limits::default(), |n, _| {
            Err(ProtocolError::invalid(format!(
                "cannot {} in current state (TLS required)",
                String::from_utf8_lossy(n)
            )))
        });
        assert_eq!(
            e,
            Err(DecodeError::Protocol(ProtocolError::invalid(
                "cannot FOO in current state (TLS required)"
            )))
        );
    }

    #[test]
    fn req_and_dpub_values() {
        assert_eq!(
            dec(b"REQ 0123456789abcdef 99999999999\n").unwrap(),
            Some(Command::Req {
                id: MessageId(*b"0123456789abcdef"),
                timeout_ms: 99_999_999_999
            })
        );
        assert_eq!(
            dec(b"DPUB t 1000\n\x00\x00\x00\x01z").unwrap(),
            Some(Command::Dpub {
                topic: "t".into(),
                defer_ms: 1000,
                body: Bytes::from_static(b"z")
            })
        );
    }
}

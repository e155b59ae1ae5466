//! The nsqlookupd "V1" TCP protocol, spoken by nsqd: command parsing, the
//! IDENTIFY body, exact response and error bytes, and the per-connection
//! [`Session`] that applies commands to the [`RegistrationDb`].
//!
//! Owns: everything between "a line arrived" and "these bytes go back"
//! (spec nsqlookupd.md §1). Never: sockets, tasks or the clock — the
//! connection shell in `tcp/mod.rs` reads lines and bodies, passes `now`, and
//! writes what this module returns.
//!
//! Wire summary: the client sends `"  V1"`, then `\n`-terminated command lines
//! (trimmed, split on single spaces); IDENTIFY is followed by
//! `<i32 BE size><JSON>`. Every response is `<i32 BE size><data>` with no frame
//! type. Every error is fatal: it is sent, then the connection is closed.

use std::time::Instant;

use bytes::Bytes;
use nsq_protocol::names::{is_valid_channel_name, is_valid_topic_name};
use serde_json::Value;
use tracing::{info, warn};

use crate::json;
use crate::registration::{PeerId, PeerInfo, Registration, RegistrationDb};
use crate::text::{fold_eq, trim_space};

/// The 4-byte protocol magic a client sends first.
pub const MAGIC_V1: &[u8; 4] = b"  V1";

/// Response to a successful PING, REGISTER or UNREGISTER.
pub const OK: &[u8] = b"OK";

/// Largest IDENTIFY body we accept. NSQ does not check (and crashes on a
/// negative size); nsqd's real body is ~200 bytes.
pub const MAX_IDENTIFY_BODY: i32 = 1024 * 1024;

/// Every way a V1 command can fail. All are fatal. [`ProtocolError::wire`] is
/// the exact response text; `Display` is the same text for logs.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProtocolError {
    /// Wrong 4-byte magic (`E_BAD_PROTOCOL`, the only error without a
    /// description).
    BadProtocol,
    /// Unknown command word (possibly empty).
    InvalidCommand(Vec<u8>),
    /// REGISTER/UNREGISTER before IDENTIFY.
    MustIdentify,
    IdentifyAgain,
    BodySize,
    BodyRead,
    BodyDecode,
    MissingFields,
    InsufficientParams(&'static str),
    BadTopic(&'static str, Vec<u8>),
    BadChannel(&'static str, Vec<u8>),
}

impl ProtocolError {
    /// The exact bytes sent to the client (before the size prefix).
    pub fn wire(&self) -> Vec<u8> {
        fn cat(parts: &[&[u8]]) -> Vec<u8> {
            parts.concat()
        }
        match self {
            ProtocolError::BadProtocol => b"E_BAD_PROTOCOL".to_vec(),
            ProtocolError::InvalidCommand(name) => cat(&[b"E_INVALID invalid command ", name]),
            ProtocolError::MustIdentify => b"E_INVALID client must IDENTIFY".to_vec(),
            ProtocolError::IdentifyAgain => b"E_INVALID cannot IDENTIFY again".to_vec(),
            ProtocolError::BodySize => b"E_BAD_BODY IDENTIFY failed to read body size".to_vec(),
            ProtocolError::BodyRead => b"E_BAD_BODY IDENTIFY failed to read body".to_vec(),
            ProtocolError::BodyDecode => b"E_BAD_BODY IDENTIFY failed to decode JSON body".to_vec(),
            ProtocolError::MissingFields => b"E_BAD_BODY IDENTIFY missing fields".to_vec(),
            ProtocolError::InsufficientParams(cmd) => cat(&[
                b"E_INVALID ",
                cmd.as_bytes(),
                b" insufficient number of params",
            ]),
            ProtocolError::BadTopic(cmd, name) => cat(&[
                b"E_BAD_TOPIC ",
                cmd.as_bytes(),
                b" topic name '",
                name,
                b"' is not valid",
            ]),
            ProtocolError::BadChannel(cmd, name) => cat(&[
                b"E_BAD_CHANNEL ",
                cmd.as_bytes(),
                b" channel name '",
                name,
                b"' is not valid",
            ]),
        }
    }
}

impl std::fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.wire()))
    }
}

/// `<i32 BE size><data>`: the only response framing of this protocol.
pub fn frame(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + data.len());
    // Responses are tiny (≤ a few hundred bytes), far below i32::MAX.
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
    out
}

/// A command line split into words: trimmed (Go `strings.TrimSpace`), then
/// split on every single space, so doubled spaces yield empty words.
pub fn split_line(line: &[u8]) -> Vec<&[u8]> {
    trim_space(line).split(|b| *b == b' ').collect()
}

/// The command word of a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Ping,
    Identify,
    Register,
    Unregister,
}

impl Command {
    /// Recognises `words[0]` (case-sensitive).
    pub fn parse(words: &[&[u8]]) -> Result<Command, ProtocolError> {
        let name = words.first().copied().unwrap_or_default();
        match name {
            b"PING" => Ok(Command::Ping),
            b"IDENTIFY" => Ok(Command::Identify),
            b"REGISTER" => Ok(Command::Register),
            b"UNREGISTER" => Ok(Command::Unregister),
            other => Err(ProtocolError::InvalidCommand(other.to_vec())),
        }
    }
}

/// Validates an IDENTIFY body size (the i32 after the IDENTIFY line).
/// NSQ: 0 reads nothing and fails JSON decoding; negative crashes the Go
/// process, so here it (and anything huge) is a body read failure.
pub fn identify_body_len(size: i32) -> Result<usize, ProtocolError> {
    if !(0..=MAX_IDENTIFY_BODY).contains(&size) {
        return Err(ProtocolError::BodyRead);
    }
    usize::try_from(size).map_err(|_| ProtocolError::BodyRead)
}

/// Decodes an IDENTIFY body like Go's `json.Unmarshal` into NSQ's PeerInfo:
/// keys match case-insensitively, unknown keys are ignored, `null` values
/// (and a `null` body) leave fields empty, any type mismatch is an error.
/// `remote_address` is then forced to the connection's address.
pub fn decode_identify(body: &[u8], remote_addr: &str) -> Result<PeerInfo, ProtocolError> {
    let value: Value = serde_json::from_slice(body).map_err(|_| ProtocolError::BodyDecode)?;
    let mut info = PeerInfo::default();
    match value {
        Value::Null => {}
        Value::Object(map) => {
            for (key, v) in &map {
                set_field(&mut info, key, v)?;
            }
        }
        _ => return Err(ProtocolError::BodyDecode),
    }
    info.id = remote_addr.to_owned();
    info.remote_address = remote_addr.to_owned();
    if info.broadcast_address.is_empty()
        || info.tcp_port == 0
        || info.http_port == 0
        || info.version.is_empty()
    {
        return Err(ProtocolError::MissingFields);
    }
    Ok(info)
}

fn set_field(info: &mut PeerInfo, key: &str, v: &Value) -> Result<(), ProtocolError> {
    enum Slot<'a> {
        Str(&'a mut String),
        Int(&'a mut i64),
    }
    let slots: [(&str, Slot<'_>); 8] = [
        ("remote_address", Slot::Str(&mut info.remote_address)),
        ("hostname", Slot::Str(&mut info.hostname)),
        ("broadcast_address", Slot::Str(&mut info.broadcast_address)),
        ("tcp_port", Slot::Int(&mut info.tcp_port)),
        ("http_port", Slot::Int(&mut info.http_port)),
        ("version", Slot::Str(&mut info.version)),
        ("topology_zone", Slot::Str(&mut info.topology_zone)),
        ("topology_region", Slot::Str(&mut info.topology_region)),
    ];
    let Some((_, slot)) = slots.into_iter().find(|(name, _)| fold_eq(name, key)) else {
        return Ok(()); // unknown field
    };
    match (slot, v) {
        (_, Value::Null) => Ok(()),
        (Slot::Str(s), Value::String(x)) => {
            s.clone_from(x);
            Ok(())
        }
        (Slot::Int(i), Value::Number(n)) => {
            *i = n.as_i64().ok_or(ProtocolError::BodyDecode)?;
            Ok(())
        }
        _ => Err(ProtocolError::BodyDecode),
    }
}

/// The IDENTIFY response: Go marshals a map, so keys are sorted.
pub fn identify_response(
    broadcast_address: &str,
    hostname: &str,
    http_port: u16,
    tcp_port: u16,
) -> Bytes {
    let mut out = Vec::new();
    let mut o = json::Object::new(&mut out);
    o.str("broadcast_address", broadcast_address)
        .str("hostname", hostname)
        .int("http_port", i64::from(http_port))
        .int("tcp_port", i64::from(tcp_port))
        .str("version", crate::VERSION);
    o.finish();
    Bytes::from(out)
}

/// Topic and optional channel of REGISTER/UNREGISTER, validated. An empty
/// channel word (e.g. from a doubled space) means "no channel", as in NSQ.
fn topic_channel<'a>(
    cmd: &'static str,
    params: &[&'a [u8]],
) -> Result<(&'a str, Option<&'a str>), ProtocolError> {
    let Some(topic) = params.first().copied() else {
        return Err(ProtocolError::InsufficientParams(cmd));
    };
    let channel = params.get(1).copied().unwrap_or_default();
    let topic = std::str::from_utf8(topic)
        .ok()
        .filter(|t| is_valid_topic_name(t))
        .ok_or_else(|| ProtocolError::BadTopic(cmd, topic.to_vec()))?;
    if channel.is_empty() {
        return Ok((topic, None));
    }
    let channel = std::str::from_utf8(channel)
        .ok()
        .filter(|c| is_valid_channel_name(c))
        .ok_or_else(|| ProtocolError::BadChannel(cmd, channel.to_vec()))?;
    Ok((topic, Some(channel)))
}

/// One connection's protocol state: who it is and whether it identified.
#[derive(Debug)]
pub struct Session {
    remote_addr: String,
    peer: Option<PeerId>,
}

impl Session {
    /// `remote_addr` is the connection's `ip:port`, which becomes the peer id.
    pub fn new(remote_addr: String) -> Self {
        Self {
            remote_addr,
            peer: None,
        }
    }

    pub fn remote_addr(&self) -> &str {
        &self.remote_addr
    }

    /// PING: refreshes the peer's last-seen time if it has identified.
    pub fn ping(&self, db: &mut RegistrationDb, now: Instant) -> &'static [u8] {
        if let Some(id) = &self.peer {
            if let Some(since) = db.ping(id, now) {
                info!(client = %id, last_ping = ?since, "CLIENT: pinged");
            }
        }
        OK
    }

    /// Checked before the IDENTIFY body is read (NSQ refuses a second
    /// IDENTIFY without reading its body).
    pub fn check_identify(&self) -> Result<(), ProtocolError> {
        match self.peer {
            Some(_) => Err(ProtocolError::IdentifyAgain),
            None => Ok(()),
        }
    }

    /// IDENTIFY with its body: registers the peer as a `client`. On success the
    /// caller sends `response` (the server's fixed IDENTIFY answer).
    pub fn identify(
        &mut self,
        body: &[u8],
        db: &mut RegistrationDb,
        now: Instant,
    ) -> Result<(), ProtocolError> {
        self.check_identify()?;
        let info = decode_identify(body, &self.remote_addr)?;
        info!(
            client = %self.remote_addr,
            address = %info.broadcast_address,
            tcp = info.tcp_port,
            http = info.http_port,
            version = %info.version,
            "CLIENT: IDENTIFY"
        );
        let id = info.id.clone();
        if db.identify(info, now) {
            info!(client = %id, registration = %Registration::client(), "DB: REGISTER");
        }
        self.peer = Some(id);
        Ok(())
    }

    /// REGISTER `topic [channel]`; `params` are the words after the command.
    pub fn register(
        &self,
        params: &[&[u8]],
        db: &mut RegistrationDb,
    ) -> Result<&'static [u8], ProtocolError> {
        let id = self.peer.as_deref().ok_or(ProtocolError::MustIdentify)?;
        let (topic, channel) = topic_channel("REGISTER", params)?;
        for r in db.register(id, topic, channel) {
            info!(client = %id, registration = %r, "DB: REGISTER");
        }
        Ok(OK)
    }

    /// UNREGISTER `topic [channel]`; `params` are the words after the command.
    pub fn unregister(
        &self,
        params: &[&[u8]],
        db: &mut RegistrationDb,
    ) -> Result<&'static [u8], ProtocolError> {
        let id = self.peer.as_deref().ok_or(ProtocolError::MustIdentify)?;
        let (topic, channel) = topic_channel("UNREGISTER", params)?;
        let changes = db.unregister(id, topic, channel);
        for r in changes.unexpected {
            warn!(client = %id, registration = %r, "unexpected UNREGISTER");
        }
        for r in changes.removed {
            info!(client = %id, registration = %r, "DB: UNREGISTER");
        }
        Ok(OK)
    }

    /// Connection gone: remove the peer from every registration.
    pub fn close(&mut self, db: &mut RegistrationDb) {
        if let Some(id) = self.peer.take() {
            for r in db.remove_peer(&id) {
                info!(client = %id, registration = %r, "DB: UNREGISTER");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const BODY: &[u8] = br#"{"broadcast_address":"h","hostname":"host","tcp_port":4150,"http_port":4151,"version":"1.3.0"}"#;

    fn db() -> RegistrationDb {
        RegistrationDb::new(Duration::from_secs(300), Duration::from_secs(45))
    }

    fn wire(e: ProtocolError) -> String {
        String::from_utf8(e.wire()).unwrap()
    }

    #[test]
    fn frames_have_size_prefix_only() {
        assert_eq!(frame(b"OK"), b"\x00\x00\x00\x02OK");
        assert_eq!(
            frame(&ProtocolError::BadProtocol.wire()),
            b"\x00\x00\x00\x0eE_BAD_PROTOCOL"
        );
    }

    #[test]
    fn lines_are_trimmed_and_split_on_single_spaces() {
        assert_eq!(split_line(b"  PING  \r\n"), [b"PING".as_slice()]);
        assert_eq!(
            split_line(b"REGISTER t  c\n"),
            [b"REGISTER".as_slice(), b"t", b"", b"c"]
        );
        assert_eq!(split_line(b"\n"), [b"".as_slice()]);
    }

    #[test]
    fn commands() {
        assert_eq!(
            Command::parse(&split_line(b"PING extra")),
            Ok(Command::Ping)
        );
        assert_eq!(
            wire(Command::parse(&split_line(b"FOO")).unwrap_err()),
            "E_INVALID invalid command FOO"
        );
        assert_eq!(
            wire(Command::parse(&split_line(b"")).unwrap_err()),
            "E_INVALID invalid command "
        );
        assert_eq!(
            wire(Command::parse(&split_line(b"ping")).unwrap_err()),
            "E_INVALID invalid command ping"
        );
    }

    #[test]
    fn identify_decoding() {
        let info = decode_identify(BODY, "1.2.3.4:5").unwrap();
        assert_eq!(info.id, "1.2.3.4:5");
        assert_eq!(info.remote_address, "1.2.3.4:5");
        assert_eq!(info.broadcast_address, "h");
        assert_eq!((info.tcp_port, info.http_port), (4150, 4151));
        // Client-supplied remote_address is ignored; keys fold case; unknown
        // keys and nulls are fine.
        let body = br#"{"remote_address":"x","BROADCAST_ADDRESS":"h","tcp_port":1,"http_port":2,"version":"v","extra":[1],"hostname":null}"#;
        let info = decode_identify(body, "r:1").unwrap();
        assert_eq!(
            (
                info.remote_address.as_str(),
                info.broadcast_address.as_str()
            ),
            ("r:1", "h")
        );
        assert_eq!(info.hostname, "");
    }

    #[test]
    fn identify_errors() {
        let missing = br#"{"broadcast_address":"h","tcp_port":1,"http_port":2}"#;
        assert_eq!(
            decode_identify(missing, "r:1"),
            Err(ProtocolError::MissingFields)
        );
        assert_eq!(
            decode_identify(b"null", "r:1"),
            Err(ProtocolError::MissingFields)
        );
        assert_eq!(
            decode_identify(b"{}", "r:1"),
            Err(ProtocolError::MissingFields)
        );
        for bad in [
            &b""[..],
            b"not json",
            b"[]",
            b"\"s\"",
            br#"{"tcp_port":"1"}"#,
            br#"{"tcp_port":1.5}"#,
            br#"{"version":1}"#,
        ] {
            assert_eq!(
                decode_identify(bad, "r:1"),
                Err(ProtocolError::BodyDecode),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(
            wire(ProtocolError::MissingFields),
            "E_BAD_BODY IDENTIFY missing fields"
        );
        assert_eq!(
            wire(ProtocolError::BodyDecode),
            "E_BAD_BODY IDENTIFY failed to decode JSON body"
        );
        assert_eq!(identify_body_len(-5), Err(ProtocolError::BodyRead));
        assert_eq!(identify_body_len(0), Ok(0));
        assert_eq!(identify_body_len(i32::MAX), Err(ProtocolError::BodyRead));
    }

    #[test]
    fn identify_response_keys_sorted() {
        let r = identify_response("b<", "host", 4161, 4160);
        assert_eq!(
            &r[..],
            br#"{"broadcast_address":"b\u003c","hostname":"host","http_port":4161,"tcp_port":4160,"version":"1.3.0"}"#
        );
    }

    #[test]
    fn session_flow_and_errors() {
        let now = Instant::now();
        let mut db = db();
        let mut s = Session::new("r:1".into());
        assert_eq!(
            s.register(&[b"t"], &mut db),
            Err(ProtocolError::MustIdentify)
        );
        assert_eq!(
            wire(ProtocolError::MustIdentify),
            "E_INVALID client must IDENTIFY"
        );
        s.identify(BODY, &mut db, now).unwrap();
        assert_eq!(
            s.identify(BODY, &mut db, now),
            Err(ProtocolError::IdentifyAgain)
        );
        assert_eq!(
            wire(ProtocolError::IdentifyAgain),
            "E_INVALID cannot IDENTIFY again"
        );
        assert_eq!(
            wire(s.register(&[], &mut db).unwrap_err()),
            "E_INVALID REGISTER insufficient number of params"
        );
        assert_eq!(
            wire(s.unregister(&[], &mut db).unwrap_err()),
            "E_INVALID UNREGISTER insufficient number of params"
        );
        assert_eq!(
            wire(s.register(&[b"bad!"], &mut db).unwrap_err()),
            "E_BAD_TOPIC REGISTER topic name 'bad!' is not valid"
        );
        assert_eq!(
            wire(s.register(&[b""], &mut db).unwrap_err()),
            "E_BAD_TOPIC REGISTER topic name '' is not valid"
        );
        assert_eq!(
            wire(s.register(&[b"t", b"bad!"], &mut db).unwrap_err()),
            "E_BAD_CHANNEL REGISTER channel name 'bad!' is not valid"
        );
        assert_eq!(
            wire(s.unregister(&[b"bad!"], &mut db).unwrap_err()),
            "E_BAD_TOPIC UNREGISTER topic name 'bad!' is not valid"
        );
        // Raw bytes of an invalid name are echoed as is.
        assert_eq!(
            s.register(&[b"\xff"], &mut db).unwrap_err().wire(),
            b"E_BAD_TOPIC REGISTER topic name '\xff' is not valid"
        );
        assert_eq!(s.register(&[b"t", b"", b"c"], &mut db), Ok(OK));
        assert!(
            db.channels("t").is_empty(),
            "empty channel word means no channel"
        );
        assert_eq!(s.register(&[b"t", b"c"], &mut db), Ok(OK));
        assert_eq!(db.channels("t"), ["c"]);
        assert_eq!(s.unregister(&[b"never"], &mut db), Ok(OK));
        assert_eq!(s.ping(&mut db, now), OK);
        s.close(&mut db);
        assert!(db.lookup("t", now).unwrap().producers.is_empty());
        assert!(db.nodes(now).is_empty());
    }
}

//! What crosses the wire to and from nsqlookupd: the "V1" TCP protocol
//! nsqd speaks to it (commands, the IDENTIFY bodies both ways, response
//! framing, error texts) and the JSON of its HTTP answers that nsqd,
//! nsqadmin, the client and the apps read (`/lookup`, `/nodes`,
//! `/channels`, `/topics`).
//!
//! Owns: encoding (nsqd's lookup loop) and decoding (nsqlookupd) of every
//! V1 command, with nsqlookupd 1.3.0's exact error bytes, and one type per
//! JSON shape. Never: sockets, the registration database, the clock.
//!
//! Wire summary: the client sends `"  V1"`, then `\n`-terminated command
//! lines (trimmed, split on single spaces); IDENTIFY is followed by
//! `<i32 BE size><JSON>`. Every response is `<i32 BE size><data>` with no
//! frame type. Every error is fatal: it is sent, then the connection closes.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::names::{is_valid_channel_name, is_valid_topic_name};
use crate::text::{fold_eq, trim_space};

pub use crate::frame::MAGIC_V1;

/// Response to a successful PING, REGISTER or UNREGISTER.
pub const OK: &[u8] = b"OK";

/// Largest IDENTIFY body nsqlookupd accepts. NSQ does not check (and
/// crashes on a negative size); nsqd's real body is ~200 bytes.
pub const MAX_IDENTIFY_BODY: i32 = 1024 * 1024;

/// A command as nsqd sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request<'a> {
    Ping,
    Identify(&'a Identify),
    /// `REGISTER topic [channel]`.
    Register(&'a str, Option<&'a str>),
    /// `UNREGISTER topic [channel]`.
    Unregister(&'a str, Option<&'a str>),
}

impl Request<'_> {
    /// The command's bytes: its line, and for IDENTIFY the size-prefixed body.
    pub fn encode(&self) -> Vec<u8> {
        let line = |word: &str, topic: &str, channel: Option<&str>| match channel {
            Some(c) => format!("{word} {topic} {c}\n").into_bytes(),
            None => format!("{word} {topic}\n").into_bytes(),
        };
        match self {
            Request::Ping => b"PING\n".to_vec(),
            Request::Identify(body) => {
                let json = crate::gofmt::to_json(body);
                let mut out = b"IDENTIFY\n".to_vec();
                // A few hundred bytes, far below i32::MAX.
                out.extend_from_slice(&(json.len() as u32).to_be_bytes());
                out.extend_from_slice(&json);
                out
            }
            Request::Register(t, c) => line("REGISTER", t, *c),
            Request::Unregister(t, c) => line("UNREGISTER", t, *c),
        }
    }
}

/// nsqd's IDENTIFY body. Go marshals a map, so the keys are sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Identify {
    pub broadcast_address: String,
    pub hostname: String,
    pub http_port: u16,
    pub tcp_port: u16,
    pub topology_region: String,
    pub topology_zone: String,
    pub version: String,
}

/// nsqlookupd's answer to IDENTIFY (keys sorted, as Go marshals a map);
/// nsqd learns the lookupd's HTTP address from it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct LookupdInfo {
    pub broadcast_address: String,
    pub hostname: String,
    pub http_port: u16,
    pub tcp_port: u16,
    pub version: String,
}

/// Every way a V1 command can fail. All are fatal. [`V1Error::wire`] is the
/// exact response text; `Display` is the same text for logs.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum V1Error {
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

impl V1Error {
    /// The exact bytes sent to the client (before the size prefix).
    pub fn wire(&self) -> Vec<u8> {
        fn cat(parts: &[&[u8]]) -> Vec<u8> {
            parts.concat()
        }
        match self {
            V1Error::BadProtocol => b"E_BAD_PROTOCOL".to_vec(),
            V1Error::InvalidCommand(name) => cat(&[b"E_INVALID invalid command ", name]),
            V1Error::MustIdentify => b"E_INVALID client must IDENTIFY".to_vec(),
            V1Error::IdentifyAgain => b"E_INVALID cannot IDENTIFY again".to_vec(),
            V1Error::BodySize => b"E_BAD_BODY IDENTIFY failed to read body size".to_vec(),
            V1Error::BodyRead => b"E_BAD_BODY IDENTIFY failed to read body".to_vec(),
            V1Error::BodyDecode => b"E_BAD_BODY IDENTIFY failed to decode JSON body".to_vec(),
            V1Error::MissingFields => b"E_BAD_BODY IDENTIFY missing fields".to_vec(),
            V1Error::InsufficientParams(cmd) => cat(&[
                b"E_INVALID ",
                cmd.as_bytes(),
                b" insufficient number of params",
            ]),
            V1Error::BadTopic(cmd, name) => cat(&[
                b"E_BAD_TOPIC ",
                cmd.as_bytes(),
                b" topic name '",
                name,
                b"' is not valid",
            ]),
            V1Error::BadChannel(cmd, name) => cat(&[
                b"E_BAD_CHANNEL ",
                cmd.as_bytes(),
                b" channel name '",
                name,
                b"' is not valid",
            ]),
        }
    }
}

impl std::fmt::Display for V1Error {
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

/// The command word of a line, as nsqlookupd decodes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Ping,
    Identify,
    Register,
    Unregister,
}

impl Command {
    /// Recognises `words[0]` (case-sensitive).
    pub fn parse(words: &[&[u8]]) -> Result<Command, V1Error> {
        let name = words.first().copied().unwrap_or_default();
        match name {
            b"PING" => Ok(Command::Ping),
            b"IDENTIFY" => Ok(Command::Identify),
            b"REGISTER" => Ok(Command::Register),
            b"UNREGISTER" => Ok(Command::Unregister),
            other => Err(V1Error::InvalidCommand(other.to_vec())),
        }
    }
}

/// Validates an IDENTIFY body size (the i32 after the IDENTIFY line).
/// NSQ: 0 reads nothing and fails JSON decoding; negative crashes the Go
/// process, so here it (and anything huge) is a body read failure.
pub fn identify_body_len(size: i32) -> Result<usize, V1Error> {
    if !(0..=MAX_IDENTIFY_BODY).contains(&size) {
        return Err(V1Error::BodyRead);
    }
    usize::try_from(size).map_err(|_| V1Error::BodyRead)
}

/// Topic and optional channel of REGISTER/UNREGISTER (`cmd`), validated.
/// An empty channel word (e.g. from a doubled space) means "no channel",
/// as in NSQ.
pub fn topic_channel<'a>(
    cmd: &'static str,
    params: &[&'a [u8]],
) -> Result<(&'a str, Option<&'a str>), V1Error> {
    let Some(topic) = params.first().copied() else {
        return Err(V1Error::InsufficientParams(cmd));
    };
    let channel = params.get(1).copied().unwrap_or_default();
    let topic = std::str::from_utf8(topic)
        .ok()
        .filter(|t| is_valid_topic_name(t))
        .ok_or_else(|| V1Error::BadTopic(cmd, topic.to_vec()))?;
    if channel.is_empty() {
        return Ok((topic, None));
    }
    let channel = std::str::from_utf8(channel)
        .ok()
        .filter(|c| is_valid_channel_name(c))
        .ok_or_else(|| V1Error::BadChannel(cmd, channel.to_vec()))?;
    Ok((topic, Some(channel)))
}

/// Decodes an IDENTIFY body like Go's `json.Unmarshal` into NSQ's PeerInfo:
/// keys match case-insensitively, unknown keys are ignored, `null` values
/// (and a `null` body) leave fields empty, any type mismatch is an error.
/// `remote_address` is then forced to the connection's address.
pub fn decode_identify(body: &[u8], remote_addr: &str) -> Result<Producer, V1Error> {
    let value: Value = serde_json::from_slice(body).map_err(|_| V1Error::BodyDecode)?;
    let mut p = Producer::default();
    match value {
        Value::Null => {}
        Value::Object(map) => {
            for (key, v) in &map {
                set_field(&mut p, key, v)?;
            }
        }
        _ => return Err(V1Error::BodyDecode),
    }
    p.remote_address = remote_addr.to_owned();
    if p.broadcast_address.is_empty() || p.tcp_port == 0 || p.http_port == 0 || p.version.is_empty()
    {
        return Err(V1Error::MissingFields);
    }
    Ok(p)
}

fn set_field(p: &mut Producer, key: &str, v: &Value) -> Result<(), V1Error> {
    enum Slot<'a> {
        Str(&'a mut String),
        Int(&'a mut i64),
    }
    let slots: [(&str, Slot<'_>); 8] = [
        ("remote_address", Slot::Str(&mut p.remote_address)),
        ("hostname", Slot::Str(&mut p.hostname)),
        ("broadcast_address", Slot::Str(&mut p.broadcast_address)),
        ("tcp_port", Slot::Int(&mut p.tcp_port)),
        ("http_port", Slot::Int(&mut p.http_port)),
        ("version", Slot::Str(&mut p.version)),
        ("topology_zone", Slot::Str(&mut p.topology_zone)),
        ("topology_region", Slot::Str(&mut p.topology_region)),
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
            *i = n.as_i64().ok_or(V1Error::BodyDecode)?;
            Ok(())
        }
        _ => Err(V1Error::BodyDecode),
    }
}

/// One nsqd as nsqlookupd lists it under `producers` in `/lookup` (the
/// field order is the JSON order). Read leniently: any field may be
/// missing, as from older NSQs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Producer {
    pub remote_address: String,
    pub hostname: String,
    pub broadcast_address: String,
    pub tcp_port: i64,
    pub http_port: i64,
    pub version: String,
    pub topology_zone: String,
    pub topology_region: String,
}

impl Producer {
    /// `broadcast_address:tcp_port` (Go's `net.JoinHostPort`).
    pub fn tcp_address(&self) -> String {
        join_host_port(&self.broadcast_address, self.tcp_port)
    }

    /// `broadcast_address:http_port` (Go's `net.JoinHostPort`).
    pub fn http_address(&self) -> String {
        join_host_port(&self.broadcast_address, self.http_port)
    }
}

/// Go's `net.JoinHostPort`: brackets around a host that contains `:`.
pub fn join_host_port(host: &str, port: impl std::fmt::Display) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// `GET /lookup?topic=`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Lookup {
    #[serde(deserialize_with = "null_default")]
    pub channels: Vec<String>,
    #[serde(deserialize_with = "null_default")]
    pub producers: Vec<Producer>,
}

/// One entry of `GET /nodes`: the producer, then its topics and whether
/// each is tombstoned (same index).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Node {
    #[serde(flatten)]
    pub producer: Producer,
    #[serde(deserialize_with = "null_default")]
    pub tombstones: Vec<bool>,
    #[serde(deserialize_with = "null_default")]
    pub topics: Vec<String>,
}

/// `GET /nodes`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Nodes {
    #[serde(deserialize_with = "null_default")]
    pub producers: Vec<Node>,
}

/// `GET /channels?topic=`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Channels {
    #[serde(deserialize_with = "null_default")]
    pub channels: Vec<String>,
}

/// `GET /topics`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Topics {
    #[serde(deserialize_with = "null_default")]
    pub topics: Vec<String>,
}

/// Go marshals an empty slice it never allocated as `null`.
fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Decodes an NSQ "V1" answer into `T`, also accepting the pre-1.0
/// envelope `{"status_code":200,"status_txt":"OK","data":{...}}` that old
/// daemons (and servers ignoring the V1 `Accept` header) send. An empty
/// body is `T::default()`.
pub fn decode_v1<T: serde::de::DeserializeOwned + Default>(
    body: &[u8],
) -> Result<T, serde_json::Error> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    let v: Value = serde_json::from_slice(body)?;
    match v {
        Value::Object(mut m) if m.contains_key("status_code") && m.contains_key("data") => {
            serde_json::from_value(m.remove("data").unwrap_or_default())
        }
        v => serde_json::from_value(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &[u8] = br#"{"broadcast_address":"h","hostname":"host","tcp_port":4150,"http_port":4151,"version":"1.3.0"}"#;

    fn wire(e: V1Error) -> String {
        String::from_utf8(e.wire()).unwrap()
    }

    #[test]
    fn requests_encode_as_nsqd_sends_them() {
        assert_eq!(Request::Ping.encode(), b"PING\n");
        assert_eq!(Request::Register("t", None).encode(), b"REGISTER t\n");
        assert_eq!(
            Request::Unregister("t", Some("c")).encode(),
            b"UNREGISTER t c\n"
        );
        let id = Identify {
            broadcast_address: "b<".into(),
            hostname: "h".into(),
            http_port: 4151,
            tcp_port: 4150,
            version: "1.3.0".into(),
            ..Default::default()
        };
        let body = br#"{"broadcast_address":"b\u003c","hostname":"h","http_port":4151,"tcp_port":4150,"topology_region":"","topology_zone":"","version":"1.3.0"}"#;
        let mut want = b"IDENTIFY\n".to_vec();
        want.extend_from_slice(&(body.len() as u32).to_be_bytes());
        want.extend_from_slice(body);
        assert_eq!(Request::Identify(&id).encode(), want);
    }

    #[test]
    fn frames_have_size_prefix_only() {
        assert_eq!(frame(b"OK"), b"\x00\x00\x00\x02OK");
        assert_eq!(
            frame(&V1Error::BadProtocol.wire()),
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
    fn topic_and_channel_params() {
        assert_eq!(topic_channel("REGISTER", &[b"t"]), Ok(("t", None)));
        assert_eq!(
            topic_channel("REGISTER", &[b"t", b"", b"c"]),
            Ok(("t", None))
        );
        assert_eq!(
            wire(topic_channel("REGISTER", &[]).unwrap_err()),
            "E_INVALID REGISTER insufficient number of params"
        );
        assert_eq!(
            wire(topic_channel("UNREGISTER", &[b"bad!"]).unwrap_err()),
            "E_BAD_TOPIC UNREGISTER topic name 'bad!' is not valid"
        );
        assert_eq!(
            wire(topic_channel("REGISTER", &[b"t", b"bad!"]).unwrap_err()),
            "E_BAD_CHANNEL REGISTER channel name 'bad!' is not valid"
        );
        // Raw bytes of an invalid name are echoed as is.
        assert_eq!(
            topic_channel("REGISTER", &[b"\xff"]).unwrap_err().wire(),
            b"E_BAD_TOPIC REGISTER topic name '\xff' is not valid"
        );
    }

    #[test]
    fn identify_decoding() {
        let p = decode_identify(BODY, "1.2.3.4:5").unwrap();
        assert_eq!(p.remote_address, "1.2.3.4:5");
        assert_eq!(p.broadcast_address, "h");
        assert_eq!((p.tcp_port, p.http_port), (4150, 4151));
        // Client-supplied remote_address is ignored; keys fold case; unknown
        // keys and nulls are fine.
        let body = br#"{"remote_address":"x","BROADCAST_ADDRESS":"h","tcp_port":1,"http_port":2,"version":"v","extra":[1],"hostname":null}"#;
        let p = decode_identify(body, "r:1").unwrap();
        assert_eq!(
            (p.remote_address.as_str(), p.broadcast_address.as_str()),
            ("r:1", "h")
        );
        assert_eq!(p.hostname, "");
    }

    #[test]
    fn identify_errors() {
        let missing = br#"{"broadcast_address":"h","tcp_port":1,"http_port":2}"#;
        assert_eq!(decode_identify(missing, "r:1"), Err(V1Error::MissingFields));
        assert_eq!(decode_identify(b"null", "r:1"), Err(V1Error::MissingFields));
        assert_eq!(decode_identify(b"{}", "r:1"), Err(V1Error::MissingFields));
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
                Err(V1Error::BodyDecode),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(
            wire(V1Error::MissingFields),
            "E_BAD_BODY IDENTIFY missing fields"
        );
        assert_eq!(
            wire(V1Error::BodyDecode),
            "E_BAD_BODY IDENTIFY failed to decode JSON body"
        );
        assert_eq!(identify_body_len(-5), Err(V1Error::BodyRead));
        assert_eq!(identify_body_len(0), Ok(0));
        assert_eq!(identify_body_len(i32::MAX), Err(V1Error::BodyRead));
    }

    #[test]
    fn identify_response_keys_sorted() {
        let r = LookupdInfo {
            broadcast_address: "b<".into(),
            hostname: "host".into(),
            http_port: 4161,
            tcp_port: 4160,
            version: "1.3.0".into(),
        };
        assert_eq!(
            crate::gofmt::to_json_string(&r),
            r#"{"broadcast_address":"b\u003c","hostname":"host","http_port":4161,"tcp_port":4160,"version":"1.3.0"}"#
        );
    }

    #[test]
    fn http_shapes() {
        let current = br#"{"channels":["c"],"producers":[{"remote_address":"1.2.3.4:5","hostname":"h","broadcast_address":"h1","tcp_port":4150,"http_port":4151,"version":"1.3.0","topology_zone":"","topology_region":""}]}"#;
        let l: Lookup = decode_v1(current).unwrap();
        assert_eq!(l.producers[0].tcp_address(), "h1:4150");
        assert_eq!(crate::gofmt::to_json(&l), current);
        let legacy = br#"{"status_code":200,"status_txt":"OK","data":{"channels":[],"producers":[{"broadcast_address":"::1","tcp_port":4150}]}}"#;
        let l: Lookup = decode_v1(legacy).unwrap();
        assert_eq!(l.producers[0].tcp_address(), "[::1]:4150");
        assert_eq!(decode_v1::<Lookup>(b"").unwrap(), Lookup::default());
        assert_eq!(
            decode_v1::<Lookup>(br#"{"producers":null}"#).unwrap(),
            Lookup::default()
        );
        assert!(decode_v1::<Lookup>(b"{oops").is_err());
        let nodes = br#"{"producers":[{"remote_address":"r","hostname":"vm","broadcast_address":"b","tcp_port":1,"http_port":2,"version":"1.3.0","topology_zone":"","topology_region":"","tombstones":[false],"topics":["t"]}]}"#;
        let n: Nodes = decode_v1(nodes).unwrap();
        assert_eq!(n.producers[0].topics, ["t"]);
        assert_eq!(n.producers[0].producer.http_address(), "b:2");
        assert_eq!(crate::gofmt::to_json(&n), nodes);
        let t: Topics = decode_v1(br#"{"topics":null}"#).unwrap();
        assert!(t.topics.is_empty());
    }
}

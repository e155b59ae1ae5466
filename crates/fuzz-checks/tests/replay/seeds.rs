//! Hand-written seed inputs, one function per fuzz target, in the layout
//! that target's `check` expects (its module doc in `src/` describes it):
//! valid inputs of the format, so mutations start deep inside the parser,
//! and the boundary cases a parser decides on (empty, sizes 0/-1/max, a byte
//! over a limit, a line without its `\n`).

use bytes::BytesMut;
use nsq_protocol::command::{encode_body, encode_line, encode_mpub, MAX_LINE_LEN};
use nsq_protocol::compress::{snappy_masked_crc, DeflateEncoder, SnappyEncoder, SNAPPY_STREAM_ID};
use nsq_protocol::lookupd::{Identify, Request, MAGIC_V1};

const MSG_ID: &str = "0123456789abcdef";

fn identify_bodies() -> Vec<Vec<u8>> {
    [
        &b"{}"[..],
        b"null",
        br#"{"client_id":"c","hostname":"h","user_agent":"nsq-rs/0.1","feature_negotiation":true,"heartbeat_interval":30000,"output_buffer_size":16384,"output_buffer_timeout":250,"tls_v1":false,"snappy":false,"deflate":true,"deflate_level":6,"sample_rate":50,"msg_timeout":60000,"topology_region":"r","topology_zone":"z"}"#,
        br#"{"feature_negotiation":true,"snappy":true,"deflate":true}"#,
        br#"{"heartbeat_interval":-1,"output_buffer_size":-1,"output_buffer_timeout":-1,"sample_rate":100,"msg_timeout":0}"#,
        br#"{"heartbeat_interval":999999999999,"output_buffer_size":9223372036854775807,"deflate_level":10,"sample_rate":101,"msg_timeout":-1}"#,
        br#"{"client_id":null,"unknown":[1,{"a":"b"}],"hostname":"\u00e9\n"}"#,
        br#"{"tls_v1":"yes"}"#,
        b"[]",
        b"\"x\"",
        b"",
        b"{",
    ]
    .iter()
    .map(|b| b.to_vec())
    .collect()
}

fn cmd(name: &str, params: &[&str], body: Option<&[u8]>) -> Vec<u8> {
    let mut buf = BytesMut::new();
    encode_line(&mut buf, name, params);
    if let Some(b) = body {
        encode_body(&mut buf, b);
    }
    buf.to_vec()
}

/// `data[0]` also picks the split point, so the commands start at byte 0
/// and the seeds vary their first byte through the mutations.
pub fn v2_command() -> Vec<Vec<u8>> {
    let ident = br#"{"client_id":"c","feature_negotiation":true}"#;
    let mut mpub = BytesMut::new();
    encode_mpub(&mut mpub, "t", &[&b"a"[..], b"bc", b"def"]);
    let mut one = vec![
        cmd("IDENTIFY", &[], Some(ident)),
        cmd("AUTH", &[], Some(b"secret")),
        cmd("SUB", &["topic", "channel"], None),
        cmd("SUB", &["topic", "channel#ephemeral"], None),
        cmd("RDY", &["10"], None),
        cmd("FIN", &[MSG_ID], None),
        cmd("REQ", &[MSG_ID, "1000"], None),
        cmd("TOUCH", &[MSG_ID], None),
        cmd("NOP", &[], None),
        cmd("CLS", &[], None),
        cmd("PUB", &["topic"], Some(b"hello")),
        cmd("DPUB", &["topic", "1000"], Some(b"later")),
        mpub.to_vec(),
        // boundaries
        b"\n".to_vec(),
        b"NOP\r\n".to_vec(),
        b"NOP".to_vec(),
        cmd("PUB", &["topic"], Some(b"")),
        cmd("RDY", &["2501"], None),
        cmd("RDY", &["-1"], None),
        cmd("REQ", &[MSG_ID, "99999999999999999999"], None),
        cmd("DPUB", &["topic", "3600001"], Some(b"x")),
        cmd("FIN", &["short"], None),
        cmd("SUB", &["bad/topic", "c"], None),
        cmd("PUB", &["t"], None),
        [cmd("PUB", &["t"], None), vec![0xff, 0xff, 0xff, 0xff]].concat(),
        [
            cmd("PUB", &["t"], None),
            5_242_881i32.to_be_bytes().to_vec(),
        ]
        .concat(),
        [
            cmd("MPUB", &["t"], None),
            vec![0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0],
        ]
        .concat(),
        [
            cmd("MPUB", &["t"], None),
            vec![0, 0, 0, 8, 0, 0xf, 0xff, 0xff, 0, 0, 0, 1],
        ]
        .concat(),
        vec![b'A'; MAX_LINE_LEN],
        [vec![b'A'; MAX_LINE_LEN - 1], b"\n".to_vec()].concat(),
    ];
    // A whole session, as a client sends it.
    let session: Vec<u8> = one[..13].concat();
    one.push(session);
    one
}

pub fn identify_json() -> Vec<Vec<u8>> {
    identify_bodies()
}

fn mpub(bodies: &[&[u8]]) -> Vec<u8> {
    let mut out = (bodies.len() as i32).to_be_bytes().to_vec();
    for b in bodies {
        out.extend_from_slice(&(b.len() as i32).to_be_bytes());
        out.extend_from_slice(b);
    }
    out
}

fn mpub_bodies() -> Vec<Vec<u8>> {
    vec![
        mpub(&[b"a"]),
        mpub(&[b"hello", b"world", b"!"]),
        mpub(&[&[0u8; 300][..], b"x"]),
        mpub(&[]),
        mpub(&[b""]),
        [mpub(&[b"a"]), b"trailing".to_vec()].concat(),
        vec![0, 0, 0, 2, 0, 0, 0, 1, b'a'],
        vec![0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff],
        vec![0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 1, b'a'],
        vec![0, 0x10, 0, 0, 0, 0, 0, 1],
        vec![0, 0, 0],
        vec![],
    ]
}

pub fn mpub_body() -> Vec<Vec<u8>> {
    mpub_bodies()
}

/// `[max_msg_size le16][max_body_size le16]` then the body.
fn with_limits(msg: u16, body: u16, rest: &[u8]) -> Vec<u8> {
    [&msg.to_le_bytes()[..], &body.to_le_bytes(), rest].concat()
}

pub fn http_mpub_text() -> Vec<Vec<u8>> {
    vec![
        with_limits(1024, 4096, b"a\nbc\ndef"),
        with_limits(1024, 4096, b"a\nbc\ndef\n"),
        with_limits(1024, 4096, b"\n\na\n\n\nb\n"),
        with_limits(1024, 4096, b"crlf\r\nstays\r\n"),
        with_limits(1024, 4096, b""),
        with_limits(1024, 4096, b"\n"),
        // a line exactly at the message limit, and one over
        with_limits(3, 4096, b"abc\nde"),
        with_limits(3, 4096, b"abcd\nde"),
        // a body exactly at the body limit, and one byte over
        with_limits(1024, 8, b"1234\n678"),
        with_limits(1024, 8, b"1234\n6789"),
        // MSG_TOO_BIG before the body limit is reached
        with_limits(2, 6, b"abcdefgh"),
        with_limits(0, 0, b""),
        with_limits(0, 0, b"a"),
        with_limits(u16::MAX, u16::MAX, &[b'x'; 600]),
    ]
}

pub fn http_mpub_binary() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = mpub_bodies()
        .iter()
        .map(|b| with_limits(1023, 4091, b))
        .collect();
    // limits just at and under what the body needs: max_msg_size 5, then 4;
    // max_body_size 27 (count + 3 × 4 + 11 bytes), then 26
    let body = mpub(&[b"hello", b"world", b"!"]);
    out.push(with_limits(4, 22, &body));
    out.push(with_limits(3, 22, &body));
    out.push(with_limits(4, 21, &body));
    out.push(with_limits(0, 0, &mpub(&[b"a"])));
    out
}

fn record(payload: &[u8]) -> Vec<u8> {
    [&(payload.len() as i32).to_be_bytes()[..], payload].concat()
}

/// `[max_bytes_per_file - 16 le16][flags][meta_len]`, meta, then the
/// segments (see the check's module doc). With flags 0x01 (segment 0, loose
/// sizes) and the segment data starting with 0x00, segment 0 is empty and
/// segment 1 holds the whole data.
fn disk(max_bytes: u16, flags: u8, meta: &[u8], segs: &[u8]) -> Vec<u8> {
    [
        &max_bytes.to_le_bytes()[..],
        &[flags, meta.len() as u8],
        meta,
        segs,
    ]
    .concat()
}

pub fn diskqueue_reader() -> Vec<Vec<u8>> {
    let two = [record(b"hello"), record(b"world")].concat();
    let nsqd_msg = record(&[0x42; 30]);
    vec![
        // a clean queue: meta says two records in segment 1
        disk(1000, 0x01, b"2\n1,0\n1,18\n", &two),
        // no meta: recovery from the files alone
        disk(1000, 0x01, b"", &two),
        // meta lagging behind (one record), ahead (three), past the file
        disk(1000, 0x01, b"1\n1,0\n1,9\n", &two),
        disk(1000, 0x01, b"3\n1,0\n1,27\n", &two),
        disk(1000, 0x01, b"0\n1,18\n1,18\n", &two),
        disk(1000, 0x01, b"2\n0,0\n1,18\n", &two),
        // negative positions and depth, garbage
        disk(1000, 0x01, b"-1\n1,-5\n1,-5\n", &two),
        disk(1000, 0x01, b"x\ny\nz\n", &two),
        // a small max_bytes_per_file: rollover on the next put
        disk(0, 0x01, b"2\n1,0\n1,18\n", &two),
        // nsqd's sizes (26-byte minimum): one message, then a short one
        disk(1000, 0x00, b"1\n1,0\n1,34\n", &nsqd_msg),
        disk(1000, 0x00, b"", &two),
        // segments 3 and 4
        disk(1000, 0x07, b"2\n4,0\n4,18\n", &two),
        // data in the first segment too (byte 0 = 0xff: most of it)
        disk(1000, 0x01, b"", &[&[0xff][..], &two].concat()),
        // corrupt lengths: 0, -1, over max_msg_size
        disk(1000, 0x01, b"", &[0, 0, 0, 0, 0, 0, 0, 1, b'a']),
        disk(1000, 0x01, b"", &[0, 0xff, 0xff, 0xff, 0xff]),
        disk(1000, 0x01, b"", &[0, 0, 0x10, 0x01, b'a']),
        disk(1000, 0x01, b"", b""),
        vec![],
    ]
}

/// Byte 0 even: the magic is taken as read; odd: the magic follows it.
pub fn lookupd_v1() -> Vec<Vec<u8>> {
    let id = Identify {
        broadcast_address: "127.0.0.1".into(),
        hostname: "h".into(),
        http_port: 4151,
        tcp_port: 4150,
        topology_region: String::new(),
        topology_zone: String::new(),
        version: "1.3.0".into(),
    };
    let identify = Request::Identify(&id).encode();
    let session = [
        identify.clone(),
        Request::Ping.encode(),
        Request::Register("topic", None).encode(),
        Request::Register("topic", Some("channel")).encode(),
        Request::Unregister("topic", Some("channel")).encode(),
        Request::Unregister("topic", None).encode(),
    ]
    .concat();
    let v = |parts: &[&[u8]]| [&[0u8][..], &parts.concat()].concat();
    vec![
        v(&[&session]),
        [&[1u8][..], MAGIC_V1, &session].concat(),
        [&[1u8][..], b"  V2", &session].concat(),
        v(&[b"PING\n"]),
        v(&[b"REGISTER topic\n"]),
        v(&[&identify, &identify]),
        v(&[b"IDENTIFY\n", &[0, 0, 0, 4], b"null"]),
        v(&[b"IDENTIFY\n", &[0, 0, 0, 0]]),
        v(&[b"IDENTIFY\n", &[0xff, 0xff, 0xff, 0xff], b"{}"]),
        v(&[b"IDENTIFY\n", &[0, 0x10, 0, 1], b"{}"]),
        v(&[b"IDENTIFY\n", &[0, 0, 0, 2], br#"{"tcp_port":"x"}"#]),
        v(&[
            &identify,
            b"REGISTER bad/topic\n",
            b"REGISTER t bad/ch\n",
            b"REGISTER\n",
        ]),
        v(&[
            &identify,
            b"REGISTER t  \n",
            b"  PING  \r\n",
            b"ping\n",
            b"\n",
        ]),
        v(&[]),
    ]
}

fn snappy_chunk(kind: u8, payload: &[u8]) -> Vec<u8> {
    let len = (payload.len() as u32).to_le_bytes();
    [&[kind, len[0], len[1], len[2]][..], payload].concat()
}

/// Byte 0 picks the codec and feed size; the rest is the stream. Each
/// stream comes with feed sizes 1, 7 and all at once.
pub fn snappy_deflate_decode() -> Vec<Vec<u8>> {
    let plain: Vec<&[u8]> = vec![b"", b"hello", &[b'z'; 70_000]];
    let mut streams: Vec<(bool, Vec<u8>)> = Vec::new();
    for p in &plain {
        let mut s = BytesMut::new();
        if SnappyEncoder::new().encode(p, &mut s).is_ok() {
            streams.push((true, s.to_vec()));
        }
        let mut d = BytesMut::new();
        if DeflateEncoder::new(6).encode(p, &mut d).is_ok() {
            streams.push((false, d.to_vec()));
        }
    }
    // Snappy chunks nsqd must accept or refuse: uncompressed data, padding,
    // skippable, reserved unskippable, bad checksum, no stream identifier.
    let data = b"raw bytes";
    let crc = snappy_masked_crc(data).to_le_bytes();
    let uncompressed = snappy_chunk(0x01, &[&crc[..], data].concat());
    for s in [
        [SNAPPY_STREAM_ID, &uncompressed].concat(),
        [
            SNAPPY_STREAM_ID,
            &snappy_chunk(0xfe, &[0; 3]),
            &snappy_chunk(0x80, b"skip"),
        ]
        .concat(),
        [SNAPPY_STREAM_ID, &snappy_chunk(0x02, b"")].concat(),
        [SNAPPY_STREAM_ID, &snappy_chunk(0x01, &[0, 0, 0, 0, b'x'])].concat(),
        uncompressed.clone(),
        SNAPPY_STREAM_ID.to_vec(),
    ] {
        streams.push((true, s));
    }
    // A stored DEFLATE block (BFINAL, type 00) and an empty sync flush.
    streams.push((
        false,
        [&[0x01, 0x05, 0x00, 0xfa, 0xff][..], b"hello"].concat(),
    ));
    streams.push((false, vec![0x00, 0x00, 0x00, 0xff, 0xff]));
    let mut out = Vec::new();
    for (snappy, s) in streams {
        let codec = if snappy { 0 } else { 1 };
        for feed in [0x00, 0x06, 0x80] {
            out.push([&[codec | feed][..], &s].concat());
        }
    }
    out
}

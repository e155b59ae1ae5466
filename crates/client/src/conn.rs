//! One nsqd TCP connection up to the point where it is handed to a producer
//! or consumer task: dial, magic, IDENTIFY (feature negotiation), AUTH when
//! nsqd asks for it, SUB for consumers. Also the framed reader both tasks use.
//!
//! This module speaks the wire through `nsq_protocol` only and holds no
//! state beyond one socket. After the IDENTIFY response it upgrades the
//! stream as nsqd said — TLS, then deflate or snappy — reading one `OK`
//! through each new layer, as go-nsq does; [`crate::transport`] holds the
//! layers.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use nsq_protocol::command::{encode_body, encode_line};
use nsq_protocol::compress::{
    Decoder, DeflateDecoder, DeflateEncoder, Encoder, SnappyDecoder, SnappyEncoder,
};
use nsq_protocol::frame::{
    decode_frame, Frame, FrameDecodeError, FrameType, HEARTBEAT, MAGIC_V2, OK,
};
use nsq_protocol::identify::{IdentifyRequest, IdentifyResponse};
use tokio::net::TcpStream;

use crate::config::Config;
use crate::error::ConnectError;
use crate::transport::{self, Reader, Stream, Writer};

/// A frame size equal to `"HTTP"` read as a big-endian int32: somebody
/// pointed us at an HTTP port.
const HTTP_AS_SIZE: i32 = 0x4854_5450;

/// Why reading the next frame failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("connection closed by nsqd")]
    Closed,
    #[error("{0}")]
    Frame(String),
}

impl From<ReadError> for ConnectError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Io(e) => ConnectError::Io(e),
            ReadError::Closed => ConnectError::Closed,
            ReadError::Frame(s) => ConnectError::Frame(s),
        }
    }
}

/// Splits nsqd's byte stream into frames. `next` is cancel-safe: bytes read
/// before a cancelled call stay in the buffer.
pub(crate) struct FrameReader {
    rd: Reader,
    buf: BytesMut,
    max_size: usize,
}

impl FrameReader {
    fn new(rd: Reader, max_msg_size: u32) -> FrameReader {
        // A message frame carries 4 (type) + 26 (header) bytes besides the body.
        let max_size = if max_msg_size == 0 {
            i32::MAX as usize
        } else {
            max_msg_size as usize + 30
        };
        FrameReader {
            rd,
            buf: BytesMut::with_capacity(16 * 1024),
            max_size,
        }
    }

    pub(crate) async fn next(&mut self) -> Result<Frame, ReadError> {
        loop {
            match decode_frame(&mut self.buf, self.max_size) {
                Ok(Some(f)) => return Ok(f),
                Ok(None) => {}
                Err(FrameDecodeError::BadSize(HTTP_AS_SIZE)) => {
                    return Err(ReadError::Frame(
                        "unexpected HTTP response, a V2 protocol endpoint was expected".into(),
                    ))
                }
                Err(e) => return Err(ReadError::Frame(e.to_string())),
            }
            if self.rd.read_buf(&mut self.buf).await? == 0 {
                return Err(ReadError::Closed);
            }
        }
    }
}

/// A connection that has passed IDENTIFY (and AUTH if required).
pub(crate) struct Handshake {
    pub reader: FrameReader,
    pub writer: Writer,
    /// `None` when nsqd answered IDENTIFY with a plain `OK` (no feature negotiation).
    pub server: Option<IdentifyResponse>,
}

impl Handshake {
    /// nsqd's RDY ceiling (2500 when nsqd did not say, as go-nsq assumes).
    pub(crate) fn max_rdy_count(&self) -> i64 {
        self.server
            .as_ref()
            .map(|s| s.max_rdy_count)
            .unwrap_or(2500)
    }
}

/// The IDENTIFY body go-nsq sends, from `cfg`.
pub(crate) fn identify_request(cfg: &Config) -> IdentifyRequest {
    IdentifyRequest {
        client_id: Some(cfg.client_id.clone()),
        hostname: Some(cfg.hostname.clone()),
        user_agent: Some(cfg.user_agent.clone()),
        feature_negotiation: Some(true),
        heartbeat_interval: Some(cfg.heartbeat_interval.as_millis() as i64),
        output_buffer_size: Some(cfg.output_buffer_size),
        output_buffer_timeout: Some(cfg.output_buffer_timeout.as_millis() as i64),
        tls_v1: Some(cfg.tls_v1),
        snappy: Some(cfg.snappy),
        deflate: Some(cfg.deflate),
        deflate_level: Some(i64::from(cfg.deflate_level)),
        sample_rate: Some(cfg.sample_rate),
        msg_timeout: Some(cfg.msg_timeout.as_millis() as i64),
        topology_region: Some(cfg.topology_region.clone()),
        topology_zone: Some(cfg.topology_zone.clone()),
    }
}

/// Reads nsqd's answer to IDENTIFY: JSON when it negotiated features,
/// anything else (the legacy `OK`) means no negotiation. Missing JSON fields
/// take nsqd's defaults so older servers still work.
pub(crate) fn parse_identify_response(
    data: &[u8],
) -> Result<Option<IdentifyResponse>, ConnectError> {
    if data.first() != Some(&b'{') {
        return Ok(None);
    }
    if let Ok(r) = serde_json::from_slice::<IdentifyResponse>(data) {
        return Ok(Some(r));
    }
    let v: serde_json::Value =
        serde_json::from_slice(data).map_err(|e| ConnectError::Identify(e.to_string()))?;
    let int = |k: &str, d: i64| v.get(k).and_then(|x| x.as_i64()).unwrap_or(d);
    let flag = |k: &str| v.get(k).and_then(|x| x.as_bool()).unwrap_or(false);
    let text = |k: &str| {
        v.get(k)
            .and_then(|x| x.as_str())
            .unwrap_or_default()
            .to_string()
    };
    Ok(Some(IdentifyResponse {
        max_rdy_count: int("max_rdy_count", 2500),
        version: text("version"),
        max_msg_timeout: int("max_msg_timeout", 900_000),
        msg_timeout: int("msg_timeout", 60_000),
        tls_v1: flag("tls_v1"),
        deflate: flag("deflate"),
        deflate_level: int("deflate_level", 6),
        max_deflate_level: int("max_deflate_level", 6),
        snappy: flag("snappy"),
        sample_rate: int("sample_rate", 0) as i32,
        auth_required: flag("auth_required"),
        output_buffer_size: int("output_buffer_size", 16384),
        output_buffer_timeout: int("output_buffer_timeout", 250),
        topology_region: text("topology_region"),
        topology_zone: text("topology_zone"),
    }))
}

/// Writes `bytes` within `timeout`.
pub(crate) async fn write_all(
    w: &mut Writer,
    bytes: &[u8],
    timeout: Duration,
) -> std::io::Result<()> {
    match tokio::time::timeout(timeout, w.write_all(bytes)).await {
        Ok(r) => r,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "write timed out",
        )),
    }
}

/// Reads the next frame that is not a heartbeat (answering heartbeats with
/// NOP), each read bounded by the configured read timeout.
async fn next_reply(h: &mut Handshake, cfg: &Config) -> Result<Frame, ConnectError> {
    loop {
        let f = tokio::time::timeout(cfg.read_timeout, h.reader.next())
            .await
            .map_err(|_| ConnectError::Timeout)??;
        if f.frame_type == FrameType::Response && f.data[..] == *HEARTBEAT {
            write_all(&mut h.writer, b"NOP\n", cfg.write_timeout).await?;
            continue;
        }
        return Ok(f);
    }
}

/// Dials `addr`, sends the magic and IDENTIFY, and AUTH if nsqd requires it.
pub(crate) async fn connect(addr: &str, cfg: &Config) -> Result<Handshake, ConnectError> {
    let stream = match tokio::time::timeout(cfg.dial_timeout, TcpStream::connect(addr)).await {
        Err(_) => {
            return Err(ConnectError::DialTimeout {
                addr: addr.to_string(),
                timeout: cfg.dial_timeout,
            })
        }
        Ok(Err(source)) => {
            return Err(ConnectError::Dial {
                addr: addr.to_string(),
                source,
            })
        }
        Ok(Ok(s)) => s,
    };
    stream.set_nodelay(true)?;
    let (rd, writer) = transport::split(Stream::Plain(stream));
    let mut h = Handshake {
        reader: FrameReader::new(rd, cfg.max_msg_size),
        writer,
        server: None,
    };

    let body = serde_json::to_vec(&identify_request(cfg))
        .map_err(|e| ConnectError::Identify(e.to_string()))?;
    let mut buf = BytesMut::with_capacity(64 + body.len());
    buf.extend_from_slice(MAGIC_V2);
    encode_line(&mut buf, "IDENTIFY", &[]);
    encode_body(&mut buf, &body);
    write_all(&mut h.writer, &buf, cfg.write_timeout).await?;

    let reply = next_reply(&mut h, cfg).await?;
    if reply.frame_type == FrameType::Error {
        return Err(ConnectError::Identify(
            String::from_utf8_lossy(&reply.data).into_owned(),
        ));
    }
    h.server = parse_identify_response(&reply.data)?;
    if let Some(s) = h.server.clone() {
        if s.tls_v1 {
            let Handshake {
                reader,
                writer,
                server,
            } = h;
            if !reader.buf.is_empty() {
                return Err(ConnectError::Tls(
                    "unexpected data from nsqd before the TLS handshake".into(),
                ));
            }
            let (rd, writer) = transport::upgrade_tls(reader.rd, writer, addr, cfg).await?;
            h = Handshake {
                reader: FrameReader {
                    rd,
                    buf: reader.buf,
                    max_size: reader.max_size,
                },
                writer,
                server,
            };
            expect_ok(&mut h, cfg, "TLS").await?;
        }
        if s.deflate && s.snappy {
            return Err(ConnectError::Unsupported("deflate and snappy together"));
        }
        if s.deflate || s.snappy {
            let (dec, enc, what) = if s.deflate {
                let level = u32::try_from(cfg.deflate_level.clamp(1, 9)).unwrap_or(6);
                (
                    Decoder::Deflate(DeflateDecoder::new()),
                    Encoder::Deflate(DeflateEncoder::new(level)),
                    "deflate",
                )
            } else {
                (
                    Decoder::Snappy(SnappyDecoder::new()),
                    Encoder::Snappy(SnappyEncoder::new()),
                    "snappy",
                )
            };
            // nsqd may already have sent its compressed OK behind the JSON.
            let pending = h.reader.buf.split();
            h.reader.rd.set_decoder(dec, pending);
            h.writer.set_encoder(enc);
            expect_ok(&mut h, cfg, what).await?;
        }
        if s.auth_required {
            let secret = cfg
                .auth_secret
                .as_deref()
                .ok_or(ConnectError::AuthRequired)?;
            let mut buf = BytesMut::new();
            encode_line(&mut buf, "AUTH", &[]);
            encode_body(&mut buf, secret.as_bytes());
            write_all(&mut h.writer, &buf, cfg.write_timeout).await?;
            let reply = next_reply(&mut h, cfg).await?;
            if reply.frame_type != FrameType::Response {
                return Err(ConnectError::Auth(
                    String::from_utf8_lossy(&reply.data).into_owned(),
                ));
            }
            tracing::info!(nsqd = %addr, auth = %String::from_utf8_lossy(&reply.data), "AUTH accepted");
        }
    }
    tracing::debug!(nsqd = %addr, server = ?h.server, "IDENTIFY done");
    Ok(h)
}

/// Reads the `OK` nsqd sends through a layer it just put on.
async fn expect_ok(h: &mut Handshake, cfg: &Config, layer: &str) -> Result<(), ConnectError> {
    let reply = next_reply(h, cfg).await?;
    if reply.frame_type == FrameType::Response && reply.data[..] == *OK {
        tracing::debug!(layer, "connection upgraded");
        return Ok(());
    }
    let text = String::from_utf8_lossy(&reply.data).into_owned();
    Err(match layer {
        "TLS" => ConnectError::Tls(format!("expected OK after the handshake, got {text}")),
        _ => ConnectError::Unexpected(format!("{layer} upgrade: {text}")),
    })
}

/// Sends `SUB topic channel` and waits for `OK`.
pub(crate) async fn subscribe(
    h: &mut Handshake,
    topic: &str,
    channel: &str,
    cfg: &Config,
) -> Result<(), ConnectError> {
    let mut buf = BytesMut::new();
    encode_line(&mut buf, "SUB", &[topic, channel]);
    write_all(&mut h.writer, &buf, cfg.write_timeout).await?;
    let reply = next_reply(h, cfg).await?;
    match reply.frame_type {
        FrameType::Response if reply.data[..] == *OK => Ok(()),
        FrameType::Error => Err(ConnectError::Subscribe(
            String::from_utf8_lossy(&reply.data).into_owned(),
        )),
        _ => Err(ConnectError::Unexpected(
            String::from_utf8_lossy(&reply.data).into_owned(),
        )),
    }
}

/// A command line (no body) as bytes.
pub(crate) fn line(name: &str, params: &[&str]) -> Bytes {
    let mut buf = BytesMut::with_capacity(48);
    encode_line(&mut buf, name, params);
    buf.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identify_body_has_go_nsq_fields() {
        let cfg = Config {
            client_id: "c".into(),
            hostname: "c.example".into(),
            ..Config::default()
        };
        let v = serde_json::to_value(identify_request(&cfg)).unwrap();
        assert_eq!(v["client_id"], "c");
        assert_eq!(v["hostname"], "c.example");
        assert_eq!(v["feature_negotiation"], true);
        assert_eq!(v["heartbeat_interval"], 30000);
        assert_eq!(v["output_buffer_size"], 16384);
        assert_eq!(v["output_buffer_timeout"], 250);
        assert_eq!(v["msg_timeout"], 0);
        assert_eq!(v["sample_rate"], 0);
        assert!(v["user_agent"]
            .as_str()
            .unwrap()
            .starts_with("nsq-rs-client/"));
    }

    #[test]
    fn identify_response_forms() {
        assert_eq!(parse_identify_response(b"OK").unwrap(), None);
        let full = br#"{"max_rdy_count":2500,"version":"1.3.0","max_msg_timeout":900000,"msg_timeout":60000,"tls_v1":false,"deflate":false,"deflate_level":6,"max_deflate_level":6,"snappy":false,"sample_rate":0,"auth_required":false,"output_buffer_size":16384,"output_buffer_timeout":250,"topology_region":"","topology_zone":""}"#;
        assert_eq!(
            parse_identify_response(full)
                .unwrap()
                .unwrap()
                .max_rdy_count,
            2500
        );
        // An older nsqd that sends fewer keys.
        let old = br#"{"max_rdy_count":100,"version":"0.3.8","tls_v1":false,"deflate":false,"snappy":false,"auth_required":true}"#;
        let r = parse_identify_response(old).unwrap().unwrap();
        assert_eq!(
            (r.max_rdy_count, r.auth_required, r.msg_timeout),
            (100, true, 60_000)
        );
        assert!(parse_identify_response(b"{not json").is_err());
    }
}

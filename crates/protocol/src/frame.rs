//! Server → client framing: `[be32 size][be32 type][data]`, where `size`
//! counts the type word plus the data.

use bytes::{BufMut, BytesMut};

/// The three frame types nsqd sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum FrameType {
    Response = 0,
    Error = 1,
    Message = 2,
}

impl FrameType {
    pub fn from_i32(v: i32) -> Option<FrameType> {
        match v {
            0 => Some(FrameType::Response),
            1 => Some(FrameType::Error),
            2 => Some(FrameType::Message),
            _ => None,
        }
    }
}

pub const OK: &[u8] = b"OK";
pub const HEARTBEAT: &[u8] = b"_heartbeat_";
pub const CLOSE_WAIT: &[u8] = b"CLOSE_WAIT";

/// The 4 bytes every V2 client sends first.
pub const MAGIC_V2: &[u8; 4] = b"  V2";
/// The 4 bytes nsqd sends to its lookupds (and nsqlookupd expects).
pub const MAGIC_V1: &[u8; 4] = b"  V1";

/// Appends one frame to `buf`.
pub fn encode_frame(buf: &mut BytesMut, frame_type: FrameType, data: &[u8]) {
    buf.reserve(8 + data.len());
    buf.put_i32(4 + data.len() as i32);
    buf.put_i32(frame_type as i32);
    buf.put_slice(data);
}

/// A frame as read by a client: the type and the payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub frame_type: FrameType,
    pub data: bytes::Bytes,
}

/// Client side: splits one complete frame off `buf`, or `Ok(None)` until one
/// is there. A size that cannot hold the type word or an unknown type is an
/// error (the stream cannot be resynchronised).
pub fn decode_frame(
    buf: &mut BytesMut,
    max_size: usize,
) -> Result<Option<Frame>, FrameDecodeError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let size = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    if size < 4 || size as usize > max_size {
        return Err(FrameDecodeError::BadSize(size));
    }
    let size = size as usize;
    if buf.len() < 4 + size {
        return Ok(None);
    }
    let t = i32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
    let frame_type = FrameType::from_i32(t).ok_or(FrameDecodeError::BadType(t))?;
    let mut whole = buf.split_to(4 + size);
    let data = whole.split_off(8).freeze();
    Ok(Some(Frame { frame_type, data }))
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameDecodeError {
    #[error("invalid frame size {0}")]
    BadSize(i32),
    #[error("invalid frame type {0}")]
    BadType(i32),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ok_frame_bytes() {
        let mut b = BytesMut::new();
        encode_frame(&mut b, FrameType::Response, OK);
        assert_eq!(&b[..], &[0, 0, 0, 6, 0, 0, 0, 0, 0x4f, 0x4b]);
    }

    #[test]
    fn heartbeat_and_close_wait_bytes() {
        let mut b = BytesMut::new();
        encode_frame(&mut b, FrameType::Response, HEARTBEAT);
        assert_eq!(&b[..8], &[0, 0, 0, 0x0f, 0, 0, 0, 0]);
        let mut b = BytesMut::new();
        encode_frame(&mut b, FrameType::Response, CLOSE_WAIT);
        assert_eq!(&b[..8], &[0, 0, 0, 0x0e, 0, 0, 0, 0]);
    }

    #[test]
    fn bad_protocol_frame_bytes() {
        let mut b = BytesMut::new();
        encode_frame(&mut b, FrameType::Error, b"E_BAD_PROTOCOL");
        assert_eq!(&b[..8], &[0, 0, 0, 0x12, 0, 0, 0, 1]);
        assert_eq!(&b[8..], b"E_BAD_PROTOCOL");
    }

    #[test]
    fn decode_roundtrip_and_partial() {
        let mut b = BytesMut::new();
        encode_frame(&mut b, FrameType::Error, b"E_INVALID x");
        let mut part = BytesMut::from(&b[..5]);
        assert_eq!(decode_frame(&mut part, 1 << 20), Ok(None));
        let f = decode_frame(&mut b, 1 << 20).unwrap().unwrap();
        assert_eq!(f.frame_type, FrameType::Error);
        assert_eq!(&f.data[..], b"E_INVALID x");
        assert!(b.is_empty());
        let mut bad = BytesMut::from(&[0u8, 0, 0, 2, 0, 0][..]);
        assert_eq!(
            decode_frame(&mut bad, 100),
            Err(FrameDecodeError::BadSize(2))
        );
    }
}

//! The message encoding shared by the wire (data of a type-2 frame) and the
//! disk queue: `[i64 timestamp ns][u16 attempts][16 hex id bytes][body]`.
//!
//! A `Message` shares its body (`Bytes`): the copies a topic hands to each of
//! its channels differ only in header fields, never in an allocated body.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Length of the header before the body.
pub const MESSAGE_HEADER_LEN: usize = 26;
/// Length of a message id on the wire.
pub const MESSAGE_ID_LEN: usize = 16;

/// 16 lowercase hex ASCII bytes, echoed back verbatim by clients.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageId(pub [u8; MESSAGE_ID_LEN]);

impl MessageId {
    /// The hex encoding of a 64-bit GUID, as nsqd renders its ids.
    pub fn from_guid(guid: u64) -> MessageId {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = [0u8; MESSAGE_ID_LEN];
        for (i, byte) in guid.to_be_bytes().iter().enumerate() {
            out[2 * i] = HEX[(byte >> 4) as usize];
            out[2 * i + 1] = HEX[(byte & 0x0f) as usize];
        }
        MessageId(out)
    }

    /// Any 16 bytes are an id as far as the protocol goes; only the length is checked.
    pub fn from_slice(b: &[u8]) -> Option<MessageId> {
        <[u8; MESSAGE_ID_LEN]>::try_from(b).ok().map(MessageId)
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for MessageId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", String::from_utf8_lossy(&self.0))
    }
}

impl std::fmt::Display for MessageId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", String::from_utf8_lossy(&self.0))
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub id: MessageId,
    /// Publish time, Unix nanoseconds; kept across requeues, disk and restarts.
    pub timestamp: i64,
    /// Deliveries so far (the wire value is the count including the current delivery).
    pub attempts: u16,
    pub body: Bytes,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MessageDecodeError {
    #[error("message too short: {0} bytes < {MESSAGE_HEADER_LEN}")]
    TooShort(usize),
}

impl Message {
    pub fn new(id: MessageId, timestamp: i64, body: Bytes) -> Message {
        Message {
            id,
            timestamp,
            attempts: 0,
            body,
        }
    }

    /// Bytes of header plus body.
    pub fn encoded_len(&self) -> usize {
        MESSAGE_HEADER_LEN + self.body.len()
    }

    /// Appends header and body (the disk queue record, or a frame's data).
    pub fn encode(&self, buf: &mut BytesMut) {
        buf.reserve(self.encoded_len());
        buf.put_i64(self.timestamp);
        buf.put_u16(self.attempts);
        buf.put_slice(&self.id.0);
        buf.put_slice(&self.body);
    }

    /// Appends a complete type-2 frame carrying this message.
    pub fn encode_frame(&self, buf: &mut BytesMut) {
        buf.reserve(8 + self.encoded_len());
        buf.put_i32((4 + self.encoded_len()) as i32);
        buf.put_i32(crate::frame::FrameType::Message as i32);
        self.encode(buf);
    }

    /// Parses a record; the body shares `data`'s allocation.
    pub fn decode(data: Bytes) -> Result<Message, MessageDecodeError> {
        if data.len() < MESSAGE_HEADER_LEN {
            return Err(MessageDecodeError::TooShort(data.len()));
        }
        let timestamp = i64::from_be_bytes(data[0..8].try_into().unwrap_or([0; 8]));
        let attempts = u16::from_be_bytes([data[8], data[9]]);
        let mut id = [0u8; MESSAGE_ID_LEN];
        id.copy_from_slice(&data[10..26]);
        // `advance`, not `slice`: the body keeps the record's handle (a
        // slice of the disk queue's read-ahead, or a buffer of its own)
        // rather than taking a second reference to the same buffer.
        let mut body = data;
        body.advance(MESSAGE_HEADER_LEN);
        Ok(Message {
            id: MessageId(id),
            timestamp,
            attempts,
            body,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_hex() {
        assert_eq!(
            &MessageId::from_guid(0x0a1b2c3d4e5f6071).0,
            b"0a1b2c3d4e5f6071"
        );
        assert_eq!(&MessageId::from_guid(0).0, b"0000000000000000");
    }

    #[test]
    fn frame_layout_matches_spec_example() {
        // Spec §9: size 35 = 4 + 26 + 5, type 2, ts, attempts 00 01, id, "hello".
        let mut m = Message::new(
            MessageId(*b"0123456789abcdef"),
            0x0102030405060708,
            Bytes::from_static(b"hello"),
        );
        m.attempts = 1;
        let mut b = BytesMut::new();
        m.encode_frame(&mut b);
        assert_eq!(&b[0..8], &[0, 0, 0, 0x23, 0, 0, 0, 2]);
        assert_eq!(&b[8..16], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&b[16..18], &[0, 1]);
        assert_eq!(&b[18..34], b"0123456789abcdef");
        assert_eq!(&b[34..], b"hello");
    }

    #[test]
    fn decode_roundtrip() {
        let mut m = Message::new(MessageId::from_guid(42), 7, Bytes::from_static(b"body"));
        m.attempts = 3;
        let mut b = BytesMut::new();
        m.encode(&mut b);
        assert_eq!(Message::decode(b.freeze()).unwrap(), m);
        assert_eq!(
            Message::decode(Bytes::from_static(b"short")),
            Err(MessageDecodeError::TooShort(5))
        );
    }
}

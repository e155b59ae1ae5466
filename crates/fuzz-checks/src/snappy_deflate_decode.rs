//! `nsq_protocol::compress` decoders over arbitrary input, fed in pieces as a
//! socket would. Never panics; output growth is bounded (Snappy: at most one
//! 64 KiB block per 4-byte chunk header consumed; DEFLATE: at most its 1032:1
//! worst case plus a window). Also: encode → decode round-trips the input.
//! Byte 0 picks the codec (bit 0: Snappy when clear) and the feed size (bit
//! 7 set: all at once, else 1 + 2 × bits 1..=6); the rest is the stream.

use bytes::BytesMut;
use nsq_protocol::compress::{DeflateDecoder, DeflateEncoder, SnappyDecoder, SnappyEncoder};

pub fn check(data: &[u8]) {
    let Some((&sel, input)) = data.split_first() else {
        return;
    };
    let snappy = sel & 1 == 0;
    // Piece size 1..=128 bytes (0x7f mask) or all at once.
    let piece = if sel & 0x80 != 0 {
        input.len().max(1)
    } else {
        1 + ((sel >> 1) as usize & 0x3f) * 2
    };

    let mut src = BytesMut::new();
    let mut dst = BytesMut::new();
    let mut fed = 0usize;
    let mut sd = SnappyDecoder::new();
    let mut dd = DeflateDecoder::new();
    for chunk in input.chunks(piece) {
        src.extend_from_slice(chunk);
        fed += chunk.len();
        let res = if snappy {
            sd.decode(&mut src, &mut dst)
        } else {
            dd.decode(&mut src, &mut dst)
        };
        let consumed = fed - src.len();
        if snappy {
            assert!(
                dst.len() <= (consumed / 4) * 65536,
                "snappy: {} out for {} in",
                dst.len(),
                consumed
            );
        } else {
            assert!(
                dst.len() <= consumed * 1032 + 65536,
                "deflate: {} out for {} in",
                dst.len(),
                consumed
            );
        }
        if res.is_err() {
            break;
        }
    }

    // Round trip: the encoder's output decodes back to the plain input.
    let mut wire = BytesMut::new();
    let mut plain = BytesMut::new();
    if snappy {
        let mut e = SnappyEncoder::new();
        e.encode(input, &mut wire).expect("snappy encode");
        let mut d = SnappyDecoder::new();
        d.decode(&mut wire, &mut plain)
            .expect("snappy decode of own output");
    } else {
        let mut e = DeflateEncoder::new(1 + (sel as u32 % 9));
        e.encode(input, &mut wire).expect("deflate encode");
        let mut d = DeflateDecoder::new();
        d.decode(&mut wire, &mut plain)
            .expect("deflate decode of own output");
    }
    assert_eq!(&plain[..], input, "round trip mismatch");
    assert!(wire.is_empty(), "decoder left bytes of a complete stream");
}

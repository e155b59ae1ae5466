//! The compression layers IDENTIFY can put under the V2 protocol: Snappy's
//! framing format and raw DEFLATE, both directions, as byte-in/byte-out
//! codecs that never touch a socket.
//!
//! Shared by nsqd and the client. A connection's writer hands an [`Encoder`]
//! each batch it is about to flush and writes what comes out, so one flush is
//! one Snappy chunk (or one DEFLATE sync flush), as with Go's buffered writer
//! over its compressor. The reader feeds a [`Decoder`] whatever the socket
//! gave it and parses frames or commands from the output. Corrupt input is an
//! error, never a panic: nsqd then closes the connection without an error
//! frame, as Go does when its reader fails.

use bytes::{Buf, BufMut, BytesMut};
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

/// Snappy's stream identifier chunk: type 0xff, length 6, `sNaPpY`.
pub const SNAPPY_STREAM_ID: &[u8] = b"\xff\x06\x00\x00sNaPpY";
/// Largest uncompressed block in one Snappy chunk.
const SNAPPY_MAX_BLOCK: usize = 65536;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CodecError {
    #[error("snappy: corrupt input ({0})")]
    SnappyCorrupt(&'static str),
    #[error("snappy: stream must begin with the stream identifier")]
    SnappyNoStreamId,
    #[error("snappy: checksum mismatch")]
    SnappyChecksum,
    #[error("snappy: {0}")]
    Snappy(String),
    #[error("deflate: {0}")]
    Deflate(String),
}

/// Compression of whole flushed batches (either direction).
// One per compressed connection, owned by its writer task (and boxed on
// its way there), so the size of the Snappy variant costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum Encoder {
    Snappy(SnappyEncoder),
    Deflate(DeflateEncoder),
}

impl Encoder {
    /// Compresses `src` (one flush's worth of frames) onto `dst`.
    pub fn encode(&mut self, src: &[u8], dst: &mut BytesMut) -> Result<(), CodecError> {
        match self {
            Encoder::Snappy(e) => e.encode(src, dst),
            Encoder::Deflate(e) => e.encode(src, dst),
        }
    }
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Encoder::Snappy(_) => "Encoder::Snappy",
            Encoder::Deflate(_) => "Encoder::Deflate",
        })
    }
}

/// Decompression of what the peer sent (either direction).
pub enum Decoder {
    Snappy(SnappyDecoder),
    Deflate(DeflateDecoder),
}

impl Decoder {
    /// Consumes what it can of `src` and appends the plain bytes to `dst`.
    /// Bytes of an incomplete chunk stay in `src` until more arrive.
    pub fn decode(&mut self, src: &mut BytesMut, dst: &mut BytesMut) -> Result<(), CodecError> {
        match self {
            Decoder::Snappy(d) => d.decode(src, dst),
            Decoder::Deflate(d) => d.decode(src, dst),
        }
    }
}

// ---------------------------------------------------------------------------
// Snappy framing format
// ---------------------------------------------------------------------------

/// CRC-32C (Castagnoli), reflected, table-driven; Snappy checksums use it.
fn crc32c(data: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut t = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 {
                    (c >> 1) ^ 0x82F6_3B78
                } else {
                    c >> 1
                };
                k += 1;
            }
            t[i] = c;
            i += 1;
        }
        t
    };
    let mut crc = !0u32;
    for &b in data {
        crc = TABLE[((crc ^ b as u32) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

/// Snappy's masked checksum, so a CRC of data that embeds CRCs stays strong.
pub fn snappy_masked_crc(data: &[u8]) -> u32 {
    let c = crc32c(data);
    (c.rotate_right(15)).wrapping_add(0xa282_ead8)
}

pub struct SnappyEncoder {
    wrote_stream_id: bool,
    raw: snap::raw::Encoder,
    scratch: Vec<u8>,
}

impl Default for SnappyEncoder {
    fn default() -> Self {
        SnappyEncoder::new()
    }
}

impl SnappyEncoder {
    pub fn new() -> SnappyEncoder {
        SnappyEncoder {
            wrote_stream_id: false,
            raw: snap::raw::Encoder::new(),
            scratch: Vec::new(),
        }
    }

    /// One chunk per 64 KiB block; a block is stored uncompressed unless
    /// compression saves at least an eighth (golang/snappy's rule, so small
    /// frames such as `OK` go out as type-0x01 chunks like Go's).
    pub fn encode(&mut self, mut src: &[u8], dst: &mut BytesMut) -> Result<(), CodecError> {
        if src.is_empty() {
            return Ok(());
        }
        if !self.wrote_stream_id {
            dst.extend_from_slice(SNAPPY_STREAM_ID);
            self.wrote_stream_id = true;
        }
        while !src.is_empty() {
            let n = src.len().min(SNAPPY_MAX_BLOCK);
            let (block, rest) = src.split_at(n);
            src = rest;
            let crc = snappy_masked_crc(block);
            self.scratch
                .resize(snap::raw::max_compress_len(block.len()), 0);
            let clen = self
                .raw
                .compress(block, &mut self.scratch)
                .map_err(|e| CodecError::Snappy(e.to_string()))?;
            let (kind, body) = if clen < block.len() - block.len() / 8 {
                (0x00u8, &self.scratch[..clen])
            } else {
                (0x01u8, block)
            };
            let len = (body.len() + 4) as u32;
            dst.reserve(8 + body.len());
            dst.put_u8(kind);
            dst.put_slice(&len.to_le_bytes()[..3]);
            dst.put_u32_le(crc);
            dst.put_slice(body);
        }
        Ok(())
    }
}

#[derive(Default)]
pub struct SnappyDecoder {
    read_stream_id: bool,
    raw: snap::raw::Decoder,
}

impl SnappyDecoder {
    pub fn new() -> SnappyDecoder {
        SnappyDecoder::default()
    }

    pub fn decode(&mut self, src: &mut BytesMut, dst: &mut BytesMut) -> Result<(), CodecError> {
        // The largest legal chunk: a compressed 64 KiB block plus its checksum.
        let max_chunk = snap::raw::max_compress_len(SNAPPY_MAX_BLOCK) + 4;
        while src.len() >= 4 {
            let kind = src[0];
            let len = u32::from_le_bytes([src[1], src[2], src[3], 0]) as usize;
            if len > max_chunk {
                return Err(CodecError::SnappyCorrupt("chunk too long"));
            }
            if src.len() < 4 + len {
                return Ok(());
            }
            let chunk = &src[4..4 + len];
            if !self.read_stream_id && kind != 0xff {
                return Err(CodecError::SnappyNoStreamId);
            }
            match kind {
                0xff => {
                    if chunk != b"sNaPpY" {
                        return Err(CodecError::SnappyCorrupt("bad stream identifier"));
                    }
                    self.read_stream_id = true;
                }
                0x00 | 0x01 => {
                    if len < 4 {
                        return Err(CodecError::SnappyCorrupt("short data chunk"));
                    }
                    let crc = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
                    let data = &chunk[4..];
                    let start = dst.len();
                    if kind == 0x00 {
                        let n = snap::raw::decompress_len(data)
                            .map_err(|_| CodecError::SnappyCorrupt("bad block length"))?;
                        if n > SNAPPY_MAX_BLOCK {
                            return Err(CodecError::SnappyCorrupt("block too large"));
                        }
                        dst.resize(start + n, 0);
                        self.raw
                            .decompress(data, &mut dst[start..])
                            .map_err(|_| CodecError::SnappyCorrupt("bad compressed block"))?;
                    } else {
                        if data.len() > SNAPPY_MAX_BLOCK {
                            return Err(CodecError::SnappyCorrupt("block too large"));
                        }
                        dst.extend_from_slice(data);
                    }
                    if snappy_masked_crc(&dst[start..]) != crc {
                        return Err(CodecError::SnappyChecksum);
                    }
                }
                0x02..=0x7f => return Err(CodecError::SnappyCorrupt("reserved unskippable chunk")),
                // 0x80..=0xfe: skippable chunks and padding
                _ => {}
            }
            src.advance(4 + len);
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Raw DEFLATE
// ---------------------------------------------------------------------------

pub struct DeflateEncoder {
    z: Compress,
}

impl DeflateEncoder {
    /// `level` is the negotiated one, already within `[1, --max-deflate-level]`.
    pub fn new(level: u32) -> DeflateEncoder {
        DeflateEncoder {
            z: Compress::new(Compression::new(level.clamp(1, 9)), false),
        }
    }

    /// Compresses `src` and ends with a sync flush (`00 00 ff ff`), so the
    /// client can inflate everything sent so far, as Go's `flate.Writer.Flush`.
    pub fn encode(&mut self, src: &[u8], dst: &mut BytesMut) -> Result<(), CodecError> {
        let mut input = src;
        loop {
            let start = dst.len();
            let room = input.len() + input.len() / 2 + 64;
            dst.resize(start + room, 0);
            let before_in = self.z.total_in();
            let before_out = self.z.total_out();
            let status = self
                .z
                .compress(input, &mut dst[start..], FlushCompress::Sync)
                .map_err(|e| CodecError::Deflate(e.to_string()))?;
            let consumed = (self.z.total_in() - before_in) as usize;
            let produced = (self.z.total_out() - before_out) as usize;
            dst.truncate(start + produced);
            input = &input[consumed..];
            // zlib's rule: a sync flush is complete once it returns with
            // output space to spare.
            if (input.is_empty() && produced < room) || matches!(status, Status::StreamEnd) {
                return Ok(());
            }
        }
    }
}

pub struct DeflateDecoder {
    z: Decompress,
}

impl Default for DeflateDecoder {
    fn default() -> Self {
        DeflateDecoder::new()
    }
}

impl DeflateDecoder {
    pub fn new() -> DeflateDecoder {
        DeflateDecoder {
            z: Decompress::new(false),
        }
    }

    pub fn decode(&mut self, src: &mut BytesMut, dst: &mut BytesMut) -> Result<(), CodecError> {
        loop {
            let start = dst.len();
            let room = (src.len() * 4).clamp(4096, 1 << 20);
            dst.resize(start + room, 0);
            let before_in = self.z.total_in();
            let before_out = self.z.total_out();
            let status = self
                .z
                .decompress(&src[..], &mut dst[start..], FlushDecompress::Sync)
                .map_err(|e| CodecError::Deflate(e.to_string()))?;
            let consumed = (self.z.total_in() - before_in) as usize;
            let produced = (self.z.total_out() - before_out) as usize;
            dst.truncate(start + produced);
            src.advance(consumed);
            if matches!(status, Status::StreamEnd) {
                // A final block from the client: nothing more can follow.
                src.clear();
                return Ok(());
            }
            // The inflater may stop early with output from its window still
            // pending, so only an idle round means all is decoded.
            if consumed == 0 && produced == 0 {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok_frame() -> Vec<u8> {
        vec![0, 0, 0, 6, 0, 0, 0, 0, b'O', b'K']
    }

    #[test]
    fn snappy_ok_frame_matches_go_bytes() {
        let mut e = SnappyEncoder::new();
        let mut out = BytesMut::new();
        e.encode(&ok_frame(), &mut out).unwrap();
        let mut want = SNAPPY_STREAM_ID.to_vec();
        want.extend_from_slice(&[0x01, 0x0e, 0x00, 0x00, 0x26, 0x98, 0x2b, 0xcf]);
        want.extend_from_slice(&ok_frame());
        assert_eq!(&out[..], &want[..]);
        // The stream identifier comes only once.
        let mut out2 = BytesMut::new();
        e.encode(&ok_frame(), &mut out2).unwrap();
        assert_eq!(out2[0], 0x01);
    }

    #[test]
    fn snappy_round_trip_large_and_compressible() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 7) as u8).collect();
        let mut e = SnappyEncoder::new();
        let mut wire = BytesMut::new();
        e.encode(&data, &mut wire).unwrap();
        assert!(
            wire.len() < data.len() / 4,
            "compressible data is compressed"
        );
        let mut d = SnappyDecoder::new();
        let mut out = BytesMut::new();
        // feed byte-ragged pieces
        let mut src = BytesMut::new();
        for piece in wire.chunks(999) {
            src.extend_from_slice(piece);
            d.decode(&mut src, &mut out).unwrap();
        }
        assert!(src.is_empty());
        assert_eq!(&out[..], &data[..]);
    }

    #[test]
    fn snappy_rejects_bad_input() {
        let mut d = SnappyDecoder::new();
        let mut out = BytesMut::new();
        let mut src = BytesMut::from(&[0x01u8, 0x05, 0, 0, 1, 2, 3, 4, 5][..]);
        assert_eq!(
            d.decode(&mut src, &mut out),
            Err(CodecError::SnappyNoStreamId)
        );
        let mut d = SnappyDecoder::new();
        let mut src = BytesMut::from(SNAPPY_STREAM_ID);
        src.extend_from_slice(&[0x01, 0x05, 0, 0, 1, 2, 3, 4, b'x']);
        assert_eq!(
            d.decode(&mut src, &mut out),
            Err(CodecError::SnappyChecksum)
        );
        let mut d = SnappyDecoder::new();
        let mut src = BytesMut::from(SNAPPY_STREAM_ID);
        src.extend_from_slice(&[0x02, 0x00, 0, 0]);
        assert!(d.decode(&mut src, &mut out).is_err());
        let mut d = SnappyDecoder::new();
        let mut src = BytesMut::from(SNAPPY_STREAM_ID);
        src.extend_from_slice(&[0x00, 0xff, 0xff, 0xff]);
        assert!(d.decode(&mut src, &mut out).is_err());
        // skippable chunks and padding are skipped
        let mut d = SnappyDecoder::new();
        let mut src = BytesMut::from(SNAPPY_STREAM_ID);
        src.extend_from_slice(&[0x80, 0x02, 0, 0, 9, 9, 0xfe, 0x01, 0, 0, 0]);
        let mut out = BytesMut::new();
        d.decode(&mut src, &mut out).unwrap();
        assert!(out.is_empty() && src.is_empty());
    }

    #[test]
    fn deflate_round_trip_with_sync_flush_per_batch() {
        let mut e = DeflateEncoder::new(6);
        let mut d = DeflateDecoder::new();
        let mut wire = BytesMut::new();
        e.encode(&ok_frame(), &mut wire).unwrap();
        assert!(
            wire.ends_with(&[0x00, 0x00, 0xff, 0xff]),
            "sync flush marker: {wire:02x?}"
        );
        let mut out = BytesMut::new();
        d.decode(&mut wire, &mut out).unwrap();
        assert_eq!(&out[..], &ok_frame()[..]);
        let big: Vec<u8> = (0..300_000u32).map(|i| (i * 31 % 251) as u8).collect();
        let mut wire = BytesMut::new();
        e.encode(&big, &mut wire).unwrap();
        let mut out = BytesMut::new();
        let mut src = BytesMut::new();
        for piece in wire.chunks(1000) {
            src.extend_from_slice(piece);
            d.decode(&mut src, &mut out).unwrap();
        }
        assert_eq!(out.len(), big.len());
        assert_eq!(&out[..], &big[..]);
    }

    #[test]
    fn deflate_decodes_go_bytes() {
        // Go nsqd's OK frame after a deflate upgrade, two sync flushes.
        let go = [
            0x62, 0x60, 0x60, 0x60, 0x63, 0x60, 0x60, 0x60, 0xf0, 0xf7, 0x06, 0x00, 0x00, 0x00,
            0xff, 0xff, 0x00, 0x00, 0x00, 0xff, 0xff,
        ];
        let mut d = DeflateDecoder::new();
        let mut src = BytesMut::from(&go[..]);
        let mut out = BytesMut::new();
        d.decode(&mut src, &mut out).unwrap();
        assert_eq!(&out[..], &ok_frame()[..]);
    }

    #[test]
    fn deflate_garbage_is_an_error() {
        let mut d = DeflateDecoder::new();
        let mut src = BytesMut::from(&[0xffu8; 64][..]);
        let mut out = BytesMut::new();
        assert!(d.decode(&mut src, &mut out).is_err());
    }
}

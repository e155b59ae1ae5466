//! Response compression as nsqadmin does it for every response: the first of
//! `gzip` or `deflate` (raw DEFLATE, no zlib wrapper) listed in the request's
//! `Accept-Encoding`, scanning left to right; `Vary: Accept-Encoding` added.

use std::io::Write;

use flate2::write::{DeflateEncoder, GzEncoder};
use flate2::Compression;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Gzip,
    Deflate,
}

impl Encoding {
    pub fn name(self) -> &'static str {
        match self {
            Encoding::Gzip => "gzip",
            Encoding::Deflate => "deflate",
        }
    }
}

/// The encoding to use for a request's `Accept-Encoding` (exact tokens only, as nsqadmin matches them).
pub fn negotiate(accept_encoding: &str) -> Option<Encoding> {
    accept_encoding.split(',').find_map(|e| match e.trim() {
        "gzip" => Some(Encoding::Gzip),
        "deflate" => Some(Encoding::Deflate),
        _ => None,
    })
}

pub fn compress(enc: Encoding, body: &[u8]) -> std::io::Result<Vec<u8>> {
    match enc {
        Encoding::Gzip => {
            let mut e = GzEncoder::new(
                Vec::with_capacity(body.len() / 3 + 32),
                Compression::default(),
            );
            e.write_all(body)?;
            e.finish()
        }
        Encoding::Deflate => {
            let mut e = DeflateEncoder::new(
                Vec::with_capacity(body.len() / 3 + 32),
                Compression::default(),
            );
            e.write_all(body)?;
            e.finish()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn negotiation_order() {
        assert_eq!(negotiate("gzip, deflate, br"), Some(Encoding::Gzip));
        assert_eq!(negotiate("br, deflate, gzip"), Some(Encoding::Deflate));
        assert_eq!(negotiate("gzip;q=1.0"), None);
        assert_eq!(negotiate(""), None);
    }

    #[test]
    fn roundtrip() {
        let z = compress(Encoding::Gzip, b"hello hello hello").unwrap();
        let mut s = String::new();
        flate2::read::GzDecoder::new(&z[..])
            .read_to_string(&mut s)
            .unwrap();
        assert_eq!(s, "hello hello hello");
        let z = compress(Encoding::Deflate, b"abc").unwrap();
        let mut s = String::new();
        flate2::read::DeflateDecoder::new(&z[..])
            .read_to_string(&mut s)
            .unwrap();
        assert_eq!(s, "abc");
    }
}

//! One log record on disk: framing (length, CRC32) and the body of a Raft
//! log entry. Never: files, offsets or openraft's storage traits (the
//! segment and the store own those).
//!
//! ```text
//! u32 BE   body length n
//! u32 BE   CRC32 (IEEE, crc32fast) of the body
//! body:    u64 BE index | u64 BE term | u64 BE leader node id | u8 kind | rest
//!          kind 0 blank (rest empty), 1 normal (rest: the payload as given),
//!          2 membership (rest: postcard of openraft's Membership)
//! ```
//!
//! A normal entry's payload is stored as the caller gave it, never
//! re-encoded: nsqd's message batches go to disk as they are.

use bytes::{BufMut, Bytes, BytesMut};
use openraft::{CommittedLeaderId, EntryPayload, LogId, Membership};

use crate::{Entry, Member, NodeId, Payload, TypeConfig};

/// Bytes before the body: length and CRC.
pub const HEADER: usize = 8;
/// Bytes of the body before the payload: index, term, node, kind.
const BODY_FIXED: usize = 25;
/// The largest body accepted when reading; a length past it is garbage.
pub const MAX_BODY: u32 = 256 << 20;

const KIND_BLANK: u8 = 0;
const KIND_NORMAL: u8 = 1;
const KIND_MEMBERSHIP: u8 = 2;

/// Why a record's bytes are not an entry.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("record body of {0} bytes is shorter than its fixed part")]
    Short(usize),
    #[error("unknown entry kind {0}")]
    Kind(u8),
    #[error("membership does not decode: {0}")]
    Membership(postcard::Error),
    #[error("entry of {0} bytes is larger than a record can hold")]
    TooLarge(usize),
}

/// Appends the framed record of `entry` to `buf`.
pub fn encode(entry: &Entry, buf: &mut BytesMut) -> Result<(), RecordError> {
    let membership;
    let (kind, rest): (u8, &[u8]) = match &entry.payload {
        EntryPayload::Blank => (KIND_BLANK, &[]),
        EntryPayload::Normal(p) => (KIND_NORMAL, &p.0[..]),
        EntryPayload::Membership(m) => {
            membership = postcard::to_stdvec(m).map_err(RecordError::Membership)?;
            (KIND_MEMBERSHIP, &membership[..])
        }
    };
    let n = BODY_FIXED + rest.len();
    if n > MAX_BODY as usize {
        return Err(RecordError::TooLarge(n));
    }
    buf.reserve(HEADER + n);
    let start = buf.len();
    buf.put_u32(n as u32);
    buf.put_u32(0);
    buf.put_u64(entry.log_id.index);
    buf.put_u64(entry.log_id.leader_id.term);
    buf.put_u64(entry.log_id.leader_id.node_id);
    buf.put_u8(kind);
    buf.put_slice(rest);
    let crc = crc32fast::hash(&buf[start + HEADER..]);
    buf[start + 4..start + HEADER].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

/// The entry in a record body whose CRC was already checked. A normal
/// entry's payload shares `body`'s allocation.
pub fn decode(body: Bytes) -> Result<Entry, RecordError> {
    if body.len() < BODY_FIXED {
        return Err(RecordError::Short(body.len()));
    }
    let u64_at = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&body[at..at + 8]);
        u64::from_be_bytes(b)
    };
    let log_id = LogId::new(CommittedLeaderId::new(u64_at(8), u64_at(16)), u64_at(0));
    let payload = match body[24] {
        KIND_BLANK => EntryPayload::Blank,
        KIND_NORMAL => EntryPayload::Normal(Payload(body.slice(BODY_FIXED..))),
        KIND_MEMBERSHIP => {
            let m: Membership<NodeId, Member> =
                postcard::from_bytes(&body[BODY_FIXED..]).map_err(RecordError::Membership)?;
            EntryPayload::Membership(m)
        }
        k => return Err(RecordError::Kind(k)),
    };
    Ok(openraft::Entry::<TypeConfig> { log_id, payload })
}

/// The index a record body names (the body is at least the fixed part).
pub fn index_of(body: &[u8]) -> Option<u64> {
    let b: [u8; 8] = body.get(0..8)?.try_into().ok()?;
    Some(u64::from_be_bytes(b))
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;

    fn roundtrip(e: Entry) {
        let mut buf = BytesMut::new();
        encode(&e, &mut buf).unwrap();
        let n = u32::from_be_bytes(buf[0..4].try_into().unwrap()) as usize;
        assert_eq!(n + HEADER, buf.len());
        let crc = u32::from_be_bytes(buf[4..8].try_into().unwrap());
        assert_eq!(crc, crc32fast::hash(&buf[HEADER..]));
        let body = buf.freeze().slice(HEADER..);
        assert_eq!(index_of(&body), Some(e.log_id.index));
        assert_eq!(decode(body).unwrap(), e);
    }

    #[test]
    fn every_kind_roundtrips() {
        let id = LogId::new(CommittedLeaderId::new(7, 3), 42);
        roundtrip(Entry {
            log_id: id,
            payload: EntryPayload::Blank,
        });
        roundtrip(Entry {
            log_id: id,
            payload: EntryPayload::Normal(Payload(Bytes::from_static(b"batch"))),
        });
        let nodes: BTreeMap<NodeId, Member> = [(1, Member::new("127.0.0.1:1"))].into();
        let m = Membership::new(vec![BTreeSet::from([1])], nodes);
        roundtrip(Entry {
            log_id: id,
            payload: EntryPayload::Membership(m),
        });
    }

    #[test]
    fn bad_bodies_are_errors() {
        assert!(matches!(
            decode(Bytes::from_static(b"short")),
            Err(RecordError::Short(5))
        ));
        let mut body = vec![0u8; BODY_FIXED];
        body[24] = 9;
        assert!(matches!(
            decode(Bytes::from(body)),
            Err(RecordError::Kind(9))
        ));
    }
}

//! The frames between members: what openraft's RPCs look like on a
//! connection. Never: sockets or Raft handles.
//!
//! ```text
//! u32 BE   length n of what follows (12 + body)
//! u32 BE   group id
//! u64 BE   request id (an answer carries the id of its request)
//! body     postcard of Rpc (member → peer) or Reply (peer → member)
//! ```
//!
//! The first frame a caller sends on a connection is `Hello`: the listener
//! answers whether the caller's cluster configuration is its own, and
//! closes the connection if not (`hello.rs`).
//!
//! Besides openraft's RPCs, `Forward` carries a payload from a member that
//! does not lead a group to the one that does (`crate::propose`), on the
//! same connections, so it is TLS-verified and peer-checked like them.
//!
//! `Pulse` asks a peer what it knows of each of its groups, one request
//! for all of them, so that idle groups need no heartbeats of their own
//! (`crate::quiet`).
//!
//! A connection carries every group's RPCs to one peer, so the number of
//! connections is the number of peers, not peers × groups. Requests are
//! answered in any order (a slow snapshot install does not hold up another
//! group's heartbeat); the id pairs them.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};

use super::hello::{Hello, Probed, Welcome};
use crate::answer::ForwardError;
use crate::quiet::GroupPulse;
use crate::{GroupId, NodeId, Payload, TypeConfig};

/// Bytes of a frame before its body, after the length.
const FIXED: usize = 12;
/// The largest frame accepted: a batch of appended entries or a snapshot
/// chunk, with room to spare. A larger length is a broken peer.
pub const MAX_FRAME: u32 = 64 << 20;

/// A request from a group's leader (or candidate) to a peer, or a
/// proposal forwarded to the group's leader. New kinds go at the end:
/// postcard numbers them in order.
#[derive(Debug, Serialize, Deserialize)]
pub enum Rpc {
    Append(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    Snapshot(InstallSnapshotRequest<TypeConfig>),
    /// Propose `payload` to the group, waiting at most `timeout_ms` for it
    /// to be committed.
    Forward {
        payload: Payload,
        timeout_ms: u64,
    },
    /// The first frame of every connection (`hello.rs`).
    Hello(Hello),
    /// What the peer knows of each of its groups (`crate::quiet`); the
    /// frame's group id is not used.
    Pulse,
    /// Who the peer is (a first frame, answered and closed): how a member
    /// asked to add another checks its address (protocol 3).
    Probe,
}

/// A peer's answer to an [`Rpc`].
#[derive(Debug, Serialize, Deserialize)]
pub enum Reply {
    Append(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    Snapshot(Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>),
    /// The peer has no such group (a configuration mismatch).
    NoGroup(GroupId),
    /// The log index a forwarded payload was committed at.
    Forward(Result<u64, ForwardError>),
    /// Whether the caller may go on; `Err` says how its configuration
    /// differs (the connection is closed after it).
    Hello(Result<Welcome, String>),
    /// The peer does not vote in the group yet (it replaces a member whose
    /// disk was lost and has not caught up, or is still joining).
    Abstain(String),
    /// The answer to a pulse: every group of the peer, in id order.
    Pulse(Vec<GroupPulse>),
    /// The answer to a probe.
    Probe(Probed),
}

/// A frame's header and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub group: GroupId,
    pub id: u64,
    pub body: Bytes,
}

/// Why bytes are not a frame.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame length {0} is out of range")]
    Length(u32),
    #[error("frame body does not decode: {0}")]
    Body(#[from] postcard::Error),
}

/// Appends the frame of `body` to `out`.
pub fn encode<T: Serialize>(
    group: GroupId,
    id: u64,
    body: &T,
    out: &mut BytesMut,
) -> Result<(), FrameError> {
    encode_with_trailer(group, id, body, &[], out)
}

/// [`encode`], with `trailer` after the body: bytes a reader of
/// [`body`] never sees (postcard stops where its value ends), so a frame
/// can say more to newer builds without older ones failing on it
/// (`hello.rs`'s protocol).
pub fn encode_with_trailer<T: Serialize>(
    group: GroupId,
    id: u64,
    body: &T,
    trailer: &[u8],
    out: &mut BytesMut,
) -> Result<(), FrameError> {
    let start = out.len();
    out.put_u32(0);
    out.put_u32(group);
    out.put_u64(id);
    let out_body = postcard::to_extend(body, Vec::new())?;
    out.put_slice(&out_body);
    out.put_slice(trailer);
    let n = out.len() - start - 4;
    if n > MAX_FRAME as usize {
        out.truncate(start);
        return Err(FrameError::Length(n as u32));
    }
    out[start..start + 4].copy_from_slice(&(n as u32).to_be_bytes());
    Ok(())
}

/// Splits the first whole frame off `buf`, if there is one.
pub fn decode(buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let n = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    if (n as usize) < FIXED || n > MAX_FRAME {
        return Err(FrameError::Length(n));
    }
    if buf.len() < 4 + n as usize {
        buf.reserve(4 + n as usize - buf.len());
        return Ok(None);
    }
    buf.advance(4);
    let mut f = buf.split_to(n as usize);
    let group = f.get_u32();
    let id = f.get_u64();
    Ok(Some(Frame {
        group,
        id,
        body: f.freeze(),
    }))
}

/// The body of a frame as `T`.
pub fn body<'a, T: Deserialize<'a>>(frame: &'a Frame) -> Result<T, FrameError> {
    Ok(postcard::from_bytes(&frame.body)?)
}

/// The body of a frame as `T`, and its trailer: what follows the value
/// (empty from a sender that wrote none).
pub fn body_and_trailer<'a, T: Deserialize<'a>>(
    frame: &'a Frame,
) -> Result<(T, &'a [u8]), FrameError> {
    Ok(postcard::take_from_bytes(&frame.body)?)
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, LogId, Vote};

    use super::*;

    #[test]
    fn frames_split_whole_and_keep_the_rest() {
        let vote = VoteRequest::new(
            Vote::new(3, 2),
            Some(LogId::new(CommittedLeaderId::new(2, 1), 9)),
        );
        let mut buf = BytesMut::new();
        encode(7, 42, &Rpc::Vote(vote.clone()), &mut buf).unwrap();
        encode(8, 43, &Reply::NoGroup(8), &mut buf).unwrap();
        let whole = buf.clone();
        // Byte by byte: nothing until a frame is whole.
        let mut partial = BytesMut::new();
        let mut frames = Vec::new();
        for b in whole.iter() {
            partial.put_u8(*b);
            while let Some(f) = decode(&mut partial).unwrap() {
                frames.push(f);
            }
        }
        assert_eq!(frames.len(), 2);
        assert!(partial.is_empty());
        assert_eq!((frames[0].group, frames[0].id), (7, 42));
        match body::<Rpc>(&frames[0]).unwrap() {
            Rpc::Vote(v) => assert_eq!(v, vote),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            body::<Reply>(&frames[1]).unwrap(),
            Reply::NoGroup(8)
        ));
    }

    #[test]
    fn forwards_round_trip() {
        let mut buf = BytesMut::new();
        let rpc = Rpc::Forward {
            payload: Payload(bytes::Bytes::from_static(b"entry")),
            timeout_ms: 5000,
        };
        encode(3, 9, &rpc, &mut buf).unwrap();
        encode(3, 9, &Reply::Forward(Ok(17)), &mut buf).unwrap();
        encode(
            3,
            10,
            &Reply::Forward(Err(ForwardError::NotLeader)),
            &mut buf,
        )
        .unwrap();
        let f = decode(&mut buf).unwrap().unwrap();
        match body::<Rpc>(&f).unwrap() {
            Rpc::Forward {
                payload,
                timeout_ms,
            } => assert_eq!((&payload.0[..], timeout_ms), (&b"entry"[..], 5000)),
            other => panic!("{other:?}"),
        }
        let f = decode(&mut buf).unwrap().unwrap();
        assert!(matches!(body::<Reply>(&f).unwrap(), Reply::Forward(Ok(17))));
        let f = decode(&mut buf).unwrap().unwrap();
        assert!(matches!(
            body::<Reply>(&f).unwrap(),
            Reply::Forward(Err(ForwardError::NotLeader))
        ));
    }

    #[test]
    fn bad_lengths_are_errors_not_allocations() {
        let mut buf = BytesMut::from(&[0xff, 0xff, 0xff, 0xff, 0, 0][..]);
        assert!(matches!(
            decode(&mut buf),
            Err(FrameError::Length(u32::MAX))
        ));
        let mut buf = BytesMut::from(&[0, 0, 0, 3, 1, 2, 3][..]);
        assert!(matches!(decode(&mut buf), Err(FrameError::Length(3))));
    }
}

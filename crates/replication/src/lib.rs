//! The replicated log of nsq-rs's opt-in replicated topics, on openraft.
//!
//! * [`log`]: one Raft group's log on disk — segment files with an
//!   in-memory index, group-committed fsyncs, truncation and purging by
//!   segment, torn-tail recovery.
//! * [`store`]: openraft's log storage on that log (vote and committed
//!   index beside it, written durably).
//! * [`machine`]: the state machine: tracks what is applied and the
//!   membership, and hands every applied entry to its subscriber.
//! * [`network`]: openraft's RPCs between members over one TCP (or TLS)
//!   connection per peer shared by every group, refusing connections from
//!   addresses that are not configured peers.
//! * [`group`]: a member's Raft groups, started on those parts.
//! * [`standing`]: whether a member may vote, so one that came back with
//!   an empty disk does not undo what the groups committed; [`identity`]:
//!   its incarnation and its peers', on disk.
//! * [`quiet`]: when an idle group's leader stops heartbeating and when a
//!   member may campaign, from one pulse per peer for all groups; the same
//!   pulses say who leads the groups a member does not vote in
//!   ([`Pulses`]).
//! * [`placement`]: which members vote in which group: a set of groups
//!   of the cluster's size, and sets of smaller odd sizes, as the
//!   [`cluster_map`] says; [`maps`]: the map this member holds, on disk
//!   and shared; [`membership`]: members added and removed online, each
//!   group's openraft membership made what the map says.
//! * [`propose`]: a payload proposed from any member: written by the
//!   group's leader, forwarded to it from the others, answered once
//!   committed or refused after a timeout; [`answer`]: a member's side of
//!   a forwarded proposal and of a peer's pulse.
//! * [`snapshot`]: a snapshot asked for by the subscriber, holding its
//!   image of what the entries made, so openraft may purge the log below
//!   it.
//! * [`committed`]: a group's committed entries read back in bounded
//!   chunks (a new leader reads the batches its channels have not
//!   finished).
//!
//! Never: channels, clients or what a payload means. Entries carry opaque
//! payloads (a topic's message batch, a channel event: nsqd's core defines
//! and interprets them); this crate stores, replicates and hands them back
//! in order. Design and formats: docs/replication.md.

#![forbid(unsafe_code)]

pub mod answer;
pub mod cluster_map;
pub mod committed;
pub mod group;
pub mod identity;
pub mod log;
pub mod machine;
pub mod maps;
pub mod membership;
pub mod network;
pub mod placement;
pub mod propose;
mod pulse;
pub mod quiet;
mod roll_call;
pub mod snapshot;
pub mod standing;
pub mod store;

pub use pulse::Pulses;

use std::fmt;
use std::io::Cursor;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// A member of the replication cluster, as Raft names it.
pub type NodeId = u64;

/// A Raft group of a member (a fixed number per host; topics are placed
/// onto them).
pub type GroupId = u32;

/// What Raft knows of a member: the address of its cluster listener.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub addr: String,
}

impl Member {
    pub fn new(addr: impl Into<String>) -> Member {
        Member { addr: addr.into() }
    }
}

impl fmt::Display for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.addr)
    }
}

/// An entry's opaque payload: stored, replicated and applied as given.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Payload(pub Bytes);

openraft::declare_raft_types!(
    /// openraft's types for nsq-rs's replicated log.
    pub TypeConfig:
        D = Payload,
        // What applying an entry answers its proposer: the entry's index.
        R = u64,
        NodeId = u64,
        Node = Member,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
        Responder = openraft::impls::OneshotResponder<TypeConfig>,
);

/// A log entry of this crate's groups.
pub type Entry = openraft::Entry<TypeConfig>;
/// A Raft group's handle.
pub type Raft = openraft::Raft<TypeConfig>;
/// openraft's storage error for this crate's node ids.
pub type StorageError = openraft::StorageError<NodeId>;

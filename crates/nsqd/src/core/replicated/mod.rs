//! The rules of replicated topics (nsq-rs, opt-in; docs/replication.md),
//! as plain state machines like the rest of the core: the entries of a
//! topic's Raft group and their encoding ([`entry`]), where a topic is
//! placed and whether a `replicas=` can be granted ([`replicas`]), what a
//! committed channel or topic entry changes on a member
//! ([`channel_entries`], [`topic_entries`]), how far each channel has
//! come through the group's log and what a snapshot holds of it, with the
//! group's depth limits ([`progress`]), which member serves a topic to consumers ([`serving`])
//! and what a member shows of each replica's lag ([`replica_lag`]).
//!
//! Never: Raft, the network, the disk or the clock (the server's
//! replication wing, `server::replicated`, runs the member and does what
//! these rules answer). Nothing of NSQ's plain path depends on this
//! module; the one rule both sides need, which channels of a replicated
//! topic its group keeps ([`replicates`]), is the plain channel's
//! (`super::channel::replicates`: those channels keep their FINs).

pub mod channel_entries;
pub mod entry;
pub mod progress;
pub mod replay;
pub mod replica_lag;
pub mod replicas;
pub mod serving;
pub mod topic_entries;

pub use channel_entries::replicates;

//! What a channel call leaves for the server to carry out: frames per
//! client (memory, done under the channel's lock) and disk work (done with
//! no lock held, then reported back).
//!
//! Owns the shapes only; the channel state machine fills them
//! ([`super::channel`]) and the server empties them. Never: decides
//! anything.

use bytes::BytesMut;
use nsq_protocol::{Message, MessageId};

use super::deferred::DeferredWork;
use super::ids::ClientId;
use super::queue::Refill;

/// A sweep of a backend for expired messages (nsq-rs `max_age`) for the
/// server to do: take the records at the head of
/// the backend published before `before_ns` (Unix ns), at most `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackendExpiry {
    pub before_ns: i64,
    /// Their bodies are wanted (the channel dead-letters what expires);
    /// else the disk queue skips them without reading them.
    pub bodies: bool,
    pub max: usize,
}

/// What the server must carry out after a call. Frames are taken with
/// [`super::Channel::flush_deliveries`], disk work with
/// [`super::Channel::take_disk_work`].
#[derive(Debug, Default)]
pub(super) struct Effects {
    /// Frames encoded for each client during this call, in order.
    pub(super) deliveries: Vec<(ClientId, BytesMut)>,
    /// Emptied frame buffers, kept for the next call.
    pub(super) spare: Vec<BytesMut>,
    /// Messages past the memory bound, to append to the backend in order.
    pub(super) append: Vec<Message>,
    /// Messages that used up their attempts.
    pub(super) dead_letters: Vec<Message>,
    /// Backend records this channel is done with.
    pub(super) acks: Vec<u64>,
    /// Backend records of `dead_letters`, done with once they are published.
    pub(super) dead_letter_acks: Vec<(MessageId, u64)>,
    pub(super) refill: Option<Refill>,
    /// Oldest backend records to drop (`drop-oldest`).
    pub(super) skip: u64,
    /// Expired backend records to take (`max_age`).
    pub(super) expire: Option<BackendExpiry>,
    /// An earlier deadline than the timer sleeps toward appeared.
    pub(super) wake: bool,
}

/// Backend work for the server, to do with no lock held and report back
/// ([`super::Channel::appended`], [`super::Channel::skipped`],
/// [`super::Channel::refilled`]).
#[derive(Debug, Default)]
pub struct DiskWork {
    pub append: Vec<Message>,
    pub refill: Option<Refill>,
    /// Messages past `max_attempts`, to publish to the dead-letter topic
    /// (those refused go back with [`super::Channel::dead_letters_refused`]).
    pub dead_letters: Vec<Message>,
    /// Backend records (by read number) to acknowledge once `append` is
    /// written.
    pub acks: Vec<u64>,
    /// Backend records of `dead_letters`, to acknowledge once they are
    /// published.
    pub dead_letter_acks: Vec<(MessageId, u64)>,
    /// How many of the oldest backend records to read and drop (a
    /// `drop-oldest` limit), before any refill.
    pub skip: u64,
    /// The expired records at the head of the backend to take (nsq-rs,
    /// `max_age`), before any refill; reported back with
    /// [`super::Channel::backend_expired`].
    pub expire: Option<BackendExpiry>,
    /// Run files of spilled deferred messages to write, load and delete
    /// (nsq-rs, `--deferred-spill`), reported back with
    /// [`super::Channel::spilled`] and [`super::Channel::loaded`].
    pub deferred: DeferredWork,
}

impl DiskWork {
    pub fn is_empty(&self) -> bool {
        self.append.is_empty()
            && self.refill.is_none()
            && self.dead_letters.is_empty()
            && self.acks.is_empty()
            && self.skip == 0
            && self.expire.is_none()
            && self.deferred.is_empty()
    }
}

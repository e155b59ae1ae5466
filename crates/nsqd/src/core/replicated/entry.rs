//! The entries of a replicated topic's Raft group and their encoding: what
//! a payload of the replication crate means to nsqd. Never: Raft, the
//! network or applying an entry (the server applies what is committed;
//! docs/replication.md, "Entries").
//!
//! A payload is a version byte, a kind byte, then the kind's fields, all
//! integers big-endian:
//!
//! ```text
//! u8 version (1) | u8 kind | fields
//! name      u8 length | UTF-8 bytes        (NSQ names are at most 64 bytes)
//! 1 TopicCreate    topic | u8 replicas
//! 2 Publish        topic | u32 count | count × message
//!   message        16-byte id | i64 timestamp ns | u64 defer ms | u32 n | n body bytes
//! 3 ChannelCreate  topic | channel
//! 4 ChannelDelete  topic | channel
//! 5 ChannelPause   topic | channel | u8 paused (0 or 1)
//! 6 ChannelEmpty   topic | channel | u64 up to (log index)
//! 7 Finished       topic | channel | u64 cursor index | u32 cursor offset | u32 count | count × 16-byte id
//! 8 TopicDelete    topic
//! 9 Serving        u64 node | name address (host:port, at most 255 bytes)
//! 10 TopicPause    topic | u8 paused (0 or 1)
//! 11 TopicEmpty    topic
//! 12 Deferred      topic | channel | u32 count | count × (16-byte id | i64 due, Unix ms)
//! 15 Limit         topic | name channel (length 0: the topic's own) | u64 max_depth | u8 policy (0 reject, 1 drop-oldest)
//! 13 ChannelReset  topic | channel | u64 to (log index) | u8 only new (0 or 1)
//! 14 Retention     topic | u64 age ms | u64 bytes (0: no bound of that kind)
//! ```
//!
//! Hand-written rather than serde: decoding slices each body out of the
//! payload's `Bytes` (no copy of a batch that may be megabytes), the layout
//! is fixed by this file rather than by a serde format's version, and
//! nsqd needs no binary serde format for it. Every decoding failure is a
//! [`DecodeError`]; nothing read from the log can panic here.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use nsq_protocol::message::MESSAGE_ID_LEN;
use nsq_protocol::MessageId;

use crate::core::limits::{Limit, Policy};

/// The encoding this nsqd writes and reads.
pub const VERSION: u8 = 1;

const TOPIC_CREATE: u8 = 1;
const PUBLISH: u8 = 2;
const CHANNEL_CREATE: u8 = 3;
const CHANNEL_DELETE: u8 = 4;
const CHANNEL_PAUSE: u8 = 5;
const CHANNEL_EMPTY: u8 = 6;
const FINISHED: u8 = 7;
const TOPIC_DELETE: u8 = 8;
const SERVING: u8 = 9;
const TOPIC_PAUSE: u8 = 10;
const TOPIC_EMPTY: u8 = 11;
const DEFERRED: u8 = 12;
const LIMIT: u8 = 15;
const CHANNEL_RESET: u8 = 13;
const RETENTION: u8 = 14;

/// The last kind a member of replication protocol 1 reads: the kinds
/// after it came with protocol 2.
const LAST_OF_PROTOCOL_1: u8 = DEFERRED;

/// The replication protocol (`nsq_replication::network::hello::PROTOCOL`)
/// a member needs to read `payload`: every kind after `Deferred`, and any
/// other encoding version, needs 2. A member proposes an entry only when
/// every member speaks what it needs, so a member of the previous build
/// never meets a kind it cannot read during a rolling upgrade. (A kind
/// that needs protocol 3 will be named here.)
pub fn protocol_of(payload: &[u8]) -> u32 {
    match payload {
        [VERSION, kind, ..] if *kind <= LAST_OF_PROTOCOL_1 => 1,
        _ => 2,
    }
}

/// Bytes of a published message before its body.
const MESSAGE_FIXED: usize = MESSAGE_ID_LEN + 8 + 8 + 4;

/// A message of a `Publish` batch, as every replica holds it: the leader
/// assigns id and timestamp before proposing, so all replicas agree.
/// Attempts are not replicated (they are a channel's, in flight).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    pub id: MessageId,
    /// Publish time, Unix nanoseconds.
    pub timestamp: i64,
    /// A DPUB's delay in milliseconds (0: none); with the timestamp, the
    /// moment a new leader delivers it.
    pub defer_ms: u64,
    pub body: Bytes,
}

/// A channel's position in the topic's log: the oldest message it has not
/// finished, as the log index of its batch and its place in that batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cursor {
    pub index: u64,
    pub offset: u32,
}

/// One committed change to a replicated topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// The topic exists, with `replicas` replicas, on every member.
    TopicCreate {
        topic: String,
        replicas: u8,
    },
    /// One PUB/MPUB/DPUB/HTTP publish, committed whole or not at all.
    Publish {
        topic: String,
        messages: Vec<Published>,
    },
    ChannelCreate {
        topic: String,
        channel: String,
    },
    ChannelDelete {
        topic: String,
        channel: String,
    },
    ChannelPause {
        topic: String,
        channel: String,
        paused: bool,
    },
    /// Everything at or below log index `up_to` is finished on the channel.
    ChannelEmpty {
        topic: String,
        channel: String,
        up_to: u64,
    },
    /// A channel's progress: its cursor, and the ids finished above it.
    Finished {
        topic: String,
        channel: String,
        cursor: Cursor,
        ids: Vec<MessageId>,
    },
    /// Messages a consumer requeued with a delay (REQ): each is due on
    /// the channel at its time (Unix ms), not before, wherever it is
    /// delivered next.
    Deferred {
        topic: String,
        channel: String,
        until: Vec<(MessageId, i64)>,
    },
    /// The channel moves to log index `to` (replay; made if missing; with
    /// `only_new` one that exists is left): `progress_retention.rs`.
    ChannelReset {
        topic: String,
        channel: String,
        to: u64,
        only_new: bool,
    },
    /// How long (ms) and how much (body bytes) of the topic's finished
    /// messages the group's log keeps; 0 and 0: none (NSQ's behaviour).
    Retention {
        topic: String,
        age_ms: u64,
        bytes: u64,
    },
    TopicDelete {
        topic: String,
    },
    /// The topic is paused (it hands nothing to its channels) or not, on
    /// every member.
    TopicPause {
        topic: String,
        paused: bool,
    },
    /// The topic's own queue is emptied where it holds messages (the
    /// leader).
    TopicEmpty {
        topic: String,
    },
    /// The group's depth limit of the topic (`channel` None) or of one of
    /// its channels: every member enforces the same one, counted on what
    /// the group holds unfinished (`progress_limits.rs`).
    Limit {
        topic: String,
        channel: Option<String>,
        limit: Limit,
    },
    /// Member `node` leads the group this entry is in and serves its
    /// topics to consumers at `address` (its broadcast address and TCP
    /// port, what it registers with the lookupds): written by a member
    /// when it gains a group, so the others can name that address when
    /// they refuse a SUB. Not a topic's entry.
    Serving {
        node: u64,
        address: String,
    },
}

/// Why an entry cannot be encoded (a caller passed what NSQ never allows).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("{what} name is {len} bytes, more than 255")]
    NameTooLong { what: &'static str, len: usize },
    #[error("{what}: {len} is more than a u32 holds")]
    TooLong { what: &'static str, len: usize },
}

/// Why a payload is not an entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("empty payload")]
    Empty,
    #[error("unknown entry encoding version {0}")]
    Version(u8),
    #[error("unknown entry kind {0}")]
    Kind(u8),
    #[error("payload ends inside the {0}")]
    Truncated(&'static str),
    #[error("{0} is not UTF-8")]
    Utf8(&'static str),
    #[error("paused flag {0} is neither 0 nor 1")]
    Flag(u8),
    #[error("max_depth policy {0} is neither 0 (reject) nor 1 (drop-oldest)")]
    Policy(u8),
    #[error("{0} bytes after the entry")]
    Trailing(usize),
}

impl Entry {
    /// The topic the entry changes (which also places it on its group);
    /// None for an entry of the group itself (`Serving`).
    pub fn topic(&self) -> Option<&str> {
        Some(match self {
            Entry::TopicCreate { topic, .. }
            | Entry::Publish { topic, .. }
            | Entry::ChannelCreate { topic, .. }
            | Entry::ChannelDelete { topic, .. }
            | Entry::ChannelPause { topic, .. }
            | Entry::ChannelEmpty { topic, .. }
            | Entry::Finished { topic, .. }
            | Entry::Deferred { topic, .. }
            | Entry::ChannelReset { topic, .. }
            | Entry::Retention { topic, .. }
            | Entry::TopicDelete { topic }
            | Entry::TopicPause { topic, .. }
            | Entry::TopicEmpty { topic }
            | Entry::Limit { topic, .. } => topic,
            Entry::Serving { .. } => return None,
        })
    }

    /// The entry's payload.
    pub fn encode(&self) -> Result<Bytes, EncodeError> {
        let mut out = BytesMut::with_capacity(self.encoded_hint());
        out.put_u8(VERSION);
        match self {
            Entry::TopicCreate { topic, replicas } => {
                out.put_u8(TOPIC_CREATE);
                put_name(&mut out, "topic", topic)?;
                out.put_u8(*replicas);
            }
            Entry::Publish { topic, messages } => {
                out.put_u8(PUBLISH);
                put_name(&mut out, "topic", topic)?;
                out.put_u32(count("messages", messages.len())?);
                for m in messages {
                    out.put_slice(&m.id.0);
                    out.put_i64(m.timestamp);
                    out.put_u64(m.defer_ms);
                    out.put_u32(count("body", m.body.len())?);
                    out.put_slice(&m.body);
                }
            }
            Entry::ChannelCreate { topic, channel } => {
                out.put_u8(CHANNEL_CREATE);
                put_names(&mut out, topic, channel)?;
            }
            Entry::ChannelDelete { topic, channel } => {
                out.put_u8(CHANNEL_DELETE);
                put_names(&mut out, topic, channel)?;
            }
            Entry::ChannelPause {
                topic,
                channel,
                paused,
            } => {
                out.put_u8(CHANNEL_PAUSE);
                put_names(&mut out, topic, channel)?;
                out.put_u8(u8::from(*paused));
            }
            Entry::ChannelEmpty {
                topic,
                channel,
                up_to,
            } => {
                out.put_u8(CHANNEL_EMPTY);
                put_names(&mut out, topic, channel)?;
                out.put_u64(*up_to);
            }
            Entry::Finished {
                topic,
                channel,
                cursor,
                ids,
            } => {
                out.put_u8(FINISHED);
                put_names(&mut out, topic, channel)?;
                out.put_u64(cursor.index);
                out.put_u32(cursor.offset);
                out.put_u32(count("ids", ids.len())?);
                for id in ids {
                    out.put_slice(&id.0);
                }
            }
            Entry::Deferred {
                topic,
                channel,
                until,
            } => {
                out.put_u8(DEFERRED);
                put_names(&mut out, topic, channel)?;
                out.put_u32(count("deferred ids", until.len())?);
                for (id, due) in until {
                    out.put_slice(&id.0);
                    out.put_i64(*due);
                }
            }
            Entry::ChannelReset {
                topic,
                channel,
                to,
                only_new,
            } => {
                out.put_u8(CHANNEL_RESET);
                put_names(&mut out, topic, channel)?;
                out.put_u64(*to);
                out.put_u8(u8::from(*only_new));
            }
            Entry::Retention {
                topic,
                age_ms,
                bytes,
            } => {
                out.put_u8(RETENTION);
                put_name(&mut out, "topic", topic)?;
                out.put_u64(*age_ms);
                out.put_u64(*bytes);
            }
            Entry::TopicDelete { topic } => {
                out.put_u8(TOPIC_DELETE);
                put_name(&mut out, "topic", topic)?;
            }
            Entry::TopicPause { topic, paused } => {
                out.put_u8(TOPIC_PAUSE);
                put_name(&mut out, "topic", topic)?;
                out.put_u8(u8::from(*paused));
            }
            Entry::TopicEmpty { topic } => {
                out.put_u8(TOPIC_EMPTY);
                put_name(&mut out, "topic", topic)?;
            }
            Entry::Limit {
                topic,
                channel,
                limit,
            } => {
                out.put_u8(LIMIT);
                put_name(&mut out, "topic", topic)?;
                put_name(&mut out, "channel", channel.as_deref().unwrap_or(""))?;
                put_limit(&mut out, limit);
            }
            Entry::Serving { node, address } => {
                out.put_u8(SERVING);
                out.put_u64(*node);
                put_name(&mut out, "address", address)?;
            }
        }
        Ok(out.freeze())
    }

    /// What [`Entry::encode`] will need, so a batch is written without
    /// growing its buffer.
    fn encoded_hint(&self) -> usize {
        let names = 2 + 2 * 256;
        match self {
            Entry::Publish { messages, .. } => {
                names
                    + 4
                    + messages
                        .iter()
                        .map(|m| MESSAGE_FIXED + m.body.len())
                        .sum::<usize>()
            }
            Entry::Finished { ids, .. } => names + 16 + ids.len() * MESSAGE_ID_LEN,
            Entry::Deferred { until, .. } => names + 4 + until.len() * (MESSAGE_ID_LEN + 8),
            _ => names + 8,
        }
    }

    /// The topic and message count of a `Publish` payload, read without
    /// decoding its messages (a leader checks a forwarded publish against
    /// its group's depth limits); None for any other payload.
    pub fn published(payload: &[u8]) -> Option<(&str, u64)> {
        let [VERSION, PUBLISH, len, rest @ ..] = payload else {
            return None;
        };
        let (name, rest) = rest.split_at_checked(*len as usize)?;
        let count = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?);
        Some((std::str::from_utf8(name).ok()?, u64::from(count)))
    }

    /// The entry in `payload`; the bodies of a `Publish` share its bytes.
    pub fn decode(mut payload: Bytes) -> Result<Entry, DecodeError> {
        let buf = &mut payload;
        if !buf.has_remaining() {
            return Err(DecodeError::Empty);
        }
        let version = buf.get_u8();
        if version != VERSION {
            return Err(DecodeError::Version(version));
        }
        let kind = take_u8(buf, "kind")?;
        let entry = match kind {
            TOPIC_CREATE => Entry::TopicCreate {
                topic: take_name(buf, "topic")?,
                replicas: take_u8(buf, "replicas")?,
            },
            PUBLISH => {
                let topic = take_name(buf, "topic")?;
                let n = take_u32(buf, "message count")? as usize;
                // A count from the payload is not trusted for allocation:
                // never more slots than the remaining bytes could fill.
                let mut messages = Vec::with_capacity(n.min(buf.remaining() / MESSAGE_FIXED));
                for _ in 0..n {
                    if buf.remaining() < MESSAGE_FIXED {
                        return Err(DecodeError::Truncated("message header"));
                    }
                    let id = take_id(buf, "message id")?;
                    let timestamp = buf.get_i64();
                    let defer_ms = buf.get_u64();
                    let len = buf.get_u32() as usize;
                    if buf.remaining() < len {
                        return Err(DecodeError::Truncated("message body"));
                    }
                    messages.push(Published {
                        id,
                        timestamp,
                        defer_ms,
                        body: buf.split_to(len),
                    });
                }
                Entry::Publish { topic, messages }
            }
            CHANNEL_CREATE => {
                let (topic, channel) = take_names(buf)?;
                Entry::ChannelCreate { topic, channel }
            }
            CHANNEL_DELETE => {
                let (topic, channel) = take_names(buf)?;
                Entry::ChannelDelete { topic, channel }
            }
            CHANNEL_PAUSE => {
                let (topic, channel) = take_names(buf)?;
                let paused = take_flag(buf)?;
                Entry::ChannelPause {
                    topic,
                    channel,
                    paused,
                }
            }
            CHANNEL_EMPTY => {
                let (topic, channel) = take_names(buf)?;
                Entry::ChannelEmpty {
                    topic,
                    channel,
                    up_to: take_u64(buf, "up to")?,
                }
            }
            FINISHED => {
                let (topic, channel) = take_names(buf)?;
                let cursor = Cursor {
                    index: take_u64(buf, "cursor index")?,
                    offset: take_u32(buf, "cursor offset")?,
                };
                let n = take_u32(buf, "id count")? as usize;
                let mut ids = Vec::with_capacity(n.min(buf.remaining() / MESSAGE_ID_LEN));
                for _ in 0..n {
                    ids.push(take_id(buf, "finished ids")?);
                }
                Entry::Finished {
                    topic,
                    channel,
                    cursor,
                    ids,
                }
            }
            DEFERRED => {
                let (topic, channel) = take_names(buf)?;
                let n = take_u32(buf, "deferred count")? as usize;
                let mut until = Vec::with_capacity(n.min(buf.remaining() / (MESSAGE_ID_LEN + 8)));
                for _ in 0..n {
                    let id = take_id(buf, "deferred ids")?;
                    until.push((id, take_u64(buf, "deferred due")? as i64));
                }
                Entry::Deferred {
                    topic,
                    channel,
                    until,
                }
            }
            CHANNEL_RESET => {
                let (topic, channel) = take_names(buf)?;
                Entry::ChannelReset {
                    topic,
                    channel,
                    to: take_u64(buf, "reset index")?,
                    only_new: take_flag(buf)?,
                }
            }
            RETENTION => Entry::Retention {
                topic: take_name(buf, "topic")?,
                age_ms: take_u64(buf, "retention age")?,
                bytes: take_u64(buf, "retention bytes")?,
            },
            TOPIC_DELETE => Entry::TopicDelete {
                topic: take_name(buf, "topic")?,
            },
            TOPIC_PAUSE => Entry::TopicPause {
                topic: take_name(buf, "topic")?,
                paused: take_flag(buf)?,
            },
            TOPIC_EMPTY => Entry::TopicEmpty {
                topic: take_name(buf, "topic")?,
            },
            LIMIT => {
                let topic = take_name(buf, "topic")?;
                let channel = take_name(buf, "channel")?;
                Entry::Limit {
                    topic,
                    channel: (!channel.is_empty()).then_some(channel),
                    limit: take_limit(buf)?,
                }
            }
            SERVING => Entry::Serving {
                node: take_u64(buf, "node")?,
                address: take_name(buf, "address")?,
            },
            other => return Err(DecodeError::Kind(other)),
        };
        if buf.has_remaining() {
            return Err(DecodeError::Trailing(buf.remaining()));
        }
        Ok(entry)
    }
}

pub(super) fn count(what: &'static str, len: usize) -> Result<u32, EncodeError> {
    u32::try_from(len).map_err(|_| EncodeError::TooLong { what, len })
}

/// A depth limit: u64 max_depth | u8 policy (0 reject, 1 drop-oldest).
pub(super) fn put_limit(out: &mut BytesMut, limit: &Limit) {
    out.put_u64(limit.max_depth);
    out.put_u8(match limit.policy {
        Policy::Reject => 0,
        Policy::DropOldest => 1,
    });
}

pub(super) fn take_limit(buf: &mut Bytes) -> Result<Limit, DecodeError> {
    let max_depth = take_u64(buf, "max_depth")?;
    let policy = match take_u8(buf, "max_depth policy")? {
        0 => Policy::Reject,
        1 => Policy::DropOldest,
        other => return Err(DecodeError::Policy(other)),
    };
    Ok(Limit { max_depth, policy })
}

pub(super) fn put_name(
    out: &mut BytesMut,
    what: &'static str,
    name: &str,
) -> Result<(), EncodeError> {
    let len = u8::try_from(name.len()).map_err(|_| EncodeError::NameTooLong {
        what,
        len: name.len(),
    })?;
    out.put_u8(len);
    out.put_slice(name.as_bytes());
    Ok(())
}

fn put_names(out: &mut BytesMut, topic: &str, channel: &str) -> Result<(), EncodeError> {
    put_name(out, "topic", topic)?;
    put_name(out, "channel", channel)
}

pub(super) fn take_u8(buf: &mut Bytes, what: &'static str) -> Result<u8, DecodeError> {
    if buf.remaining() < 1 {
        return Err(DecodeError::Truncated(what));
    }
    Ok(buf.get_u8())
}

/// A paused flag: 0 or 1, nothing else.
pub(super) fn take_flag(buf: &mut Bytes) -> Result<bool, DecodeError> {
    match take_u8(buf, "paused flag")? {
        0 => Ok(false),
        1 => Ok(true),
        other => Err(DecodeError::Flag(other)),
    }
}

pub(super) fn take_u32(buf: &mut Bytes, what: &'static str) -> Result<u32, DecodeError> {
    if buf.remaining() < 4 {
        return Err(DecodeError::Truncated(what));
    }
    Ok(buf.get_u32())
}

pub(super) fn take_u64(buf: &mut Bytes, what: &'static str) -> Result<u64, DecodeError> {
    if buf.remaining() < 8 {
        return Err(DecodeError::Truncated(what));
    }
    Ok(buf.get_u64())
}

pub(super) fn take_id(buf: &mut Bytes, what: &'static str) -> Result<MessageId, DecodeError> {
    if buf.remaining() < MESSAGE_ID_LEN {
        return Err(DecodeError::Truncated(what));
    }
    let mut id = [0u8; MESSAGE_ID_LEN];
    buf.copy_to_slice(&mut id);
    Ok(MessageId(id))
}

pub(super) fn take_name(buf: &mut Bytes, what: &'static str) -> Result<String, DecodeError> {
    let len = take_u8(buf, what)? as usize;
    if buf.remaining() < len {
        return Err(DecodeError::Truncated(what));
    }
    let raw = buf.split_to(len);
    String::from_utf8(raw.to_vec()).map_err(|_| DecodeError::Utf8(what))
}

fn take_names(buf: &mut Bytes) -> Result<(String, String), DecodeError> {
    Ok((take_name(buf, "topic")?, take_name(buf, "channel")?))
}

#[cfg(test)]
#[path = "entry_tests.rs"]
mod tests;

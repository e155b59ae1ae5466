//! NSQ wire formats shared by every nsq-rs crate: the TCP V2 framing and
//! commands, the message encoding, topic/channel name rules, nsqlookupd's V1
//! protocol, the JSON types of the HTTP APIs, and Go's text forms (`%q`,
//! `encoding/json`) wherever they are visible. This crate never opens a socket or reads a clock.
//!
//! The path of a byte through it: a client's bytes are split into
//! [`command::Command`]s by [`command::decode`]; nsqd answers with frames
//! built by [`frame::encode_frame`] and [`message::Message::encode_frame`].

#![forbid(unsafe_code)]

pub mod command;
pub mod compress;
pub mod duration;
pub mod error;
pub mod frame;
pub mod gofmt;
pub mod identify;
pub mod lookupd;
pub mod message;
pub mod mpub_text;
pub mod names;
pub mod stats;
pub mod text;

pub use command::{Command, DecodeError, Limits, Precheck};
pub use error::ProtocolError;
pub use frame::FrameType;
pub use message::{Message, MessageId};
pub use mpub_text::{split_mpub_text, MpubTextError};

/// The NSQ version nsq-rs speaks and reports (`/info`, IDENTIFY, nsqd.dat).
pub const VERSION: &str = "1.3.0";

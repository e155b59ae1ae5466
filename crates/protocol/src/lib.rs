//! NSQ wire formats shared by every nsq-rs crate: the TCP V2 framing and
//! commands, the message encoding, topic/channel name rules, and the JSON types
//! of the HTTP APIs. This crate never opens a socket or reads a clock.

pub mod names;

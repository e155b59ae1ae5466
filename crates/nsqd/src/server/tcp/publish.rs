//! PUB, MPUB and DPUB: new messages for a topic, created if needed. The OK
//! goes out once every channel (and the topic's own queue) has them — with
//! `--sync-every=1`, once every copy written to a disk queue is durable.
//! The reader does not wait for that: it goes on reading (pipelined
//! publishes share the next fsync), and the OK goes out in its turn.
//!
//! A publish a `reject` limit refuses gets `E_PUB_FAILED PUB failed
//! channel <c> is at max_depth <n>` (or `topic is at ...`; `E_MPUB_FAILED`,
//! `E_DPUB_FAILED` likewise), which clients already take as a failed
//! publish; unlike NSQ's other publish failures it does not close the
//! connection.

use std::time::Duration;

use bytes::Bytes;
use nsq_protocol::frame::OK;
use nsq_protocol::ProtocolError;

use super::conn::Conn;
use crate::server::backend::BackendError;
use crate::server::topic::PutError;

pub fn publish(
    conn: &mut Conn,
    topic_name: &str,
    bodies: Vec<Bytes>,
    defer: Option<Duration>,
    cmd: &str,
    code: &'static str,
) -> Result<(), ProtocolError> {
    let n = bodies.len() as u64;
    let exiting = || ProtocolError::fatal(code, format!("{cmd} failed exiting"));
    let cached = conn
        .topics
        .get(topic_name)
        .filter(|t| !t.cancel.is_cancelled())
        .cloned();
    let topic = match cached {
        Some(t) => t,
        None => {
            let t = conn
                .nsqd
                .get_or_create_topic(topic_name)
                .ok_or_else(exiting)?;
            conn.topics.insert(topic_name.to_string(), t.clone());
            t
        }
    };
    let tickets = match topic.publish(bodies, defer) {
        Ok(t) => t,
        Err(PutError::Exiting) => return Err(exiting()),
        // a limit (nsq-rs, opt-in): NSQ's code and wording, but the
        // connection stays, so the producer can retry once there is room
        Err(PutError::Full(f)) => {
            return Err(ProtocolError::non_fatal(code, format!("{cmd} failed {f}")))
        }
        Err(PutError::Backend(e)) => {
            return Err(ProtocolError::fatal(code, format!("{cmd} failed {e}")))
        }
    };
    conn.client.record_pub(topic_name, n);
    if tickets.is_empty() {
        conn.respond(OK);
    } else {
        let not_durable =
            ProtocolError::fatal(code, format!("{cmd} failed {}", BackendError::NotDurable));
        conn.respond_when_durable(tickets, not_durable);
    }
    Ok(())
}

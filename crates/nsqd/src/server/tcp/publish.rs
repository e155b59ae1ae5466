//! PUB, MPUB and DPUB: new messages for a topic, created if needed. The OK
//! goes out once every channel (and the topic's own queue) has them — with
//! `--sync-every=1`, once every copy written to a disk queue is durable.
//! The reader does not wait for that: it goes on reading (pipelined
//! publishes share the next fsync), and the OK goes out in its turn.
//!
//! On a replicated topic the batch is stamped here (ids, timestamp) and
//! committed to the topic's Raft group (through its leader when this nsqd
//! does not lead it); the OK goes out once a majority has it on disk. No
//! leader, or no commit within 5 s, is `E_PUB_FAILED PUB failed
//! REPLICATION_NO_LEADER` (or `REPLICATION_TIMEOUT`; `E_MPUB_FAILED`,
//! `E_DPUB_FAILED` likewise), not closing the connection, so the producer
//! can retry (and may publish twice: at-least-once). A member that has not
//! caught up with its groups since it started creates no topic for a
//! publish (it may be a replicated one it has not learnt yet): `E_PUB_FAILED
//! PUB failed REPLICATION_CATCHING_UP`, the connection kept.
//!
//! A publish a `reject` limit refuses gets `E_PUB_FAILED PUB failed
//! channel <c> is at max_depth <n>` (or `topic is at ...`; `E_MPUB_FAILED`,
//! `E_DPUB_FAILED` likewise), which clients already take as a failed
//! publish; unlike NSQ's other publish failures it does not close the
//! connection. On a replicated topic the limits of this nsqd's topic and
//! channels are checked before the batch is proposed, with the same error.
//!
//! A DPUB whose delay reaches the topic's `max_age` (nsq-rs, opt-in) gets
//! `E_DPUB_FAILED DPUB failed defer past the topic's max_age <d>`, the
//! connection kept: the message would only ever expire.

use std::time::Duration;

use bytes::Bytes;
use nsq_protocol::frame::OK;
use nsq_protocol::ProtocolError;

use super::conn::Conn;
use crate::server::disk::BackendError;
use crate::server::nsqd::NoTopic;
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
                .topic_to_publish(topic_name)
                .map_err(|no| match no {
                    NoTopic::Exiting => exiting(),
                    NoTopic::CatchingUp => ProtocolError::non_fatal(
                        code,
                        format!("{cmd} failed REPLICATION_CATCHING_UP"),
                    ),
                })?;
            conn.topics.insert(topic_name.to_string(), t.clone());
            t
        }
    };
    // a limit (nsq-rs, opt-in): NSQ's code and wording, but the connection
    // stays, so the producer can retry once there is room
    let put_error = |e: PutError| match e {
        PutError::Exiting => exiting(),
        PutError::Full(f) => ProtocolError::non_fatal(code, format!("{cmd} failed {f}")),
        e @ PutError::DeferPastMaxAge(_) => {
            ProtocolError::non_fatal(code, format!("{cmd} failed {e}"))
        }
        PutError::Backend(e) => ProtocolError::fatal(code, format!("{cmd} failed {e}")),
    };
    if topic.replicas().is_some() {
        // stamped and checked here, then committed by the cluster
        let commit = conn
            .nsqd
            .cluster()
            .publish(&topic, bodies, defer)
            .map_err(put_error)?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let cmd = cmd.to_string();
        tokio::spawn(async move {
            let answer = commit
                .await
                .map_err(|e| ProtocolError::non_fatal(code, format!("{cmd} failed {e}")));
            let _ = tx.send(answer);
        });
        conn.client.record_pub(topic_name, n);
        conn.respond_when_committed(rx);
        return Ok(());
    }
    let tickets = topic.publish(bodies, defer).map_err(put_error)?;
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

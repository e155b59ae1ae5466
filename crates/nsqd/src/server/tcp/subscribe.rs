//! SUB and what a subscribed client sends after it: RDY, FIN, REQ, TOUCH
//! and CLS, each carried out on the client's channel.
//!
//! nsq-rs: a SUB to a replicated topic is served only where its cluster
//! says (`super::super::cluster`: the member that leads its group);
//! elsewhere it is refused, naming the leader, and the connection closed
//! as for NSQ's other SUB failures. A SUB on the leader makes the channel
//! here at once, as NSQ does, and tells the cluster, which proposes the
//! channel to the group in the background.

use std::sync::Arc;
use std::time::Duration;

use nsq_protocol::error::{E_FIN_FAILED, E_REQ_FAILED, E_SUB_FAILED, E_TOUCH_FAILED};
use nsq_protocol::frame::{CLOSE_WAIT, OK};
use nsq_protocol::{MessageId, ProtocolError};

use super::conn::{Conn, Subscription};
use super::session::State;
use crate::core::SubError;
use crate::server::channel::{in_flight_error, Channel};

fn channel(conn: &Conn) -> Result<&Arc<Channel>, ProtocolError> {
    // the session's rules guarantee a subscription for these commands
    conn.subscription
        .as_ref()
        .map(|s| &s.channel)
        .ok_or_else(|| ProtocolError::invalid("not subscribed"))
}

pub fn sub(conn: &mut Conn, topic_name: &str, channel_name: &str) -> Result<(), ProtocolError> {
    conn.session.check_auth("SUB", topic_name, channel_name)?;
    let exiting = || ProtocolError::fatal(E_SUB_FAILED, "SUB failed exiting");
    let deleted = || ProtocolError::fatal(E_SUB_FAILED, "SUB failed to deleted topic/channel");
    let not_here = |why: String| ProtocolError::fatal(E_SUB_FAILED, why);
    // Before the channel is made: a member that does not serve the topic
    // makes nothing of it.
    if let Some(why) = conn.nsqd.sub_refusal(topic_name) {
        return Err(not_here(why));
    }
    // An ephemeral channel may be going away under us as its last client
    // leaves; nsqd retries once before giving up.
    for attempt in 0..2 {
        let topic = conn
            .nsqd
            .get_or_create_topic(topic_name)
            .ok_or_else(exiting)?;
        let ch = match topic.get_or_create_channel(channel_name) {
            Ok(ch) => ch,
            Err(_) if attempt == 0 => continue,
            Err(_) => return Err(deleted()),
        };
        match ch.subscribe(
            &conn.client,
            conn.session.msg_timeout,
            conn.session.sample_rate,
        ) {
            Ok(()) => {}
            Err(SubError::TooManyConsumers) => {
                let max = conn.nsqd.opts().max_channel_consumers;
                return Err(ProtocolError::fatal(
                    E_SUB_FAILED,
                    format!("SUB failed consumers for {topic_name}:{channel_name} exceeds limit of {max}"),
                ));
            }
            Err(SubError::Exiting) if attempt == 0 => continue,
            Err(SubError::Exiting) => return Err(deleted()),
        }
        // Again once subscribed: leadership lost in between would otherwise
        // leave this consumer here, missed by the close of the group's
        // consumers (the cluster's), which may have run before.
        if let Some(why) = conn.nsqd.sub_refusal(topic_name) {
            if ch.unsubscribe(conn.client.id) == 0 && ch.ephemeral {
                conn.nsqd.delete_channel(&topic, &ch.name);
            }
            return Err(not_here(why));
        }
        if topic.replicas().is_some() {
            conn.nsqd.cluster().subscribed(&topic, &ch);
        }
        conn.session.state = State::Subscribed;
        conn.client
            .update_info(|i| i.state = State::Subscribed.code());
        conn.client.set_subscription(topic_name, channel_name);
        conn.subscription = Some(Subscription { topic, channel: ch });
        conn.respond(OK);
        return Ok(());
    }
    Err(exiting())
}

pub fn rdy(conn: &mut Conn, n: i64) -> Result<(), ProtocolError> {
    channel(conn)?.set_rdy(conn.client.id, n, conn.now);
    Ok(())
}

/// One FIN on its own (the reader usually batches them: [`flush_fins`]).
pub fn fin(conn: &mut Conn, id: MessageId) -> Result<(), ProtocolError> {
    conn.pending_fins.push(id);
    flush_fins(conn);
    Ok(())
}

/// Carries out the FINs collected from this read: one channel lock and one
/// delivery pass for all of them, instead of a lock round trip per FIN
/// between the cores.
pub fn flush_fins(conn: &mut Conn) {
    if conn.pending_fins.is_empty() {
        return;
    }
    let Some(sub) = conn.subscription.as_ref() else {
        conn.pending_fins.clear();
        return;
    };
    let mut errors = Vec::new();
    sub.channel
        .finish(conn.client.id, &mut conn.pending_fins, conn.now, |id, e| {
            errors.push(in_flight_error(E_FIN_FAILED, "FIN", id, e))
        });
    for e in &errors {
        conn.send_error(e);
    }
}

pub fn req(conn: &mut Conn, id: MessageId, timeout_ms: i64) -> Result<(), ProtocolError> {
    let max = conn.nsqd.opts().max_req_timeout;
    let delay = Duration::from_millis(timeout_ms.max(0) as u64).min(max);
    channel(conn)?
        .requeue(conn.client.id, &id, delay, conn.now)
        .map_err(|e| in_flight_error(E_REQ_FAILED, "REQ", &id, e))
}

pub fn touch(conn: &mut Conn, id: MessageId) -> Result<(), ProtocolError> {
    channel(conn)?
        .touch(conn.client.id, &id, conn.now)
        .map_err(|e| in_flight_error(E_TOUCH_FAILED, "TOUCH", &id, e))
}

/// CLS: no more messages (RDY 0); the client finishes what it has, then
/// closes when it gets `CLOSE_WAIT`.
pub fn cls(conn: &mut Conn) -> Result<(), ProtocolError> {
    channel(conn)?.set_rdy(conn.client.id, 0, conn.now);
    conn.session.state = State::Closing;
    conn.client.update_info(|i| i.state = State::Closing.code());
    conn.respond(CLOSE_WAIT);
    Ok(())
}

/// The client is leaving: it stops being a subscriber, and an ephemeral
/// channel goes with its last client.
pub fn leave(conn: &mut Conn) {
    if let Some(sub) = conn.subscription.take() {
        if sub.channel.unsubscribe(conn.client.id) == 0 && sub.channel.ephemeral {
            conn.nsqd.delete_channel(&sub.topic, &sub.channel.name);
        }
    }
}

//! The reader: one task per connection that reads, decodes and carries out
//! commands in order. It checks the session's rules as the decoder's
//! precheck (exactly where nsqd makes them) and dispatches each command to
//! its command file; it sits above them, so they never call back into it.
//!
//! FINs decoded from one read are carried out together (one channel lock
//! and one delivery pass for all of them), before the next other command.

use std::time::Instant;

use nsq_protocol::command::{decode, Command, DecodeError, Precheck, MAX_LINE_LEN};
use nsq_protocol::ProtocolError;

use super::conn::{Conn, Inbound};
use super::session::Rule;
use super::{auth, identify, publish, subscribe};
use nsq_protocol::error::{E_DPUB_FAILED, E_MPUB_FAILED, E_PUB_FAILED};

/// Reads and carries out commands until the client leaves, breaks the
/// protocol, misses its heartbeats, or is told to go.
pub async fn run(conn: &mut Conn, inbound: &mut Inbound) {
    let mut deadline = conn.session.read_deadline(conn.now);
    loop {
        loop {
            if conn.nsqd.auth.is_some() {
                if let Some(secret) = conn
                    .session
                    .refresh_due(next_command(&inbound.buf), Instant::now())
                    .map(str::to_string)
                {
                    auth::refresh(conn, &secret).await;
                }
            }
            let limits = conn.nsqd.limits;
            let r = decode(&mut inbound.buf, &limits, |name, params| {
                match conn.session.rules(name, params)? {
                    Rule::Proceed => Ok(Precheck::Proceed),
                    Rule::Ignore => Ok(Precheck::Ignore),
                    Rule::CreateTopicThenProceed(t) => {
                        conn.nsqd.get_or_create_topic(&t);
                        Ok(Precheck::Proceed)
                    }
                }
            });
            if let Ok(Some(Command::Fin(id))) = r {
                if conn.subscription.is_some() {
                    conn.pending_fins.push(id);
                    continue;
                }
            }
            subscribe::flush_fins(conn);
            match r {
                Ok(Some(cmd)) => {
                    let result = match cmd {
                        Command::Identify(body) => identify::identify(conn, inbound, &body).await,
                        Command::Auth(secret) => auth::auth(conn, &secret).await,
                        cmd => dispatch(conn, cmd),
                    };
                    // after the command: IDENTIFY may have changed the interval
                    deadline = conn.session.read_deadline(conn.now);
                    if let Err(e) = result {
                        conn.send_error(&e);
                        if e.fatal {
                            conn.flush_replies().await;
                            return;
                        }
                    }
                }
                Ok(None) => break,
                Err(DecodeError::LineTooLong) => {
                    tracing::debug!(addr = %conn.client.remote_addr, "command line too long, closing");
                    return;
                }
                Err(DecodeError::Protocol(e)) => {
                    conn.send_error(&e);
                    conn.flush_replies().await;
                    return;
                }
            }
        }
        let timeout = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            // publishes waiting for their fsyncs are answered as they land
            r = conn.replies.settle(&conn.client), if !conn.replies.is_empty() => {
                if let Err(e) = r {
                    conn.client.send_error(&e.payload());
                    return;
                }
            }
            r = inbound.fill(&conn.nsqd.limits) => match r {
                Ok(true) => conn.now = Instant::now(),
                Ok(false) => return,
                Err(e) => {
                    tracing::debug!(addr = %conn.client.remote_addr, error = %e, "failed to read command");
                    return;
                }
            },
            _ = timeout => {
                tracing::info!(addr = %conn.client.remote_addr, "client missed heartbeats, closing");
                conn.unresponsive = true;
                return;
            }
            _ = conn.client.closer.cancelled() => return,
        }
    }
}

/// The commands that need no waiting.
fn dispatch(conn: &mut Conn, cmd: Command) -> Result<(), ProtocolError> {
    match cmd {
        Command::Nop | Command::Ignored | Command::Identify(_) | Command::Auth(_) => Ok(()),
        Command::Sub { topic, channel } => subscribe::sub(conn, &topic, &channel),
        Command::Rdy(n) => subscribe::rdy(conn, n),
        Command::Fin(id) => subscribe::fin(conn, id),
        Command::Req { id, timeout_ms } => subscribe::req(conn, id, timeout_ms),
        Command::Touch(id) => subscribe::touch(conn, id),
        Command::Cls => subscribe::cls(conn),
        Command::Pub { topic, body } => {
            conn.session.check_auth("PUB", &topic, "")?;
            publish::publish(conn, &topic, vec![body], None, "PUB", E_PUB_FAILED)
        }
        // authorized by the rules, before the body was read
        Command::Mpub { topic, bodies } => {
            publish::publish(conn, &topic, bodies, None, "MPUB", E_MPUB_FAILED)
        }
        Command::Dpub {
            topic,
            defer_ms,
            body,
        } => {
            conn.session.check_auth("DPUB", &topic, "")?;
            let d = std::time::Duration::from_millis(defer_ms.max(0) as u64);
            publish::publish(conn, &topic, vec![body], Some(d), "DPUB", E_DPUB_FAILED)
        }
    }
}

/// The name of the next (complete) command line in `buf`, or "".
fn next_command(buf: &[u8]) -> &[u8] {
    let scan = &buf[..buf.len().min(MAX_LINE_LEN)];
    let Some(nl) = scan.iter().position(|&b| b == b'\n') else {
        return b"";
    };
    scan[..nl]
        .split(|&b| b == b' ' || b == b'\r')
        .next()
        .unwrap_or(&[])
}

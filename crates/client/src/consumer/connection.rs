//! The task that owns one subscribed nsqd socket.
//!
//! It writes the commands the consumer core queues (RDY, FIN, REQ, TOUCH,
//! CLS), answers heartbeats with NOP on its own, and reports everything else
//! to the core as [`Event`]s: messages, `CLOSE_WAIT`, and the end of the
//! connection. It keeps no consumer state. The core closes the connection by
//! dropping the command queue; the task then shuts the socket down.

use bytes::{Bytes, BytesMut};
use nsq_protocol::frame::{FrameType, CLOSE_WAIT, HEARTBEAT};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::event::Event;
use crate::config::Config;
use crate::conn::{self, Handshake};
use crate::rdy::ConnId;

pub(crate) async fn run(
    conn: ConnId,
    addr: String,
    mut hs: Handshake,
    mut cmds: mpsc::UnboundedReceiver<Bytes>,
    events: mpsc::UnboundedSender<Event>,
    cfg: Config,
) {
    let mut read_deadline = Instant::now() + cfg.read_timeout;
    let mut out = BytesMut::new();
    let lost = |reason: String| {
        let _ = events.send(Event::Lost { conn, reason });
    };
    loop {
        tokio::select! {
            cmd = cmds.recv() => {
                let Some(first) = cmd else {
                    // The core is done with this connection.
                    let _ = hs.writer.shutdown().await;
                    tracing::debug!(nsqd = %addr, conn, "connection closed");
                    return;
                };
                out.clear();
                out.extend_from_slice(&first);
                while out.len() < 64 * 1024 {
                    match cmds.try_recv() {
                        Ok(more) => out.extend_from_slice(&more),
                        Err(_) => break,
                    }
                }
                if let Err(e) = conn::write_all(&mut hs.writer, &out, cfg.write_timeout).await {
                    return lost(format!("write: {e}"));
                }
            }
            frame = hs.reader.next() => {
                let frame = match frame {
                    Ok(f) => f,
                    Err(e) => return lost(e.to_string()),
                };
                read_deadline = Instant::now() + cfg.read_timeout;
                match frame.frame_type {
                    FrameType::Response if frame.data[..] == *HEARTBEAT => {
                        tracing::trace!(nsqd = %addr, "heartbeat");
                        if let Err(e) = conn::write_all(&mut hs.writer, b"NOP\n", cfg.write_timeout).await {
                            return lost(format!("write: {e}"));
                        }
                    }
                    FrameType::Response if frame.data[..] == *CLOSE_WAIT => {
                        tracing::info!(nsqd = %addr, conn, "received CLOSE_WAIT");
                        let _ = events.send(Event::CloseWait { conn });
                    }
                    FrameType::Response => {
                        tracing::debug!(nsqd = %addr, response = %String::from_utf8_lossy(&frame.data), "response");
                    }
                    FrameType::Error => {
                        // E_FIN_FAILED / E_REQ_FAILED / E_TOUCH_FAILED are the only
                        // non-fatal ones; after any other nsqd closes the socket.
                        tracing::error!(nsqd = %addr, error = %String::from_utf8_lossy(&frame.data), "protocol error");
                    }
                    FrameType::Message => match nsq_protocol::Message::decode(frame.data) {
                        Ok(msg) => {
                            let _ = events.send(Event::Message { conn, msg });
                        }
                        Err(e) => return lost(format!("bad message: {e}")),
                    },
                }
            }
            _ = tokio::time::sleep_until(read_deadline) => {
                return lost(format!("nothing received for {:?}", cfg.read_timeout));
            }
        }
    }
}

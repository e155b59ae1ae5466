//! The consumer's single coordinating task.
//!
//! It owns the [`RdyState`] and the command queue of every connection, so
//! RDY decisions never race: every message, answer, CLOSE_WAIT and lost
//! socket arrives here as an [`Event`], is applied to the state machine with
//! the current instant, and the resulting `RDY n` commands are queued to the
//! connections. It also decides when a closing connection may go (nothing
//! left in flight), triggers reconnects or a lookupd re-poll when one goes,
//! and runs the graceful stop: CLS everywhere, wait for CLOSE_WAIT and the
//! handlers to answer what they hold, then exit (after 30 s at the latest,
//! as go-nsq).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::mpsc;

use super::event::{Action, Event};
use super::message::Message;
use super::Shared;
use crate::conn::line;
use crate::rdy::{ConnId, Outcome, RdyConfig, RdyState, RdyUpdate};

/// How long a stop waits for connections to drain before giving up.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

struct CoreConn {
    addr: Arc<str>,
    /// `None` once the socket is gone.
    cmds: Option<mpsc::UnboundedSender<Bytes>>,
    /// CLS sent, waiting for CLOSE_WAIT.
    cls_sent: bool,
    /// CLOSE_WAIT received or socket lost: goes when nothing is in flight.
    closing: bool,
}

pub(crate) struct Core {
    shared: Arc<Shared>,
    events: mpsc::UnboundedSender<Event>,
    rdy: RdyState,
    conns: HashMap<ConnId, CoreConn>,
    dispatch: mpsc::UnboundedSender<Message>,
    stop_deadline: Option<Instant>,
}

/// How the core ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Exit {
    Clean,
    /// Connections still held messages when the stop timeout passed.
    TimedOut,
}

impl Core {
    pub(crate) fn new(
        shared: Arc<Shared>,
        events: mpsc::UnboundedSender<Event>,
        dispatch: mpsc::UnboundedSender<Message>,
    ) -> Core {
        let seed = rand::random();
        let rdy = RdyState::new(RdyConfig::from_config(&shared.config), Instant::now(), seed);
        Core {
            shared,
            events,
            rdy,
            conns: HashMap::new(),
            dispatch,
            stop_deadline: None,
        }
    }

    pub(crate) async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Event>) -> Exit {
        loop {
            let mut deadline = self.rdy.next_deadline();
            if let Some(d) = self.stop_deadline {
                deadline = deadline.min(d);
            }
            tokio::select! {
                ev = rx.recv() => match ev {
                    Some(ev) => self.handle(ev),
                    None => return Exit::Clean,
                },
                _ = tokio::time::sleep_until(deadline.into()) => {
                    let now = Instant::now();
                    let ups = self.rdy.poll(now);
                    self.apply(ups);
                    if self.stop_deadline.is_some_and(|d| d <= now) {
                        tracing::warn!(connections = self.conns.len(), in_flight = self.rdy.total_in_flight(), "stop timed out");
                        self.conns.clear();
                        self.publish_stats();
                        return Exit::TimedOut;
                    }
                }
            }
            if self.stop_deadline.is_some() && self.conns.is_empty() {
                self.publish_stats();
                tracing::info!(topic = %self.shared.topic, channel = %self.shared.channel, "consumer stopped");
                return Exit::Clean;
            }
        }
    }

    fn handle(&mut self, ev: Event) {
        let now = Instant::now();
        match ev {
            Event::Connected {
                conn,
                addr,
                cmds,
                max_rdy,
                ack,
            } => {
                if self.stop_deadline.is_some() {
                    // Raced with stop: dropping the queue closes it (and `ack`
                    // tells the caller it failed).
                    self.shared.registry.lock().connected.remove(&addr);
                    return;
                }
                if max_rdy < self.rdy.max_in_flight() {
                    tracing::warn!(nsqd = %addr, max_rdy, max_in_flight = self.rdy.max_in_flight(), "max RDY count < max_in_flight, truncation possible");
                }
                tracing::info!(nsqd = %addr, conn, "connected");
                self.conns.insert(
                    conn,
                    CoreConn {
                        addr: addr.into(),
                        cmds: Some(cmds),
                        cls_sent: false,
                        closing: false,
                    },
                );
                let ups = self.rdy.add_conn(conn, max_rdy, now);
                self.apply(ups);
                self.publish_stats();
                let _ = ack.send(());
            }
            Event::Message { conn, msg } => {
                let Some(c) = self.conns.get(&conn) else {
                    tracing::warn!(conn, id = %msg.id, "message for a closed connection, dropped");
                    return;
                };
                let addr = c.addr.clone();
                self.shared.stats.received.fetch_add(1, Ordering::Relaxed);
                let delay = self.shared.config.requeue_delay(msg.attempts);
                let ups = self.rdy.on_message(conn, now);
                self.apply(ups);
                let m = Message::new(msg, addr, conn, self.events.clone(), delay);
                if let Err(e) = self.dispatch.send(m) {
                    // No handler task left: nothing will answer, so requeue now.
                    e.0.requeue_without_backoff(Some(Duration::ZERO));
                }
            }
            Event::Respond { conn, id, action } => {
                let Some(c) = self.conns.get(&conn) else {
                    return;
                };
                let id_txt = String::from_utf8_lossy(id.as_bytes()).into_owned();
                let (cmd, outcome) = match action {
                    Action::Finish => {
                        self.shared.stats.finished.fetch_add(1, Ordering::Relaxed);
                        (line("FIN", &[&id_txt]), Some(Outcome::Finished))
                    }
                    Action::Requeue { delay, backoff } => {
                        self.shared.stats.requeued.fetch_add(1, Ordering::Relaxed);
                        let ms = delay.as_millis().to_string();
                        (
                            line("REQ", &[&id_txt, &ms]),
                            Some(Outcome::Requeued { backoff }),
                        )
                    }
                    Action::Touch => (line("TOUCH", &[&id_txt]), None),
                };
                if let Some(tx) = &c.cmds {
                    let _ = tx.send(cmd);
                }
                if let Some(outcome) = outcome {
                    let ups = self.rdy.on_response(conn, outcome, now);
                    self.apply(ups);
                    self.maybe_remove(conn, now);
                }
            }
            Event::CloseWait { conn } => {
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.closing = true;
                    self.rdy.conn_closing(conn);
                    self.maybe_remove(conn, now);
                }
            }
            Event::Lost { conn, reason } => {
                if let Some(c) = self.conns.get_mut(&conn) {
                    tracing::warn!(nsqd = %c.addr, conn, %reason, "connection lost");
                    c.cmds = None;
                    c.closing = true;
                    self.rdy.conn_closing(conn);
                    self.maybe_remove(conn, now);
                }
            }
            Event::Disconnect { addr } => {
                let found = self
                    .conns
                    .iter()
                    .find(|(_, c)| *c.addr == *addr)
                    .map(|(id, _)| *id);
                if let Some(conn) = found {
                    tracing::info!(nsqd = %addr, conn, "disconnecting");
                    self.send_cls(conn);
                }
            }
            Event::SetMaxInFlight(n) => {
                let ups = self.rdy.set_max_in_flight(n, now);
                self.apply(ups);
            }
            Event::Stop => {
                if self.stop_deadline.is_none() {
                    tracing::info!(topic = %self.shared.topic, channel = %self.shared.channel, connections = self.conns.len(), "stopping");
                    self.stop_deadline = Some(now + STOP_TIMEOUT);
                    let ids: Vec<ConnId> = self.conns.keys().copied().collect();
                    for conn in ids {
                        self.send_cls(conn);
                    }
                }
            }
        }
        self.publish_stats();
    }

    fn send_cls(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.get_mut(&conn) {
            if !c.cls_sent && !c.closing {
                c.cls_sent = true;
                if let Some(tx) = &c.cmds {
                    let _ = tx.send(line("CLS", &[]));
                }
            }
        }
    }

    /// Queues `RDY n` commands.
    fn apply(&mut self, ups: Vec<RdyUpdate>) {
        for u in ups {
            if let Some(tx) = self.conns.get(&u.conn).and_then(|c| c.cmds.as_ref()) {
                tracing::debug!(conn = u.conn, count = u.count, "RDY");
                let _ = tx.send(line("RDY", &[&u.count.to_string()]));
            }
        }
    }

    /// Drops a closing connection once nothing is in flight on it.
    fn maybe_remove(&mut self, conn: ConnId, now: Instant) {
        let ready = self.conns.get(&conn).is_some_and(|c| c.closing)
            && self.rdy.in_flight(conn).unwrap_or(0) == 0;
        if !ready {
            return;
        }
        let Some(c) = self.conns.remove(&conn) else {
            return;
        };
        let ups = self.rdy.remove_conn(conn, now);
        self.apply(ups);
        let addr = c.addr.to_string();
        drop(c); // closes the command queue: the connection task shuts the socket
        tracing::info!(nsqd = %addr, conn, left = self.conns.len(), "connection closed");
        let reconnect = {
            let mut reg = self.shared.registry.lock();
            if reg.connected.get(&addr) == Some(&conn) {
                reg.connected.remove(&addr);
            }
            if self.stop_deadline.is_some() || self.shared.stopped.load(Ordering::SeqCst) {
                false
            } else if !reg.lookupds.is_empty() {
                self.shared.recheck.notify_one();
                false
            } else {
                reg.nsqd_tcp_addrs.contains(&addr)
            }
        };
        if reconnect {
            tokio::spawn(super::reconnect_loop(
                self.shared.clone(),
                self.events.clone(),
                addr,
            ));
        }
    }

    fn publish_stats(&self) {
        let s = &self.shared.stats;
        s.connections.store(self.conns.len(), Ordering::Relaxed);
        let in_flight = self.rdy.total_in_flight();
        s.in_flight.store(in_flight, Ordering::Relaxed);
        s.in_flight_high_water
            .fetch_max(in_flight, Ordering::Relaxed);
        s.rdy.store(self.rdy.total_rdy(), Ordering::Relaxed);
        s.backoff_level
            .store(self.rdy.backoff_level(), Ordering::Relaxed);
    }
}

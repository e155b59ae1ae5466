//! What a consumer's handler receives, and the handler contract.
//!
//! A [`Message`] is a cheap, clonable handle on one delivery. By default the
//! consumer answers for the handler: `Ok(())` → `FIN`, `Err(_)` (or a panic)
//! → `REQ` with go-nsq's delay (`default_requeue_delay × attempts`, capped at
//! `max_requeue_delay`) and a backoff step. A handler can take over instead:
//!
//! * answer early or differently with [`Message::finish`],
//!   [`Message::requeue`], [`Message::requeue_without_backoff`] — the first
//!   answer wins, later ones (including the automatic one) are ignored;
//! * keep a message past its return with [`Message::disable_auto_response`]
//!   and answer later from any task, calling [`Message::touch`] meanwhile to
//!   keep nsqd from timing it out.
//!
//! A message whose last handle is dropped without any answer is requeued
//! (default delay, no backoff step) so it does not stay in flight until
//! nsqd's timeout.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use nsq_protocol::MessageId;
use tokio::sync::mpsc;

use super::event::{Action, Event};
use crate::rdy::ConnId;

struct Inner {
    msg: nsq_protocol::Message,
    nsqd_address: Arc<str>,
    conn: ConnId,
    events: mpsc::UnboundedSender<Event>,
    default_delay: Duration,
    responded: AtomicBool,
    auto_response_disabled: AtomicBool,
}

/// One delivered message. Clones share the same delivery.
#[derive(Clone)]
pub struct Message {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Message")
            .field("id", &self.inner.msg.id)
            .field("attempts", &self.inner.msg.attempts)
            .field("nsqd", &self.inner.nsqd_address)
            .field("body_len", &self.inner.msg.body.len())
            .finish()
    }
}

impl Message {
    pub(crate) fn new(
        msg: nsq_protocol::Message,
        nsqd_address: Arc<str>,
        conn: ConnId,
        events: mpsc::UnboundedSender<Event>,
        default_delay: Duration,
    ) -> Message {
        Message {
            inner: Arc::new(Inner {
                msg,
                nsqd_address,
                conn,
                events,
                default_delay,
                responded: AtomicBool::new(false),
                auto_response_disabled: AtomicBool::new(false),
            }),
        }
    }

    pub fn id(&self) -> MessageId {
        self.inner.msg.id
    }

    pub fn body(&self) -> &Bytes {
        &self.inner.msg.body
    }

    /// Publish time, Unix nanoseconds.
    pub fn timestamp(&self) -> i64 {
        self.inner.msg.timestamp
    }

    /// Delivery count including this one (first delivery = 1).
    pub fn attempts(&self) -> u16 {
        self.inner.msg.attempts
    }

    /// TCP address of the nsqd that delivered it.
    pub fn nsqd_address(&self) -> &str {
        &self.inner.nsqd_address
    }

    /// The consumer will not FIN/REQ this message when the handler returns.
    pub fn disable_auto_response(&self) {
        self.inner
            .auto_response_disabled
            .store(true, Ordering::SeqCst);
    }

    pub fn is_auto_response_disabled(&self) -> bool {
        self.inner.auto_response_disabled.load(Ordering::SeqCst)
    }

    pub fn has_responded(&self) -> bool {
        self.inner.responded.load(Ordering::SeqCst)
    }

    /// `FIN`: done with the message. Counts as a success for backoff.
    pub fn finish(&self) {
        self.respond(Action::Finish);
    }

    /// `REQ` after `delay` (`None`: the default linear delay), counting as a
    /// failure for backoff.
    pub fn requeue(&self, delay: Option<Duration>) {
        let delay = delay.unwrap_or(self.inner.default_delay);
        self.respond(Action::Requeue {
            delay,
            backoff: true,
        });
    }

    /// `REQ` without touching the backoff state.
    pub fn requeue_without_backoff(&self, delay: Option<Duration>) {
        let delay = delay.unwrap_or(self.inner.default_delay);
        self.respond(Action::Requeue {
            delay,
            backoff: false,
        });
    }

    /// `TOUCH`: resets nsqd's timeout for this message (ignored once answered).
    pub fn touch(&self) {
        if !self.has_responded() {
            self.send(Action::Touch);
        }
    }

    fn respond(&self, action: Action) {
        if !self.inner.responded.swap(true, Ordering::SeqCst) {
            self.send(action);
        }
    }

    fn send(&self, action: Action) {
        let _ = self.inner.events.send(Event::Respond {
            conn: self.inner.conn,
            id: self.inner.msg.id,
            action,
        });
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if !*self.responded.get_mut() {
            tracing::warn!(id = %self.msg.id, nsqd = %self.nsqd_address, "message dropped without FIN/REQ, requeueing");
            let action = Action::Requeue {
                delay: self.default_delay,
                backoff: false,
            };
            let _ = self.events.send(Event::Respond {
                conn: self.conn,
                id: self.msg.id,
                action,
            });
        }
    }
}

/// What a handler returns: `Ok` → FIN, `Err` → REQ (see the module docs).
pub type HandlerResult = Result<(), HandlerError>;
/// Any error; its text is logged when the message is requeued.
pub type HandlerError = Box<dyn std::error::Error + Send + Sync>;

/// Processes messages. Implement it on a struct, or wrap an async closure
/// with [`handler_fn`].
pub trait Handler: Send + Sync + 'static {
    fn handle_message(&self, message: Message) -> impl Future<Output = HandlerResult> + Send;

    /// Called (instead of `handle_message`) for a message delivered more
    /// than `max_attempts` times, just before it is finished.
    fn log_failed_message(&self, _message: &Message) {}
}

/// A [`Handler`] made from an async closure; see [`handler_fn`].
#[derive(Clone)]
pub struct HandlerFn<F>(F);

/// `handler_fn(|m: Message| async move { ...; Ok(()) })`.
pub fn handler_fn<F, Fut>(f: F) -> HandlerFn<F>
where
    F: Fn(Message) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HandlerResult> + Send + 'static,
{
    HandlerFn(f)
}

impl<F, Fut> Handler for HandlerFn<F>
where
    F: Fn(Message) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HandlerResult> + Send + 'static,
{
    fn handle_message(&self, message: Message) -> impl Future<Output = HandlerResult> + Send {
        (self.0)(message)
    }
}

//! One HTTP subscriber: its `/sub` arguments, the nsq-client [`Consumer`]
//! that feeds it, and the streaming response body ([`Stream`]) that writes
//! one message body per line.
//!
//! The path of a message: nsqd → the consumer → [`Forward`] (auto-response
//! off, so nothing is answered yet) → the stream's queue → hyper takes the
//! line → [`crate::wire`] finishes it once flushed to the socket, or
//! requeues it at once if the HTTP client is gone. Messages still queued
//! when the stream ends are requeued at once too.
//!
//! This module never writes to a socket itself.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use hyper::body::{Body, Frame};
use nsq_client::{Consumer, Handler, HandlerResult, Message};
use nsq_protocol::names::{is_valid_channel_name, is_valid_topic_name};
use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tokio_util::task::TaskTracker;

use crate::stats::{Seat, Table};
use crate::wire::{Ledger, Settle};

/// As NSQ's nsq_pubsub: a heartbeat line every 30 s, so idle subscribers
/// know the stream is alive and a dead one is found by the failed write.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(30);

/// Why a `/sub` request is refused (400, the code as body).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgError {
    MissingTopic,
    InvalidTopic,
    InvalidChannel,
}

impl ArgError {
    /// NSQ's HTTP error codes.
    pub fn code(self) -> &'static str {
        match self {
            ArgError::MissingTopic => "MISSING_ARG_TOPIC",
            ArgError::InvalidTopic => "INVALID_ARG_TOPIC",
            ArgError::InvalidChannel => "INVALID_ARG_CHANNEL",
        }
    }
}

/// `topic` (required) and `channel` from a query string. No or an empty
/// `channel` gives the subscriber its own ephemeral channel, so every HTTP
/// subscriber gets every message (pubsub's model); a named channel is
/// shared, and its subscribers split its messages (NSQ's model).
pub fn sub_args(query: &str) -> Result<(String, String), ArgError> {
    let (mut topic, mut channel) = (None, None);
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        match &*k {
            "topic" if topic.is_none() => topic = Some(v.into_owned()),
            "channel" if channel.is_none() => channel = Some(v.into_owned()),
            _ => {}
        }
    }
    let topic = topic
        .filter(|t| !t.is_empty())
        .ok_or(ArgError::MissingTopic)?;
    if !is_valid_topic_name(&topic) {
        return Err(ArgError::InvalidTopic);
    }
    let channel = match channel.filter(|c| !c.is_empty()) {
        Some(c) if is_valid_channel_name(&c) => c,
        Some(_) => return Err(ArgError::InvalidChannel),
        None => ephemeral_channel(),
    };
    Ok((topic, channel))
}

/// `pubsub<16 hex digits>#ephemeral`: unique per subscriber, and gone from
/// nsqd when the subscriber leaves.
pub fn ephemeral_channel() -> String {
    format!("pubsub{:016x}#ephemeral", rand::random::<u64>())
}

/// `{"_heartbeat_":<unix seconds>}\n`, NSQ's nsq_pubsub heartbeat line.
pub fn heartbeat_line(unix_secs: u64) -> Bytes {
    Bytes::from(format!("{{\"_heartbeat_\":{unix_secs}}}\n"))
}

/// A message body as one stream line.
fn message_line(body: &[u8]) -> Bytes {
    let mut line = BytesMut::with_capacity(body.len() + 1);
    line.put_slice(body);
    line.put_u8(b'\n');
    line.freeze()
}

/// A message on its way to one subscriber: finishing it counts it in /stats.
pub struct Delivery {
    message: Message,
    seat: Seat,
}

impl Settle for Delivery {
    fn finish(self) {
        Settle::finish(self.message);
        self.seat.delivered();
    }

    fn requeue(self) {
        Settle::requeue(self.message);
    }
}

/// The consumer's handler: passes each message to the stream, answering
/// nothing (the wire ledger does). With the stream gone, requeues at once.
struct Forward(mpsc::UnboundedSender<Message>);

impl Handler for Forward {
    fn handle_message(&self, message: Message) -> impl Future<Output = HandlerResult> + Send {
        message.disable_auto_response();
        if let Err(mpsc::error::SendError(m)) = self.0.send(message) {
            Settle::requeue(m);
        }
        std::future::ready(Ok(()))
    }
}

/// What a subscription needs from the server.
pub struct Setup {
    pub nsqd_tcp_addresses: Vec<String>,
    pub lookupd_http_addresses: Vec<String>,
    pub max_in_flight: i64,
    /// For the lookupds' HTTP API (empty: none).
    pub http_secret: String,
    pub table: Arc<Table>,
    /// Where consumer stops run, so shutdown can wait for them.
    pub stops: TaskTracker,
    /// Ends every stream (server shutdown).
    pub shutdown: CancellationToken,
}

/// A `/sub` that could not start.
#[derive(Debug)]
pub enum SubscribeError {
    /// Bad consumer settings or names (500).
    Consumer(String),
    /// No given nsqd could be reached (502).
    Connect(String),
}

/// Starts a consumer of `topic`/`channel` for one HTTP subscriber. Returns
/// once it is subscribed (with `--nsqd-tcp-address`: on at least one nsqd;
/// with `--lookupd-http-address`: after the first lookup round), so
/// whatever is published afterwards reaches the stream.
pub async fn subscribe(
    setup: &Setup,
    topic: &str,
    channel: &str,
    remote: &str,
    ledger: Arc<Ledger<Delivery>>,
) -> Result<Stream, SubscribeError> {
    let config = nsq_client::Config {
        max_in_flight: setup.max_in_flight,
        // As the other nsq-rs apps: `<app>/<NSQ version> nsq-rs`.
        user_agent: format!("nsq_pubsub/{} nsq-rs", nsq_protocol::VERSION),
        http_secret: (!setup.http_secret.is_empty()).then(|| setup.http_secret.clone()),
        ..nsq_client::Config::default()
    };
    let consumer = Consumer::new(topic, channel, config)
        .map_err(|e| SubscribeError::Consumer(e.to_string()))?;
    let (tx, rx) = mpsc::unbounded_channel();
    consumer
        .add_handler(Forward(tx))
        .map_err(|e| SubscribeError::Consumer(e.to_string()))?;

    let mut errors = Vec::new();
    let mut connected = 0;
    for addr in &setup.nsqd_tcp_addresses {
        match consumer.connect_to_nsqd(addr).await {
            Ok(()) => connected += 1,
            Err(e) => {
                tracing::error!(%remote, %topic, %channel, error = %e, "failed to connect to nsqd");
                errors.push(e.to_string());
            }
        }
    }
    if !setup.nsqd_tcp_addresses.is_empty() && connected == 0 {
        consumer.stop().await;
        return Err(SubscribeError::Connect(errors.join("; ")));
    }
    for addr in &setup.lookupd_http_addresses {
        if let Err(e) = consumer.connect_to_nsqd_lookupd(addr).await {
            consumer.stop().await;
            return Err(SubscribeError::Consumer(e.to_string()));
        }
    }

    let paused = consumer.clone();
    ledger.when_gone(move || pause(&paused));
    let seat = setup.table.add(topic, channel, remote);
    tracing::info!(%remote, %topic, %channel, "new subscriber");
    let mut heartbeat = tokio::time::interval_at(
        tokio::time::Instant::now() + HEARTBEAT_INTERVAL,
        HEARTBEAT_INTERVAL,
    );
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    Ok(Stream {
        rx,
        ledger,
        heartbeat,
        shutdown: Box::pin(setup.shutdown.clone().cancelled_owned()),
        ended: false,
        registration: Registration {
            seat,
            table: setup.table.clone(),
            consumer,
            stops: setup.stops.clone(),
            remote: remote.to_string(),
        },
    })
}

/// A subscriber's row in the table and its consumer. Dropping it removes
/// the row and stops the consumer (CLS, in-flight answered) in the background.
struct Registration {
    seat: Seat,
    table: Arc<Table>,
    consumer: Consumer,
    stops: TaskTracker,
    remote: String,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.table.remove(self.seat.id);
        tracing::info!(remote = %self.remote, topic = %self.consumer.topic(), channel = %self.consumer.channel(), "subscriber gone");
        // Outside a runtime (process teardown) the consumer's own drop stops it.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let consumer = self.consumer.clone();
            self.stops
                .spawn_on(async move { consumer.stop().await }, &rt);
        }
    }
}

/// The `/sub` response body: one line per message, a heartbeat line every
/// 30 s; ends (after requeueing what it still holds) at server shutdown.
pub struct Stream {
    rx: mpsc::UnboundedReceiver<Message>,
    ledger: Arc<Ledger<Delivery>>,
    heartbeat: tokio::time::Interval,
    shutdown: Pin<Box<WaitForCancellationFutureOwned>>,
    ended: bool,
    /// Declared last: dropped after `Drop::drop` has requeued the queue.
    registration: Registration,
}

/// RDY 0 on every connection. Sent before a leaving subscriber's REQs (on
/// the same ordered command queue), so nsqd gives the requeued messages to
/// another subscriber instead of straight back to this one — each bounce
/// would cost an attempt.
fn pause(consumer: &Consumer) {
    consumer.change_max_in_flight(0);
}

impl Stream {
    /// Stops taking messages and requeues those not yet given to hyper.
    fn close_queue(&mut self) {
        pause(&self.registration.consumer);
        self.rx.close();
        while let Ok(m) = self.rx.try_recv() {
            Settle::requeue(m);
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.close_queue();
    }
}

impl Body for Stream {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if this.ended {
            return Poll::Ready(None);
        }
        if this.shutdown.as_mut().poll(cx).is_ready() {
            this.ended = true;
            this.close_queue();
            return Poll::Ready(None);
        }
        match this.rx.poll_recv(cx) {
            Poll::Ready(Some(m)) => {
                let line = message_line(m.body());
                this.ledger.taken(Delivery {
                    message: m,
                    seat: this.registration.seat.clone(),
                });
                return Poll::Ready(Some(Ok(Frame::data(line))));
            }
            Poll::Ready(None) => {
                // The consumer stopped on its own: nothing more will come.
                this.ended = true;
                return Poll::Ready(None);
            }
            Poll::Pending => {}
        }
        if this.heartbeat.poll_tick(cx).is_ready() {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or_default();
            return Poll::Ready(Some(Ok(Frame::data(heartbeat_line(now)))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args() {
        assert_eq!(sub_args("topic=t&channel=c"), Ok(("t".into(), "c".into())));
        assert_eq!(sub_args("channel=c"), Err(ArgError::MissingTopic));
        assert_eq!(sub_args("topic=&channel=c"), Err(ArgError::MissingTopic));
        assert_eq!(sub_args("topic=a%20b"), Err(ArgError::InvalidTopic));
        assert_eq!(
            sub_args("topic=t&channel=bad!"),
            Err(ArgError::InvalidChannel)
        );
        assert_eq!(
            sub_args("topic=t&channel=c%23ephemeral"),
            Ok(("t".into(), "c#ephemeral".into()))
        );
        assert_eq!(ArgError::InvalidChannel.code(), "INVALID_ARG_CHANNEL");
    }

    #[test]
    fn missing_channel_is_a_fresh_ephemeral_one() {
        let (_, a) = sub_args("topic=t").unwrap();
        let (_, b) = sub_args("topic=t&channel=").unwrap();
        assert_ne!(a, b);
        for c in [&a, &b] {
            assert!(c.starts_with("pubsub") && c.ends_with("#ephemeral"), "{c}");
            assert!(is_valid_channel_name(c), "{c}");
        }
    }

    #[test]
    fn lines() {
        assert_eq!(message_line(b"hello"), Bytes::from_static(b"hello\n"));
        assert_eq!(
            heartbeat_line(1343400473),
            Bytes::from_static(b"{\"_heartbeat_\":1343400473}\n")
        );
    }
}

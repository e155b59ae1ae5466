//! [`Consumer`]: receives a topic's channel from any number of nsqds.
//!
//! Shape (one task each):
//! * a `connection` task per nsqd socket (reads frames, writes commands,
//!   answers heartbeats);
//! * the `core` task, owner of the RDY state machine ([`crate::rdy`]) and
//!   of every connection's command queue;
//! * handler workers (`add_concurrent_handlers(h, n)` → `n` of them) that
//!   take messages from one queue and answer FIN/REQ through the core;
//! * with nsqlookupds, the `discovery` polling task.
//!
//! Connecting (dial, IDENTIFY, SUB) happens in the caller of
//! [`Consumer::connect_to_nsqd`], so its errors are returned; the finished
//! connection is then handed to the core.

mod connection;
mod core;
mod discovery;
mod event;
pub mod message;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use nsq_protocol::names::{is_valid_channel_name, is_valid_topic_name};
use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot, Notify};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub(crate) use self::discovery::reconnect_loop;
use crate::config::Config;
use crate::conn;
use crate::error::ConsumerError;
use crate::lookup::LookupdEndpoint;
use crate::rdy::ConnId;
use event::Event;
use message::{Handler, Message};

/// Counters of a consumer (go-nsq's `ConsumerStats`, plus RDY accounting).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsumerStats {
    pub messages_received: u64,
    pub messages_finished: u64,
    pub messages_requeued: u64,
    pub connections: usize,
    /// Messages received and not yet answered, now.
    pub in_flight: i64,
    /// The most messages ever held unanswered at once.
    pub max_in_flight_seen: i64,
    /// Sum of the RDY counts last sent.
    pub total_rdy: i64,
    pub backoff_level: u32,
}

#[derive(Default)]
pub(crate) struct Stats {
    received: AtomicU64,
    finished: AtomicU64,
    requeued: AtomicU64,
    connections: AtomicUsize,
    in_flight: AtomicI64,
    in_flight_high_water: AtomicI64,
    rdy: AtomicI64,
    backoff_level: AtomicU32,
}

/// Which addresses are wanted, connecting, connected.
#[derive(Default)]
pub(crate) struct Registry {
    pending: HashSet<String>,
    connected: HashMap<String, ConnId>,
    /// Addresses to keep (re)connecting to (go-nsq's `nsqdTCPAddrs`).
    nsqd_tcp_addrs: Vec<String>,
    /// Given to `connect_to_nsqd` by the user: never dropped by discovery.
    direct: HashSet<String>,
    /// Found through nsqlookupd: dropped when no lookupd lists them.
    discovered: HashSet<String>,
    lookupds: Vec<LookupdEndpoint>,
    handlers: usize,
    connecting: bool,
}

pub(crate) struct Shared {
    topic: String,
    channel: String,
    config: Config,
    /// Asks the lookupds (`dial_timeout`, `lookupd_poll_timeout`).
    lookupd_client: nsq_http::Client,
    registry: Mutex<Registry>,
    stats: Stats,
    stopped: AtomicBool,
    /// Ends the discovery and reconnect tasks.
    cancel: CancellationToken,
    /// Asks the discovery task for an immediate poll.
    recheck: Notify,
    next_conn_id: AtomicU64,
    /// Connection tasks, awaited by `stop` so it returns with sockets closed.
    conn_tasks: Mutex<Vec<JoinHandle<()>>>,
}

/// Why a connection attempt is made (for the registry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    Direct,
    Discovered,
    Reconnect,
}

struct Inner {
    shared: Arc<Shared>,
    events: mpsc::UnboundedSender<Event>,
    dispatch_rx: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<Message>>>,
    core: Mutex<Option<JoinHandle<core::Exit>>>,
    workers: Mutex<Vec<JoinHandle<()>>>,
    discovery_started: AtomicBool,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The last handle is gone: wind everything down in the background.
        self.shared.stopped.store(true, Ordering::SeqCst);
        self.shared.cancel.cancel();
        let _ = self.events.send(Event::Stop);
    }
}

/// Consumes `topic`/`channel`. Cheap to clone; clones share the consumer.
/// Dropping the last clone stops it in the background; [`Consumer::stop`]
/// stops it and waits.
#[derive(Clone)]
pub struct Consumer {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("topic", &self.inner.shared.topic)
            .field("channel", &self.inner.shared.channel)
            .finish()
    }
}

impl Consumer {
    /// Validates the names and the config and starts the coordinating task
    /// (so it must be called inside a tokio runtime). Add a handler, then connect.
    pub fn new(topic: &str, channel: &str, config: Config) -> Result<Consumer, ConsumerError> {
        config.validate()?;
        if !is_valid_topic_name(topic) {
            return Err(ConsumerError::InvalidTopic(topic.to_string()));
        }
        if !is_valid_channel_name(channel) {
            return Err(ConsumerError::InvalidChannel(channel.to_string()));
        }
        let rt = tokio::runtime::Handle::try_current().map_err(|_| ConsumerError::NoRuntime)?;
        let shared = Arc::new(Shared {
            topic: topic.to_string(),
            channel: channel.to_string(),
            lookupd_client: crate::lookup::client(&config)?,
            config,
            registry: Mutex::new(Registry::default()),
            stats: Stats::default(),
            stopped: AtomicBool::new(false),
            cancel: CancellationToken::new(),
            recheck: Notify::new(),
            next_conn_id: AtomicU64::new(1),
            conn_tasks: Mutex::new(Vec::new()),
        });
        let (events, events_rx) = mpsc::unbounded_channel();
        let (dispatch, dispatch_rx) = mpsc::unbounded_channel();
        let core = core::Core::new(shared.clone(), events.clone(), dispatch);
        let core = rt.spawn(core.run(events_rx));
        Ok(Consumer {
            inner: Arc::new(Inner {
                shared,
                events,
                dispatch_rx: Arc::new(tokio::sync::Mutex::new(dispatch_rx)),
                core: Mutex::new(Some(core)),
                workers: Mutex::new(Vec::new()),
                discovery_started: AtomicBool::new(false),
            }),
        })
    }

    pub fn topic(&self) -> &str {
        &self.inner.shared.topic
    }

    pub fn channel(&self) -> &str {
        &self.inner.shared.channel
    }

    /// Adds one handler task (messages are handled one at a time by it).
    pub fn add_handler<H: Handler>(&self, handler: H) -> Result<(), ConsumerError> {
        self.add_concurrent_handlers(handler, 1)
    }

    /// Adds `concurrency` tasks sharing `handler`, each handling one message
    /// at a time. Must be called before connecting.
    pub fn add_concurrent_handlers<H: Handler>(
        &self,
        handler: H,
        concurrency: usize,
    ) -> Result<(), ConsumerError> {
        let shared = &self.inner.shared;
        {
            let mut reg = shared.registry.lock();
            if reg.connecting {
                return Err(ConsumerError::AlreadyConnecting);
            }
            reg.handlers += concurrency;
        }
        let handler = Arc::new(handler);
        let mut workers = self.inner.workers.lock();
        for _ in 0..concurrency {
            let rx = self.inner.dispatch_rx.clone();
            workers.push(tokio::spawn(worker(
                handler.clone(),
                rx,
                shared.config.max_attempts,
            )));
        }
        Ok(())
    }

    /// Connects to one nsqd's TCP address (`host:port`): IDENTIFY, SUB,
    /// then RDY as the RDY rules say. A lost connection is retried every
    /// `lookupd_poll_interval` while no nsqlookupd is configured.
    pub async fn connect_to_nsqd(&self, addr: &str) -> Result<(), ConsumerError> {
        connect_nsqd(&self.inner.shared, &self.inner.events, addr, Origin::Direct).await
    }

    /// [`Consumer::connect_to_nsqd`] for each address; stops at the first error.
    pub async fn connect_to_nsqds<S: AsRef<str>>(&self, addrs: &[S]) -> Result<(), ConsumerError> {
        for a in addrs {
            self.connect_to_nsqd(a.as_ref()).await?;
        }
        Ok(())
    }

    /// Adds an nsqlookupd HTTP address (`host:port` or `http://host:port[/path]`)
    /// and polls all of them now, then every `lookupd_poll_interval`.
    /// Failing to reach a lookupd is logged, not returned (it is retried).
    pub async fn connect_to_nsqd_lookupd(&self, http_addr: &str) -> Result<(), ConsumerError> {
        let shared = &self.inner.shared;
        let ep = LookupdEndpoint::parse(http_addr)?;
        {
            let mut reg = shared.registry.lock();
            if shared.stopped.load(Ordering::SeqCst) {
                return Err(ConsumerError::Stopped);
            }
            if reg.handlers == 0 {
                return Err(ConsumerError::NoHandler);
            }
            reg.connecting = true;
            if reg.lookupds.contains(&ep) {
                return Ok(());
            }
            reg.lookupds.push(ep);
        }
        discovery::query_lookupds(shared, &self.inner.events).await;
        if !self.inner.discovery_started.swap(true, Ordering::SeqCst) {
            tokio::spawn(discovery::lookupd_loop(
                shared.clone(),
                self.inner.events.clone(),
            ));
        }
        Ok(())
    }

    /// [`Consumer::connect_to_nsqd_lookupd`] for each address.
    pub async fn connect_to_nsqd_lookupds<S: AsRef<str>>(
        &self,
        addrs: &[S],
    ) -> Result<(), ConsumerError> {
        for a in addrs {
            self.connect_to_nsqd_lookupd(a.as_ref()).await?;
        }
        Ok(())
    }

    /// Closes the connection to `addr` gracefully (CLS) and forgets the
    /// address, so it is not reconnected.
    pub fn disconnect_from_nsqd(&self, addr: &str) -> Result<(), ConsumerError> {
        {
            let mut reg = self.inner.shared.registry.lock();
            let Some(i) = reg.nsqd_tcp_addrs.iter().position(|a| a == addr) else {
                return Err(ConsumerError::NotConnected(addr.to_string()));
            };
            reg.nsqd_tcp_addrs.remove(i);
            reg.direct.remove(addr);
            reg.discovered.remove(addr);
        }
        let _ = self.inner.events.send(Event::Disconnect {
            addr: addr.to_string(),
        });
        Ok(())
    }

    /// Stops polling `http_addr` (the last lookupd cannot be removed, as in go-nsq).
    pub fn disconnect_from_nsqd_lookupd(&self, http_addr: &str) -> Result<(), ConsumerError> {
        let ep = LookupdEndpoint::parse(http_addr)?;
        let mut reg = self.inner.shared.registry.lock();
        let Some(i) = reg.lookupds.iter().position(|e| *e == ep) else {
            return Err(ConsumerError::NotConnected(http_addr.to_string()));
        };
        if reg.lookupds.len() == 1 {
            return Err(ConsumerError::NotConnected(format!(
                "{http_addr} is the only nsqlookupd"
            )));
        }
        reg.lookupds.remove(i);
        Ok(())
    }

    /// Changes `max_in_flight` and updates every connection (0 pauses).
    pub fn change_max_in_flight(&self, max_in_flight: i64) {
        let _ = self
            .inner
            .events
            .send(Event::SetMaxInFlight(max_in_flight.max(0)));
    }

    pub fn stats(&self) -> ConsumerStats {
        let s = &self.inner.shared.stats;
        ConsumerStats {
            messages_received: s.received.load(Ordering::Relaxed),
            messages_finished: s.finished.load(Ordering::Relaxed),
            messages_requeued: s.requeued.load(Ordering::Relaxed),
            connections: s.connections.load(Ordering::Relaxed),
            in_flight: s.in_flight.load(Ordering::Relaxed),
            max_in_flight_seen: s.in_flight_high_water.load(Ordering::Relaxed),
            total_rdy: s.rdy.load(Ordering::Relaxed),
            backoff_level: s.backoff_level.load(Ordering::Relaxed),
        }
    }

    /// Graceful stop: CLS on every connection, wait for CLOSE_WAIT, let the
    /// handlers answer every message already received, close, end the
    /// handler tasks. Gives up waiting after 30 s (go-nsq does the same).
    /// Idempotent; later connects fail with [`ConsumerError::Stopped`].
    pub async fn stop(&self) {
        let shared = &self.inner.shared;
        shared.stopped.store(true, Ordering::SeqCst);
        shared.cancel.cancel();
        let _ = self.inner.events.send(Event::Stop);
        let core = self.inner.core.lock().take();
        let exit = match core {
            Some(h) => h.await.unwrap_or(core::Exit::TimedOut),
            None => core::Exit::Clean,
        };
        // The core has dropped every command queue; the connection tasks
        // are shutting their sockets.
        let conns: Vec<JoinHandle<()>> = std::mem::take(&mut *shared.conn_tasks.lock());
        for t in conns {
            if exit == core::Exit::TimedOut {
                t.abort();
            }
            let _ = t.await;
        }
        let workers: Vec<JoinHandle<()>> = std::mem::take(&mut *self.inner.workers.lock());
        for w in workers {
            if exit == core::Exit::TimedOut {
                w.abort();
            }
            let _ = w.await;
        }
    }
}

/// Dials, IDENTIFYs and SUBscribes, then hands the connection to the core.
pub(crate) async fn connect_nsqd(
    shared: &Arc<Shared>,
    events: &mpsc::UnboundedSender<Event>,
    addr: &str,
    origin: Origin,
) -> Result<(), ConsumerError> {
    {
        let mut reg = shared.registry.lock();
        if shared.stopped.load(Ordering::SeqCst) {
            return Err(ConsumerError::Stopped);
        }
        if reg.handlers == 0 {
            return Err(ConsumerError::NoHandler);
        }
        reg.connecting = true;
        match origin {
            Origin::Direct => {
                reg.direct.insert(addr.to_string());
            }
            Origin::Discovered => {
                reg.discovered.insert(addr.to_string());
            }
            Origin::Reconnect => {}
        }
        if !reg.nsqd_tcp_addrs.iter().any(|a| a == addr) {
            reg.nsqd_tcp_addrs.push(addr.to_string());
        }
        if reg.pending.contains(addr) || reg.connected.contains_key(addr) {
            return Err(ConsumerError::AlreadyConnected(addr.to_string()));
        }
        reg.pending.insert(addr.to_string());
    }
    tracing::info!(nsqd = %addr, topic = %shared.topic, channel = %shared.channel, "connecting to nsqd");
    let cfg = &shared.config;
    let attempt = async {
        let mut hs = conn::connect(addr, cfg).await?;
        conn::subscribe(&mut hs, &shared.topic, &shared.channel, cfg).await?;
        Ok(hs)
    };
    let hs = match attempt.await {
        Ok(hs) => hs,
        Err(source) => {
            shared.registry.lock().pending.remove(addr);
            return Err(ConsumerError::Connect {
                addr: addr.to_string(),
                source,
            });
        }
    };
    let conn = shared.next_conn_id.fetch_add(1, Ordering::Relaxed);
    let (cmds, cmds_rx) = mpsc::unbounded_channel();
    {
        let mut reg = shared.registry.lock();
        reg.pending.remove(addr);
        if shared.stopped.load(Ordering::SeqCst) {
            return Err(ConsumerError::Stopped);
        }
        reg.connected.insert(addr.to_string(), conn);
    }
    let max_rdy = hs.max_rdy_count();
    // Connected goes first, so every event of the connection task follows it.
    let (ack, acked) = oneshot::channel();
    if events
        .send(Event::Connected {
            conn,
            addr: addr.to_string(),
            cmds,
            max_rdy,
            ack,
        })
        .is_err()
    {
        shared.registry.lock().connected.remove(addr);
        return Err(ConsumerError::Stopped);
    }
    let task = tokio::spawn(connection::run(
        conn,
        addr.to_string(),
        hs,
        cmds_rx,
        events.clone(),
        cfg.clone(),
    ));
    {
        let mut tasks = shared.conn_tasks.lock();
        tasks.retain(|t| !t.is_finished());
        tasks.push(task);
    }
    acked.await.map_err(|_| ConsumerError::Stopped)
}

/// One handler task: takes messages from the shared queue, gives up on
/// over-attempted ones, runs the handler (panics count as errors) and
/// answers unless the handler took control.
async fn worker<H: Handler>(
    handler: Arc<H>,
    rx: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<Message>>>,
    max_attempts: u16,
) {
    loop {
        let next = rx.lock().await.recv().await;
        let Some(msg) = next else { break };
        if max_attempts > 0 && msg.attempts() > max_attempts {
            tracing::warn!(id = %msg.id(), attempts = msg.attempts(), "giving up on message");
            handler.log_failed_message(&msg);
            msg.finish();
            continue;
        }
        let (h, m) = (handler.clone(), msg.clone());
        let result = tokio::spawn(async move { h.handle_message(m).await }).await;
        let failed = match result {
            Ok(Ok(())) => false,
            Ok(Err(e)) => {
                tracing::error!(id = %msg.id(), error = %e, "handler returned error");
                true
            }
            Err(e) => {
                tracing::error!(id = %msg.id(), error = %e, "handler panicked");
                true
            }
        };
        if !msg.is_auto_response_disabled() {
            if failed {
                msg.requeue(None);
            } else {
                msg.finish();
            }
        }
    }
    tracing::debug!("handler task exiting");
}

//! A topic as the server runs it: the core state machine (which holds the
//! channels) behind one mutex, its disk queue, and the pump task that moves
//! its backlog on.
//!
//! A publish fans out under the topic's lock, so every channel sees the
//! topic's messages in one order and nothing overtakes the backlog; each
//! channel's memory work is done there too. The disk work — a channel's
//! overflow, the topic's own — runs after the lock is released.
//!
//! A replicated topic (docs/replication.md) also carries its `replicas`;
//! its publishes are stamped here (`stamp`) and committed to its group by
//! the cluster (`super::cluster`), which hands them back stamped once
//! committed (`publish_stamped`). Past memory its queues may be held by a
//! [`Keeper`](super::backend::Keeper) the cluster opens, instead of disk
//! queues of their own.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use nsq_protocol::stats::{E2eLatency, TopicStats};
use nsq_protocol::{Message, MessageId};
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::backend::{Backend, OpenKeeper, Ticket};
use super::channel::Channel;
use super::clock::{now, now_unix_ns};
use super::context::{Context, Event};
use super::disk::BackendError;
use crate::core::channel::replicates;
use crate::core::e2e::quantiles;
use crate::core::topic::{copies, PUMP_BATCH};
use crate::core::{self, DiskWork, Exiting, Full, Refused};

mod settings;

#[derive(Debug, thiserror::Error)]
pub enum PutError {
    #[error("exiting")]
    Exiting,
    /// A `reject` limit refused the publish, whole (nsq-rs, opt-in).
    #[error("{0}")]
    Full(Full),
    /// A deferral that reaches the topic's `max_age` (nsq-rs, opt-in).
    #[error("defer past the topic's max_age {}", nsq_protocol::duration::format(*.0))]
    DeferPastMaxAge(Duration),
    #[error("{0}")]
    Backend(#[from] BackendError),
}

impl From<Exiting> for PutError {
    fn from(_: Exiting) -> PutError {
        PutError::Exiting
    }
}

impl From<Refused> for PutError {
    fn from(r: Refused) -> PutError {
        match r {
            Refused::Exiting => PutError::Exiting,
            Refused::Full(f) => PutError::Full(f),
            Refused::DeferPastMaxAge(d) => PutError::DeferPastMaxAge(d),
        }
    }
}

type State = core::Topic<Arc<Channel>>;

pub struct Topic {
    pub name: String,
    pub ephemeral: bool,
    /// Replicas of a replicated topic (docs/replication.md); 0: NSQ's
    /// unreplicated topic.
    replicas: AtomicU8,
    state: Mutex<State>,
    backend: Backend,
    /// Opens the keeper of each of its queues, when they are not disk
    /// queues of their own (a replicated topic on a member of its group).
    keeper: Option<OpenKeeper>,
    pump: Notify,
    pub cancel: CancellationToken,
    ctx: Arc<Context>,
}

/// Channel disk work left from a fan-out, done once the topic is unlocked.
type Pending = Vec<(Arc<Channel>, DiskWork)>;

/// Hands `msgs` to every channel (memory work only; the disk work is
/// collected in `pending`).
fn fan_out(
    st: &State,
    msgs: Vec<Message>,
    defer: Option<Duration>,
    now: Instant,
    pending: &mut Pending,
) {
    for ((_, ch), batch) in st.channels().zip(copies(msgs, st.channel_count())) {
        let work = ch.put(batch, defer, now);
        if !work.is_empty() {
            pending.push((ch.clone(), work));
        }
    }
}

/// The first channel write that failed: a publisher must not get OK for a
/// message a channel could not keep (nsqd, writing its topic's queue first,
/// answers E_PUB_FAILED there too).
fn carry_out(pending: Pending, tickets: &mut Vec<Ticket>) -> Result<(), BackendError> {
    let mut result = Ok(());
    for (ch, work) in pending {
        result = result.and(ch.carry_out(work, tickets));
    }
    result
}

impl Topic {
    /// Opens the topic's disk queue, or with `keeper` its keeper (and its
    /// channels' too); the caller spawns [`Topic::run_pump`].
    pub fn new(
        name: &str,
        ctx: &Arc<Context>,
        started: bool,
        keeper: Option<OpenKeeper>,
    ) -> Arc<Topic> {
        let backend = match &keeper {
            Some(open) => Backend::kept(open()),
            None => ctx.open_backend(name, false),
        };
        let cfg = ctx.topic_config(name, &backend, started);
        let mut state = core::Topic::new(cfg);
        state.set_max_age(None, ctx.opts.max_age);
        Arc::new(Topic {
            name: name.to_string(),
            ephemeral: nsq_protocol::names::is_ephemeral(name),
            replicas: AtomicU8::new(0),
            state: Mutex::new(state),
            backend,
            keeper,
            pump: Notify::new(),
            cancel: ctx.cancel.child_token(),
            ctx: ctx.clone(),
        })
    }

    /// Publishes bodies as new messages (all or none on an exiting topic).
    /// Returns the tickets of every copy written to a disk queue: with
    /// durable acknowledgements (`--sync-every=1`) the publisher answers
    /// only once they are all durable; otherwise none are returned.
    pub fn publish(
        &self,
        bodies: Vec<Bytes>,
        defer: Option<Duration>,
    ) -> Result<Vec<Ticket>, PutError> {
        let unix_ns = now_unix_ns();
        self.put(|st| st.publish(bodies, defer, unix_ns, |ch, n| ch.refuses(n)))
    }

    /// New messages of `bodies` with this topic's next ids and the time
    /// now, not published: a replicated topic's publish is stamped where
    /// it is taken, so every replica holds the same messages.
    pub fn stamp(&self, bodies: Vec<Bytes>) -> Vec<Message> {
        self.state.lock().stamp(bodies, now_unix_ns())
    }

    /// Whether `incoming` new messages, deferred by `defer`, pass the
    /// `reject` limits of the topic and its channels and its `max_age`: a
    /// check, not a reservation (publishes checked at the same moment may
    /// together pass a limit).
    pub fn admits(&self, incoming: usize, defer: Option<Duration>) -> Result<(), PutError> {
        let st = self.state.lock();
        if let Some(r) = st.defer_refusal(defer) {
            return Err(r.into());
        }
        match st.refusal(incoming, |ch, n| ch.refuses(n)) {
            Some(full) => Err(PutError::Full(full)),
            None => Ok(()),
        }
    }

    /// Publishes messages already stamped (a replicated topic's committed
    /// batch) as [`Topic::publish`] does, but no `reject` limit refuses
    /// them: they were checked before they were proposed
    /// ([`Topic::admits`]), and are acknowledged now.
    pub fn publish_stamped(
        &self,
        msgs: Vec<Message>,
        defer: Option<Duration>,
    ) -> Result<Vec<Ticket>, PutError> {
        self.put(|st| st.route_admitted(msgs, defer))
    }

    /// Routes a publish under the topic's lock (`route`), then does its
    /// disk work.
    fn put(
        &self,
        route: impl FnOnce(&mut State) -> Result<core::Publish, Refused>,
    ) -> Result<Vec<Ticket>, PutError> {
        let mut tickets = Vec::new();
        let now = now();
        let mut pending = Pending::new();
        let (p, direct, count, bytes) = {
            let mut st = self.state.lock();
            let mut p = route(&mut st)?;
            let direct = !p.fan_out.is_empty();
            let count = p.fan_out.len() as u64;
            let bytes = p.fan_out.iter().map(|m| m.body.len() as u64).sum::<u64>();
            fan_out(
                &st,
                std::mem::take(&mut p.fan_out),
                p.defer,
                now,
                &mut pending,
            );
            (p, direct, count, bytes)
        };
        let mut result = carry_out(pending, &mut tickets).map_err(PutError::from);
        if result.is_err() && direct {
            self.state.lock().unpublish(count, bytes);
        }
        if p.skip > 0 {
            // a drop-oldest limit's share of the backlog's disk queue
            let _io = self.backend.lock_io();
            self.backend.read(p.skip as usize);
        }
        if !p.append.is_empty() {
            let _io = self.backend.lock_io();
            let r = self.append(&p.append);
            let pump = {
                let mut st = self.state.lock();
                if r.is_err() {
                    st.unpublish(
                        p.append.len() as u64,
                        p.append.iter().map(|m| m.body.len() as u64).sum(),
                    );
                }
                st.appended()
            };
            if pump {
                self.pump.notify_one();
            }
            match r {
                Ok(ticket) => tickets.extend(ticket),
                Err(e) => result = result.and(Err(e.into())),
            }
        }
        if result.is_ok() && !self.ephemeral && !direct {
            self.ctx.set_health(None);
        }
        if p.pump {
            self.pump.notify_one();
        }
        if !self.ctx.durable_acks() {
            tickets.clear();
        }
        result.map(|()| tickets)
    }

    fn append(&self, msgs: &[Message]) -> Result<Option<Ticket>, BackendError> {
        let r = self.backend.append(msgs);
        if let Err(e) = &r {
            tracing::error!(topic = %self.name, error = %e, "topic disk write failed");
            self.ctx.set_health(Some(e.to_string()));
        }
        r
    }

    /// Moves the backlog to the channels whenever it can flow. With durable
    /// acknowledgements it also wakes after each sync of the topic's disk
    /// queue: the records it covered have become readable.
    pub async fn run_pump(self: Arc<Self>) {
        let mut syncs = self.backend.syncs();
        loop {
            let synced = async {
                match syncs.as_mut() {
                    Some(rx) => rx.changed().await.is_ok(),
                    None => std::future::pending().await,
                }
            };
            let sweep = self.sweep_expired();
            let swept = async {
                match sweep {
                    Some(t) => tokio::time::sleep_until(t.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = self.pump.notified() => {}
                _ = swept => continue,
                true = synced => {
                    if !self.state.lock().backend_grew() {
                        continue;
                    }
                }
                _ = self.cancel.cancelled() => return,
            }
            loop {
                let mut pending = Pending::new();
                let p = {
                    let mut st = self.state.lock();
                    let now = now();
                    let mut p = st.pump(PUMP_BATCH);
                    // consecutive messages with the same deferral go together
                    let mut batch = std::mem::take(&mut p.batch).into_iter().peekable();
                    while let Some(first) = batch.next() {
                        let defer = first.defer;
                        let mut msgs = vec![first.msg];
                        while let Some(next) = batch.next_if(|b| b.defer == defer) {
                            msgs.push(next.msg);
                        }
                        fan_out(&st, msgs, defer, now, &mut pending);
                    }
                    p
                };
                // the backlog pump's path: a failed channel write loses the
                // message for that channel (logged, /ping unhealthy), as in nsqd
                let _ = carry_out(pending, &mut Vec::new());
                if let Some(r) = p.refill {
                    let _io = self.backend.lock_io();
                    let mut read = self.backend.read(r.max);
                    // A topic's backlog keeps no delay (as a disk queue
                    // does): a DPUB it held goes on at once.
                    read.msgs.extend(read.deferred.drain(..).map(|(m, _)| m));
                    self.state.lock().refilled(r, read.msgs, read.more);
                } else if !p.more {
                    break;
                }
                tokio::task::yield_now().await;
            }
        }
    }

    /// Drops what expired in the backlog while it cannot flow (nsq-rs,
    /// `max_age`; its channels expire what reaches them), its backend's
    /// expired head skipped unread; returns when to look again. A keeper's
    /// backlog (a replicated topic's, held for channels to come) is its
    /// group's to keep, and is left to them.
    fn sweep_expired(&self) -> Option<Instant> {
        let now_ns = now_unix_ns();
        let sweep = self.state.lock().sweep_expired(now_ns);
        if let Some(e) = sweep.backend {
            let n = if self.keeper.is_some() {
                0
            } else {
                let _io = self.backend.lock_io();
                let x = self.backend.expire(e.before_ns, false, e.max);
                x.skipped + x.taken.len() as u64
            };
            self.state.lock().backend_expired(n);
            if n > 0 {
                tracing::info!(topic = %self.name, expired = n, "expired messages of the topic's backlog dropped");
            }
        }
        let left = sweep.next_ns?.saturating_sub(now_ns).max(0) as u64;
        Some(now() + Duration::from_nanos(left))
    }

    /// Puts back the messages of these ids that the topic's keeper holds
    /// (a new leader's put-back), read when the backlog moves on. None
    /// when no keeper holds its queue (the caller puts the messages in);
    /// else how many were placed.
    pub fn place_back(&self, ids: &mut dyn Iterator<Item = MessageId>) -> Option<u64> {
        let n = self.backend.put_back(ids)?;
        if self.state.lock().backend_added(n) {
            self.pump.notify_one();
        }
        Some(n)
    }

    pub fn get_channel(&self, name: &str) -> Option<Arc<Channel>> {
        self.state.lock().channel(name).cloned()
    }

    pub fn channel_names(&self) -> Vec<String> {
        self.state
            .lock()
            .channels()
            .map(|(n, _)| n.clone())
            .collect()
    }

    pub fn channels(&self) -> Vec<Arc<Channel>> {
        self.state
            .lock()
            .channels()
            .map(|(_, c)| c.clone())
            .collect()
    }

    /// The channel, created (and announced) if it did not exist.
    pub fn get_or_create_channel(&self, name: &str) -> Result<Arc<Channel>, Exiting> {
        let (ch, pump) = {
            let mut st = self.state.lock();
            if st.is_exiting() {
                return Err(Exiting);
            }
            if let Some(ch) = st.channel(name) {
                return Ok(ch.clone());
            }
            // Opened under the topic's lock, so two SUBs racing for a new
            // channel cannot open its disk queue twice.
            let ch = Channel::new(
                &self.name,
                name,
                &self.ctx,
                &self.cancel,
                self.keeper.as_ref(),
            );
            if let Some(size) = st.mem_queue_size() {
                ch.set_mem_queue_size(size);
            }
            if !st.max_age().is_zero() {
                ch.set_topic_max_age(st.max_age());
            }
            if replicates(self.replicas(), name) {
                ch.record_finished();
            }
            let pump = st.add_channel(name, ch.clone())?;
            (ch, pump)
        };
        self.ctx.tasks.spawn(ch.clone().run_timer());
        tracing::info!(topic = %self.name, channel = %name, "new channel");
        self.ctx
            .emit(Event::ChannelCreated(self.name.clone(), name.to_string()));
        if pump {
            self.pump.notify_one();
        }
        Ok(ch)
    }

    /// Deletes a channel: its clients are disconnected and its data removed.
    /// None if there was no such channel; else whether the topic is left
    /// with no channel at all.
    pub fn delete_channel(&self, name: &str) -> Option<bool> {
        let (ch, now_empty) = {
            let mut st = self.state.lock();
            let ch = st.remove_channel(name)?;
            (ch, st.channel_count() == 0)
        };
        self.ctx
            .emit(Event::ChannelDeleted(self.name.clone(), name.to_string()));
        ch.delete();
        tracing::info!(topic = %self.name, channel = %name, "deleted channel");
        Some(now_empty)
    }

    /// Lets messages flow to the channels (after pre-creation or load).
    pub fn start(&self) {
        if self.state.lock().start() {
            self.pump.notify_one();
        }
    }

    pub fn is_paused(&self) -> bool {
        self.state.lock().is_paused()
    }

    pub fn set_paused(&self, paused: bool) {
        if self.state.lock().set_paused(paused) {
            self.pump.notify_one();
        }
    }

    /// `/topic/empty`: the backlog in memory and on disk.
    pub fn empty(&self) -> Result<(), BackendError> {
        self.state.lock().empty();
        self.backend.empty()
    }

    /// Topic delete: stop, delete every channel, remove data.
    pub fn delete(&self) {
        let channels = self.state.lock().delete();
        for (name, ch) in channels {
            self.ctx
                .emit(Event::ChannelDeleted(self.name.clone(), name));
            ch.delete();
        }
        self.cancel.cancel();
        if let Err(e) = self.backend.delete() {
            tracing::error!(topic = %self.name, error = %e, "failed to delete topic disk queue");
        }
    }

    /// Clean shutdown: channels persist memory, in-flight and deferred
    /// messages; the topic's backlog goes to its disk queue.
    pub fn close(&self) -> Result<(), BackendError> {
        let _io = self.backend.lock_io();
        let (backlog, channels) = {
            let mut st = self.state.lock();
            (
                st.close(),
                st.channels().map(|(_, c)| c.clone()).collect::<Vec<_>>(),
            )
        };
        self.cancel.cancel();
        for ch in channels {
            if let Err(e) = ch.close() {
                tracing::error!(topic = %self.name, channel = %ch.name, error = %e, "failed to persist channel");
            }
        }
        self.backend.close_with(&backlog)
    }

    /// fsyncs the disk queues with unsynced writes (`--sync-timeout`).
    pub fn sync_backends(&self) {
        self.backend.sync_if_needed();
        for ch in self.channels() {
            ch.sync_backend();
        }
    }

    /// The topic's `/stats` entry; its E2E percentiles merge its channels'.
    pub fn stats(&self, channel_filter: Option<&str>, include_clients: bool) -> TopicStats {
        let now = now();
        let backend_depth = self.backend.depth();
        let (mut stats, channels) = {
            let st = self.state.lock();
            (
                TopicStats {
                    replicas: self.replicas(),
                    ..st.stats(&self.name, backend_depth)
                },
                st.channels().map(|(_, c)| c.clone()).collect::<Vec<_>>(),
            )
        };
        let percentiles = &self.ctx.opts.e2e_processing_latency_percentiles;
        let (mut samples, mut count) = (Vec::new(), 0);
        for ch in &channels {
            if channel_filter.is_some_and(|f| f != ch.name) {
                continue;
            }
            if let Some((mut v, n)) = ch.e2e_samples(now) {
                samples.append(&mut v);
                count += n;
            }
            stats.channels.push(ch.stats(include_clients, now));
        }
        if !percentiles.is_empty() && !channels.is_empty() {
            samples.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
            stats.e2e_processing_latency = E2eLatency {
                count,
                percentiles: Some(quantiles(percentiles, &samples)),
            };
        }
        stats
    }

    // ---- replicated topics (nsq-rs, opt-in) ----

    /// Its replicas; None for an unreplicated topic.
    pub fn replicas(&self) -> Option<u8> {
        match self.replicas.load(Ordering::Relaxed) {
            0 => None,
            n => Some(n),
        }
    }

    /// Marks the topic replicated (a committed `TopicCreate`, or
    /// `nsqd.dat` at startup); 0 is not a replica count and is ignored.
    pub fn set_replicas(&self, replicas: u8) {
        if replicas > 0 {
            self.replicas.store(replicas, Ordering::Relaxed);
            for ch in self.channels() {
                if replicates(Some(replicas), &ch.name) {
                    ch.record_finished();
                }
            }
        }
    }
}

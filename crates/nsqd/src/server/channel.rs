//! A channel as the server runs it: the core state machine behind one
//! short-held mutex, the subscribed clients' outboxes beside it, its disk
//! queue, and a timer task.
//!
//! Every operation is the same three steps ([`Channel::enter`] and
//! [`Channel::carry_out`]): under the lock, call the core and hand its
//! frames to the clients' outboxes (memory only); unlocked, do the disk
//! work it asked for — an append, a refill — and report back, which may
//! deliver more. The timer task sleeps until the core's next deadline and
//! is poked only when an earlier one appears: one timer per channel, none
//! when idle.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nsq_protocol::stats::{ChannelStats, ClientStats};
use nsq_protocol::{Message, MessageId};
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::backend::{Backend, OpenKeeper, Ticket};
use super::client::Client;
use super::clock::{now, now_unix_ns};
use super::context::Context;
use super::disk::BackendError;
use super::spill::Spill;

mod fins;
mod runs;
mod settings;

pub use fins::in_flight_error;
use fins::LeftFins;

use crate::core::{self, ClientId, DiskWork, IdMap, InFlightError, Limit, SubError};

/// How long [`Channel::enter`] spins for a taken lock before it sleeps.
const LOCK_SPIN: Duration = Duration::from_micros(50);

/// Tries of the lock between two readings of the clock while spinning.
const SPINS_PER_CLOCK_READ: usize = 32;

struct Locked {
    core: core::Channel,
    /// The subscribed clients, whose outboxes the core's frames go to.
    clients: IdMap<ClientId, Arc<Client>>,
    /// Where messages past `max_attempts` go; None: the default name.
    dead_letter_topic: Option<String>,
    /// Its topic's `max_age` in force (zero: none), which bounds its own.
    topic_max_age: Duration,
}

impl Locked {
    /// Whether the channel has a dead-letter topic: `max_attempts` set, or
    /// one named. What expires goes there then.
    fn has_dead_letters(&self) -> bool {
        self.core.max_attempts() > 0 || self.dead_letter_topic.is_some()
    }
}

/// A channel's nsq-rs settings as `nsqd.dat` keeps them: only what differs
/// from the defaults.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Settings {
    pub max_attempts: Option<u16>,
    pub dead_letter_topic: Option<String>,
    pub limit: Limit,
    pub max_age: Option<Duration>,
}

/// The dead-letter topic a channel uses unless told otherwise:
/// `<topic>.<channel>.dead`, `#ephemeral` dropped (a topic name cannot
/// carry it in the middle), cut to NSQ's 64 characters with a hash of the
/// full name kept, so the name is valid and different channels' differ.
pub fn default_dead_letter_topic(topic: &str, channel: &str) -> String {
    let strip = |n: &str| n.strip_suffix("#ephemeral").unwrap_or(n).to_string();
    let name = format!("{}.{}.dead", strip(topic), strip(channel));
    if name.len() <= 64 {
        return name;
    }
    let hash = crc32fast::hash(name.as_bytes());
    format!("{}.{hash:08x}.dead", &name[..64 - 14])
}

pub struct Channel {
    pub topic_name: String,
    pub name: String,
    pub ephemeral: bool,
    state: Mutex<Locked>,
    /// FIN batches that found `state` locked, for its holder to do.
    left: LeftFins,
    backend: Backend,
    /// Run files of spilled deferred messages (None: `#ephemeral`).
    spill: Option<Arc<Spill>>,
    timer: Notify,
    /// Stops the timer task when the channel is deleted or nsqd exits.
    pub cancel: CancellationToken,
    ctx: Arc<Context>,
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Channel({}:{})", self.topic_name, self.name)
    }
}

impl Channel {
    /// Opens the channel's disk queue (`<topic>:<channel>`), or with
    /// `keeper` (its topic's queues are held by a keeper) its keeper,
    /// unless it is `#ephemeral`; the caller spawns [`Channel::run_timer`].
    pub fn new(
        topic_name: &str,
        name: &str,
        ctx: &Arc<Context>,
        parent: &CancellationToken,
        keeper: Option<&OpenKeeper>,
    ) -> Arc<Channel> {
        let backend = match keeper {
            Some(open) if !nsq_protocol::names::is_ephemeral(name) => Backend::kept(open()),
            _ => ctx.open_backend(&format!("{topic_name}:{name}"), true),
        };
        let spill = ctx.open_spill(&format!("{topic_name}:{name}"));
        let cfg = ctx.channel_config(name, &backend, spill.as_deref());
        Arc::new(Channel {
            topic_name: topic_name.to_string(),
            name: name.to_string(),
            ephemeral: nsq_protocol::names::is_ephemeral(name),
            state: Mutex::new(Locked {
                core: core::Channel::new(cfg, now()),
                clients: IdMap::default(),
                dead_letter_topic: None,
                topic_max_age: Duration::ZERO,
            }),
            left: LeftFins::default(),
            backend,
            spill,
            timer: Notify::new(),
            cancel: parent.child_token(),
            ctx: ctx.clone(),
        })
    }

    /// Calls the core under the lock, hands its frames to the clients'
    /// outboxes and pokes the timer if needed; returns the disk work left.
    fn enter<R>(&self, f: impl FnOnce(&mut Locked) -> R) -> (R, DiskWork) {
        let (r, work) = self.enter_locked(self.lock_spinning(), f);
        self.check_left();
        (r, work)
    }

    /// The state's lock, spun for (the CPU's pause between tries) for up to
    /// [`LOCK_SPIN`] before this thread sleeps on it. parking_lot's own
    /// wait spins a little, then gives the core away with `sched_yield` up
    /// to seven times before it parks: on two cores every yield ran a
    /// runnable consumer instead, a context switch each. Holders keep the
    /// lock for one core call (a FIN batch with its deliveries: tens of
    /// microseconds), so spinning mostly ends with the lock. Measured: a
    /// disk-queue backlog drained by four consumers made 24,000 yields for
    /// 7.5M messages, and its refills' reports waited behind FIN batches;
    /// spinning took the four from a median 0.92 to 0.99 of one consumer's
    /// msgs/s (docs/performance.md).
    fn lock_spinning(&self) -> MutexGuard<'_, Locked> {
        // the common case, a free lock, reads no clock
        if let Some(st) = self.state.try_lock() {
            return st;
        }
        let start = Instant::now();
        loop {
            for _ in 0..SPINS_PER_CLOCK_READ {
                if let Some(st) = self.state.try_lock() {
                    return st;
                }
                std::hint::spin_loop();
            }
            if start.elapsed() >= LOCK_SPIN {
                return self.state.lock();
            }
        }
    }

    /// [`enter`](Channel::enter) with the lock already taken: FIN batches
    /// left before or during `f` are done under the same lock.
    fn enter_locked<R>(
        &self,
        mut st: MutexGuard<'_, Locked>,
        f: impl FnOnce(&mut Locked) -> R,
    ) -> (R, DiskWork) {
        let (r, work, wake) = {
            self.do_left(&mut st);
            let r = f(&mut st);
            self.do_left(&mut st);
            let Locked { core, clients, .. } = &mut *st;
            core.flush_deliveries(|id, frames| {
                if let Some(c) = clients.get(&id) {
                    c.send_frames(frames);
                }
            });
            (r, core.take_disk_work(), core.take_wake())
        };
        if wake {
            self.timer.notify_one();
        }
        (r, work)
    }

    /// Does the disk work, unlocked, and reports each part back to the core
    /// (which may deliver more or ask for more). The first failed append is
    /// returned: its messages are lost for this channel, and whoever
    /// published them must hear so. Appends leave their tickets in
    /// `tickets`, for a publisher that answers only once they are durable.
    pub fn carry_out(
        &self,
        mut work: DiskWork,
        tickets: &mut Vec<Ticket>,
    ) -> Result<(), BackendError> {
        let mut result = Ok(());
        while !work.is_empty() {
            // published before anything of this channel is locked: the
            // dead-letter topic may fan out to channels of its own
            let dead_letter_acks = std::mem::take(&mut work.dead_letter_acks);
            let refused = (!work.dead_letters.is_empty())
                .then(|| self.dead_letter(std::mem::take(&mut work.dead_letters)))
                .flatten();
            let _io = self.backend.lock_io();
            let appended = (!work.append.is_empty()).then(|| self.append(&work.append));
            // a drop-oldest limit's share of the disk: its oldest records,
            // read and done with before a refill could hand them out
            let skip = work.skip;
            if skip > 0 {
                let dropped = self.backend.read(skip as usize);
                self.backend.ack(&dropped.reads);
            }
            let expired = work
                .expire
                .map(|e| self.backend.expire(e.before_ns, e.bodies, e.max));
            let refilled = work.refill.map(|r| (r, self.backend.read(r.max)));
            let did_append = appended.is_some();
            // with durable acknowledgements, a run is deleted only once the
            // records it gave back are durable in the disk queue
            let mut last_append = None;
            match appended {
                Some(Err(e)) => {
                    tracing::error!(topic = %self.topic_name, channel = %self.name, error = %e, "channel disk write failed");
                    result = result.and(Err(e));
                }
                Some(Ok(ticket)) => {
                    last_append.clone_from(&ticket);
                    tickets.extend(ticket);
                    // the records written back replace the ones read
                    self.backend.ack(&work.acks);
                }
                None => self.backend.ack(&work.acks),
            }
            let runs =
                self.carry_out_runs(std::mem::take(&mut work.deferred), last_append, tickets);
            let refused = match refused {
                Some(msgs) => Some((msgs, dead_letter_acks)),
                None => {
                    let reads: Vec<u64> = dead_letter_acks.iter().map(|&(_, r)| r).collect();
                    self.backend.ack(&reads);
                    None
                }
            };
            ((), work) = self.enter(|st| {
                let now = now();
                if did_append {
                    st.core.appended(now);
                }
                if let Some(x) = expired {
                    st.core.backend_expired(x.skipped, x.taken, x.reads, now);
                }
                if let Some((r, read)) = refilled {
                    st.core.refilled(r, read.msgs, read.reads, read.more, now);
                    if !read.deferred.is_empty() {
                        st.core.refilled_deferred(read.deferred, now);
                    }
                }
                if let Some((msgs, acks)) = refused {
                    st.core.dead_letters_refused(msgs, acks, now);
                }
                for (run, refused) in runs.spilled {
                    st.core.spilled(run, refused, now);
                }
                for (run, records, next) in runs.loaded {
                    st.core.loaded(run, records, next, now);
                }
            });
        }
        result
    }

    /// Publishes messages that used up their attempts to the dead-letter
    /// topic, bodies unchanged; the ones it refused come back.
    fn dead_letter(&self, msgs: Vec<Message>) -> Option<Vec<Message>> {
        let topic = self.dead_letter_topic();
        let bodies = msgs.iter().map(|m| m.body.clone()).collect();
        match self.ctx.publish(&topic, bodies) {
            Ok(()) => {
                tracing::info!(topic = %self.topic_name, channel = %self.name, dead_letter_topic = %topic, count = msgs.len(), "messages past max_attempts moved to the dead-letter topic");
                None
            }
            Err(e) => {
                tracing::error!(topic = %self.topic_name, channel = %self.name, dead_letter_topic = %topic, error = %e, "dead-letter publish failed; messages kept");
                Some(msgs)
            }
        }
    }

    fn append(&self, msgs: &[Message]) -> Result<Option<Ticket>, BackendError> {
        let r = self.backend.append(msgs);
        // a disk write that worked means the disk is healthy (again), as
        // nsqd's channel.put reports on /ping
        self.ctx.set_health(r.as_ref().err().map(|e| e.to_string()));
        r
    }

    fn run<R>(&self, f: impl FnOnce(&mut Locked) -> R) -> R {
        let (r, work) = self.enter(f);
        if !work.is_empty() {
            // a requeue or a timeout: nobody waits for its records
            let _ = self.carry_out(work, &mut Vec::new());
        }
        r
    }

    // ---- from the topic ----

    /// Messages from the topic, deferred by `defer` when set. The memory
    /// part is done on return; the disk part is returned for the caller to
    /// [`carry_out`](Channel::carry_out) once it has released its own lock.
    pub fn put(&self, msgs: Vec<Message>, defer: Option<Duration>, now: Instant) -> DiskWork {
        let ((), work) = self.enter(|st| match defer {
            Some(d) if !d.is_zero() => st.core.put_deferred(msgs, d, now),
            _ => st.core.put(msgs, now),
        });
        work
    }

    /// Its `max_depth` if a `reject` limit refuses `incoming` new messages.
    pub fn refuses(&self, incoming: usize) -> Option<u64> {
        let st = self.lock();
        st.core
            .refuses(incoming)
            .then_some(st.core.limit().max_depth)
    }

    /// Messages its group's `drop-oldest` limit dropped (on the group's
    /// leader): never delivered from here on.
    pub fn drop_for_group(&self, ids: &[nsq_protocol::MessageId]) {
        self.run(|st| st.core.drop_for_group(ids));
    }

    // ---- from a subscribed client ----

    pub fn subscribe(
        &self,
        client: &Arc<Client>,
        msg_timeout: Duration,
        sample_rate: i32,
    ) -> Result<(), SubError> {
        let max = self.ctx.opts.max_channel_consumers;
        self.run(|st| {
            st.core
                .add_client(client.id, msg_timeout, sample_rate, max)?;
            st.clients.insert(client.id, client.clone());
            Ok(())
        })
    }

    /// Returns how many clients remain.
    pub fn unsubscribe(&self, client: ClientId) -> usize {
        self.run(|st| {
            st.clients.remove(&client);
            st.core.remove_client(client)
        })
    }

    pub fn set_rdy(&self, client: ClientId, rdy: i64, now: Instant) {
        self.run(|st| st.core.set_rdy(client, rdy, now))
    }

    /// FINs of one read, failures reported per id in order.
    pub fn requeue(
        &self,
        client: ClientId,
        id: &MessageId,
        delay: Duration,
        now: Instant,
    ) -> Result<(), InFlightError> {
        // a replicated topic's group keeps when it is due (Unix ms)
        let due_ms =
            (!delay.is_zero()).then(|| now_unix_ns() / 1_000_000 + delay.as_millis() as i64);
        self.run(|st| {
            st.core.requeue(client, id, delay, now)?;
            if let Some(due) = due_ms {
                st.core.record_deferred(*id, due);
            }
            Ok(())
        })
    }

    pub fn touch(
        &self,
        client: ClientId,
        id: &MessageId,
        now: Instant,
    ) -> Result<(), InFlightError> {
        let max = self.ctx.opts.max_msg_timeout;
        self.run(|st| st.core.touch(client, id, now, max))
    }

    // ---- the timer ----

    /// Sleeps until the next deadline, or until poked; runs the core's
    /// timers. With durable acknowledgements it also wakes after each sync
    /// of the disk queue: the records it covered have become readable.
    pub async fn run_timer(self: Arc<Self>) {
        let mut syncs = self.backend.syncs();
        loop {
            let next = self.run(|st| {
                let now = now();
                if st.core.expires() {
                    // ages are read from the wall clock it last heard
                    st.core.sync_wall_clock(now, now_unix_ns());
                }
                st.core.process_timers(now)
            });
            let sleep = async {
                match next {
                    Some(t) => tokio::time::sleep_until(t.into()).await,
                    None => std::future::pending().await,
                }
            };
            let synced = async {
                match syncs.as_mut() {
                    Some(rx) => rx.changed().await.is_ok(),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = sleep => {}
                _ = self.timer.notified() => {}
                true = synced => self.run(|st| st.core.backend_grew(now())),
                _ = self.cancel.cancelled() => return,
            }
        }
    }

    // ---- administration ----

    pub fn is_paused(&self) -> bool {
        self.lock().core.is_paused()
    }

    pub fn set_paused(&self, paused: bool) {
        self.run(|st| st.core.set_paused(paused, now()))
    }

    /// Keeps the ids of its FINs for its replicated topic's group, from
    /// now on ([`Channel::take_finished`]).
    pub fn record_finished(&self) {
        self.lock().core.record_finished();
    }

    /// The ids FINed since the last call (a replicated topic's channel).
    pub fn take_finished(&self) -> Vec<MessageId> {
        self.lock().core.take_finished()
    }

    /// The messages requeued with a delay since the last call, with when
    /// each is due (Unix ms; a replicated topic's channel).
    pub fn take_deferred(&self) -> Vec<(MessageId, i64)> {
        self.lock().core.take_deferred()
    }

    /// Puts back the messages of these ids that the channel's keeper
    /// holds (a new leader's put-back of what the group has not finished),
    /// read when their turn comes. None when no keeper holds its queue (the
    /// caller puts the messages in); else how many were placed.
    pub fn place_back(&self, ids: &mut dyn Iterator<Item = MessageId>) -> Option<u64> {
        let n = self.backend.put_back(ids)?;
        self.run(|st| st.core.backend_added(n, now()));
        Some(n)
    }

    /// `/channel/empty`: memory, in flight, deferred and the disk queue.
    pub fn empty(&self) -> Result<(), BackendError> {
        self.run(|st| st.core.empty());
        self.backend.empty()
    }

    /// The subscribed clients (to disconnect them).
    pub fn clients(&self) -> Vec<Arc<Client>> {
        self.lock().clients.values().cloned().collect()
    }

    pub fn client_count(&self) -> usize {
        self.lock().core.client_count()
    }

    /// Channel delete: stops the timer, drops everything, removes the disk
    /// queue's files and disconnects the clients.
    pub fn delete(&self) {
        self.cancel.cancel();
        let clients = self.run(|st| {
            st.core.delete();
            std::mem::take(&mut st.clients)
        });
        if let Err(e) = self.backend.delete() {
            tracing::error!(topic = %self.topic_name, channel = %self.name, error = %e, "failed to delete channel disk queue");
        }
        if let Some(s) = &self.spill {
            s.delete_all();
        }
        for c in clients.values() {
            c.closer.cancel();
        }
    }

    /// Clean shutdown: clients disconnected, memory, in-flight and deferred
    /// messages written to the disk queue, which is closed. With
    /// `--deferred-spill` the deferred ones go to a run instead, due times
    /// kept, and the runs' read offsets are saved.
    pub fn close(&self) -> Result<(), BackendError> {
        self.cancel.cancel();
        let _io = self.backend.lock_io();
        let ((mut msgs, run), clients) = {
            let mut st = self.lock();
            // FINs left by connections still count: not written back
            self.do_left(&mut st);
            (st.core.close(), std::mem::take(&mut st.clients))
        };
        for c in clients.values() {
            c.closer.cancel();
        }
        if let Some(b) = run {
            if let Err(recs) = self.write_closing_run(b) {
                // due times lost, messages kept: as NSQ's shutdown does
                msgs.extend(recs);
            }
        }
        let r = self.backend.close_with(&msgs);
        match &self.spill {
            Some(s) => r.and(s.close()),
            None => r,
        }
    }

    pub fn sync_backend(&self) {
        self.backend.sync_if_needed()
    }

    // ---- stats ----

    pub fn stats(&self, include_clients: bool, now: Instant) -> ChannelStats {
        let backend_depth = self.backend.depth();
        let mut st = self.lock();
        let mut s = st.core.stats(&self.name, backend_depth, now);
        s.max_attempts = st.core.max_attempts();
        if s.max_attempts > 0 {
            s.dead_letter_topic = Some(
                st.dead_letter_topic
                    .clone()
                    .unwrap_or_else(|| default_dead_letter_topic(&self.topic_name, &self.name)),
            );
        }
        if include_clients {
            s.clients = Some(
                st.clients
                    .values()
                    .map(|c| c.stats(st.core.subscriber(c.id)))
                    .collect(),
            );
        }
        s
    }

    /// A subscribed client's stats with its counters here.
    pub fn client_stats(&self, client: &Client) -> ClientStats {
        client.stats(self.lock().core.subscriber(client.id))
    }

    /// E2E samples of this channel's window (for the topic's merge).
    pub fn e2e_samples(&self, now: Instant) -> Option<(Vec<f64>, u64)> {
        self.lock().core.e2e_samples(now)
    }
}

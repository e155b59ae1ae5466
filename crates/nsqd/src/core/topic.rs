//! A topic: the named stream publishers write to, as a plain state machine.
//!
//! Owns: message ids and timestamps ([`GuidFactory`]), the topic's own
//! queue (its backlog: messages published while it has no channel, is
//! paused or not yet started, waiting in memory and then in its backend),
//! the channels by name, and its counters.
//!
//! Every message a topic accepts goes to every channel it has — the copies
//! share one body (see [`copies`]) — or, while it cannot flow, to the
//! backlog, which the server's pump moves on in order once it can. A topic
//! created at run time is not *started* until the channels the lookupds
//! know for it exist (nsqd's pre-creation), so its first messages reach
//! every consumer group.
//!
//! A topic may have a depth limit of its own (its backlog) and channels
//! with `reject` limits ([`super::limits`]): a publish any of them refuses
//! is refused whole, before a message id is drawn, so nothing is
//! half-published. A topic's `mem_queue_size` may differ from the flag's;
//! the server applies it to the topic's channels too.
//!
//! Never: reads the clock (wall-clock nanoseconds are passed in for the
//! ids and timestamps), locks a channel or touches the disk. It is generic
//! over what it keeps per channel: the server keeps a shared handle to a
//! locked [`super::channel::Channel`], the tests the state machine itself.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::Bytes;
use nsq_protocol::stats::{E2eLatency, TopicStats};
use nsq_protocol::Message;

use super::effects::BackendExpiry;
use super::guid::GuidFactory;
use super::limits::{Admit, Full, Limit};
use super::queue::{Queue, Refill};

/// How many backlog messages one pump pass moves, so a long backlog never
/// holds the topic (and its publishers) for long.
pub const PUMP_BATCH: usize = 512;

/// The topic is being deleted or nsqd is exiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("exiting")]
pub struct Exiting;

/// Why a publish was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("exiting")]
    Exiting,
    /// A `reject` limit: the topic's or a channel's.
    #[error(transparent)]
    Full(#[from] Full),
    /// A deferral as long as the topic's `max_age` or longer: the message
    /// would expire before it is due (nsq-rs).
    #[error("defer past the topic's max_age {}", nsq_protocol::duration::format(*.0))]
    DeferPastMaxAge(Duration),
}

impl From<Exiting> for Refused {
    fn from(_: Exiting) -> Refused {
        Refused::Exiting
    }
}

/// What a new topic starts from.
#[derive(Debug, Clone)]
pub struct TopicConfig {
    /// `--mem-queue-size`.
    pub mem_queue_size: usize,
    /// False for `#ephemeral` topics: backlog overflow is dropped.
    pub durable: bool,
    /// The backend held unread records at open (a restart).
    pub backend_unread: bool,
    /// How many: where a depth limit's count of the backend starts.
    pub backend_depth: u64,
    /// `--node-id`, part of every message id.
    pub node_id: i64,
    /// False when channels must be pre-created before messages flow.
    pub started: bool,
}

/// A message in the backlog with the deferral it was published with. The
/// deferral lives in memory only: a disk record has no place for it, so a
/// DPUB that overflows the backlog to disk loses its delay, as in nsqd.
#[derive(Debug, Clone, PartialEq)]
pub struct Backlogged {
    pub msg: Message,
    pub defer: Option<Duration>,
}

/// What the server does with a publish.
#[derive(Debug, Default)]
pub struct Publish {
    /// Hand these to every channel now (empty when they joined the backlog).
    pub fan_out: Vec<Message>,
    pub defer: Option<Duration>,
    /// Backlog overflow: append to the topic's backend, then [`Topic::appended`].
    pub append: Vec<Message>,
    /// The backlog can flow: run the pump.
    pub pump: bool,
    /// Oldest backend records to read and drop (a `drop-oldest` limit).
    pub skip: u64,
}

/// One pump pass's work.
#[derive(Debug, Default)]
pub struct Pump {
    /// Backlog messages to hand to every channel, in order.
    pub batch: Vec<Backlogged>,
    /// Read the backend, then [`Topic::refilled`] (and pump again).
    pub refill: Option<Refill>,
    /// More can move right away: pump again.
    pub more: bool,
}

#[derive(Debug)]
pub struct Topic<C> {
    channels: BTreeMap<String, C>,
    backlog: Queue<Backlogged>,
    paused: bool,
    started: bool,
    exiting: bool,
    message_count: u64,
    message_bytes: u64,
    guid: GuidFactory,
    limit: Limit,
    dropped_count: u64,
    /// Records in the backend as the topic counts them (see
    /// [`Topic::depth`]): appends handed out, less refills and drops.
    backend_len: u64,
    /// Its own `mem_queue_size` (None: the flag's).
    mem_queue_size: Option<usize>,
    /// Channels with a `reject` limit, asked before each publish.
    rejecting: BTreeSet<String>,
    /// Its own `max_age` (nsq-rs; None: the flag's), the one in force in
    /// nanoseconds (0: never expire, NSQ's behaviour), and what expired in
    /// its backlog.
    own_max_age: Option<Duration>,
    max_age_ns: i64,
    expired_count: u64,
    /// A backend sweep is out.
    sweeping: bool,
}

/// A sweep of a topic's backlog for expired messages.
#[derive(Debug, Default)]
pub struct Sweep {
    /// Take the expired head of the backend, then [`Topic::backend_expired`].
    pub backend: Option<BackendExpiry>,
    /// When to sweep again (Unix ns); None: nothing can expire.
    pub next_ns: Option<i64>,
}

impl<C> Topic<C> {
    pub fn new(cfg: TopicConfig) -> Topic<C> {
        Topic {
            channels: BTreeMap::new(),
            backlog: Queue::new(cfg.mem_queue_size, cfg.durable, cfg.backend_unread),
            paused: false,
            started: cfg.started,
            exiting: false,
            message_count: 0,
            message_bytes: 0,
            guid: GuidFactory::new(cfg.node_id),
            limit: Limit::default(),
            dropped_count: 0,
            backend_len: if cfg.durable { cfg.backend_depth } else { 0 },
            mem_queue_size: None,
            rejecting: BTreeSet::new(),
            own_max_age: None,
            max_age_ns: 0,
            expired_count: 0,
            sweeping: false,
        }
    }

    fn can_flow(&self) -> bool {
        self.started && !self.paused && !self.exiting && !self.channels.is_empty()
    }

    fn should_pump(&self) -> bool {
        self.can_flow() && !self.backlog.is_empty()
    }

    pub fn is_paused(&self) -> bool {
        self.paused
    }

    pub fn is_exiting(&self) -> bool {
        self.exiting
    }

    pub fn memory_depth(&self) -> usize {
        self.backlog.memory_len()
    }

    // ---- publishing ----

    /// Stamps `bodies` as new messages (id, `now_unix_ns` timestamp) and
    /// routes them ([`Topic::route`]).
    pub fn publish(
        &mut self,
        bodies: Vec<Bytes>,
        defer: Option<Duration>,
        now_unix_ns: i64,
        channel_refuses: impl Fn(&C, usize) -> Option<u64>,
    ) -> Result<Publish, Refused> {
        if self.exiting {
            return Err(Refused::Exiting);
        }
        if let Some(r) = self.defer_refusal(defer) {
            return Err(r);
        }
        let msgs = self.stamp(bodies, now_unix_ns);
        self.route(msgs, defer, channel_refuses)
    }

    /// New messages of `bodies`: the topic's next ids, `now_unix_ns` as
    /// their timestamp. A replicated topic's publish is stamped here and
    /// routed once its group committed it.
    pub fn stamp(&mut self, bodies: Vec<Bytes>, now_unix_ns: i64) -> Vec<Message> {
        bodies
            .into_iter()
            .map(|body| Message::new(self.guid.next(now_unix_ns), now_unix_ns, body))
            .collect()
    }

    /// Routes stamped messages: straight to the channels when the topic
    /// can flow and has no backlog (so nothing overtakes the backlog), else
    /// into it.
    ///
    /// Limits first: each channel with a `reject` limit is asked
    /// (`channel_refuses`: its max_depth if it refuses this many), then the
    /// topic's own limit applies to what joins the backlog.
    pub fn route(
        &mut self,
        msgs: Vec<Message>,
        defer: Option<Duration>,
        channel_refuses: impl Fn(&C, usize) -> Option<u64>,
    ) -> Result<Publish, Refused> {
        if self.exiting {
            return Err(Refused::Exiting);
        }
        if let Some(full) = self.channel_refusal(msgs.len(), channel_refuses) {
            return Err(full.into());
        }
        // One verdict of the topic's limit serves both the refusal and the
        // room a `drop-oldest` limit makes.
        match self.topic_admit(msgs.len()) {
            Admit::Refuse => Err(Full::Topic(self.limit.max_depth).into()),
            admit => Ok(self.place(msgs, defer, admit)),
        }
    }

    /// The `reject` limit that refuses `incoming` new messages now, if
    /// any: a channel's (`channel_refuses`: its max_depth if it refuses
    /// this many), then the topic's own, which applies to what would join
    /// the backlog. What [`Topic::route`] checks first; a replicated
    /// topic's publish is checked with it before it is proposed.
    pub fn refusal(
        &self,
        incoming: usize,
        channel_refuses: impl Fn(&C, usize) -> Option<u64>,
    ) -> Option<Full> {
        self.channel_refusal(incoming, channel_refuses).or_else(|| {
            (self.topic_admit(incoming) == Admit::Refuse)
                .then_some(Full::Topic(self.limit.max_depth))
        })
    }

    /// Why a publish deferred by `defer` is refused: a deferral that
    /// reaches the topic's `max_age` would only ever expire (a channel with
    /// a shorter `max_age` of its own expires it when it comes due).
    pub fn defer_refusal(&self, defer: Option<Duration>) -> Option<Refused> {
        let max_age = self.max_age();
        match defer {
            Some(d) if !max_age.is_zero() && d >= max_age => {
                Some(Refused::DeferPastMaxAge(max_age))
            }
            _ => None,
        }
    }

    fn channel_refusal(
        &self,
        incoming: usize,
        channel_refuses: impl Fn(&C, usize) -> Option<u64>,
    ) -> Option<Full> {
        self.rejecting.iter().find_map(|name| {
            let max = channel_refuses(self.channels.get(name)?, incoming)?;
            Some(Full::Channel(name.clone(), max))
        })
    }

    /// The topic's own limit on `incoming` messages: it applies only to
    /// what would join the backlog, so everything is admitted while the
    /// topic flows straight to its channels.
    fn topic_admit(&self, incoming: usize) -> Admit {
        let flows = self.can_flow() && self.backlog.is_empty();
        if flows || !self.limit.is_set() {
            return Admit::All;
        }
        self.limit.admit(self.depth(), incoming as u64)
    }

    /// [`Topic::route`] without the `reject` limits: for messages already
    /// admitted (a replicated topic's batch, checked where it was taken
    /// before it was proposed, and committed since, so refusing it now
    /// would lose an acknowledged message). A `drop-oldest` limit still
    /// makes room.
    pub fn route_admitted(
        &mut self,
        msgs: Vec<Message>,
        defer: Option<Duration>,
    ) -> Result<Publish, Refused> {
        if self.exiting {
            return Err(Refused::Exiting);
        }
        let admit = match self.topic_admit(msgs.len()) {
            Admit::Refuse => Admit::All,
            admit => admit,
        };
        Ok(self.place(msgs, defer, admit))
    }

    /// Takes `msgs` in under the limit's verdict `admit`: to the channels
    /// when the topic flows, else into the backlog.
    fn place(&mut self, mut msgs: Vec<Message>, defer: Option<Duration>, admit: Admit) -> Publish {
        // Decided before a `drop-oldest` limit empties the backlog: what
        // arrives behind a backlog stays behind it.
        let flows = self.can_flow() && self.backlog.is_empty();
        let mut skip = 0;
        if let Admit::Drop { old, new } = admit {
            self.dropped_count += old + new;
            self.message_count += new;
            self.message_bytes += msgs
                .drain(..new as usize)
                .map(|m| m.body.len() as u64)
                .sum::<u64>();
            let mut left = old;
            while left > 0 && self.backlog.pop().is_some() {
                left -= 1;
            }
            skip = left;
            self.backend_len = self.backend_len.saturating_sub(left);
        }
        for m in &msgs {
            self.message_count += 1;
            self.message_bytes += m.body.len() as u64;
        }
        if flows {
            return Publish {
                fan_out: msgs,
                defer,
                ..Publish::default()
            };
        }
        let mut append = Vec::new();
        for msg in msgs {
            if self.backlog.has_room() {
                self.backlog.push_memory(Backlogged { msg, defer });
            } else if self.backlog.is_durable() {
                append.push(msg);
            }
            // else: an #ephemeral topic's overflow is dropped, as nsqd does
        }
        if !append.is_empty() {
            self.backlog.append_started();
            self.backend_len += append.len() as u64;
        }
        Publish {
            fan_out: Vec::new(),
            defer,
            append,
            pump: self.should_pump(),
            skip,
        }
    }

    /// Takes back the count of messages a channel or the backend refused:
    /// nsqd counts only what it accepted.
    pub fn unpublish(&mut self, count: u64, bytes: u64) {
        self.message_count = self.message_count.saturating_sub(count);
        self.message_bytes = self.message_bytes.saturating_sub(bytes);
    }

    /// A [`Publish::append`] is done (worked or not). True: pump.
    pub fn appended(&mut self) -> bool {
        self.backlog.appended();
        self.should_pump()
    }

    // ---- the backlog pump ----

    /// Up to `max` backlog messages to move on, when the topic can flow.
    pub fn pump(&mut self, max: usize) -> Pump {
        let mut out = Pump::default();
        while self.can_flow() && out.batch.len() < max {
            match self.backlog.pop() {
                Some((b, _)) => out.batch.push(b),
                None => {
                    out.refill = self.backlog.refill(max);
                    return out;
                }
            }
        }
        out.more = self.should_pump();
        out
    }

    /// Records became readable in the backend (a sync covered them, with
    /// durable acknowledgements). True: pump.
    pub fn backend_grew(&mut self) -> bool {
        self.backlog.grew();
        self.should_pump()
    }

    /// The server put `n` records in the backend itself (a new leader of a
    /// replicated topic's group places there what the topic holds, to be
    /// read from the log): counted in its depth. True: pump.
    pub fn backend_added(&mut self, n: u64) -> bool {
        if n > 0 && self.backlog.is_durable() {
            self.backend_len += n;
            self.backlog.grew();
        }
        self.should_pump()
    }

    /// A [`Pump::refill`]'s records (decoded) and whether the backend has more.
    pub fn refilled(&mut self, req: Refill, msgs: Vec<Message>, more: bool) {
        self.backend_len = self.backend_len.saturating_sub(msgs.len() as u64);
        let records = msgs
            .into_iter()
            .map(|msg| Backlogged { msg, defer: None })
            .collect();
        self.backlog.refilled(req, records, more);
    }

    // ---- channels ----

    pub fn channel(&self, name: &str) -> Option<&C> {
        self.channels.get(name)
    }

    /// Channels by name, in name order.
    pub fn channels(&self) -> impl Iterator<Item = (&String, &C)> {
        self.channels.iter()
    }

    pub fn channels_mut(&mut self) -> impl Iterator<Item = (&String, &mut C)> {
        self.channels.iter_mut()
    }

    pub fn channel_count(&self) -> usize {
        self.channels.len()
    }

    /// A new channel. True: the backlog can flow now, run the pump.
    pub fn add_channel(&mut self, name: &str, ch: C) -> Result<bool, Exiting> {
        if self.exiting {
            return Err(Exiting);
        }
        self.channels.insert(name.to_string(), ch);
        Ok(self.should_pump())
    }

    pub fn remove_channel(&mut self, name: &str) -> Option<C> {
        self.rejecting.remove(name);
        self.channels.remove(name)
    }

    // ---- limits ----

    pub fn limit(&self) -> Limit {
        self.limit
    }

    /// The topic's own limit, for new messages from now on.
    pub fn set_limit(&mut self, limit: Limit) {
        self.limit = limit;
    }

    /// Whether channel `name` has a `reject` limit the topic must ask.
    pub fn set_channel_rejects(&mut self, name: &str, rejects: bool) {
        if rejects {
            self.rejecting.insert(name.to_string());
        } else {
            self.rejecting.remove(name);
        }
    }

    /// Its own `mem_queue_size`, or None for the flag's (`default`).
    pub fn mem_queue_size(&self) -> Option<usize> {
        self.mem_queue_size
    }

    pub fn set_mem_queue_size(&mut self, size: Option<usize>, default: usize) {
        self.mem_queue_size = size;
        self.backlog.set_capacity(size.unwrap_or(default));
    }

    /// The backlog's depth as `/stats` will show it once the disk work
    /// handed out is done. Counted here, never read from the disk queue,
    /// so it cannot be caught between a write and its confirmation.
    fn depth(&self) -> u64 {
        self.backlog.memory_len() as u64 + self.backend_len
    }

    // ---- administration ----

    /// Messages may flow (pre-creation or metadata load done). True: pump.
    pub fn start(&mut self) -> bool {
        self.started = true;
        self.should_pump()
    }

    /// True: pump.
    pub fn set_paused(&mut self, paused: bool) -> bool {
        self.paused = paused;
        self.should_pump()
    }

    /// Drops the backlog (`/topic/empty`); the server empties the backend.
    pub fn empty(&mut self) {
        self.backend_len = 0;
        self.backlog.clear();
    }

    /// Topic delete: nothing more is accepted, the backlog is dropped, and
    /// the channels are handed over for the server to delete.
    pub fn delete(&mut self) -> Vec<(String, C)> {
        self.exiting = true;
        self.backlog.clear();
        std::mem::take(&mut self.channels).into_iter().collect()
    }

    /// Clean shutdown: nothing more is accepted; returns the in-memory
    /// backlog for the server to write to the backend before closing it.
    /// The channels stay, for the server to close each.
    pub fn close(&mut self) -> Vec<Message> {
        self.exiting = true;
        self.backlog.drain_memory().map(|b| b.msg).collect()
    }

    /// The topic's `/stats` entry without channels; `backend_depth` comes
    /// from the server's disk queue.
    pub fn stats(&self, name: &str, backend_depth: i64) -> TopicStats {
        TopicStats {
            topic_name: name.to_string(),
            channels: Vec::new(),
            depth: self.backlog.memory_len() as i64 + backend_depth,
            backend_depth,
            message_count: self.message_count,
            message_bytes: self.message_bytes,
            paused: self.paused,
            e2e_processing_latency: E2eLatency {
                count: 0,
                percentiles: None,
            },
            mem_queue_size: self.mem_queue_size.map(|n| n as i64),
            max_depth: self.limit.max_depth,
            max_depth_policy: self.limit.is_set().then(|| self.limit.policy.to_string()),
            dropped_count: self.dropped_count,
            max_age: (self.max_age_ns > 0).then(|| nsq_protocol::duration::format(self.max_age())),
            expired_count: self.expired_count,
            // The server's: the core does not know replication.
            replicas: None,
            replication: None,
        }
    }
}

/// `n` batches of `msgs`, one per channel: copies that share each body,
/// and the originals last (with one channel, no body is ever shared).
pub fn copies(msgs: Vec<Message>, n: usize) -> impl Iterator<Item = Vec<Message>> {
    let mut last = Some(msgs);
    (0..n).map(move |i| {
        if i + 1 == n {
            last.take().unwrap_or_default()
        } else {
            last.as_ref().map(|m| m.to_vec()).unwrap_or_default()
        }
    })
}

// Message expiry (nsq-rs, opt-in): a child, so it keeps the topic's
// fields private.
#[path = "topic_expiry.rs"]
mod expiry;

#[cfg(test)]
#[path = "topic_tests.rs"]
mod tests;

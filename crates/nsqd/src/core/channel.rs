//! A channel: one consumer group of a topic, as a plain state machine.
//!
//! Owns: the messages waiting for a consumer ([`Queue`]: memory, then the
//! backend), the ones in flight ([`InFlight`]) and the deferred ones
//! ([`Deferred`]), the subscribed clients' RDY credit and counters, and the
//! choice of which client gets the next message.
//!
//! Delivery is push: a client with credit (RDY > in flight) waits in a
//! round-robin ring; whenever a message and a client with credit meet, the
//! message is marked in flight and its frame is encoded for that client.
//!
//! Never: reads the clock, touches a socket or the disk, or draws from a
//! thread-local RNG. Every operation takes `now` (and FIN the wall clock,
//! for E2E latency); sampling (IDENTIFY `sample_rate`) uses a seeded RNG.
//! What the server must carry out collects in [`Effects`]: frames per
//! client, records to append to the backend, a refill to read, run files
//! of spilled deferrals to write or load, and whether the channel's timer
//! must wake earlier than planned.
//!
//! With durable acknowledgements the backend keeps each record it hands out
//! until the channel acknowledges it (its read number comes with the
//! refill): when the message is finished, written back to the backend, or
//! published as a dead letter. A crash in between delivers it again.
//!
//! Four children keep their rules apart from delivery: the depth limit
//! (`channel_limits.rs`), the backend's confirmations and refills
//! (`channel_backend.rs`), the deferred messages with their opt-in spill
//! to run files (`channel_deferred.rs`) and what `/stats` reads
//! (`channel_stats.rs`).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;
use nsq_protocol::{Message, MessageId};

use super::deferred::{Deferred, RestoredRun, SpillBatch, SpillConfig};
use super::e2e::QuantileStream;
pub use super::effects::DiskWork;
use super::effects::Effects;
use super::ids::{ClientId, IdMap};
use super::in_flight::{Delivery, InFlight, InFlightError};
use super::limits::Limit;
use super::queue::Queue;
use super::rng::Rng;
use expiry::Expiry;

/// Most backend records a channel moves into memory at once.
pub const REFILL_MAX: usize = 256;

/// Why SUB was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubError {
    /// The channel is being deleted or nsqd is exiting.
    Exiting,
    /// `--max-channel-consumers` reached.
    TooManyConsumers,
}

/// What a new channel starts from.
#[derive(Debug, Clone)]
pub struct ChannelConfig {
    /// `--mem-queue-size`.
    pub mem_queue_size: usize,
    /// False for `#ephemeral` channels: overflow is dropped.
    pub durable: bool,
    /// The backend held unread records at open (a restart).
    pub backend_unread: bool,
    /// How many: where a depth limit's count of the backend starts.
    pub backend_depth: u64,
    /// Deliveries a message gets at most; the next would go to the
    /// dead-letter topic instead. 0: unlimited (NSQ's behaviour).
    pub max_attempts: u16,
    /// Past `mem_queue_size`, a message still goes to memory when a consumer
    /// can take it at once (nsqd's unbuffered hand-off). Off when every
    /// message must be on disk before anyone sees it (`--sync-every=1`).
    pub hand_off: bool,
    /// `--e2e-processing-latency-percentile` and `-window-time`.
    pub e2e: Option<(Vec<f64>, Duration)>,
    /// Seeds sampling and the E2E reservoir.
    pub seed: u64,
    /// Deferred messages past `mem_queue_size` spill to run files (nsq-rs,
    /// `--deferred-spill`); None: all in memory, as NSQ.
    pub spill: Option<SpillConfig>,
    /// Run files of deferred messages found at start.
    pub restored_runs: Vec<RestoredRun>,
}

/// A subscribed client as its channel sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subscriber {
    pub rdy: i64,
    pub in_flight: i64,
    pub message_count: u64,
    pub finish_count: u64,
    pub requeue_count: u64,
    msg_timeout: Duration,
    /// IDENTIFY `sample_rate`: deliver to this client only that percentage.
    sample_rate: i32,
    in_ring: bool,
}

impl Subscriber {
    fn has_credit(&self) -> bool {
        self.in_flight < self.rdy
    }
}

#[derive(Debug)]
pub struct Channel {
    queue: Queue<Message>,
    in_flight: InFlight,
    deferred: Deferred,
    subscribers: IdMap<ClientId, Subscriber>,
    /// Clients with credit, in delivery order.
    ring: VecDeque<ClientId>,
    paused: bool,
    exiting: bool,
    hand_off: bool,
    max_attempts: u16,
    dead_letter_count: u64,
    limit: Limit,
    /// Messages a `drop-oldest` limit dropped.
    dropped_count: u64,
    /// Dropped by a replicated channel's group, not yet reached here.
    group_dropped: IdMap<MessageId, ()>,
    /// Records in the backend as the core counts them: what it handed out
    /// to append (written or about to be), less what refills took and
    /// drop-oldest dropped. A limit reads this, never the disk queue, so
    /// its count cannot be caught between a write and its confirmation.
    backend_len: u64,
    message_count: u64,
    requeue_count: u64,
    timeout_count: u64,
    global_msg_count: u64,
    /// Boxed: most nsqds run without E2E percentiles, and a channel should
    /// not carry the stream's size for nothing.
    e2e: Option<Box<QuantileStream>>,
    rng: Rng,
    /// Messages whose backend record waits for this channel's
    /// acknowledgement (durable acknowledgements only), by read number.
    unacked: IdMap<MessageId, u64>,
    effects: Effects,
    /// FINed ids for a replicated topic's group (`channel_finished.rs`).
    finished: Option<Vec<MessageId>>,
    /// Messages requeued with a delay, and when due (Unix ms), for the
    /// same group (`channel_finished.rs`).
    deferrals: Option<Vec<(MessageId, i64)>>,
    /// `max_age` and what expired (`channel_expiry.rs`).
    expiry: Expiry,
    /// When the timer will next wake, so we know when an earlier deadline
    /// must wake it.
    scheduled_wake: Option<Instant>,
}

impl Channel {
    pub fn new(cfg: ChannelConfig, now: Instant) -> Channel {
        Channel {
            queue: Queue::new(cfg.mem_queue_size, cfg.durable, cfg.backend_unread),
            in_flight: InFlight::default(),
            deferred: Deferred::new(cfg.spill, &cfg.restored_runs),
            subscribers: IdMap::default(),
            ring: VecDeque::new(),
            paused: false,
            exiting: false,
            hand_off: cfg.hand_off,
            max_attempts: cfg.max_attempts,
            dead_letter_count: 0,
            limit: Limit::default(),
            dropped_count: 0,
            group_dropped: IdMap::default(),
            backend_len: if cfg.durable { cfg.backend_depth } else { 0 },
            message_count: 0,
            requeue_count: 0,
            timeout_count: 0,
            global_msg_count: 0,
            e2e: cfg
                .e2e
                .map(|(p, window)| Box::new(QuantileStream::new(p, window, now, cfg.seed ^ 0xe2e))),
            rng: Rng::new(cfg.seed),
            unacked: IdMap::default(),
            effects: Effects::default(),
            finished: None,
            deferrals: None,
            expiry: Expiry::default(),
            scheduled_wake: None,
        }
    }

    /// Messages waiting in memory (the backend's share is the server's to add).
    pub fn memory_depth(&self) -> usize {
        self.queue.memory_len()
    }

    pub fn in_flight_count(&self) -> usize {
        self.in_flight.len()
    }

    pub fn client_count(&self) -> usize {
        self.subscribers.len()
    }

    pub fn is_paused(&self) -> bool {
        self.paused
    }

    pub fn is_exiting(&self) -> bool {
        self.exiting
    }

    pub fn subscriber(&self, client: ClientId) -> Option<&Subscriber> {
        self.subscribers.get(&client)
    }

    pub fn subscriber_ids(&self) -> impl Iterator<Item = ClientId> + '_ {
        self.subscribers.keys().copied()
    }

    // ---- messages in ----

    /// Messages from the topic (one PUB, or an MPUB's batch): memory while it
    /// has room, else one append to the backend for the whole overflow.
    pub fn put(&mut self, msgs: Vec<Message>, now: Instant) {
        let msgs = self.make_room(msgs);
        let mut msgs = msgs.into_iter();
        while let Some(msg) = msgs.next() {
            self.message_count += 1;
            if self.enqueue(msg) {
                self.deliver(now);
            } else if self.effects.append.len() == 1 {
                // the rest of the batch is likely to follow it to disk
                self.effects.append.reserve(msgs.len());
            }
        }
        self.request_refill();
        if self.expires() {
            self.schedule_expiry(now);
        }
    }

    /// Into the queue: memory while it has room, else the backend. Past the
    /// bound a message still goes to memory when memory and backend are
    /// empty and a consumer can take it this instant (nsqd's unbuffered
    /// hand-off with `--mem-queue-size=0`). True if it went to memory.
    fn enqueue(&mut self, msg: Message) -> bool {
        if self.queue.has_room()
            || (self.hand_off && self.queue.is_empty() && self.has_ready_client())
        {
            self.queue.push_memory(msg);
            return true;
        }
        if self.queue.is_durable() {
            // announced with the first record, so that later messages of
            // this call see the backend as pending and cannot overtake it
            if self.effects.append.is_empty() {
                self.queue.append_started();
            }
            self.backend_len += 1;
            if let Some(read) = self.take_unacked(&msg.id) {
                // its new record replaces the old one once written
                self.effects.acks.push(read);
            }
            self.effects.append.push(msg);
        }
        // else: an #ephemeral channel's overflow is dropped, as nsqd does
        false
    }

    fn has_ready_client(&self) -> bool {
        !self.paused
            && !self.exiting
            && self
                .ring
                .iter()
                .any(|c| self.subscribers.get(c).is_some_and(|s| s.has_credit()))
    }

    fn schedule(&mut self, at: Instant) {
        if self.scheduled_wake.is_none_or(|w| at < w) {
            self.scheduled_wake = Some(at);
            self.effects.wake = true;
        }
    }

    // ---- clients ----

    pub fn add_client(
        &mut self,
        client: ClientId,
        msg_timeout: Duration,
        sample_rate: i32,
        max_consumers: i64,
    ) -> Result<(), SubError> {
        if self.exiting {
            return Err(SubError::Exiting);
        }
        if max_consumers > 0 && self.subscribers.len() as i64 >= max_consumers {
            return Err(SubError::TooManyConsumers);
        }
        self.subscribers.insert(
            client,
            Subscriber {
                msg_timeout,
                sample_rate,
                ..Subscriber::default()
            },
        );
        Ok(())
    }

    /// Forgets a client; its in-flight messages stay and time out, as in
    /// nsqd. Returns how many clients remain.
    pub fn remove_client(&mut self, client: ClientId) -> usize {
        self.subscribers.remove(&client);
        self.subscribers.len()
    }

    pub fn set_rdy(&mut self, client: ClientId, rdy: i64, now: Instant) {
        if let Some(s) = self.subscribers.get_mut(&client) {
            s.rdy = rdy;
        }
        self.credit_changed(client);
        self.pump(now);
    }

    fn credit_changed(&mut self, client: ClientId) {
        if let Some(s) = self.subscribers.get_mut(&client) {
            if s.has_credit() && !s.in_ring {
                s.in_ring = true;
                self.ring.push_back(client);
            }
        }
    }

    // ---- FIN / REQ / TOUCH ----

    /// FINs of one client (those pipelined in one read go together: one pass
    /// for all the credit they free). Failures are reported per id, in order.
    pub fn finish(
        &mut self,
        client: ClientId,
        ids: &[MessageId],
        now: Instant,
        now_unix_ns: i64,
        mut failed: impl FnMut(&MessageId, InFlightError),
    ) {
        for id in ids {
            match self.in_flight.take(client, id) {
                Ok(d) => {
                    if let Some(s) = self.subscribers.get_mut(&client) {
                        s.in_flight -= 1;
                        s.finish_count += 1;
                    }
                    if let Some(read) = self.take_unacked(id) {
                        self.effects.acks.push(read);
                    }
                    if let Some(e2e) = self.e2e.as_mut() {
                        e2e.insert((now_unix_ns - d.msg.timestamp) as f64, now);
                    }
                    if let Some(f) = self.finished.as_mut() {
                        f.push(*id);
                    }
                    self.finished_dropped(id);
                }
                Err(e) => failed(id, e),
            }
        }
        self.credit_changed(client);
        self.pump(now);
    }

    /// REQ: back into the queue now, or deferred for `delay`.
    pub fn requeue(
        &mut self,
        client: ClientId,
        id: &MessageId,
        delay: Duration,
        now: Instant,
    ) -> Result<(), InFlightError> {
        let d = self.in_flight.take(client, id)?;
        self.requeue_count += 1;
        if let Some(s) = self.subscribers.get_mut(&client) {
            s.in_flight -= 1;
            s.requeue_count += 1;
        }
        if Self::is_expired(&d.msg, self.expiry.cutoff(now)) {
            self.expire(d.msg);
        } else if delay.is_zero() {
            self.enqueue(d.msg);
        } else {
            // Deferred for a while, maybe long after its neighbours were
            // finished: a body read from disk shares the queue's 64 KiB
            // read-ahead and would keep all of it alive; this keeps only
            // its own bytes.
            let mut msg = d.msg;
            msg.body = Bytes::copy_from_slice(&msg.body);
            self.defer(msg, now + delay, now);
        }
        self.credit_changed(client);
        self.pump(now);
        Ok(())
    }

    /// TOUCH: the message times out `msg_timeout` from now, but never later
    /// than `max_msg_timeout` after its delivery.
    pub fn touch(
        &mut self,
        client: ClientId,
        id: &MessageId,
        now: Instant,
        max_msg_timeout: Duration,
    ) -> Result<(), InFlightError> {
        let msg_timeout = self
            .subscribers
            .get(&client)
            .map_or(max_msg_timeout, |s| s.msg_timeout);
        self.in_flight.touch(client, id, |d| {
            (now + msg_timeout).min(d.delivered + max_msg_timeout)
        })?;
        Ok(())
    }

    // ---- timers ----

    /// Moves timed-out in-flight and due deferred messages back into the
    /// queue and delivers what it can. Returns when to run again.
    pub fn process_timers(&mut self, now: Instant) -> Option<Instant> {
        while let Some(d) = self.in_flight.pop_expired(now) {
            self.timeout_count += 1;
            if let Some(s) = self.subscribers.get_mut(&d.client) {
                s.in_flight -= 1;
            }
            self.enqueue(d.msg);
            self.credit_changed(d.client);
        }
        self.release_due(now);
        let expiry = self.sweep_expired(now);
        self.pump(now);
        let next = [
            self.in_flight.next_deadline(),
            self.deferred.next_due(now),
            expiry,
        ]
        .into_iter()
        .flatten()
        .min();
        self.scheduled_wake = next;
        self.effects.wake = false;
        next
    }

    // ---- delivery ----

    /// Hands messages to clients with credit, round robin, until either runs
    /// out; asks for a refill when memory ran dry and the backend has more.
    pub fn pump(&mut self, now: Instant) {
        self.deliver(now);
        self.request_refill();
    }

    fn deliver(&mut self, now: Instant) {
        if self.paused || self.exiting {
            return;
        }
        let cutoff = self.expiry.cutoff(now);
        while let Some(&client) = self.ring.front() {
            let Some(slot) = self.subscribers.get(&client) else {
                self.ring.pop_front();
                continue;
            };
            if !slot.has_credit() {
                self.ring.pop_front();
                if let Some(s) = self.subscribers.get_mut(&client) {
                    s.in_ring = false;
                }
                continue;
            }
            let Some((mut msg, refilled)) = self.queue.pop() else {
                return;
            };
            if self.dropped_by_group(&msg.id) {
                continue;
            }
            if Self::is_expired(&msg, cutoff) {
                // never delivered; the client keeps its turn
                self.expire(msg);
                continue;
            }
            if self.max_attempts > 0 && msg.attempts >= self.max_attempts {
                // a poison message: instead of attempt max + 1 it goes to the
                // dead-letter topic, and the client keeps its turn
                self.dead_letter_count += 1;
                if let Some(read) = self.take_unacked(&msg.id) {
                    self.effects.dead_letter_acks.push((msg.id, read));
                }
                self.effects.dead_letters.push(msg);
                continue;
            }
            if self.in_flight.contains(&msg.id) {
                // a second copy of a message already in flight (records a
                // crash brought back twice): that delivery stands for both
                continue;
            }
            if !refilled {
                self.global_msg_count += 1;
            }
            self.ring.pop_front();
            let Some(slot) = self.subscribers.get_mut(&client) else {
                continue;
            };
            if slot.sample_rate > 0 && self.rng.below(100) as i32 > slot.sample_rate {
                // sampled out: dropped for this channel, as nsqd does
                self.ring.push_back(client);
                continue;
            }
            msg.attempts = msg.attempts.wrapping_add(1);
            slot.in_flight += 1;
            slot.message_count += 1;
            let deadline = now + slot.msg_timeout;
            if slot.has_credit() {
                self.ring.push_back(client);
            } else {
                slot.in_ring = false;
            }
            let out = &mut self.effects;
            let i = match out.deliveries.iter().position(|(c, _)| *c == client) {
                Some(i) => i,
                None => {
                    out.deliveries
                        .push((client, out.spare.pop().unwrap_or_default()));
                    out.deliveries.len() - 1
                }
            };
            msg.encode_frame(&mut out.deliveries[i].1);
            self.in_flight.insert(Delivery {
                msg,
                client,
                deadline,
                delivered: now,
            });
            self.schedule(deadline);
        }
    }

    pub fn max_attempts(&self) -> u16 {
        self.max_attempts
    }

    /// 0: unlimited. Applies to the next delivery of every message.
    pub fn set_max_attempts(&mut self, max: u16, now: Instant) {
        self.max_attempts = max;
        self.pump(now);
    }

    // ---- administration ----

    pub fn set_paused(&mut self, paused: bool, now: Instant) {
        self.paused = paused;
        if !paused {
            self.pump(now);
        }
    }

    /// Drops everything queued, in flight and deferred (`/channel/empty`);
    /// the server empties the backend. Clients keep their RDY.
    pub fn empty(&mut self) {
        // the server empties the backend, which forgets them too
        self.unacked.clear();
        self.group_dropped.clear();
        self.backend_len = 0;
        self.queue.clear();
        self.in_flight.clear();
        self.deferred.clear();
        let ids: Vec<ClientId> = self.subscribers.keys().copied().collect();
        for client in ids {
            if let Some(s) = self.subscribers.get_mut(&client) {
                s.in_flight = 0;
            }
            self.credit_changed(client);
        }
    }

    /// Clean shutdown: what must be written to the backend before it is
    /// closed — memory, then in flight (oldest delivery first), then
    /// deferred (soonest first); timers are forgotten, attempts kept. Once
    /// they are written, every record the backend handed out is done with.
    /// With spilling on, the deferred ones go to a run of their own
    /// instead, due times kept (the second part).
    pub fn close(&mut self) -> (Vec<Message>, Option<SpillBatch>) {
        self.exiting = true;
        self.unacked.clear();
        let mut msgs: Vec<Message> = self.queue.drain_memory().collect();
        msgs.extend(self.in_flight.drain_by_delivery());
        let run = self.close_deferred(&mut msgs);
        (msgs, run)
    }

    /// Channel delete: drops everything (the server removes the backend).
    pub fn delete(&mut self) {
        self.exiting = true;
        self.unacked.clear();
        self.queue.clear();
        self.in_flight.clear();
        self.deferred.clear();
    }
}

// what a call leaves for the server: frames per client, disk work, a wake
#[path = "channel_drain.rs"]
mod drain;

// the channel's side of its depth limit
#[path = "channel_limits.rs"]
mod limits;

// the channel's side of its backend: confirmations, refills, acknowledgements
#[path = "channel_backend.rs"]
mod backend;

// what /stats reads of a channel
#[path = "channel_stats.rs"]
mod report;

// the ids a replicated topic's channel finished, for its group
#[path = "channel_finished.rs"]
mod finished;
pub use finished::replicates;

// max_age: what expires, where, and what becomes of it
#[path = "channel_expiry.rs"]
mod expiry;
pub use super::effects::BackendExpiry;
pub use expiry::{BACKEND_SWEEP, BACKEND_SWEEP_MAX};

// the channel's deferred messages, in memory and spilled
#[path = "channel_deferred.rs"]
mod deferral;
pub use deferral::DEAD_LETTER_RETRY;

#[cfg(test)]
#[path = "channel_tests.rs"]
mod tests;

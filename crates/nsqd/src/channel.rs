//! A channel: one consumer group of a topic. It owns the messages waiting
//! for a consumer (memory queue, then its backend), the messages in flight
//! (delivered, not yet FIN/REQ'd or timed out) and the deferred ones (REQ
//! with a delay, DPUB), and it decides which subscribed client gets the next
//! message.
//!
//! [`ChannelState`] is the whole bookkeeping as a plain struct that never
//! reads the clock: every operation takes `now`. [`Channel`] wraps it in one
//! short-held mutex and a timer task that wakes at the next in-flight
//! deadline or deferred due time — one timer per channel, none when idle.
//!
//! Delivery is push: a client with credit (RDY > in flight) waits in a
//! round-robin ring; whenever a message and a client with credit meet, the
//! message is marked in flight and queued to that client's writer. Nothing
//! here blocks and nothing here touches a socket.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nsq_protocol::stats::{ChannelStats, ClientStats, E2eLatency, PubCount};
use bytes::BytesMut;
use nsq_protocol::{Message, MessageId};
use parking_lot::Mutex;
use rand::Rng;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::backend::{put_message, put_messages, Backend};
use crate::client::{ClientConn, ClientId};
use crate::e2e::QuantileStream;

/// Message ids are hex of a unique 64-bit id, so a cheap fold of their two
/// 8-byte halves plus a final avalanche (MurmurHash3's fmix64, so the
/// changing low digits reach the low bits hashbrown indexes by) is enough;
/// SipHash was a tenth of the consume path's CPU.
#[derive(Default, Clone, Copy)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.0 = self.0.rotate_left(29) ^ u64::from_be_bytes(w);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = self.0.rotate_left(29) ^ n;
    }
    fn write_usize(&mut self, _len: usize) {
        // the length prefix of a 16-byte id carries no information
    }
    fn finish(&self) -> u64 {
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^ (x >> 33)
    }
}

/// Message ids, and client ids (a counter: the same fold-and-mix spreads
/// them; SipHash on every delivery's client lookup showed in profiles).
type IdMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<IdHasher>>;

/// Most backend records a channel moves into memory at once.
const REFILL_MAX: usize = 256;

/// Why FIN/REQ/TOUCH failed (non-fatal for the client).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InFlightError {
    NotInFlight,
    NotOwner,
}

impl InFlightError {
    pub fn text(&self) -> &'static str {
        match self {
            InFlightError::NotInFlight => "ID not in flight",
            InFlightError::NotOwner => "client does not own message",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubError {
    Exiting,
    TooManyConsumers,
}

#[derive(Debug)]
struct InFlight {
    msg: Message,
    client: ClientId,
    deadline: Instant,
    delivered: Instant,
}

#[derive(Debug)]
struct DeferredEntry {
    due: Instant,
    seq: u64,
    msg: Message,
}

impl PartialEq for DeferredEntry {
    fn eq(&self, o: &Self) -> bool {
        (self.due, self.seq) == (o.due, o.seq)
    }
}
impl Eq for DeferredEntry {}
impl PartialOrd for DeferredEntry {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for DeferredEntry {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.due, self.seq).cmp(&(o.due, o.seq))
    }
}

/// A subscribed client as its channel sees it.
#[derive(Debug)]
struct ClientSlot {
    conn: Arc<ClientConn>,
    rdy: i64,
    in_flight: i64,
    msg_timeout: Duration,
    sample_rate: i32,
    in_ring: bool,
    message_count: u64,
    finish_count: u64,
    requeue_count: u64,
}

impl ClientSlot {
    fn has_credit(&self) -> bool {
        self.in_flight < self.rdy
    }
}

pub struct ChannelState {
    memory: VecDeque<Message>,
    mem_cap: usize,
    backend: Box<dyn Backend>,
    /// Whether the backend may hold records. Only this channel writes to
    /// its backend, so this is exact, and it spares a (locked) disk queue
    /// check on every delivery attempt.
    backend_pending: bool,
    /// How many messages at the front of `memory` were refilled from the
    /// backend (they do not count as memory deliveries).
    from_backend: usize,
    in_flight: IdMap<MessageId, InFlight>,
    /// Deadlines by time; entries go stale on FIN/REQ/TOUCH and are skipped
    /// (and compacted away) rather than searched for.
    in_flight_pq: BinaryHeap<Reverse<(Instant, MessageId)>>,
    deferred: BinaryHeap<Reverse<DeferredEntry>>,
    deferred_seq: u64,
    clients: IdMap<ClientId, ClientSlot>,
    /// Clients with credit, in delivery order.
    ring: VecDeque<ClientId>,
    pub paused: bool,
    pub exiting: bool,
    message_count: u64,
    requeue_count: u64,
    timeout_count: u64,
    global_msg_count: u64,
    e2e: Option<QuantileStream>,
    /// Frames encoded during one `pump`, per client, appended to each
    /// client's outbox at its end; and emptied buffers for the next pass.
    out: Vec<(ClientId, Arc<ClientConn>, BytesMut)>,
    out_spare: Vec<BytesMut>,
    /// When the timer task will next wake, so we know when to poke it.
    scheduled_wake: Option<Instant>,
    wake_needed: bool,
}

impl ChannelState {
    pub fn new(
        mem_cap: usize,
        backend: Box<dyn Backend>,
        e2e: Option<QuantileStream>,
    ) -> ChannelState {
        ChannelState {
            memory: VecDeque::new(),
            mem_cap,
            backend_pending: backend.has_data(),
            backend,
            from_backend: 0,
            in_flight: IdMap::default(),
            in_flight_pq: BinaryHeap::new(),
            deferred: BinaryHeap::new(),
            deferred_seq: 0,
            clients: IdMap::default(),
            ring: VecDeque::new(),
            paused: false,
            exiting: false,
            message_count: 0,
            requeue_count: 0,
            timeout_count: 0,
            global_msg_count: 0,
            e2e,
            out: Vec::new(),
            out_spare: Vec::new(),
            scheduled_wake: None,
            wake_needed: false,
        }
    }

    /// Messages waiting for a consumer (memory and backend).
    pub fn depth(&self) -> i64 {
        self.memory.len() as i64 + self.backend.depth()
    }

    pub fn in_flight_count(&self) -> usize {
        self.in_flight.len()
    }

    pub fn deferred_count(&self) -> usize {
        self.deferred.len()
    }

    pub fn client_count(&self) -> usize {
        self.clients.len()
    }

    fn has_ready_client(&self) -> bool {
        !self.paused
            && self
                .ring
                .iter()
                .any(|c| self.clients.get(c).is_some_and(|s| s.has_credit()))
    }

    /// Back into the queue: memory while it has room, else the backend. A
    /// message goes to memory past the bound only when a consumer can take
    /// it this instant (nsqd's unbuffered hand-off with `--mem-queue-size=0`).
    fn enqueue(&mut self, msg: Message) -> Result<(), crate::backend::BackendError> {
        if self.fits_memory() {
            self.memory.push_back(msg);
            Ok(())
        } else {
            self.backend_pending = true;
            put_message(self.backend.as_ref(), &msg)
        }
    }

    fn fits_memory(&self) -> bool {
        self.memory.len() < self.mem_cap
            || (self.memory.is_empty() && !self.backend_pending && self.has_ready_client())
    }

    /// A message from the topic.
    pub fn put(&mut self, msg: Message, now: Instant) -> Result<(), crate::backend::BackendError> {
        self.message_count += 1;
        let r = self.enqueue(msg);
        self.pump(now);
        r
    }

    /// A batch from the topic (an MPUB): whatever overflows memory goes to
    /// the backend in one write.
    /// `Ok(true)` when the backend was written (a disk write that worked
    /// means the disk is healthy again, as nsqd reports on `/ping`).
    pub fn put_many(
        &mut self,
        msgs: impl IntoIterator<Item = Message>,
        now: Instant,
    ) -> Result<bool, crate::backend::BackendError> {
        let mut overflow = Vec::new();
        for msg in msgs {
            self.message_count += 1;
            if self.fits_memory() {
                self.memory.push_back(msg);
                self.pump(now);
            } else {
                overflow.push(msg);
            }
        }
        self.backend_pending |= !overflow.is_empty();
        let r = put_messages(self.backend.as_ref(), overflow.iter()).map(|()| !overflow.is_empty());
        self.pump(now);
        r
    }

    /// A message from the topic that must wait `delay` first (DPUB).
    pub fn put_deferred(&mut self, msg: Message, delay: Duration, now: Instant) {
        self.message_count += 1;
        self.defer(msg, now + delay);
    }

    fn defer(&mut self, msg: Message, due: Instant) {
        self.deferred_seq += 1;
        self.deferred.push(Reverse(DeferredEntry {
            due,
            seq: self.deferred_seq,
            msg,
        }));
        self.schedule(due);
    }

    fn schedule(&mut self, at: Instant) {
        if self.scheduled_wake.map_or(true, |w| at < w) {
            self.scheduled_wake = Some(at);
            self.wake_needed = true;
        }
    }

    /// Whether the timer task must be poked (a deadline earlier than the one
    /// it sleeps toward appeared). Resets the flag.
    pub fn take_wake_needed(&mut self) -> bool {
        std::mem::take(&mut self.wake_needed)
    }

    fn next_message(&mut self) -> Option<Message> {
        loop {
            if let Some(m) = self.memory.pop_front() {
                if self.from_backend > 0 {
                    self.from_backend -= 1;
                } else {
                    self.global_msg_count += 1;
                }
                return Some(m);
            }
            if !self.backend_pending {
                return None;
            }
            self.refill();
        }
    }

    /// Moves as many backend records into memory as the clients in the
    /// ring can take right now (bounded), in one trip to the disk queue:
    /// per-record trips cost a blocking-thread hand-off each.
    fn refill(&mut self) {
        let credit: i64 = self
            .ring
            .iter()
            .filter_map(|c| self.clients.get(c))
            .map(|s| (s.rdy - s.in_flight).max(0))
            .sum();
        let want = (credit as usize).clamp(1, REFILL_MAX);
        let mut records = Vec::with_capacity(want);
        self.backend.read_batch(want, &mut records);
        if records.is_empty() {
            self.backend_pending = false;
            return;
        }
        for data in records {
            match Message::decode(data) {
                Ok(m) => {
                    self.memory.push_back(m);
                    self.from_backend += 1;
                }
                Err(e) => {
                    tracing::error!(error = %e, "failed to decode message from backend, skipped")
                }
            }
        }
    }

    /// Hands messages to clients with credit, round robin, until either runs out.
    pub fn pump(&mut self, now: Instant) {
        self.deliver(now);
        // Each client's frames of this pass go to its outbox in one append:
        // the outbox lock is shared with the client's writer on the other
        // core, and taking it per message made it the hottest line in nsqd.
        for (_, conn, mut frames) in self.out.drain(..) {
            conn.send_frames(&frames);
            frames.clear();
            if self.out_spare.len() < 8 {
                self.out_spare.push(frames);
            }
        }
    }

    fn deliver(&mut self, now: Instant) {
        if self.paused || self.exiting {
            return;
        }
        while let Some(&cid) = self.ring.front() {
            let Some(slot) = self.clients.get(&cid) else {
                self.ring.pop_front();
                continue;
            };
            if !slot.has_credit() {
                self.ring.pop_front();
                if let Some(s) = self.clients.get_mut(&cid) {
                    s.in_ring = false;
                }
                continue;
            }
            let Some(mut msg) = self.next_message() else {
                return;
            };
            self.ring.pop_front();
            let slot = self.clients.get_mut(&cid).expect("slot checked above");
            if slot.sample_rate > 0 && rand::thread_rng().gen_range(0..100) > slot.sample_rate {
                // sampled out: dropped for this channel, as nsqd does
                self.ring.push_back(cid);
                continue;
            }
            msg.attempts = msg.attempts.wrapping_add(1);
            slot.in_flight += 1;
            slot.message_count += 1;
            let deadline = now + slot.msg_timeout;
            let i = match self.out.iter().position(|(c, _, _)| *c == cid) {
                Some(i) => i,
                None => {
                    let buf = self.out_spare.pop().unwrap_or_default();
                    self.out.push((cid, slot.conn.clone(), buf));
                    self.out.len() - 1
                }
            };
            msg.encode_frame(&mut self.out[i].2);
            if slot.has_credit() {
                self.ring.push_back(cid);
            } else {
                slot.in_ring = false;
            }
            self.in_flight_pq.push(Reverse((deadline, msg.id)));
            self.in_flight.insert(
                msg.id,
                InFlight {
                    msg,
                    client: cid,
                    deadline,
                    delivered: now,
                },
            );
            self.schedule(deadline);
        }
    }

    fn credit_changed(&mut self, cid: ClientId) {
        if let Some(s) = self.clients.get_mut(&cid) {
            if s.has_credit() && !s.in_ring {
                s.in_ring = true;
                self.ring.push_back(cid);
            }
        }
    }

    pub fn add_client(
        &mut self,
        conn: Arc<ClientConn>,
        msg_timeout: Duration,
        sample_rate: i32,
        max_consumers: i64,
    ) -> Result<(), SubError> {
        if self.exiting {
            return Err(SubError::Exiting);
        }
        if max_consumers > 0 && self.clients.len() as i64 >= max_consumers {
            return Err(SubError::TooManyConsumers);
        }
        self.clients.insert(
            conn.id,
            ClientSlot {
                conn,
                rdy: 0,
                in_flight: 0,
                msg_timeout,
                sample_rate,
                in_ring: false,
                message_count: 0,
                finish_count: 0,
                requeue_count: 0,
            },
        );
        Ok(())
    }

    /// Forgets a client. Its in-flight messages stay and time out, as in nsqd.
    /// Returns how many clients remain.
    pub fn remove_client(&mut self, cid: ClientId) -> usize {
        self.clients.remove(&cid);
        self.clients.len()
    }

    pub fn set_rdy(&mut self, cid: ClientId, rdy: i64, now: Instant) {
        if let Some(s) = self.clients.get_mut(&cid) {
            s.rdy = rdy;
        }
        self.credit_changed(cid);
        self.pump(now);
    }

    fn take_in_flight(&mut self, cid: ClientId, id: &MessageId) -> Result<InFlight, InFlightError> {
        match self.in_flight.get(id) {
            None => return Err(InFlightError::NotInFlight),
            Some(f) if f.client != cid => return Err(InFlightError::NotOwner),
            Some(_) => {}
        }
        let f = self
            .in_flight
            .remove(id)
            .ok_or(InFlightError::NotInFlight)?;
        self.compact_pq();
        Ok(f)
    }

    /// Stale heap entries are dropped lazily; rebuild when they dominate so
    /// the heap stays proportional to what is really in flight.
    fn compact_pq(&mut self) {
        // 4x: a rebuild then costs a third of an entry per FIN, not one
        if self.in_flight_pq.len() > 4 * self.in_flight.len() + 4096 {
            self.in_flight_pq = self
                .in_flight
                .iter()
                .map(|(id, f)| Reverse((f.deadline, *id)))
                .collect();
        }
    }

    pub fn finish(
        &mut self,
        cid: ClientId,
        id: &MessageId,
        now: Instant,
        now_unix_ns: i64,
    ) -> Result<(), InFlightError> {
        self.finish_one(cid, id, now, now_unix_ns)?;
        self.pump(now);
        Ok(())
    }

    /// Several FINs of one client (pipelined in one read) under one lock,
    /// then one pump for all the credit they freed. Failures are reported
    /// per id through `failed`, in order.
    pub fn finish_many(
        &mut self,
        cid: ClientId,
        ids: &[MessageId],
        now: Instant,
        now_unix_ns: i64,
        mut failed: impl FnMut(&MessageId, InFlightError),
    ) {
        for id in ids {
            if let Err(e) = self.finish_one(cid, id, now, now_unix_ns) {
                failed(id, e);
            }
        }
        self.pump(now);
    }

    fn finish_one(&mut self, cid: ClientId, id: &MessageId, now: Instant, now_unix_ns: i64) -> Result<(), InFlightError> {
        let f = self.take_in_flight(cid, id)?;
        if let Some(s) = self.clients.get_mut(&cid) {
            s.in_flight -= 1;
            s.finish_count += 1;
        }
        if let Some(e2e) = self.e2e.as_mut() {
            e2e.insert((now_unix_ns - f.msg.timestamp) as f64, now);
        }
        self.credit_changed(cid);
        Ok(())
    }

    pub fn requeue(
        &mut self,
        cid: ClientId,
        id: &MessageId,
        delay: Duration,
        now: Instant,
    ) -> Result<(), InFlightError> {
        let f = self.take_in_flight(cid, id)?;
        self.requeue_count += 1;
        if let Some(s) = self.clients.get_mut(&cid) {
            s.in_flight -= 1;
            s.requeue_count += 1;
        }
        if delay.is_zero() {
            if let Err(e) = self.enqueue(f.msg) {
                tracing::error!(error = %e, "requeue to backend failed");
            }
        } else {
            self.defer(f.msg, now + delay);
        }
        self.credit_changed(cid);
        self.pump(now);
        Ok(())
    }

    pub fn touch(
        &mut self,
        cid: ClientId,
        id: &MessageId,
        now: Instant,
        max_msg_timeout: Duration,
    ) -> Result<(), InFlightError> {
        let msg_timeout = self
            .clients
            .get(&cid)
            .map(|s| s.msg_timeout)
            .unwrap_or(max_msg_timeout);
        let f = match self.in_flight.get_mut(id) {
            None => return Err(InFlightError::NotInFlight),
            Some(f) if f.client != cid => return Err(InFlightError::NotOwner),
            Some(f) => f,
        };
        let deadline = (now + msg_timeout).min(f.delivered + max_msg_timeout);
        f.deadline = deadline;
        self.in_flight_pq.push(Reverse((deadline, *id)));
        self.compact_pq();
        Ok(())
    }

    /// Moves timed-out in-flight and due deferred messages back into the
    /// queue and delivers what it can. Returns the next time to wake.
    pub fn process_timers(&mut self, now: Instant) -> Option<Instant> {
        while let Some(Reverse((deadline, id))) = self.in_flight_pq.peek().copied() {
            if deadline > now {
                break;
            }
            self.in_flight_pq.pop();
            let current = self.in_flight.get(&id).map(|f| f.deadline);
            if current != Some(deadline) {
                continue; // finished, requeued or touched since
            }
            if let Some(f) = self.in_flight.remove(&id) {
                self.timeout_count += 1;
                if let Some(s) = self.clients.get_mut(&f.client) {
                    s.in_flight -= 1;
                }
                let owner = f.client;
                if let Err(e) = self.enqueue(f.msg) {
                    tracing::error!(error = %e, "timeout requeue to backend failed");
                }
                self.credit_changed(owner);
            }
        }
        while self.deferred.peek().is_some_and(|Reverse(d)| d.due <= now) {
            if let Some(Reverse(d)) = self.deferred.pop() {
                if let Err(e) = self.enqueue(d.msg) {
                    tracing::error!(error = %e, "deferred message to backend failed");
                }
            }
        }
        self.pump(now);
        let next_in_flight = self.in_flight_pq.peek().map(|Reverse((d, _))| *d);
        let next_deferred = self.deferred.peek().map(|Reverse(d)| d.due);
        let next = match (next_in_flight, next_deferred) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.scheduled_wake = next;
        self.wake_needed = false;
        next
    }

    /// Drops everything queued, in flight and deferred (`/channel/empty`).
    pub fn empty(&mut self) -> Result<(), crate::backend::BackendError> {
        self.memory.clear();
        self.from_backend = 0;
        self.in_flight.clear();
        self.in_flight_pq.clear();
        self.deferred.clear();
        let ids: Vec<ClientId> = self.clients.keys().copied().collect();
        for cid in ids {
            if let Some(s) = self.clients.get_mut(&cid) {
                s.in_flight = 0;
            }
            self.credit_changed(cid);
        }
        self.backend.empty()
    }

    /// Clean shutdown: memory, then in-flight, then deferred messages go to
    /// the backend (timers forgotten, attempts kept), and it is closed.
    pub fn persist_and_close(&mut self) -> Result<(), crate::backend::BackendError> {
        self.exiting = true;
        let mut msgs: Vec<Message> = self.memory.drain(..).collect();
        self.from_backend = 0;
        let mut in_flight: Vec<InFlight> = self.in_flight.drain().map(|(_, f)| f).collect();
        in_flight.sort_by_key(|f| f.delivered);
        msgs.extend(in_flight.into_iter().map(|f| f.msg));
        let deferred = std::mem::take(&mut self.deferred).into_sorted_vec();
        msgs.extend(deferred.into_iter().rev().map(|Reverse(d)| d.msg));
        for m in &msgs {
            put_message(self.backend.as_ref(), m)?;
        }
        self.backend.close()
    }

    /// Channel delete: drop everything, remove the backend's files.
    pub fn delete(&mut self) -> Result<(), crate::backend::BackendError> {
        self.exiting = true;
        self.memory.clear();
        self.from_backend = 0;
        self.in_flight.clear();
        self.in_flight_pq.clear();
        self.deferred.clear();
        self.backend.delete()
    }

    /// A subscribed client's full stats (connection info and its counters here).
    pub fn client_stats(&self, cid: ClientId) -> Option<ClientStats> {
        self.clients.get(&cid).map(slot_stats)
    }

    pub fn client_conns(&self) -> Vec<Arc<ClientConn>> {
        self.clients.values().map(|s| s.conn.clone()).collect()
    }

    pub fn sync_backend(&self) -> Result<(), crate::backend::BackendError> {
        self.backend.sync_if_needed()
    }

    /// E2E samples of this channel's window (for the topic's merge).
    pub fn e2e_samples(&mut self, now: Instant) -> Option<(Vec<f64>, u64)> {
        self.e2e.as_mut().map(|e| e.samples(now))
    }

    pub fn stats(&mut self, name: &str, include_clients: bool, now: Instant) -> ChannelStats {
        let clients = include_clients.then(|| self.clients.values().map(slot_stats).collect());
        let e2e = match self.e2e.as_mut() {
            Some(q) => q.snapshot(now),
            None => E2eLatency {
                count: 0,
                percentiles: None,
            },
        };
        ChannelStats {
            channel_name: name.to_string(),
            depth: self.depth(),
            backend_depth: self.backend.depth(),
            in_flight_count: self.in_flight.len() as i64,
            deferred_count: self.deferred.len() as i64,
            message_count: self.message_count,
            zone_local_msg_count: 0,
            region_local_msg_count: 0,
            global_msg_count: self.global_msg_count,
            requeue_count: self.requeue_count,
            timeout_count: self.timeout_count,
            client_count: self.clients.len() as i64,
            clients,
            paused: self.paused,
            e2e_processing_latency: e2e,
        }
    }
}

fn slot_stats(s: &ClientSlot) -> ClientStats {
    let mut cs = client_stats(&s.conn);
    cs.ready_count = s.rdy;
    cs.in_flight_count = s.in_flight;
    cs.message_count = s.message_count;
    cs.finish_count = s.finish_count;
    cs.requeue_count = s.requeue_count;
    cs
}

/// The connection-level part of a client's stats (no channel counters).
pub fn client_stats(conn: &ClientConn) -> ClientStats {
    let info = conn.info.lock();
    ClientStats {
        client_id: info.client_id.clone(),
        hostname: info.hostname.clone(),
        version: "V2".into(),
        remote_address: conn.remote_addr.to_string(),
        state: info.state,
        connect_ts: conn.connect_ts,
        sample_rate: info.sample_rate,
        deflate: info.deflate,
        snappy: info.snappy,
        user_agent: info.user_agent.clone(),
        authed: info.authed,
        auth_identity: info.auth_identity.clone(),
        auth_identity_url: info.auth_identity_url.clone(),
        topology_zone: info.topology_zone.clone(),
        topology_region: info.topology_region.clone(),
        pub_counts: info
            .pub_counts
            .iter()
            .take(1)
            .map(|(t, c)| PubCount {
                topic: t.clone(),
                count: *c,
            })
            .collect(),
        tls: info.tls,
        tls_cipher_suite: info.tls_cipher_suite.clone(),
        tls_version: info.tls_version.clone(),
        tls_negotiated_protocol: info.tls_negotiated_protocol.clone(),
        // Go reports this deprecated field as always true on a TLS connection.
        tls_negotiated_protocol_is_mutual: info.tls,
        ..Default::default()
    }
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Channel({}:{})", self.topic_name, self.name)
    }
}

/// A channel shared by its topic and its subscribed connections.
pub struct Channel {
    pub topic_name: String,
    pub name: String,
    pub ephemeral: bool,
    state: Mutex<ChannelState>,
    timer: Notify,
    /// Stops the timer task when the channel is deleted or nsqd exits.
    pub cancel: CancellationToken,
}

impl Channel {
    pub fn new(
        topic_name: &str,
        name: &str,
        state: ChannelState,
        parent_cancel: &CancellationToken,
    ) -> Arc<Channel> {
        Arc::new(Channel {
            topic_name: topic_name.to_string(),
            name: name.to_string(),
            ephemeral: nsq_protocol::names::is_ephemeral(name),
            state: Mutex::new(state),
            timer: Notify::new(),
            cancel: parent_cancel.child_token(),
        })
    }

    /// Runs `f` under the channel's lock and pokes the timer task if `f`
    /// created an earlier deadline.
    pub fn with<R>(&self, f: impl FnOnce(&mut ChannelState) -> R) -> R {
        let (r, wake) = {
            let mut st = self.state.lock();
            let r = f(&mut st);
            (r, st.take_wake_needed())
        };
        if wake {
            self.timer.notify_one();
        }
        r
    }

    /// The channel's timer: sleeps until the next deadline, or until poked.
    pub async fn run_timer(self: Arc<Self>) {
        loop {
            let next = self.with(|st| st.process_timers(Instant::now()));
            let sleep = async {
                match next {
                    Some(t) => tokio::time::sleep_until(t.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = sleep => {}
                _ = self.timer.notified() => {}
                _ = self.cancel.cancelled() => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::NullBackend;
    use bytes::Bytes;

    fn msg(n: u64) -> Message {
        Message::new(MessageId::from_guid(n), 1_000, Bytes::from(format!("m{n}")))
    }

    /// What a client's writer would get: the frames queued in its outbox.
    struct Rx(Arc<ClientConn>);

    fn client() -> (Arc<ClientConn>, Rx) {
        let (c, _outbox) = ClientConn::new("127.0.0.1:1".parse().unwrap(), 0);
        let c = Arc::new(c);
        (c.clone(), Rx(c))
    }

    fn received(rx: &mut Rx) -> Vec<Message> {
        let mut frames = rx.0.queued_frames().freeze();
        let mut v = vec![];
        while frames.len() >= 8 {
            let size = u32::from_be_bytes(frames[..4].try_into().unwrap()) as usize;
            let kind = u32::from_be_bytes(frames[4..8].try_into().unwrap());
            let data = frames.slice(8..4 + size);
            frames = frames.slice(4 + size..);
            if kind == 2 {
                v.push(Message::decode(data).unwrap());
            }
        }
        v
    }

    fn state(cap: usize) -> ChannelState {
        ChannelState::new(cap, Box::new(NullBackend), None)
    }

    const T: Duration = Duration::from_secs(60);

    #[test]
    fn delivers_only_up_to_rdy_and_counts_attempts() {
        let now = Instant::now();
        let mut st = state(100);
        let (c, mut rx) = client();
        st.add_client(c.clone(), T, 0, 0).unwrap();
        for i in 0..5 {
            st.put(msg(i), now).unwrap();
        }
        assert!(received(&mut rx).is_empty(), "RDY 0 receives nothing");
        st.set_rdy(c.id, 2, now);
        let got = received(&mut rx);
        assert_eq!(got.len(), 2);
        assert!(got.iter().all(|m| m.attempts == 1));
        assert_eq!((st.depth(), st.in_flight_count()), (3, 2));
        st.finish(c.id, &got[0].id, now, 2_000).unwrap();
        assert_eq!(received(&mut rx).len(), 1, "a FIN frees exactly one slot");
        assert_eq!(
            st.finish(c.id, &got[0].id, now, 2_000),
            Err(InFlightError::NotInFlight)
        );
    }

    #[test]
    fn finish_many_reports_failures_in_order_and_refills_the_freed_credit() {
        let now = Instant::now();
        let mut st = state(100);
        let (c, mut rx) = client();
        st.add_client(c.clone(), T, 0, 0).unwrap();
        for i in 0..6 {
            st.put(msg(i), now).unwrap();
        }
        st.set_rdy(c.id, 3, now);
        let got = received(&mut rx);
        assert_eq!(got.len(), 3);
        let stranger = MessageId::from_guid(999);
        let ids = [got[0].id, stranger, got[1].id, got[0].id];
        let mut failed = Vec::new();
        st.finish_many(c.id, &ids, now, 0, |id, e| failed.push((*id, e)));
        assert_eq!(
            failed,
            vec![(stranger, InFlightError::NotInFlight), (got[0].id, InFlightError::NotInFlight)]
        );
        assert_eq!(received(&mut rx).len(), 2, "two FINs worked: two more delivered");
        assert_eq!((st.in_flight_count(), st.depth()), (3, 1));
    }

    #[test]
    fn two_clients_split_messages() {
        let now = Instant::now();
        let mut st = state(100);
        let (a, mut ra) = client();
        let (b, mut rb) = client();
        st.add_client(a.clone(), T, 0, 0).unwrap();
        st.add_client(b.clone(), T, 0, 0).unwrap();
        st.set_rdy(a.id, 10, now);
        st.set_rdy(b.id, 10, now);
        for i in 0..10 {
            st.put(msg(i), now).unwrap();
        }
        let (ga, gb) = (received(&mut ra), received(&mut rb));
        assert_eq!(ga.len() + gb.len(), 10);
        assert!(!ga.is_empty() && !gb.is_empty());
        assert_eq!(
            st.finish(b.id, &ga[0].id, now, 0),
            Err(InFlightError::NotOwner)
        );
    }

    #[test]
    fn timeout_requeues_and_redelivers_with_next_attempt() {
        let now = Instant::now();
        let mut st = state(100);
        let (c, mut rx) = client();
        st.add_client(c.clone(), Duration::from_secs(1), 0, 0)
            .unwrap();
        st.set_rdy(c.id, 1, now);
        st.put(msg(1), now).unwrap();
        assert_eq!(received(&mut rx).len(), 1);
        assert_eq!(
            st.process_timers(now + Duration::from_millis(999)),
            Some(now + Duration::from_secs(1))
        );
        assert!(received(&mut rx).is_empty());
        st.process_timers(now + Duration::from_secs(1));
        let again = received(&mut rx);
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].attempts, 2);
        assert_eq!(st.stats("c", false, now).timeout_count, 1);
        assert_eq!(st.stats("c", false, now).requeue_count, 0);
    }

    #[test]
    fn touch_postpones_timeout_but_not_past_max() {
        let now = Instant::now();
        let mut st = state(100);
        let (c, mut rx) = client();
        st.add_client(c.clone(), Duration::from_secs(1), 0, 0)
            .unwrap();
        st.set_rdy(c.id, 1, now);
        st.put(msg(1), now).unwrap();
        let m = received(&mut rx).remove(0);
        let later = now + Duration::from_millis(800);
        st.touch(c.id, &m.id, later, Duration::from_millis(1500))
            .unwrap();
        st.process_timers(now + Duration::from_millis(1200));
        assert!(
            received(&mut rx).is_empty(),
            "touched message did not time out at its old deadline"
        );
        // capped at delivery + max_msg_timeout = 1.5 s
        st.process_timers(now + Duration::from_millis(1500));
        assert_eq!(received(&mut rx).len(), 1);
    }

    #[test]
    fn requeue_with_delay_is_deferred_until_due() {
        let now = Instant::now();
        let mut st = state(100);
        let (c, mut rx) = client();
        st.add_client(c.clone(), T, 0, 0).unwrap();
        st.set_rdy(c.id, 5, now);
        st.put(msg(1), now).unwrap();
        let m = received(&mut rx).remove(0);
        st.requeue(c.id, &m.id, Duration::from_secs(2), now)
            .unwrap();
        assert_eq!(st.deferred_count(), 1);
        st.process_timers(now + Duration::from_millis(1999));
        assert!(received(&mut rx).is_empty());
        st.process_timers(now + Duration::from_secs(2));
        let m2 = received(&mut rx);
        assert_eq!((m2.len(), m2[0].attempts), (1, 2));
        assert_eq!(st.stats("c", false, now).requeue_count, 1);
    }

    #[test]
    fn deferred_put_and_pause() {
        let now = Instant::now();
        let mut st = state(100);
        let (c, mut rx) = client();
        st.add_client(c.clone(), T, 0, 0).unwrap();
        st.set_rdy(c.id, 5, now);
        st.put_deferred(msg(1), Duration::from_secs(1), now);
        assert!(received(&mut rx).is_empty());
        st.paused = true;
        st.process_timers(now + Duration::from_secs(1));
        assert!(
            received(&mut rx).is_empty(),
            "paused channel delivers nothing"
        );
        assert_eq!(st.depth(), 1);
        st.paused = false;
        st.pump(now);
        assert_eq!(received(&mut rx).len(), 1);
    }

    #[test]
    fn empty_resets_in_flight_and_credit() {
        let now = Instant::now();
        let mut st = state(100);
        let (c, mut rx) = client();
        st.add_client(c.clone(), T, 0, 0).unwrap();
        st.set_rdy(c.id, 1, now);
        st.put(msg(1), now).unwrap();
        st.put(msg(2), now).unwrap();
        let m = received(&mut rx).remove(0);
        st.empty().unwrap();
        assert_eq!((st.depth(), st.in_flight_count()), (0, 0));
        assert_eq!(
            st.finish(c.id, &m.id, now, 0),
            Err(InFlightError::NotInFlight)
        );
        st.put(msg(3), now).unwrap();
        assert_eq!(received(&mut rx).len(), 1, "credit restored after empty");
    }

    #[test]
    fn max_consumers() {
        let mut st = state(10);
        let (a, _ra) = client();
        let (b, _rb) = client();
        st.add_client(a, T, 0, 1).unwrap();
        assert_eq!(st.add_client(b, T, 0, 1), Err(SubError::TooManyConsumers));
    }

    #[test]
    fn id_hash_spreads_sequential_ids_over_low_bits() {
        use std::hash::BuildHasher;
        let b = std::hash::BuildHasherDefault::<IdHasher>::default();
        let mut g = crate::guid::GuidFactory::new(617);
        let buckets: std::collections::HashSet<u64> =
            (0..4096).map(|_| b.hash_one(g.next(1_796_012_200_000_000_000)) & 4095).collect();
        // uniform hashing fills ~63% of 4096 buckets with 4096 keys
        assert!(buckets.len() > 2000, "only {} distinct low-bit buckets", buckets.len());
    }

    #[test]
    fn pq_stays_bounded_under_fin_churn() {
        let now = Instant::now();
        let mut st = state(10);
        let (c, mut rx) = client();
        st.add_client(c.clone(), T, 0, 0).unwrap();
        st.set_rdy(c.id, 1, now);
        for i in 0..10_000 {
            st.put(msg(i), now).unwrap();
            let m = received(&mut rx).remove(0);
            st.finish(c.id, &m.id, now, 0).unwrap();
        }
        assert!(st.in_flight_pq.len() < 2048);
    }
}

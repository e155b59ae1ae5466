//! A topic: the named stream publishers write to. Every message it accepts
//! is copied to every channel it has — the copies share one body — or, while
//! it has no channel or is paused, waits in the topic's own queue (memory up
//! to `--mem-queue-size`, then its backend) until a pump task can hand the
//! backlog on in order.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use nsq_protocol::stats::{E2eLatency, TopicStats};
use nsq_protocol::Message;
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::backend::{put_message, put_messages, Backend, BackendError};
use crate::channel::{Channel, ChannelState};
use crate::e2e::{quantiles, QuantileStream};
use crate::guid::GuidFactory;
use crate::nsqd::{Event, NsqdInner};

#[derive(Debug, thiserror::Error)]
pub enum PutError {
    #[error("exiting")]
    Exiting,
    #[error("{0}")]
    Backend(#[from] BackendError),
}

/// How many backlog messages the pump moves per lock acquisition, so a long
/// backlog never holds the topic (and its publishers) for long.
const PUMP_BATCH: usize = 512;

struct TopicState {
    channels: BTreeMap<String, Arc<Channel>>,
    /// Backlog while the topic has no channel or is paused; a message may
    /// carry a deferral to apply when it reaches the channels.
    memory: VecDeque<(Message, Option<Duration>)>,
    backend: Box<dyn Backend>,
    /// Whether the backend may hold records (only this topic writes to it,
    /// so this is exact and spares a locked disk check per publish).
    backend_pending: bool,
    paused: bool,
    /// False until pre-creation of lookupd-known channels (or metadata
    /// load) is done; nothing flows to channels before.
    started: bool,
    exiting: bool,
    message_count: u64,
    message_bytes: u64,
    guid: GuidFactory,
}

impl TopicState {
    fn has_backlog(&self) -> bool {
        !self.memory.is_empty() || self.backend_pending
    }

    fn can_flow(&self) -> bool {
        self.started && !self.paused && !self.exiting && !self.channels.is_empty()
    }

    /// The backlog pump's path: a failed channel write loses the message
    /// for that channel (logged, `/ping` unhealthy), as in nsqd's pump.
    fn fan_out(&self, msg: Message, defer: Option<Duration>, now: Instant, nsqd: &NsqdInner) {
        let _ = self.fan_out_batch(vec![msg], defer, now, nsqd);
    }

    /// Every channel gets a copy of each message (same body); one lock
    /// acquisition per channel for the whole batch. The last channel takes
    /// the messages themselves: with one channel, no body is ever shared.
    /// The first channel write that failed is returned: a publisher must
    /// not get OK for a message a channel could not keep (nsqd, writing
    /// its topic queue first, answers E_PUB_FAILED there too).
    fn fan_out_batch(
        &self,
        msgs: Vec<Message>,
        defer: Option<Duration>,
        now: Instant,
        nsqd: &NsqdInner,
    ) -> Result<(), BackendError> {
        let mut first_err = None;
        let mut msgs = Some(msgs);
        let last = self.channels.len().saturating_sub(1);
        for (i, ch) in self.channels.values().enumerate() {
            let batch = if i == last {
                msgs.take().unwrap_or_default()
            } else {
                msgs.as_ref().map(|m| m.to_vec()).unwrap_or_default()
            };
            let r = ch.with(|st| match defer {
                Some(d) if !d.is_zero() => {
                    for m in batch {
                        st.put_deferred(m, d, now);
                    }
                    Ok(false)
                }
                _ => st.put_many(batch, now),
            });
            match r {
                // a disk write worked: the disk is healthy (again), as nsqd's channel.put reports
                Ok(true) => nsqd.set_health(None),
                Ok(false) => {}
                Err(e) => {
                    tracing::error!(topic = %ch.topic_name, channel = %ch.name, error = %e, "channel put failed");
                    nsqd.set_health(Some(e.to_string()));
                    first_err.get_or_insert(e);
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    fn next_backlog(&mut self) -> Option<(Message, Option<Duration>)> {
        if let Some(m) = self.memory.pop_front() {
            return Some(m);
        }
        if !self.backend_pending {
            return None;
        }
        // one trip to the disk queue per batch, not per record
        loop {
            let mut records = Vec::with_capacity(PUMP_BATCH);
            self.backend.read_batch(PUMP_BATCH, &mut records);
            if records.is_empty() {
                self.backend_pending = false;
                return None;
            }
            for data in records {
                match Message::decode(data) {
                    Ok(m) => self.memory.push_back((m, None)),
                    Err(e) => {
                        tracing::error!(error = %e, "failed to decode message from topic backend, skipped")
                    }
                }
            }
            if let Some(m) = self.memory.pop_front() {
                return Some(m);
            }
        }
    }
}

pub struct Topic {
    pub name: String,
    pub ephemeral: bool,
    state: Mutex<TopicState>,
    pump: Notify,
    pub cancel: CancellationToken,
    nsqd: Weak<NsqdInner>,
}

impl Topic {
    pub(crate) fn new(name: &str, nsqd: &Arc<NsqdInner>, started: bool) -> Arc<Topic> {
        let backend = nsqd.new_backend(name);
        let state = TopicState {
            channels: BTreeMap::new(),
            memory: VecDeque::new(),
            backend_pending: backend.has_data(),
            backend,
            paused: false,
            started,
            exiting: false,
            message_count: 0,
            message_bytes: 0,
            guid: GuidFactory::new(nsqd.opts.node_id),
        };
        let topic = Arc::new(Topic {
            name: name.to_string(),
            ephemeral: nsq_protocol::names::is_ephemeral(name),
            state: Mutex::new(state),
            pump: Notify::new(),
            cancel: nsqd.cancel.child_token(),
            nsqd: Arc::downgrade(nsqd),
        });
        nsqd.tasks.spawn(topic.clone().run_pump());
        topic
    }

    /// Publishes bodies as new messages (all or none on an exiting topic).
    pub fn put(&self, bodies: Vec<Bytes>, defer: Option<Duration>) -> Result<(), PutError> {
        let nsqd = self.nsqd.upgrade().ok_or(PutError::Exiting)?;
        let now = Instant::now();
        let unix_ns = crate::now_unix_ns();
        let mut st = self.state.lock();
        if st.exiting {
            return Err(PutError::Exiting);
        }
        let direct = st.can_flow() && !st.has_backlog();
        let mem_cap = nsqd.opts.mem_queue_size.max(0) as usize;
        let mut result = Ok(());
        let mut msgs = Vec::with_capacity(bodies.len());
        for body in bodies {
            let id = st.guid.next(unix_ns);
            st.message_count += 1;
            st.message_bytes += body.len() as u64;
            msgs.push(Message::new(id, unix_ns, body));
        }
        if direct {
            let (n, bytes) = (msgs.len() as u64, msgs.iter().map(|m| m.body.len() as u64).sum::<u64>());
            if let Err(e) = st.fan_out_batch(msgs, defer, now, &nsqd) {
                st.message_count -= n;
                st.message_bytes -= bytes;
                result = Err(PutError::Backend(e));
            }
        } else {
            let room = mem_cap.saturating_sub(st.memory.len()).min(msgs.len());
            let overflow = msgs.split_off(room);
            st.memory.extend(msgs.into_iter().map(|m| (m, defer)));
            st.backend_pending |= !overflow.is_empty();
            if let Err(e) = put_messages(st.backend.as_ref(), overflow.iter()) {
                // nsqd counts only what it accepted
                st.message_count -= overflow.len() as u64;
                st.message_bytes -= overflow.iter().map(|m| m.body.len() as u64).sum::<u64>();
                nsqd.set_health(Some(e.to_string()));
                result = Err(PutError::Backend(e));
            }
        }
        if result.is_ok() && !self.ephemeral && !direct {
            nsqd.set_health(None);
        }
        let wake = !direct && st.can_flow();
        drop(st);
        if wake {
            self.pump.notify_one();
        }
        result
    }

    /// Moves the backlog to the channels whenever it can flow.
    async fn run_pump(self: Arc<Self>) {
        loop {
            tokio::select! {
                _ = self.pump.notified() => {}
                _ = self.cancel.cancelled() => return,
            }
            let Some(nsqd) = self.nsqd.upgrade() else {
                return;
            };
            loop {
                let more = {
                    let mut st = self.state.lock();
                    let now = Instant::now();
                    let mut moved = 0;
                    while st.can_flow() && moved < PUMP_BATCH {
                        let Some((msg, defer)) = st.next_backlog() else {
                            break;
                        };
                        st.fan_out(msg, defer, now, &nsqd);
                        moved += 1;
                    }
                    st.can_flow() && st.has_backlog()
                };
                if !more {
                    break;
                }
                tokio::task::yield_now().await;
            }
        }
    }

    pub fn get_channel(&self, name: &str) -> Option<Arc<Channel>> {
        self.state.lock().channels.get(name).cloned()
    }

    pub fn channel_names(&self) -> Vec<String> {
        self.state.lock().channels.keys().cloned().collect()
    }

    pub fn channels(&self) -> Vec<Arc<Channel>> {
        self.state.lock().channels.values().cloned().collect()
    }

    /// The channel, created (and announced) if it did not exist.
    pub fn get_or_create_channel(&self, name: &str) -> Result<Arc<Channel>, PutError> {
        let nsqd = self.nsqd.upgrade().ok_or(PutError::Exiting)?;
        let mut st = self.state.lock();
        if st.exiting {
            return Err(PutError::Exiting);
        }
        if let Some(ch) = st.channels.get(name) {
            return Ok(ch.clone());
        }
        let backend = nsqd.new_backend(&format!("{}:{}", self.name, name));
        let e2e = (!nsqd.opts.e2e_processing_latency_percentiles.is_empty()).then(|| {
            QuantileStream::new(
                nsqd.opts.e2e_processing_latency_percentiles.clone(),
                nsqd.opts.e2e_processing_latency_window_time,
                Instant::now(),
            )
        });
        let cstate = ChannelState::new(nsqd.opts.mem_queue_size.max(0) as usize, backend, e2e);
        let ch = Channel::new(&self.name, name, cstate, &self.cancel);
        nsqd.tasks.spawn(ch.clone().run_timer());
        st.channels.insert(name.to_string(), ch.clone());
        let wake = st.can_flow() && st.has_backlog();
        drop(st);
        tracing::info!(topic = %self.name, channel = %name, "new channel");
        nsqd.emit(Event::ChannelCreated(self.name.clone(), name.to_string()));
        if wake {
            self.pump.notify_one();
        }
        Ok(ch)
    }

    /// Deletes a channel: its clients are disconnected and its data removed.
    /// Returns false if there was no such channel.
    pub fn delete_channel(&self, name: &str) -> bool {
        let Some(nsqd) = self.nsqd.upgrade() else {
            return false;
        };
        let (ch, now_empty) = {
            let mut st = self.state.lock();
            let Some(ch) = st.channels.remove(name) else {
                return false;
            };
            (ch, st.channels.is_empty())
        };
        nsqd.emit(Event::ChannelDeleted(self.name.clone(), name.to_string()));
        ch.cancel.cancel();
        let conns = ch.with(|st| {
            if let Err(e) = st.delete() {
                tracing::error!(channel = %name, error = %e, "failed to delete channel backend");
            }
            st.client_conns()
        });
        for c in conns {
            c.closer.cancel();
        }
        tracing::info!(topic = %self.name, channel = %name, "deleted channel");
        if now_empty && self.ephemeral {
            nsqd.delete_topic(&self.name);
        }
        true
    }

    /// Called when a client leaves a channel; ephemeral channels go with their last client.
    pub fn client_left(&self, channel: &Channel, remaining: usize) {
        if remaining == 0 && channel.ephemeral {
            self.delete_channel(&channel.name);
        }
    }

    /// Lets messages flow to the channels (after pre-creation or load).
    pub fn start(&self) {
        let wake = {
            let mut st = self.state.lock();
            st.started = true;
            st.can_flow() && st.has_backlog()
        };
        if wake {
            self.pump.notify_one();
        }
    }

    pub fn is_paused(&self) -> bool {
        self.state.lock().paused
    }

    pub fn set_paused(&self, paused: bool) {
        let wake = {
            let mut st = self.state.lock();
            st.paused = paused;
            st.can_flow() && st.has_backlog()
        };
        if wake {
            self.pump.notify_one();
        }
    }

    pub fn empty(&self) -> Result<(), BackendError> {
        let mut st = self.state.lock();
        st.memory.clear();
        st.backend.empty()
    }

    /// Topic delete: stop, delete every channel, remove data.
    pub(crate) fn delete(&self) {
        let names = {
            let mut st = self.state.lock();
            st.exiting = true;
            st.channels.keys().cloned().collect::<Vec<_>>()
        };
        for n in names {
            self.delete_channel(&n);
        }
        self.cancel.cancel();
        let st = self.state.lock();
        if let Err(e) = st.backend.delete() {
            tracing::error!(topic = %self.name, error = %e, "failed to delete topic backend");
        }
    }

    /// Clean shutdown: channels persist memory, in-flight and deferred
    /// messages; the topic's backlog goes to its backend.
    pub(crate) fn close(&self) -> Result<(), BackendError> {
        let mut st = self.state.lock();
        st.exiting = true;
        self.cancel.cancel();
        for ch in st.channels.values() {
            for c in ch.with(|s| s.client_conns()) {
                c.closer.cancel();
            }
            if let Err(e) = ch.with(|s| s.persist_and_close()) {
                tracing::error!(topic = %self.name, channel = %ch.name, error = %e, "failed to persist channel");
            }
        }
        let backlog: Vec<(Message, Option<Duration>)> = st.memory.drain(..).collect();
        for (m, _) in &backlog {
            put_message(st.backend.as_ref(), m)?;
        }
        st.backend.close()
    }

    pub(crate) fn sync_backends(&self) {
        let st = self.state.lock();
        if let Err(e) = st.backend.sync_if_needed() {
            tracing::error!(topic = %self.name, error = %e, "sync failed");
        }
        for ch in st.channels.values() {
            if let Err(e) = ch.with(|s| s.sync_backend()) {
                tracing::error!(topic = %self.name, channel = %ch.name, error = %e, "sync failed");
            }
        }
    }

    pub fn depth(&self) -> i64 {
        let st = self.state.lock();
        st.memory.len() as i64 + st.backend.depth()
    }

    pub fn stats(&self, channel_filter: Option<&str>, include_clients: bool) -> TopicStats {
        let now = Instant::now();
        let st = self.state.lock();
        let mut samples = Vec::new();
        let mut count = 0;
        let mut channels = Vec::new();
        let percentiles = self
            .nsqd
            .upgrade()
            .map(|n| n.opts.e2e_processing_latency_percentiles.clone())
            .unwrap_or_default();
        for (name, ch) in st.channels.iter() {
            if channel_filter.is_some_and(|f| f != name) {
                continue;
            }
            channels.push(ch.with(|s| {
                if let Some((mut v, n)) = s.e2e_samples(now) {
                    samples.append(&mut v);
                    count += n;
                }
                s.stats(name, include_clients, now)
            }));
        }
        let e2e = if percentiles.is_empty() || st.channels.is_empty() {
            E2eLatency {
                count: 0,
                percentiles: None,
            }
        } else {
            samples.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
            E2eLatency {
                count,
                percentiles: Some(quantiles(&percentiles, &samples)),
            }
        };
        TopicStats {
            topic_name: self.name.clone(),
            channels,
            depth: st.memory.len() as i64 + st.backend.depth(),
            backend_depth: st.backend.depth(),
            message_count: st.message_count,
            message_bytes: st.message_bytes,
            paused: st.paused,
            e2e_processing_latency: e2e,
        }
    }

    /// (channel name, paused) of every non-ephemeral channel, for nsqd.dat.
    pub(crate) fn metadata(&self) -> (bool, Vec<(String, bool)>) {
        let st = self.state.lock();
        let chans = st
            .channels
            .values()
            .filter(|c| !c.ephemeral)
            .map(|c| (c.name.clone(), c.with(|s| s.paused)))
            .collect();
        (st.paused, chans)
    }
}

//! What every topic and channel of one nsqd shares: its options and data
//! directory, its health, the lifecycle events for the lookupd loop, and
//! the task tracker and cancellation token of the one shutdown path.
//!
//! It sits below the topics map ([`super::nsqd::NsqdInner`]), so a topic can
//! open its disk queues, report a disk error or announce a channel without
//! reaching up to the registry that holds it.

use std::path::PathBuf;

use nsq_protocol::names::is_ephemeral;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::backend::{Backend, DiskBackend};
use super::clock::{now, now_unix_ns};
use super::disk::BackendError;
use super::health::Health;
use super::spill::{channels_with_runs, to_instant, Spill};
use crate::core::{ChannelConfig, RestoredRun, SpillConfig, TopicConfig};
use crate::options::Options;

/// Topic and channel lifecycle, for the lookupd registration loop and the
/// metadata writer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    TopicCreated(String),
    TopicDeleted(String),
    ChannelCreated(String, String),
    ChannelDeleted(String, String),
    /// A replicated topic whose group's leadership changed here: registered
    /// with its channels if this member serves it now, else unregistered.
    Reregister(String),
}

/// Publishes bodies to a topic (created if needed): how a channel hands its
/// dead letters on without reaching up to the registry that holds topics.
pub type Publisher = Box<dyn Fn(&str, Vec<bytes::Bytes>) -> Result<(), String> + Send + Sync>;

pub struct Context {
    pub opts: Options,
    /// Set once by the registry (`NsqdInner::new`).
    publisher: std::sync::OnceLock<Publisher>,
    pub data_dir: PathBuf,
    /// Channels with run files left by an earlier process, found once.
    left_runs: std::sync::OnceLock<std::collections::HashSet<String>>,
    health: Arc<Health>,
    events: mpsc::UnboundedSender<Event>,
    pub tasks: TaskTracker,
    pub cancel: CancellationToken,
}

impl Context {
    pub fn new(opts: Options, data_dir: PathBuf, events: mpsc::UnboundedSender<Event>) -> Context {
        Context {
            publisher: std::sync::OnceLock::new(),
            opts,
            data_dir,
            left_runs: std::sync::OnceLock::new(),
            health: Arc::default(),
            events,
            tasks: TaskTracker::new(),
            cancel: CancellationToken::new(),
        }
    }

    pub fn set_publisher(&self, p: Publisher) {
        let _ = self.publisher.set(p);
    }

    /// Publishes to `topic` (see [`Publisher`]).
    pub fn publish(&self, topic: &str, bodies: Vec<bytes::Bytes>) -> Result<(), String> {
        match self.publisher.get() {
            Some(p) => p(topic, bodies),
            None => Err("no publisher".into()),
        }
    }

    /// A disk error (Some) or a write that worked again (None), as `/ping`
    /// reports it.
    pub fn set_health(&self, err: Option<String>) {
        self.health.set(err)
    }

    /// `OK` or `NOK - <error>`.
    pub fn health(&self) -> String {
        self.health.text()
    }

    pub fn is_healthy(&self) -> bool {
        self.health.is_ok()
    }

    pub fn emit(&self, e: Event) {
        let _ = self.events.send(e);
    }

    /// The disk queue of a topic (`name`) or channel (`topic:channel`):
    /// `Ok(None)` for `#ephemeral` names, which keep nothing. A queue that
    /// will not open is a disk failure (the data path was locked at start):
    /// nsqd keeps serving from memory, reports unhealthy, and refuses what
    /// would have to go to disk. A channel's queue (`consumed`) keeps, with
    /// durable acknowledgements, each record until its message is finished.
    pub fn open_backend(&self, name: &str, consumed: bool) -> Backend {
        if is_ephemeral(name) {
            return Backend::new(Ok(None));
        }
        let o = &self.opts;
        let opts = nsq_diskqueue::Options {
            max_bytes_per_file: o.max_bytes_per_file,
            min_msg_size: nsq_protocol::message::MESSAGE_HEADER_LEN as i32,
            max_msg_size: (o.max_msg_size + nsq_protocol::message::MESSAGE_HEADER_LEN as i64)
                as i32,
            sync_every: o.sync_every,
            sync_timeout: o.sync_timeout,
            // DiskBackend runs the syncs on a blocking thread.
            defer_sync: true,
            durable_reads: self.durable_acks(),
            // A crash then delivers again what consumers had not finished.
            // A topic's reads go straight into its channels' queues.
            acked_reads: self.durable_acks() && consumed,
        };
        Backend::new(
            match DiskBackend::open(name, &self.data_dir, opts, self.health.clone()) {
                Ok(b) => Ok(Some(b)),
                Err(e) => {
                    tracing::error!(name, error = %e, "failed to open disk queue");
                    self.set_health(Some(e.to_string()));
                    Err(BackendError::Unavailable(e.to_string()))
                }
            },
        )
    }

    pub fn mem_queue_size(&self) -> usize {
        self.opts.mem_queue_size.max(0) as usize
    }

    pub fn topic_config(&self, name: &str, backend: &Backend, started: bool) -> TopicConfig {
        TopicConfig {
            mem_queue_size: self.mem_queue_size(),
            durable: !is_ephemeral(name),
            backend_unread: backend.has_unread(),
            backend_depth: backend.depth().max(0) as u64,
            node_id: self.opts.node_id,
            started,
        }
    }

    /// A channel's run files of spilled deferred messages
    /// (`<topic>:<channel>.deferred.*`): None for `#ephemeral` channels,
    /// which keep nothing. Opened without `--deferred-spill` too when the
    /// channel has runs an earlier start wrote, so they are delivered
    /// either way; otherwise None.
    pub fn open_spill(&self, name: &str) -> Option<Arc<Spill>> {
        if is_ephemeral(name) {
            return None;
        }
        // Without the flag no run is ever written, so the runs a channel can
        // have are the ones found at start: one scan of the data directory,
        // instead of a scan and a Spill (with its syncer) per channel.
        let wanted = self.opts.deferred_spill
            || self
                .left_runs
                .get_or_init(|| channels_with_runs(&self.data_dir))
                .contains(name);
        wanted.then(|| Spill::new(&self.data_dir, name, self.health.clone()))
    }

    /// `spill`: the channel's run files, whose runs it starts with.
    pub fn channel_config(
        &self,
        name: &str,
        backend: &Backend,
        spill: Option<&Spill>,
    ) -> ChannelConfig {
        let o = &self.opts;
        let (now, now_ns) = (now(), now_unix_ns());
        let restored_runs = spill
            .map(|s| s.restore())
            .unwrap_or_default()
            .into_iter()
            .map(|r| RestoredRun {
                id: r.id,
                count: r.count,
                head: to_instant(r.head_ns, now, now_ns),
            })
            .collect();
        ChannelConfig {
            spill: (o.deferred_spill && spill.is_some()).then(|| SpillConfig {
                threshold: self.mem_queue_size(),
                durable: self.durable_acks(),
                max_run_bytes: o.max_bytes_per_file.max(1) as u64,
            }),
            restored_runs,
            mem_queue_size: self.mem_queue_size(),
            durable: !is_ephemeral(name),
            backend_unread: backend.has_unread(),
            backend_depth: backend.depth().max(0) as u64,
            // with durable acknowledgements a message reaches a consumer
            // only through the disk, never handed over from memory; an
            // #ephemeral channel has no disk, and hands off as in NSQ
            hand_off: !self.durable_acks() || is_ephemeral(name),
            max_attempts: self.opts.max_attempts,
            e2e: (!o.e2e_processing_latency_percentiles.is_empty()).then(|| {
                (
                    o.e2e_processing_latency_percentiles.0.clone(),
                    o.e2e_processing_latency_window_time,
                )
            }),
            seed: rand::random(),
        }
    }

    /// `--sync-every=1`: a publish is answered only once every copy of its
    /// messages written to a disk queue is durable, and consumers see only
    /// durable records (see `docs/reliability.md`).
    pub fn durable_acks(&self) -> bool {
        self.opts.sync_every == 1
    }

    /// Whether FIN needs the wall clock (E2E percentiles configured).
    pub fn wants_e2e(&self) -> bool {
        !self.opts.e2e_processing_latency_percentiles.is_empty()
    }
}

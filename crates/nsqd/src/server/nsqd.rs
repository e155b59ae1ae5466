//! The nsqd instance: its topics by name, its connected clients, the
//! data-path lock, `nsqd.dat`, and the one shutdown path.
//!
//! Lock order, everywhere: topics map → topic → channel → a client's
//! outbox. A channel never reaches up to its topic while holding its own
//! lock, and the topics map is never held while a topic is deleted or
//! closed.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nsq_protocol::identify::ServerFeatures;
use nsq_protocol::names::{is_ephemeral, is_valid_channel_name, is_valid_topic_name};
use nsq_protocol::Limits;
use parking_lot::{Mutex, RwLock};
use tokio::sync::mpsc;

/// How long a topic made before the first identify round with the lookupds
/// has finished waits for it (each lookupd's dial and IDENTIFY take at most
/// a second or two).
const FIRST_LOOKUP_ROUND: std::time::Duration = std::time::Duration::from_secs(5);

use super::client::Client;
use super::clock::now_unix_ns;
use super::cluster::{Cluster, NotMember};
use super::context::{Context, Event};
use super::metadata::{self, Metadata, TopicMeta};
use super::topic::Topic;
use crate::core::ClientId;
use crate::core::{Limit, Policy};
use crate::options::{Options, CLIENT_TIMEOUT, TLS_NOT_REQUIRED, TLS_REQUIRED};
use nsq_http::auth::AuthConfig;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Config(String),
    #[error("failed to lock data-path: {0}")]
    Lock(String),
    #[error("failed to parse metadata in {file} - {err}")]
    Metadata { file: String, err: String },
    #[error("failed to persist metadata - {0}")]
    Persist(String),
    #[error("listen ({addr}) failed - {}", nsq_protocol::gofmt::listen_error(.addr, .err))]
    Listen { addr: String, err: std::io::Error },
    #[error("failed to build TLS config - {}", .0.naming_file())]
    Tls(super::tls::TlsError),
    #[error("failed to build client TLS config - {}", .0.naming_file())]
    ClientTls(super::tls::TlsError),
    /// The replication member would not start (boxed: openraft's errors
    /// are large, and this one is rare).
    #[error("{0}")]
    Replication(Box<dyn std::error::Error + Send + Sync>),
}

/// Sets the log filter to a level; false if it could not.
pub type LogLevelHook = nsq_cli::log::LevelSetter;

/// Why a publish has no topic to go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoTopic {
    /// nsqd is shutting down (`EXITING`).
    Exiting,
    /// A replication member not caught up since it started
    /// (`REPLICATION_CATCHING_UP`).
    CatchingUp,
}

/// State shared by every part of a running nsqd.
pub struct NsqdInner {
    /// Options, health, events, tasks and cancellation, shared with the topics.
    pub ctx: Arc<Context>,
    pub features: ServerFeatures,
    pub limits: Limits,
    topics: RwLock<HashMap<String, Arc<Topic>>>,
    clients: Mutex<HashMap<ClientId, Arc<Client>>>,
    pub start_time: i64,
    pub tcp_port: AtomicU16,
    pub http_port: AtomicU16,
    /// Bound HTTPS port (0 without an HTTPS listener); named in the plain
    /// HTTP listener's `TLS_REQUIRED` answer.
    pub https_port: AtomicU16,
    /// Server TLS (IDENTIFY `tls_v1`, HTTPS); None without `--tls-cert/key`.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// How to reach the auth servers; None without `--auth-http-address`.
    pub auth: Option<AuthConfig>,
    /// The HTTP/HTTPS access control; None without `--http-auth-required`.
    pub http_guard: Option<Arc<nsq_http::guard::Guard>>,
    /// For the lookupds' HTTP API (Go's defaults for TLS, as nsqd's).
    pub http_client: nsq_http::Client,
    pub lookupd_tcp_addresses: Mutex<Vec<String>>,
    /// Poked when `lookupd_tcp_addresses` changes at run time.
    pub lookupd_changed: tokio::sync::Notify,
    /// HTTP addresses of the lookupds we are identified with; None until
    /// the lookup loop has tried every configured lookupd once.
    pub lookupd_http_addresses: tokio::sync::watch::Sender<Option<Vec<String>>>,
    /// Set by the binary so `PUT /config/log_level` can change the filter.
    pub log_level_hook: Mutex<Option<LogLevelHook>>,
    pub log_level: Mutex<nsq_cli::LogLevel>,
    /// `--statsd-prefix` with `%s` replaced by this node's host key and a
    /// trailing `.`, as nsqd reports it; set once the ports are bound.
    pub statsd_prefix: Mutex<String>,
    events_rx: Mutex<Option<mpsc::UnboundedReceiver<Event>>>,
    loading: AtomicBool,
    metadata_lock: Mutex<()>,
    /// What decides about replicated topics (`super::cluster`): the
    /// member with `--replication-address`, else [`NotMember`].
    cluster: RwLock<Arc<dyn Cluster>>,
    _data_lock: Option<File>,
}

impl NsqdInner {
    pub fn new(mut opts: Options) -> Result<Arc<NsqdInner>, Error> {
        opts.validate().map_err(Error::Config)?;
        // Asking for client certificates makes TLS mandatory (nsqd does the
        // same, and `/config/tls_required` then reports it).
        if !opts.tls_client_auth_policy.is_empty() && opts.tls_required == TLS_NOT_REQUIRED {
            opts.tls_required = TLS_REQUIRED;
        }
        let tls = super::tls::server_config(&opts).map_err(Error::Tls)?;
        if tls.is_none() && opts.tls_required != TLS_NOT_REQUIRED {
            return Err(Error::Config(
                "cannot require TLS client connections without TLS key and cert".into(),
            ));
        }
        let client_tls = super::tls::client_config(&opts).map_err(Error::ClientTls)?;
        let http_client = |tls| {
            nsq_http::Client::new(
                nsq_http::ClientOptions::new(
                    opts.http_client_connect_timeout,
                    opts.http_client_request_timeout,
                )
                .tls(tls),
            )
        };
        let auth = (!opts.auth_http_addresses.is_empty()).then(|| AuthConfig {
            addresses: opts.auth_http_addresses.clone(),
            post: opts.auth_http_request_method == "post",
            client: http_client(Some(client_tls)),
        });
        let http_guard = match (&auth, opts.http_auth_required) {
            (Some(auth), true) => Some(Arc::new(nsq_http::guard::Guard::new(
                auth.clone(),
                usize::try_from(opts.http_max_connections).unwrap_or(0),
            ))),
            _ => None,
        };
        let data_lock = lock_data_path(&data_dir(&opts))?;
        let features = ServerFeatures {
            default_heartbeat_ms: (CLIENT_TIMEOUT / 2).as_millis() as i64,
            max_heartbeat_ms: opts.max_heartbeat_interval.as_millis() as i64,
            default_output_buffer_size: 16 * 1024,
            max_output_buffer_size: opts.max_output_buffer_size,
            default_output_buffer_timeout_ms: opts.output_buffer_timeout.as_millis() as i64,
            min_output_buffer_timeout_ms: opts.min_output_buffer_timeout.as_millis() as i64,
            max_output_buffer_timeout_ms: opts.max_output_buffer_timeout.as_millis() as i64,
            default_msg_timeout_ms: opts.msg_timeout.as_millis() as i64,
            max_msg_timeout_ms: opts.max_msg_timeout.as_millis() as i64,
            max_rdy_count: opts.max_rdy_count,
            tls_available: tls.is_some(),
            snappy_enabled: opts.snappy,
            deflate_enabled: opts.deflate,
            compression_available: true,
            max_deflate_level: opts.max_deflate_level,
            auth_required: !opts.auth_http_addresses.is_empty(),
            topology_region: opts.topology_region.clone(),
            topology_zone: opts.topology_zone.clone(),
            version: nsq_protocol::VERSION.to_string(),
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let inner = Arc::new(NsqdInner {
            ctx: Arc::new(Context::new(opts.clone(), data_dir(&opts), tx)),
            limits: opts.limits(),
            features,
            topics: RwLock::new(HashMap::new()),
            clients: Mutex::new(HashMap::new()),
            start_time: now_unix_ns() / 1_000_000_000,
            tcp_port: AtomicU16::new(0),
            http_port: AtomicU16::new(0),
            https_port: AtomicU16::new(0),
            tls,
            auth,
            http_guard,
            http_client: http_client(None),
            lookupd_tcp_addresses: Mutex::new(opts.lookupd_tcp_addresses.clone()),
            lookupd_changed: tokio::sync::Notify::new(),
            lookupd_http_addresses: tokio::sync::watch::Sender::new(None),
            log_level_hook: Mutex::new(None),
            log_level: Mutex::new(opts.log_level),
            statsd_prefix: Mutex::new(opts.statsd_prefix.clone()),
            events_rx: Mutex::new(Some(rx)),
            loading: AtomicBool::new(false),
            metadata_lock: Mutex::new(()),
            cluster: RwLock::new(Arc::new(NotMember)),
            _data_lock: Some(data_lock),
        });
        // Channels publish their dead letters through this; weak, or the
        // registry would own itself through its topics.
        let weak = Arc::downgrade(&inner);
        inner.ctx.set_publisher(Box::new(move |topic, bodies| {
            let nsqd = weak.upgrade().ok_or("exiting")?;
            if !is_valid_topic_name(topic) {
                return Err(format!("invalid topic name {topic:?}"));
            }
            let t = nsqd.get_or_create_topic(topic).ok_or("exiting")?;
            t.publish(bodies, None).map(drop).map_err(|e| e.to_string())
        }));
        Ok(inner)
    }

    pub fn opts(&self) -> &Options {
        &self.ctx.opts
    }

    pub fn data_dir(&self) -> PathBuf {
        self.ctx.data_dir.clone()
    }

    /// `OK` or `NOK - <error>`.
    pub fn health(&self) -> String {
        self.ctx.health()
    }

    pub fn is_healthy(&self) -> bool {
        self.ctx.is_healthy()
    }

    pub fn is_exiting(&self) -> bool {
        self.ctx.cancel.is_cancelled()
    }

    /// What decides about replicated topics (see `super::cluster`).
    pub fn cluster(&self) -> Arc<dyn Cluster> {
        self.cluster.read().clone()
    }

    /// This nsqd is a member of a replication cluster from now on: set at
    /// startup, before `nsqd.dat` is loaded.
    pub fn set_cluster(&self, c: Arc<dyn Cluster>) {
        *self.cluster.write() = c;
    }

    pub fn take_events(&self) -> Option<mpsc::UnboundedReceiver<Event>> {
        self.events_rx.lock().take()
    }

    pub fn get_topic(&self, name: &str) -> Option<Arc<Topic>> {
        self.topics.read().get(name).cloned()
    }

    /// The topic, created (and announced) if needed. None while exiting.
    ///
    /// A new topic starts moving messages only once the channels the
    /// lookupds know for it exist (nsqd's pre-creation), so its first
    /// messages reach them; until then they wait in the topic.
    pub fn get_or_create_topic(&self, name: &str) -> Option<Arc<Topic>> {
        self.get_or_create_topic_with(name, None)
    }

    /// The topic a publish goes to, created if needed as NSQ does. But a
    /// member of a replication cluster that has not caught up with its
    /// groups since it started creates none: the name may be a replicated
    /// topic whose `TopicCreate` it has not applied yet, and what a topic
    /// made here took would stay on this member, undelivered.
    pub fn topic_to_publish(&self, name: &str) -> Result<Arc<Topic>, NoTopic> {
        if let Some(t) = self.get_topic(name) {
            return Ok(t);
        }
        if !self.cluster().caught_up() {
            return Err(NoTopic::CatchingUp);
        }
        self.get_or_create_topic(name).ok_or(NoTopic::Exiting)
    }

    /// A replicated topic, created if needed: its `replicas` are set before
    /// it is announced, so the lookupd loop never registers it from a
    /// member that does not lead its group. An existing topic is returned
    /// as it is.
    pub fn get_or_create_replicated_topic(&self, name: &str, replicas: u8) -> Option<Arc<Topic>> {
        self.get_or_create_topic_with(name, Some(replicas))
    }

    fn get_or_create_topic_with(&self, name: &str, replicas: Option<u8>) -> Option<Arc<Topic>> {
        if let Some(t) = self.get_topic(name) {
            return Some(t);
        }
        if self.is_exiting() {
            return None;
        }
        let loading = self.loading.load(Ordering::Relaxed);
        // A replicated topic's channels are its group's (applied from its
        // log on every member), not what the lookupds were told by a leader.
        let precreate =
            replicas.is_none() && !loading && !self.lookupd_tcp_addresses.lock().is_empty();
        let topic = {
            let mut topics = self.topics.write();
            if let Some(t) = topics.get(name) {
                return Some(t.clone());
            }
            let keeper = replicas.and_then(|n| self.cluster().keeper(name, n));
            let t = Topic::new(name, &self.ctx, !loading && !precreate, keeper);
            if let Some(n) = replicas {
                t.set_replicas(n);
            }
            topics.insert(name.to_string(), t.clone());
            t
        };
        self.ctx.tasks.spawn(topic.clone().run_pump());
        tracing::info!(topic = %name, "new topic");
        if !loading {
            self.ctx.emit(Event::TopicCreated(name.to_string()));
        }
        if precreate {
            let mut known = self.lookupd_http_addresses.subscribe();
            let client = self.http_client.clone();
            let t = topic.clone();
            self.ctx.tasks.spawn(async move {
                // nsq-rs: a topic made as nsqd starts (its producer
                // connected first) waits for the first identify round, so
                // the lookupds' channels get its first messages too; NSQ
                // starts it with none. Each lookupd's dial and IDENTIFY are
                // bounded, so is this wait.
                let first_round = known.wait_for(Option::is_some);
                let _ = tokio::time::timeout(FIRST_LOOKUP_ROUND, first_round).await;
                let addrs = known.borrow().clone().unwrap_or_default();
                if addrs.is_empty() {
                    tracing::error!(topic = %t.name, "no available nsqlookupd to query for channels to pre-create for new topic");
                } else {
                    for c in super::precreate::lookupd_channels(&client, &addrs, &t.name).await {
                        if !is_ephemeral(&c) && is_valid_channel_name(&c) {
                            let _ = t.get_or_create_channel(&c);
                        }
                    }
                }
                t.start();
            });
        }
        Some(topic)
    }

    /// The TCP address consumers reach this nsqd at: its broadcast address
    /// and the port its TCP listener is bound to.
    pub fn tcp_broadcast_address(&self) -> String {
        let port = self.tcp_port.load(Ordering::Relaxed);
        let host = &self.opts().broadcast_address;
        // An IPv6 literal needs its brackets to be followed by a port.
        if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        }
    }

    /// Whether this nsqd registers `topic` with the lookupds: always for an
    /// unreplicated topic (NSQ's behaviour), for a replicated one as its
    /// cluster says (only on its group's leader).
    pub fn registers(&self, topic: &Topic) -> bool {
        match topic.replicas() {
            None => true,
            Some(n) => self.cluster().registers(&topic.name, n),
        }
    }

    /// Why a SUB to topic `name` is refused here (a replicated topic that
    /// this nsqd does not serve), or None.
    pub fn sub_refusal(&self, name: &str) -> Option<String> {
        let replicas = self.get_topic(name)?.replicas()?;
        self.cluster().sub_refusal(name, replicas)
    }

    /// Deletes a topic and everything in it. False if it did not exist.
    pub fn delete_topic(&self, name: &str) -> bool {
        let Some(topic) = self.topics.write().remove(name) else {
            return false;
        };
        self.ctx.emit(Event::TopicDeleted(name.to_string()));
        topic.delete();
        tracing::info!(topic = %name, "deleted topic");
        true
    }

    /// Deletes a channel; an `#ephemeral` topic goes with its last channel.
    /// False if there was no such channel.
    pub fn delete_channel(&self, topic: &Topic, channel: &str) -> bool {
        match topic.delete_channel(channel) {
            None => false,
            Some(now_empty) => {
                if now_empty && topic.ephemeral {
                    self.delete_topic(&topic.name);
                }
                true
            }
        }
    }

    pub fn topics(&self) -> Vec<Arc<Topic>> {
        let mut v: Vec<Arc<Topic>> = self.topics.read().values().cloned().collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    pub fn add_client(&self, c: Arc<Client>) {
        self.clients.lock().insert(c.id, c);
    }

    pub fn remove_client(&self, id: ClientId) {
        self.clients.lock().remove(&id);
    }

    pub fn clients(&self) -> Vec<Arc<Client>> {
        self.clients.lock().values().cloned().collect()
    }

    fn metadata_path(&self) -> PathBuf {
        self.data_dir().join("nsqd.dat")
    }

    /// Restores topics, channels and paused state from `nsqd.dat`.
    pub fn load_metadata(&self) -> Result<(), Error> {
        let path = self.metadata_path();
        let meta = metadata::load(&path).map_err(|err| Error::Metadata {
            file: path.display().to_string(),
            err,
        })?;
        let Some(meta) = meta else { return Ok(()) };
        self.loading.store(true, Ordering::Relaxed);
        for t in meta.topics.unwrap_or_default() {
            if !is_valid_topic_name(&t.name) {
                tracing::warn!(topic = %t.name, "skipping creation of invalid topic");
                continue;
            }
            // A replicated topic is made replicated, so its queues are kept
            // in its group's log from the start.
            let Some(topic) = self.get_or_create_topic_with(&t.name, t.replicas) else {
                break;
            };
            if t.paused {
                topic.set_paused(true);
            }
            let limit = limit_from_meta(&t.name, t.max_depth, t.max_depth_policy.as_deref());
            if limit.is_set() || t.mem_queue_size.is_some() {
                topic.configure(limit, t.mem_queue_size.map(|n| n.max(0) as usize));
            }
            if let Some(max_age) = duration_from_meta(t.max_age) {
                topic.set_max_age(Some(max_age));
            }
            for c in t.channels.unwrap_or_default() {
                if !is_valid_channel_name(&c.name) {
                    tracing::warn!(channel = %c.name, "skipping creation of invalid channel");
                    continue;
                }
                if let Ok(ch) = topic.get_or_create_channel(&c.name) {
                    if c.paused {
                        ch.set_paused(true);
                    }
                    if c.max_attempts.is_some() || c.dead_letter_topic.is_some() {
                        ch.configure(c.max_attempts.unwrap_or(0), c.dead_letter_topic);
                    }
                    let limit =
                        limit_from_meta(&c.name, c.max_depth, c.max_depth_policy.as_deref());
                    if limit.is_set() {
                        topic.set_channel_limit(&ch, limit);
                    }
                    if let Some(max_age) = duration_from_meta(c.max_age) {
                        ch.set_max_age(Some(max_age));
                    }
                }
            }
        }
        self.loading.store(false, Ordering::Relaxed);
        for t in self.topics() {
            t.start();
        }
        Ok(())
    }

    /// Writes `nsqd.dat` (atomically) with every non-ephemeral topic and channel.
    pub fn persist_metadata(&self) -> Result<(), Error> {
        let _g = self.metadata_lock.lock();
        let topics: Vec<TopicMeta> = self
            .topics()
            .iter()
            .filter(|t| !t.ephemeral)
            .map(|t| t.metadata())
            .collect();
        let meta = Metadata {
            topics: (!topics.is_empty()).then_some(topics),
            version: nsq_protocol::VERSION.to_string(),
        };
        metadata::write(&self.metadata_path(), &meta).map_err(|e| Error::Persist(e.to_string()))
    }

    /// Stops everything, persisting what is in memory, in flight and deferred.
    pub async fn shutdown(&self) {
        self.ctx.cancel.cancel();
        for c in self.clients() {
            c.closer.cancel();
        }
        if let Err(e) = self.persist_metadata() {
            tracing::error!(error = %e, "failed to persist metadata");
        }
        for t in self.topics() {
            if let Err(e) = t.close() {
                tracing::error!(topic = %t.name, error = %e, "failed to close topic");
            }
        }
        self.ctx.tasks.close();
        self.ctx.tasks.wait().await;
        self.cluster().shutdown().await;
    }

    /// fsyncs every disk queue that has unsynced writes (the sync timeout).
    pub fn sync_all(&self) {
        for t in self.topics() {
            t.sync_backends();
        }
    }
}

fn data_dir(opts: &Options) -> PathBuf {
    if opts.data_path.is_empty() {
        std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."))
    } else {
        PathBuf::from(&opts.data_path)
    }
}

fn lock_data_path(dir: &Path) -> Result<File, Error> {
    let f = File::open(dir).map_err(|e| {
        Error::Lock(format!(
            "cannot open directory {} - {}",
            dir.display(),
            nsq_cli::go_errno(&e)
        ))
    })?;
    if let Err(e) = rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        let e = std::io::Error::from(e);
        return Err(Error::Lock(format!(
            "cannot flock directory {} - {} (possibly in use by another instance of nsqd)",
            dir.display(),
            nsq_cli::go_errno(&e)
        )));
    }
    Ok(f)
}

/// A limit as `nsqd.dat` keeps it; a policy this nsqd does not know (a
/// file edited by hand) is logged and read as `reject`, the safe one.
fn limit_from_meta(name: &str, max_depth: Option<u64>, policy: Option<&str>) -> Limit {
    let policy = policy.map_or(Ok(Policy::Reject), str::parse).unwrap_or_else(|e| {
        tracing::warn!(name, error = %e, "max_depth_policy in nsqd.dat not understood, using reject");
        Policy::Reject
    });
    Limit {
        max_depth: max_depth.unwrap_or(0),
        policy,
    }
}

/// A `max_age` as `nsqd.dat` keeps it (nanoseconds); a negative one (a
/// file edited by hand) is ignored.
fn duration_from_meta(ns: Option<i64>) -> Option<Duration> {
    ns.and_then(|n| u64::try_from(n).ok())
        .map(Duration::from_nanos)
}

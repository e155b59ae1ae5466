//! The nsqd instance: its topics, its connected clients, its health, the
//! data-path lock and the metadata file, and the one shutdown path.
//!
//! Lock order, everywhere: topics map → topic → channel. A channel never
//! reaches up to its topic while holding its own lock, and the topics map is
//! never held while a topic is deleted or closed.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::Arc;

use nsq_protocol::identify::ServerFeatures;
use nsq_protocol::names::{is_ephemeral, is_valid_channel_name, is_valid_topic_name};
use nsq_protocol::Limits;
use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::auth::AuthConfig;
use crate::backend::{Backend, DiskBackend, NullBackend};
use crate::client::{ClientConn, ClientId};
use crate::options::{Options, CLIENT_TIMEOUT, TLS_NOT_REQUIRED, TLS_REQUIRED};
use crate::topic::Topic;

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
    #[error("listen ({addr}) failed - {err}")]
    Listen { addr: String, err: std::io::Error },
    #[error("failed to build TLS config - {0}")]
    Tls(crate::tls::TlsError),
    #[error("failed to build client TLS config - {0}")]
    ClientTls(crate::tls::TlsError),
}

/// Topic and channel lifecycle, for the lookupd registration loop and the
/// metadata writer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    TopicCreated(String),
    TopicDeleted(String),
    ChannelCreated(String, String),
    ChannelDeleted(String, String),
}

/// State shared by every part of a running nsqd.
pub struct NsqdInner {
    pub opts: Options,
    pub features: ServerFeatures,
    pub limits: Limits,
    topics: RwLock<HashMap<String, Arc<Topic>>>,
    clients: Mutex<HashMap<ClientId, Arc<ClientConn>>>,
    health: Mutex<Option<String>>,
    pub start_time: i64,
    pub cancel: CancellationToken,
    pub tasks: TaskTracker,
    pub tcp_port: AtomicU16,
    pub http_port: AtomicU16,
    /// Bound HTTPS port (0 without an HTTPS listener); named in the plain
    /// HTTP listener's `TLS_REQUIRED` answer.
    pub https_port: AtomicU16,
    /// Server TLS (IDENTIFY `tls_v1`, HTTPS); None without `--tls-cert/key`.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// How to reach the auth servers; None without `--auth-http-address`.
    pub auth: Option<AuthConfig>,
    pub lookupd_tcp_addresses: Mutex<Vec<String>>,
    /// Poked when `lookupd_tcp_addresses` changes at run time.
    pub lookupd_changed: tokio::sync::Notify,
    /// HTTP addresses of the lookupds we are identified with.
    pub lookupd_http_addresses: Mutex<Vec<String>>,
    /// Set by the binary so `PUT /config/log_level` can change the filter.
    pub log_level_hook: Mutex<Option<Box<dyn Fn(&str) -> bool + Send + Sync>>>,
    pub log_level: Mutex<String>,
    /// `--statsd-prefix` with `%s` replaced by this node's host key and a
    /// trailing `.`, as nsqd reports it; set once the ports are bound.
    pub statsd_prefix: Mutex<String>,
    events: mpsc::UnboundedSender<Event>,
    events_rx: Mutex<Option<mpsc::UnboundedReceiver<Event>>>,
    loading: AtomicBool,
    metadata_lock: Mutex<()>,
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
        let tls = crate::tls::server_config(&opts).map_err(Error::Tls)?;
        if tls.is_none() && opts.tls_required != TLS_NOT_REQUIRED {
            return Err(Error::Config("cannot require TLS client connections without TLS key and cert".into()));
        }
        let client_tls = crate::tls::client_config(&opts).map_err(Error::ClientTls)?;
        let auth = (!opts.auth_http_addresses.is_empty()).then(|| AuthConfig {
            addresses: opts.auth_http_addresses.clone(),
            post: opts.auth_http_request_method == "post",
            connect_timeout: opts.http_client_connect_timeout,
            request_timeout: opts.http_client_request_timeout,
            tls: client_tls,
        });
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
        Ok(Arc::new(NsqdInner {
            limits: opts.limits(),
            features,
            topics: RwLock::new(HashMap::new()),
            clients: Mutex::new(HashMap::new()),
            health: Mutex::new(None),
            start_time: crate::now_unix_ns() / 1_000_000_000,
            cancel: CancellationToken::new(),
            tasks: TaskTracker::new(),
            tcp_port: AtomicU16::new(0),
            http_port: AtomicU16::new(0),
            https_port: AtomicU16::new(0),
            tls,
            auth,
            lookupd_tcp_addresses: Mutex::new(opts.lookupd_tcp_addresses.clone()),
            lookupd_changed: tokio::sync::Notify::new(),
            lookupd_http_addresses: Mutex::new(Vec::new()),
            log_level_hook: Mutex::new(None),
            log_level: Mutex::new(opts.log_level.to_lowercase()),
            statsd_prefix: Mutex::new(opts.statsd_prefix.clone()),
            events: tx,
            events_rx: Mutex::new(Some(rx)),
            loading: AtomicBool::new(false),
            metadata_lock: Mutex::new(()),
            _data_lock: Some(data_lock),
            opts,
        }))
    }

    pub fn data_dir(&self) -> PathBuf {
        data_dir(&self.opts)
    }

    pub(crate) fn new_backend(&self, name: &str) -> Box<dyn Backend> {
        if is_ephemeral(name) {
            return Box::new(NullBackend);
        }
        let opts = nsq_diskqueue::Options {
            max_bytes_per_file: self.opts.max_bytes_per_file,
            min_msg_size: nsq_protocol::message::MESSAGE_HEADER_LEN as i32,
            max_msg_size: (self.opts.max_msg_size + nsq_protocol::message::MESSAGE_HEADER_LEN as i64) as i32,
            sync_every: self.opts.sync_every,
            sync_timeout: self.opts.sync_timeout,
            // DiskBackend runs the syncs on a blocking thread, outside the
            // channel and topic locks its puts and reads are made under.
            defer_sync: true,
        };
        match DiskBackend::open(&disk_name(name), &self.data_dir(), opts) {
            Ok(b) => Box::new(b),
            Err(e) => {
                // The data path was locked at start, so this is a disk failure;
                // keep serving from memory and report unhealthy.
                tracing::error!(name, error = %e, "failed to open disk queue; overflow will be dropped");
                self.set_health(Some(e.to_string()));
                Box::new(NullBackend)
            }
        }
    }

    pub fn set_health(&self, err: Option<String>) {
        let mut h = self.health.lock();
        if *h != err {
            *h = err;
        }
    }

    /// `OK` or `NOK - <error>`.
    pub fn health(&self) -> String {
        match &*self.health.lock() {
            None => "OK".into(),
            Some(e) => format!("NOK - {e}"),
        }
    }

    pub fn is_healthy(&self) -> bool {
        self.health.lock().is_none()
    }

    pub(crate) fn emit(&self, e: Event) {
        let _ = self.events.send(e);
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
    pub fn get_or_create_topic(self: &Arc<Self>, name: &str) -> Option<Arc<Topic>> {
        if let Some(t) = self.get_topic(name) {
            return Some(t);
        }
        if self.cancel.is_cancelled() {
            return None;
        }
        let loading = self.loading.load(Ordering::Relaxed);
        let precreate = !loading && !self.lookupd_tcp_addresses.lock().is_empty();
        let topic = {
            let mut topics = self.topics.write();
            if let Some(t) = topics.get(name) {
                return Some(t.clone());
            }
            let t = Topic::new(name, self, !loading && !precreate);
            topics.insert(name.to_string(), t.clone());
            t
        };
        tracing::info!(topic = %name, "new topic");
        if !loading {
            self.emit(Event::TopicCreated(name.to_string()));
        }
        if precreate {
            let (n, t) = (self.clone(), topic.clone());
            self.tasks.spawn(async move {
                if n.lookupd_http_addresses.lock().is_empty() {
                    tracing::error!(topic = %t.name, "no available nsqlookupd to query for channels to pre-create for new topic");
                } else {
                    for c in crate::lookup::lookupd_channels(&n, &t.name).await {
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

    /// Deletes a topic and everything in it. False if it did not exist.
    pub fn delete_topic(&self, name: &str) -> bool {
        let Some(topic) = self.topics.write().remove(name) else { return false };
        self.emit(Event::TopicDeleted(name.to_string()));
        topic.delete();
        tracing::info!(topic = %name, "deleted topic");
        true
    }

    pub fn topics(&self) -> Vec<Arc<Topic>> {
        let mut v: Vec<Arc<Topic>> = self.topics.read().values().cloned().collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    pub fn add_client(&self, c: Arc<ClientConn>) {
        self.clients.lock().insert(c.id, c);
    }

    pub fn remove_client(&self, id: ClientId) {
        self.clients.lock().remove(&id);
    }

    pub fn clients(&self) -> Vec<Arc<ClientConn>> {
        self.clients.lock().values().cloned().collect()
    }

    fn metadata_path(&self) -> PathBuf {
        self.data_dir().join("nsqd.dat")
    }

    /// Restores topics, channels and paused state from `nsqd.dat`.
    pub fn load_metadata(self: &Arc<Self>) -> Result<(), Error> {
        let path = self.metadata_path();
        let data = match std::fs::read(&path) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::Metadata { file: path.display().to_string(), err: e.to_string() }),
        };
        let meta: Metadata =
            serde_json::from_slice(&data).map_err(|e| Error::Metadata { file: path.display().to_string(), err: e.to_string() })?;
        self.loading.store(true, Ordering::Relaxed);
        for t in meta.topics.unwrap_or_default() {
            if !is_valid_topic_name(&t.name) {
                tracing::warn!(topic = %t.name, "skipping creation of invalid topic");
                continue;
            }
            let Some(topic) = self.get_or_create_topic(&t.name) else { break };
            if t.paused {
                topic.set_paused(true);
            }
            for c in t.channels.unwrap_or_default() {
                if !is_valid_channel_name(&c.name) {
                    tracing::warn!(channel = %c.name, "skipping creation of invalid channel");
                    continue;
                }
                if let Ok(ch) = topic.get_or_create_channel(&c.name) {
                    if c.paused {
                        ch.with(|s| s.paused = true);
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

    /// Writes `nsqd.dat` atomically: a temp file, fsync, rename.
    pub fn persist_metadata(&self) -> Result<(), Error> {
        let _g = self.metadata_lock.lock();
        let topics: Vec<TopicMeta> = self
            .topics()
            .iter()
            .filter(|t| !t.ephemeral)
            .map(|t| {
                let (paused, chans) = t.metadata();
                let channels = (!chans.is_empty()).then(|| chans.into_iter().map(|(name, paused)| ChannelMeta { name, paused }).collect());
                TopicMeta { name: t.name.clone(), paused, channels }
            })
            .collect();
        let meta = Metadata { topics: (!topics.is_empty()).then_some(topics), version: nsq_protocol::VERSION.to_string() };
        let data = serde_json::to_vec(&meta).map_err(|e| Error::Persist(e.to_string()))?;
        let path = self.metadata_path();
        let tmp = PathBuf::from(format!("{}.{}.tmp", path.display(), rand::random::<u32>()));
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
            f.write_all(&data)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        };
        write().map_err(|e| Error::Persist(e.to_string()))
    }

    /// Stops everything, persisting what is in memory, in flight and deferred.
    pub async fn shutdown(&self) {
        self.cancel.cancel();
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
        self.tasks.close();
        self.tasks.wait().await;
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

/// nsqd's disk queue names: `<topic>` and `<topic>:<channel>`.
fn disk_name(name: &str) -> String {
    name.to_string()
}

fn lock_data_path(dir: &Path) -> Result<File, Error> {
    use std::os::unix::io::AsRawFd;
    let f = File::open(dir).map_err(|e| Error::Lock(format!("cannot open directory {} - {}", dir.display(), go_err(&e))))?;
    // SAFETY: flock on a file descriptor we own; no memory is involved.
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        return Err(Error::Lock(format!(
            "cannot flock directory {} - {} (possibly in use by another instance of nsqd)",
            dir.display(),
            go_err(&e)
        )));
    }
    Ok(f)
}

/// An OS error worded as Go prints it (lowercase strerror, no "(os error N)").
fn go_err(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EWOULDBLOCK) => "resource temporarily unavailable".into(),
        Some(libc::ENOENT) => "no such file or directory".into(),
        Some(libc::EACCES) => "permission denied".into(),
        _ => {
            let s = e.to_string();
            match s.find(" (os error") {
                Some(i) => s[..i].to_lowercase(),
                None => s,
            }
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Metadata {
    topics: Option<Vec<TopicMeta>>,
    version: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct TopicMeta {
    name: String,
    #[serde(default)]
    paused: bool,
    channels: Option<Vec<ChannelMeta>>,
}

#[derive(Debug, Serialize, Deserialize)]
struct ChannelMeta {
    name: String,
    #[serde(default)]
    paused: bool,
}

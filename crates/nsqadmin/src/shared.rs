//! The state nsqadmin's HTTP handlers and its history poller share: the
//! options as they stand (`PUT /config` swaps them), the cluster client,
//! the history, the notification sender. Never: serving or polling (the
//! daemon in `lib.rs` starts both).

use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::cluster::{ClusterInfo, Upstreams};
use crate::history::{self, History};
use crate::notify::Notifier;
use crate::options::Options;

/// State shared by the HTTP handlers and background tasks.
pub struct Shared {
    opts: RwLock<Arc<Options>>,
    log_level_hook: Mutex<Option<nsq_cli::log::LevelSetter>>,
    pub ci: ClusterInfo,
    /// For graphite: the same settings as `ci`'s, without `--http-secret`
    /// (which is for the daemons only).
    pub graphite_client: nsq_http::Client,
    pub history: History,
    pub notifier: Notifier,
    /// This machine's host name (notifications' `via`).
    pub hostname: String,
}

impl Shared {
    /// What the daemon starts with: `daemons` asks the lookupds and nsqds,
    /// `graphite_client` everything else.
    pub fn new(
        opts: Options,
        daemons: nsq_http::Client,
        graphite_client: nsq_http::Client,
        notifier: Notifier,
    ) -> Shared {
        Shared {
            history: History::new(history::INTERVAL, history::WINDOW),
            opts: RwLock::new(Arc::new(opts)),
            log_level_hook: Mutex::new(None),
            ci: ClusterInfo::new(daemons),
            graphite_client,
            notifier,
            hostname: nsq_cli::hostname().unwrap_or_default(),
        }
    }

    /// The current options (a snapshot; `PUT /config` swaps in a new one).
    pub fn options(&self) -> Arc<Options> {
        self.opts.read().clone()
    }

    pub fn update_options(&self, f: impl FnOnce(&mut Options)) {
        let mut guard = self.opts.write();
        let mut o = (**guard).clone();
        f(&mut o);
        *guard = Arc::new(o);
    }

    /// Where to find the cluster right now.
    pub fn upstreams(&self) -> Upstreams {
        let o = self.options();
        Upstreams {
            lookupds: o.nsqlookupd_http_addresses.clone(),
            nsqds: o.nsqd_http_addresses.clone(),
        }
    }

    pub fn set_log_level(&self, level: nsq_cli::LogLevel) {
        if let Some(f) = self.log_level_hook.lock().as_ref() {
            f(level);
        }
    }

    /// Lets `PUT /config/log_level` change the process's log level.
    pub fn set_log_level_hook(&self, f: nsq_cli::log::LevelSetter) {
        *self.log_level_hook.lock() = Some(f);
    }
}

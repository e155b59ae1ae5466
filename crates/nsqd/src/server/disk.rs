//! What nsqd's own files on disk share, whatever they hold (a topic's or
//! channel's disk queue, `super::backend`; a channel's run files of
//! spilled deferrals, `super::spill`): their error, the way their I/O runs
//! without stalling the async workers ([`blocking`]), and the [`Syncer`],
//! which runs their fsyncs one at a time off the callers' threads. That is
//! group commit: one fsync covers every write made before it started, so
//! with `--sync-every=1` (where nsqd answers a publish only once its
//! records are durable) the number of fsyncs follows the disk's speed, not
//! the number of publishes.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::watch;

use super::health::Health;

#[derive(Debug, Clone, thiserror::Error)]
pub enum BackendError {
    #[error("{0}")]
    Disk(String),
    /// The disk queue could not be opened when the topic or channel was created.
    #[error("disk queue unavailable: {0}")]
    Unavailable(String),
    /// The fsync that was to cover these records failed; they were discarded.
    #[error("fsync failed; the records were discarded")]
    NotDurable,
}

/// Runs disk I/O so that it never stalls the async workers: on tokio's
/// multi-threaded runtime the calling worker hands its other tasks to a
/// peer first (`block_in_place`); elsewhere (unit tests, blocking threads)
/// it just runs.
pub fn blocking<R>(f: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

/// Runs a queue's syncs (or a channel's deferred runs', `super::spill`),
/// one at a time, off the callers' threads. Asked while one runs, it runs
/// another right after: that one covers every append made meanwhile.
pub struct Syncer {
    state: Mutex<SyncState>,
    /// Bumped after every sync, worked or not: writers waiting for their
    /// records look again, and with durable reads the queue's owner
    /// refills (what the sync covered has become readable).
    done: watch::Sender<u64>,
    health: Arc<Health>,
}

#[derive(Default)]
struct SyncState {
    running: bool,
    again: bool,
}

impl Syncer {
    pub fn new(health: Arc<Health>) -> Syncer {
        Syncer {
            state: Mutex::new(SyncState::default()),
            done: watch::Sender::new(0),
            health,
        }
    }

    /// Changes after every sync, worked or not.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.done.subscribe()
    }

    /// Runs `sync` (which returns its error) now, or after the one running.
    pub fn request(self: &Arc<Self>, sync: impl Fn() -> Option<String> + Send + 'static) {
        {
            let mut st = self.state.lock();
            if st.running {
                st.again = true;
                return;
            }
            st.running = true;
        }
        let syncer = self.clone();
        let job = move || loop {
            if let Some(e) = sync() {
                tracing::error!(error = %e, "disk sync failed");
                syncer.health.set(Some(e));
            }
            syncer.done.send_modify(|n| *n += 1);
            let mut st = syncer.state.lock();
            if !std::mem::take(&mut st.again) {
                st.running = false;
                return;
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(h) => {
                h.spawn_blocking(job);
            }
            Err(_) => job(),
        }
    }
}

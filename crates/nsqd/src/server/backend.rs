//! The disk side of a topic's or channel's queue: its `DiskQueue`, where
//! the server carries out the appends and refills the core asks for.
//! `#ephemeral` names have none (the core drops their overflow); a queue
//! that would not open keeps its error and refuses every write.
//!
//! Records are nsqd's message encoding (`nsq_protocol::Message::encode`), so
//! a data directory is interchangeable with Go nsqd's.
//!
//! The queue is opened with `defer_sync`: appends and reads never wait for
//! an fsync. When the sync policy calls for one, it runs on a blocking
//! thread; appends arriving meanwhile are covered by the next one (one sync
//! in flight per queue). Appends and reads themselves run through
//! [`blocking`], which lets the calling async worker hand its other tasks
//! to a peer first; no core lock is held while they run.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use nsq_protocol::Message;
use parking_lot::{Mutex, MutexGuard};

#[derive(Debug, Clone, thiserror::Error)]
pub enum BackendError {
    #[error("{0}")]
    Disk(String),
    /// The disk queue could not be opened when the topic or channel was created.
    #[error("disk queue unavailable: {0}")]
    Unavailable(String),
}

/// Most messages written in one disk queue call.
const APPEND_BATCH: usize = 1024;

pub struct DiskBackend {
    queue: Arc<nsq_diskqueue::DiskQueue>,
    syncing: Arc<AtomicBool>,
}

fn disk(e: nsq_diskqueue::Error) -> BackendError {
    BackendError::Disk(e.to_string())
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

/// A topic's or channel's backend, as its server-side owner sees it.
pub struct Backend {
    disk: Result<Option<DiskBackend>, BackendError>,
    io: Mutex<()>,
}

impl Backend {
    /// `Ok(None)`: `#ephemeral`, nothing kept. `Err`: the disk queue would
    /// not open.
    pub fn new(disk: Result<Option<DiskBackend>, BackendError>) -> Backend {
        Backend {
            disk,
            io: Mutex::new(()),
        }
    }

    /// Held while disk work is done and its result reported back to the
    /// core, and by shutdown: records a refill took off the disk are back in
    /// the core before the core is closed, never lost between the two.
    pub fn lock_io(&self) -> MutexGuard<'_, ()> {
        self.io.lock()
    }

    fn disk(&self) -> Option<&DiskBackend> {
        self.disk.as_ref().ok().and_then(|d| d.as_ref())
    }

    /// Whether a read may return a record (see [`DiskBackend::has_unread`]).
    pub fn has_unread(&self) -> bool {
        self.disk().is_some_and(|d| d.has_unread())
    }

    pub fn append(&self, msgs: &[Message]) -> Result<(), BackendError> {
        match &self.disk {
            Ok(Some(d)) => d.append(msgs),
            Ok(None) => Ok(()),
            Err(e) => Err(e.clone()),
        }
    }

    pub fn read(&self, max: usize) -> (Vec<Message>, bool) {
        self.disk()
            .map_or_else(|| (Vec::new(), false), |d| d.read(max))
    }

    pub fn depth(&self) -> i64 {
        self.disk().map_or(0, |d| d.depth())
    }

    pub fn empty(&self) -> Result<(), BackendError> {
        self.disk().map_or(Ok(()), |d| d.empty())
    }

    /// Clean shutdown: `msgs` (what memory held) written, then closed.
    pub fn close_with(&self, msgs: &[Message]) -> Result<(), BackendError> {
        match self.disk() {
            Some(d) => {
                d.append(msgs)?;
                d.close()
            }
            None => Ok(()),
        }
    }

    pub fn delete(&self) -> Result<(), BackendError> {
        self.disk().map_or(Ok(()), |d| d.delete())
    }

    pub fn sync_if_needed(&self) -> Result<(), BackendError> {
        self.disk().map_or(Ok(()), |d| d.sync_if_needed())
    }
}

impl DiskBackend {
    /// nsqd's disk queue names: `<topic>` and `<topic>:<channel>`.
    pub fn open(
        name: &str,
        data_path: &std::path::Path,
        opts: nsq_diskqueue::Options,
    ) -> Result<DiskBackend, BackendError> {
        let queue = nsq_diskqueue::DiskQueue::open(name, data_path, opts).map_err(disk)?;
        Ok(DiskBackend {
            queue: Arc::new(queue),
            syncing: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Appends messages in order, in batches (each encoded into one buffer
    /// and written at once). Batches are bounded so that writing a large
    /// channel out at shutdown does not copy all of it at once.
    pub fn append(&self, msgs: &[Message]) -> Result<(), BackendError> {
        let mut buf = BytesMut::new();
        let mut ends = Vec::new();
        for batch in msgs.chunks(APPEND_BATCH) {
            buf.clear();
            buf.reserve(batch.iter().map(Message::encoded_len).sum());
            ends.clear();
            for m in batch {
                m.encode(&mut buf);
                ends.push(buf.len());
            }
            let mut start = 0;
            let records: Vec<&[u8]> = ends
                .iter()
                .map(|&end| {
                    let r = &buf[start..end];
                    start = end;
                    r
                })
                .collect();
            let r = blocking(|| self.queue.put_batch(&records)).map_err(disk);
            self.kick_sync();
            r?;
        }
        Ok(())
    }

    /// Up to `max` messages, oldest first, and whether more are unread. A
    /// record that does not decode is logged and skipped, as nsqd does.
    pub fn read(&self, max: usize) -> (Vec<Message>, bool) {
        let mut records = Vec::with_capacity(max.min(1024));
        if self.queue.has_unread() {
            // What the reader has read ahead costs no syscall; only a refill
            // of its buffer (one per 64 KiB of records) goes to the blocking side.
            let mut res = self.queue.read_batch(max, &mut records, true);
            if res.is_ok() && records.len() < max && self.queue.has_unread() {
                let more = max - records.len();
                res = blocking(|| self.queue.read_batch(more, &mut records, false));
            }
            if let Err(e) = res {
                tracing::error!(error = %e, "disk queue read failed");
            }
            self.kick_sync();
        }
        let msgs = records
            .into_iter()
            .filter_map(|data: Bytes| match Message::decode(data) {
                Ok(m) => Some(m),
                Err(e) => {
                    tracing::error!(error = %e, "failed to decode message from disk queue, skipped");
                    None
                }
            })
            .collect();
        (msgs, self.queue.has_unread())
    }

    pub fn depth(&self) -> i64 {
        self.queue.depth()
    }

    /// Whether a read may return a record. Not `depth() > 0`: a disk queue
    /// restored from a crash can under-count, and its records must still flow.
    pub fn has_unread(&self) -> bool {
        self.queue.has_unread()
    }

    pub fn empty(&self) -> Result<(), BackendError> {
        blocking(|| self.queue.empty()).map_err(disk)
    }

    /// Flushes and keeps the contents for the next start.
    pub fn close(&self) -> Result<(), BackendError> {
        blocking(|| self.queue.close()).map_err(disk)
    }

    /// Removes the contents for good.
    pub fn delete(&self) -> Result<(), BackendError> {
        blocking(|| self.queue.delete()).map_err(disk)
    }

    /// fsyncs if anything changed since the last sync (`--sync-timeout`).
    pub fn sync_if_needed(&self) -> Result<(), BackendError> {
        if self.queue.needs_sync() {
            blocking(|| self.queue.sync()).map_err(disk)
        } else {
            Ok(())
        }
    }

    /// Starts a sync on a blocking thread if one is due and none is running.
    fn kick_sync(&self) {
        if !self.queue.sync_due() || self.syncing.swap(true, Ordering::AcqRel) {
            return;
        }
        let (queue, syncing) = (self.queue.clone(), self.syncing.clone());
        let job = move || loop {
            if let Err(e) = queue.sync() {
                if !matches!(e, nsq_diskqueue::Error::Closed) {
                    tracing::error!(error = %e, "disk queue sync failed");
                }
            }
            syncing.store(false, Ordering::Release);
            // an append may have found the flag still set just before we cleared it
            if !queue.sync_due() || syncing.swap(true, Ordering::AcqRel) {
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

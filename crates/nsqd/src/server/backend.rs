//! Where a topic's or channel's messages go once its memory queue is full:
//! the disk queue for normal names, nowhere for `#ephemeral` ones.
//!
//! Records are nsqd's message encoding (`nsq_protocol::Message::encode`), so
//! a data directory is interchangeable with Go nsqd's.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use nsq_protocol::Message;

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("{0}")]
    Disk(String),
}

/// An overflow queue of encoded messages.
pub trait Backend: Send + Sync {
    fn put(&self, data: &[u8]) -> Result<(), BackendError>;
    /// Several records at once (an MPUB's overflow): one write, not one per record.
    fn put_batch(&self, records: &[&[u8]]) -> Result<(), BackendError> {
        records.iter().try_for_each(|r| self.put(r))
    }
    /// The next record, if any is ready now.
    fn read(&self) -> Option<Bytes>;
    /// Up to `max` records at once, appended to `out` (a channel refilling
    /// its memory queue for the credit its clients have): one trip to the
    /// blocking side for the lot.
    fn read_batch(&self, max: usize, out: &mut Vec<Bytes>) {
        for _ in 0..max {
            match self.read() {
                Some(r) => out.push(r),
                None => break,
            }
        }
    }
    fn depth(&self) -> i64;
    /// Whether a read may return a record. Not `depth() > 0`: a disk queue
    /// restored from a crash can under-count, and its records must still flow.
    fn has_data(&self) -> bool {
        self.depth() > 0
    }
    fn empty(&self) -> Result<(), BackendError>;
    /// Flush and keep the contents for the next start.
    fn close(&self) -> Result<(), BackendError>;
    /// Remove the contents for good.
    fn delete(&self) -> Result<(), BackendError>;
    /// fsync if anything changed since the last sync.
    fn sync_if_needed(&self) -> Result<(), BackendError> {
        Ok(())
    }
}

/// Writes a message to a backend in nsqd's record format.
pub fn put_message(backend: &dyn Backend, msg: &Message) -> Result<(), BackendError> {
    let mut buf = BytesMut::with_capacity(msg.encoded_len());
    msg.encode(&mut buf);
    backend.put(&buf)
}

/// Writes messages to a backend in one batch (encoded into one buffer).
pub fn put_messages<'a>(backend: &dyn Backend, msgs: impl IntoIterator<Item = &'a Message>) -> Result<(), BackendError> {
    let mut buf = BytesMut::new();
    let mut ends = Vec::new();
    for m in msgs {
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
    match records.len() {
        0 => Ok(()),
        _ => backend.put_batch(&records),
    }
}

/// The "disk" of an ephemeral topic or channel: accepts and forgets.
pub struct NullBackend;

impl Backend for NullBackend {
    fn put(&self, _data: &[u8]) -> Result<(), BackendError> {
        Ok(())
    }
    fn read(&self) -> Option<Bytes> {
        None
    }
    fn depth(&self) -> i64 {
        0
    }
    fn empty(&self) -> Result<(), BackendError> {
        Ok(())
    }
    fn close(&self) -> Result<(), BackendError> {
        Ok(())
    }
    fn delete(&self) -> Result<(), BackendError> {
        Ok(())
    }
}

/// A topic's or channel's disk queue (go-diskqueue's format).
///
/// The queue is opened with `defer_sync`: puts and reads, made under the
/// channel's or topic's lock, never wait for an fsync. When the sync policy
/// calls for one, it runs on a blocking thread; puts arriving meanwhile
/// are covered by the next one (one sync in flight per queue).
pub struct DiskBackend {
    queue: Arc<nsq_diskqueue::DiskQueue>,
    syncing: Arc<AtomicBool>,
}

impl DiskBackend {
    pub fn open(name: &str, data_path: &std::path::Path, opts: nsq_diskqueue::Options) -> Result<DiskBackend, BackendError> {
        let queue = nsq_diskqueue::DiskQueue::open(name, data_path, opts).map_err(|e| BackendError::Disk(e.to_string()))?;
        Ok(DiskBackend { queue: Arc::new(queue), syncing: Arc::new(AtomicBool::new(false)) })
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
            // a put may have found the flag still set just before we cleared it
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

fn disk(e: nsq_diskqueue::Error) -> BackendError {
    BackendError::Disk(e.to_string())
}

/// Runs disk I/O so that it never stalls the async workers: on tokio's
/// multi-threaded runtime the calling worker hands its other tasks to a
/// peer first (`block_in_place`); elsewhere (unit tests, blocking threads)
/// it just runs.
pub fn blocking<R>(f: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}

impl Backend for DiskBackend {
    fn put(&self, data: &[u8]) -> Result<(), BackendError> {
        let r = blocking(|| self.queue.put(data)).map_err(disk);
        self.kick_sync();
        r
    }
    fn put_batch(&self, records: &[&[u8]]) -> Result<(), BackendError> {
        let r = blocking(|| self.queue.put_batch(records)).map_err(disk);
        self.kick_sync();
        r
    }
    fn read(&self) -> Option<Bytes> {
        let mut out = Vec::with_capacity(1);
        self.read_batch(1, &mut out);
        out.pop()
    }
    fn read_batch(&self, max: usize, out: &mut Vec<Bytes>) {
        if !self.queue.has_unread() {
            return;
        }
        // What the reader has read ahead costs no syscall; only a refill of
        // its buffer (one per 64 KiB of records) goes to the blocking side.
        let mut res = self.queue.read_batch(max, out, true);
        if res.is_ok() && out.len() < max && self.queue.has_unread() {
            let more = max - out.len();
            res = blocking(|| self.queue.read_batch(more, out, false));
        }
        if let Err(e) = res {
            tracing::error!(error = %e, "disk queue read failed");
        }
        self.kick_sync();
    }
    fn depth(&self) -> i64 {
        self.queue.depth()
    }
    fn has_data(&self) -> bool {
        self.queue.has_unread()
    }
    fn empty(&self) -> Result<(), BackendError> {
        blocking(|| self.queue.empty()).map_err(disk)
    }
    fn close(&self) -> Result<(), BackendError> {
        blocking(|| self.queue.close()).map_err(disk)
    }
    fn delete(&self) -> Result<(), BackendError> {
        blocking(|| self.queue.delete()).map_err(disk)
    }
    fn sync_if_needed(&self) -> Result<(), BackendError> {
        if self.queue.needs_sync() {
            blocking(|| self.queue.sync()).map_err(disk)
        } else {
            Ok(())
        }
    }
}

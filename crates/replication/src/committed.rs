//! Reading a group's committed entries back, for nsqd: a member that gains
//! a group redelivers what its channels have not finished, and reads the
//! message batches from the log, which is the topic's store. Owns: which
//! entries may be read (committed, not purged), the bounded chunks they
//! come in, and doing the disk reads off the async workers. Never: what a
//! payload means, or the log's layout (`log::read` finds and checks the
//! records).
//!
//! A read locks the log only to locate one chunk's records in one segment
//! (`SegmentLog::span`); the bytes are read and checked on a blocking
//! thread with the lock released, so a large range never holds up the
//! appends of the hot path. Blank and membership entries (Raft's own) are
//! skipped: a chunk carries payloads only, each with its log index.

use std::sync::Arc;

use bytes::Bytes;
use openraft::{EntryPayload, LogId};
use parking_lot::Mutex;
use tokio::sync::watch;

use crate::log::read::Span;
use crate::log::{LogError, SegmentLog};
use crate::NodeId;

/// Reads a group's committed entries; cheap to clone, one per reader.
#[derive(Clone)]
pub struct CommittedLog {
    log: Arc<Mutex<SegmentLog>>,
    /// The committed index the log storage has saved: nothing above it is
    /// read (it may still be truncated).
    committed: watch::Receiver<Option<u64>>,
}

/// A chunk of committed entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Chunk {
    /// Each entry's log index and payload, in log order (Raft's blank and
    /// membership entries left out).
    pub entries: Vec<(u64, Bytes)>,
    /// The index the next read starts at. Equal to the `start` asked for
    /// when nothing in the range is committed yet.
    pub next: u64,
}

/// Why a read failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("raft log index {start} is purged (the log keeps only indexes above {purged})")]
    Purged { start: u64, purged: u64 },
    #[error(transparent)]
    Log(#[from] LogError),
    #[error("raft log read did not finish: {0}")]
    Task(String),
}

impl CommittedLog {
    pub(crate) fn new(
        log: Arc<Mutex<SegmentLog>>,
        committed: watch::Receiver<Option<u64>>,
    ) -> CommittedLog {
        CommittedLog { log, committed }
    }

    /// The last committed index this member has saved (None: nothing).
    pub fn committed(&self) -> Option<u64> {
        *self.committed.borrow()
    }

    /// The last purged index (None: nothing purged): reads must start
    /// above it.
    pub fn purged(&self) -> Option<u64> {
        self.log.lock().purged().map(|p| p.index)
    }

    /// The log id (term and leader with the index) of the committed entry
    /// at `index`; None when it is not committed yet.
    pub async fn log_id(&self, index: u64) -> Result<Option<LogId<NodeId>>, ReadError> {
        if self.committed().is_none_or(|c| index > c) {
            return Ok(None);
        }
        let span = {
            let log = self.log.lock();
            if let Some(p) = log.purged().filter(|p| index <= p.index) {
                return Err(ReadError::Purged {
                    start: index,
                    purged: p.index,
                });
            }
            log.span(index, index + 1, 0)?
        };
        let Some(span) = span else { return Ok(None) };
        let read = tokio::task::spawn_blocking(move || span.read())
            .await
            .map_err(|e| ReadError::Task(e.to_string()))??;
        Ok(read.first().map(|e| e.log_id))
    }

    /// The committed entries of `start..end`, from `start`, in one chunk of
    /// at most about `max_bytes` of records (always at least the entry at
    /// `start`, however large) within one segment file. Read on until
    /// [`Chunk::next`] reaches `end` (or the committed index + 1). A
    /// `start` at or below the purge point is [`ReadError::Purged`].
    pub async fn read(&self, start: u64, end: u64, max_bytes: usize) -> Result<Chunk, ReadError> {
        let Some(span) = self.locate(start, end, max_bytes)? else {
            return Ok(Chunk {
                entries: Vec::new(),
                next: start,
            });
        };
        let next = span.next();
        let read = tokio::task::spawn_blocking(move || span.read())
            .await
            .map_err(|e| ReadError::Task(e.to_string()))??;
        Ok(chunk(read, next))
    }

    /// [`CommittedLog::read`] on the calling thread, for a caller that is
    /// already where blocking is allowed (a queue's refill, which nsqd runs
    /// through `block_in_place`).
    pub fn read_here(&self, start: u64, end: u64, max_bytes: usize) -> Result<Chunk, ReadError> {
        let Some(span) = self.locate(start, end, max_bytes)? else {
            return Ok(Chunk {
                entries: Vec::new(),
                next: start,
            });
        };
        let next = span.next();
        Ok(chunk(span.read()?, next))
    }

    /// Where the records of a read are, found under the log's lock.
    fn locate(&self, start: u64, end: u64, max_bytes: usize) -> Result<Option<Span>, ReadError> {
        let end = end.min(self.committed().map_or(0, |c| c.saturating_add(1)));
        let log = self.log.lock();
        if let Some(p) = log.purged().filter(|p| start <= p.index) {
            return Err(ReadError::Purged {
                start,
                purged: p.index,
            });
        }
        Ok(log.span(start, end, max_bytes as u64)?)
    }
}

/// The payloads of the entries read, Raft's own left out.
fn chunk(read: Vec<crate::Entry>, next: u64) -> Chunk {
    let entries = read
        .into_iter()
        .filter_map(|e| match e.payload {
            // the cluster map's updates are the member's, never the subscriber's
            EntryPayload::Normal(p) if crate::cluster_map::is_map_entry(&p.0) => None,
            EntryPayload::Normal(p) => Some((e.log_id.index, p.0)),
            EntryPayload::Blank | EntryPayload::Membership(_) => None,
        })
        .collect();
    Chunk { entries, next }
}

#[cfg(test)]
#[path = "committed_tests.rs"]
mod tests;

//! openraft's log storage on a group's [`SegmentLog`]: reading entries,
//! appending with group commit, truncating and purging, the vote written
//! durably beside the segments and the committed index lazily. Never: the
//! state machine (`machine.rs`) or the network.
//!
//! Appends write on the calling task (to the page cache, as nsqd's disk
//! queues do) and complete through the log's sync thread; everything that
//! fsyncs before it returns — a vote, a truncation, a purge — runs on a
//! blocking thread. The committed index is kept in memory and saved by its
//! own thread (`log::lazy`), off openraft's path: it advances at every
//! commit, and a stale one after a crash only means applying less at
//! start.

// openraft's storage traits return its StorageError (224 bytes); the
// helpers that build it for them return it too.
#![allow(clippy::result_large_err)]

use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{AnyError, LogId, OptionalSend, StorageIOError, Vote};
use parking_lot::Mutex;
use tokio::sync::watch;

use crate::committed::CommittedLog;
use crate::log::lazy::LazyFile;
use crate::log::{meta, write_purged, LogError, LogOptions, SegmentLog};
use crate::{Entry, NodeId, StorageError, TypeConfig};

const VOTE: &str = "vote";
const COMMITTED: &str = "committed";

fn write_err(e: impl Into<AnyError>) -> StorageError {
    StorageIOError::write_logs(e).into()
}

fn read_err(e: impl Into<AnyError>) -> StorageError {
    StorageIOError::read_logs(e).into()
}

fn as_any(e: LogError) -> AnyError {
    AnyError::new(&e)
}

/// Runs blocking file work off the async workers.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StorageError> + Send + 'static,
) -> Result<T, StorageError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| write_err(AnyError::error(e)))?
}

/// A group's log storage (openraft's `RaftLogStorage`).
pub struct LogStore {
    dir: PathBuf,
    log: Arc<Mutex<SegmentLog>>,
    vote: Option<Vote<NodeId>>,
    committed: Option<LogId<NodeId>>,
    /// The committed index as openraft last saved it, for whoever reports
    /// or reads committed entries: openraft's metrics carry no committed
    /// index, and this member's own (leader or follower) is the one it
    /// saves here.
    committed_index: watch::Sender<Option<u64>>,
    committed_file: LazyFile<Option<LogId<NodeId>>>,
}

/// A reader of a group's log, one per replication task.
#[derive(Clone)]
pub struct LogReader {
    log: Arc<Mutex<SegmentLog>>,
}

impl LogStore {
    /// Opens the log storage in `dir` (recovering the log, reading the
    /// vote and committed index).
    pub fn open(dir: &Path, opts: LogOptions) -> Result<LogStore, LogError> {
        let log = SegmentLog::open(dir, opts)?;
        let io = |err: io::Error| LogError::Io {
            dir: dir.to_path_buf(),
            err,
        };
        let vote = meta::read(dir, VOTE).map_err(io)?;
        let committed = meta::read::<Option<LogId<NodeId>>>(dir, COMMITTED)
            .map_err(io)?
            .flatten();
        Ok(LogStore {
            dir: dir.to_path_buf(),
            log: Arc::new(Mutex::new(log)),
            vote,
            committed_index: watch::Sender::new(committed.map(|c| c.index)),
            committed,
            committed_file: LazyFile::new(dir, COMMITTED).map_err(io)?,
        })
    }

    /// Follows the committed index openraft has saved here (None before
    /// the first commit).
    pub fn committed_index(&self) -> watch::Receiver<Option<u64>> {
        self.committed_index.subscribe()
    }

    /// Reads the committed entries back (for nsqd, not openraft: bounded
    /// chunks, the log's lock held only to find them).
    pub fn committed_log(&self) -> CommittedLog {
        CommittedLog::new(self.log.clone(), self.committed_index())
    }
}

fn bounds(range: &impl RangeBounds<u64>) -> (u64, u64) {
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.saturating_add(1),
        Bound::Excluded(&e) => e,
        Bound::Unbounded => u64::MAX,
    };
    (start, end)
}

fn read_range(
    log: &Mutex<SegmentLog>,
    range: impl RangeBounds<u64>,
) -> Result<Vec<Entry>, StorageError> {
    let (start, end) = bounds(&range);
    log.lock()
        .entries(start, end)
        .map_err(|e| read_err(as_any(e)))
}

impl RaftLogReader<TypeConfig> for LogReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        read_range(&self.log, range)
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        read_range(&self.log, range)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogReader;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let log = self.log.lock();
        Ok(LogState {
            last_purged_log_id: log.purged(),
            last_log_id: log.last(),
        })
    }

    async fn get_log_reader(&mut self) -> LogReader {
        LogReader {
            log: self.log.clone(),
        }
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError> {
        let dir = self.dir.clone();
        let v = *vote;
        blocking(move || {
            meta::write(&dir, VOTE, &v).map_err(|e| StorageIOError::write_vote(&e).into())
        })
        .await?;
        self.vote = Some(v);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError> {
        Ok(self.vote)
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<NodeId>>,
    ) -> Result<(), StorageError> {
        if committed == self.committed {
            return Ok(());
        }
        self.committed_file.set(committed);
        self.committed = committed;
        self.committed_index
            .send_replace(committed.map(|c| c.index));
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, StorageError> {
        Ok(self.committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        self.log
            .lock()
            .append(&entries, Box::new(move |r| callback.log_io_completed(r)))
            .map_err(|e| write_err(as_any(e)))
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError> {
        let log = self.log.clone();
        blocking(move || {
            log.lock()
                .truncate(log_id.index)
                .map_err(|e| write_err(as_any(e)))
        })
        .await
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError> {
        let log = self.log.clone();
        blocking(move || {
            // The marker's fsyncs and the files' removal without the log's
            // lock, so appends (the group commit) go on meanwhile: a purge
            // of a group's old segments held every publish for as long
            // (hundreds of milliseconds on a busy disk). Only forgetting
            // the segments here takes it.
            let dir = {
                let l = log.lock();
                if !l.purges(log_id) {
                    return Ok(());
                }
                l.dir().to_path_buf()
            };
            write_purged(&dir, log_id).map_err(|e| write_err(as_any(e)))?;
            let files = log.lock().forget(log_id);
            for path in files {
                std::fs::remove_file(&path).map_err(|err| {
                    write_err(as_any(LogError::Io {
                        dir: dir.clone(),
                        err,
                    }))
                })?;
            }
            Ok(())
        })
        .await
    }
}

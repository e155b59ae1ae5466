//! A group's state machine: what is applied (the last applied log id and
//! the membership) and a subscriber that receives every applied entry, in
//! log order. Never: interpreting payloads (nsqd's core does), or holding
//! the log's contents — the log is the store, so a snapshot holds only
//! what this machine holds.
//!
//! The machine itself is not written on every apply: after a restart it
//! starts from its last snapshot (or from nothing) and openraft applies the
//! committed entries again from the log, so the subscriber sees them again
//! (at-least-once, by log index: a subscriber that keeps its own position
//! skips what it already has). A snapshot is written durably
//! (`log/meta.rs`) when built or installed.

// openraft's storage traits return its StorageError (224 bytes); the
// helpers that build it for them return it too.
#![allow(clippy::result_large_err)]

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use openraft::storage::RaftStateMachine;
use openraft::{
    EntryPayload, LogId, RaftSnapshotBuilder, Snapshot, SnapshotMeta, StorageIOError,
    StoredMembership,
};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::log::meta;
use crate::{Entry, Member, NodeId, StorageError, TypeConfig};

const SNAPSHOT: &str = "snapshot";

/// What the subscriber of a group is handed, in log order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// A committed entry with a payload, applied at `log_id`.
    Entry {
        log_id: LogId<NodeId>,
        payload: bytes::Bytes,
    },
    /// A snapshot from the leader replaced everything up to `last` (this
    /// member was behind a purged part of the log).
    Snapshot { last: Option<LogId<NodeId>> },
}

/// What the machine holds, and what a snapshot of it holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct State {
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, Member>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta<NodeId, Member>,
    data: Vec<u8>,
}

/// A group's state machine (openraft's `RaftStateMachine`).
pub struct StateMachine {
    dir: PathBuf,
    state: State,
    /// The current snapshot, shared with the builders openraft runs.
    snapshot: Arc<Mutex<Option<StoredSnapshot>>>,
    subscriber: mpsc::Sender<Applied>,
    /// Entries up to here are the ones openraft applies again at start,
    /// from this member's own log, before the member is running: they are
    /// not handed over (a subscriber could not be reading yet, and a full
    /// subscription would hold the start up for good); the subscriber
    /// reads them from the log (`Group::replayed`).
    replay_to: Option<u64>,
    builds: u64,
}

/// Writes `stored` durably and makes it the current snapshot.
fn save(
    dir: &Path,
    current: &Mutex<Option<StoredSnapshot>>,
    stored: StoredSnapshot,
) -> Result<(), StorageError> {
    meta::write(dir, SNAPSHOT, &stored)
        .map_err(|e| StorageIOError::write_snapshot(Some(stored.meta.signature()), &e))?;
    *current.lock() = Some(stored);
    Ok(())
}

fn sm_err(e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::write_state_machine(&e).into()
}

impl StateMachine {
    /// The machine of the group in `dir` (from its last snapshot), and the
    /// receiving end of its subscription. A full subscription holds up
    /// applying: the subscriber sets the pace. Entries up to `replay_to`
    /// (the committed index the log had at start) are applied without
    /// being handed over.
    pub fn open(
        dir: &Path,
        capacity: usize,
        replay_to: Option<u64>,
    ) -> std::io::Result<(StateMachine, mpsc::Receiver<Applied>)> {
        std::fs::create_dir_all(dir)?;
        let snapshot: Option<StoredSnapshot> = meta::read(dir, SNAPSHOT)?;
        let state = match &snapshot {
            Some(s) => postcard::from_bytes(&s.data)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?,
            None => State::default(),
        };
        let (tx, rx) = mpsc::channel(capacity.max(1));
        Ok((
            StateMachine {
                dir: dir.to_path_buf(),
                state,
                snapshot: Arc::new(Mutex::new(snapshot)),
                subscriber: tx,
                replay_to,
                builds: 0,
            },
            rx,
        ))
    }

    async fn hand(&self, applied: Applied) {
        // A subscriber that went away (nsqd is shutting the group down)
        // loses nothing: the entries stay in the log.
        let _ = self.subscriber.send(applied).await;
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, Member>), StorageError> {
        Ok((self.state.last_applied, self.state.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<u64>, StorageError>
    where
        I: IntoIterator<Item = Entry> + openraft::OptionalSend,
        I::IntoIter: openraft::OptionalSend,
    {
        let mut out = Vec::new();
        for e in entries {
            self.state.last_applied = Some(e.log_id);
            match e.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(_) if self.replay_to >= Some(e.log_id.index) => {}
                EntryPayload::Normal(p) => {
                    self.hand(Applied::Entry {
                        log_id: e.log_id,
                        payload: p.0,
                    })
                    .await
                }
                EntryPayload::Membership(m) => {
                    self.state.membership = StoredMembership::new(Some(e.log_id), m);
                }
            }
            out.push(e.log_id.index);
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        self.builds += 1;
        SnapshotBuilder {
            dir: self.dir.clone(),
            state: self.state.clone(),
            current: self.snapshot.clone(),
            builds: self.builds,
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, Member>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let data = snapshot.into_inner();
        let state: State = postcard::from_bytes(&data)
            .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), &e))?;
        save(
            &self.dir,
            &self.snapshot,
            StoredSnapshot {
                meta: meta.clone(),
                data,
            },
        )?;
        self.state = state;
        self.hand(Applied::Snapshot {
            last: meta.last_log_id,
        })
        .await;
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        Ok(self.snapshot.lock().as_ref().map(|s| Snapshot {
            meta: s.meta.clone(),
            snapshot: Box::new(Cursor::new(s.data.clone())),
        }))
    }
}

/// Builds a snapshot of the machine as it was when asked, off the machine
/// (openraft runs it in the background).
pub struct SnapshotBuilder {
    dir: PathBuf,
    state: State,
    current: Arc<Mutex<Option<StoredSnapshot>>>,
    builds: u64,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let data = postcard::to_stdvec(&self.state).map_err(sm_err)?;
        let snapshot_id = match self.state.last_applied {
            Some(l) => format!(
                "{}-{}-{}-{}",
                l.leader_id.term, l.leader_id.node_id, l.index, self.builds
            ),
            None => format!("--{}", self.builds),
        };
        let meta = SnapshotMeta {
            last_log_id: self.state.last_applied,
            last_membership: self.state.membership.clone(),
            snapshot_id,
        };
        let stored = StoredSnapshot {
            meta: meta.clone(),
            data: data.clone(),
        };
        save(&self.dir, &self.current, stored)?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

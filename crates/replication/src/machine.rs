//! A group's state machine: what is applied (the last applied log id and
//! the membership) and a subscriber that receives every applied entry, in
//! log order. Never: interpreting payloads (nsqd's core does), or holding
//! the log's contents — the log is the store.
//!
//! **Snapshots** are asked for by the subscriber, never by a policy of
//! openraft's: it hands over an opaque image of what its entries made
//! (nsqd's topics, channels and progress, as of its own last applied
//! entry) and the index the snapshot may claim, at most that entry and
//! below every entry whose payload it still needs (a message batch not
//! yet finished). The snapshot holds that image with this machine's
//! membership; openraft then purges the log up to it, and sends it to a
//! member behind the purge point, which hands the image to its subscriber
//! (`Applied::Snapshot`). Entries after the claimed index are applied
//! again over an image that already has some of them: the subscriber's
//! changes are idempotent by log index.
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
    /// member was behind a purged part of the log): `image` is what the
    /// leader's subscriber handed over when it was taken.
    Snapshot {
        last: Option<LogId<NodeId>>,
        image: bytes::Bytes,
    },
}

/// A snapshot the subscriber asked for: the log id it claims and the image.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub last: LogId<NodeId>,
    pub image: Vec<u8>,
}

/// Where a group's next snapshot build takes its request from.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    pub next: Option<Request>,
    /// The subscriber has asked for a snapshot since the machine opened:
    /// from then on a build it did not ask for claims nothing new.
    pub asked: bool,
}

pub(crate) type Requests = Arc<Mutex<Slot>>;

/// What the machine holds, and what a snapshot of it holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct State {
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, Member>,
}

/// A snapshot's data: the machine as of the claimed log id, and the
/// subscriber's image.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Data {
    state: State,
    image: Vec<u8>,
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
    requests: Requests,
    /// The cluster map, which group 0's map updates change
    /// (`cluster_map.rs`): applied here, never handed to the subscriber.
    maps: Option<crate::maps::Maps>,
}

/// Writes `stored` durably and makes it the current snapshot.
/// Whether it was saved: never over a newer snapshot (a build that ends
/// after a newer snapshot was installed from the leader, which purged the
/// log up to it, must not take its place).
fn save(
    dir: &Path,
    current: &Mutex<Option<StoredSnapshot>>,
    stored: StoredSnapshot,
) -> Result<bool, StorageError> {
    let mut current = current.lock();
    if current
        .as_ref()
        .is_some_and(|c| c.meta.last_log_id >= stored.meta.last_log_id)
    {
        return Ok(false);
    }
    meta::write(dir, SNAPSHOT, &stored)
        .map_err(|e| StorageIOError::write_snapshot(Some(stored.meta.signature()), &e))?;
    *current = Some(stored);
    Ok(true)
}

/// [`save`] on a blocking thread: its fsyncs would otherwise hold a
/// runtime worker, and every task waiting on it, for their length.
async fn save_off(
    dir: PathBuf,
    current: Arc<Mutex<Option<StoredSnapshot>>>,
    stored: StoredSnapshot,
) -> Result<bool, StorageError> {
    tokio::task::spawn_blocking(move || save(&dir, &current, stored))
        .await
        .map_err(sm_err)?
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
            Some(s) => decode(&s.data)?.state,
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
                requests: Requests::default(),
                maps: None,
            },
            rx,
        ))
    }

    /// The image of the snapshot the machine started from, and the index
    /// it claims.
    pub fn image(&self) -> std::io::Result<Option<(u64, bytes::Bytes)>> {
        let current = self.snapshot.lock();
        let Some(s) = current.as_ref() else {
            return Ok(None);
        };
        let Some(last) = s.meta.last_log_id else {
            return Ok(None);
        };
        Ok(Some((last.index, decode(&s.data)?.image.into())))
    }

    /// Applies the cluster map's updates committed in this group to
    /// `maps` (group 0's machine).
    pub fn with_maps(mut self, maps: crate::maps::Maps) -> StateMachine {
        self.maps = Some(maps);
        self
    }

    pub(crate) fn requests(&self) -> Requests {
        self.requests.clone()
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
                // Applied at start too: an update already in the map is
                // refused as stale and changes nothing.
                EntryPayload::Normal(p) if crate::cluster_map::is_map_entry(&p.0) => {
                    match (&self.maps, crate::cluster_map::Update::decode(&p.0)) {
                        (Some(maps), Some(u)) => maps.apply(e.log_id.index, &u),
                        (Some(_), None) => tracing::error!(
                            index = e.log_id.index,
                            "REPLICATION: a cluster map update that does not decode"
                        ),
                        (None, _) => {}
                    }
                }
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
        let (request, asked) = {
            let mut slot = self.requests.lock();
            (slot.next.take(), slot.asked)
        };
        SnapshotBuilder {
            dir: self.dir.clone(),
            state: self.state.clone(),
            request,
            asked,
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
        let Data { state, image } =
            decode(&data).map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), &e))?;
        let saved = save_off(
            self.dir.clone(),
            self.snapshot.clone(),
            StoredSnapshot {
                meta: meta.clone(),
                data,
            },
        )
        .await?;
        if !saved {
            tracing::warn!(
                snapshot = %meta.signature().snapshot_id,
                "REPLICATION: snapshot from the leader not newer than this member's; kept this one"
            );
            return Ok(());
        }
        self.state = state;
        self.hand(Applied::Snapshot {
            last: meta.last_log_id,
            image: image.into(),
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

fn decode(data: &[u8]) -> std::io::Result<Data> {
    postcard::from_bytes(data).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Builds the snapshot the subscriber asked for, off the machine (openraft
/// runs it in the background). A build nobody asked for, once the
/// subscriber has asked for one (a trigger whose request an earlier build
/// took), answers the current snapshot. On a machine whose subscriber has
/// not asked (openraft's storage suite; a start that finds the log purged
/// and the snapshot missing) it holds the machine as it is, with an empty
/// image. A request that claims no more than the current snapshot answers
/// the current one.
pub struct SnapshotBuilder {
    dir: PathBuf,
    state: State,
    request: Option<Request>,
    asked: bool,
    current: Arc<Mutex<Option<StoredSnapshot>>>,
    builds: u64,
}

impl SnapshotBuilder {
    fn current_or_nothing(&self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let current = self.current.lock();
        let (meta, data) = match current.as_ref() {
            Some(s) => (s.meta.clone(), s.data.clone()),
            None => (
                SnapshotMeta::default(),
                postcard::to_stdvec(&Data::default()).map_err(sm_err)?,
            ),
        };
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let membership = self.state.membership.clone();
        let current_last = self.current.lock().as_ref().map(|c| c.meta.last_log_id);
        let (last, image) = match self.request.take() {
            // The membership must be one the claimed entries include (the
            // subscriber checks it before asking; a change since is rare),
            // and the claim newer than the current snapshot's.
            Some(r)
                if membership.log_id().is_none_or(|m| m <= r.last)
                    && current_last.is_none_or(|c| c < Some(r.last)) =>
            {
                (Some(r.last), r.image)
            }
            None if !self.asked => (self.state.last_applied, Vec::new()),
            // Not this time: the current snapshot again, or one that
            // claims nothing (openraft keeps the newer of the two).
            _ => return self.current_or_nothing(),
        };
        let state = State {
            last_applied: last,
            membership: membership.clone(),
        };
        let data = postcard::to_stdvec(&Data { state, image }).map_err(sm_err)?;
        let snapshot_id = match last {
            Some(l) => format!(
                "{}-{}-{}-{}",
                l.leader_id.term, l.leader_id.node_id, l.index, self.builds
            ),
            None => format!("--{}", self.builds),
        };
        let meta = SnapshotMeta {
            last_log_id: last,
            last_membership: membership,
            snapshot_id,
        };
        let stored = StoredSnapshot {
            meta: meta.clone(),
            data: data.clone(),
        };
        if !save_off(self.dir.clone(), self.current.clone(), stored).await? {
            // A newer one was installed meanwhile.
            return self.current_or_nothing();
        }
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use openraft::{CommittedLeaderId, Membership};

    use super::*;

    fn log_id(index: u64) -> LogId<NodeId> {
        LogId::new(CommittedLeaderId::new(1, 1), index)
    }

    /// A machine in `dir` that applied a membership at 1 and blanks up to
    /// `last`.
    async fn machine(dir: &Path, last: u64) -> (StateMachine, mpsc::Receiver<Applied>) {
        let (mut sm, rx) = StateMachine::open(dir, 16, None).unwrap();
        let mut entries = vec![Entry {
            log_id: log_id(1),
            payload: EntryPayload::Membership(Membership::new(vec![BTreeSet::from([1])], ())),
        }];
        entries.extend((2..=last).map(|i| Entry {
            log_id: log_id(i),
            payload: EntryPayload::Blank,
        }));
        sm.apply(entries).await.unwrap();
        (sm, rx)
    }

    fn ask(sm: &StateMachine, index: u64, image: &[u8]) {
        let mut slot = sm.requests.lock();
        slot.asked = true;
        slot.next = Some(Request {
            last: log_id(index),
            image: image.to_vec(),
        });
    }

    async fn build(sm: &mut StateMachine) -> Option<LogId<NodeId>> {
        let mut b = sm.get_snapshot_builder().await;
        b.build_snapshot().await.unwrap().meta.last_log_id
    }

    #[tokio::test]
    async fn a_snapshot_claims_what_was_asked_and_holds_the_image() {
        let dir = tempfile::tempdir().unwrap();
        let (mut sm, _rx) = machine(dir.path(), 10).await;
        ask(&sm, 6, b"image at 6");
        assert_eq!(build(&mut sm).await, Some(log_id(6)));
        // Reopened, the machine starts from it: applied up to the claim,
        // the image handed back.
        drop(sm);
        let (sm, _rx) = StateMachine::open(dir.path(), 16, None).unwrap();
        assert_eq!(sm.state.last_applied, Some(log_id(6)));
        assert_eq!(
            sm.image().unwrap(),
            Some((6, bytes::Bytes::from_static(b"image at 6")))
        );
    }

    #[tokio::test]
    async fn once_asked_an_unasked_build_or_an_older_claim_keeps_the_current_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let (mut sm, _rx) = machine(dir.path(), 10).await;
        ask(&sm, 6, b"six");
        assert_eq!(build(&mut sm).await, Some(log_id(6)));
        // Nobody asked: not the machine at 10 with an empty image.
        assert_eq!(build(&mut sm).await, Some(log_id(6)));
        ask(&sm, 4, b"four");
        assert_eq!(build(&mut sm).await, Some(log_id(6)));
        assert_eq!(sm.image().unwrap().map(|(i, _)| i), Some(6));
    }

    #[tokio::test]
    async fn a_build_ending_after_a_newer_install_does_not_replace_it() {
        let dir = tempfile::tempdir().unwrap();
        let (mut sm, mut rx) = machine(dir.path(), 10).await;
        ask(&sm, 6, b"six");
        // The build is made (its request taken) before the install...
        let mut builder = sm.get_snapshot_builder().await;
        let data = postcard::to_stdvec(&Data {
            state: State {
                last_applied: Some(log_id(50)),
                membership: sm.state.membership.clone(),
            },
            image: b"leader's".to_vec(),
        })
        .unwrap();
        let meta = SnapshotMeta {
            last_log_id: Some(log_id(50)),
            last_membership: sm.state.membership.clone(),
            snapshot_id: "leader".into(),
        };
        sm.install_snapshot(&meta, Box::new(Cursor::new(data)))
            .await
            .unwrap();
        assert!(matches!(
            rx.recv().await,
            Some(Applied::Snapshot { last: Some(l), .. }) if l == log_id(50)
        ));
        // ...and ends after it: the installed one stays.
        let built = builder.build_snapshot().await.unwrap();
        assert_eq!(built.meta.last_log_id, Some(log_id(50)));
        drop(sm);
        let (sm, _rx) = StateMachine::open(dir.path(), 16, None).unwrap();
        assert_eq!(
            sm.image().unwrap(),
            Some((50, bytes::Bytes::from_static(b"leader's")))
        );
    }

    #[test]
    fn a_snapshot_is_never_saved_over_a_newer_one() {
        let dir = tempfile::tempdir().unwrap();
        let current = Mutex::new(None);
        let at = |index| StoredSnapshot {
            meta: SnapshotMeta {
                last_log_id: Some(log_id(index)),
                ..SnapshotMeta::default()
            },
            data: vec![index as u8],
        };
        assert!(save(dir.path(), &current, at(50)).unwrap());
        assert!(!save(dir.path(), &current, at(6)).unwrap());
        assert!(!save(dir.path(), &current, at(50)).unwrap());
        let on_disk: Option<StoredSnapshot> = meta::read(dir.path(), SNAPSHOT).unwrap();
        assert_eq!(on_disk.map(|s| s.data), Some(vec![50]));
        assert!(save(dir.path(), &current, at(51)).unwrap());
    }

    #[tokio::test]
    async fn a_machine_never_asked_snapshots_itself() {
        let dir = tempfile::tempdir().unwrap();
        let (mut sm, _rx) = machine(dir.path(), 10).await;
        assert_eq!(build(&mut sm).await, Some(log_id(10)));
    }
}

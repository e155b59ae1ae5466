//! Asking a group for a snapshot: its subscriber (nsqd) hands over an image
//! of what the group's entries made and the highest index the snapshot may
//! claim; this checks the claim, leaves the request where the group's next
//! build takes it (`machine.rs`), has openraft build it and waits until it
//! is the group's snapshot. openraft then purges the log up to it (keeping
//! `max_in_snapshot_log_to_keep` entries for followers a little behind).
//! Never: what the image holds or when to ask (nsqd decides: below the
//! slowest channel).

use std::time::Duration;

use bytes::Bytes;

use crate::committed::{CommittedLog, ReadError};
use crate::machine::{Request, Requests};
use crate::Raft;

/// How long a build may take before the request counts as failed (the
/// next one asks again).
const BUILD_TIMEOUT: Duration = Duration::from_secs(30);

/// One group's snapshots, asked for by its subscriber; cheap to clone.
#[derive(Clone)]
pub struct Snapshots {
    raft: Raft,
    log: CommittedLog,
    requests: Requests,
}

/// Why a snapshot was not taken.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("reading the claimed entry: {0}")]
    Read(#[from] ReadError),
    #[error("the group stopped: {0}")]
    Stopped(String),
    #[error("not built within {0:?}")]
    Timeout(Duration),
}

impl Snapshots {
    pub(crate) fn new(raft: Raft, log: CommittedLog, requests: Requests) -> Snapshots {
        Snapshots {
            raft,
            log,
            requests,
        }
    }

    /// The index of the group's current snapshot (None: it has none).
    pub fn current(&self) -> Option<u64> {
        self.raft.metrics().borrow().snapshot.map(|l| l.index)
    }

    /// Takes a snapshot claiming the entries up to `upto`, holding `image`
    /// (what the subscriber made of entries up to at least `upto`). Answers
    /// the index of the snapshot taken, or None when there is nothing to
    /// take: the group's snapshot already claims `upto`, the entry is not
    /// committed (or was purged), or its membership is newer than `upto`.
    pub async fn take(&self, upto: u64, image: Bytes) -> Result<Option<u64>, SnapshotError> {
        let membership = {
            let m = self.raft.metrics();
            let m = m.borrow();
            if m.snapshot.is_some_and(|s| s.index >= upto) {
                return Ok(None);
            }
            m.membership_config.log_id().map(|l| l.index)
        };
        if membership.is_some_and(|m| m > upto) {
            return Ok(None);
        }
        let last = match self.log.log_id(upto).await {
            Ok(Some(l)) => l,
            Ok(None) | Err(ReadError::Purged { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        {
            let mut slot = self.requests.lock();
            slot.asked = true;
            slot.next = Some(Request {
                last,
                image: image.to_vec(),
            });
        }
        self.raft
            .trigger()
            .snapshot()
            .await
            .map_err(|e| SnapshotError::Stopped(e.to_string()))?;
        let mut metrics = self.raft.metrics();
        let built = tokio::time::timeout(
            BUILD_TIMEOUT,
            metrics.wait_for(|m| m.snapshot.is_some_and(|s| s.index >= upto)),
        )
        .await;
        match built {
            Ok(Ok(_)) => Ok(Some(upto)),
            Ok(Err(e)) => Err(SnapshotError::Stopped(e.to_string())),
            Err(_) => Err(SnapshotError::Timeout(BUILD_TIMEOUT)),
        }
    }
}

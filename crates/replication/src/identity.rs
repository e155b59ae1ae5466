//! Who this member is across restarts, and who its peers were: the
//! incarnation of its data directory, its standing (`standing.rs`), and
//! the incarnation of each peer it has greeted, all kept in `raft/member`
//! and `raft/peers` and written durably (`log::meta`) before the hello
//! that taught them is answered. Never: sockets or Raft handles.

use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::log::meta;
use crate::standing::{Change, Incarnation, Standing};
use crate::{GroupId, NodeId};

const MEMBER_FILE: &str = "member";
const PEERS_FILE: &str = "peers";

/// `raft/member` as stored.
#[derive(Debug, Serialize, Deserialize)]
struct Stored {
    incarnation: Incarnation,
    standing: StoredStanding,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
enum StoredStanding {
    Member,
    Joining,
    Replacing(Incarnation),
}

/// This member's identity, shared by its hellos (both ways) and its groups.
pub struct Identity {
    dir: PathBuf,
    pub me: NodeId,
    pub incarnation: Incarnation,
    /// The cluster's size (`--replication-peer` entries, itself included).
    members: usize,
    /// The groups it votes in (known once the cluster map is).
    groups: std::sync::atomic::AtomicU32,
    standing: watch::Sender<Standing>,
    /// Each peer's incarnation as last greeted.
    known: Mutex<BTreeMap<NodeId, Incarnation>>,
    /// Peers greeted since this start (the probe stops when all were).
    greeted: Mutex<BTreeSet<NodeId>>,
}

impl Identity {
    /// Opens (or, on a directory used for the first time, creates) the
    /// identity in `dir`. `had_state`: the directory held Raft state from
    /// a build before identities; such a member keeps voting.
    pub fn open(
        dir: &Path,
        me: NodeId,
        had_state: bool,
        members: usize,
        groups: u32,
    ) -> io::Result<Identity> {
        std::fs::create_dir_all(dir)?;
        let stored = match meta::read::<Stored>(dir, MEMBER_FILE)? {
            Some(s) => s,
            None => {
                let s = Stored {
                    incarnation: random_incarnation(),
                    standing: if had_state {
                        StoredStanding::Member
                    } else {
                        StoredStanding::Joining
                    },
                };
                meta::write(dir, MEMBER_FILE, &s)?;
                s
            }
        };
        let standing = match stored.standing {
            StoredStanding::Member => Standing::Member,
            StoredStanding::Joining => Standing::at_start(false, members),
            StoredStanding::Replacing(replaced) => Standing::Replacing {
                replaced,
                caught_up: BTreeSet::new(),
            },
        };
        let known = meta::read(dir, PEERS_FILE)?.unwrap_or_default();
        Ok(Identity {
            dir: dir.to_path_buf(),
            me,
            incarnation: stored.incarnation,
            members,
            groups: groups.into(),
            standing: watch::Sender::new(standing),
            known: Mutex::new(known),
            greeted: Mutex::new(BTreeSet::new()),
        })
    }

    /// The number of groups this member votes in (a member that joins a
    /// running cluster learns it with the cluster map).
    pub fn set_groups(&self, groups: u32) {
        self.groups
            .store(groups, std::sync::atomic::Ordering::Relaxed);
    }

    /// The directory of `raft/member`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The incarnation of `peer` this member knew, if any.
    pub fn knew(&self, peer: NodeId) -> Option<Incarnation> {
        self.known.lock().get(&peer).copied()
    }

    /// A hello with `peer` went through: it is incarnation `theirs` and knew
    /// this member as `knew_me`. Records both durably; answers what this
    /// member knew of the peer before, or why it could not record it.
    pub fn met(
        &self,
        peer: NodeId,
        theirs: Incarnation,
        knew_me: Option<Incarnation>,
    ) -> Result<Option<Incarnation>, String> {
        let before = {
            let mut known = self.known.lock();
            let before = known.insert(peer, theirs);
            if before != Some(theirs) {
                if let Err(e) = meta::write(&self.dir, PEERS_FILE, &*known) {
                    // Forget it: a peer unrecorded is asked again next time.
                    match before {
                        Some(b) => known.insert(peer, b),
                        None => known.remove(&peer),
                    };
                    return Err(format!(
                        "node {} could not record node {peer}: {e}",
                        self.me
                    ));
                }
            }
            before
        };
        if let Some(b) = before.filter(|b| *b != theirs) {
            tracing::warn!(
                peer,
                "REPLICATION: node {peer} came back with another data directory (incarnation {b:016x}, now {theirs:016x}): it takes entries, and votes in each group once it holds what the group committed"
            );
        }
        self.greeted.lock().insert(peer);
        let mut change = Change::None;
        self.standing.send_if_modified(|s| {
            change = s.heard(peer, knew_me, self.incarnation, self.members);
            change != Change::None
        });
        self.changed(change)?;
        Ok(before)
    }

    /// Group `group` applied an entry of the term it follows.
    pub fn caught_up(&self, group: GroupId) -> Result<(), String> {
        let mut change = Change::None;
        self.standing.send_if_modified(|s| {
            change = s.caught_up(
                group,
                self.groups.load(std::sync::atomic::Ordering::Relaxed),
            );
            change != Change::None
        });
        self.changed(change)
    }

    fn changed(&self, change: Change) -> Result<(), String> {
        let stored = match change {
            Change::None | Change::CaughtUp(_) => {
                if let Change::CaughtUp(g) = change {
                    tracing::info!(
                        group = g,
                        "REPLICATION: caught up on group {g}; voting in it again"
                    );
                }
                return Ok(());
            }
            Change::NewCluster => {
                tracing::info!(
                    "REPLICATION: a majority of the cluster never knew this member: a new cluster"
                );
                StoredStanding::Member
            }
            Change::Replaces(old) => {
                tracing::warn!(
                    "REPLICATION: a peer knew node {} as incarnation {old:016x}, lost with its disk: this member replaces it, and votes in no group until it holds what each committed",
                    self.me
                );
                StoredStanding::Replacing(old)
            }
            Change::Rejoined => {
                tracing::info!("REPLICATION: caught up on every group: voting as a member again");
                StoredStanding::Member
            }
        };
        let s = Stored {
            incarnation: self.incarnation,
            standing: stored,
        };
        meta::write(&self.dir, MEMBER_FILE, &s)
            .map_err(|e| format!("node {} could not record its standing: {e}", self.me))
    }

    /// Whether this member may vote and campaign in `group` now.
    pub fn may_vote(&self, group: GroupId) -> bool {
        self.standing.borrow().may_vote(group)
    }

    /// The standing now, and each change after.
    pub fn standing(&self) -> watch::Receiver<Standing> {
        self.standing.subscribe()
    }

    /// Whether `peer` was greeted since this start.
    pub fn greeted(&self, peer: NodeId) -> bool {
        self.greeted.lock().contains(&peer)
    }
}

/// 64 random bits from the OS, through std's randomly keyed hasher (the
/// crate needs no other randomness), mixed with the time for good measure.
fn random_incarnation() -> Incarnation {
    let mut h = RandomState::new().build_hasher();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(now);
    h.write_u32(std::process::id());
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_identity_and_what_it_learnt_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let id = Identity::open(dir.path(), 1, false, 3, 2).unwrap();
        assert_eq!(id.standing.borrow().name(), "joining");
        assert_eq!(id.met(2, 0x22, None), Ok(None));
        assert_eq!(id.standing.borrow().name(), "member");
        let inc = id.incarnation;
        drop(id);

        let id = Identity::open(dir.path(), 1, false, 3, 2).unwrap();
        assert_eq!(id.incarnation, inc);
        assert_eq!(id.standing.borrow().name(), "member");
        assert_eq!(id.knew(2), Some(0x22));
        assert!(!id.greeted(2), "greeted counts this start only");
        // Node 2 back with an empty disk: what it was is the answer.
        assert_eq!(id.met(2, 0x23, Some(inc)), Ok(Some(0x22)));
        assert_eq!(id.knew(2), Some(0x23));
    }

    #[test]
    fn an_empty_directory_gets_a_new_incarnation_and_replaces_the_old() {
        let dir = tempfile::tempdir().unwrap();
        let old = Identity::open(dir.path(), 3, false, 3, 2)
            .unwrap()
            .incarnation;
        std::fs::remove_dir_all(dir.path()).unwrap();
        let id = Identity::open(dir.path(), 3, false, 3, 2).unwrap();
        assert_ne!(id.incarnation, old);
        id.met(1, 0x11, Some(old)).unwrap();
        assert!(!id.may_vote(0) && !id.may_vote(1));
        // Still replacing after a restart, until each group caught up.
        drop(id);
        let id = Identity::open(dir.path(), 3, false, 3, 2).unwrap();
        assert_eq!(id.standing.borrow().name(), "replacing");
        id.caught_up(0).unwrap();
        assert!(id.may_vote(0) && !id.may_vote(1));
        id.caught_up(1).unwrap();
        drop(id);
        let id = Identity::open(dir.path(), 3, false, 3, 2).unwrap();
        assert!(id.may_vote(1));
    }

    #[test]
    fn state_from_before_identities_keeps_voting() {
        let dir = tempfile::tempdir().unwrap();
        let id = Identity::open(dir.path(), 1, true, 3, 2).unwrap();
        assert!(id.may_vote(0));
    }
}

//! The cluster map this member holds (`cluster_map.rs` says what a map is
//! and how it changes): kept in `raft/cluster` (a small file like the
//! others: CRC, postcard, written whole and fsynced), shared by everything
//! that asks who the members are or who votes where (the hello, the
//! proposer, the pulse, the membership task), and replaced when group 0
//! applies an update or a peer shows a newer map. Never: deciding a
//! change (the rules) or carrying one out (`membership.rs`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use tokio::sync::watch;

use crate::cluster_map::{ClusterMap, Refusal, Update};
use crate::log::meta;
use crate::placement::Placement;

/// The map's file in `raft/`.
const MAP_FILE: &str = "cluster";

/// What the last applied update of the map did, by log index.
pub type Outcome = (u64, Result<bool, Refusal>);

/// This member's map (cheap to clone).
#[derive(Clone)]
pub struct Maps(Arc<Inner>);

struct Inner {
    /// None in tests.
    dir: Option<PathBuf>,
    /// None while a member being added has not been told the map yet.
    map: RwLock<Option<(Arc<ClusterMap>, Arc<Placement>)>>,
    /// The version held (bumped on every change).
    changed: watch::Sender<u64>,
    /// What the last update applied from the log did.
    last: Mutex<Option<Outcome>>,
    /// Serialises writes of the file.
    write: Mutex<()>,
}

impl Maps {
    /// The map kept in `dir`, else `formed` (a member starting a cluster
    /// from its flags), else none (a member waiting to be added).
    pub fn open(dir: &Path, formed: Option<ClusterMap>) -> std::io::Result<Maps> {
        std::fs::create_dir_all(dir)?;
        let map = match meta::read::<ClusterMap>(dir, MAP_FILE)? {
            Some(m) => Some(m),
            None => match formed {
                Some(m) => {
                    meta::write(dir, MAP_FILE, &m)?;
                    Some(m)
                }
                None => None,
            },
        };
        Ok(Maps::with(Some(dir.to_path_buf()), map))
    }

    /// A map held in memory only.
    pub fn in_memory(map: Option<ClusterMap>) -> Maps {
        Maps::with(None, map)
    }

    fn with(dir: Option<PathBuf>, map: Option<ClusterMap>) -> Maps {
        let version = map.as_ref().map_or(0, |m| m.version);
        Maps(Arc::new(Inner {
            dir,
            map: RwLock::new(map.map(pair)),
            changed: watch::Sender::new(version),
            last: Mutex::new(None),
            write: Mutex::new(()),
        }))
    }

    /// The map, if this member has one.
    pub fn get(&self) -> Option<Arc<ClusterMap>> {
        self.0.map.read().as_ref().map(|(m, _)| m.clone())
    }

    /// The placement the map gives (an empty one before the map).
    pub fn placement(&self) -> Arc<Placement> {
        self.0
            .map
            .read()
            .as_ref()
            .map(|(_, p)| p.clone())
            .unwrap_or_else(|| Arc::new(Placement::new([], 1)))
    }

    /// The version held now and at every change.
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.0.changed.subscribe()
    }

    /// What the update last applied from the log did, by its index.
    pub fn last_outcome(&self) -> Option<Outcome> {
        self.0.last.lock().clone()
    }

    /// Takes `map` if it is newer than the one held (a peer's, which is
    /// only ever the result of committed updates) and `accept` likes it;
    /// true if taken.
    pub fn adopt(
        &self,
        map: &ClusterMap,
        accept: impl FnOnce(Option<&ClusterMap>) -> bool,
    ) -> bool {
        let _w = self.0.write.lock();
        let held = self.get();
        if held.as_ref().is_some_and(|h| h.version >= map.version) || !accept(held.as_deref()) {
            return false;
        }
        self.store(map.clone());
        tracing::info!(
            version = map.version,
            "REPLICATION: took the cluster map from a peer: members {:?}",
            map.members
        );
        true
    }

    /// Applies an update group 0 committed at `index`.
    pub fn apply(&self, index: u64, update: &Update) {
        let _w = self.0.write.lock();
        let Some(held) = self.get() else {
            return;
        };
        let mut next = (*held).clone();
        let outcome = next.apply(update);
        match &outcome {
            Ok(true) => {
                if let Update::Change { change, .. } = update {
                    tracing::info!(version = next.version, "REPLICATION: cluster map: {change}");
                }
                if held.pending.is_some() && next.pending.is_none() {
                    tracing::info!(
                        version = next.version,
                        "REPLICATION: cluster map: every group's membership is the map's"
                    );
                }
                self.store(next);
            }
            Ok(false) => {}
            Err(why @ Refusal::Stale { .. }) => {
                tracing::debug!("REPLICATION: cluster map update not applied: {why}")
            }
            Err(why) => tracing::info!("REPLICATION: cluster map update not applied: {why}"),
        }
        *self.0.last.lock() = Some((index, outcome));
    }

    fn store(&self, map: ClusterMap) {
        if let Some(dir) = &self.0.dir {
            if let Err(e) = meta::write(dir, MAP_FILE, &map) {
                // The map is applied again from the log or a peer after a
                // restart; the member goes on with it in memory.
                tracing::error!(error = %e, "REPLICATION: the cluster map not written");
            }
        }
        let version = map.version;
        *self.0.map.write() = Some(pair(map));
        self.0.changed.send_replace(version);
    }
}

fn pair(map: ClusterMap) -> (Arc<ClusterMap>, Arc<Placement>) {
    let placement = Arc::new(Placement::from_map(&map));
    (Arc::new(map), placement)
}

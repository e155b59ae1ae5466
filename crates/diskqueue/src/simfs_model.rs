//! The power-cut tests' model of what the queue promises: each record put,
//! its state (Acked, Durable, Optional; Read in this life) as the metadata
//! commits seen so far prove it, what a kill or a power cut does to those
//! states, and the checks every read and every depth must pass. The rules
//! are explained in `simfs_tests.rs`, which drives the queue and this
//! model side by side.

use std::collections::BTreeMap;

use proptest::prelude::*;

use crate::simfs::Stats;
use crate::simfs_tests::record;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dur {
    Durable,
    Acked,
    Optional,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum St {
    Unread(Dur),
    /// Delivered in this life; `stamp` is `meta_renamed` when the read began.
    Read {
        was: Dur,
        stamp: u64,
    },
}

#[derive(Debug, Clone)]
pub(crate) struct Rec {
    pub(crate) extra: usize,
    pub(crate) st: St,
    /// `meta_renamed` when the `put` returned.
    pub(crate) put_stamp: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Model {
    pub(crate) recs: BTreeMap<u64, Rec>,
    pub(crate) next_id: u64,
    /// No power cut since the reader last caught up, so the queue's depth
    /// counts no lost record.
    pub(crate) depth_exact: bool,
    /// The same for the depth in the metadata file, which a kill brings back.
    pub(crate) meta_depth_exact: bool,
}

impl Model {
    /// Applies what the metadata commits seen so far prove.
    pub(crate) fn observe(&mut self, s: Stats) {
        self.recs.retain(|_, r| match r.st {
            St::Read { stamp, .. } => s.meta_durable <= stamp,
            St::Unread(_) => true,
        });
        for r in self.recs.values_mut() {
            if r.st == St::Unread(Dur::Acked) && s.meta_durable > r.put_stamp {
                r.st = St::Unread(Dur::Durable);
            }
        }
    }

    /// The process died (page cache intact); `s` is the filesystem now.
    pub(crate) fn kill(&mut self, s: Stats) {
        self.observe(s);
        self.depth_exact = self.meta_depth_exact;
        for r in self.recs.values_mut() {
            if let St::Read { was, stamp } = r.st {
                r.st = if s.meta_renamed > stamp {
                    St::Unread(Dur::Optional)
                } else {
                    St::Unread(was)
                };
            }
        }
    }

    /// Power came back; `s` is the filesystem after the cut.
    pub(crate) fn power_cut(&mut self, s: Stats) {
        // After the cut, `meta_durable` is the newest metadata file the disk
        // kept: a read after it is not recorded anywhere any more.
        self.observe(s);
        for r in self.recs.values_mut() {
            let d = match r.st {
                St::Read { was, .. } => was,
                St::Unread(d) => d,
            };
            r.st = St::Unread(if d == Dur::Acked { Dur::Optional } else { d });
        }
        self.depth_exact = false;
        self.meta_depth_exact = false;
    }

    /// Whatever an interrupted `empty` left may or may not come back.
    pub(crate) fn empty_interrupted(&mut self) {
        for r in self.recs.values_mut() {
            r.st = St::Unread(Dur::Optional);
        }
    }

    pub(crate) fn must_come(&self) -> usize {
        self.recs
            .values()
            .filter(|r| matches!(r.st, St::Unread(Dur::Durable | Dur::Acked)))
            .count()
    }

    pub(crate) fn may_come(&self) -> usize {
        self.recs
            .values()
            .filter(|r| matches!(r.st, St::Unread(_)))
            .count()
    }

    pub(crate) fn check_read(&mut self, got: &[u8], stamp: u64) -> Result<(), TestCaseError> {
        prop_assert!(got.len() >= 8, "record shorter than its id: {:?}", got);
        let id = u64::from_be_bytes(got[..8].try_into().unwrap());
        let Some(rec) = self.recs.get(&id) else {
            return Err(TestCaseError::fail(format!(
                "read record {id}, which was never put, or was consumed or emptied ({} bytes)",
                got.len()
            )));
        };
        let St::Unread(was) = rec.st else {
            return Err(TestCaseError::fail(format!(
                "record {id} delivered twice in one life"
            )));
        };
        prop_assert_eq!(got, &record(id, rec.extra)[..], "record {} corrupt", id);
        let skipped: Vec<(u64, Dur)> = self
            .recs
            .range(..id)
            .filter_map(|(&i, r)| match r.st {
                St::Unread(d) => Some((i, d)),
                St::Read { .. } => None,
            })
            .collect();
        for (i, d) in skipped {
            prop_assert_eq!(
                d,
                Dur::Optional,
                "record {} ({:?}) lost: read {} after it",
                i,
                d,
                id
            );
            self.recs.remove(&i);
        }
        self.recs.get_mut(&id).unwrap().st = St::Read { was, stamp };
        Ok(())
    }

    pub(crate) fn check_dry(&mut self) -> Result<(), TestCaseError> {
        let lost: Vec<(u64, St)> = self
            .recs
            .iter()
            .filter(|(_, r)| matches!(r.st, St::Unread(Dur::Durable | Dur::Acked)))
            .map(|(&i, r)| (i, r.st))
            .collect();
        prop_assert!(lost.is_empty(), "queue ran dry; lost {:?}", lost);
        self.recs.retain(|_, r| !matches!(r.st, St::Unread(_)));
        self.depth_exact = true;
        Ok(())
    }
}

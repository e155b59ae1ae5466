//! The group's depth limits where this member enforces them
//! (docs/replication.md, "Depth limits"): a publish taken here is checked
//! against what this member applied before it is proposed, and one
//! forwarded to this member, where it leads the group, before it is
//! written. The rules (the depth counted, the refusal) are the core's
//! (`core::replicated::progress_limits`); what a committed `Limit` or a
//! `drop-oldest` changes here is the applier's (`apply.rs`).

use std::collections::BTreeMap;
use std::sync::Arc;

use nsq_replication::answer::ForwardCheck;
use nsq_replication::GroupId;
use parking_lot::Mutex;

use crate::core::limits::Full;
use crate::core::replicated::entry::Entry;
use crate::core::replicated::progress::Progress;

/// The refusal of `incoming` new messages to `topic` by its group's
/// `reject` limits, as `progress` (the group's, applied here) counts them.
pub fn refusal(progress: &Mutex<Progress>, topic: &str, incoming: u64) -> Option<Full> {
    progress.lock().topic(topic)?.refusal(incoming)
}

/// The leader's check of a publish forwarded to it: refused by its
/// group's `reject` limits as the leader counts them (the member that took
/// it checked its own view before forwarding; one outside the group has
/// none), before anything is written. `progress`: each group's here.
pub fn forward_check(
    progress: impl Iterator<Item = (GroupId, Arc<Mutex<Progress>>)>,
) -> ForwardCheck {
    let progress: BTreeMap<GroupId, Arc<Mutex<Progress>>> = progress.collect();
    Arc::new(move |group, payload| {
        let Some((topic, count)) = Entry::published(payload) else {
            return Ok(());
        };
        match progress.get(&group).and_then(|p| refusal(p, topic, count)) {
            Some(full) => Err(full.to_string()),
            None => Ok(()),
        }
    })
}

//! Snapshots of a member's Raft groups, so their logs do not grow forever:
//! when enough entries below a group's slowest channel are not yet in a
//! snapshot, the group's applier hands its progress's image
//! (`core::progress`, with the topics, channels and pauses its entries
//! made) to the replication crate, which takes the snapshot and purges the
//! log below it. And the other way: a member that starts from a snapshot,
//! or is sent one because it was behind the purge point, makes its topics
//! and channels what the image says. Never: the image's layout
//! (`core::progress_image`) or Raft (`nsq_replication::snapshot`).
//! Design: docs/replication.md, "Snapshots and the purge".

use std::sync::Arc;

use nsq_replication::GroupId;

use super::groups::Groups;
use super::topics::{topic_create, topic_delete};
use crate::core::replicated::channel_entries::replicates;
use crate::core::replicated::progress::Progress;
use crate::server::nsqd::NsqdInner;

/// Takes a snapshot of `group` when its progress may claim at least
/// `--replication-snapshot-entries` entries more than the group's current
/// snapshot does. Called by the applier between entries; the image is made
/// there (so it matches the entries applied), the snapshot is taken in the
/// background, one at a time per group.
pub fn consider(nsqd: &NsqdInner, r: &Arc<Groups>, group: GroupId) {
    let (Some(progress), Some(snapshots)) = (r.progress(group), r.snapshots(group)) else {
        return;
    };
    let Some(upto) = progress.lock().snapshot_index() else {
        return;
    };
    let current = snapshots.current().unwrap_or(0);
    if upto < current.saturating_add(r.snapshot_entries()) || !r.begin_snapshot(group) {
        return;
    }
    let image = match progress.lock().image() {
        Ok(image) => image,
        Err(e) => {
            r.end_snapshot(group);
            tracing::error!(group, error = %e, "REPLICATION: no snapshot: the group's image cannot be made");
            return;
        }
    };
    let snapshots = snapshots.clone();
    let r = r.clone();
    let cancel = nsqd.ctx.cancel.clone();
    nsqd.ctx.tasks.spawn(async move {
        let bytes = image.len();
        // Shutting down: the next start asks again.
        let taken = tokio::select! {
            _ = cancel.cancelled() => Ok(None),
            taken = snapshots.take(upto, image) => taken,
        };
        match taken {
            Ok(Some(index)) => tracing::info!(
                group,
                index,
                bytes,
                "REPLICATION: snapshot taken; the log may be purged below it"
            ),
            Ok(None) => {}
            Err(e) => tracing::warn!(group, upto, error = %e, "REPLICATION: snapshot not taken"),
        }
        r.end_snapshot(group);
    });
}

/// Makes this member's topics of `group` what `image` says (the member
/// starts from a snapshot, or was sent one): its topics with their
/// replicas and pause, their channels with theirs, none of the group's
/// that it lacks, and the group's `Serving`; `nsqd.dat` then says so.
/// What an entry above the snapshot changes comes after, as entries do.
/// A whole-cluster group's image also lists the topics of smaller groups
/// it hashes (their creates and deletes are committed to it): it makes
/// and deletes those here only where this member does not vote in their
/// own group, whose entries say the rest.
pub fn install(nsqd: &NsqdInner, r: &Groups, group: GroupId, image: &Progress) {
    let decides = |name: &str, replicas: u8| {
        let own = r.group_of(name, replicas);
        own == group || (r.whole_group_of(name) == group && !r.votes_in(own))
    };
    for t in nsqd.topics() {
        if t.replicas().is_some_and(|n| decides(&t.name, n)) && image.topic(&t.name).is_none() {
            topic_delete(nsqd, &t.name);
        }
    }
    for (name, tp) in image.topics() {
        if !decides(name, tp.replicas()) {
            continue;
        }
        topic_create(nsqd, r, name, tp.replicas());
        let Some(t) = nsqd.get_topic(name).filter(|t| t.replicas().is_some()) else {
            continue;
        };
        if r.group_of(name, tp.replicas()) != group {
            // Its pause and channels are in its own group's entries.
            continue;
        }
        if t.is_paused() != tp.is_paused() {
            t.set_paused(tp.is_paused());
        }
        for c in t.channel_names() {
            if replicates(t.replicas(), &c) && tp.channel(&c).is_none() {
                nsqd.delete_channel(&t, &c);
            }
        }
        for (c, cp) in tp.channels() {
            let Ok(ch) = t.get_or_create_channel(c) else {
                continue;
            };
            if ch.is_paused() != cp.is_paused() {
                ch.set_paused(cp.is_paused());
            }
        }
    }
    if let Some((node, address)) = image.serving() {
        r.record_serving(group, node, address.to_string());
    }
    if let Err(e) = nsqd.persist_metadata() {
        tracing::error!(group, error = %e, "failed to persist metadata");
    }
}

//! FINs of replicated topics reaching their groups: every
//! [`FINISH_INTERVAL`] one task takes the ids each replicated channel has
//! finished, and those its consumers requeued with a delay (its core keeps
//! them, `core::channel_finished`) and, where this member leads the
//! channel's group, commits them as a `Deferred` and a `Finished` entry
//! per channel, so every member's `core::progress` knows them and a member
//! that gains the group neither delivers the finished ones again nor the
//! requeued ones before they are due. Never: what the entries do (the
//! progress), or the FINs themselves.
//!
//! A FIN is acknowledged to nobody (NSQ answers none), so batching costs
//! only this: FINs not yet committed when the leader is lost are delivered
//! again by the next (duplicates, as NSQ allows, never losses). On
//! shutdown one last round commits what is left, within
//! [`LAST_ROUND`].

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;

use super::groups::Groups;
use crate::core::replicated::entry::{Cursor, Entry};
use crate::server::nsqd::NsqdInner;

/// How often FINs are committed: what a failover may deliver twice.
pub const FINISH_INTERVAL: Duration = Duration::from_millis(100);
/// Ids in one entry at most (16 bytes each).
const MAX_IDS: usize = 8192;
/// How long shutdown waits for the last round.
const LAST_ROUND: Duration = Duration::from_secs(2);

/// Starts the task (nothing without the replication flags).
pub fn spawn(nsqd: &Arc<NsqdInner>, r: &Arc<Groups>) {
    nsqd.ctx.tasks.spawn(run(nsqd.clone(), r.clone()));
}

async fn run(nsqd: Arc<NsqdInner>, r: Arc<Groups>) {
    let cancel = nsqd.ctx.cancel.clone();
    let mut tick = tokio::time::interval(FINISH_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = tick.tick() => {}
        }
        round(&nsqd, &r).await;
    }
    if tokio::time::timeout(LAST_ROUND, round(&nsqd, &r))
        .await
        .is_err()
    {
        tracing::warn!(
            "REPLICATION: last FINs not committed before shutdown; they may be delivered again"
        );
    }
}

/// Takes every replicated channel's FINs and requeues with a delay, and
/// commits those of the groups this member leads, all channels at once:
/// per channel, its `Deferred` entries before its `Finished` ones (a
/// message requeued and then finished in the same round ends finished).
async fn round(nsqd: &NsqdInner, r: &Arc<Groups>) {
    let mut commits = JoinSet::new();
    for t in nsqd.topics() {
        let Some(replicas) = t.replicas() else {
            continue;
        };
        let group = r.group_of(&t.name, replicas);
        for ch in t.channels() {
            let deferred = ch.take_deferred();
            let ids = ch.take_finished();
            if (ids.is_empty() && deferred.is_empty()) || !r.leads(group) {
                // Not leading: its consumers are being closed, and the
                // group's next leader delivers these again.
                continue;
            }
            let (topic, channel) = (t.name.clone(), ch.name.clone());
            let mut entries: Vec<Entry> = deferred
                .chunks(MAX_IDS)
                .map(|part| Entry::Deferred {
                    topic: topic.clone(),
                    channel: channel.clone(),
                    until: part.to_vec(),
                })
                .collect();
            entries.extend(ids.chunks(MAX_IDS).map(|part| Entry::Finished {
                topic: topic.clone(),
                channel: channel.clone(),
                // Informational only (every member computes the cursor
                // itself), and the log has what it needs.
                cursor: Cursor {
                    index: 0,
                    offset: 0,
                },
                ids: part.to_vec(),
            }));
            let r = r.clone();
            commits.spawn(async move {
                for entry in &entries {
                    if let Err(e) = r.commit_to(group, entry).await {
                        let (what, n) = match entry {
                            Entry::Deferred { until, .. } => ("requeue delays", until.len()),
                            Entry::Finished { ids, .. } => ("FINs", ids.len()),
                            _ => ("entries", 0),
                        };
                        tracing::warn!(
                            group,
                            topic = %topic,
                            channel = %channel,
                            messages = n,
                            error = %e.detail(),
                            "REPLICATION: {what} not committed; a failover delivers them again"
                        );
                    }
                }
            });
        }
    }
    while commits.join_next().await.is_some() {}
}

//! Applying the committed entries of this member's Raft groups to nsqd's
//! topics: one task per group reads what the group applied, in log order,
//! decodes it (`core::replicated::entry`) and makes the change here, so
//! every member holds the same replicated topics. Never: proposing (the
//! member, `mod.rs`, commits what the HTTP and TCP handlers ask), or Raft.
//!
//! After a restart a group applies its committed entries again from the
//! log; each change is one that applying twice leaves as applying once.
//! Every entry also feeds the group's progress (what each channel
//! has not finished), and between entries the applier follows the group's
//! leadership (`redeliver.rs`): a member that gains the group puts back
//! what the progress says is unfinished, so `Publish` puts a batch into
//! the topic only while the queues hold the group's messages. Applied
//! here: `TopicCreate`, `TopicDelete`, `Publish`, the channel entries
//! (`ChannelCreate`, `ChannelDelete`, `ChannelPause`, `ChannelEmpty`, as
//! `core::replicated::channel_entries` decides), the topic entries
//! (`TopicPause` on every member, `TopicEmpty` on the leader, as
//! `core::replicated::topic_entries` decides), `Serving` (where a group's leader serves consumers),
//! `Limit` (the progress keeps it; the leader's channels skip what a
//! `drop-oldest` limit dropped when a batch is applied), and
//! `Finished` (the progress alone: the leader's channel had finished the
//! messages when it proposed it).

use std::sync::Arc;
use std::time::Duration;

use nsq_protocol::Message;
use nsq_replication::machine::Applied;
use nsq_replication::GroupId;
use tokio::sync::mpsc;

use super::groups::Groups;
use super::redeliver::{self, Delivering};
use super::reset;
use super::snapshots;
use super::topics::{topic_create, topic_delete};
use crate::core::limits::Limit;
use crate::core::replicated::channel_entries::{on_channel_entry, ChannelChange, Here};
use crate::core::replicated::entry::{Entry, Published};
use crate::core::replicated::progress::{limit_refusal, Dropped, Progress};
use crate::core::replicated::topic_entries::{self, on_topic_entry, TopicChange};
use crate::server::nsqd::NsqdInner;

/// Starts one applier per group of the member (nothing without one).
pub fn spawn_appliers(nsqd: &Arc<NsqdInner>, r: &Arc<Groups>) {
    for (group, rx) in r.take_subscriptions() {
        nsqd.ctx
            .tasks
            .spawn(apply_group(nsqd.clone(), r.clone(), group, rx));
    }
}

async fn apply_group(
    nsqd: Arc<NsqdInner>,
    r: Arc<Groups>,
    group: GroupId,
    mut rx: mpsc::Receiver<Applied>,
) {
    let cancel = nsqd.ctx.cancel.clone();
    let (Some(mut leadership), Some(mut metrics)) =
        (r.leadership_watch(group), r.metrics_watch(group))
    else {
        return;
    };
    if let Some((index, image)) = r.take_image(group) {
        from_image(&nsqd, &r, group, index, image);
    }
    match replay(&nsqd, &r, group).await {
        Ok(()) => {}
        // The leader sent a snapshot meanwhile, which purged this log: the
        // snapshot, waiting in the subscription, replaces what was read.
        Err(nsq_replication::committed::ReadError::Purged { start, purged }) => tracing::info!(
            group,
            start,
            purged,
            "REPLICATION: log purged under the replay at start by a snapshot from the leader"
        ),
        Err(e) => {
            tracing::error!(group, error = %e, "REPLICATION: could not read the log back at start")
        }
    }
    let mut delivering: Delivering = None;
    loop {
        // Between entries: the queues follow the leadership, so what is put
        // back matches the entries applied so far. A new leader puts back
        // only once every entry of earlier terms is applied here (else a
        // `Finished` still on its way would not count, and its messages
        // would be delivered again).
        let ready = rx.is_empty() && r.applied_current_term(group);
        delivering = redeliver::follow(&nsqd, &r, group, delivering, ready).await;
        let waiting = r.leads(group) && delivering != Some(true);
        let applied = tokio::select! {
            _ = cancel.cancelled() => return,
            changed = leadership.changed() => match changed {
                Ok(()) => continue,
                Err(_) => return,
            },
            changed = metrics.changed(), if waiting => match changed {
                Ok(()) => continue,
                Err(_) => return,
            },
            a = rx.recv() => match a {
                Some(a) => a,
                None => return,
            },
        };
        match applied {
            Applied::Entry { log_id, payload } => {
                apply_payload(
                    &nsqd,
                    &r,
                    group,
                    log_id.index,
                    payload,
                    delivering == Some(true),
                )
                .await;
                r.mark_applied(group, log_id.index);
                snapshots::consider(&nsqd, &r, group);
            }
            Applied::Snapshot { last, image } => {
                // This member was behind the leader's purge point: the
                // image replaces what it had of the group.
                let index = last.map_or(0, |l| l.index);
                tracing::info!(
                    group,
                    index,
                    "REPLICATION: installed a snapshot from the leader"
                );
                from_image(&nsqd, &r, group, index, image);
                r.mark_applied(group, index);
            }
        }
    }
}

/// The group's progress, topics and channels from a snapshot's image (the
/// snapshot claims the entries up to `index`).
fn from_image(nsqd: &NsqdInner, r: &Groups, group: GroupId, index: u64, image: bytes::Bytes) {
    if image.is_empty() {
        // A snapshot openraft built without nsqd asking (a start that found
        // the log purged and the snapshot gone): what the entries below it
        // made is not known here.
        tracing::error!(
            group,
            index,
            "REPLICATION: snapshot without an image; the group's state here is incomplete"
        );
        return;
    }
    match Progress::from_image(image) {
        Ok(p) => {
            snapshots::install(nsqd, r, group, &p);
            if let Some(progress) = r.progress(group) {
                *progress.lock() = p;
            }
        }
        // The entries below `index` are gone from the log: what they made
        // cannot be known here. Loud, since a failover to this member
        // would not redeliver what they hold.
        Err(e) => tracing::error!(
            group,
            index,
            error = %e,
            "REPLICATION: snapshot image not understood; the group's state here is incomplete"
        ),
    }
}

/// The entries openraft applied again at start from this member's own log
/// (`Groups::replayed`), read back from it in bounded chunks and
/// applied as a follower would: they come before anything the
/// subscription hands over.
async fn replay(
    nsqd: &Arc<NsqdInner>,
    r: &Groups,
    group: GroupId,
) -> Result<(), nsq_replication::committed::ReadError> {
    let (Some(last), Some(log)) = (r.replayed(group), r.committed_log(group)) else {
        return Ok(());
    };
    // A purged log starts above its snapshot's claim.
    let mut at = log.purged().map_or(0, |p| p + 1);
    while at <= last {
        let chunk = log.read(at, last + 1, REPLAY_BYTES).await?;
        if chunk.next == at {
            break;
        }
        for (index, payload) in chunk.entries {
            apply_payload(nsqd, r, group, index, payload, false).await;
        }
        at = chunk.next;
    }
    r.mark_applied(group, last);
    Ok(())
}

/// How much of the log a replay holds at once.
const REPLAY_BYTES: usize = 4 << 20;

/// Decodes and applies one committed entry's payload, and feeds the
/// group's progress (a `ChannelReset` first has the batches it needs read
/// back from the log: `reset.rs`).
async fn apply_payload(
    nsqd: &Arc<NsqdInner>,
    r: &Groups,
    group: GroupId,
    index: u64,
    payload: bytes::Bytes,
    delivering: bool,
) {
    match Entry::decode(payload) {
        Ok(entry @ Entry::ChannelReset { .. }) => {
            reset::apply_reset(nsqd, r, group, index, &entry, delivering).await;
        }
        Ok(entry) => {
            let mut dropped = Vec::new();
            if let Some(p) = r.progress(group) {
                p.lock().apply_dropping(index, &entry, &mut dropped);
            }
            if delivering {
                drop_for_group(nsqd, dropped);
            }
            apply(nsqd, r, group, index, entry, delivering);
        }
        // Nothing this member can do about an entry it cannot read (one
        // written by a newer nsqd): the group goes on.
        Err(e) => tracing::error!(
            group,
            index,
            error = %e,
            "REPLICATION: committed entry not understood; skipped"
        ),
    }
}

/// Makes `entry`'s change here; `delivering`: this member's queues of the
/// group hold its unfinished messages (it leads the group).
fn apply(nsqd: &NsqdInner, r: &Groups, group: GroupId, index: u64, entry: Entry, delivering: bool) {
    match entry {
        Entry::TopicCreate { topic, replicas } => topic_create(nsqd, r, &topic, replicas),
        Entry::Publish { topic, messages } => {
            if delivering {
                publish(nsqd, &topic, messages);
            }
        }
        Entry::TopicDelete { topic } => topic_delete(nsqd, &topic),
        e @ (Entry::ChannelCreate { .. }
        | Entry::ChannelDelete { .. }
        | Entry::ChannelPause { .. }
        | Entry::ChannelEmpty { .. }) => channel_entry(nsqd, index, &e, delivering),
        e @ (Entry::TopicPause { .. } | Entry::TopicEmpty { .. }) => {
            topic_entry(nsqd, index, &e, delivering)
        }
        Entry::Retention {
            topic,
            age_ms,
            bytes,
        } => {
            tracing::info!(topic = %topic, age_ms, bytes, index, "REPLICATION: topic retention applied");
        }
        // Applied above, with the log's batches it needs.
        Entry::ChannelReset { .. } => {}
        Entry::Serving { node, address } => {
            tracing::debug!(group, node, %address, "REPLICATION: group served by node {node} at {address}");
            r.record_serving(group, node, address);
        }
        // What they change is the group's progress, fed above: the
        // leader's channel finished (or deferred) the messages before
        // proposing them.
        Entry::Finished { .. } | Entry::Deferred { .. } => {}
        // The group's limit lives in its progress, fed above; a limit of
        // this member's own (set before the group had one) stands aside.
        Entry::Limit {
            topic,
            channel,
            limit,
        } => limit_entry(nsqd, index, &topic, channel.as_deref(), limit),
    }
}

/// A committed `Limit`: the group's progress keeps it (fed before this);
/// a limit of this member's own, set before the group had one, stands
/// aside, and `nsqd.dat` forgets it before the applier goes on.
fn limit_entry(nsqd: &NsqdInner, index: u64, topic: &str, channel: Option<&str>, limit: Limit) {
    if let Some(why) = limit_refusal(channel, &limit) {
        tracing::warn!(topic = %topic, index, %why, "REPLICATION: depth limit not the group's; skipped");
        return;
    }
    tracing::info!(topic = %topic, channel = ?channel, max_depth = limit.max_depth, policy = %limit.policy, index, "REPLICATION: depth limit applied");
    let Some(t) = nsqd.get_topic(topic).filter(|t| t.replicas().is_some()) else {
        return;
    };
    match channel {
        Some(c) => match t.get_channel(c).filter(|ch| ch.limit().is_set()) {
            Some(ch) => t.set_channel_limit(&ch, Limit::default()),
            None => return,
        },
        None if t.limit().is_set() => t.configure(Limit::default(), t.mem_queue_size()),
        None => return,
    }
    persist(nsqd, topic);
}

/// What a `Publish` made the group's `drop-oldest` channels drop, on the
/// group's leader: its channels skip those messages (the others' channels
/// hold none; a new leader's progress has them finished).
fn drop_for_group(nsqd: &NsqdInner, dropped: Vec<Dropped>) {
    for d in dropped {
        let Some(ch) = nsqd
            .get_topic(&d.topic)
            .and_then(|t| t.get_channel(&d.channel))
        else {
            continue;
        };
        tracing::debug!(topic = %d.topic, channel = %d.channel, n = d.ids.len(), "REPLICATION: dropped by the channel's depth limit");
        ch.drop_for_group(&d.ids);
    }
}

/// A committed `Publish` on the group's leader: the messages go into the
/// topic, delivered as any topic's. The other members keep them in the log
/// only; one that gains the group puts back what is unfinished
/// (`redeliver.rs`).
fn publish(nsqd: &NsqdInner, name: &str, messages: Vec<Published>) {
    let Some(topic) = nsqd.get_topic(name) else {
        tracing::warn!(topic = %name, "REPLICATION: publish to a topic this member does not have; skipped");
        return;
    };
    // One batch is one PUB, MPUB or DPUB: one delay for all of it.
    let defer = messages
        .first()
        .filter(|m| m.defer_ms > 0)
        .map(|m| Duration::from_millis(m.defer_ms));
    let msgs = messages
        .into_iter()
        .map(|m| Message::new(m.id, m.timestamp, m.body))
        .collect();
    // Its own disk queue's durability does not matter here: the batch is
    // in the group's log on a majority already.
    if let Err(e) = topic.publish_stamped(msgs, defer) {
        tracing::error!(topic = %name, error = %e, "REPLICATION: committed publish not delivered here");
    }
}

/// A committed channel entry: every member makes, deletes and pauses the
/// channel as its group decided, so a member that gains the group has the
/// channels to register and their pause state; emptying drops messages on
/// the leader only (the others' channels hold none). `nsqd.dat` has each
/// change before the applier goes on, so a member that answered the
/// client has persisted it (the lookup loop would, a moment later).
fn channel_entry(nsqd: &NsqdInner, index: u64, entry: &Entry, delivering: bool) {
    let (Entry::ChannelCreate { topic, channel }
    | Entry::ChannelDelete { topic, channel }
    | Entry::ChannelPause { topic, channel, .. }
    | Entry::ChannelEmpty { topic, channel, .. }) = entry
    else {
        return;
    };
    let Some(t) = nsqd.get_topic(topic).filter(|t| t.replicas().is_some()) else {
        // Deleted later in the log (applied again after a restart), or an
        // unreplicated topic of the same name: not the group's.
        tracing::warn!(topic = %topic, channel = %channel, index, "REPLICATION: channel entry for a topic not replicated here; skipped");
        return;
    };
    let here = Here {
        exists: t.get_channel(channel).is_some(),
        leads: delivering,
    };
    match on_channel_entry(entry, here) {
        ChannelChange::Create => {
            if t.get_or_create_channel(channel).is_ok() && !here.exists {
                persist(nsqd, topic);
            }
        }
        ChannelChange::Delete => {
            if nsqd.delete_channel(&t, channel) {
                tracing::info!(topic = %topic, channel = %channel, "REPLICATION: channel deleted");
                persist(nsqd, topic);
            }
        }
        ChannelChange::Pause(paused) => {
            let Ok(ch) = t.get_or_create_channel(channel) else {
                return;
            };
            // A pause names a channel its group has: made here if missing.
            if ch.is_paused() != paused {
                ch.set_paused(paused);
                tracing::info!(topic = %topic, channel = %channel, paused, "REPLICATION: channel pause applied");
                persist(nsqd, topic);
            }
        }
        ChannelChange::Empty => {
            if let Some(ch) = t.get_channel(channel) {
                if let Err(e) = ch.empty() {
                    tracing::error!(topic = %topic, channel = %channel, error = %e, "REPLICATION: channel not emptied");
                }
            }
        }
        ChannelChange::Nothing(why) => {
            tracing::debug!(topic = %topic, channel = %channel, index, %why, "REPLICATION: channel entry changes nothing here");
        }
    }
}

/// A committed `TopicPause` or `TopicEmpty`: every member pauses or
/// unpauses the topic, so a member that gains the group delivers it as the
/// group decided, and `nsqd.dat` has it before the applier goes on (the
/// member that answered the client has persisted it); emptying drops the
/// topic's queue on the leader only (the others' topics hold none of it).
fn topic_entry(nsqd: &NsqdInner, index: u64, entry: &Entry, delivering: bool) {
    let name = entry.topic().unwrap_or_default();
    let t = nsqd.get_topic(name).filter(|t| t.replicas().is_some());
    let here = topic_entries::Here {
        replicated: t.is_some(),
        leads: delivering,
    };
    match (on_topic_entry(entry, here), t) {
        (TopicChange::Pause(paused), Some(t)) => {
            if t.is_paused() != paused {
                t.set_paused(paused);
                tracing::info!(topic = %name, paused, "REPLICATION: topic pause applied");
                persist(nsqd, name);
            }
        }
        (TopicChange::Empty, Some(t)) => {
            if let Err(e) = t.empty() {
                tracing::error!(topic = %name, error = %e, "REPLICATION: topic not emptied");
            }
        }
        (change, _) => {
            tracing::debug!(topic = %name, index, ?change, "REPLICATION: topic entry changes nothing here");
        }
    }
}

fn persist(nsqd: &NsqdInner, topic: &str) {
    if let Err(e) = nsqd.persist_metadata() {
        tracing::error!(topic = %topic, error = %e, "failed to persist metadata");
    }
}

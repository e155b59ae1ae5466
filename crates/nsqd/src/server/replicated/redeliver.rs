//! What a replicated topic's queues hold on this member, as its group's
//! leadership changes: while the member leads the group, its topics and
//! channels hold exactly what the group has not finished (the applier then
//! puts each new batch in as it applies it); while it does not, they hold
//! nothing (the log has it all). A member that gains a group empties its
//! topics and channels of the group and puts back what `core::progress`
//! says is unfinished, reading the bodies from the log; one that loses it
//! empties them. Owns that hand-over. Never: the rules of what is
//! unfinished (`core::progress`), or when leadership changes (the applier,
//! `replicated.rs`, calls [`follow`] between the entries it applies, so
//! what it puts back matches the log up to the last entry applied).
//!
//! A message put back is a new delivery: its attempts start again, and a
//! consumer that had it in flight on the old leader gets it again (a
//! duplicate, as NSQ allows). A DPUB's delay runs from its publish time:
//! one already due is delivered at once.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use nsq_protocol::{Message, MessageId};
use nsq_replication::committed::ReadError;
use nsq_replication::GroupId;

use super::groups::Groups;
use super::leadership::topics_of;
use crate::core::replicated::channel_entries::replicates;
use crate::core::replicated::entry::{Entry, Published};
use crate::core::replicated::progress::Pending;
use crate::server::clock::{now, now_unix_ns};
use crate::server::nsqd::NsqdInner;
use crate::server::topic::Topic;

/// How much of the log one read brings back.
const READ_BYTES: usize = 4 << 20;
/// Messages put into a queue at a time.
const PUT_BATCH: usize = 1024;

/// Whether this member's queues of `group` hold the group's unfinished
/// messages; None before the first look (a restart: its queues hold what
/// its disk queues kept, which the log decides on instead).
pub type Delivering = Option<bool>;

/// Brings the queues of `group`'s topics in line with this member's
/// leadership of it now, and returns where they stand. A member that leads
/// puts back only when `ready` (every committed entry of earlier terms
/// applied); until then its queues stay empty.
pub async fn follow(
    nsqd: &Arc<NsqdInner>,
    r: &Groups,
    group: GroupId,
    was: Delivering,
    ready: bool,
) -> Delivering {
    let leads = r.leads(group);
    if was == Some(leads) || (leads && !ready && was == Some(false)) {
        return was;
    }
    let leads = leads && ready;
    let topics = topics_of(nsqd, r, group);
    for t in &topics {
        empty(t);
    }
    if leads {
        let mut put = 0;
        for t in &topics {
            let n = put_back(r, group, t, None).await;
            r.count_put_back(&t.name, n as u64);
            put += n;
        }
        tracing::info!(
            group,
            topics = topics.len(),
            messages = put,
            "REPLICATION: leading group {group}; delivering what it has not finished"
        );
    } else if was.is_some() {
        tracing::info!(
            group,
            topics = topics.len(),
            "REPLICATION: not leading group {group}; its queues here emptied (the log keeps them)"
        );
    }
    Some(leads)
}

/// A committed `ChannelReset` on the member that delivers: the channel
/// drops what it holds (memory, in flight, deferred, its queue) and gets
/// what the group now says it has unfinished, as new deliveries (attempts
/// start over). The number of messages put.
pub async fn reset_channel(r: &Groups, group: GroupId, t: &Topic, channel: &str) -> usize {
    if let Some(ch) = t.get_channel(channel) {
        // FINs and requeue delays the finisher has not taken yet are of
        // deliveries before the reset: committed after it, they would
        // finish (or delay) messages the channel now gets again.
        drop((ch.take_finished(), ch.take_deferred()));
        if let Err(e) = ch.empty() {
            tracing::error!(topic = %t.name, channel, error = %e, "REPLICATION: channel not emptied for its reset");
        }
    }
    put_back(r, group, t, Some(channel)).await
}

/// Drops what the topic and its group's channels hold here (`#ephemeral`
/// channels are the leader's own, as in NSQ, and keep theirs).
fn empty(t: &Topic) {
    if let Err(e) = t.empty() {
        tracing::error!(topic = %t.name, error = %e, "REPLICATION: topic not emptied");
    }
    for ch in t.channels() {
        if replicates(t.replicas(), &ch.name) {
            if let Err(e) = ch.empty() {
                tracing::error!(topic = %t.name, channel = %ch.name, error = %e, "REPLICATION: channel not emptied");
            }
        }
    }
}

/// Where a batch's messages go back to: a channel by name, or None for
/// the topic itself (it holds them for channels to come).
type Target = Option<String>;

/// Puts back what `t`'s group has not finished; the number of messages
/// put. A topic or channel whose queue is kept in the log (this member
/// votes in the group: always, unless the topic was made here before its
/// group made it replicated) gets only the places, read when its turn
/// comes, so delivery starts at once; any other gets the messages, read
/// from the log now. So do the messages a consumer requeued with a delay
/// that has not run out (`Deferred` entries): they are deferred until due.
/// `only`: that channel's alone (a reset), not the topic's or another's.
async fn put_back(r: &Groups, group: GroupId, t: &Topic, only: Option<&str>) -> usize {
    let (Some(progress), Some(log)) = (r.progress(group), r.committed_log(group)) else {
        return 0;
    };
    let now_ms = now_unix_ns() / 1_000_000;
    let mut targets: Vec<(Target, Vec<Pending>, Dues)> = Vec::new();
    {
        let p = progress.lock();
        if only.is_none() {
            targets.push((None, p.held(&t.name).unwrap_or_default(), Dues::new()));
        }
        if let Some(tp) = p.topic(&t.name) {
            for (name, _) in tp.channels().filter(|(n, _)| only.is_none_or(|o| o == *n)) {
                let due = tp.due(name).into_iter().filter(|&(_, d)| d > now_ms);
                targets.push((
                    Some(name.to_string()),
                    p.unfinished(&t.name, name).unwrap_or_default(),
                    due.collect(),
                ));
            }
        }
    }
    let mut put = 0;
    // By log index, each target with the ids it takes of that batch.
    let mut wanted: BTreeMap<u64, Vec<(Target, Vec<MessageId>)>> = BTreeMap::new();
    let mut dues: BTreeMap<Target, Dues> = BTreeMap::new();
    for (target, pending, due) in targets {
        // Those not due yet are read now, to be deferred.
        let (later, soon): (Vec<Pending>, Vec<Pending>) = if due.is_empty() {
            (Vec::new(), pending)
        } else {
            let split = |keep: bool| {
                pending
                    .iter()
                    .map(|p| Pending {
                        index: p.index,
                        ids: p
                            .ids
                            .iter()
                            .filter(|id| due.contains_key(*id) == keep)
                            .copied()
                            .collect(),
                    })
                    .filter(|p| !p.ids.is_empty())
                    .collect()
            };
            (split(true), split(false))
        };
        let mut ids = soon.iter().flat_map(|p| p.ids.iter().copied());
        let placed = match &target {
            None => t.place_back(&mut ids),
            Some(name) => t.get_channel(name).and_then(|ch| ch.place_back(&mut ids)),
        };
        let eager = match placed {
            Some(n) => {
                put += n as usize;
                later
            }
            None => soon.into_iter().chain(later).collect(),
        };
        for Pending { index, ids } in eager {
            wanted.entry(index).or_default().push((target.clone(), ids));
        }
        dues.insert(target, due);
    }
    let mut queues: BTreeMap<Target, Vec<Published>> = BTreeMap::new();
    let (Some(&first), Some(&last)) = (wanted.keys().next(), wanted.keys().next_back()) else {
        return put;
    };
    let mut at = first;
    while at <= last {
        let chunk = match log.read(at, last + 1, READ_BYTES).await {
            Ok(c) => c,
            Err(e) => {
                // Never expected (nothing is purged above what a channel
                // needs, and all of it is committed): what cannot be read
                // is not delivered, and the log says so.
                let purged = matches!(e, ReadError::Purged { .. });
                tracing::error!(topic = %t.name, group, index = at, purged, error = %e, "REPLICATION: unfinished messages not read back; not delivered here");
                break;
            }
        };
        if chunk.next <= at {
            tracing::error!(topic = %t.name, group, index = at, "REPLICATION: unfinished messages above the committed index; not delivered here");
            break;
        }
        for (index, payload) in chunk.entries {
            let Some(targets) = wanted.remove(&index) else {
                continue;
            };
            let messages = match Entry::decode(payload) {
                Ok(Entry::Publish { messages, .. }) => messages,
                Ok(_) => {
                    tracing::error!(topic = %t.name, index, "REPLICATION: a batch's index holds no publish; skipped");
                    continue;
                }
                Err(e) => {
                    tracing::error!(topic = %t.name, index, error = %e, "REPLICATION: a batch not understood; skipped");
                    continue;
                }
            };
            for (target, ids) in targets {
                let keep: HashSet<MessageId> = ids.into_iter().collect();
                let q = queues.entry(target.clone()).or_default();
                for m in messages.iter().filter(|m| keep.contains(&m.id)) {
                    q.push(m.clone());
                    put += 1;
                }
                if q.len() >= PUT_BATCH {
                    flush(t, &target, std::mem::take(q), dues.get(&target));
                }
            }
        }
        // The next index wanted at or after where the log goes on.
        match wanted.range(chunk.next..).next() {
            Some((&i, _)) => at = i,
            None => break,
        }
    }
    for (target, q) in queues {
        flush(t, &target, q, dues.get(&target));
    }
    put
}

/// When messages a consumer requeued with a delay are due (Unix ms).
type Dues = BTreeMap<MessageId, i64>;

/// Puts `batch` into its target, each message deferred for what is left of
/// its requeue's delay (`dues`), else of its DPUB delay.
fn flush(t: &Topic, target: &Target, batch: Vec<Published>, dues: Option<&Dues>) {
    let now_ms = now_unix_ns() / 1_000_000;
    let mut at_once = Vec::new();
    let mut deferred = Vec::new();
    for m in batch {
        let requeued = dues.and_then(|d| d.get(&m.id)).copied();
        let due_ms = requeued.unwrap_or(m.timestamp / 1_000_000 + m.defer_ms as i64);
        // Copied: the body is a slice of a whole chunk read from the log,
        // which a message kept in memory would keep alive.
        let msg = Message::new(m.id, m.timestamp, Bytes::copy_from_slice(&m.body));
        match u64::try_from(due_ms - now_ms) {
            Ok(left) if (m.defer_ms > 0 || requeued.is_some()) && left > 0 => {
                deferred.push((msg, Duration::from_millis(left)))
            }
            _ => at_once.push(msg),
        }
    }
    put(t, target, at_once, None);
    for (msg, left) in deferred {
        put(t, target, vec![msg], Some(left));
    }
}

fn put(t: &Topic, target: &Target, msgs: Vec<Message>, defer: Option<Duration>) {
    if msgs.is_empty() {
        return;
    }
    match target {
        None => {
            if let Err(e) = t.publish_stamped(msgs, defer) {
                tracing::error!(topic = %t.name, error = %e, "REPLICATION: held messages not put back here");
            }
        }
        Some(name) => {
            let Some(ch) = t.get_channel(name) else {
                tracing::warn!(topic = %t.name, channel = %name, "REPLICATION: unfinished messages of a channel this member does not have; skipped");
                return;
            };
            let work = ch.put(msgs, defer, now());
            if let Err(e) = ch.carry_out(work, &mut Vec::new()) {
                tracing::error!(topic = %t.name, channel = %name, error = %e, "REPLICATION: unfinished messages not put back here");
            }
        }
    }
}

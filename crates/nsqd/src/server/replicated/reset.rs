//! Replay on a replicated topic (nsq-rs; docs/features/replay.md): a
//! channel's position moved back (or on) through its group. Owns both
//! ends of a `ChannelReset`: the member asked (`/channel/reset?to=`,
//! `/channel/create?start=`) resolves `to` into a log index, reading the
//! publish times of the topic's batches from its log, and commits the
//! entry; every member applying it first reads back from its log the
//! batches its progress forgot and the reset needs, and the member that
//! delivers then puts the channel's messages back as new deliveries. And a
//! topic's `retention=`, committed as its `Retention` entry. Never: the
//! rules of where a reset lands or what the log keeps
//! (`core::replicated::progress_retention`).

use std::sync::Arc;

use nsq_replication::committed::CommittedLog;
use nsq_replication::GroupId;

use super::groups::Groups;
use super::redeliver;
use super::topics::replicas_of;
use crate::core::replicated::entry::Entry;
use crate::core::replicated::replay::{ResetTo, RetentionSpec};
use crate::server::cluster::{Refused, Reset, ResetAnswer};
use crate::server::nsqd::NsqdInner;

/// How much of the log a scan or a recall reads at once.
const READ_BYTES: usize = 4 << 20;

/// Resolves and commits `reset` (see the module docs).
pub async fn propose(nsqd: &NsqdInner, r: &Groups, reset: Reset) -> Result<ResetAnswer, Refused> {
    let to = ResetTo::parse(&reset.to).map_err(|e| Refused::Invalid(e.to_string()))?;
    let replicas = replicas_of(nsqd, &reset.topic);
    let group = r.group_of(&reset.topic, replicas);
    let (Some(progress), Some(log)) = (r.progress(group), r.committed_log(group)) else {
        return Err(Refused::Unavailable(format!(
            "REPLAY_NOT_HERE this nsqd does not vote in topic {}'s group: ask one that does (GET /stats shows its replicas)",
            reset.topic
        )));
    };
    let (has_retention, kept, scan) = {
        let p = progress.lock();
        let next = p.applied().map_or(0, |a| a + 1);
        let Some(t) = p.topic(&reset.topic) else {
            return Err(Refused::NotFound("TOPIC_NOT_FOUND"));
        };
        let scan = match (to, t.retention()) {
            (ResetTo::Time(ns), Some(r)) => r.scan_from(ns),
            _ => t.kept_from(next),
        };
        (t.retention().is_some(), t.kept_from(next), scan)
    };
    if !has_retention && to != ResetTo::Latest {
        return Err(Refused::Invalid(format!(
            "RETENTION_NOT_SET topic {} keeps no finished messages to replay: set a retention first (POST /topic/config?topic={}&retention=24h), then messages published after it can be replayed",
            reset.topic, reset.topic
        )));
    }
    let earliest = first_publish(log, &reset.topic, kept, |_| true).await?;
    let answer = match to {
        ResetTo::Latest => ResetAnswer {
            index: u64::MAX,
            ..ResetAnswer::default()
        },
        ResetTo::Earliest => ResetAnswer {
            index: 0,
            from_ns: earliest.map(|(_, ns)| ns),
            before_retention: false,
        },
        ResetTo::Time(ns) if earliest.is_some_and(|(_, first)| ns < first) => ResetAnswer {
            index: 0,
            from_ns: earliest.map(|(_, ns)| ns),
            before_retention: true,
        },
        ResetTo::Time(ns) => match first_publish(log, &reset.topic, scan, |t| t >= ns).await? {
            Some((index, from)) => ResetAnswer {
                index,
                from_ns: Some(from),
                before_retention: false,
            },
            // Nothing published since: the channel gets what comes next.
            None => ResetAnswer {
                index: u64::MAX,
                ..ResetAnswer::default()
            },
        },
    };
    let entry = Entry::ChannelReset {
        topic: reset.topic.clone(),
        channel: reset.channel.clone(),
        to: answer.index,
        only_new: reset.only_new,
    };
    r.commit(replicas, &entry).await.map_err(|e| {
        tracing::warn!(topic = %reset.topic, channel = %reset.channel, error = e.detail(), "replicated channel reset not committed");
        Refused::Unavailable(e.to_string())
    })?;
    tracing::info!(topic = %reset.topic, channel = %reset.channel, to = %reset.to, index = answer.index, "REPLICATION: channel reset committed");
    Ok(answer)
}

/// The first batch of `topic` at or after log index `from` whose publish
/// time (its first message's, ns) passes `wanted`: its index and time.
async fn first_publish(
    log: &CommittedLog,
    topic: &str,
    from: u64,
    wanted: impl Fn(i64) -> bool,
) -> Result<Option<(u64, i64)>, Refused> {
    let Some(last) = log.committed() else {
        return Ok(None);
    };
    let mut at = from;
    while at <= last {
        let chunk = log
            .read(at, last + 1, READ_BYTES)
            .await
            .map_err(|e| Refused::Unavailable(format!("REPLAY_LOG_UNREADABLE {e}")))?;
        if chunk.next <= at {
            break;
        }
        for (index, payload) in chunk.entries {
            if let Ok(Entry::Publish { topic: t, messages }) = Entry::decode(payload) {
                match messages.first() {
                    Some(m) if t == topic && wanted(m.timestamp) => {
                        return Ok(Some((index, m.timestamp)))
                    }
                    _ => {}
                }
            }
        }
        at = chunk.next;
    }
    Ok(None)
}

/// A committed `ChannelReset` at `index` (see the module docs).
pub async fn apply_reset(
    nsqd: &Arc<NsqdInner>,
    r: &Groups,
    group: GroupId,
    index: u64,
    entry: &Entry,
    delivering: bool,
) {
    let Entry::ChannelReset {
        topic,
        channel,
        only_new,
        ..
    } = entry
    else {
        return;
    };
    let (Some(progress), Some(log)) = (r.progress(group), r.committed_log(group)) else {
        return;
    };
    let (needs, existed) = {
        let p = progress.lock();
        let existed = p.topic(topic).is_some_and(|t| t.channel(channel).is_some());
        (p.reset_needs(index, entry), existed)
    };
    if let Some(range) = needs {
        if let Err(e) = recall(log, progress, topic, range.clone()).await {
            // Not expected: the log keeps the topic's kept part. What was
            // not read back is not replayed.
            tracing::error!(topic = %topic, channel = %channel, index, from = range.start, error = %e, "REPLICATION: batches of a reset not read back; not replayed");
        }
    }
    progress.lock().apply(index, entry);
    let Some(t) = nsqd.get_topic(topic).filter(|t| t.replicas().is_some()) else {
        return;
    };
    if t.get_channel(channel).is_none() {
        if t.get_or_create_channel(channel).is_err() {
            return;
        }
        if let Err(e) = nsqd.persist_metadata() {
            tracing::error!(topic = %topic, error = %e, "failed to persist metadata");
        }
    }
    if existed && *only_new {
        return;
    }
    if delivering {
        let n = redeliver::reset_channel(r, group, &t, channel).await;
        tracing::info!(topic = %topic, channel = %channel, index, messages = n, "REPLICATION: channel reset; delivering its messages again");
    }
}

/// Reads the batches of `topic` in `range` back from the log into the
/// group's progress.
async fn recall(
    log: &CommittedLog,
    progress: &parking_lot::Mutex<crate::core::replicated::progress::Progress>,
    topic: &str,
    range: std::ops::Range<u64>,
) -> Result<(), nsq_replication::committed::ReadError> {
    let mut at = range.start;
    while at < range.end {
        let chunk = log.read(at, range.end, READ_BYTES).await?;
        if chunk.next <= at {
            break;
        }
        let mut p = progress.lock();
        for (index, payload) in chunk.entries {
            if let Ok(Entry::Publish { topic: t, messages }) = Entry::decode(payload) {
                if t == topic {
                    p.recall(topic, index, messages.iter().map(|m| m.id).collect());
                }
            }
        }
        drop(p);
        at = chunk.next;
    }
    Ok(())
}

/// `retention=` of a replicated topic: checked, then its `Retention`
/// entry.
pub fn retention_entry(topic: String, retention: &str) -> Result<Entry, Refused> {
    let spec = RetentionSpec::parse(retention).map_err(|e| Refused::Invalid(e.to_string()))?;
    Ok(Entry::Retention {
        topic,
        age_ms: spec.age_ms,
        bytes: spec.bytes,
    })
}

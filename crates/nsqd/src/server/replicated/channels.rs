//! A replicated topic's channel made by a SUB: the SUB on the group's
//! leader makes the channel here at once, as NSQ does, and proposes its
//! `ChannelCreate` in the background, so every member gets the channel
//! without the SUB waiting for a commit (a failed proposal is logged, and
//! the next SUB to the channel proposes again). Owns which proposals are
//! under way, so two SUBs racing for a new channel propose it once. Whether
//! the group has the channel already is its progress's to say (a
//! `ChannelCreate` or `ChannelPause` of it applied here); when a SUB
//! proposes is the core's rule (`channel_entries::sub_proposes`).

use std::collections::HashSet;
use std::sync::Arc;

use parking_lot::Mutex;

use super::groups::Groups;
use crate::core::replicated::channel_entries::{sub_proposes, Commit};
use crate::core::replicated::entry::Entry;
use crate::server::context::Context;

/// The `ChannelCreate` proposals under way from this member, by topic and
/// channel.
#[derive(Default)]
pub struct Proposals(Mutex<HashSet<(String, String)>>);

impl Proposals {
    /// Claims the proposal of the channel's `ChannelCreate`: false when
    /// one is under way. [`Proposals::end`] gives it back.
    fn begin(&self, topic: &str, channel: &str) -> bool {
        self.0
            .lock()
            .insert((topic.to_string(), channel.to_string()))
    }

    fn end(&self, topic: &str, channel: &str) {
        self.0
            .lock()
            .remove(&(topic.to_string(), channel.to_string()));
    }

    fn under_way(&self, topic: &str, channel: &str) -> bool {
        self.0
            .lock()
            .contains(&(topic.to_string(), channel.to_string()))
    }
}

/// Whether the group has the channel: its progress here has applied a
/// `ChannelCreate` (or a `ChannelPause`) of it.
fn committed(r: &Groups, topic: &str, replicas: u8, channel: &str) -> bool {
    r.progress(r.group_of(topic, replicas)).is_some_and(|p| {
        p.lock()
            .topic(topic)
            .is_some_and(|t| t.channel(channel).is_some())
    })
}

/// Where a replicated topic's channel stands on this member, as a SUB
/// sees it.
fn standing(committed: bool, proposals: &Proposals, topic: &str, channel: &str) -> Commit {
    if committed {
        Commit::Committed
    } else if proposals.under_way(topic, channel) {
        Commit::Proposing
    } else {
        Commit::Local
    }
}

/// A client subscribed to `channel` of the replicated `topic` here:
/// proposes the channel's `ChannelCreate` in the background when the group
/// does not have it yet and no proposal is under way.
pub fn subscribed(
    r: &Arc<Groups>,
    proposals: &Arc<Proposals>,
    ctx: &Context,
    topic: &str,
    replicas: u8,
    channel: &str,
) {
    let here = committed(r, topic, replicas, channel);
    let now = standing(here, proposals, topic, channel);
    if !sub_proposes(Some(replicas), channel, now) || !proposals.begin(topic, channel) {
        return;
    }
    let (r, proposals) = (r.clone(), proposals.clone());
    let (topic, channel) = (topic.to_string(), channel.to_string());
    let cancel = ctx.cancel.clone();
    ctx.tasks.spawn(async move {
        let entry = Entry::ChannelCreate {
            topic: topic.clone(),
            channel: channel.clone(),
        };
        let result = tokio::select! {
            // nsqd's shutdown does not wait out a commit.
            _ = cancel.cancelled() => return,
            res = r.commit(replicas, &entry) => res,
        };
        // Committed: applied here by now (or soon: a second proposal then
        // changes nothing); failed: the next SUB proposes again.
        proposals.end(&topic, &channel);
        if let Err(e) = result {
            tracing::warn!(
                topic = %topic,
                channel = %channel,
                error = e.detail(),
                "REPLICATION: channel made by a SUB not committed to its group; the next SUB proposes it again"
            );
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_proposal_at_a_time_and_committed_stays() {
        let p = Proposals::default();
        assert_eq!(standing(false, &p, "t", "c"), Commit::Local);
        assert!(p.begin("t", "c"));
        assert!(!p.begin("t", "c"), "a second SUB does not propose again");
        assert_eq!(standing(false, &p, "t", "c"), Commit::Proposing);
        assert_eq!(
            standing(false, &p, "t", "other"),
            Commit::Local,
            "per channel"
        );
        p.end("t", "c");
        assert_eq!(standing(false, &p, "t", "c"), Commit::Local);
        assert!(p.begin("t", "c"), "after a failure the next SUB proposes");
        assert_eq!(
            standing(true, &p, "t", "c"),
            Commit::Committed,
            "the group's word stands over a proposal under way"
        );
        p.end("t", "c");
        assert_eq!(standing(true, &p, "t", "c"), Commit::Committed);
        assert!(
            !sub_proposes(Some(3), "c", standing(true, &p, "t", "c")),
            "a committed channel is not proposed"
        );
    }
}

//! The ids a channel of a replicated topic finished, and those its
//! consumers requeued with a delay, kept for its group: the leader
//! proposes them as `Finished` and `Deferred` entries
//! (`server::finisher`), so a member that gains the group does not deliver
//! the first again, nor the others before they are due. A child of
//! [`super`]; off for every other channel, which keeps nothing.
//!
//! Only FINs count: a message sent to the dead-letter topic may come back
//! (the publish can be refused), and one the group thinks unfinished is at
//! worst delivered twice after a failover, never lost.

use nsq_protocol::names::is_ephemeral;
use nsq_protocol::MessageId;

use super::Channel;

/// Whether a channel of a topic with `replicas` (None: unreplicated) goes
/// through the topic's group, and so keeps its FINs here. `#ephemeral`
/// channels do not: they keep nothing and go with their last consumer,
/// who is on the leader only, so a copy on the other members would never
/// be removed.
pub fn replicates(replicas: Option<u8>, channel: &str) -> bool {
    replicas.is_some() && !is_ephemeral(channel)
}

impl Channel {
    /// Keeps the ids of FINs from now on, until taken.
    pub fn record_finished(&mut self) {
        self.finished.get_or_insert_with(Vec::new);
        self.deferrals.get_or_insert_with(Vec::new);
    }

    /// Keeps that message `id` was requeued with a delay and is due at
    /// `due_ms` (Unix ms), when recording.
    pub fn record_deferred(&mut self, id: MessageId, due_ms: i64) {
        if let Some(d) = self.deferrals.as_mut() {
            d.push((id, due_ms));
        }
    }

    /// The messages requeued with a delay since the last call, with when
    /// each is due, oldest first.
    pub fn take_deferred(&mut self) -> Vec<(MessageId, i64)> {
        match self.deferrals.as_mut() {
            Some(d) => std::mem::take(d),
            None => Vec::new(),
        }
    }

    /// The ids finished since the last call (nothing when not recording).
    pub fn take_finished(&mut self) -> Vec<MessageId> {
        match self.finished.as_mut() {
            Some(ids) => std::mem::take(ids),
            None => Vec::new(),
        }
    }
}

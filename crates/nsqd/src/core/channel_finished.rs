//! The ids a channel of a replicated topic finished, kept for its group:
//! the leader proposes them as `Finished` entries (`server::finisher`), so
//! a member that gains the group does not deliver them again. A child of
//! [`super`]; off for every other channel, which keeps nothing.
//!
//! Only FINs count: a message sent to the dead-letter topic may come back
//! (the publish can be refused), and one the group thinks unfinished is at
//! worst delivered twice after a failover, never lost.

use nsq_protocol::MessageId;

use super::Channel;

impl Channel {
    /// Keeps the ids of FINs from now on, until taken.
    pub fn record_finished(&mut self) {
        self.finished.get_or_insert_with(Vec::new);
    }

    /// The ids finished since the last call (nothing when not recording).
    pub fn take_finished(&mut self) -> Vec<MessageId> {
        match self.finished.as_mut() {
            Some(ids) => std::mem::take(ids),
            None => Vec::new(),
        }
    }
}

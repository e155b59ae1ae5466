//! Whether a replicated topic's channel is committed by the topic's Raft
//! group (`core::channel_entries::Commit`), held in one atomic beside the
//! channel so a SUB reads it without the channel's lock and two SUBs racing
//! for a new channel propose its `ChannelCreate` once. Never: proposing
//! (the SUB does, `tcp/subscribe.rs`) or applying (`replicated.rs`).

use std::sync::atomic::{AtomicU8, Ordering};

use crate::core::channel_entries::Commit;

/// A channel's [`Commit`]; `Local` until a `ChannelCreate` is applied.
#[derive(Debug)]
pub struct CommitState(AtomicU8);

impl Default for CommitState {
    fn default() -> CommitState {
        CommitState(AtomicU8::new(Commit::Local as u8))
    }
}

impl CommitState {
    pub fn get(&self) -> Commit {
        match self.0.load(Ordering::Acquire) {
            x if x == Commit::Committed as u8 => Commit::Committed,
            x if x == Commit::Proposing as u8 => Commit::Proposing,
            _ => Commit::Local,
        }
    }

    /// A `ChannelCreate` of the channel was applied here.
    pub fn committed(&self) {
        self.0.store(Commit::Committed as u8, Ordering::Release);
    }

    /// Claims the proposal of the channel's `ChannelCreate`: false when
    /// another SUB has it or it is committed. [`CommitState::failed`] gives
    /// it back.
    pub fn begin(&self) -> bool {
        self.0
            .compare_exchange(
                Commit::Local as u8,
                Commit::Proposing as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }

    /// The proposal failed: a later SUB proposes again, unless the channel
    /// was committed meanwhile (by another proposal).
    pub fn failed(&self) {
        let _ = self.0.compare_exchange(
            Commit::Proposing as u8,
            Commit::Local as u8,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_proposal_at_a_time_and_committed_stays() {
        let s = CommitState::default();
        assert_eq!(s.get(), Commit::Local);
        assert!(s.begin());
        assert!(!s.begin(), "a second SUB does not propose again");
        assert_eq!(s.get(), Commit::Proposing);
        s.failed();
        assert_eq!(s.get(), Commit::Local);
        assert!(s.begin());
        s.committed();
        s.failed();
        assert_eq!(s.get(), Commit::Committed, "a late failure changes nothing");
        assert!(!s.begin());
    }
}

//! The channels of a replicated topic as its Raft group decides them:
//! which channels go through the group (`replicates`), whether a SUB that
//! finds a channel here proposes its `ChannelCreate` (`sub_proposes`), and
//! what applying a committed `ChannelCreate`, `ChannelDelete`,
//! `ChannelPause` or `ChannelEmpty` changes on this member
//! (`on_channel_entry`). Never: Raft, the disk or the clients
//! (`crate::server::replicated` does what the answer says, and the HTTP and
//! TCP handlers propose). Unreplicated topics never come here: their
//! channels are NSQ's. Design: docs/replication.md, "Channels on a
//! replicated topic".
//!
//! Every answer is idempotent: applying an entry twice leaves what applying
//! it once left, because a group applies its whole log again after a
//! restart.

use nsq_protocol::names::{is_ephemeral, is_valid_channel_name};

use super::entry::Entry;

/// Whether a channel of a topic with `replicas` goes through the topic's
/// group: the channels that keep their FINs for it
/// (`crate::core::channel::replicates`, the plain core's side of this
/// rule).
pub use crate::core::channel::replicates;

/// Where a replicated channel stands on this member, as a SUB sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commit {
    /// Made here (a SUB on the leader) and not yet known to be committed.
    Local,
    /// Its `ChannelCreate` is being proposed from here.
    Proposing,
    /// A `ChannelCreate` of it was applied here: every member has it.
    Committed,
}

/// Whether a SUB that found (or made) a channel here proposes its
/// `ChannelCreate` in the background: once per channel not yet committed,
/// again by a later SUB when a proposal failed (it went back to `Local`).
pub fn sub_proposes(replicas: Option<u8>, channel: &str, commit: Commit) -> bool {
    replicates(replicas, channel) && commit == Commit::Local
}

/// The channel named by an entry, as this member has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Here {
    /// The channel exists here.
    pub exists: bool,
    /// This member leads the topic's group (the one that delivers).
    pub leads: bool,
}

/// What applying a channel entry does here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelChange {
    /// The channel exists here (made if missing) and is marked committed.
    Create,
    /// The channel is deleted here with its queue and consumers.
    Delete,
    /// The channel exists here (made if missing), paused or not.
    Pause(bool),
    /// The channel's messages are dropped here (memory, in flight,
    /// deferred and its queue).
    Empty,
    /// Nothing changes here.
    Nothing(Skip),
}

/// Why applying an entry changes nothing here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// Not a channel entry.
    NotChannel,
    /// A name no channel may have (the proposer checked it: an entry that
    /// breaks it came from elsewhere).
    InvalidName,
    /// An `#ephemeral` channel: never replicated ([`replicates`]).
    Ephemeral,
    /// Deleting or emptying a channel this member does not have.
    Missing,
    /// Emptying on a member that does not deliver: its channel holds no
    /// messages of the topic (only the leader puts them); the position of
    /// each channel in the log (`Finished`) is the next increment.
    NotLeading,
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Skip::NotChannel => "not a channel entry",
            Skip::InvalidName => "invalid channel name",
            Skip::Ephemeral => "ephemeral channels are not replicated",
            Skip::Missing => "no such channel here",
            Skip::NotLeading => "this member does not deliver the topic",
        })
    }
}

/// What applying `entry` changes on this member, where its channel is as
/// `here` says.
///
/// A `ChannelPause` makes a missing channel: its proposer had the channel
/// (it checks before proposing), so a member without it missed the
/// `ChannelCreate` (one a SUB proposed that failed), and the group's word
/// is that the channel exists, paused or not.
pub fn on_channel_entry(entry: &Entry, here: Here) -> ChannelChange {
    let (channel, change) = match entry {
        Entry::ChannelCreate { channel, .. } => (channel, ChannelChange::Create),
        Entry::ChannelDelete { channel, .. } => (channel, ChannelChange::Delete),
        Entry::ChannelPause {
            channel, paused, ..
        } => (channel, ChannelChange::Pause(*paused)),
        Entry::ChannelEmpty { channel, .. } => (channel, ChannelChange::Empty),
        _ => return ChannelChange::Nothing(Skip::NotChannel),
    };
    if !is_valid_channel_name(channel) {
        return ChannelChange::Nothing(Skip::InvalidName);
    }
    if is_ephemeral(channel) {
        return ChannelChange::Nothing(Skip::Ephemeral);
    }
    match change {
        ChannelChange::Delete | ChannelChange::Empty if !here.exists => {
            ChannelChange::Nothing(Skip::Missing)
        }
        ChannelChange::Empty if !here.leads => ChannelChange::Nothing(Skip::NotLeading),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create(c: &str) -> Entry {
        Entry::ChannelCreate {
            topic: "t".into(),
            channel: c.into(),
        }
    }
    fn delete(c: &str) -> Entry {
        Entry::ChannelDelete {
            topic: "t".into(),
            channel: c.into(),
        }
    }
    fn pause(c: &str, paused: bool) -> Entry {
        Entry::ChannelPause {
            topic: "t".into(),
            channel: c.into(),
            paused,
        }
    }
    fn empty(c: &str) -> Entry {
        Entry::ChannelEmpty {
            topic: "t".into(),
            channel: c.into(),
            up_to: 7,
        }
    }

    const EVERYWHERE: [Here; 4] = [
        Here {
            exists: false,
            leads: false,
        },
        Here {
            exists: false,
            leads: true,
        },
        Here {
            exists: true,
            leads: false,
        },
        Here {
            exists: true,
            leads: true,
        },
    ];

    #[test]
    fn only_durable_channels_of_replicated_topics_go_through_the_group() {
        assert!(replicates(Some(3), "c"));
        assert!(replicates(Some(1), "c"));
        assert!(!replicates(None, "c"), "an unreplicated topic is NSQ's");
        assert!(!replicates(Some(3), "c#ephemeral"));
    }

    #[test]
    fn a_sub_proposes_once_per_channel_not_yet_committed() {
        assert!(sub_proposes(Some(3), "c", Commit::Local));
        assert!(!sub_proposes(Some(3), "c", Commit::Proposing));
        assert!(!sub_proposes(Some(3), "c", Commit::Committed));
        assert!(!sub_proposes(None, "c", Commit::Local));
        assert!(!sub_proposes(Some(3), "c#ephemeral", Commit::Local));
    }

    #[test]
    fn create_and_pause_hold_on_every_member_whether_or_not_it_has_the_channel() {
        for here in EVERYWHERE {
            assert_eq!(
                on_channel_entry(&create("c"), here),
                ChannelChange::Create,
                "{here:?}"
            );
            assert_eq!(
                on_channel_entry(&pause("c", true), here),
                ChannelChange::Pause(true)
            );
            assert_eq!(
                on_channel_entry(&pause("c", false), here),
                ChannelChange::Pause(false)
            );
        }
    }

    #[test]
    fn delete_removes_the_channel_wherever_it_is() {
        for here in EVERYWHERE {
            let want = if here.exists {
                ChannelChange::Delete
            } else {
                ChannelChange::Nothing(Skip::Missing)
            };
            assert_eq!(on_channel_entry(&delete("c"), here), want, "{here:?}");
        }
    }

    #[test]
    fn empty_drops_messages_on_the_leader_only() {
        let at = |exists, leads| on_channel_entry(&empty("c"), Here { exists, leads });
        assert_eq!(at(true, true), ChannelChange::Empty);
        assert_eq!(at(true, false), ChannelChange::Nothing(Skip::NotLeading));
        assert_eq!(at(false, true), ChannelChange::Nothing(Skip::Missing));
        assert_eq!(at(false, false), ChannelChange::Nothing(Skip::Missing));
    }

    #[test]
    fn ephemeral_and_invalid_names_and_other_entries_change_nothing() {
        for here in EVERYWHERE {
            for e in [
                create("c#ephemeral"),
                delete("c#ephemeral"),
                pause("c#ephemeral", true),
                empty("c#ephemeral"),
            ] {
                assert_eq!(
                    on_channel_entry(&e, here),
                    ChannelChange::Nothing(Skip::Ephemeral),
                    "{e:?}"
                );
            }
            for e in [create(""), delete("a b"), pause(&"x".repeat(65), true)] {
                assert_eq!(
                    on_channel_entry(&e, here),
                    ChannelChange::Nothing(Skip::InvalidName),
                    "{e:?}"
                );
            }
            let other = Entry::TopicDelete { topic: "t".into() };
            assert_eq!(
                on_channel_entry(&other, here),
                ChannelChange::Nothing(Skip::NotChannel)
            );
        }
    }

    #[test]
    fn applying_twice_is_applying_once() {
        // What the first application leaves (the channel there, or gone) is
        // the `Here` of the second: the answer leaves it unchanged.
        for leads in [false, true] {
            let after_create = Here {
                exists: true,
                leads,
            };
            assert_eq!(
                on_channel_entry(&create("c"), after_create),
                ChannelChange::Create
            );
            let after_delete = Here {
                exists: false,
                leads,
            };
            assert_eq!(
                on_channel_entry(&delete("c"), after_delete),
                ChannelChange::Nothing(Skip::Missing)
            );
        }
    }
}

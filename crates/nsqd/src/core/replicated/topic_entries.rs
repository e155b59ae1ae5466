//! What applying a committed `TopicPause` or `TopicEmpty` changes on this
//! member (`on_topic_entry`): a replicated topic is paused and unpaused on
//! every member, so a member that gains its group delivers it (or not) as
//! the group decided; it is emptied only where it holds messages, the
//! leader, as `ChannelEmpty` is. Never: Raft, the disk or the topics
//! themselves (`crate::server::replicated` does what the answer says, and
//! the HTTP handlers propose). Unreplicated topics never come here: their
//! pause and empty are NSQ's. Design: docs/replication.md, "Topic pause
//! and empty".
//!
//! Every answer is idempotent: a group applies its whole log again after
//! a restart.

use super::entry::Entry;

/// The topic named by an entry, as this member has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Here {
    /// The topic exists here and is replicated.
    pub replicated: bool,
    /// This member leads the topic's group (the one that delivers).
    pub leads: bool,
}

/// What applying a topic entry does here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicChange {
    /// The topic is paused (true) or unpaused here, and `nsqd.dat` says so.
    Pause(bool),
    /// The topic's own queue (memory and disk) is dropped here.
    Empty,
    /// Nothing changes here.
    Nothing(Skip),
}

/// Why applying a topic entry changes nothing here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// Not a `TopicPause` or `TopicEmpty`.
    NotTopic,
    /// The topic is not here, or is unreplicated here (deleted later in a
    /// log applied again after a restart, or one of the same name made
    /// outside the group): not the group's to change.
    NotReplicated,
    /// Emptying on a member that does not deliver: its topic holds none
    /// of the group's messages (only the leader puts them).
    NotLeading,
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Skip::NotTopic => "not a topic pause or empty",
            Skip::NotReplicated => "no such replicated topic here",
            Skip::NotLeading => "this member does not deliver the topic",
        })
    }
}

/// What applying `entry` changes on this member, where its topic is as
/// `here` says.
pub fn on_topic_entry(entry: &Entry, here: Here) -> TopicChange {
    let change = match entry {
        Entry::TopicPause { paused, .. } => TopicChange::Pause(*paused),
        Entry::TopicEmpty { .. } => TopicChange::Empty,
        _ => return TopicChange::Nothing(Skip::NotTopic),
    };
    match change {
        _ if !here.replicated => TopicChange::Nothing(Skip::NotReplicated),
        TopicChange::Empty if !here.leads => TopicChange::Nothing(Skip::NotLeading),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pause(paused: bool) -> Entry {
        Entry::TopicPause {
            topic: "t".into(),
            paused,
        }
    }

    fn empty() -> Entry {
        Entry::TopicEmpty { topic: "t".into() }
    }

    const EVERY_HERE: [Here; 4] = [
        Here {
            replicated: true,
            leads: true,
        },
        Here {
            replicated: true,
            leads: false,
        },
        Here {
            replicated: false,
            leads: true,
        },
        Here {
            replicated: false,
            leads: false,
        },
    ];

    #[test]
    fn a_pause_applies_on_every_member_that_has_the_topic() {
        for here in EVERY_HERE {
            for p in [true, false] {
                let want = if here.replicated {
                    TopicChange::Pause(p)
                } else {
                    TopicChange::Nothing(Skip::NotReplicated)
                };
                assert_eq!(on_topic_entry(&pause(p), here), want, "{here:?}");
            }
        }
    }

    #[test]
    fn an_empty_applies_on_the_leader_only() {
        let want = |h: Here| match (h.replicated, h.leads) {
            (false, _) => TopicChange::Nothing(Skip::NotReplicated),
            (true, false) => TopicChange::Nothing(Skip::NotLeading),
            (true, true) => TopicChange::Empty,
        };
        for here in EVERY_HERE {
            assert_eq!(on_topic_entry(&empty(), here), want(here), "{here:?}");
        }
    }

    #[test]
    fn other_entries_are_not_topic_entries() {
        let e = Entry::ChannelPause {
            topic: "t".into(),
            channel: "c".into(),
            paused: true,
        };
        assert_eq!(
            on_topic_entry(&e, EVERY_HERE[0]),
            TopicChange::Nothing(Skip::NotTopic)
        );
        assert_eq!(
            Skip::NotLeading.to_string(),
            "this member does not deliver the topic"
        );
    }
}

//! Who serves a replicated topic to consumers: only the member that leads
//! the topic's Raft group registers it (and its channels) with the
//! lookupds and accepts SUBs to it, so consumers that find it through
//! lookupd reach the one member that delivers it. Owns the decisions:
//! whether a topic is registered here, what a SUB here is answered, and
//! which changes of a group's leadership, as this member saw them, gain or
//! lose it the topics. Never: Raft, the lookupd connections or the clients
//! (`crate::server::leadership` does that I/O). Unreplicated topics are
//! always served, as in NSQ. Design: docs/replication.md, "Who serves a
//! replicated topic".

/// A group's leader as this member sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leader {
    /// This nsqd is not a member of a replication cluster (a replicated
    /// topic kept in `nsqd.dat` by an nsqd restarted without the flags).
    NotMember,
    /// This member leads the group.
    Here,
    /// Another member does: its node id.
    Node(u64),
    /// No leader is known (an election is under way, or no majority).
    None,
}

impl std::fmt::Display for Leader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Leader::NotMember => f.write_str("not a member"),
            Leader::Here => f.write_str("led here"),
            Leader::Node(n) => write!(f, "led by node {n}"),
            Leader::None => f.write_str("no leader"),
        }
    }
}

/// Whether this nsqd registers a topic with the lookupds: every
/// unreplicated topic (NSQ's behaviour), a replicated one only where its
/// group is led.
pub fn registers(replicas: Option<u8>, leader: Leader) -> bool {
    replicas.is_none() || leader == Leader::Here
}

/// Why a SUB to `topic` is refused here (the text after `E_SUB_FAILED `),
/// or None when it is served. `address` is the leader's TCP address for
/// consumers, as its `Serving` entry told this member (None in the moment
/// between a leader's election and that entry reaching this member).
pub fn sub_refusal(
    topic: &str,
    replicas: Option<u8>,
    leader: Leader,
    address: Option<&str>,
) -> Option<String> {
    match (replicas, leader) {
        (None, _) | (Some(_), Leader::Here) => None,
        (Some(_), Leader::Node(n)) => Some(match address {
            Some(a) => format!("SUB topic {topic} is led by node {n} ({a})"),
            None => format!("SUB topic {topic} is led by node {n}"),
        }),
        (Some(_), Leader::None) => Some(format!("SUB topic {topic} has no leader")),
        (Some(_), Leader::NotMember) => Some(format!(
            "SUB topic {topic} is replicated and this nsqd is not a replication member"
        )),
    }
}

/// One look at a group's leadership: the Raft term and whether this
/// member led it in that term.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub term: u64,
    pub leads: bool,
}

/// What a new look at a group's leadership asks of this member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// It leads now: register the group's replicated topics and channels.
    Gained,
    /// It does not lead now and may have since the last look: unregister
    /// them and close their consumers' connections.
    Lost,
}

/// Compares two looks at a group (`before` None for the first). The looks
/// are samples: leadership may have come and gone between two of them
/// (a SUB accepted then). A member leads at most once per term, so a later
/// term without leadership counts as a loss even when neither look saw it
/// lead; unregistering what is not registered and closing no consumer
/// cost nothing.
pub fn change(before: Option<Seen>, now: Seen) -> Option<Change> {
    match before {
        None => now.leads.then_some(Change::Gained),
        Some(b) if now.leads => (!b.leads || now.term != b.term).then_some(Change::Gained),
        Some(b) => (b.leads || now.term > b.term).then_some(Change::Lost),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(term: u64, leads: bool) -> Seen {
        Seen { term, leads }
    }

    #[test]
    fn unreplicated_topics_are_always_registered() {
        for l in [
            Leader::NotMember,
            Leader::Here,
            Leader::Node(2),
            Leader::None,
        ] {
            assert!(registers(None, l), "{l:?}");
            assert_eq!(sub_refusal("t", None, l, Some("h:1")), None, "{l:?}");
        }
    }

    #[test]
    fn a_replicated_topic_is_registered_only_by_its_groups_leader() {
        assert!(registers(Some(3), Leader::Here));
        assert!(!registers(Some(3), Leader::Node(2)));
        assert!(!registers(Some(3), Leader::None));
        assert!(!registers(Some(1), Leader::NotMember));
    }

    #[test]
    fn a_sub_away_from_the_leader_names_it() {
        assert_eq!(sub_refusal("orders", Some(3), Leader::Here, None), None);
        assert_eq!(
            sub_refusal("orders", Some(3), Leader::Node(7), Some("10.0.0.7:4150")).as_deref(),
            Some("SUB topic orders is led by node 7 (10.0.0.7:4150)")
        );
        // Its address not known here yet: the node id alone.
        assert_eq!(
            sub_refusal("orders", Some(3), Leader::Node(7), None).as_deref(),
            Some("SUB topic orders is led by node 7")
        );
        assert_eq!(
            sub_refusal("orders", Some(3), Leader::None, Some("h:1")).as_deref(),
            Some("SUB topic orders has no leader")
        );
        assert!(sub_refusal("orders", Some(3), Leader::NotMember, None)
            .is_some_and(|s| s.starts_with("SUB topic orders is replicated")));
        assert_eq!(Leader::Node(7).to_string(), "led by node 7");
        assert_eq!(Leader::None.to_string(), "no leader");
    }

    #[test]
    fn the_first_look_gains_only_when_leading() {
        assert_eq!(change(None, seen(4, true)), Some(Change::Gained));
        assert_eq!(change(None, seen(4, false)), None);
    }

    #[test]
    fn leadership_gained_and_lost_between_looks() {
        assert_eq!(
            change(Some(seen(1, false)), seen(2, true)),
            Some(Change::Gained)
        );
        assert_eq!(
            change(Some(seen(2, true)), seen(3, false)),
            Some(Change::Lost)
        );
        // Still leading in the same term: nothing to do.
        assert_eq!(change(Some(seen(2, true)), seen(2, true)), None);
        // Leading again in a later term (lost in between): register again.
        assert_eq!(
            change(Some(seen(2, true)), seen(5, true)),
            Some(Change::Gained)
        );
        // Follower, same term: nothing happened to this member.
        assert_eq!(change(Some(seen(2, false)), seen(2, false)), None);
    }

    #[test]
    fn a_later_term_without_leadership_is_a_loss_even_unseen() {
        // It may have led in term 3 and lost it before this look.
        assert_eq!(
            change(Some(seen(2, false)), seen(4, false)),
            Some(Change::Lost)
        );
        // Same term, stepping down (a leader that lost its majority).
        assert_eq!(
            change(Some(seen(4, true)), seen(4, false)),
            Some(Change::Lost)
        );
    }
}

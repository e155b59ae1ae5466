//! Whether this member may vote: the rule that keeps a member that lost
//! its disk from undoing what the groups committed. Never: I/O, sockets or
//! Raft handles (`group.rs` applies the verdicts; `identity.rs` keeps the
//! files).
//!
//! A Raft member's vote and log are promises: a member that granted a
//! vote in a term must not grant another in that term, and an entry it
//! acknowledged may be all that makes the entry committed. A host that
//! comes back with an empty disk under the same node id has forgotten
//! both. Let it vote at once and it can elect a leader that lacks
//! committed entries (with one other member that lacks them too), whose
//! log then overwrites the members that still had them.
//!
//! So a member that starts with an empty disk does not vote, in any group,
//! until it knows which of two cases it is in. Its peers say, in the hello
//! on every connection, which incarnation of it they knew (each data
//! directory gets a random incarnation when it is first used):
//!
//! * a majority of the cluster (itself included) never knew it and no peer
//!   knew another incarnation: the cluster is new; it votes ([`Standing::Member`]);
//! * a peer knew another incarnation: it replaces a lost member. It takes
//!   entries from each group's leader like any follower, and votes in a
//!   group again only once it has applied an entry of the term it follows:
//!   that leader's first entry comes after everything committed before it,
//!   so from then on it holds every entry its lost disk could have
//!   acknowledged ([`Standing::Replacing`]).
//!
//! It never campaigns before it may vote either (`pulse.rs` turns
//! openraft's elections off for those groups).

use std::collections::BTreeSet;
use std::fmt;

use crate::{GroupId, NodeId};

/// A data directory's identity: random, chosen when the directory is
/// first used, so a host that comes back empty is told apart from the one
/// its peers knew.
pub type Incarnation = u64;

/// This member's standing in the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// Votes and campaigns in every group.
    Member,
    /// Started on an empty disk; these peers said they never knew it.
    Joining { never: BTreeSet<NodeId> },
    /// Replaces a member whose disk was lost; votes again in these groups
    /// (each caught up on its current leader's term).
    Replacing {
        replaced: Incarnation,
        caught_up: BTreeSet<GroupId>,
    },
}

/// What changed with a peer's word or a group's catch-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Nothing that alters a vote.
    None,
    /// A majority never knew this member: a new cluster (the lowest node
    /// id initialises it).
    NewCluster,
    /// A peer knew another incarnation: this member replaces it.
    Replaces(Incarnation),
    /// A group this member now votes in again.
    CaughtUp(GroupId),
    /// Every group caught up: a member like any other.
    Rejoined,
}

impl Standing {
    /// A member's standing at start: `Member` when its disk had Raft state
    /// or it is the whole cluster (its own majority), else joining.
    pub fn at_start(had_state: bool, members: usize) -> Standing {
        if had_state || members <= 1 {
            Standing::Member
        } else {
            Standing::Joining {
                never: BTreeSet::new(),
            }
        }
    }

    /// Whether this member may vote (and campaign) in `group`.
    pub fn may_vote(&self, group: GroupId) -> bool {
        match self {
            Standing::Member => true,
            Standing::Joining { .. } => false,
            Standing::Replacing { caught_up, .. } => caught_up.contains(&group),
        }
    }

    /// Peer `peer` of a cluster of `members` said which incarnation of
    /// this member (`mine`) it knew.
    pub fn heard(
        &mut self,
        peer: NodeId,
        knew: Option<Incarnation>,
        mine: Incarnation,
        members: usize,
    ) -> Change {
        match knew {
            Some(k) if k != mine => {
                // Also from `Member`: a disk restored from a backup has
                // forgotten as much as an empty one.
                if matches!(self, Standing::Replacing { replaced, .. } if *replaced == k) {
                    return Change::None;
                }
                *self = Standing::Replacing {
                    replaced: k,
                    caught_up: BTreeSet::new(),
                };
                Change::Replaces(k)
            }
            _ => match self {
                Standing::Joining { never } => {
                    never.insert(peer);
                    if never.len() + 1 > members / 2 {
                        *self = Standing::Member;
                        Change::NewCluster
                    } else {
                        Change::None
                    }
                }
                _ => Change::None,
            },
        }
    }

    /// Group `group` (of `groups`) applied an entry of the term it follows.
    pub fn caught_up(&mut self, group: GroupId, groups: u32) -> Change {
        let Standing::Replacing { caught_up, .. } = self else {
            return Change::None;
        };
        if !caught_up.insert(group) {
            return Change::None;
        }
        if caught_up.len() as u32 >= groups {
            *self = Standing::Member;
            Change::Rejoined
        } else {
            Change::CaughtUp(group)
        }
    }

    /// The word for `GET /replication` and logs.
    pub fn name(&self) -> &'static str {
        match self {
            Standing::Member => "member",
            Standing::Joining { .. } => "joining",
            Standing::Replacing { .. } => "replacing",
        }
    }
}

impl fmt::Display for Standing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Standing::Member => f.write_str("member"),
            Standing::Joining { never } => {
                write!(f, "joining ({} peers never knew it)", never.len())
            }
            Standing::Replacing {
                replaced,
                caught_up,
            } => write!(
                f,
                "replacing incarnation {replaced:016x} ({} groups caught up)",
                caught_up.len()
            ),
        }
    }
}

/// Whether a group's Raft, as its metrics show it, has applied an entry
/// of the term it is in while following a leader: the catch-up rule.
pub fn applied_in_current_term(
    current_term: u64,
    leader: Option<NodeId>,
    applied_term: Option<u64>,
) -> bool {
    leader.is_some() && applied_term == Some(current_term)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: Incarnation = 0xaaaa;

    #[test]
    fn a_member_with_state_votes_at_once() {
        let s = Standing::at_start(true, 3);
        assert!(s.may_vote(0) && s.may_vote(7));
    }

    #[test]
    fn an_empty_member_votes_once_a_majority_never_knew_it() {
        // 5 members: itself and two others make a majority.
        let mut s = Standing::at_start(false, 3);
        assert!(!s.may_vote(0));
        assert_eq!(s.heard(2, None, ME, 5), Change::None);
        assert_eq!(s.heard(2, None, ME, 5), Change::None, "the same peer twice");
        assert!(!s.may_vote(0));
        assert_eq!(s.heard(3, None, ME, 5), Change::NewCluster);
        assert_eq!(s, Standing::Member);
        // 3 members: one other is enough; a restart that was recorded
        // (the peer knew this very incarnation) counts as never.
        let mut s = Standing::at_start(false, 3);
        assert_eq!(s.heard(1, Some(ME), ME, 3), Change::NewCluster);
        // A single-member cluster is its own majority.
        assert_eq!(Standing::at_start(false, 1), Standing::Member);
    }

    #[test]
    fn a_peer_that_knew_another_incarnation_makes_it_a_replacement() {
        let mut s = Standing::at_start(false, 3);
        assert_eq!(s.heard(2, None, ME, 3), Change::NewCluster);
        // Even after it settled (the peer that knew it was late to say).
        assert_eq!(s.heard(3, Some(0xbbbb), ME, 3), Change::Replaces(0xbbbb));
        assert!(!s.may_vote(0) && !s.may_vote(1));
        // The same word again changes nothing; the catch-up goes on.
        assert_eq!(s.caught_up(1, 2), Change::CaughtUp(1));
        assert_eq!(s.heard(2, Some(0xbbbb), ME, 3), Change::None);
        assert!(s.may_vote(1) && !s.may_vote(0));
        assert_eq!(s.caught_up(1, 2), Change::None, "counted once");
        assert_eq!(s.caught_up(0, 2), Change::Rejoined);
        assert_eq!(s, Standing::Member);
        // A "never" does not undo a replacement.
        let mut s = Standing::at_start(false, 3);
        s.heard(2, Some(0xbbbb), ME, 3);
        assert_eq!(s.heard(3, None, ME, 3), Change::None);
        assert_eq!(s.name(), "replacing");
    }

    #[test]
    fn caught_up_means_an_applied_entry_of_the_followed_term() {
        assert!(applied_in_current_term(4, Some(1), Some(4)));
        // Applied only what an earlier leader wrote: not yet.
        assert!(!applied_in_current_term(4, Some(1), Some(3)));
        assert!(!applied_in_current_term(4, Some(1), None));
        // No leader: nothing to have caught up with.
        assert!(!applied_in_current_term(4, None, Some(4)));
    }
}

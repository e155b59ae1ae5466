//! Whether a group's leader heartbeats and whether a member may campaign:
//! the rules that keep idle groups quiet. Never: I/O, sockets or Raft
//! handles (`pulse.rs` asks the peers and applies the verdicts).
//!
//! openraft heartbeats every group every `heartbeat_interval`, busy or
//! not: at 256 groups an idle three-member cluster spent 12 % of a core
//! and 2,500 packets a second on it. Heartbeats do two jobs: they carry
//! the commit index to followers, and their absence tells a follower that
//! its leader is gone. Once every follower has applied all the leader has,
//! the first job is done; the second one is done per member instead of
//! per group, by one pulse between every two members that says, for every
//! group, what the answering member knows of it ([`GroupPulse`]).
//!
//! * A leader stops heartbeating a group ([`leader_heartbeats`]) once its
//!   log has not moved for `quiet_after`, a majority of the group has
//!   answered a recent pulse, and every member that answered one knows it
//!   as the leader of its term and has applied its last entry. Any member
//!   that does not (restarted, replaced with an empty disk, behind) wakes
//!   it at the next pulse.
//! * A member does not campaign in a group ([`may_elect`]) while a peer
//!   that answered its last pulse says it leads that group in a term not
//!   older than the member's own: its leader is alive, only quiet. When a
//!   pulse to the leader goes unanswered (its host lost, paused or cut
//!   off) the member campaigns as openraft would without heartbeats.
//! * A member that does not vote in a group (a group smaller than the
//!   cluster: `placement.rs`) learns who leads it from the same pulses
//!   ([`leader_heard`]), to forward proposals there and to name it.
//!
//! Raft's safety does not depend on either: they only decide when
//! elections start, never who may win one.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::{GroupId, NodeId};

/// Which groups this member leads quietly (heartbeats off), by group id.
pub type QuietFlags = Arc<Vec<AtomicBool>>;

/// What a member knows of one of its groups, as it answers a pulse.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupPulse {
    /// It is the group's leader.
    pub leading: bool,
    /// The leader it knows.
    pub leader: Option<NodeId>,
    pub term: u64,
    pub last_index: u64,
    pub applied: u64,
}

/// A peer's last answer to a pulse: its groups in id order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heard {
    pub at: Instant,
    pub groups: Vec<GroupPulse>,
    /// The pulse sent after this answer got none (an error, or no answer
    /// within `fresh_for`).
    pub missed: bool,
}

/// The timing of the rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// A pulse older than this says nothing (openraft's election timeout).
    pub fresh_for: Duration,
    /// How long a leader's log must not have moved before it goes quiet.
    pub quiet_after: Duration,
}

/// What a leader knows of its own group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Leading {
    pub me: NodeId,
    pub group: GroupId,
    pub term: u64,
    pub last_index: u64,
    /// How long its log has not moved ([`Activity`]).
    pub idle: Duration,
}

/// Whether the leader described by `l` keeps heartbeating its group, of
/// members `members` (itself included), given what its peers said.
pub fn leader_heartbeats(
    now: Instant,
    timing: Timing,
    l: Leading,
    members: &[NodeId],
    heard: &HashMap<NodeId, Heard>,
) -> bool {
    if l.idle < timing.quiet_after {
        return true;
    }
    let mut answered = 1; // itself
    for &m in members.iter().filter(|&&m| m != l.me) {
        let Some(p) =
            fresh(now, timing, heard.get(&m)).and_then(|h| h.groups.get(l.group as usize))
        else {
            // Down, cut off or silent: it is sent entries again once it
            // answers and says what it lacks.
            continue;
        };
        let up_to_date = p.leader == Some(l.me)
            && p.term == l.term
            && p.last_index == l.last_index
            && p.applied == l.last_index;
        if !up_to_date {
            return true;
        }
        answered += 1;
    }
    // Without a majority heard from, keep heartbeating: quiet is for a
    // group whose members know they have a leader.
    answered * 2 <= members.len().max(1)
}

/// Whether a member in `term` of `group` may campaign: not while a peer
/// that answered its last pulse says it leads the group in that term or a
/// later one. A leader is given up for gone when a pulse gets no answer
/// (within `fresh_for`), not by the age of its last answer alone: a member
/// that was itself stalled (a loaded machine) finds old answers when it
/// runs again, and campaigning then would depose a live leader. An answer
/// older than twice `fresh_for` counts for nothing either way (the pulses
/// themselves stalled).
pub fn may_elect(
    now: Instant,
    timing: Timing,
    me: NodeId,
    group: GroupId,
    term: u64,
    heard: &HashMap<NodeId, Heard>,
) -> bool {
    !heard.iter().any(|(&id, h)| {
        id != me
            && !h.missed
            && now.saturating_duration_since(h.at) < 2 * timing.fresh_for
            && h.groups
                .get(group as usize)
                .is_some_and(|p| p.leading && p.term >= term)
    })
}

/// Who leads `group`, as the peers' answers say: the peer that says it
/// leads it in the highest term, else the leader a peer names in the
/// highest term (one this member cannot reach itself), with that term.
/// Answers older than twice `fresh_for`, or followed by a missed pulse,
/// count for nothing.
pub fn leader_heard(
    now: Instant,
    timing: Timing,
    group: GroupId,
    heard: &HashMap<NodeId, Heard>,
) -> Option<(NodeId, u64)> {
    let answers = heard.iter().filter_map(|(&id, h)| {
        let recent = !h.missed && now.saturating_duration_since(h.at) < 2 * timing.fresh_for;
        recent
            .then(|| h.groups.get(group as usize))
            .flatten()
            .map(|p| (id, p))
    });
    let mut claimed: Option<(NodeId, u64)> = None;
    let mut named: Option<(NodeId, u64)> = None;
    for (id, p) in answers {
        if p.leading {
            if claimed.is_none_or(|(_, t)| p.term > t) {
                claimed = Some((id, p.term));
            }
        } else if let Some(l) = p.leader {
            if named.is_none_or(|(_, t)| p.term > t) {
                named = Some((l, p.term));
            }
        }
    }
    match (claimed, named) {
        (Some(c), Some(n)) if n.1 > c.1 => Some(n),
        (Some(c), _) => Some(c),
        (None, n) => n,
    }
}

/// An answer a leader may count: recent, and the pulse after it answered.
fn fresh(now: Instant, timing: Timing, h: Option<&Heard>) -> Option<&Heard> {
    h.filter(|h| !h.missed && now.saturating_duration_since(h.at) < timing.fresh_for)
}

/// How long a leader's log has not moved: its last index, applied index
/// and its followers' matched indexes, as one mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Activity {
    mark: Option<(u64, u64, u64, u64)>,
    since: Instant,
}

impl Activity {
    pub fn new(now: Instant) -> Activity {
        Activity {
            mark: None,
            since: now,
        }
    }

    /// Records the group's mark (term, last index, applied, the sum of
    /// matched indexes) at `now`; how long it has been the same.
    pub fn observe(&mut self, now: Instant, mark: (u64, u64, u64, u64)) -> Duration {
        if self.mark != Some(mark) {
            self.mark = Some(mark);
            self.since = now;
        }
        now.saturating_duration_since(self.since)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Timing = Timing {
        fresh_for: Duration::from_millis(1000),
        quiet_after: Duration::from_millis(1000),
    };

    fn knows(leader: NodeId, term: u64, index: u64) -> GroupPulse {
        GroupPulse {
            leading: false,
            leader: Some(leader),
            term,
            last_index: index,
            applied: index,
        }
    }

    fn leads(term: u64, index: u64, me: NodeId) -> GroupPulse {
        GroupPulse {
            leading: true,
            ..knows(me, term, index)
        }
    }

    fn heard(at: Instant, pulses: &[(NodeId, GroupPulse)]) -> HashMap<NodeId, Heard> {
        pulses
            .iter()
            .map(|&(id, p)| {
                (
                    id,
                    Heard {
                        at,
                        groups: vec![GroupPulse::default(), p],
                        missed: false,
                    },
                )
            })
            .collect()
    }

    fn leading(idle_ms: u64) -> Leading {
        Leading {
            me: 1,
            group: 1,
            term: 4,
            last_index: 90,
            idle: Duration::from_millis(idle_ms),
        }
    }

    #[test]
    fn a_member_outside_a_group_hears_who_leads_it() {
        let now = Instant::now();
        assert_eq!(leader_heard(now, T, 1, &HashMap::new()), None);
        let all = heard(now, &[(2, knows(1, 4, 90)), (3, knows(1, 4, 90))]);
        // Named by followers only: the leader itself was not heard.
        assert_eq!(leader_heard(now, T, 1, &all), Some((1, 4)));
        let mut all = heard(now, &[(1, leads(4, 90, 1)), (2, knows(1, 4, 90))]);
        assert_eq!(leader_heard(now, T, 1, &all), Some((1, 4)));
        // A newer leader, named by a follower of the later term, wins
        // over the old one still claiming.
        all.insert(3, heard(now, &[(3, knows(3, 5, 91))])[&3].clone());
        assert_eq!(leader_heard(now, T, 1, &all), Some((3, 5)));
        all.insert(3, heard(now, &[(3, leads(5, 91, 3))])[&3].clone());
        assert_eq!(leader_heard(now, T, 1, &all), Some((3, 5)));
        // A group no peer answered for, and answers gone stale or missed.
        assert_eq!(leader_heard(now, T, 7, &all), None);
        let later = now + 2 * T.fresh_for;
        assert_eq!(leader_heard(later, T, 1, &all), None);
        for h in all.values_mut() {
            h.missed = true;
        }
        assert_eq!(leader_heard(now, T, 1, &all), None);
    }

    #[test]
    fn a_leader_goes_quiet_once_idle_and_everyone_heard_has_all() {
        let now = Instant::now();
        let all = heard(now, &[(2, knows(1, 4, 90)), (3, knows(1, 4, 90))]);
        assert!(leader_heartbeats(now, T, leading(999), &[1, 2, 3], &all));
        assert!(!leader_heartbeats(now, T, leading(1000), &[1, 2, 3], &all));
    }

    #[test]
    fn any_member_heard_that_lacks_something_wakes_it() {
        let now = Instant::now();
        let members = [1, 2, 3];
        let behind = GroupPulse {
            applied: 89,
            ..knows(1, 4, 90)
        };
        let restarted = GroupPulse {
            leader: None,
            ..knows(1, 4, 90)
        };
        let emptied = GroupPulse {
            leader: Some(1),
            term: 0,
            ..GroupPulse::default()
        };
        let older_term = knows(1, 3, 90);
        let longer_log = knows(1, 4, 91);
        for p in [behind, restarted, emptied, older_term, longer_log] {
            let h = heard(now, &[(2, knows(1, 4, 90)), (3, p)]);
            assert!(
                leader_heartbeats(now, T, leading(5000), &members, &h),
                "{p:?}"
            );
        }
    }

    #[test]
    fn a_member_not_heard_from_does_not_keep_it_awake_but_a_majority_is_needed() {
        let now = Instant::now();
        let old = now - Duration::from_millis(1000);
        let one_down = heard(now, &[(2, knows(1, 4, 90))]);
        assert!(!leader_heartbeats(
            now,
            T,
            leading(5000),
            &[1, 2, 3],
            &one_down
        ));
        // A pulse as old as `fresh_for` says nothing: alone, it heartbeats.
        let stale = heard(old, &[(2, knows(1, 4, 90)), (3, knows(1, 4, 90))]);
        assert!(leader_heartbeats(now, T, leading(5000), &[1, 2, 3], &stale));
        // Nor does one followed by an unanswered pulse.
        let mut missed = heard(now, &[(2, knows(1, 4, 90)), (3, knows(1, 4, 90))]);
        for h in missed.values_mut() {
            h.missed = true;
        }
        assert!(leader_heartbeats(
            now,
            T,
            leading(5000),
            &[1, 2, 3],
            &missed
        ));
        // Five members, two heard from: itself and two is a majority.
        let two = heard(now, &[(2, knows(1, 4, 90)), (3, knows(1, 4, 90))]);
        assert!(!leader_heartbeats(
            now,
            T,
            leading(5000),
            &[1, 2, 3, 4, 5],
            &two
        ));
        let one = heard(now, &[(2, knows(1, 4, 90))]);
        assert!(leader_heartbeats(
            now,
            T,
            leading(5000),
            &[1, 2, 3, 4, 5],
            &one
        ));
        // A peer that has not this group (another configuration) is not
        // counted either.
        let mut short = heard(now, &[(2, knows(1, 4, 90))]);
        short.get_mut(&2).unwrap().groups.truncate(1);
        assert!(leader_heartbeats(now, T, leading(5000), &[1, 2, 3], &short));
    }

    #[test]
    fn no_campaign_while_a_leader_of_this_term_or_later_answers() {
        let now = Instant::now();
        let h = heard(now, &[(1, leads(4, 90, 1)), (3, knows(1, 4, 90))]);
        assert!(!may_elect(now, T, 2, 1, 4, &h));
        assert!(!may_elect(now, T, 2, 1, 3, &h));
        // A newer term of its own (it voted in an election since).
        assert!(may_elect(now, T, 2, 1, 5, &h));
        // Other groups are not this one.
        assert!(may_elect(now, T, 2, 0, 4, &h));
        // Its last answer is old, but no pulse went unanswered since (this
        // member was stalled, not the leader): it waits.
        let old = heard(now - Duration::from_millis(1500), &[(1, leads(4, 90, 1))]);
        assert!(!may_elect(now, T, 2, 1, 4, &old));
        // A pulse went unanswered: the leader is given up.
        let mut gone = heard(now, &[(1, leads(4, 90, 1))]);
        gone.get_mut(&1).unwrap().missed = true;
        assert!(may_elect(now, T, 2, 1, 4, &gone));
        // Answers older than twice the timeout count for nothing.
        let ancient = heard(now - Duration::from_millis(2000), &[(1, leads(4, 90, 1))]);
        assert!(may_elect(now, T, 2, 1, 4, &ancient));
        // Its own answer (as a former leader) does not count.
        let own = heard(now, &[(2, leads(4, 90, 2))]);
        assert!(may_elect(now, T, 2, 1, 4, &own));
        assert!(may_elect(now, T, 2, 1, 4, &HashMap::new()));
    }

    #[test]
    fn activity_counts_from_the_last_change() {
        let t0 = Instant::now();
        let mut a = Activity::new(t0);
        assert_eq!(a.observe(t0, (1, 5, 5, 10)), Duration::ZERO);
        let t1 = t0 + Duration::from_millis(700);
        assert_eq!(a.observe(t1, (1, 5, 5, 10)), Duration::from_millis(700));
        let t2 = t0 + Duration::from_millis(900);
        assert_eq!(a.observe(t2, (1, 6, 5, 10)), Duration::ZERO);
        let t3 = t0 + Duration::from_millis(1500);
        assert_eq!(a.observe(t3, (1, 6, 5, 10)), Duration::from_millis(600));
    }
}

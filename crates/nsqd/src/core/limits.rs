//! Depth limits of a topic or channel (nsq-rs, opt-in): `max_depth` and
//! what happens to a message that would take the depth past it.
//!
//! Owns the rule only: given the depth a queue has now (memory and disk,
//! as `/stats` counts it) and how many new messages arrive, whether they
//! are all taken, refused whole (`reject`: nothing is half-published), or
//! taken after the oldest waiting ones are dropped (`drop-oldest`). The
//! topic and channel state machines apply it to new messages only: a
//! message already accepted (requeued, timed out, due after a deferral)
//! always goes back, so a limit is never a way to lose one silently.
//!
//! `max_depth` 0 is unlimited, NSQ's behaviour and the default.
//!
//! Never: counts the depth itself or touches a queue.

use std::fmt;
use std::str::FromStr;

/// What a full queue does with new messages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Policy {
    /// The publish is refused whole (`E_PUB_FAILED`, HTTP 503).
    #[default]
    Reject,
    /// The oldest waiting messages are dropped (and counted) to make room.
    DropOldest,
}

/// A policy name that is neither `reject` nor `drop-oldest`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown max_depth policy {0:?} (want reject or drop-oldest)")]
pub struct BadPolicy(pub String);

impl FromStr for Policy {
    type Err = BadPolicy;
    fn from_str(s: &str) -> Result<Policy, BadPolicy> {
        match s {
            "reject" => Ok(Policy::Reject),
            "drop-oldest" => Ok(Policy::DropOldest),
            _ => Err(BadPolicy(s.to_string())),
        }
    }
}

impl Policy {
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Reject => "reject",
            Policy::DropOldest => "drop-oldest",
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A publish refused by a `reject` limit: the topic's own, or one of its
/// channels' (named).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Full {
    #[error("topic is at max_depth {0}")]
    Topic(u64),
    #[error("channel {0} is at max_depth {1}")]
    Channel(String, u64),
}

/// A queue's depth limit; the default is none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limit {
    /// 0: unlimited.
    pub max_depth: u64,
    pub policy: Policy,
}

/// What to do with `incoming` new messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Room for all of them.
    All,
    /// `reject`: refuse every one of them.
    Refuse,
    /// `drop-oldest`: drop `old` waiting messages, oldest first, and the
    /// first `new` of the incoming ones (a batch larger than the limit
    /// keeps its newest `max_depth`), then take the rest.
    Drop { old: u64, new: u64 },
}

impl Limit {
    pub fn is_set(&self) -> bool {
        self.max_depth > 0
    }

    /// Whether this limit refuses publishes (so a topic must ask before it
    /// accepts any).
    pub fn rejects(&self) -> bool {
        self.is_set() && self.policy == Policy::Reject
    }

    /// Whether this limit drops the oldest to make room.
    pub fn drops(&self) -> bool {
        self.is_set() && self.policy == Policy::DropOldest
    }

    /// The verdict on `incoming` messages for a queue `depth` deep.
    pub fn admit(&self, depth: u64, incoming: u64) -> Admit {
        if !self.is_set() || depth.saturating_add(incoming) <= self.max_depth {
            return Admit::All;
        }
        match self.policy {
            Policy::Reject => Admit::Refuse,
            Policy::DropOldest => {
                let excess = depth + incoming - self.max_depth;
                let old = excess.min(depth);
                Admit::Drop {
                    old,
                    new: excess - old,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(max_depth: u64, policy: Policy) -> Limit {
        Limit { max_depth, policy }
    }

    #[test]
    fn no_limit_admits_everything() {
        assert_eq!(Limit::default().admit(u64::MAX, 5), Admit::All);
        assert!(!Limit::default().rejects() && !Limit::default().drops());
    }

    #[test]
    fn reject_refuses_a_batch_that_would_cross_the_limit_whole() {
        let l = limit(10, Policy::Reject);
        assert_eq!(l.admit(7, 3), Admit::All);
        assert_eq!(l.admit(8, 3), Admit::Refuse);
        assert_eq!(l.admit(10, 1), Admit::Refuse);
        assert_eq!(l.admit(0, 11), Admit::Refuse);
    }

    #[test]
    fn drop_oldest_drops_the_excess_from_the_waiting_ones_first() {
        let l = limit(10, Policy::DropOldest);
        assert_eq!(l.admit(10, 3), Admit::Drop { old: 3, new: 0 });
        assert_eq!(l.admit(9, 3), Admit::Drop { old: 2, new: 0 });
        // a batch larger than the limit keeps its newest ten
        assert_eq!(l.admit(4, 15), Admit::Drop { old: 4, new: 5 });
    }

    #[test]
    fn policies_parse_and_print_as_the_api_spells_them() {
        for p in [Policy::Reject, Policy::DropOldest] {
            assert_eq!(p.as_str().parse::<Policy>(), Ok(p));
        }
        assert_eq!(
            "drop_oldest".parse::<Policy>(),
            Err(BadPolicy("drop_oldest".into()))
        );
    }
}

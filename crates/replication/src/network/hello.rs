//! The first exchange on every connection between members: the caller
//! says who it is and the cluster it was configured with, and the listener
//! answers whether that is its own. Never: anything a Raft decides.
//!
//! Every member must be started with the same `--replication-groups` and
//! the same `--replication-peer` list: a member that counted its groups
//! differently would put topics in other groups than its peers, and one
//! with another peer list would count majorities over other members. Such
//! a member is refused at the first frame, before any of its votes or
//! entries reach a Raft, and both ends log why (once per peer and
//! difference, not at every retry).
//!
//! Accepted, the two also tell each other their data directory's
//! incarnation and which incarnation of the other they knew: how a member
//! that came back with an empty disk learns that it replaces one
//! (`standing.rs`), and how its peers record it (`identity.rs`); and what
//! each says about itself for its users (opaque here: nsqd's TCP address
//! for consumers), which a member keeps per peer ([`Abouts`]).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::identity::Identity;
use crate::standing::Incarnation;
use crate::NodeId;

/// What every member of a cluster must agree on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterConfig {
    /// `--replication-groups`.
    pub groups: u32,
    /// `--replication-peer`: every member's node id and address.
    pub peers: BTreeMap<NodeId, String>,
}

impl fmt::Display for ClusterConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "--replication-groups={}", self.groups)?;
        for (id, addr) in &self.peers {
            write!(f, " --replication-peer={id}@{addr}")?;
        }
        Ok(())
    }
}

/// The caller's side of the exchange.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Hello {
    pub from: NodeId,
    pub config: ClusterConfig,
    /// The caller's data directory.
    pub incarnation: Incarnation,
    /// The listener's incarnation as the caller knew it.
    pub knew: Option<Incarnation>,
    /// What the caller says about itself.
    pub about: String,
}

/// The listener's side, when it accepts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Welcome {
    /// The listener's data directory.
    pub incarnation: Incarnation,
    /// The caller's incarnation as the listener knew it.
    pub knew: Option<Incarnation>,
    /// What the listener says about itself.
    pub about: String,
}

/// What each peer said about itself in its last hello or welcome (cheap to
/// clone).
#[derive(Clone, Default)]
pub struct Abouts(Arc<Mutex<BTreeMap<NodeId, String>>>);

impl Abouts {
    /// What peer `node` said, if it said anything.
    pub fn get(&self, node: NodeId) -> Option<String> {
        self.0.lock().get(&node).filter(|a| !a.is_empty()).cloned()
    }

    fn record(&self, node: NodeId, about: &str) {
        self.0.lock().insert(node, about.to_string());
    }
}

impl ClusterConfig {
    /// Whether `hello` comes from a member of this cluster: `Err` says how
    /// it differs, in words an operator can act on.
    pub fn check(&self, me: NodeId, hello: &Hello) -> Result<(), String> {
        if !self.peers.contains_key(&hello.from) {
            return Err(format!(
                "node {} is not in node {me}'s --replication-peer list ({self})",
                hello.from
            ));
        }
        if hello.config != *self {
            return Err(format!(
                "node {} was started with {}; node {me} with {self}: every member needs the same --replication-groups and --replication-peer flags",
                hello.from, hello.config
            ));
        }
        Ok(())
    }
}

/// A member's own side of the exchange, shared by its calls and its
/// listener.
pub struct Greeting {
    pub me: NodeId,
    pub config: ClusterConfig,
    pub identity: Arc<Identity>,
    /// Refusals already logged, by peer address (calls) or node (listener).
    pub refusals: Refusals,
    /// What this member says about itself.
    pub about: String,
    /// What its peers said about themselves.
    pub abouts: Abouts,
}

impl Greeting {
    pub fn new(config: ClusterConfig, identity: Arc<Identity>, about: String) -> Greeting {
        Greeting {
            me: identity.me,
            config,
            identity,
            refusals: Refusals::default(),
            about,
            abouts: Abouts::default(),
        }
    }

    /// A peer's welcome to this member's hello, accepted: what it said
    /// about itself is kept.
    pub fn welcomed(&self, peer: NodeId, welcome: &Welcome) {
        self.abouts.record(peer, &welcome.about);
    }

    /// The hello to the peer at `addr`.
    pub fn hello(&self, addr: &str) -> Hello {
        Hello {
            from: self.me,
            config: self.config.clone(),
            incarnation: self.identity.incarnation,
            knew: self.node_at(addr).and_then(|id| self.identity.knew(id)),
            about: self.about.clone(),
        }
    }

    /// The configured node id of the peer at `addr`.
    pub fn node_at(&self, addr: &str) -> Option<NodeId> {
        self.config
            .peers
            .iter()
            .find(|(_, a)| a.as_str() == addr)
            .map(|(id, _)| *id)
    }

    /// The listener's verdict on `hello`: its welcome, once the caller is
    /// recorded, or why not.
    pub fn welcome(&self, hello: &Hello) -> Result<Welcome, String> {
        self.config.check(self.me, hello)?;
        let knew = self
            .identity
            .met(hello.from, hello.incarnation, hello.knew)?;
        self.abouts.record(hello.from, &hello.about);
        Ok(Welcome {
            incarnation: self.identity.incarnation,
            knew,
            about: self.about.clone(),
        })
    }
}

/// Logs each peer's refusal once while it lasts: openraft retries a
/// refused peer many times a second.
#[derive(Default)]
pub struct Refusals {
    last: Mutex<BTreeMap<String, String>>,
}

impl Refusals {
    /// `peer` was refused for `why`; true if that is news (log it).
    pub fn refused(&self, peer: &str, why: &str) -> bool {
        let mut last = self.last.lock();
        if last.get(peer).is_some_and(|w| w == why) {
            return false;
        }
        last.insert(peer.to_string(), why.to_string());
        true
    }

    /// `peer` was accepted: a later refusal is news again.
    pub fn accepted(&self, peer: &str) {
        self.last.lock().remove(peer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(groups: u32, peers: &[(NodeId, &str)]) -> ClusterConfig {
        ClusterConfig {
            groups,
            peers: peers.iter().map(|(i, a)| (*i, a.to_string())).collect(),
        }
    }

    #[test]
    fn the_same_flags_pass_and_every_difference_is_named() {
        let ours = config(16, &[(1, "h1:4250"), (2, "h2:4250"), (3, "h3:4250")]);
        let hello = |config: ClusterConfig, from| Hello {
            from,
            config,
            incarnation: 1,
            knew: None,
            about: String::new(),
        };
        assert_eq!(ours.check(1, &hello(ours.clone(), 2)), Ok(()));

        let e = ours
            .check(
                1,
                &hello(
                    config(8, &[(1, "h1:4250"), (2, "h2:4250"), (3, "h3:4250")]),
                    3,
                ),
            )
            .unwrap_err();
        assert!(
            e.contains("node 3 was started with --replication-groups=8"),
            "{e}"
        );
        assert!(e.contains("node 1 with --replication-groups=16"), "{e}");

        let e = ours
            .check(
                1,
                &hello(
                    config(16, &[(1, "h1:4250"), (2, "h2:4250"), (3, "h9:4250")]),
                    2,
                ),
            )
            .unwrap_err();
        assert!(e.contains("--replication-peer=3@h9:4250"), "{e}");

        let e = ours.check(1, &hello(ours.clone(), 7)).unwrap_err();
        assert!(
            e.contains("node 7 is not in node 1's --replication-peer list"),
            "{e}"
        );
    }

    #[test]
    fn a_refusal_is_logged_once_until_the_peer_is_accepted() {
        let r = Refusals::default();
        assert!(r.refused("h3:4250", "groups differ"));
        assert!(!r.refused("h3:4250", "groups differ"));
        assert!(r.refused("h3:4250", "peers differ"));
        assert!(r.refused("h2:4250", "peers differ"));
        r.accepted("h3:4250");
        assert!(r.refused("h3:4250", "peers differ"));
    }
}

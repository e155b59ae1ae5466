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
//!
//! And which replication protocol each speaks ([`PROTOCOL`]): a build
//! that adds an entry, image or RPC its predecessors cannot read raises
//! it, and a member proposes the new kinds only once every member of the
//! cluster said it speaks them ([`Abouts::cluster_protocol`]), so a
//! cluster can be upgraded (or downgraded) one member at a time. The
//! protocol travels as a trailer after the hello's and the welcome's body
//! ([`Speaks`]): protocol 1 builds neither send nor read one (postcard
//! stops where the value ends), so their hellos read as protocol 1 and
//! they read a newer one's as before.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::cluster_map::ClusterMap;
use crate::identity::Identity;
use crate::log::meta;
use crate::maps::Maps;
use crate::standing::Incarnation;
use crate::NodeId;

/// The replication protocol this build speaks. 1: the first (entries up
/// to `Deferred`, progress images 1 and 2, hellos without a trailer);
/// 2: the hello's trailer, and the entries and image versions nsqd marks
/// as needing 2; 3: the cluster map (after `Speaks` in the trailer, its
/// updates in group 0, the `Probe` RPC), so members can be added and
/// removed online.
pub const PROTOCOL: u32 = 3;

/// The protocol a membership change needs of every member.
pub const MAP_PROTOCOL: u32 = 3;

/// What a member of a build that sends no trailer speaks.
pub const FIRST_PROTOCOL: u32 = 1;

/// The trailer of a hello or a welcome: the protocol its sender speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Speaks {
    pub protocol: u32,
}

impl Speaks {
    /// This build's trailer.
    pub fn trailer() -> Vec<u8> {
        postcard::to_allocvec(&Speaks { protocol: PROTOCOL }).unwrap_or_default()
    }

    /// The protocol a trailer says: [`FIRST_PROTOCOL`] when there is none
    /// (or it is not one: a later build may say more after it).
    pub fn read(trailer: &[u8]) -> u32 {
        postcard::take_from_bytes::<Speaks>(trailer)
            .map(|(s, _)| s.protocol)
            .unwrap_or(FIRST_PROTOCOL)
    }

    /// This build's trailer with the sender's cluster map after it
    /// (protocol 3; none while a member waits to be added).
    pub fn trailer_with(map: Option<&ClusterMap>) -> Vec<u8> {
        let mut out = Speaks::trailer();
        if let Some(m) = map {
            if let Ok(b) = postcard::to_stdvec(m) {
                out.extend(b);
            }
        }
        out
    }

    /// The cluster map after the protocol in a trailer, if the sender
    /// sent one.
    pub fn map(trailer: &[u8]) -> Option<ClusterMap> {
        let (_, rest) = postcard::take_from_bytes::<Speaks>(trailer).ok()?;
        postcard::from_bytes(rest).ok()
    }
}

/// What a member says of itself to a probe (`Rpc::Probe`): sent before
/// a member is added, to check that its address reaches it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Probed {
    pub node: NodeId,
    /// `--replication-groups`.
    pub groups: u32,
    pub protocol: u32,
    /// Whether it holds a cluster map (it is a member of some cluster).
    pub member: bool,
    /// Its map, when it holds one (a host that replaces a lost member
    /// with an empty disk asks for it before opening its groups).
    pub map: Option<ClusterMap>,
}

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

/// Where each peer's protocol is kept across restarts, beside
/// `raft/member` (a file of its own: builds before it ignore it).
const PROTOCOLS_FILE: &str = "protocols";

/// What each peer said about itself in its last hello or welcome, and the
/// protocol it speaks (cheap to clone). The protocols are kept in
/// `raft/protocols`, so a member restarted while a peer is down still
/// knows what that peer reads.
#[derive(Clone, Default)]
pub struct Abouts(Arc<AboutsInner>);

#[derive(Default)]
struct AboutsInner {
    met: Mutex<BTreeMap<NodeId, (String, u32)>>,
    /// The directory of `raft/protocols`; none in tests.
    dir: Option<PathBuf>,
}

impl Abouts {
    /// The protocols kept in `dir` (none when the file is missing or
    /// unreadable: every peer then counts as not met).
    pub fn open(dir: &Path) -> Abouts {
        let kept: BTreeMap<NodeId, u32> = match meta::read(dir, PROTOCOLS_FILE) {
            Ok(k) => k.unwrap_or_default(),
            Err(e) => {
                tracing::warn!(error = %e, "REPLICATION: the peers' protocols kept are unreadable; every peer counts as not met");
                BTreeMap::new()
            }
        };
        Abouts(Arc::new(AboutsInner {
            met: Mutex::new(
                kept.into_iter()
                    .map(|(n, p)| (n, (String::new(), p)))
                    .collect(),
            ),
            dir: Some(dir.to_path_buf()),
        }))
    }

    /// What peer `node` said, if it said anything since this start.
    pub fn get(&self, node: NodeId) -> Option<String> {
        self.0
            .met
            .lock()
            .get(&node)
            .map(|(a, _)| a)
            .filter(|a| !a.is_empty())
            .cloned()
    }

    /// The protocol peer `node` spoke when the two last met (kept across
    /// restarts); None if they never met.
    pub fn protocol(&self, node: NodeId) -> Option<u32> {
        self.0.met.lock().get(&node).map(|(_, p)| *p)
    }

    /// The protocol every member speaks: the lowest of this build's and
    /// each of `peers`'. A peer never met counts as [`FIRST_PROTOCOL`]: it
    /// may be of an older build, and an entry it cannot read would stop it
    /// applying its groups.
    pub fn cluster_protocol(&self, peers: impl IntoIterator<Item = NodeId>) -> u32 {
        let met = self.0.met.lock();
        peers
            .into_iter()
            .map(|p| met.get(&p).map_or(FIRST_PROTOCOL, |(_, v)| *v))
            .fold(PROTOCOL, u32::min)
    }

    fn record(&self, node: NodeId, about: &str, protocol: u32) {
        let mut met = self.0.met.lock();
        let changed = met.get(&node).map(|(_, p)| *p) != Some(protocol);
        met.insert(node, (about.to_string(), protocol));
        if let (true, Some(dir)) = (changed, &self.0.dir) {
            let kept: BTreeMap<NodeId, u32> = met.iter().map(|(n, (_, p))| (*n, *p)).collect();
            if let Err(e) = meta::write(dir, PROTOCOLS_FILE, &kept) {
                tracing::warn!(error = %e, "REPLICATION: the peers' protocols not kept");
            }
        }
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
    /// The cluster map this member holds.
    pub maps: Maps,
}

impl Greeting {
    pub fn new(
        config: ClusterConfig,
        identity: Arc<Identity>,
        about: String,
        maps: Maps,
    ) -> Greeting {
        Greeting {
            me: identity.me,
            config,
            abouts: Abouts::open(identity.dir()),
            identity,
            refusals: Refusals::default(),
            about,
            maps,
        }
    }

    /// A peer's welcome to this member's hello, accepted: what it said
    /// about itself and the protocol it speaks are kept.
    pub fn welcomed(&self, peer: NodeId, welcome: &Welcome, protocol: u32) {
        self.abouts.record(peer, &welcome.about, protocol);
    }

    /// This member's trailer: its protocol and its map.
    pub fn trailer(&self) -> Vec<u8> {
        Speaks::trailer_with(self.maps.get().as_deref())
    }

    /// Takes a peer's map if it is newer and of this cluster: one that
    /// lists this member, while it waits to be added; one with the same
    /// groups per set otherwise.
    pub fn take_map(&self, theirs: &ClusterMap) {
        let me = self.me;
        let groups = self.config.groups;
        self.maps.adopt(theirs, |held| match held {
            None => theirs.members.contains_key(&me) && theirs.per_set == groups,
            Some(h) => theirs.per_set == h.per_set,
        });
    }

    /// What this member says to a probe.
    pub fn probed(&self) -> Probed {
        Probed {
            node: self.me,
            groups: self.config.groups,
            protocol: PROTOCOL,
            member: self.maps.get().is_some(),
            map: self.maps.get().map(|m| (*m).clone()),
        }
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

    /// The node id of the member at `addr`, as the map says (as the
    /// flags say before there is one).
    pub fn node_at(&self, addr: &str) -> Option<NodeId> {
        match self.maps.get() {
            Some(m) => m.node_at(addr),
            None => self
                .config
                .peers
                .iter()
                .find(|(_, a)| a.as_str() == addr)
                .map(|(id, _)| *id),
        }
    }

    /// The listener's verdict on `hello` from a caller speaking
    /// `protocol` with the cluster map `theirs` (none from a build before
    /// maps): its welcome, once the caller is recorded, or why not.
    pub fn welcome(
        &self,
        hello: &Hello,
        protocol: u32,
        theirs: Option<&ClusterMap>,
    ) -> Result<Welcome, String> {
        if let Some(t) = theirs {
            self.take_map(t);
        }
        let me = self.me;
        let Some(mine) = self.maps.get() else {
            return Err(format!(
                "node {me} is not a member yet: add it with POST /replication/members/add?id={me}&address=<its --replication-address> on a member"
            ));
        };
        match theirs {
            // a build before maps: its flags must be this member's
            None => self.config.check(me, hello)?,
            Some(theirs) => {
                if !mine.members.contains_key(&hello.from) {
                    return Err(format!(
                        "node {} is not a member of the cluster (map version {}, members {:?}): add it with POST /replication/members/add on a member",
                        hello.from,
                        mine.version,
                        mine.members.keys().collect::<Vec<_>>()
                    ));
                }
                // two maps of one version are the same map, unless the
                // two were formed from different flags
                if theirs.version == mine.version && *theirs != *mine
                    || hello.config.groups != mine.per_set
                {
                    return Err(format!(
                        "node {} was started with {}; node {me} with {}: every member needs the same --replication-groups and --replication-peer flags",
                        hello.from, hello.config, self.config
                    ));
                }
            }
        }
        let knew = self
            .identity
            .met(hello.from, hello.incarnation, hello.knew)?;
        self.abouts.record(hello.from, &hello.about, protocol);
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
    use super::super::frame::{self, Rpc};
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
    fn the_protocol_rides_after_the_body_and_old_readers_ignore_it() {
        let hello = Rpc::Hello(Hello {
            from: 2,
            config: config(4, &[(1, "h1:4250"), (2, "h2:4250")]),
            incarnation: 7,
            knew: None,
            about: "h2:4150".into(),
        });
        let mut buf = bytes::BytesMut::new();
        frame::encode_with_trailer(0, 1, &hello, &Speaks::trailer(), &mut buf).unwrap();
        frame::encode(0, 2, &hello, &mut buf).unwrap();
        let new = frame::decode(&mut buf).unwrap().unwrap();
        // a protocol 1 reader: the body alone, the trailer unseen
        assert!(matches!(frame::body::<Rpc>(&new), Ok(Rpc::Hello(h)) if h.about == "h2:4150"));
        let (rpc, trailer) = frame::body_and_trailer::<Rpc>(&new).unwrap();
        assert!(matches!(rpc, Rpc::Hello(h) if h.incarnation == 7));
        assert_eq!(Speaks::read(trailer), PROTOCOL);
        // a protocol 1 sender: no trailer
        let old = frame::decode(&mut buf).unwrap().unwrap();
        let (_, trailer) = frame::body_and_trailer::<Rpc>(&old).unwrap();
        assert_eq!(Speaks::read(trailer), FIRST_PROTOCOL);
    }

    #[test]
    fn the_cluster_speaks_what_its_oldest_member_speaks() {
        let a = Abouts::default();
        assert_eq!(a.cluster_protocol([]), PROTOCOL, "alone");
        assert_eq!(a.cluster_protocol([2, 3]), FIRST_PROTOCOL, "peers not met");
        a.record(2, "h2:4150", PROTOCOL);
        assert_eq!(a.cluster_protocol([2, 3]), FIRST_PROTOCOL);
        a.record(3, "", PROTOCOL);
        assert_eq!(a.cluster_protocol([2, 3]), PROTOCOL);
        // node 3 downgraded: its next hello has no trailer
        a.record(3, "", FIRST_PROTOCOL);
        assert_eq!(a.cluster_protocol([2, 3]), FIRST_PROTOCOL);
        assert_eq!((a.protocol(2), a.protocol(9)), (Some(PROTOCOL), None));
        assert_eq!(a.get(3), None, "an empty about is none");
    }

    #[test]
    fn the_peers_protocols_are_kept_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let a = Abouts::open(dir.path());
        assert_eq!(a.cluster_protocol([2, 3]), FIRST_PROTOCOL);
        a.record(2, "h2:4150", PROTOCOL);
        a.record(3, "h3:4150", PROTOCOL);
        // restarted while node 3 is down: it still reads protocol 2
        let b = Abouts::open(dir.path());
        assert_eq!(b.cluster_protocol([2, 3]), PROTOCOL);
        assert_eq!(b.get(2), None, "what a peer says is this start's");
        b.record(3, "h3:4150", FIRST_PROTOCOL);
        assert_eq!(Abouts::open(dir.path()).protocol(3), Some(FIRST_PROTOCOL));
        std::fs::write(dir.path().join(PROTOCOLS_FILE), b"garbage").unwrap();
        assert_eq!(
            Abouts::open(dir.path()).cluster_protocol([2]),
            FIRST_PROTOCOL
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

    /// A member's greeting over `map` (none: waiting to be added), with
    /// flags naming `flags`.
    fn greeting(
        dir: &Path,
        me: NodeId,
        flags: &[(NodeId, &str)],
        map: Option<ClusterMap>,
    ) -> Greeting {
        let identity = Arc::new(Identity::open(dir, me, true, flags.len(), 0).unwrap());
        Greeting::new(
            config(2, flags),
            identity,
            String::new(),
            Maps::in_memory(map),
        )
    }

    fn hello_from(from: NodeId, flags: &[(NodeId, &str)]) -> Hello {
        Hello {
            from,
            config: config(2, flags),
            incarnation: from,
            knew: None,
            about: String::new(),
        }
    }

    #[test]
    fn the_map_decides_who_is_welcome_once_it_changed() {
        let three = [(1, "h1:1"), (2, "h2:1"), (3, "h3:1")];
        let peers = |ids: &[(NodeId, &str)]| ids.iter().map(|(i, a)| (*i, a.to_string())).collect();
        let formed = ClusterMap::formed(&peers(&three), 2);
        let mut grown = formed.clone();
        let change = crate::cluster_map::Change::Add {
            id: 4,
            addr: "h4:1".into(),
        };
        grown
            .apply(&crate::cluster_map::Update::Change { change, base: 0 })
            .unwrap();

        // A member waiting to be added welcomes nobody until a hello
        // brings a map naming it, which it takes.
        let dir = tempfile::tempdir().unwrap();
        let waiting = greeting(dir.path(), 4, &three, None);
        let e = waiting
            .welcome(&hello_from(1, &three), PROTOCOL, Some(&formed))
            .unwrap_err();
        assert!(e.contains("node 4 is not a member yet"), "{e}");
        assert!(
            waiting.maps.get().is_none(),
            "a map not naming it is not taken"
        );
        waiting
            .welcome(&hello_from(1, &three), PROTOCOL, Some(&grown))
            .unwrap();
        assert_eq!(waiting.maps.get().unwrap().version, 1);

        // A member of the formed cluster: node 4, unknown to its map, is
        // refused; the same hello with the newer map is taken and welcome.
        let dir = tempfile::tempdir().unwrap();
        let member = greeting(dir.path(), 2, &three, Some(formed.clone()));
        // (node 4's flags name the running members, not itself)
        let e = member
            .welcome(&hello_from(4, &three), PROTOCOL, Some(&formed))
            .unwrap_err();
        assert!(e.contains("node 4 is not a member of the cluster"), "{e}");
        member
            .welcome(&hello_from(4, &three), PROTOCOL, Some(&grown))
            .unwrap();
        assert_eq!(member.maps.get().as_deref(), Some(&grown));
        // its trailer carries it on
        assert_eq!(Speaks::map(&member.trailer()), Some(grown.clone()));
        // an older map is not taken back
        member
            .welcome(&hello_from(1, &three), PROTOCOL, Some(&formed))
            .unwrap();
        assert_eq!(member.maps.get().unwrap().version, 1);

        // Two maps of one version that differ: formed from other flags.
        let dir = tempfile::tempdir().unwrap();
        let member = greeting(dir.path(), 2, &three, Some(formed.clone()));
        let other = [(1, "h1:1"), (2, "h2:1"), (3, "h9:1")];
        let e = member
            .welcome(
                &hello_from(3, &other),
                PROTOCOL,
                Some(&ClusterMap::formed(&peers(&other), 2)),
            )
            .unwrap_err();
        assert!(e.contains("every member needs the same"), "{e}");
        // A build before maps is held to the flags, as before.
        assert!(member.welcome(&hello_from(3, &other), 2, None).is_err());
        member.welcome(&hello_from(3, &three), 2, None).unwrap();
    }
}

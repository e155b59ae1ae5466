//! The registration database: which nsqd nodes ("producers") provide which
//! topics and channels, when each was last heard from, and which are
//! tombstoned.
//!
//! Owns: the `(category, key, subkey)` registrations, the peers' identities and
//! last-update times, tombstones, and every query the HTTP API answers
//! (lookup, topics, channels, nodes, debug dump).
//!
//! Never: reads the clock or touches a socket. Every method that depends on
//! time takes `now`, so tombstone expiry and producer inactivity are unit
//! tested with fake instants. The async shell (`tcp`, `http`) owns the only
//! `Instant::now()` calls.
//!
//! Semantics follow nsqlookupd 1.3.0 (spec nsqlookupd.md §1.4, §2):
//!
//! * Keys are never deleted when their last producer leaves, except for
//!   `#ephemeral` names emptied by UNREGISTER; empty keys keep showing up in
//!   `/topics`, `/channels` and `/lookup`.
//! * A key or subkey of `*` in a query is a wildcard (NSQ's `FindRegistrations`
//!   / `FindProducers`); registered names can never be `*`, so only HTTP
//!   queries ever use it.
//! * A producer is *active* iff it was heard from (IDENTIFY or PING) within
//!   `inactive_producer_timeout` and it is not tombstoned. A tombstone hides a
//!   producer of one topic for `tombstone_lifetime`; the flag itself is never
//!   cleared, it simply stops mattering.
//!
//! Iteration order is deterministic (sorted) here; NSQ's is Go map order,
//! which clients must not rely on.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use nsq_protocol::lookupd;
use nsq_protocol::names::is_ephemeral;

/// A peer's identity: the remote address (`ip:port`) of its TCP connection.
pub type PeerId = String;

/// The three kinds of registration nsqlookupd keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Category {
    /// `("client", "", "")`: every identified nsqd.
    Client,
    /// `("topic", topic, "")`.
    Topic,
    /// `("channel", topic, channel)`.
    Channel,
}

impl Category {
    /// NSQ's own spelling, as it appears in `/debug` keys and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Client => "client",
            Category::Topic => "topic",
            Category::Channel => "channel",
        }
    }
}

/// One registration key.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Registration {
    pub category: Category,
    pub key: String,
    pub sub_key: String,
}

impl Registration {
    pub fn client() -> Self {
        Self::new(Category::Client, "", "")
    }

    pub fn topic(topic: &str) -> Self {
        Self::new(Category::Topic, topic, "")
    }

    pub fn channel(topic: &str, channel: &str) -> Self {
        Self::new(Category::Channel, topic, channel)
    }

    fn new(category: Category, key: &str, sub_key: &str) -> Self {
        Self {
            category,
            key: key.to_owned(),
            sub_key: sub_key.to_owned(),
        }
    }

    /// NSQ's `IsMatch`: `*` matches any key or subkey.
    fn matches(&self, category: Category, key: &str, sub_key: &str) -> bool {
        self.category == category
            && (key == "*" || self.key == key)
            && (sub_key == "*" || self.sub_key == sub_key)
    }
}

impl std::fmt::Display for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "category:{} key:{} subkey:{}",
            self.category.as_str(),
            self.key,
            self.sub_key
        )
    }
}

/// What an nsqd told us about itself in IDENTIFY, as `/lookup` and `/nodes`
/// list it; its `remote_address` (the connection's, whatever the peer
/// sent) is its identity here.
pub type PeerInfo = lookupd::Producer;

/// The `node` string `/topic/tombstone` matches against.
fn node_of(p: &PeerInfo) -> String {
    format!("{}:{}", p.broadcast_address, p.http_port)
}

/// A peer plus the last time it identified or pinged. Shared by all of the
/// peer's registrations (in NSQ every Producer points at one PeerInfo).
#[derive(Debug)]
struct Peer {
    info: PeerInfo,
    last_update: Instant,
}

/// A peer's membership in one registration. Each registration has its own,
/// so a tombstone on topic `a` does not hide the peer from topic `b`.
#[derive(Debug, Default)]
struct Producer {
    /// `Some(t)` once tombstoned (at `t`); never reset while registered.
    tombstoned_at: Option<Instant>,
}

impl Producer {
    fn is_tombstoned(&self, now: Instant, lifetime: Duration) -> bool {
        self.tombstoned_at
            .is_some_and(|at| now.saturating_duration_since(at) < lifetime)
    }
}

/// `GET /lookup` answer.
#[derive(Debug, PartialEq, Eq)]
pub struct Lookup {
    pub channels: Vec<String>,
    pub producers: Vec<PeerInfo>,
}

/// One `GET /nodes` entry: `tombstones[i]` belongs to `topics[i]`.
#[derive(Debug, PartialEq, Eq)]
pub struct Node {
    pub info: PeerInfo,
    pub tombstones: Vec<bool>,
    pub topics: Vec<String>,
}

/// One producer in the `GET /debug` dump.
#[derive(Debug, PartialEq, Eq)]
pub struct DebugProducer {
    pub info: PeerInfo,
    pub last_update: Instant,
    pub tombstoned: bool,
    pub tombstoned_at: Option<Instant>,
}

/// What UNREGISTER changed, for logging.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Unregistered {
    /// Registrations the peer was removed from as asked.
    pub removed: Vec<Registration>,
    /// Channel registrations removed by a topic-level UNREGISTER (NSQ warns:
    /// nsqd normally unregisters its channels first).
    pub unexpected: Vec<Registration>,
}

type Producers = BTreeMap<PeerId, Producer>;

/// The registry. One per nsqlookupd; the shell keeps it behind a mutex.
#[derive(Debug)]
pub struct RegistrationDb {
    registrations: BTreeMap<Registration, Producers>,
    peers: HashMap<PeerId, Peer>,
    inactive_producer_timeout: Duration,
    tombstone_lifetime: Duration,
}

impl RegistrationDb {
    pub fn new(inactive_producer_timeout: Duration, tombstone_lifetime: Duration) -> Self {
        Self {
            registrations: BTreeMap::new(),
            peers: HashMap::new(),
            inactive_producer_timeout,
            tombstone_lifetime,
        }
    }

    // ----- peer lifecycle (TCP protocol) -----

    /// IDENTIFY: remember the peer, mark it heard-from at `now` and add it to
    /// the `client` registration. Returns whether it was newly added there.
    pub fn identify(&mut self, info: PeerInfo, now: Instant) -> bool {
        let id = info.remote_address.clone();
        self.peers.insert(
            id.clone(),
            Peer {
                info,
                last_update: now,
            },
        );
        self.add_producer(Registration::client(), &id)
    }

    /// PING from an identified peer: refresh its last-update time. Returns the
    /// time since the previous update, or `None` for an unknown peer.
    pub fn ping(&mut self, id: &str, now: Instant) -> Option<Duration> {
        let peer = self.peers.get_mut(id)?;
        let since = now.saturating_duration_since(peer.last_update);
        peer.last_update = now;
        Some(since)
    }

    /// REGISTER: add the peer to the channel (if any) and topic registrations.
    /// Does not refresh the peer's last-update time (NSQ doesn't either).
    /// Returns the registrations the peer was newly added to.
    pub fn register(&mut self, id: &str, topic: &str, channel: Option<&str>) -> Vec<Registration> {
        let mut added = Vec::new();
        let mut keys = Vec::with_capacity(2);
        if let Some(channel) = channel {
            keys.push(Registration::channel(topic, channel));
        }
        keys.push(Registration::topic(topic));
        for key in keys {
            if self.add_producer(key.clone(), id) {
                added.push(key);
            }
        }
        added
    }

    /// UNREGISTER (spec §1.4): with a channel, leave that channel (deleting an
    /// emptied `#ephemeral` channel key); without, leave every channel of the
    /// topic and the topic itself (deleting an emptied `#ephemeral` topic key;
    /// channel keys stay).
    pub fn unregister(&mut self, id: &str, topic: &str, channel: Option<&str>) -> Unregistered {
        let mut out = Unregistered::default();
        match channel {
            Some(channel) => {
                let key = Registration::channel(topic, channel);
                let (removed, left) = self.remove_producer(&key, id);
                if removed {
                    out.removed.push(key.clone());
                }
                if left == 0 && is_ephemeral(channel) {
                    self.registrations.remove(&key);
                }
            }
            None => {
                for key in self.find_registrations(Category::Channel, topic, "*") {
                    if self.remove_producer(&key, id).0 {
                        out.unexpected.push(key);
                    }
                }
                let key = Registration::topic(topic);
                let (removed, left) = self.remove_producer(&key, id);
                if removed {
                    out.removed.push(key.clone());
                }
                if left == 0 && is_ephemeral(topic) {
                    self.registrations.remove(&key);
                }
            }
        }
        out
    }

    /// Connection closed: drop the peer from every registration (keys stay,
    /// possibly empty) and forget it. Returns what it was removed from.
    pub fn remove_peer(&mut self, id: &str) -> Vec<Registration> {
        let mut removed = Vec::new();
        for (key, producers) in self.registrations.iter_mut() {
            if producers.remove(id).is_some() {
                removed.push(key.clone());
            }
        }
        self.peers.remove(id);
        removed
    }

    // ----- administrative changes (HTTP API) -----

    /// `/topic/create`: an empty topic registration, if missing.
    pub fn create_topic(&mut self, topic: &str) {
        self.registrations
            .entry(Registration::topic(topic))
            .or_default();
    }

    /// `/channel/create`: empty channel and topic registrations, if missing.
    pub fn create_channel(&mut self, topic: &str, channel: &str) {
        self.registrations
            .entry(Registration::channel(topic, channel))
            .or_default();
        self.registrations
            .entry(Registration::topic(topic))
            .or_default();
    }

    /// `/topic/delete`: remove every channel registration of the topic, then
    /// the topic registration, producers included. Returns what was removed.
    pub fn delete_topic(&mut self, topic: &str) -> Vec<Registration> {
        let mut removed = self.find_registrations(Category::Channel, topic, "*");
        removed.extend(self.find_registrations(Category::Topic, topic, ""));
        for key in &removed {
            self.registrations.remove(key);
        }
        removed
    }

    /// `/channel/delete`: remove the channel registration; `false` if it
    /// did not exist (→ 404 `CHANNEL_NOT_FOUND`).
    pub fn delete_channel(&mut self, topic: &str, channel: &str) -> bool {
        let found = self.find_registrations(Category::Channel, topic, channel);
        for key in &found {
            self.registrations.remove(key);
        }
        !found.is_empty()
    }

    /// `/topic/tombstone`: tombstone, at `now`, the producers of the topic
    /// whose `broadcast_address:http_port` equals `node`. Returns how many.
    pub fn tombstone(&mut self, topic: &str, node: &str, now: Instant) -> usize {
        let targets: Vec<(Registration, PeerId)> = self
            .find_producers(Category::Topic, topic, "")
            .into_iter()
            .filter(|(_, id)| {
                self.peers
                    .get(id.as_str())
                    .is_some_and(|p| node_of(&p.info) == node)
            })
            .collect();
        for (key, id) in &targets {
            if let Some(p) = self
                .registrations
                .get_mut(key)
                .and_then(|ps| ps.get_mut(id))
            {
                p.tombstoned_at = Some(now);
            }
        }
        targets.len()
    }

    // ----- queries (HTTP API) -----

    /// `/topics`: every topic registration, empty ones included.
    pub fn topics(&self) -> Vec<String> {
        self.find_registrations(Category::Topic, "*", "")
            .into_iter()
            .map(|r| r.key)
            .collect()
    }

    /// `/channels`: every channel registration of `topic`.
    pub fn channels(&self, topic: &str) -> Vec<String> {
        self.find_registrations(Category::Channel, topic, "*")
            .into_iter()
            .map(|r| r.sub_key)
            .collect()
    }

    /// `/lookup`: `None` if the topic registration does not exist (even an
    /// empty one counts as existing); else its channels and active producers.
    pub fn lookup(&self, topic: &str, now: Instant) -> Option<Lookup> {
        if self
            .find_registrations(Category::Topic, topic, "")
            .is_empty()
        {
            return None;
        }
        let producers = self
            .find_producers(Category::Topic, topic, "")
            .into_iter()
            .filter_map(|(key, id)| {
                let producer = self.registrations.get(&key)?.get(&id)?;
                let peer = self.peers.get(&id)?;
                let active = self.is_recent(peer, now)
                    && !producer.is_tombstoned(now, self.tombstone_lifetime);
                active.then(|| peer.info.clone())
            })
            .collect();
        Some(Lookup {
            channels: self.channels(topic),
            producers,
        })
    }

    /// `/nodes`: every recently heard-from identified peer (tombstones do not
    /// hide it here) with its topics and per-topic tombstone state.
    pub fn nodes(&self, now: Instant) -> Vec<Node> {
        let Some(clients) = self.registrations.get(&Registration::client()) else {
            return Vec::new();
        };
        clients
            .keys()
            .filter_map(|id| self.peers.get(id))
            .filter(|peer| self.is_recent(peer, now))
            .map(|peer| {
                let (topics, tombstones) = self
                    .registrations
                    .iter()
                    .filter(|(key, _)| key.category == Category::Topic)
                    .filter_map(|(key, producers)| {
                        let p = producers.get(&peer.info.remote_address)?;
                        Some((
                            key.key.clone(),
                            p.is_tombstoned(now, self.tombstone_lifetime),
                        ))
                    })
                    .unzip();
                Node {
                    info: peer.info.clone(),
                    tombstones,
                    topics,
                }
            })
            .collect()
    }

    /// `/debug`: every registration with at least one producer, keyed by
    /// `"category:key:subkey"` in byte order (Go's JSON map order).
    pub fn dump(&self) -> BTreeMap<String, Vec<DebugProducer>> {
        let mut out: BTreeMap<String, Vec<DebugProducer>> = BTreeMap::new();
        for (key, producers) in &self.registrations {
            for (id, producer) in producers {
                let Some(peer) = self.peers.get(id) else {
                    continue;
                };
                let name = format!("{}:{}:{}", key.category.as_str(), key.key, key.sub_key);
                out.entry(name).or_default().push(DebugProducer {
                    info: peer.info.clone(),
                    last_update: peer.last_update,
                    tombstoned: producer.tombstoned_at.is_some(),
                    tombstoned_at: producer.tombstoned_at,
                });
            }
        }
        out
    }

    // ----- internals -----

    fn is_recent(&self, peer: &Peer, now: Instant) -> bool {
        now.saturating_duration_since(peer.last_update) <= self.inactive_producer_timeout
    }

    /// Adds the peer to a registration (creating the key). An existing
    /// membership is kept as is, tombstone included. Returns whether it is new.
    fn add_producer(&mut self, key: Registration, id: &str) -> bool {
        let producers = self.registrations.entry(key).or_default();
        if producers.contains_key(id) {
            return false;
        }
        producers.insert(id.to_owned(), Producer::default());
        true
    }

    /// Returns (was it there, how many producers remain). Keys stay.
    fn remove_producer(&mut self, key: &Registration, id: &str) -> (bool, usize) {
        match self.registrations.get_mut(key) {
            Some(producers) => (producers.remove(id).is_some(), producers.len()),
            None => (false, 0),
        }
    }

    /// NSQ's `FindRegistrations`, `*` being a wildcard for key or subkey.
    fn find_registrations(
        &self,
        category: Category,
        key: &str,
        sub_key: &str,
    ) -> Vec<Registration> {
        if key != "*" && sub_key != "*" {
            let exact = Registration::new(category, key, sub_key);
            return if self.registrations.contains_key(&exact) {
                vec![exact]
            } else {
                Vec::new()
            };
        }
        if key != "*" {
            // Only the subkey is a wildcard: a range scan over this key.
            let start = Registration::new(category, key, "");
            return self
                .registrations
                .range(start..)
                .map(|(r, _)| r)
                .take_while(|r| r.category == category && r.key == key)
                .filter(|r| r.matches(category, key, sub_key))
                .cloned()
                .collect();
        }
        self.registrations
            .keys()
            .filter(|r| r.matches(category, key, sub_key))
            .cloned()
            .collect()
    }

    /// NSQ's `FindProducers`: the producers of the matching registrations,
    /// each peer once (first match wins), as (registration, peer) pairs.
    fn find_producers(
        &self,
        category: Category,
        key: &str,
        sub_key: &str,
    ) -> Vec<(Registration, PeerId)> {
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for reg in self.find_registrations(category, key, sub_key) {
            if let Some(producers) = self.registrations.get(&reg) {
                for id in producers.keys() {
                    if seen.insert(id.clone()) {
                        out.push((reg.clone(), id.clone()));
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(300);
    const LIFETIME: Duration = Duration::from_secs(45);

    fn peer(id: &str, broadcast: &str, http_port: i64) -> PeerInfo {
        PeerInfo {
            remote_address: id.into(),
            hostname: "h".into(),
            broadcast_address: broadcast.into(),
            tcp_port: 4150,
            http_port,
            version: "1.3.0".into(),
            ..Default::default()
        }
    }

    fn db() -> RegistrationDb {
        RegistrationDb::new(TIMEOUT, LIFETIME)
    }

    fn ids(l: &Lookup) -> Vec<&str> {
        l.producers
            .iter()
            .map(|p| p.remote_address.as_str())
            .collect()
    }

    #[test]
    fn identify_adds_client_registration() {
        let t0 = Instant::now();
        let mut db = db();
        assert!(db.identify(peer("a:1", "a", 4151), t0));
        assert_eq!(db.nodes(t0).len(), 1);
        assert_eq!(db.dump().keys().collect::<Vec<_>>(), ["client::"]);
        assert!(db.topics().is_empty());
    }

    #[test]
    fn register_channel_registers_topic_too() {
        let t0 = Instant::now();
        let mut db = db();
        db.identify(peer("a:1", "a", 4151), t0);
        let added = db.register("a:1", "t", Some("c"));
        assert_eq!(
            added,
            vec![Registration::channel("t", "c"), Registration::topic("t")]
        );
        // Registering again adds nothing new.
        assert!(db.register("a:1", "t", Some("c")).is_empty());
        assert_eq!(db.topics(), ["t"]);
        assert_eq!(db.channels("t"), ["c"]);
        let l = db.lookup("t", t0).unwrap();
        assert_eq!(l.channels, ["c"]);
        assert_eq!(ids(&l), ["a:1"]);
    }

    #[test]
    fn lookup_unknown_topic_is_none_but_empty_topic_exists() {
        let t0 = Instant::now();
        let mut db = db();
        assert_eq!(db.lookup("t", t0), None);
        db.create_topic("t");
        assert_eq!(
            db.lookup("t", t0),
            Some(Lookup {
                channels: vec![],
                producers: vec![]
            })
        );
    }

    #[test]
    fn unregister_channel_keeps_normal_key_and_drops_ephemeral_key() {
        let t0 = Instant::now();
        let mut db = db();
        db.identify(peer("a:1", "a", 4151), t0);
        db.register("a:1", "t", Some("c"));
        db.register("a:1", "t", Some("e#ephemeral"));
        let u = db.unregister("a:1", "t", Some("c"));
        assert_eq!(u.removed, vec![Registration::channel("t", "c")]);
        db.unregister("a:1", "t", Some("e#ephemeral"));
        assert_eq!(db.channels("t"), ["c"]);
        // The topic registration is untouched.
        assert_eq!(ids(&db.lookup("t", t0).unwrap()), ["a:1"]);
    }

    #[test]
    fn ephemeral_channel_survives_while_another_producer_remains() {
        let t0 = Instant::now();
        let mut db = db();
        db.identify(peer("a:1", "a", 4151), t0);
        db.identify(peer("b:1", "b", 4151), t0);
        db.register("a:1", "t", Some("e#ephemeral"));
        db.register("b:1", "t", Some("e#ephemeral"));
        db.unregister("a:1", "t", Some("e#ephemeral"));
        assert_eq!(db.channels("t"), ["e#ephemeral"]);
        db.unregister("b:1", "t", Some("e#ephemeral"));
        assert!(db.channels("t").is_empty());
    }

    #[test]
    fn unregister_topic_leaves_channels_and_removes_producer() {
        let t0 = Instant::now();
        let mut db = db();
        db.identify(peer("a:1", "a", 4151), t0);
        db.register("a:1", "t", Some("c"));
        let u = db.unregister("a:1", "t", None);
        assert_eq!(u.removed, vec![Registration::topic("t")]);
        assert_eq!(u.unexpected, vec![Registration::channel("t", "c")]);
        let l = db.lookup("t", t0).unwrap();
        assert_eq!(l.channels, ["c"]);
        assert!(l.producers.is_empty());
        // Unregistering something never registered is harmless.
        assert_eq!(db.unregister("a:1", "nope", None), Unregistered::default());
    }

    #[test]
    fn unregister_ephemeral_topic_deletes_topic_key_only() {
        let t0 = Instant::now();
        let mut db = db();
        db.identify(peer("a:1", "a", 4151), t0);
        db.register("a:1", "t#ephemeral", Some("c"));
        db.unregister("a:1", "t#ephemeral", None);
        assert!(db.topics().is_empty());
        assert_eq!(db.channels("t#ephemeral"), ["c"]);
    }

    #[test]
    fn remove_peer_keeps_keys() {
        let t0 = Instant::now();
        let mut db = db();
        db.identify(peer("a:1", "a", 4151), t0);
        db.register("a:1", "t", Some("c"));
        let removed = db.remove_peer("a:1");
        assert_eq!(removed.len(), 3);
        assert_eq!(db.topics(), ["t"]);
        assert_eq!(db.channels("t"), ["c"]);
        assert!(db.lookup("t", t0).unwrap().producers.is_empty());
        assert!(db.nodes(t0).is_empty());
        assert!(db.dump().is_empty());
    }

    #[test]
    fn inactivity_hides_from_lookup_and_nodes_until_ping() {
        let t0 = Instant::now();
        let mut db = RegistrationDb::new(Duration::from_secs(2), LIFETIME);
        db.identify(peer("a:1", "a", 4151), t0);
        db.register("a:1", "t", None);
        // Exactly at the timeout the producer still counts (NSQ uses `>`).
        let t2 = t0 + Duration::from_secs(2);
        assert_eq!(ids(&db.lookup("t", t2).unwrap()), ["a:1"]);
        let t3 = t0 + Duration::from_secs(3);
        assert!(db.lookup("t", t3).unwrap().producers.is_empty());
        assert!(db.nodes(t3).is_empty());
        // The topic itself is still listed.
        assert_eq!(db.topics(), ["t"]);
        assert_eq!(db.ping("a:1", t3), Some(Duration::from_secs(3)));
        assert_eq!(ids(&db.lookup("t", t3).unwrap()), ["a:1"]);
        assert_eq!(db.nodes(t3).len(), 1);
    }

    #[test]
    fn register_does_not_refresh_last_update() {
        let t0 = Instant::now();
        let mut db = RegistrationDb::new(Duration::from_secs(2), LIFETIME);
        db.identify(peer("a:1", "a", 4151), t0);
        db.register("a:1", "t", None);
        db.register("a:1", "u", None);
        assert!(db
            .lookup("u", t0 + Duration::from_secs(3))
            .unwrap()
            .producers
            .is_empty());
    }

    #[test]
    fn ping_unknown_peer_is_noop() {
        let mut db = db();
        assert_eq!(db.ping("x:1", Instant::now()), None);
    }

    #[test]
    fn tombstone_hides_producer_for_lifetime_then_reappears() {
        let t0 = Instant::now();
        let mut db = db();
        db.identify(peer("a:1", "h", 4151), t0);
        db.identify(peer("b:1", "h", 5151), t0);
        db.register("a:1", "t", None);
        db.register("b:1", "t", None);
        db.register("a:1", "u", None);
        assert_eq!(db.tombstone("t", "h:4151", t0), 1);
        let t1 = t0 + Duration::from_secs(44);
        assert_eq!(ids(&db.lookup("t", t1).unwrap()), ["b:1"]);
        // Only that topic: the same peer still serves "u".
        assert_eq!(ids(&db.lookup("u", t1).unwrap()), ["a:1"]);
        // /nodes keeps listing it, with the tombstone flag per topic.
        let nodes = db.nodes(t1);
        let a = nodes
            .iter()
            .find(|n| n.info.remote_address == "a:1")
            .unwrap();
        assert_eq!(a.topics, ["t", "u"]);
        assert_eq!(a.tombstones, [true, false]);
        // At the lifetime it is back.
        let t2 = t0 + LIFETIME;
        assert_eq!(ids(&db.lookup("t", t2).unwrap()), ["a:1", "b:1"]);
        assert_eq!(
            db.nodes(t2)
                .iter()
                .find(|n| n.info.remote_address == "a:1")
                .unwrap()
                .tombstones,
            [false, false]
        );
        // The raw flag stays set in /debug.
        let dump = db.dump();
        let a = dump["topic:t:"]
            .iter()
            .find(|p| p.info.remote_address == "a:1")
            .unwrap();
        assert!(a.tombstoned);
        assert_eq!(a.tombstoned_at, Some(t0));
    }

    #[test]
    fn tombstone_of_unknown_node_or_topic_matches_nothing() {
        let t0 = Instant::now();
        let mut db = db();
        db.identify(peer("a:1", "h", 4151), t0);
        db.register("a:1", "t", None);
        assert_eq!(db.tombstone("t", "h:9999", t0), 0);
        assert_eq!(db.tombstone("nope", "h:4151", t0), 0);
        assert_eq!(ids(&db.lookup("t", t0).unwrap()), ["a:1"]);
    }

    #[test]
    fn reregistering_after_unregister_clears_tombstone() {
        let t0 = Instant::now();
        let mut db = db();
        db.identify(peer("a:1", "h", 4151), t0);
        db.register("a:1", "t", None);
        db.tombstone("t", "h:4151", t0);
        // A plain re-REGISTER keeps the tombstone...
        db.register("a:1", "t", None);
        assert!(db.lookup("t", t0).unwrap().producers.is_empty());
        // ...but a fresh membership starts clean.
        db.unregister("a:1", "t", None);
        db.register("a:1", "t", None);
        assert_eq!(ids(&db.lookup("t", t0).unwrap()), ["a:1"]);
    }

    #[test]
    fn create_and_delete() {
        let t0 = Instant::now();
        let mut db = db();
        db.create_channel("t", "c");
        assert_eq!(db.topics(), ["t"]);
        assert_eq!(db.channels("t"), ["c"]);
        assert!(!db.delete_channel("t", "none"));
        assert!(db.delete_channel("t", "c"));
        assert!(db.channels("t").is_empty());
        db.identify(peer("a:1", "h", 4151), t0);
        db.register("a:1", "t", Some("c"));
        let removed = db.delete_topic("t");
        assert_eq!(
            removed,
            vec![Registration::channel("t", "c"), Registration::topic("t")]
        );
        assert!(db.topics().is_empty());
        assert_eq!(db.lookup("t", t0), None);
        // The peer itself is still known.
        assert_eq!(db.nodes(t0)[0].topics, Vec::<String>::new());
    }

    #[test]
    fn wildcards_behave_like_nsq() {
        let t0 = Instant::now();
        let mut db = db();
        db.identify(peer("a:1", "h", 4151), t0);
        db.register("a:1", "t1", Some("c"));
        db.register("a:1", "t2", Some("c"));
        // `*` is a wildcard in queries, as in NSQ's FindRegistrations.
        assert_eq!(db.channels("*"), ["c", "c"]);
        let l = db.lookup("*", t0).unwrap();
        assert_eq!(ids(&l), ["a:1"]); // each peer once
        assert_eq!(db.delete_topic("*").len(), 4);
        assert!(db.topics().is_empty());
    }

    #[test]
    fn dump_keys_are_in_string_order() {
        let t0 = Instant::now();
        let mut db = db();
        db.identify(peer("a:1", "h", 4151), t0);
        db.register("a:1", "t", Some("c"));
        db.create_topic("empty");
        let dump = db.dump();
        assert_eq!(
            dump.keys().collect::<Vec<_>>(),
            ["channel:t:c", "client::", "topic:t:"]
        );
        let p = &dump["client::"][0];
        assert_eq!(p.last_update, t0);
        assert!(!p.tombstoned);
        assert_eq!(p.tombstoned_at, None);
    }
}

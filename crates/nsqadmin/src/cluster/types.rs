//! The shapes nsqadmin's `/api` answers with, field for field and in
//! nsqadmin 1.3.0's key order, and the pure functions that build them from
//! upstream answers: per-node stats, and the cluster aggregates (`node:"*"`).
//!
//! Nothing here does I/O or reads the clock (`now` is passed in).

use nsq_protocol::lookupd::{join_host_port, Node};
use serde::Serialize;

use super::counts::{is_zero, Depths, Locality};
use super::e2e::E2eAggregate;
use super::input::{NsqdChannel, NsqdClient, NsqdInfo, NsqdTopic};
use super::replicated::{self, Replicated};
use super::settings::{ChannelSettings, TopicSettings};
use crate::semver::Semver;

/// A topic as listed under a producer in `/api/nodes`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProducerTopic {
    pub topic: String,
    pub tombstoned: bool,
}

/// An nsqd as `/api/nodes` lists it.
#[derive(Debug, Clone, Serialize)]
pub struct Producer {
    pub remote_addresses: Option<Vec<String>>,
    pub remote_address: String,
    pub hostname: String,
    pub broadcast_address: String,
    pub tcp_port: i64,
    pub http_port: i64,
    pub version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub topology_zone: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub topology_region: String,
    pub topics: Option<Vec<ProducerTopic>>,
    pub out_of_date: bool,
    #[serde(skip)]
    pub semver: Semver,
}

impl Producer {
    /// From an nsqlookupd `/nodes` or `/lookup` entry (topics paired with tombstones).
    pub fn from_lookupd(node: Node) -> Producer {
        let Node {
            producer: p,
            tombstones,
            topics,
        } = node;
        let topics: Vec<ProducerTopic> = topics
            .into_iter()
            .enumerate()
            .map(|(i, topic)| ProducerTopic {
                topic,
                tombstoned: tombstones.get(i).copied().unwrap_or(false),
            })
            .collect();
        Producer {
            remote_addresses: None,
            remote_address: p.remote_address,
            hostname: p.hostname,
            broadcast_address: p.broadcast_address,
            tcp_port: p.tcp_port,
            http_port: p.http_port,
            semver: Semver::parse(&p.version),
            version: p.version,
            topology_zone: p.topology_zone,
            topology_region: p.topology_region,
            topics: (!topics.is_empty()).then_some(topics),
            out_of_date: false,
        }
    }

    /// From an nsqd's `/info` plus the topic names of its `/stats`.
    pub fn from_nsqd(info: NsqdInfo, topics: Vec<String>) -> Producer {
        let topics: Vec<ProducerTopic> = topics
            .into_iter()
            .map(|topic| ProducerTopic {
                topic,
                tombstoned: false,
            })
            .collect();
        Producer {
            remote_addresses: None,
            remote_address: String::new(),
            hostname: info.hostname,
            broadcast_address: info.broadcast_address,
            tcp_port: info.tcp_port,
            http_port: info.http_port,
            semver: Semver::parse(&info.version),
            version: info.version,
            topology_zone: info.topology_zone,
            topology_region: info.topology_region,
            topics: (!topics.is_empty()).then_some(topics),
            out_of_date: false,
        }
    }

    /// `broadcast_address:http_port` — the node's name in nsqadmin.
    pub fn http_address(&self) -> String {
        join_host_port(&self.broadcast_address, self.http_port)
    }

    pub fn tcp_address(&self) -> String {
        join_host_port(&self.broadcast_address, self.tcp_port)
    }

    /// The address nsqlookupd saw the nsqd connect from (`N/A` if unknown).
    pub fn address(&self) -> &str {
        if self.remote_address.is_empty() {
            "N/A"
        } else {
            &self.remote_address
        }
    }
}

/// A consumer connection, with the nsqd it is connected to.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClientStats {
    pub node: String,
    pub remote_address: String,
    pub version: String,
    pub client_id: String,
    pub hostname: String,
    pub user_agent: String,
    pub connect_ts: i64,
    /// Nanoseconds since `connect_ts` (whole seconds), computed by nsqadmin.
    pub connected: i64,
    pub in_flight_count: i64,
    pub ready_count: i64,
    pub finish_count: i64,
    pub requeue_count: i64,
    pub message_count: i64,
    pub sample_rate: i64,
    pub deflate: bool,
    pub snappy: bool,
    pub authed: bool,
    pub auth_identity: String,
    pub auth_identity_url: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub node_topology_region: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub node_topology_zone: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub topology_region: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub topology_zone: String,
    pub tls: bool,
    pub tls_cipher_suite: String,
    pub tls_version: String,
    pub tls_negotiated_protocol: String,
    pub tls_negotiated_protocol_is_mutual: bool,
}

impl ClientStats {
    pub fn from_nsqd(c: NsqdClient, node: &Producer, now_secs: i64) -> ClientStats {
        ClientStats {
            node: node.http_address(),
            remote_address: c.remote_address,
            version: c.version,
            client_id: c.client_id,
            hostname: c.hostname,
            user_agent: c.user_agent,
            connect_ts: c.connect_ts,
            connected: (now_secs - c.connect_ts).saturating_mul(1_000_000_000),
            in_flight_count: c.in_flight_count,
            ready_count: c.ready_count,
            finish_count: c.finish_count,
            requeue_count: c.requeue_count,
            message_count: c.message_count,
            sample_rate: c.sample_rate,
            deflate: c.deflate,
            snappy: c.snappy,
            authed: c.authed,
            auth_identity: c.auth_identity,
            auth_identity_url: c.auth_identity_url,
            node_topology_region: node.topology_region.clone(),
            node_topology_zone: node.topology_zone.clone(),
            topology_region: c.topology_region,
            topology_zone: c.topology_zone,
            tls: c.tls,
            tls_cipher_suite: c.tls_cipher_suite,
            tls_version: c.tls_version,
            tls_negotiated_protocol: c.tls_negotiated_protocol,
            tls_negotiated_protocol_is_mutual: c.tls_negotiated_protocol_is_mutual,
        }
    }

    /// 0 = same region and zone as its nsqd, 1 = same region, 2 = elsewhere.
    fn closeness(&self) -> u8 {
        if self.topology_region == self.node_topology_region
            && self.topology_zone == self.node_topology_zone
        {
            0
        } else if self.topology_region == self.node_topology_region {
            1
        } else {
            2
        }
    }
}

/// Orders a channel's clients by nsqd, then topology closeness to it, then
/// region and zone (stable: equal clients keep their order).
pub fn sort_clients_by_node_topology(clients: &mut [ClientStats]) {
    clients.sort_by(|a, b| {
        a.node.cmp(&b.node).then_with(|| {
            let (ca, cb) = (a.closeness(), b.closeness());
            ca.cmp(&cb).then_with(|| {
                if ca == 2 {
                    (&a.topology_region, &a.topology_zone)
                        .cmp(&(&b.topology_region, &b.topology_zone))
                } else {
                    std::cmp::Ordering::Equal
                }
            })
        })
    });
}

/// A channel on one nsqd (`node` = its address) or across the cluster (`node:"*"`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChannelStats {
    pub node: String,
    pub hostname: String,
    pub topic_name: String,
    pub channel_name: String,
    #[serde(flatten)]
    pub depths: Depths,
    pub in_flight_count: i64,
    pub deferred_count: i64,
    pub requeue_count: i64,
    pub timeout_count: i64,
    pub message_count: i64,
    #[serde(skip_serializing_if = "is_zero")]
    pub delivery_msg_count: i64,
    #[serde(flatten)]
    pub locality: Locality,
    pub client_count: i64,
    pub nodes: Option<Vec<ChannelStats>>,
    pub clients: Option<Vec<ClientStats>>,
    pub paused: bool,
    pub e2e_processing_latency: Option<E2eAggregate>,
    #[serde(flatten)]
    pub settings: ChannelSettings,
}

impl ChannelStats {
    pub fn from_nsqd(c: NsqdChannel, topic: &str, node: &Producer, now_secs: i64) -> ChannelStats {
        let locality = Locality {
            zone_local_msg_count: c.zone_local_msg_count,
            region_local_msg_count: c.region_local_msg_count,
            global_msg_count: c.global_msg_count,
        };
        ChannelStats {
            node: node.http_address(),
            hostname: node.hostname.clone(),
            topic_name: topic.to_string(),
            channel_name: c.channel_name,
            depths: Depths::of(c.depth, c.backend_depth),
            in_flight_count: c.in_flight_count,
            deferred_count: c.deferred_count,
            requeue_count: c.requeue_count,
            timeout_count: c.timeout_count,
            message_count: c.message_count,
            delivery_msg_count: locality.total(),
            locality,
            client_count: c.client_count,
            nodes: None,
            clients: c.clients.map(|cs| {
                cs.into_iter()
                    .map(|cl| ClientStats::from_nsqd(cl, node, now_secs))
                    .collect()
            }),
            paused: c.paused,
            e2e_processing_latency: c
                .e2e_processing_latency
                .as_ref()
                .map(E2eAggregate::from_nsqd),
            settings: c.settings,
        }
    }

    /// Adds one node's numbers into an aggregate (`node` becomes `*`).
    fn add(&mut self, a: &ChannelStats) {
        self.node = "*".into();
        self.depths.add(&a.depths);
        self.in_flight_count += a.in_flight_count;
        self.deferred_count += a.deferred_count;
        self.requeue_count += a.requeue_count;
        self.timeout_count += a.timeout_count;
        self.message_count += a.message_count;
        self.delivery_msg_count += a.delivery_msg_count;
        self.locality.add(&a.locality);
        self.client_count += a.client_count;
        self.paused |= a.paused;
        self.settings.add(&a.settings);
        if let Some(e) = &a.e2e_processing_latency {
            self.e2e_processing_latency
                .get_or_insert_with(|| {
                    E2eAggregate::new_aggregate(&self.topic_name, &self.channel_name)
                })
                .add(e);
        }
        if let Some(cs) = a.clients.as_ref().filter(|c| !c.is_empty()) {
            self.clients
                .get_or_insert_with(Vec::new)
                .extend(cs.iter().cloned());
        }
    }

    /// The cluster view of one channel from its per-node entries (as the
    /// channel page and `/api/counter` get it): sums, `nodes` sorted by
    /// hostname, all clients sorted by hostname, an E2E aggregate.
    pub fn aggregate(topic: &str, channel: &str, per_node: Vec<ChannelStats>) -> ChannelStats {
        let mut agg = ChannelStats::empty(topic, channel);
        for n in &per_node {
            agg.add(n);
        }
        if let Some(cs) = agg.clients.as_mut() {
            cs.sort_by(|a, b| a.hostname.cmp(&b.hostname));
        }
        let mut nodes = per_node;
        sort_by_host(&mut nodes, |c| (&c.hostname, &c.node));
        agg.nodes = (!nodes.is_empty()).then_some(nodes);
        agg
    }

    fn empty(topic: &str, channel: &str) -> ChannelStats {
        ChannelStats {
            node: String::new(),
            hostname: String::new(),
            topic_name: topic.into(),
            channel_name: channel.into(),
            depths: Depths::default(),
            in_flight_count: 0,
            deferred_count: 0,
            requeue_count: 0,
            timeout_count: 0,
            message_count: 0,
            delivery_msg_count: 0,
            locality: Locality::default(),
            client_count: 0,
            nodes: None,
            clients: None,
            paused: false,
            e2e_processing_latency: None,
            settings: ChannelSettings::default(),
        }
    }
}

/// A topic on one nsqd or across the cluster (`node:"*"`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TopicStats {
    pub node: String,
    pub hostname: String,
    pub topic_name: String,
    #[serde(flatten)]
    pub depths: Depths,
    pub message_count: i64,
    pub delivery_msg_count: i64,
    #[serde(flatten)]
    pub locality: Locality,
    pub nodes: Option<Vec<TopicStats>>,
    pub channels: Option<Vec<ChannelStats>>,
    pub paused: bool,
    pub e2e_processing_latency: Option<E2eAggregate>,
    #[serde(flatten)]
    pub settings: TopicSettings,
    /// nsq-rs replicated topics: `replicas` and `replication` (the
    /// leader's report in the cluster view); absent otherwise.
    #[serde(flatten)]
    pub replicated: Replicated,
}

impl TopicStats {
    pub fn from_nsqd(t: NsqdTopic, node: &Producer, now_secs: i64) -> TopicStats {
        let name = t.topic_name;
        let locality = Locality {
            zone_local_msg_count: t.zone_local_msg_count,
            region_local_msg_count: t.region_local_msg_count,
            global_msg_count: t.global_msg_count,
        };
        TopicStats {
            node: node.http_address(),
            hostname: node.hostname.clone(),
            depths: Depths::of(t.depth, t.backend_depth),
            message_count: t.message_count,
            delivery_msg_count: locality.total(),
            locality,
            nodes: None,
            channels: t.channels.map(|cs| {
                cs.into_iter()
                    .map(|c| ChannelStats::from_nsqd(c, &name, node, now_secs))
                    .collect()
            }),
            paused: t.paused,
            e2e_processing_latency: t
                .e2e_processing_latency
                .as_ref()
                .map(E2eAggregate::from_nsqd),
            settings: t.settings,
            replicated: t.replicated,
            topic_name: name,
        }
    }

    /// The cluster view of a topic from its per-node entries (already sorted
    /// by host): sums, `paused` if paused anywhere, `nodes`, and `channels`
    /// merged by name in order of first appearance. A channel present on one
    /// node only is that node's entry unchanged; one present on several
    /// becomes `node:"*"` with sums and all its per-node entries under `nodes`.
    /// With no node at all the result is the bare, unaggregated topic.
    /// A replicated topic's numbers and channels are its leader's alone
    /// (`replicated::counted`), so a message held by every member counts
    /// once; every member is still listed under `nodes`.
    pub fn aggregate(topic: &str, per_node: Vec<TopicStats>) -> TopicStats {
        let reports: Vec<&Replicated> = per_node.iter().map(|t| &t.replicated).collect();
        let counted = replicated::counted(&reports);
        let view = replicated::cluster_view(&reports);
        let mut agg = TopicStats {
            node: String::new(),
            hostname: String::new(),
            topic_name: topic.into(),
            depths: Depths::default(),
            message_count: 0,
            delivery_msg_count: 0,
            locality: Locality::default(),
            nodes: None,
            channels: None,
            paused: false,
            e2e_processing_latency: None,
            settings: TopicSettings::default(),
            replicated: view,
        };
        let mut groups: Vec<Vec<ChannelStats>> = Vec::new();
        for (i, t) in per_node.iter().enumerate() {
            agg.node = "*".into();
            agg.paused |= t.paused;
            if counted.is_some_and(|c| c != i) {
                continue;
            }
            agg.depths.add(&t.depths);
            agg.message_count += t.message_count;
            agg.delivery_msg_count += t.delivery_msg_count;
            agg.locality.add(&t.locality);
            agg.settings.add(&t.settings);
            let e = agg
                .e2e_processing_latency
                .get_or_insert_with(|| E2eAggregate::new_aggregate(topic, ""));
            if let Some(te) = &t.e2e_processing_latency {
                e.add(te);
            }
            for c in t.channels.iter().flatten() {
                match groups
                    .iter_mut()
                    .find(|g| g[0].channel_name == c.channel_name)
                {
                    Some(g) => g.push(c.clone()),
                    None => groups.push(vec![c.clone()]),
                }
            }
        }
        let channels: Vec<ChannelStats> = groups
            .into_iter()
            .map(|mut g| {
                if g.len() == 1 {
                    return g.remove(0);
                }
                let mut merged = g[0].clone();
                merged.nodes = None;
                for other in &g[1..] {
                    merged.add(other);
                }
                merged.nodes = Some(g);
                merged
            })
            .collect();
        agg.channels = (!channels.is_empty()).then_some(channels);
        agg.nodes = (!per_node.is_empty()).then_some(per_node);
        agg
    }
}

/// Sorts per-node entries by hostname, then node address (nsqadmin sorts by
/// hostname; the address makes equal hostnames come out in a stable order).
pub fn sort_by_host<T>(v: &mut [T], key: impl Fn(&T) -> (&String, &String)) {
    v.sort_by(|a, b| key(a).cmp(&key(b)));
}

#[cfg(test)]
#[path = "types_tests.rs"]
mod tests;

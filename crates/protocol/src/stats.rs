//! The JSON of nsqd's `/stats?format=json`, field order as nsqd writes it.
//! Shared by nsqd (which serializes it) and by readers (nsqadmin, apps, tests).
//!
//! A key that is not always there (the topology counts, the auth fields,
//! and every nsq-rs key) follows one rule, [`unset`]'s: nsqd leaves it out
//! while it holds its type's default (0, false, empty, null), as an NSQ
//! without the feature would, and a reader takes it as that default when
//! it is missing (`#[serde(skip_serializing_if = "unset", default)]`).

use serde::{Deserialize, Serialize, Serializer};

/// An optional key's value that nsqd leaves out of `/stats`: its type's
/// default.
fn unset<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Stats {
    pub version: String,
    pub health: String,
    pub start_time: i64,
    pub topics: Option<Vec<TopicStats>>,
    #[serde(skip_serializing_if = "unset", default)]
    pub memory: Option<MemStats>,
    pub producers: Option<Vec<ClientStats>>,
    /// nsq-rs: this nsqd as a member of a replication cluster; absent (as
    /// from NSQ) when it is not one.
    #[serde(skip_serializing_if = "unset", default)]
    pub replication: Option<ReplicationStats>,
}

/// nsq-rs: a member of a replication cluster, as it sees the cluster
/// (docs/replication.md, "nsqd integration").
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct ReplicationStats {
    pub node_id: u64,
    /// The address this member's replication listener is bound to.
    pub address: String,
    /// Every member, this one included, as configured.
    pub peers: Vec<ReplicationPeer>,
    /// Whether this member votes: `member`; `joining` (started on an
    /// empty disk, not yet known to be a new cluster); `replacing` (it
    /// replaces a member whose disk was lost, and votes in a group once it
    /// holds what the group committed).
    #[serde(default)]
    pub standing: String,
    /// The replication protocol every member speaks, as far as this one
    /// has met them: entries that need more are not proposed (a rolling
    /// upgrade in progress).
    #[serde(default)]
    pub protocol: u32,
    pub groups: Vec<ReplicationGroup>,
    /// The cluster map's version: 0 as formed by `--replication-peer`,
    /// moved on by each membership change and each group's report of it.
    #[serde(default)]
    pub map_version: u64,
    /// The membership change under way, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<ReplicationChange>,
}

/// nsq-rs: a membership change under way (`POST /replication/members/*`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct ReplicationChange {
    /// What it is: `add node 4 at host:port`, `remove node 2`.
    pub change: String,
    /// The groups whose voters are already what the map says.
    pub groups_done: usize,
    pub groups: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct ReplicationPeer {
    pub node_id: u64,
    pub address: String,
    /// The replication protocol the member spoke when this one last met
    /// it, kept across restarts (this member's own build for itself);
    /// null: never met.
    #[serde(default)]
    pub protocol: Option<u32>,
}

/// One Raft group as this member sees it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct ReplicationGroup {
    pub group: u32,
    /// The leader this member knows of; null while there is none.
    pub leader: Option<u64>,
    pub term: u64,
    /// This member's role in the group: leader, follower, candidate,
    /// learner or shutdown.
    pub state: String,
    pub last_log_index: Option<u64>,
    pub last_applied: Option<u64>,
    /// The last index the group's snapshot here holds (null: none yet).
    #[serde(default)]
    pub snapshot: Option<u64>,
    /// The log here keeps only the entries above this index (null: none
    /// purged).
    #[serde(default)]
    pub purged: Option<u64>,
    /// This member leads the group and has stopped its heartbeats: the
    /// group is idle and every member heard from has all of it.
    #[serde(default)]
    pub quiet: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TopicStats {
    pub topic_name: String,
    pub channels: Vec<ChannelStats>,
    pub depth: i64,
    pub backend_depth: i64,
    pub message_count: u64,
    pub message_bytes: u64,
    pub paused: bool,
    pub e2e_processing_latency: E2eLatency,
    /// nsq-rs limits, each absent (as from NSQ) while not set: the topic's
    /// own `mem_queue_size`, its `max_depth` and policy, and what a
    /// `drop-oldest` limit dropped.
    #[serde(skip_serializing_if = "unset", default)]
    pub mem_queue_size: Option<i64>,
    #[serde(skip_serializing_if = "unset", default)]
    pub max_depth: u64,
    #[serde(skip_serializing_if = "unset", default)]
    pub max_depth_policy: Option<String>,
    #[serde(skip_serializing_if = "unset", default)]
    pub dropped_count: u64,
    /// nsq-rs expiry, absent (as from NSQ) while not set: the topic's
    /// `max_age` (Go's duration text), and the messages that expired in
    /// its own queue.
    #[serde(skip_serializing_if = "unset", default)]
    pub max_age: Option<String>,
    #[serde(skip_serializing_if = "unset", default)]
    pub expired_count: u64,
    /// nsq-rs replicated topics: the topic's replicas, absent on every
    /// unreplicated topic (docs/replication.md).
    #[serde(skip_serializing_if = "unset", default)]
    pub replicas: Option<u8>,
    /// nsq-rs replicated topics: the topic's group as this member sees
    /// it, absent on every unreplicated topic and on an nsqd that is not a
    /// replication member.
    #[serde(skip_serializing_if = "unset", default)]
    pub replication: Option<TopicReplication>,
}

/// nsq-rs: a replicated topic's Raft group as one member sees it
/// (docs/replication.md, "What a member shows"). What is not known on this
/// member is null: only the group's leader knows how far each replica has
/// matched its log; a follower knows its own log alone.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(default)]
pub struct TopicReplication {
    pub group: u32,
    /// The leader's node id; null while there is none.
    pub leader: Option<u64>,
    /// Where the leader serves consumers (its nsqd TCP address, from its
    /// `Serving` entry); null until this member has applied one.
    pub leader_address: Option<String>,
    pub is_leader: bool,
    /// Every voter of the group, by node id.
    pub replicas: Vec<ReplicaStats>,
    /// The last index of this member's log.
    pub last_log_index: Option<u64>,
    /// The last index this member knows committed.
    pub committed_index: Option<u64>,
    /// Messages committed and not yet finished, as this member has applied
    /// the group's log: what the topic holds for channels to come plus the
    /// most any one channel has not finished (FINs reach the log in
    /// batches, so the leader's own channels may be ahead of it).
    pub unfinished: u64,
    /// Messages this member put back into the topic and its channels when
    /// it gained the group (since it started): each was committed and not
    /// finished, and may have reached a consumer of the old leader, so at
    /// most this many duplicates.
    pub put_back: u64,
    /// nsq-rs retention (docs/features/replay.md), absent while the topic
    /// has none: as `retention=` takes it (`24h0m0s`, `1024B`, or both),
    /// and about how many messages and body bytes the group's log keeps
    /// of the topic in its kept part, finished or not (to within one of
    /// the topic's marks).
    #[serde(skip_serializing_if = "unset", default)]
    pub retention: Option<String>,
    #[serde(skip_serializing_if = "unset", default)]
    pub retained_messages: u64,
    #[serde(skip_serializing_if = "unset", default)]
    pub retained_bytes: u64,
}

/// One replica of a replicated topic's group.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(default)]
pub struct ReplicaStats {
    pub node_id: u64,
    /// The last index known to match the leader's log (the leader's view),
    /// or this member's own last index; null when not known here.
    pub matched_index: Option<u64>,
    /// Entries behind the leader's last log index; null when not known
    /// here (everywhere but on the leader).
    pub lag: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ChannelStats {
    pub channel_name: String,
    pub depth: i64,
    pub backend_depth: i64,
    pub in_flight_count: i64,
    pub deferred_count: i64,
    pub message_count: u64,
    #[serde(skip_serializing_if = "unset", default)]
    pub zone_local_msg_count: u64,
    #[serde(skip_serializing_if = "unset", default)]
    pub region_local_msg_count: u64,
    #[serde(skip_serializing_if = "unset", default)]
    pub global_msg_count: u64,
    pub requeue_count: u64,
    pub timeout_count: u64,
    /// nsq-rs: messages moved to the dead-letter topic after
    /// `max_attempts`; absent (as from NSQ) while none was.
    #[serde(skip_serializing_if = "unset", default)]
    pub dead_letter_count: u64,
    /// nsq-rs settings, each absent (as from NSQ) while not set:
    /// `max_attempts` and where messages past it go, the depth limit and
    /// its policy, and what a `drop-oldest` limit dropped.
    #[serde(skip_serializing_if = "unset", default)]
    pub max_attempts: u16,
    #[serde(skip_serializing_if = "unset", default)]
    pub dead_letter_topic: Option<String>,
    #[serde(skip_serializing_if = "unset", default)]
    pub max_depth: u64,
    #[serde(skip_serializing_if = "unset", default)]
    pub max_depth_policy: Option<String>,
    #[serde(skip_serializing_if = "unset", default)]
    pub dropped_count: u64,
    /// nsq-rs expiry, absent (as from NSQ) while not set: the `max_age` in
    /// force for the channel (the shorter of its own and its topic's, Go's
    /// duration text), and the messages that expired in it.
    #[serde(skip_serializing_if = "unset", default)]
    pub max_age: Option<String>,
    #[serde(skip_serializing_if = "unset", default)]
    pub expired_count: u64,
    pub client_count: i64,
    pub clients: Option<Vec<ClientStats>>,
    pub paused: bool,
    pub e2e_processing_latency: E2eLatency,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PubCount {
    pub topic: String,
    pub count: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct ClientStats {
    pub client_id: String,
    pub hostname: String,
    pub version: String,
    pub remote_address: String,
    pub state: i32,
    pub ready_count: i64,
    pub in_flight_count: i64,
    pub message_count: u64,
    #[serde(skip_serializing_if = "unset", default)]
    pub zone_local_msg_count: u64,
    #[serde(skip_serializing_if = "unset", default)]
    pub region_local_msg_count: u64,
    #[serde(skip_serializing_if = "unset", default)]
    pub global_msg_count: u64,
    pub finish_count: u64,
    pub requeue_count: u64,
    pub connect_ts: i64,
    pub sample_rate: i32,
    pub deflate: bool,
    pub snappy: bool,
    pub user_agent: String,
    #[serde(skip_serializing_if = "unset", default)]
    pub authed: bool,
    #[serde(skip_serializing_if = "unset", default)]
    pub auth_identity: String,
    #[serde(skip_serializing_if = "unset", default)]
    pub auth_identity_url: String,
    pub topology_zone: String,
    pub topology_region: String,
    #[serde(skip_serializing_if = "unset", default)]
    pub pub_counts: Vec<PubCount>,
    pub tls: bool,
    pub tls_cipher_suite: String,
    pub tls_version: String,
    pub tls_negotiated_protocol: String,
    pub tls_negotiated_protocol_is_mutual: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct E2eLatency {
    pub count: u64,
    pub percentiles: Option<Vec<Percentile>>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Percentile {
    pub quantile: f64,
    /// Nanoseconds. Go prints integral floats without a decimal point.
    #[serde(serialize_with = "go_float")]
    pub value: f64,
}

fn go_float<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.fract() == 0.0 && v.abs() < 1e18 {
        s.serialize_i64(*v as i64)
    } else {
        s.serialize_f64(*v)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct MemStats {
    pub heap_objects: u64,
    pub heap_idle_bytes: u64,
    pub heap_in_use_bytes: u64,
    pub heap_released_bytes: u64,
    pub gc_pause_usec_100: u64,
    pub gc_pause_usec_99: u64,
    pub gc_pause_usec_95: u64,
    pub next_gc_bytes: u64,
    pub gc_total_runs: u32,
}

/// `/info` of nsqd. Read leniently: a field missing (older nsqds have no
/// `broadcast_address` or topology) is left empty.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct NsqdInfo {
    pub version: String,
    pub broadcast_address: String,
    pub hostname: String,
    pub http_port: i64,
    pub tcp_port: i64,
    pub start_time: i64,
    /// Nanoseconds (a Go duration).
    pub max_heartbeat_interval: i64,
    pub max_output_buffer_size: i64,
    /// Nanoseconds (a Go duration).
    pub max_output_buffer_timeout: i64,
    pub max_deflate_level: i64,
    pub topology_zone: String,
    pub topology_region: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_stats_roundtrip_byte_exact() {
        // Real nsqd output (shared/spec/samples/stats.json), verbatim.
        let sample = r#"{"version":"1.3.0","health":"OK","start_time":1796012200,"topics":[{"topic_name":"sample","channels":[{"channel_name":"c1","depth":0,"backend_depth":0,"in_flight_count":2,"deferred_count":0,"message_count":3,"global_msg_count":3,"requeue_count":0,"timeout_count":0,"client_count":1,"clients":[{"client_id":"probe","hostname":"probe-host","version":"V2","remote_address":"127.0.0.1:44898","state":3,"ready_count":2,"in_flight_count":2,"message_count":3,"finish_count":1,"requeue_count":0,"connect_ts":1796012574,"sample_rate":0,"deflate":false,"snappy":false,"user_agent":"probe/1.0","topology_zone":"","topology_region":"","pub_counts":[{"topic":"sample","count":1}],"tls":false,"tls_cipher_suite":"","tls_version":"","tls_negotiated_protocol":"","tls_negotiated_protocol_is_mutual":false}],"paused":false,"e2e_processing_latency":{"count":0,"percentiles":null}},{"channel_name":"c2","depth":3,"backend_depth":0,"in_flight_count":0,"deferred_count":0,"message_count":3,"requeue_count":0,"timeout_count":0,"client_count":0,"clients":[],"paused":false,"e2e_processing_latency":{"count":0,"percentiles":null}}],"depth":0,"backend_depth":0,"message_count":3,"message_bytes":12,"paused":false,"e2e_processing_latency":{"count":0,"percentiles":null}}],"memory":{"heap_objects":9727,"heap_idle_bytes":3883008,"heap_in_use_bytes":7815168,"heap_released_bytes":3203072,"gc_pause_usec_100":100,"gc_pause_usec_99":100,"gc_pause_usec_95":100,"next_gc_bytes":10363296,"gc_total_runs":9},"producers":null}"#;
        let s: Stats = serde_json::from_str(sample).unwrap();
        assert_eq!(serde_json::to_string(&s).unwrap(), sample);
    }

    #[test]
    fn a_replicated_topic_shows_its_group_after_replicas() {
        let r = TopicReplication {
            group: 5,
            leader: Some(2),
            leader_address: Some("10.0.0.2:4150".into()),
            is_leader: false,
            replicas: vec![ReplicaStats {
                node_id: 1,
                matched_index: Some(9),
                lag: None,
            }],
            last_log_index: Some(9),
            committed_index: None,
            unfinished: 3,
            put_back: 40,
            ..TopicReplication::default()
        };
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"group":5,"leader":2,"leader_address":"10.0.0.2:4150","is_leader":false,"replicas":[{"node_id":1,"matched_index":9,"lag":null}],"last_log_index":9,"committed_index":null,"unfinished":3,"put_back":40}"#
        );
        // Read back leniently: a reader older or newer than the writer.
        let partial: TopicReplication = serde_json::from_str(r#"{"group":5}"#).unwrap();
        assert_eq!((partial.group, partial.leader), (5, None));
    }

    #[test]
    fn percentile_values_print_like_go() {
        let p = E2eLatency {
            count: 2,
            percentiles: Some(vec![
                Percentile {
                    quantile: 0.99,
                    value: 123456.0,
                },
                Percentile {
                    quantile: 0.5,
                    value: 1.5,
                },
            ]),
        };
        assert_eq!(
            serde_json::to_string(&p).unwrap(),
            r#"{"count":2,"percentiles":[{"quantile":0.99,"value":123456},{"quantile":0.5,"value":1.5}]}"#
        );
    }
}

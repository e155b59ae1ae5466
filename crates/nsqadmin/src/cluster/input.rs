//! What nsqadmin reads from nsqd, deserialized leniently (nsqlookupd's
//! answers are `nsq_protocol::lookupd`'s shapes, lenient too).
//!
//! nsqadmin must work against any NSQ (Go or nsq-rs, old or new), so every
//! field defaults when missing: nsqd ≤ 1.2 has no `topology_*` keys in its
//! client stats, old nsqds have no `broadcast_address` in `/info`, and so on.
//! (`nsq_protocol::stats` is the exact, strict shape nsqd writes; reading with
//! it would turn a missing key into a failed node.)

use std::collections::BTreeMap;

use serde::Deserialize;

/// `GET /info` of nsqd.
pub use nsq_protocol::stats::NsqdInfo;

/// `GET /stats?format=json` of nsqd.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct NsqdStats {
    pub topics: Option<Vec<NsqdTopic>>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct NsqdTopic {
    pub topic_name: String,
    pub channels: Option<Vec<NsqdChannel>>,
    pub depth: i64,
    pub backend_depth: i64,
    pub message_count: i64,
    pub zone_local_msg_count: i64,
    pub region_local_msg_count: i64,
    pub global_msg_count: i64,
    pub paused: bool,
    pub e2e_processing_latency: Option<NsqdE2e>,
    /// nsq-rs only (absent from NSQ's nsqd).
    #[serde(flatten)]
    pub settings: super::settings::TopicSettings,
    /// nsq-rs replicated topics only.
    #[serde(flatten)]
    pub replicated: super::replicated::Replicated,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct NsqdChannel {
    pub channel_name: String,
    pub depth: i64,
    pub backend_depth: i64,
    pub in_flight_count: i64,
    pub deferred_count: i64,
    pub message_count: i64,
    pub zone_local_msg_count: i64,
    pub region_local_msg_count: i64,
    pub global_msg_count: i64,
    pub requeue_count: i64,
    pub timeout_count: i64,
    pub client_count: i64,
    pub clients: Option<Vec<NsqdClient>>,
    pub paused: bool,
    pub e2e_processing_latency: Option<NsqdE2e>,
    /// nsq-rs only (absent from NSQ's nsqd).
    #[serde(flatten)]
    pub settings: super::settings::ChannelSettings,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct NsqdClient {
    pub client_id: String,
    pub hostname: String,
    pub version: String,
    pub remote_address: String,
    pub ready_count: i64,
    pub in_flight_count: i64,
    pub message_count: i64,
    pub finish_count: i64,
    pub requeue_count: i64,
    pub connect_ts: i64,
    pub sample_rate: i64,
    pub deflate: bool,
    pub snappy: bool,
    pub user_agent: String,
    pub authed: bool,
    pub auth_identity: String,
    pub auth_identity_url: String,
    pub topology_zone: String,
    pub topology_region: String,
    pub tls: bool,
    pub tls_cipher_suite: String,
    pub tls_version: String,
    pub tls_negotiated_protocol: String,
    pub tls_negotiated_protocol_is_mutual: bool,
}

/// nsqd's E2E latency object; percentiles are kept as the free-form maps Go uses.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct NsqdE2e {
    pub count: i64,
    pub percentiles: Option<Vec<BTreeMap<String, f64>>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_real_stats_and_old_clients() {
        let s: NsqdStats = serde_json::from_str(include_str!("../../testdata/stats.json")).unwrap();
        let t = &s.topics.unwrap()[0];
        assert_eq!((t.topic_name.as_str(), t.message_count), ("sample", 3));
        let c = &t.channels.as_ref().unwrap()[0];
        assert_eq!(
            (
                c.global_msg_count,
                c.clients.as_ref().unwrap()[0].user_agent.as_str()
            ),
            (3, "probe/1.0")
        );
        // An nsqd 1.2 client object (no topology keys) still parses.
        let old: NsqdClient =
            serde_json::from_str(r#"{"client_id":"x","hostname":"h","connect_ts":5}"#).unwrap();
        assert_eq!((old.connect_ts, old.topology_zone.as_str()), (5, ""));
    }
}

//! Which channels do the lookupds already know for a new topic? A topic
//! created at run time asks every identified lookupd (`GET /channels?topic=`)
//! and creates those channels before its first message flows, so that
//! message reaches every consumer group that exists elsewhere.

use std::collections::BTreeSet;

use nsq_protocol::lookupd::Channels;

/// Channels the lookupds at `addrs` (HTTP) know for `topic` (union).
/// Unreachable lookupds are logged and skipped.
pub async fn lookupd_channels(
    client: &nsq_http::Client,
    addrs: &[String],
    topic: &str,
) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let query = nsq_http::url::query_escape(topic);
    for addr in addrs {
        let url = format!("http://{addr}/channels?topic={query}");
        match client.get_v1::<Channels>(&url).await {
            Ok(r) => out.extend(r.channels),
            Err(e) => tracing::warn!(lookupd = %addr, error = %e, "failed to query /channels"),
        }
    }
    out
}

//! The history's sampling task: every `history::INTERVAL` it asks the
//! cluster for every nsqd's `/stats` (without clients) and records them,
//! with the warnings met, in the shared [`History`](crate::history::History).
//! Never: what a sample keeps ([`crate::history`]).

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::cluster::ClusterInfo;
use crate::history::{now_ms, INTERVAL};
use crate::shared::Shared;

/// Samples the cluster every interval until `shutdown` (a poll in progress is abandoned).
pub async fn run_poller(shared: Arc<Shared>, ci: ClusterInfo, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = poll_once(&shared, &ci) => {}
        }
    }
}

/// One sample: every nsqd's stats (without clients), recorded with the warnings met.
async fn poll_once(shared: &Shared, ci: &ClusterInfo) {
    let now = now_ms();
    let mut warnings = Vec::new();
    let producers = match ci.producers(&shared.upstreams()).await {
        Ok((p, e)) => {
            if !e.is_empty() {
                warnings.push(e.join("\n"));
            }
            p
        }
        Err(e) => {
            tracing::debug!(error = %e, "history: no producers");
            shared.history.failed(format!("WARNING: {e}"));
            return;
        }
    };
    if producers.is_empty() {
        shared.history.record(now, &[], String::new());
        return;
    }
    match ci.nsqd_stats(&producers, "", "", false, now / 1000).await {
        Ok((stats, e)) => {
            if !e.is_empty() {
                warnings.push(e.join("\n"));
            }
            let msg = if warnings.is_empty() {
                String::new()
            } else {
                format!("WARNING: {}", warnings.join("; "))
            };
            shared.history.record(now, &stats.topics, msg);
        }
        Err(e) => {
            tracing::debug!(error = %e, "history: stats failed");
            shared.history.failed(format!("WARNING: {e}"));
        }
    }
}

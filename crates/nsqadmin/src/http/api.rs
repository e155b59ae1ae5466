//! The read side of `/api`: topics, topic, channel, nodes, node, counter,
//! graphite, and nsq-rs's `/api/history` routes.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;
use tokio::task::JoinSet;

use super::{v1_json, warning, ApiErr, ApiResult, Req};
use crate::cluster::{
    types::sort_clients_by_node_topology, ChannelStats, ClusterError, Producer, TopicStats,
};
use crate::history::Series;
use crate::shared::Shared;

pub fn now_secs() -> i64 {
    crate::history::now_ms() / 1000
}

fn upstream_err(e: ClusterError) -> ApiErr {
    tracing::error!("{e}");
    ApiErr::new(502, format!("UPSTREAM_ERROR: {e}"))
}

/// Takes the value of a fetch, noting its partial failures as one warning.
fn keep<T>(
    r: Result<(T, Vec<String>), ClusterError>,
    messages: &mut Vec<String>,
) -> Result<T, ApiErr> {
    let (v, errs) = r.map_err(upstream_err)?;
    if !errs.is_empty() {
        let msg = errs.join("\n");
        tracing::warn!("{msg}");
        messages.push(msg);
    }
    Ok(v)
}

/// A response object followed by `"message"`.
#[derive(Serialize)]
struct WithMessage<'a, T: Serialize> {
    #[serde(flatten)]
    inner: &'a T,
    message: String,
}

#[derive(Serialize)]
struct TopicsList {
    topics: Option<Vec<String>>,
    message: String,
}

#[derive(Serialize)]
struct InactiveTopics {
    topics: BTreeMap<String, Option<Vec<String>>>,
    message: String,
}

pub async fn topics(s: &Arc<Shared>, req: &Req) -> ApiResult {
    let up = s.upstreams();
    let mut messages = Vec::new();
    let topics = keep(s.ci.topics(&up).await, &mut messages)?;
    if req.param("inactive").as_deref() == Some("true") {
        let mut map = BTreeMap::new();
        if !up.lookupds.is_empty() {
            let active = keep(
                s.ci.lookupd_active_topics(&up.lookupds).await,
                &mut messages,
            )?;
            let mut set = JoinSet::new();
            for t in topics.into_iter().filter(|t| !active.contains(t)) {
                let ci = s.ci.clone();
                let lookupds = up.lookupds.clone();
                set.spawn(async move {
                    let channels = ci
                        .lookupd_topic_channels(&t, &lookupds)
                        .await
                        .map(|(c, _)| c)
                        .unwrap_or_default();
                    Some((t, (!channels.is_empty()).then_some(channels)))
                });
            }
            while let Some(r) = set.join_next().await {
                if let Ok(Some((t, c))) = r {
                    map.insert(t, c);
                }
            }
        }
        return Ok(v1_json(&InactiveTopics {
            topics: map,
            message: warning(&messages),
        }));
    }
    Ok(v1_json(&TopicsList {
        topics: (!topics.is_empty()).then_some(topics),
        message: warning(&messages),
    }))
}

pub async fn topic(s: &Arc<Shared>, topic: &str) -> ApiResult {
    let up = s.upstreams();
    let mut messages = Vec::new();
    let producers = keep(s.ci.topic_producers(topic, &up).await, &mut messages)?;
    let stats = keep(
        s.ci.nsqd_stats(&producers, topic, "", false, now_secs())
            .await,
        &mut messages,
    )?;
    let agg = TopicStats::aggregate(topic, stats.topics);
    Ok(v1_json(&WithMessage {
        inner: &agg,
        message: warning(&messages),
    }))
}

pub async fn channel(s: &Arc<Shared>, topic: &str, channel: &str) -> ApiResult {
    let up = s.upstreams();
    let mut messages = Vec::new();
    let producers = keep(s.ci.topic_producers(topic, &up).await, &mut messages)?;
    let mut stats = keep(
        s.ci.nsqd_stats(&producers, topic, channel, true, now_secs())
            .await,
        &mut messages,
    )?;
    // nsqadmin 1.3.0 dereferences a missing channel and answers 500.
    let mut ch: ChannelStats = stats
        .channels
        .remove(channel)
        .ok_or_else(|| ApiErr::new(500, "INTERNAL_ERROR"))?;
    if let Some(c) = ch.clients.as_mut() {
        sort_clients_by_node_topology(c);
    }
    Ok(v1_json(&WithMessage {
        inner: &ch,
        message: warning(&messages),
    }))
}

#[derive(Serialize)]
struct NodesList {
    nodes: Option<Vec<Producer>>,
    message: String,
}

pub async fn nodes(s: &Arc<Shared>) -> ApiResult {
    let mut messages = Vec::new();
    let producers = keep(s.ci.producers(&s.upstreams()).await, &mut messages)?;
    Ok(v1_json(&NodesList {
        nodes: (!producers.is_empty()).then_some(producers),
        message: warning(&messages),
    }))
}

/// nsq-rs: the replication cluster as one member shows it.
#[derive(Serialize)]
struct ReplicationView {
    /// The member asked (its HTTP address); null when no nsqd is a member.
    node: Option<String>,
    /// Its `GET /replication`.
    replication: Option<serde_json::Value>,
    message: String,
}

/// `GET /api/replication` (nsq-rs): the first member's `GET /replication`.
pub async fn replication(s: &Arc<Shared>) -> ApiResult {
    let mut messages = Vec::new();
    let found = keep(s.ci.replication(&s.upstreams()).await, &mut messages)?;
    let (node, replication) = found.map_or((None, None), |(n, v)| (Some(n), Some(v)));
    Ok(v1_json(&ReplicationView {
        node,
        replication,
        message: warning(&messages),
    }))
}

#[derive(Serialize)]
struct NodeDetail {
    node: String,
    topics: Option<Vec<TopicStats>>,
    total_messages: i64,
    total_clients: i64,
    message: String,
}

pub async fn node(s: &Arc<Shared>, node: &str) -> ApiResult {
    let mut messages = Vec::new();
    let producers = keep(s.ci.producers(&s.upstreams()).await, &mut messages)?;
    let producer = producers
        .into_iter()
        .find(|p| p.http_address() == node)
        .ok_or_else(|| ApiErr::new(404, "NODE_NOT_FOUND"))?;
    let (stats, errs) =
        s.ci.nsqd_stats(&[producer], "", "", true, now_secs())
            .await
            .map_err(upstream_err)?;
    if let Some(e) = errs.first() {
        return Err(ApiErr::new(502, format!("UPSTREAM_ERROR: {e}")));
    }
    let total_messages = stats.topics.iter().map(|t| t.message_count).sum();
    let total_clients = stats
        .topics
        .iter()
        .flat_map(|t| t.channels.iter().flatten())
        .map(|c| c.clients.as_ref().map_or(0, |v| v.len() as i64))
        .sum();
    let topics = (!stats.topics.is_empty()).then_some(stats.topics);
    Ok(v1_json(&NodeDetail {
        node: node.to_string(),
        topics,
        total_messages,
        total_clients,
        message: warning(&messages),
    }))
}

#[derive(Serialize)]
struct CounterEntry {
    node: String,
    topic_name: String,
    channel_name: String,
    message_count: i64,
}

#[derive(Serialize)]
struct Counter {
    stats: BTreeMap<String, CounterEntry>,
    message: String,
}

pub async fn counter(s: &Arc<Shared>) -> ApiResult {
    let mut messages = Vec::new();
    let producers = keep(s.ci.producers(&s.upstreams()).await, &mut messages)?;
    let stats = keep(
        s.ci.nsqd_stats(&producers, "", "", false, now_secs()).await,
        &mut messages,
    )?;
    let mut out: BTreeMap<String, CounterEntry> = BTreeMap::new();
    for ch in stats.channels.values() {
        for n in ch.nodes.iter().flatten() {
            let key = format!("{}:{}:{}", ch.topic_name, ch.channel_name, n.node);
            out.entry(key)
                .or_insert_with(|| CounterEntry {
                    node: n.node.clone(),
                    topic_name: ch.topic_name.clone(),
                    channel_name: ch.channel_name.clone(),
                    message_count: 0,
                })
                .message_count += n.message_count;
        }
    }
    Ok(v1_json(&Counter {
        stats: out,
        message: warning(&messages),
    }))
}

#[derive(Serialize)]
struct Rate {
    rate: String,
}

pub async fn graphite(s: &Arc<Shared>, req: &Req) -> ApiResult {
    if req.param("metric").as_deref() != Some("rate") {
        return Err(ApiErr::new(400, "INVALID_ARG_METRIC"));
    }
    let target = req
        .param("target")
        .ok_or_else(|| ApiErr::new(400, "INVALID_ARG_TARGET"))?;
    let opts = s.options();
    let interval = opts.statsd_interval.as_secs() as i64;
    let query: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("format", "json")
        .append_pair("from", &format!("-{}sec", interval * 2))
        .append_pair("target", &target)
        .append_pair("until", &format!("-{interval}sec"))
        .finish();
    let url = format!("{}/render?{query}", opts.graphite_url);
    tracing::info!("GRAPHITE: {url}");
    let internal = |e: String| {
        tracing::error!("graphite request failed - {e}");
        ApiErr::new(500, "INTERNAL_ERROR")
    };
    let resp: serde_json::Value = s
        .graphite_client
        .get_v1(&url)
        .await
        .map_err(|e| internal(e.to_string()))?;
    let v = resp
        .get(0)
        .and_then(|t| t.get("datapoints"))
        .and_then(|d| d.get(0))
        .and_then(|p| p.get(0))
        .and_then(|v| v.as_f64())
        .ok_or_else(|| internal("no datapoint".into()))?;
    let rate = if v < 0.0 {
        "N/A".to_string()
    } else {
        format!("{:.2}", v / interval.max(1) as f64)
    };
    Ok(v1_json(&Rate { rate }))
}

// ---- nsq-rs: in-memory history ----

/// `?points=N` caps each series at N samples (0 or absent = everything kept).
fn points(req: &Req) -> usize {
    req.param("points")
        .and_then(|p| p.parse().ok())
        .unwrap_or(0)
}

#[derive(Serialize)]
struct HistoryAll {
    interval_ms: i64,
    window_ms: i64,
    updated_ms: i64,
    cluster: Series,
    topics: BTreeMap<String, Series>,
    message: String,
}

pub fn history(s: &Arc<Shared>, req: &Req) -> ApiResult {
    let n = points(req);
    let out = s.history.read(|h| HistoryAll {
        interval_ms: h.interval_ms,
        window_ms: h.window_ms,
        updated_ms: h.updated_ms,
        cluster: h.cluster.series(n),
        topics: h
            .topics
            .iter()
            .map(|(k, t)| (k.clone(), t.total.series(n)))
            .collect(),
        message: h.message.clone(),
    });
    Ok(v1_json(&out))
}

#[derive(Serialize)]
struct HistoryTopic {
    topic: String,
    interval_ms: i64,
    window_ms: i64,
    updated_ms: i64,
    total: Series,
    nodes: BTreeMap<String, Series>,
    channels: BTreeMap<String, Series>,
    message: String,
}

pub fn history_topic(s: &Arc<Shared>, req: &Req, topic: &str) -> ApiResult {
    let n = points(req);
    let out = s.history.read(|h| {
        let t = h.topics.get(topic);
        HistoryTopic {
            topic: topic.to_string(),
            interval_ms: h.interval_ms,
            window_ms: h.window_ms,
            updated_ms: h.updated_ms,
            total: t.map(|t| t.total.series(n)).unwrap_or_default(),
            nodes: t
                .map(|t| {
                    t.nodes
                        .iter()
                        .map(|(k, r)| (k.clone(), r.series(n)))
                        .collect()
                })
                .unwrap_or_default(),
            channels: t
                .map(|t| {
                    t.channels
                        .iter()
                        .map(|(k, c)| (k.clone(), c.total.series(n)))
                        .collect()
                })
                .unwrap_or_default(),
            message: h.message.clone(),
        }
    });
    Ok(v1_json(&out))
}

#[derive(Serialize)]
struct HistoryChannel {
    topic: String,
    channel: String,
    interval_ms: i64,
    window_ms: i64,
    updated_ms: i64,
    total: Series,
    nodes: BTreeMap<String, Series>,
    message: String,
}

pub fn history_channel(s: &Arc<Shared>, req: &Req, topic: &str, channel: &str) -> ApiResult {
    let n = points(req);
    let out = s.history.read(|h| {
        let c = h.topics.get(topic).and_then(|t| t.channels.get(channel));
        HistoryChannel {
            topic: topic.to_string(),
            channel: channel.to_string(),
            interval_ms: h.interval_ms,
            window_ms: h.window_ms,
            updated_ms: h.updated_ms,
            total: c.map(|c| c.total.series(n)).unwrap_or_default(),
            nodes: c
                .map(|c| {
                    c.nodes
                        .iter()
                        .map(|(k, r)| (k.clone(), r.series(n)))
                        .collect()
                })
                .unwrap_or_default(),
            message: h.message.clone(),
        }
    });
    Ok(v1_json(&out))
}

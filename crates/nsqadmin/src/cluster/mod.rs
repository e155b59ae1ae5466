//! The cluster as nsqadmin sees it: discovery through nsqlookupd (or a fixed
//! list of nsqd), stats fetched from every nsqd concurrently and aggregated,
//! and the admin actions fanned out to nsqlookupd and nsqd.
//!
//! Error model (nsqadmin's): a query of N upstreams where all N fail (0 of 0
//! included) is a total failure, [`ClusterError`], answered 502 by the API;
//! otherwise the answer is served and the failures travel along as warning
//! text (`Vec<String>`, one entry per failed upstream). Actions collect every
//! upstream POST failure as a warning; only a failed producer discovery is total.

pub mod actions;
pub mod counts;
pub mod e2e;
pub mod input;
pub mod members;
pub mod replay;
pub mod replicated;
pub mod settings;
pub mod types;

use std::collections::BTreeMap;
use std::future::Future;

use tokio::task::JoinSet;

use input::{NsqdInfo, NsqdStats};
use nsq_http::url::{base_url, query_escape};
use nsq_http::Client;
use nsq_protocol::lookupd::{Channels, Lookup, Node, Nodes, Topics};
pub use types::{ChannelStats, ClientStats, Producer, ProducerTopic, TopicStats};

/// Every queried upstream failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    #[error("failed to query any nsqlookupd: {0}")]
    Lookupds(String),
    #[error("failed to query any nsqd: {0}")]
    Nsqds(String),
}

/// An nsqd's refusal of an action, to pass on: its status and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub status: u16,
    pub text: String,
}

impl Refused {
    /// The status and `message` of an nsqd's error answer (502 when it
    /// could not be reached).
    fn from_nsqd(e: &nsq_http::client::Error) -> Refused {
        let text = match e {
            nsq_http::client::Error::Status { body, .. } => {
                serde_json::from_slice::<serde_json::Value>(body)
                    .ok()
                    .and_then(|v| v["message"].as_str().map(str::to_string))
                    .unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_string())
            }
            other => format!("UPSTREAM_ERROR: {other}"),
        };
        Refused {
            status: e.status_code().unwrap_or(502),
            text,
        }
    }
}

/// A result plus the upstream failures it survived.
pub type Fetched<T> = Result<(T, Vec<String>), ClusterError>;

/// Where nsqadmin finds the cluster (one of the two lists is non-empty).
#[derive(Debug, Clone, Default)]
pub struct Upstreams {
    pub lookupds: Vec<String>,
    pub nsqds: Vec<String>,
}

/// The stats of a set of nsqds: per-node topics (sorted by host) and the
/// cluster view of each channel, keyed by channel name when one topic was
/// asked for, else by `topic:channel`.
#[derive(Debug, Default)]
pub struct StatsResult {
    pub topics: Vec<TopicStats>,
    pub channels: BTreeMap<String, ChannelStats>,
}

/// Runs `f` for every item concurrently; results come back in input order.
/// A failure is kept as its text, which nsqadmin shows as is.
async fn fan_out<I, T, F, Fut>(items: Vec<I>, f: F) -> Vec<(I, Result<T, String>)>
where
    I: Clone + Send + 'static,
    T: Send + 'static,
    F: Fn(I) -> Fut,
    Fut: Future<Output = Result<T, nsq_http::Error>> + Send + 'static,
{
    let mut set = JoinSet::new();
    for (i, item) in items.iter().cloned().enumerate() {
        let fut = f(item);
        set.spawn(async move { (i, fut.await.map_err(|e| e.to_string())) });
    }
    let mut out: Vec<Option<Result<T, String>>> = items.iter().map(|_| None).collect();
    while let Some(r) = set.join_next().await {
        match r {
            Ok((i, v)) => out[i] = Some(v),
            Err(e) => tracing::error!(error = %e, "upstream query task failed"),
        }
    }
    items
        .into_iter()
        .zip(out)
        .map(|(item, r)| (item, r.unwrap_or_else(|| Err("query task failed".into()))))
        .collect()
}

/// The successes of a fan-out (with the item each came from) and the error texts.
type Settled<I, T> = (Vec<(I, T)>, Vec<String>);

/// Splits fan-out results into successes and error texts; all failed (or
/// nothing to ask) → the total error built by `total`.
fn settle<I, T>(
    results: Vec<(I, Result<T, String>)>,
    total: fn(String) -> ClusterError,
) -> Result<Settled<I, T>, ClusterError> {
    let n = results.len();
    let mut ok = Vec::new();
    let mut errs = Vec::new();
    for (i, r) in results {
        match r {
            Ok(v) => ok.push((i, v)),
            Err(e) => errs.push(e),
        }
    }
    if errs.len() == n {
        return Err(total(errs.join("\n")));
    }
    Ok((ok, errs))
}

/// Sorted, de-duplicated.
fn uniq_sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v.dedup();
    v
}

/// Talks to the cluster; cheap to clone.
#[derive(Clone)]
pub struct ClusterInfo {
    client: Client,
}

impl ClusterInfo {
    pub fn new(client: Client) -> ClusterInfo {
        ClusterInfo { client }
    }

    /// `GET <addr><path>` on every address at once, as NSQ's v1 JSON;
    /// settled as [`settle`] does (all failed → the error `total` builds).
    async fn get_each<T>(
        &self,
        addrs: &[String],
        path: String,
        total: fn(String) -> ClusterError,
    ) -> Result<Settled<String, T>, ClusterError>
    where
        T: serde::de::DeserializeOwned + Default + Send + 'static,
    {
        let c = self.client.clone();
        let r = fan_out(addrs.to_vec(), move |addr| {
            let c = c.clone();
            let url = format!("{}{path}", base_url(&addr));
            async move { c.get_v1::<T>(&url).await }
        })
        .await;
        settle(r, total)
    }

    /// Union of every nsqlookupd's `/topics`, sorted.
    pub async fn lookupd_topics(&self, lookupds: &[String]) -> Fetched<Vec<String>> {
        let (ok, errs): Settled<_, Topics> = self
            .get_each(lookupds, "/topics".into(), ClusterError::Lookupds)
            .await?;
        let topics = ok.into_iter().flat_map(|(_, t)| t.topics).collect();
        Ok((uniq_sorted(topics), errs))
    }

    /// Union of every nsqlookupd's `/channels?topic=`, sorted.
    pub async fn lookupd_topic_channels(
        &self,
        topic: &str,
        lookupds: &[String],
    ) -> Fetched<Vec<String>> {
        let path = format!("/channels?topic={}", query_escape(topic));
        let (ok, errs): Settled<_, Channels> = self
            .get_each(lookupds, path, ClusterError::Lookupds)
            .await?;
        let channels = ok.into_iter().flat_map(|(_, t)| t.channels).collect();
        Ok((uniq_sorted(channels), errs))
    }

    /// Every nsqd registered with any nsqlookupd (`/nodes`), de-duplicated by
    /// TCP address, with the lookupd connections seen for each, `out_of_date`
    /// set below the newest version, sorted by hostname.
    pub async fn lookupd_producers(&self, lookupds: &[String]) -> Fetched<Vec<Producer>> {
        let (ok, errs): Settled<_, Nodes> = self
            .get_each(lookupds, "/nodes".into(), ClusterError::Lookupds)
            .await?;
        let mut producers: Vec<Producer> = Vec::new();
        for (lookupd, resp) in ok {
            for lp in resp.producers {
                let mut p = Producer::from_lookupd(lp);
                let seen = format!("{lookupd}/{}", p.address());
                match producers
                    .iter_mut()
                    .find(|q| q.tcp_address() == p.tcp_address())
                {
                    Some(q) => q.remote_addresses.get_or_insert_with(Vec::new).push(seen),
                    None => {
                        if let Some(t) = p.topics.as_mut() {
                            t.sort_by(|a, b| a.topic.cmp(&b.topic));
                        }
                        p.remote_addresses = Some(vec![seen]);
                        producers.push(p);
                    }
                }
            }
        }
        if let Some(max) = producers.iter().map(|p| p.semver.clone()).max() {
            for p in &mut producers {
                p.out_of_date = p.semver < max;
            }
        }
        producers.sort_by(|a, b| a.hostname.cmp(&b.hostname));
        Ok((producers, errs))
    }

    /// The topics that have at least one producer on some nsqlookupd: those
    /// an nsqd registered and that are not tombstoned there. One `/nodes`
    /// request per nsqlookupd answers for every topic at once, where a
    /// `/lookup` per topic would be one request per topic (the inactive
    /// topics list at thousands of topics).
    pub async fn lookupd_active_topics(
        &self,
        lookupds: &[String],
    ) -> Fetched<std::collections::BTreeSet<String>> {
        let (ok, errs): Settled<_, Nodes> = self
            .get_each(lookupds, "/nodes".into(), ClusterError::Lookupds)
            .await?;
        let mut active = std::collections::BTreeSet::new();
        for (_, resp) in ok {
            for node in resp.producers {
                for (i, t) in node.topics.into_iter().enumerate() {
                    if !node.tombstones.get(i).copied().unwrap_or(false) {
                        active.insert(t);
                    }
                }
            }
        }
        Ok((active, errs))
    }

    /// The producers of `topic` according to the nsqlookupds (`/lookup`),
    /// de-duplicated by HTTP address.
    pub async fn lookupd_topic_producers(
        &self,
        topic: &str,
        lookupds: &[String],
    ) -> Fetched<Vec<Producer>> {
        let path = format!("/lookup?topic={}", query_escape(topic));
        let (ok, errs): Settled<_, Lookup> = self
            .get_each(lookupds, path, ClusterError::Lookupds)
            .await?;
        let mut producers: Vec<Producer> = Vec::new();
        for (_, resp) in ok {
            for producer in resp.producers {
                let p = Producer::from_lookupd(Node {
                    producer,
                    ..Node::default()
                });
                if !producers
                    .iter()
                    .any(|q| q.http_address() == p.http_address())
                {
                    producers.push(p);
                }
            }
        }
        Ok((producers, errs))
    }

    /// Union of the topic names in each nsqd's `/stats`, sorted.
    pub async fn nsqd_topics(&self, nsqds: &[String]) -> Fetched<Vec<String>> {
        let (ok, errs): Settled<_, NsqdStats> = self
            .get_each(nsqds, "/stats?format=json".into(), ClusterError::Nsqds)
            .await?;
        let topics = ok
            .into_iter()
            .flat_map(|(_, s)| s.topics.unwrap_or_default())
            .map(|t| t.topic_name)
            .collect();
        Ok((uniq_sorted(topics), errs))
    }

    /// Each configured nsqd as a producer (`/info` + its topics from `/stats`).
    pub async fn nsqd_producers(&self, nsqds: &[String]) -> Fetched<Vec<Producer>> {
        let c = self.client.clone();
        let r = fan_out(nsqds.to_vec(), move |addr| {
            let c = c.clone();
            async move {
                let info: NsqdInfo = c.get_v1(&format!("{}/info", base_url(&addr))).await?;
                let stats: NsqdStats = c
                    .get_v1(&format!(
                        "{}/stats?format=json&include_clients=false",
                        base_url(&addr)
                    ))
                    .await?;
                let topics = stats
                    .topics
                    .unwrap_or_default()
                    .into_iter()
                    .map(|t| t.topic_name)
                    .collect();
                Ok(Producer::from_nsqd(info, topics))
            }
        })
        .await;
        let (ok, errs) = settle(r, ClusterError::Nsqds)?;
        Ok((ok.into_iter().map(|(_, p)| p).collect(), errs))
    }

    /// The configured nsqds that have `topic` (nsqd mode).
    pub async fn nsqd_topic_producers(
        &self,
        topic: &str,
        nsqds: &[String],
    ) -> Fetched<Vec<Producer>> {
        let c = self.client.clone();
        let topic = topic.to_string();
        let r = fan_out(nsqds.to_vec(), move |addr| {
            let c = c.clone();
            let topic = topic.clone();
            async move {
                let url = format!(
                    "{}/stats?format=json&topic={}&include_clients=false",
                    base_url(&addr),
                    query_escape(&topic)
                );
                let stats: NsqdStats = c.get_v1(&url).await?;
                let names: Vec<String> = stats
                    .topics
                    .unwrap_or_default()
                    .into_iter()
                    .map(|t| t.topic_name)
                    .collect();
                if !names.contains(&topic) {
                    return Ok(None);
                }
                let mut info: NsqdInfo = c.get_v1(&format!("{}/info", base_url(&addr))).await?;
                // Old nsqds lack broadcast_address/hostname: fall back to the configured address.
                if info.broadcast_address.is_empty() {
                    if let Some((h, p)) = addr.rsplit_once(':') {
                        info.broadcast_address =
                            h.trim_start_matches('[').trim_end_matches(']').to_string();
                        info.http_port = p.parse().unwrap_or(0);
                    }
                }
                if info.hostname.is_empty() {
                    info.hostname = addr
                        .rsplit_once(':')
                        .map_or(addr.as_str(), |(h, _)| h)
                        .to_string();
                }
                Ok(Some(Producer::from_nsqd(info, names)))
            }
        })
        .await;
        let (ok, errs) = settle(r, ClusterError::Nsqds)?;
        Ok((ok.into_iter().filter_map(|(_, p)| p).collect(), errs))
    }

    /// All nsqds of the cluster (lookupd mode if lookupds are configured).
    pub async fn producers(&self, up: &Upstreams) -> Fetched<Vec<Producer>> {
        if !up.lookupds.is_empty() {
            self.lookupd_producers(&up.lookupds).await
        } else {
            self.nsqd_producers(&up.nsqds).await
        }
    }

    /// The nsqds that have `topic`.
    pub async fn topic_producers(&self, topic: &str, up: &Upstreams) -> Fetched<Vec<Producer>> {
        if !up.lookupds.is_empty() {
            self.lookupd_topic_producers(topic, &up.lookupds).await
        } else {
            self.nsqd_topic_producers(topic, &up.nsqds).await
        }
    }

    /// Every topic name in the cluster.
    pub async fn topics(&self, up: &Upstreams) -> Fetched<Vec<String>> {
        if !up.lookupds.is_empty() {
            self.lookupd_topics(&up.lookupds).await
        } else {
            self.nsqd_topics(&up.nsqds).await
        }
    }

    /// `/stats` of each producer (filtered to `topic`/`channel` when given),
    /// per node and aggregated per channel. Zero producers is a total failure.
    pub async fn nsqd_stats(
        &self,
        producers: &[Producer],
        topic: &str,
        channel: &str,
        include_clients: bool,
        now_secs: i64,
    ) -> Fetched<StatsResult> {
        let c = self.client.clone();
        let mut query = String::from("format=json");
        if !topic.is_empty() {
            query.push_str(&format!("&topic={}", query_escape(topic)));
            if !channel.is_empty() {
                query.push_str(&format!("&channel={}", query_escape(channel)));
            }
        }
        if !include_clients {
            query.push_str("&include_clients=false");
        }
        let r = fan_out(producers.to_vec(), move |p: Producer| {
            let c = c.clone();
            let url = format!("http://{}/stats?{query}", p.http_address());
            async move { c.get_v1::<NsqdStats>(&url).await }
        })
        .await;
        let (ok, errs) = settle(r, ClusterError::Nsqds)?;
        let mut topics: Vec<TopicStats> = Vec::new();
        for (p, stats) in ok {
            for t in stats.topics.unwrap_or_default() {
                if !topic.is_empty() && t.topic_name != topic {
                    continue;
                }
                topics.push(TopicStats::from_nsqd(t, &p, now_secs));
            }
        }
        types::sort_by_host(&mut topics, |t| (&t.hostname, &t.node));
        let mut groups: BTreeMap<String, (String, String, Vec<ChannelStats>)> = BTreeMap::new();
        // A replicated topic's channels count once, from its leader.
        let counts = replicated::counts_in(&topics, |t| &t.topic_name, |t| &t.replicated);
        for (t, _) in topics.iter().zip(counts).filter(|(_, c)| *c) {
            for ch in t.channels.iter().flatten() {
                let key = if topic.is_empty() {
                    format!("{}:{}", t.topic_name, ch.channel_name)
                } else {
                    ch.channel_name.clone()
                };
                groups
                    .entry(key)
                    .or_insert_with(|| (t.topic_name.clone(), ch.channel_name.clone(), Vec::new()))
                    .2
                    .push(ch.clone());
            }
        }
        let channels = groups
            .into_iter()
            .map(|(k, (t, c, nodes))| (k, ChannelStats::aggregate(&t, &c, nodes)))
            .collect();
        Ok((StatsResult { topics, channels }, errs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_of_zero_is_total() {
        let r: Vec<(String, Result<(), String>)> = vec![];
        assert_eq!(
            settle(r, ClusterError::Nsqds).unwrap_err().to_string(),
            "failed to query any nsqd: "
        );
        let r = vec![("a".to_string(), Err("x".into())), ("b".to_string(), Ok(1))];
        let (ok, errs) = settle(r, ClusterError::Nsqds).unwrap();
        assert_eq!((ok.len(), errs), (1, vec!["x".to_string()]));
        let r = vec![
            ("a".to_string(), Err::<(), _>("x".into())),
            ("b".to_string(), Err("y".into())),
        ];
        assert_eq!(
            settle(r, ClusterError::Lookupds).unwrap_err().to_string(),
            "failed to query any nsqlookupd: x\ny"
        );
    }
}

//! Finding a topic's nsqds and summing one channel's stats over them, as
//! NSQ's cluster-info helpers do (and with their error texts, which
//! nsq_stat prints before exiting).
//!
//! Requests are NSQ "V1" requests (`nsq_http`'s client), as clusterinfo
//! makes them, so nsqd and nsqlookupd answer with bare JSON and failures
//! read as Go's.

use std::collections::HashMap;
use std::time::Duration;

use nsq_http::url::base_url;
use nsq_protocol::lookupd::Lookup;
use serde_json::Value;

/// One channel's counters, summed over nsqds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChannelTotals {
    pub depth: i64,
    pub backend_depth: i64,
    pub in_flight_count: i64,
    pub deferred_count: i64,
    pub requeue_count: i64,
    pub timeout_count: i64,
    pub message_count: i64,
    pub client_count: i64,
}

impl ChannelTotals {
    fn add(&mut self, c: &Value) {
        let n = |k: &str| c.get(k).and_then(Value::as_i64).unwrap_or(0);
        self.depth += n("depth");
        self.backend_depth += n("backend_depth");
        self.in_flight_count += n("in_flight_count");
        self.deferred_count += n("deferred_count");
        self.requeue_count += n("requeue_count");
        self.timeout_count += n("timeout_count");
        self.message_count += n("message_count");
        self.client_count += n("client_count");
    }
}

/// An nsqd that has the topic: where its HTTP API is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Producer {
    pub broadcast_address: String,
    pub http_port: i64,
}

impl Producer {
    /// `host:port`, bracketing IPv6 literals (Go's `net.JoinHostPort`).
    pub fn http_address(&self) -> String {
        nsq_protocol::lookupd::join_host_port(&self.broadcast_address, self.http_port)
    }
}

/// Where to look, and the client that asks.
pub struct Cluster {
    lookupd_http_addrs: Vec<String>,
    nsqd_http_addrs: Vec<String>,
    client: nsq_http::Client,
}

impl Cluster {
    pub fn new(
        lookupd_http_addrs: Vec<String>,
        nsqd_http_addrs: Vec<String>,
        connect_timeout: Duration,
        request_timeout: Duration,
        http_secret: &str,
    ) -> Cluster {
        Cluster {
            lookupd_http_addrs,
            nsqd_http_addrs,
            client: nsq_http::Client::new(
                nsq_http::ClientOptions::new(connect_timeout, request_timeout).secret(http_secret),
            ),
        }
    }

    /// The nsqds that have `topic`: from every nsqlookupd's `/lookup`
    /// (deduplicated by HTTP address), or from the given nsqds' `/stats`.
    /// Any failed query is an error, as nsq_stat treats partial answers.
    pub async fn topic_producers(&self, topic: &str) -> Result<Vec<Producer>, String> {
        let q = form_urlencoded::Serializer::new(String::new())
            .append_pair("topic", topic)
            .finish();
        let mut producers: Vec<Producer> = Vec::new();
        let mut errs = Vec::new();
        if !self.lookupd_http_addrs.is_empty() {
            for addr in &self.lookupd_http_addrs {
                let url = format!("{}/lookup?{q}", base_url(addr));
                match self.client.get_v1::<Lookup>(&url).await {
                    Ok(lookup) => {
                        for p in lookup.producers {
                            let p = Producer {
                                broadcast_address: p.broadcast_address,
                                http_port: p.http_port,
                            };
                            if !producers
                                .iter()
                                .any(|pp| pp.http_address() == p.http_address())
                            {
                                producers.push(p);
                            }
                        }
                    }
                    Err(e) => errs.push(e.to_string()),
                }
            }
            return combine(producers, errs, self.lookupd_http_addrs.len(), "nsqlookupd");
        }
        for addr in &self.nsqd_http_addrs {
            match self.nsqd_producer(addr, topic, &q).await {
                Ok(Some(p)) => producers.push(p),
                Ok(None) => {}
                Err(e) => errs.push(e),
            }
        }
        combine(producers, errs, self.nsqd_http_addrs.len(), "nsqd")
    }

    /// One nsqd, if it has the topic; its `/info` says where it is.
    async fn nsqd_producer(
        &self,
        addr: &str,
        topic: &str,
        q: &str,
    ) -> Result<Option<Producer>, String> {
        let stats = self
            .get_json(&format!(
                "{}/stats?format=json&{q}&include_clients=false",
                base_url(addr)
            ))
            .await?;
        let has_topic = stats
            .get("topics")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|t| t.get("topic_name").and_then(Value::as_str) == Some(topic));
        if !has_topic {
            return Ok(None);
        }
        let info = self.get_json(&format!("{}/info", base_url(addr))).await?;
        let mut p = Producer {
            broadcast_address: info
                .get("broadcast_address")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            http_port: info.get("http_port").and_then(Value::as_i64).unwrap_or(0),
        };
        // Old nsqds without these fields: use the address we were given.
        if p.broadcast_address.is_empty() {
            let (host, port) = split_host_port(addr);
            p.broadcast_address = host;
            p.http_port = port.parse().unwrap_or(0);
        }
        Ok(Some(p))
    }

    /// Each producer's stats for `topic`/`channel`, summed per channel name.
    /// With no producers at all this is an error too (nothing answered).
    pub async fn channel_stats(
        &self,
        producers: &[Producer],
        topic: &str,
        channel: &str,
    ) -> Result<HashMap<String, ChannelTotals>, String> {
        let q = form_urlencoded::Serializer::new(String::new())
            .append_pair("topic", topic)
            .append_pair("channel", channel)
            .finish();
        let mut totals: HashMap<String, ChannelTotals> = HashMap::new();
        let mut errs = Vec::new();
        for p in producers {
            let stats = match self
                .get_json(&format!(
                    "http://{}/stats?format=json&{q}&include_clients=false",
                    p.http_address()
                ))
                .await
            {
                Ok(v) => v,
                Err(e) => {
                    errs.push(e);
                    continue;
                }
            };
            for t in stats
                .get("topics")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if t.get("topic_name").and_then(Value::as_str) != Some(topic) {
                    continue;
                }
                for c in t
                    .get("channels")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let name = c
                        .get("channel_name")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    totals.entry(name.to_string()).or_default().add(c);
                }
            }
        }
        combine(totals, errs, producers.len(), "nsqd")
    }

    /// A V1 GET: 200 + JSON body, else Go's error text.
    async fn get_json(&self, url: &str) -> Result<Value, String> {
        self.client.get_v1(url).await.map_err(|e| e.to_string())
    }
}

/// cluster-info's rule: all queries failed (or there were none) → one
/// error naming the daemon kind; some failed → the failures, one per line.
fn combine<T>(value: T, errs: Vec<String>, asked: usize, kind: &str) -> Result<T, String> {
    if errs.len() == asked {
        return Err(format!("failed to query any {kind}: {}", errs.join("\n")));
    }
    if !errs.is_empty() {
        return Err(errs.join("\n"));
    }
    Ok(value)
}

/// `host:port` → (host, port), brackets removed.
fn split_host_port(addr: &str) -> (String, String) {
    match addr.rsplit_once(':') {
        Some((h, p)) => (
            h.trim_start_matches('[').trim_end_matches(']').to_string(),
            p.to_string(),
        ),
        None => (addr.to_string(), String::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_add_up() {
        let mut t = ChannelTotals::default();
        let a: Value = serde_json::json!({"depth": 6, "backend_depth": 1, "in_flight_count": 2, "message_count": 9, "client_count": 1});
        t.add(&a);
        t.add(&a);
        assert_eq!(
            t,
            ChannelTotals {
                depth: 12,
                backend_depth: 2,
                in_flight_count: 4,
                message_count: 18,
                client_count: 2,
                ..Default::default()
            }
        );
    }

    #[test]
    fn error_combination() {
        assert_eq!(
            combine((), vec![], 0, "nsqd"),
            Err("failed to query any nsqd: ".to_string())
        );
        assert_eq!(
            combine((), vec!["a".into(), "b".into()], 3, "nsqd"),
            Err("a\nb".to_string())
        );
        assert_eq!(combine(1, vec![], 2, "nsqd"), Ok(1));
        assert_eq!(
            Producer {
                broadcast_address: "::1".into(),
                http_port: 1
            }
            .http_address(),
            "[::1]:1"
        );
    }
}

//! The admin actions nsqadmin fans out to nsqlookupd and nsqd: a topic
//! or channel created (or, replicated, created through one member),
//! deleted, tombstoned, and the producers' pause and empty. Every upstream
//! POST that fails is a warning; only a failed producer discovery is
//! total. Never: what an nsqd does with the request.

use hyper::Method;
use nsq_http::url::{base_url, query_escape};

use super::{ClusterError, ClusterInfo, Producer, Refused, Upstreams};

impl ClusterInfo {
    /// POSTs `path?qs` to each address in order; failures are returned as warnings.
    async fn post_each(&self, addrs: &[String], path: &str, qs: &str) -> Vec<String> {
        let mut errs = Vec::new();
        for addr in addrs {
            let url = format!("{}/{path}?{qs}", base_url(addr));
            tracing::info!("CI: querying {url}");
            if let Err(e) = self.client.v1(Method::POST, &url, None).await {
                errs.push(e.to_string());
            }
        }
        errs
    }

    async fn post_producers(&self, producers: &[Producer], path: &str, qs: &str) -> Vec<String> {
        let addrs: Vec<String> = producers.iter().map(Producer::http_address).collect();
        self.post_each(&addrs, path, qs).await
    }

    /// Tombstones `node` for `topic` on every lookupd, then deletes the topic
    /// on that nsqd (at the address its `/info` reports).
    pub async fn tombstone_node_for_topic(
        &self,
        topic: &str,
        node: &str,
        lookupds: &[String],
    ) -> Result<Vec<String>, ClusterError> {
        let mut errs = self
            .post_each(
                lookupds,
                "topic/tombstone",
                &format!("topic={}&node={}", query_escape(topic), query_escape(node)),
            )
            .await;
        let (producers, e) = self.nsqd_producers(&[node.to_string()]).await?;
        errs.extend(e);
        errs.extend(
            self.post_producers(
                &producers,
                "topic/delete",
                &format!("topic={}", query_escape(topic)),
            )
            .await,
        );
        Ok(errs)
    }

    /// Creates the topic (and channel) on every lookupd, and the channel on
    /// the nsqds that already produce the topic.
    pub async fn create_topic_channel(
        &self,
        topic: &str,
        channel: &str,
        lookupds: &[String],
    ) -> Result<Vec<String>, ClusterError> {
        let mut errs = self
            .post_each(
                lookupds,
                "topic/create",
                &format!("topic={}", query_escape(topic)),
            )
            .await;
        if !channel.is_empty() {
            let qs = format!(
                "topic={}&channel={}",
                query_escape(topic),
                query_escape(channel)
            );
            errs.extend(self.post_each(lookupds, "channel/create", &qs).await);
            let (producers, e) = self.lookupd_topic_producers(topic, lookupds).await?;
            errs.extend(e);
            errs.extend(self.post_producers(&producers, "channel/create", &qs).await);
        }
        Ok(errs)
    }

    /// Creates a replicated topic (nsq-rs, docs/replication.md) through one
    /// member nsqd: its group commits it on every member, and its leader
    /// registers it with the lookupds, so nothing is sent to them. Then
    /// the channel, if given, the same way, on the same nsqd. The nsqds
    /// are asked in turn until one takes it: one without the replication
    /// flags (`REPLICATION_NOT_ENABLED`), one that cannot be reached and a
    /// 5xx (a member without a majority) send it to the next; any other
    /// refusal (`replicas` too large, the topic already there
    /// unreplicated) would be every member's, and is the answer.
    pub async fn create_replicated_topic(
        &self,
        topic: &str,
        channel: &str,
        replicas: &str,
        up: &Upstreams,
    ) -> Result<Vec<String>, Refused> {
        let (producers, mut errs) = self.producers(up).await.map_err(|e| Refused {
            status: 502,
            text: format!("UPSTREAM_ERROR: {e}"),
        })?;
        let qs = format!(
            "topic={}&replicas={}",
            query_escape(topic),
            query_escape(replicas)
        );
        let mut last = Refused {
            status: 502,
            text: "UPSTREAM_ERROR: no nsqd to create the topic on".into(),
        };
        for p in &producers {
            let url = format!("http://{}/topic/create?{qs}", p.http_address());
            tracing::info!("CI: querying {url}");
            let e = match self.client.v1(Method::POST, &url, None).await {
                Ok(_) => {
                    if !channel.is_empty() {
                        let cq = format!(
                            "topic={}&channel={}",
                            query_escape(topic),
                            query_escape(channel)
                        );
                        errs.extend(
                            self.post_each(&[p.http_address()], "channel/create", &cq)
                                .await,
                        );
                    }
                    return Ok(errs);
                }
                Err(e) => e,
            };
            let refused = Refused::from_nsqd(&e);
            let next = refused.status >= 500 || refused.text == "REPLICATION_NOT_ENABLED";
            if !next {
                return Err(refused);
            }
            errs.push(e.to_string());
            last = refused;
        }
        Err(last)
    }

    /// Deletes a topic on every lookupd and on every nsqd producing it
    /// (producers are resolved first, before the lookupds forget them).
    pub async fn delete_topic(
        &self,
        topic: &str,
        up: &Upstreams,
    ) -> Result<Vec<String>, ClusterError> {
        let (producers, mut errs) = self.topic_producers(topic, up).await?;
        let qs = format!("topic={}", query_escape(topic));
        errs.extend(self.post_each(&up.lookupds, "topic/delete", &qs).await);
        errs.extend(self.post_producers(&producers, "topic/delete", &qs).await);
        Ok(errs)
    }

    /// Deletes a channel on every lookupd and on every nsqd producing its topic.
    pub async fn delete_channel(
        &self,
        topic: &str,
        channel: &str,
        up: &Upstreams,
    ) -> Result<Vec<String>, ClusterError> {
        let (producers, mut errs) = self.topic_producers(topic, up).await?;
        let qs = format!(
            "topic={}&channel={}",
            query_escape(topic),
            query_escape(channel)
        );
        errs.extend(self.post_each(&up.lookupds, "channel/delete", &qs).await);
        errs.extend(self.post_producers(&producers, "channel/delete", &qs).await);
        Ok(errs)
    }

    /// Pause/unpause/empty: `POST /<path>?<qs>` on every nsqd producing `topic`.
    pub async fn producers_action(
        &self,
        topic: &str,
        path: &str,
        qs: &str,
        up: &Upstreams,
    ) -> Result<Vec<String>, ClusterError> {
        let (producers, mut errs) = self.topic_producers(topic, up).await?;
        errs.extend(self.post_producers(&producers, path, qs).await);
        Ok(errs)
    }
}

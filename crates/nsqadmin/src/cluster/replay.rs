//! nsq-rs replay of a replicated topic's channel through nsqadmin (the
//! channel page's *Replay from*; docs/features/replay.md): the reset is
//! asked of one nsqd that has the topic, which commits it through the
//! topic's group (asking each would reset the channel once per member).
//! Owns which nsqd is asked and what its answer says to the user. Never:
//! what `to` may be (nsqd checks it and says why not).

use hyper::Method;
use nsq_http::url::query_escape;

use super::{ClusterInfo, Refused, Upstreams};

impl ClusterInfo {
    /// `POST /channel/reset?topic=&channel=&to=` on the first nsqd of the
    /// topic that answers neither a 5xx nor a 404 (a member outside the
    /// topic's group has none of its channels; one without a majority
    /// cannot commit): what it answered, in words. Any other 4xx is the
    /// answer (a bad `to`, an unreplicated topic).
    pub async fn reset_channel(
        &self,
        topic: &str,
        channel: &str,
        to: &str,
        up: &Upstreams,
    ) -> Result<String, Refused> {
        let (producers, _) = self.topic_producers(topic, up).await.map_err(|e| Refused {
            status: 502,
            text: format!("UPSTREAM_ERROR: {e}"),
        })?;
        let qs = format!(
            "topic={}&channel={}&to={}",
            query_escape(topic),
            query_escape(channel),
            query_escape(to)
        );
        let mut last = Refused {
            status: 502,
            text: "UPSTREAM_ERROR: no nsqd has the topic".into(),
        };
        for p in &producers {
            let url = format!("http://{}/channel/reset?{qs}", p.http_address());
            tracing::info!("CI: querying {url}");
            match self.client.v1(Method::POST, &url, None).await {
                Ok(body) => return Ok(answer_text(&body)),
                Err(e) => {
                    let refused = Refused::from_nsqd(&e);
                    if refused.status < 500 && refused.status != 404 {
                        return Err(refused);
                    }
                    last = refused;
                }
            }
        }
        Err(last)
    }
}

/// What nsqd's answer to a reset says, for the page.
fn answer_text(body: &[u8]) -> String {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    if let Some(m) = v["message"].as_str() {
        return format!("Channel reset: {m}");
    }
    match v["from"].as_str() {
        Some(from) => format!("Channel reset: replaying from the message published {from}"),
        None => "Channel reset: it gets what is published from now on".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_in_words() {
        assert_eq!(
            answer_text(br#"{"from":"2026-12-07T21:00:00Z","before_retention":false}"#),
            "Channel reset: replaying from the message published 2026-12-07T21:00:00Z"
        );
        assert_eq!(
            answer_text(br#"{"from":null,"before_retention":false}"#),
            "Channel reset: it gets what is published from now on"
        );
        assert!(
            answer_text(br#"{"from":"x","before_retention":true,"message":"before"}"#)
                .ends_with("before")
        );
    }
}

//! nsqd's `/stats?format=json`, read with `nsq_http`'s client.

use std::time::Duration;

use anyhow::{anyhow, Result};
use serde_json::{json, Value};

use crate::conn::resolve;

/// GETs `path` (with query) as an NSQ V1 request and parses the body as
/// JSON (a pre-1.0 nsqd's `{"status_code":..,"data":{..}}` unwrapped).
pub async fn get_json(
    addr: &str,
    path: &str,
    allow_remote: bool,
    timeout: Duration,
) -> Result<Value> {
    let sa = resolve(addr, allow_remote).await?;
    let client = nsq_http::Client::new(nsq_http::ClientOptions::new(timeout, timeout));
    Ok(client.get_v1(&format!("http://{sa}{path}")).await?)
}

/// Depth figures of `topic`/`channel` from `/stats`.
pub async fn channel_depth(
    addr: &str,
    topic: &str,
    channel: &str,
    allow_remote: bool,
) -> Result<Value> {
    let path = format!(
        "/stats?format=json&topic={}&include_clients=false&include_mem=false",
        nsq_http::url::query_escape(topic)
    );
    let v = get_json(addr, &path, allow_remote, Duration::from_secs(10)).await?;
    let t = v
        .get("topics")
        .and_then(Value::as_array)
        .and_then(|ts| {
            ts.iter()
                .find(|t| t.get("topic_name").and_then(Value::as_str) == Some(topic))
        })
        .ok_or_else(|| anyhow!("topic {topic:?} not in /stats"))?;
    let c = t
        .get("channels")
        .and_then(Value::as_array)
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.get("channel_name").and_then(Value::as_str) == Some(channel))
        })
        .ok_or_else(|| anyhow!("channel {topic:?}/{channel:?} not in /stats"))?;
    let g = |o: &Value, k: &str| o.get(k).cloned().unwrap_or(Value::Null);
    Ok(json!({
        "topic_depth": g(t, "depth"),
        "topic_message_count": g(t, "message_count"),
        "channel_depth": g(c, "depth"),
        "channel_backend_depth": g(c, "backend_depth"),
        "channel_in_flight": g(c, "in_flight_count"),
        "channel_deferred": g(c, "deferred_count"),
        "channel_message_count": g(c, "message_count"),
        "channel_requeue_count": g(c, "requeue_count"),
        "channel_timeout_count": g(c, "timeout_count"),
    }))
}

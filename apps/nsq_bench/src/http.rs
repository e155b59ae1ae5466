//! Minimal HTTP/1.0 GET for nsqd's `/stats?format=json` (no client library).

use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::conn::{resolve, show};

const MAX_RESPONSE: u64 = 32 << 20;

/// GETs `path` (with query) and parses the body as JSON.
pub async fn get_json(
    addr: &str,
    path: &str,
    allow_remote: bool,
    timeout: Duration,
) -> Result<Value> {
    let sa = resolve(addr, allow_remote).await?;
    let fetch = async {
        let mut s = TcpStream::connect(sa)
            .await
            .with_context(|| format!("connecting to {sa}"))?;
        let req = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nAccept: application/vnd.nsq; version=1.0\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await?;
        let mut buf = Vec::new();
        (&mut s).take(MAX_RESPONSE).read_to_end(&mut buf).await?;
        Ok::<_, anyhow::Error>(buf)
    };
    let buf = tokio::time::timeout(timeout, fetch)
        .await
        .map_err(|_| anyhow!("GET http://{addr}{path}: timed out"))??;
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| anyhow!("GET {path}: malformed HTTP response"))?;
    let head = String::from_utf8_lossy(&buf[..split]);
    let status = head
        .lines()
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .unwrap_or("");
    let body = &buf[split + 4..];
    if status != "200" {
        bail!("GET {path}: HTTP status {status:?}: {}", show(body));
    }
    let v: Value =
        serde_json::from_slice(body).with_context(|| format!("GET {path}: body is not JSON"))?;
    // Pre-1.0 nsqd wrapped responses as {"status_code":..,"data":{..}}.
    if v.get("status_code").is_some() {
        if let Some(d) = v.get("data") {
            return Ok(d.clone());
        }
    }
    Ok(v)
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
        urlenc(topic)
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

fn urlenc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

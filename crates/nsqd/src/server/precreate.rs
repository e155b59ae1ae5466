//! Which channels do the lookupds already know for a new topic? A topic
//! created at run time asks every identified lookupd (`GET /channels?topic=`)
//! and creates those channels before its first message flows, so that
//! message reaches every consumer group that exists elsewhere.

use std::collections::BTreeSet;
use std::time::Duration;

use nsq_protocol::lookupd::{decode_v1, Channels};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest response we accept from a lookupd.
const MAX_RESPONSE: usize = 5 * 1024 * 1024;

/// Channels the lookupds at `addrs` (HTTP) know for `topic` (union).
/// Unreachable lookupds are logged and skipped.
pub async fn lookupd_channels(
    addrs: &[String],
    topic: &str,
    timeout: Duration,
) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let path = format!(
        "/channels?topic={}",
        form_urlencoded::byte_serialize(topic.as_bytes()).collect::<String>()
    );
    for addr in addrs {
        match tokio::time::timeout(timeout, http_get(addr, &path)).await {
            Ok(Ok(body)) => match decode_v1::<Channels>(&body) {
                Ok(r) => out.extend(r.channels),
                Err(e) => tracing::warn!(lookupd = %addr, error = %e, "bad /channels answer"),
            },
            Ok(Err(e)) => tracing::warn!(lookupd = %addr, error = %e, "failed to query /channels"),
            Err(_) => tracing::warn!(lookupd = %addr, "timed out querying /channels"),
        }
    }
    out
}

/// A minimal HTTP/1.0 GET (the server closes after answering, so no
/// chunking); returns the body of a 200.
async fn http_get(addr: &str, path: &str) -> Result<Vec<u8>, std::io::Error> {
    let mut s = TcpStream::connect(addr).await?;
    let req = format!(
        "GET {path} HTTP/1.0\r\nHost: {addr}\r\nAccept: application/vnd.nsq; version=1.0\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await?;
    let mut resp = Vec::new();
    s.take(MAX_RESPONSE as u64).read_to_end(&mut resp).await?;
    let split = resp
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("malformed HTTP response"))?;
    let head = String::from_utf8_lossy(&resp[..split]);
    let status = head.split_whitespace().nth(1).unwrap_or("");
    if status != "200" {
        return Err(std::io::Error::other(format!("status {status}")));
    }
    Ok(resp[split + 4..].to_vec())
}

//! Admin-action notifications: with `--notification-http-endpoint` set, every
//! admin action is POSTed there as JSON, one at a time, by a background task
//! (the API never waits for it; failures are only logged).

use bytes::Bytes;
use hyper::Method;
use serde::Serialize;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use nsq_http::Client;

/// The notification body, in nsqadmin's key order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AdminAction {
    pub action: String,
    pub topic: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub channel: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub node: String,
    pub timestamp: i64,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub user: String,
    pub remote_ip: String,
    pub user_agent: String,
    pub url: String,
    pub via: String,
}

/// Queue of actions to send.
#[derive(Debug, Clone)]
pub struct Notifier {
    tx: mpsc::UnboundedSender<AdminAction>,
}

impl Notifier {
    /// Starts the sender task; it drains the queue until `shutdown`.
    pub fn start(endpoint: String, client: Client, shutdown: CancellationToken) -> Notifier {
        let (tx, mut rx) = mpsc::unbounded_channel::<AdminAction>();
        tokio::spawn(async move {
            loop {
                let action = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    a = rx.recv() => match a { Some(a) => a, None => return },
                };
                if endpoint.is_empty() {
                    continue;
                }
                let body = Bytes::from(nsq_protocol::gofmt::to_json(&action));
                tracing::info!("POSTing notification to {endpoint}");
                match client
                    .request(
                        Method::POST,
                        &endpoint,
                        &[("Content-Type", "application/json")],
                        Some(body),
                    )
                    .await
                {
                    Ok(r) if !r.status.is_success() => {
                        tracing::warn!("notification endpoint answered {}", r.status)
                    }
                    Ok(_) => {}
                    Err(e) => tracing::error!("failed to POST notification - {e}"),
                }
            }
        });
        Notifier { tx }
    }

    pub fn send(&self, action: AdminAction) {
        if self.tx.send(action).is_err() {
            tracing::warn!("notification dropped: sender stopped");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_order_and_omissions() {
        let a = AdminAction {
            action: "pause_channel".into(),
            topic: "beer".into(),
            channel: "mouth".into(),
            node: String::new(),
            timestamp: 1357683731,
            user: String::new(),
            remote_ip: "1.2.3.4:5678".into(),
            user_agent: "curl/8".into(),
            url: "http://admin.local/api/topics/beer/mouth".into(),
            via: "adminhost".into(),
        };
        assert_eq!(
            String::from_utf8(nsq_protocol::gofmt::to_json(&a)).unwrap(),
            r#"{"action":"pause_channel","topic":"beer","channel":"mouth","timestamp":1357683731,"remote_ip":"1.2.3.4:5678","user_agent":"curl/8","url":"http://admin.local/api/topics/beer/mouth","via":"adminhost"}"#
        );
    }
}

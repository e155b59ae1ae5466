//! Who is subscribed: one row per connected HTTP subscriber, and the
//! `GET /stats` document built from the rows (subscribers per topic and
//! channel, messages delivered to each: written to its socket and FINed).
//!
//! Rows are added when a `/sub` stream starts and removed when it ends;
//! this module only counts, it never touches a socket or a consumer.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::Serialize;

/// The subscriber table. A `std`-style mutex with short critical sections:
/// rows change once per subscriber, never per message.
#[derive(Default)]
pub struct Table {
    next_id: AtomicU64,
    rows: Mutex<BTreeMap<u64, Row>>,
    total_messages: Arc<AtomicU64>,
}

struct Row {
    topic: String,
    channel: String,
    remote_address: String,
    connect_ts: i64,
    messages: Arc<AtomicU64>,
}

/// A subscriber's place in the table: its id and its message counters.
#[derive(Clone)]
pub struct Seat {
    pub id: u64,
    messages: Arc<AtomicU64>,
    total: Arc<AtomicU64>,
}

impl Seat {
    /// One message was written to this subscriber and finished.
    pub fn delivered(&self) {
        self.messages.fetch_add(1, Ordering::Relaxed);
        self.total.fetch_add(1, Ordering::Relaxed);
    }
}

/// `GET /stats`.
#[derive(Debug, Serialize)]
pub struct Stats {
    pub version: &'static str,
    /// Messages delivered to HTTP subscribers since start.
    pub total_messages: u64,
    /// Subscribers connected now.
    pub subscribers: usize,
    pub topics: Vec<TopicStats>,
}

#[derive(Debug, Serialize)]
pub struct TopicStats {
    pub topic_name: String,
    pub subscribers: usize,
    pub channels: Vec<ChannelStats>,
}

#[derive(Debug, Serialize)]
pub struct ChannelStats {
    pub channel_name: String,
    pub subscribers: usize,
    pub clients: Vec<ClientStats>,
}

#[derive(Debug, Serialize)]
pub struct ClientStats {
    pub remote_address: String,
    /// Unix seconds when the subscription started.
    pub connect_ts: i64,
    /// Messages delivered to this subscriber.
    pub message_count: u64,
}

impl Table {
    pub fn add(&self, topic: &str, channel: &str, remote_address: &str) -> Seat {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let messages = Arc::new(AtomicU64::new(0));
        let connect_ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or_default();
        let row = Row {
            topic: topic.to_string(),
            channel: channel.to_string(),
            remote_address: remote_address.to_string(),
            connect_ts,
            messages: messages.clone(),
        };
        self.rows.lock().insert(id, row);
        Seat {
            id,
            messages,
            total: self.total_messages.clone(),
        }
    }

    pub fn remove(&self, id: u64) {
        self.rows.lock().remove(&id);
    }

    /// Topics and channels sorted by name, clients by start time.
    pub fn stats(&self) -> Stats {
        let rows = self.rows.lock();
        let mut topics: BTreeMap<&str, BTreeMap<&str, Vec<ClientStats>>> = BTreeMap::new();
        for row in rows.values() {
            topics
                .entry(&row.topic)
                .or_default()
                .entry(&row.channel)
                .or_default()
                .push(ClientStats {
                    remote_address: row.remote_address.clone(),
                    connect_ts: row.connect_ts,
                    message_count: row.messages.load(Ordering::Relaxed),
                });
        }
        let topics: Vec<TopicStats> = topics
            .into_iter()
            .map(|(topic, channels)| {
                let channels: Vec<ChannelStats> = channels
                    .into_iter()
                    .map(|(channel, clients)| ChannelStats {
                        channel_name: channel.to_string(),
                        subscribers: clients.len(),
                        clients,
                    })
                    .collect();
                TopicStats {
                    topic_name: topic.to_string(),
                    subscribers: channels.iter().map(|c| c.subscribers).sum(),
                    channels,
                }
            })
            .collect();
        Stats {
            version: nsq_protocol::VERSION,
            total_messages: self.total_messages.load(Ordering::Relaxed),
            subscribers: rows.len(),
            topics,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_topic_and_channel() {
        let t = Table::default();
        let a = t.add("t", "c", "127.0.0.1:1");
        let b = t.add("t", "c", "127.0.0.1:2");
        let c = t.add("t", "d#ephemeral", "127.0.0.1:3");
        let _d = t.add("u", "c", "127.0.0.1:4");
        a.delivered();
        a.delivered();
        c.delivered();
        t.remove(b.id);
        let s = serde_json::to_value(t.stats()).unwrap();
        assert_eq!(s["total_messages"], 3);
        assert_eq!(s["subscribers"], 3);
        assert_eq!(s["topics"][0]["topic_name"], "t");
        assert_eq!(s["topics"][0]["subscribers"], 2);
        let chans = s["topics"][0]["channels"].as_array().unwrap();
        assert_eq!(
            (
                chans[0]["channel_name"].as_str(),
                chans[0]["subscribers"].as_u64()
            ),
            (Some("c"), Some(1))
        );
        assert_eq!(chans[0]["clients"][0]["message_count"], 2);
        assert_eq!(chans[0]["clients"][0]["remote_address"], "127.0.0.1:1");
        assert_eq!(
            (
                chans[1]["channel_name"].as_str(),
                chans[1]["subscribers"].as_u64()
            ),
            (Some("d#ephemeral"), Some(1))
        );
        assert_eq!(s["topics"][1]["topic_name"], "u");
    }
}

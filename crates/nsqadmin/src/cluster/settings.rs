//! nsq-rs's settings and counters of a topic or channel (depth limits,
//! `max_attempts` and dead letters, a topic's own `mem_queue_size`,
//! `max_age` and what expired), absent
//! from NSQ: read from nsqd's `/stats`, answered inline in the topic's or
//! channel's `/api` object, and combined across nodes. Each key stays absent
//! while not set, as NSQ's nsqadmin would answer.

use serde::{Deserialize, Serialize};

use super::counts::is_zero;

/// nsq-rs settings and counters of a channel (each absent, as from NSQ,
/// while not set): read from nsqd's `/stats`, answered inline in the
/// channel's `/api` object. Across nodes the counters add up and the
/// settings are the first node's that has one (nsqadmin sets every node
/// alike).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ChannelSettings {
    #[serde(skip_serializing_if = "is_zero")]
    pub max_attempts: i64,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub dead_letter_topic: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub dead_letter_count: i64,
    #[serde(flatten)]
    pub depth_limit: DepthLimit,
    #[serde(flatten)]
    pub expiry: Expiry,
}

impl ChannelSettings {
    pub(super) fn add(&mut self, o: &ChannelSettings) {
        self.dead_letter_count += o.dead_letter_count;
        if self.max_attempts == 0 {
            self.max_attempts = o.max_attempts;
            self.dead_letter_topic.clone_from(&o.dead_letter_topic);
        }
        self.depth_limit.add(&o.depth_limit);
        self.expiry.add(&o.expiry);
    }
}

/// nsq-rs settings and counters of a topic, as [`ChannelSettings`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TopicSettings {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mem_queue_size: Option<i64>,
    #[serde(flatten)]
    pub depth_limit: DepthLimit,
    #[serde(flatten)]
    pub expiry: Expiry,
}

impl TopicSettings {
    pub(super) fn add(&mut self, o: &TopicSettings) {
        if self.mem_queue_size.is_none() {
            self.mem_queue_size = o.mem_queue_size;
        }
        self.depth_limit.add(&o.depth_limit);
        self.expiry.add(&o.expiry);
    }
}

/// A topic's or channel's `max_age` in force (Go's duration text) and the
/// messages that expired, last in both objects.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Expiry {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub max_age: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub expired_count: i64,
}

impl Expiry {
    fn add(&mut self, o: &Expiry) {
        self.expired_count += o.expired_count;
        if self.max_age.is_empty() {
            self.max_age.clone_from(&o.max_age);
        }
    }
}

/// A topic's or channel's depth limit (`max_depth`, `max_depth_policy`) and
/// what it dropped, last in both objects.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DepthLimit {
    #[serde(skip_serializing_if = "is_zero")]
    pub max_depth: i64,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub max_depth_policy: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub dropped_count: i64,
}

impl DepthLimit {
    fn add(&mut self, o: &DepthLimit) {
        self.dropped_count += o.dropped_count;
        if self.max_depth == 0 {
            self.max_depth = o.max_depth;
            self.max_depth_policy.clone_from(&o.max_depth_policy);
        }
    }
}

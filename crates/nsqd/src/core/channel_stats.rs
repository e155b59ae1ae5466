//! What `/stats` (and the topic's E2E merge) read of a channel: its
//! counters and queue lengths as NSQ's `ChannelStats`. A child of
//! [`super`], so reporting stays out of the delivery code.
//!
//! Never: the clients' entries or the dead-letter topic's name (the
//! server knows those and fills them in).

use std::time::Instant;

use nsq_protocol::stats::{ChannelStats, E2eLatency};

use super::Channel;

impl Channel {
    /// The channel's `/stats` entry without its clients; `backend_depth`
    /// comes from the server's disk queue.
    pub fn stats(&mut self, name: &str, backend_depth: i64, now: Instant) -> ChannelStats {
        let e2e = match self.e2e.as_mut() {
            Some(q) => q.snapshot(now),
            None => E2eLatency {
                count: 0,
                percentiles: None,
            },
        };
        ChannelStats {
            channel_name: name.to_string(),
            depth: self.queue.memory_len() as i64 + backend_depth,
            backend_depth,
            in_flight_count: self.in_flight.len() as i64,
            deferred_count: self.deferred.len() as i64,
            message_count: self.message_count,
            zone_local_msg_count: 0,
            region_local_msg_count: 0,
            global_msg_count: self.global_msg_count,
            requeue_count: self.requeue_count,
            timeout_count: self.timeout_count,
            dead_letter_count: self.dead_letter_count,
            max_attempts: self.max_attempts,
            // the server knows the dead-letter topic's name
            dead_letter_topic: None,
            max_depth: self.limit.max_depth,
            max_depth_policy: self.limit.is_set().then(|| self.limit.policy.to_string()),
            dropped_count: self.dropped_count,
            max_age: self
                .expires()
                .then(|| nsq_protocol::duration::format(self.max_age())),
            expired_count: self.expiry.count(),
            client_count: self.subscribers.len() as i64,
            clients: None,
            paused: self.paused,
            e2e_processing_latency: e2e,
        }
    }

    /// E2E samples of this channel's window (for the topic's merge).
    pub fn e2e_samples(&mut self, now: Instant) -> Option<(Vec<f64>, u64)> {
        self.e2e.as_mut().map(|e| e.samples(now))
    }
}

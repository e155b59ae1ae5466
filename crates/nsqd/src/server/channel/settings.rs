//! A channel's settings as the server keeps them (nsq-rs beyond NSQ):
//! `max_attempts` and its dead-letter topic, its own `max_age` and the
//! topic's that bounds it, its depth limit and memory bound, and what of
//! them `nsqd.dat` keeps. A child of [`super`]; the rules behind each are
//! the core channel's.

use std::time::Duration;

use super::super::clock::{now, now_unix_ns};
use super::{default_dead_letter_topic, Channel, Settings};
use crate::core::Limit;

impl Channel {
    /// Where this channel's messages past `max_attempts` go.
    pub fn dead_letter_topic(&self) -> String {
        self.state
            .lock()
            .dead_letter_topic
            .clone()
            .unwrap_or_else(|| default_dead_letter_topic(&self.topic_name, &self.name))
    }

    pub fn max_attempts(&self) -> u16 {
        self.lock().core.max_attempts()
    }

    /// `max_attempts` (0: unlimited) and the dead-letter topic (None: the
    /// default name), as `/channel/config` sets them and `nsqd.dat` keeps
    /// them.
    pub fn configure(&self, max_attempts: u16, dead_letter_topic: Option<String>) {
        self.run(|st| {
            st.dead_letter_topic = dead_letter_topic;
            st.core.set_max_attempts(max_attempts, now());
            let dead = st.has_dead_letters();
            st.core.set_expired_dead_letters(dead);
        })
    }

    /// Only what differs from the defaults, for `nsqd.dat`.
    pub fn settings(&self) -> Settings {
        let st = self.lock();
        let max = st.core.max_attempts();
        Settings {
            max_attempts: (max > 0).then_some(max),
            dead_letter_topic: st.dead_letter_topic.clone(),
            limit: st.core.limit(),
            max_age: st.core.own_max_age(),
        }
    }

    /// Its own `max_age` (nsq-rs; None: its topic's); the shorter of it and
    /// its topic's applies.
    pub fn set_max_age(&self, own: Option<Duration>) {
        self.run(|st| {
            let (topic, dead) = (st.topic_max_age, st.has_dead_letters());
            st.core.set_max_age(own, topic, dead, now(), now_unix_ns());
        })
    }

    /// Its topic's `max_age` in force changed (set through the topic).
    pub(in crate::server) fn set_topic_max_age(&self, topic: Duration) {
        self.run(|st| {
            st.topic_max_age = topic;
            let (own, dead) = (st.core.own_max_age(), st.has_dead_letters());
            st.core.set_max_age(own, topic, dead, now(), now_unix_ns());
        })
    }

    /// Its own `max_age`, if it has one.
    pub fn own_max_age(&self) -> Option<Duration> {
        self.lock().core.own_max_age()
    }

    /// The `max_age` in force (zero: none).
    pub fn max_age(&self) -> Duration {
        self.lock().core.max_age()
    }

    pub fn limit(&self) -> Limit {
        self.lock().core.limit()
    }

    /// Set through the topic ([`super::topic::Topic::set_channel_limit`]),
    /// which must know the channels that may refuse its publishes.
    pub(in crate::server) fn set_limit(&self, limit: Limit) {
        self.lock().core.set_limit(limit);
    }

    pub(in crate::server) fn set_mem_queue_size(&self, size: usize) {
        self.lock().core.set_mem_queue_size(size);
    }
}

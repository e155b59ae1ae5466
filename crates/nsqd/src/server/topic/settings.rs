//! A topic's settings as the server keeps them (nsq-rs beyond NSQ): its
//! depth limit and memory bound, which its channels take too, its
//! `max_age` and the one in force, a channel's limit set under the
//! topic's lock, and the entry `nsqd.dat` keeps of it and its channels. A
//! child of [`super`]; the rules behind each are the core topic's.

use std::time::Duration;

use super::super::channel::Channel;
use super::super::metadata::{ChannelMeta, TopicMeta};
use super::Topic;
use crate::core::Limit;

impl Topic {
    // ---- limits (nsq-rs, opt-in) ----

    pub fn limit(&self) -> Limit {
        self.state.lock().limit()
    }

    /// Its own `mem_queue_size` (None: `--mem-queue-size`).
    pub fn mem_queue_size(&self) -> Option<usize> {
        self.state.lock().mem_queue_size()
    }

    /// The topic's own limit and `mem_queue_size` (None: the flag's), which
    /// its channels take too.
    pub fn configure(&self, limit: Limit, mem_queue_size: Option<usize>) {
        let mut st = self.state.lock();
        st.set_limit(limit);
        let default = self.ctx.mem_queue_size();
        st.set_mem_queue_size(mem_queue_size, default);
        for (_, ch) in st.channels() {
            ch.set_mem_queue_size(mem_queue_size.unwrap_or(default));
        }
    }

    /// Its own `max_age` (nsq-rs; None: `--max-age`'s); its channels take
    /// the one in force too, unless theirs is shorter. The backlog's pump
    /// looks again at what expires.
    pub fn set_max_age(&self, own: Option<Duration>) {
        let mut st = self.state.lock();
        st.set_max_age(own, self.ctx.opts.max_age);
        for (_, ch) in st.channels() {
            ch.set_topic_max_age(st.max_age());
        }
        drop(st);
        self.pump.notify_one();
    }

    /// Its own `max_age`, if it has one, and the one in force.
    pub fn max_age(&self) -> (Option<Duration>, Duration) {
        let st = self.state.lock();
        (st.own_max_age(), st.max_age())
    }

    /// A channel's limit, under the topic's lock: no publish is between
    /// asking the channel and counting it as one that may refuse.
    pub fn set_channel_limit(&self, ch: &Channel, limit: Limit) {
        let mut st = self.state.lock();
        ch.set_limit(limit);
        st.set_channel_rejects(&ch.name, limit.rejects());
    }

    /// The topic's entry for nsqd.dat, with every non-ephemeral channel's.
    pub fn metadata(&self) -> TopicMeta {
        let st = self.state.lock();
        let chans: Vec<ChannelMeta> = st
            .channels()
            .filter(|(_, c)| !c.ephemeral)
            .map(|(n, c)| {
                let s = c.settings();
                ChannelMeta {
                    name: n.clone(),
                    paused: c.is_paused(),
                    max_attempts: s.max_attempts,
                    dead_letter_topic: s.dead_letter_topic,
                    max_depth: s.limit.is_set().then_some(s.limit.max_depth),
                    max_depth_policy: s.limit.is_set().then(|| s.limit.policy.to_string()),
                    max_age: s.max_age.map(duration_ns),
                }
            })
            .collect();
        let limit = st.limit();
        TopicMeta {
            name: self.name.clone(),
            paused: st.is_paused(),
            channels: (!chans.is_empty()).then_some(chans),
            mem_queue_size: st.mem_queue_size().map(|n| n as i64),
            max_depth: limit.is_set().then_some(limit.max_depth),
            max_depth_policy: limit.is_set().then(|| limit.policy.to_string()),
            max_age: st.own_max_age().map(duration_ns),
            replicas: self.replicas(),
        }
    }
}

/// A duration as `nsqd.dat` keeps it: nanoseconds, as Go encodes one.
fn duration_ns(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

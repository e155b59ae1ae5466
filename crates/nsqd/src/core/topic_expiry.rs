//! A topic's message expiry (nsq-rs, opt-in; docs/features/expiry.md): its
//! own `max_age` and the one in force, and the sweep of its backlog while
//! it cannot flow (paused, or no channel yet), memory first, then a sweep
//! of its backend handed to the server. A flowing topic expires nothing
//! itself: its channels do (`channel_expiry.rs`). A child of
//! `core::topic`.

use std::time::Duration;

use crate::core::channel::{BACKEND_SWEEP, BACKEND_SWEEP_MAX};
use crate::core::effects::BackendExpiry;
use crate::core::topic::{Sweep, Topic};

impl<C> Topic<C> {
    /// The topic's own `max_age` (None: `default`, the flag's; zero:
    /// never expire). Its channels take the one in force too, unless
    /// theirs is shorter.
    pub fn set_max_age(&mut self, own: Option<Duration>, default: Duration) {
        self.own_max_age = own;
        let max_age = own.unwrap_or(default);
        self.max_age_ns = i64::try_from(max_age.as_nanos()).unwrap_or(i64::MAX);
    }

    /// The `max_age` in force (zero: none).
    pub fn max_age(&self) -> Duration {
        Duration::from_nanos(self.max_age_ns.max(0) as u64)
    }

    /// Its own `max_age`, if it has one (for `nsqd.dat`).
    pub fn own_max_age(&self) -> Option<Duration> {
        self.own_max_age
    }

    /// Drops the expired messages at the head of the backlog's memory
    /// (`now_unix_ns`: the wall clock) and asks for a sweep of its backend
    /// while it holds records. A backlog that flows needs none: its
    /// channels expire what reaches them (their `max_age` is at most the
    /// topic's).
    pub fn sweep_expired(&mut self, now_unix_ns: i64) -> Sweep {
        if self.max_age_ns == 0 || self.can_flow() {
            return Sweep::default();
        }
        let before = now_unix_ns.saturating_sub(self.max_age_ns);
        while self
            .backlog
            .front()
            .is_some_and(|b| b.msg.timestamp < before)
        {
            if self.backlog.pop().is_some() {
                self.expired_count += 1;
            }
        }
        let mut sweep = Sweep {
            next_ns: self
                .backlog
                .front()
                .map(|b| b.msg.timestamp.saturating_add(self.max_age_ns)),
            backend: None,
        };
        if self.backlog.backend_pending() && !self.exiting {
            if !self.sweeping {
                self.sweeping = true;
                sweep.backend = Some(BackendExpiry {
                    before_ns: before,
                    bodies: false,
                    max: BACKEND_SWEEP_MAX,
                });
            }
            let again = now_unix_ns
                .saturating_add(BACKEND_SWEEP.as_nanos() as i64)
                .min(now_unix_ns.saturating_add(self.max_age_ns));
            sweep.next_ns = Some(sweep.next_ns.map_or(again, |n| n.min(again)));
        }
        sweep
    }

    /// A backend sweep ([`Sweep::backend`]) took `n` expired records.
    pub fn backend_expired(&mut self, n: u64) {
        self.sweeping = false;
        self.backend_len = self.backend_len.saturating_sub(n);
        self.expired_count += n;
    }
}

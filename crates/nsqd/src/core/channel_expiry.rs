//! A channel's expiry (nsq-rs, opt-in `max_age`; docs/features/expiry.md):
//! a message older than the channel's `max_age`, counted from its publish
//! timestamp, is never delivered. It expires wherever it waits: at the
//! head of memory (the timer sweeps it), in the backend (the server skips
//! the expired head of the disk queue without reading the bodies), when a
//! deferral comes due, when it is taken for delivery, and when a consumer
//! requeues it. An expired message is counted and dropped, or published
//! to the channel's dead-letter topic when it has one; on a replicated
//! topic's channel a dropped one is finished for the group too. A child
//! of [`super`].
//!
//! Never reads the clock: the server tells it the wall clock at a moment
//! of the monotonic one ([`Channel::sync_wall_clock`]), and an age is read
//! from there.

use std::time::{Duration, Instant};

use nsq_protocol::Message;

use super::Channel;
use crate::core::effects::BackendExpiry;

/// How often the timer looks at the backend while it holds records and
/// expiry is on: what an expired message on disk may outlive its age by.
pub const BACKEND_SWEEP: Duration = Duration::from_secs(1);

/// Most backend records one sweep takes off the disk queue.
pub const BACKEND_SWEEP_MAX: usize = 4096;

/// A channel's expiry settings and count, allocated once a `max_age`
/// applies to it: a channel without one (NSQ's behaviour, the default)
/// carries one empty pointer, so expiry off costs no memory per channel.
#[derive(Debug, Default)]
pub(super) struct Expiry(Option<Box<State>>);

#[derive(Debug, Default)]
struct State {
    /// The channel's own `max_age` (None: its topic's).
    own: Option<Duration>,
    /// The one in force, in ns; 0: off (NSQ's behaviour).
    max_age_ns: i64,
    /// The wall clock (Unix ns) at a moment of the monotonic one; None
    /// until the server first tells it.
    wall: Option<(Instant, i64)>,
    /// Expired messages go to the dead-letter topic instead of being
    /// dropped.
    dead_letters: bool,
    count: u64,
    /// A backend sweep is out (one at a time, like refills).
    sweeping: bool,
}

impl Expiry {
    /// Messages published before this (Unix ns) have expired by `now`;
    /// None when expiry is off.
    pub(super) fn cutoff(&self, now: Instant) -> Option<i64> {
        let s = self.0.as_deref()?;
        if s.max_age_ns == 0 {
            return None;
        }
        let (at, ns) = s.wall?;
        let wall_now = if now >= at {
            ns.saturating_add((now - at).as_nanos() as i64)
        } else {
            ns.saturating_sub((at - now).as_nanos() as i64)
        };
        Some(wall_now.saturating_sub(s.max_age_ns))
    }

    /// When a message published at `timestamp` (Unix ns) expires, on the
    /// monotonic clock; None while expiry is off.
    fn expires_at(&self, timestamp: i64) -> Option<Instant> {
        let s = self.0.as_deref().filter(|s| s.max_age_ns > 0)?;
        let (at, ns) = s.wall?;
        let left = timestamp.saturating_add(s.max_age_ns) - ns;
        Some(at + Duration::from_nanos(left.max(0) as u64))
    }

    /// Messages that expired here.
    pub(super) fn count(&self) -> u64 {
        self.0.as_deref().map_or(0, |s| s.count)
    }

    /// Whether the state is allocated (a `max_age` applied at some time).
    #[cfg(test)]
    pub(super) fn allocated(&self) -> bool {
        self.0.is_some()
    }

    fn state(&mut self) -> &mut State {
        self.0.get_or_insert_with(Box::default)
    }
}

impl Channel {
    /// The channel's own `max_age` (None: its topic's) and its topic's
    /// (zero: none); the shorter of the two applies (zero for both: never
    /// expire, NSQ's behaviour). `dead_letters`: what expires goes to the
    /// dead-letter topic. Expired messages in memory go at once.
    /// `now_unix_ns`: the wall clock at `now`.
    pub fn set_max_age(
        &mut self,
        own: Option<Duration>,
        topic: Duration,
        dead_letters: bool,
        now: Instant,
        now_unix_ns: i64,
    ) {
        let own = own.filter(|d| !d.is_zero());
        let max_age = match own {
            Some(o) if !topic.is_zero() => o.min(topic),
            Some(o) => o,
            None => topic,
        };
        if max_age.is_zero() && self.expiry.0.is_none() {
            return;
        }
        let s = self.expiry.state();
        s.own = own;
        s.max_age_ns = i64::try_from(max_age.as_nanos()).unwrap_or(i64::MAX);
        s.dead_letters = dead_letters;
        self.sync_wall_clock(now, now_unix_ns);
        if let Some(at) = self.sweep_expired(now) {
            self.schedule(at);
        }
        self.pump(now);
    }

    /// Whether what expires goes to the dead-letter topic (the channel has
    /// one: `max_attempts` or a dead-letter topic of its own is set).
    pub fn set_expired_dead_letters(&mut self, on: bool) {
        // without a `max_age` nothing expires; `set_max_age` is told again
        if let Some(s) = self.expiry.0.as_deref_mut() {
            s.dead_letters = on;
        }
    }

    /// The channel's own `max_age`, if it has one (for `nsqd.dat`).
    pub fn own_max_age(&self) -> Option<Duration> {
        self.expiry.0.as_deref().and_then(|s| s.own)
    }

    /// The wall clock (Unix ns) at `now`, from which ages are read until
    /// the next call (the server calls it from the channel's timer, so a
    /// step of the wall clock counts from the next timer run).
    pub fn sync_wall_clock(&mut self, now: Instant, now_unix_ns: i64) {
        if let Some(s) = self.expiry.0.as_deref_mut() {
            s.wall = Some((now, now_unix_ns));
        }
    }

    /// Whether expiry is on (a `max_age`).
    pub fn expires(&self) -> bool {
        self.expiry.0.as_deref().is_some_and(|s| s.max_age_ns > 0)
    }

    /// Messages that expired here, dropped or dead-lettered.
    pub fn expired_count(&self) -> u64 {
        self.expiry.count()
    }

    /// Whether `msg` has expired (`cutoff` from [`Expiry::cutoff`]).
    pub(super) fn is_expired(msg: &Message, cutoff: Option<i64>) -> bool {
        cutoff.is_some_and(|c| msg.timestamp < c)
    }

    /// Counts an expired message and drops it (finished, for a replicated
    /// topic's group) or hands it to the dead-letter topic.
    pub(super) fn expire(&mut self, msg: Message) {
        let s = self.expiry.state();
        s.count += 1;
        let dead_letters = s.dead_letters;
        let read = self.take_unacked(&msg.id);
        if dead_letters {
            if let Some(read) = read {
                self.effects.dead_letter_acks.push((msg.id, read));
            }
            self.effects.dead_letters.push(msg);
            return;
        }
        if let Some(read) = read {
            self.effects.acks.push(read);
        }
        if let Some(f) = self.finished.as_mut() {
            f.push(msg.id);
        }
    }

    /// Dead letters the dead-letter topic refused that had expired (not
    /// used up their attempts): counted again when they come back.
    pub(super) fn uncount_expired(&mut self, n: u64) {
        if let Some(s) = self.expiry.0.as_deref_mut() {
            s.count = s.count.saturating_sub(n);
        }
    }

    /// The timer's look: expired messages at the head of memory go, and a
    /// sweep of the backend is asked for while it holds records. Returns
    /// when to look again: when the next one at the head expires, or for
    /// the next backend sweep.
    pub(super) fn sweep_expired(&mut self, now: Instant) -> Option<Instant> {
        let cutoff = self.expiry.cutoff(now)?;
        while self
            .queue
            .front()
            .is_some_and(|m| Self::is_expired(m, Some(cutoff)))
        {
            if let Some((msg, _)) = self.queue.pop() {
                self.expire(msg);
            }
        }
        let s = self.expiry.state();
        if self.queue.backend_pending()
            && !self.exiting
            && !s.sweeping
            && self.effects.expire.is_none()
        {
            s.sweeping = true;
            self.effects.expire = Some(BackendExpiry {
                before_ns: cutoff,
                bodies: s.dead_letters,
                max: BACKEND_SWEEP_MAX,
            });
        }
        self.next_expiry(now)
    }

    /// When the timer must next look for expired messages (None: nothing
    /// can expire, or expiry is off).
    fn next_expiry(&self, now: Instant) -> Option<Instant> {
        if !self.expires() {
            return None;
        }
        let head = self
            .queue
            .front()
            .and_then(|m| self.expiry.expires_at(m.timestamp));
        let backend = self
            .queue
            .backend_pending()
            .then(|| now + BACKEND_SWEEP.min(self.max_age()));
        match (head, backend) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Wakes the timer in time for the next expiry (after messages came in).
    pub(super) fn schedule_expiry(&mut self, now: Instant) {
        if let Some(at) = self.next_expiry(now) {
            self.schedule(at);
        }
    }

    /// The `max_age` in force (zero: none).
    pub fn max_age(&self) -> Duration {
        let ns = self.expiry.0.as_deref().map_or(0, |s| s.max_age_ns);
        Duration::from_nanos(ns.max(0) as u64)
    }

    /// A backend sweep ([`BackendExpiry`]) is done: `skipped` records were
    /// skipped unread, `taken` read whole (bodies wanted, or from a keeper,
    /// with their read numbers when the backend waits for
    /// acknowledgements), all of them expired.
    pub fn backend_expired(
        &mut self,
        skipped: u64,
        taken: Vec<Message>,
        reads: Vec<u64>,
        now: Instant,
    ) {
        let s = self.expiry.state();
        s.sweeping = false;
        s.count += skipped;
        let n = skipped + taken.len() as u64;
        self.backend_len = self.backend_len.saturating_sub(n);
        for (i, msg) in taken.into_iter().enumerate() {
            if let Some(&read) = reads.get(i) {
                self.unacked.insert(msg.id, read);
            }
            self.expire(msg);
        }
        self.pump(now);
    }
}

//! RDY management for a consumer's connections, as a plain state machine.
//!
//! [`RdyState`] decides which `RDY n` to send to which nsqd connection. It
//! never reads the clock, touches a socket or spawns anything: the consumer's
//! task hands it events with the current instant (`add_conn`, `on_message`,
//! `on_response`, `poll`, ...) and sends the [`RdyUpdate`]s it returns. Unit
//! tests drive it with fake instants.
//!
//! The rules are go-nsq's (`consumer.go`, v1.1.0+):
//!
//! * per-connection RDY = `min(max(1, max_in_flight / conns), max_in_flight)`
//!   (truncated), never above the server's `max_rdy_count`, and an update is
//!   cut down (or refused and retried 5 s later) so the total never exceeds
//!   `max_in_flight`;
//! * a new connection first lowers the existing ones, then gets its own RDY;
//! * when connections outnumber `max_in_flight` (or during backoff with more
//!   than one connection), every `rdy_redistribute_interval` connections idle
//!   for `low_rdy_idle_timeout` or holding RDY for `low_rdy_timeout` give it
//!   up and the free RDY is handed out 1 at a time to random connections;
//! * backoff: a handler failure raises the level (unless the next duration
//!   would exceed `max_backoff_duration`), sends RDY 0 everywhere and waits
//!   `backoff_multiplier × 2^level` (capped); then one random connection gets
//!   RDY 1. A success lowers the level; reaching 0 restores full RDY. Results
//!   arriving while a backoff timer runs are ignored.
//!
//! Two deliberate differences from go-nsq, both to keep the promise that at
//! most `max_in_flight` messages are held unacknowledged:
//!
//! * the budget a connection uses is `max(rdy, in_flight)`, not `rdy`: a
//!   connection whose RDY was lowered still holds its in-flight messages, so
//!   their slots are not handed to another connection until they are
//!   finished or requeued. A refused update is retried as soon as a response
//!   frees budget (go-nsq waits for its 5 s retry timer), and a connection
//!   whose RDY no longer fits is lowered to 0 instead of left too high.
//!   What no client can count is a message nsqd wrote under the old RDY
//!   before it read the lower one (nsqd does not acknowledge RDY): when a
//!   joining connection lowers the others, such a message may arrive after
//!   its slot went to the newcomer, and the limit is exceeded by it until
//!   it is answered.
//! * the "refill at 25%" rule of go-nsq before v1.2 (`0897cb2`) is kept as a
//!   cheap re-evaluation: when a message leaves a connection with at most a
//!   quarter of its RDY unused, its target RDY is recomputed and sent only if
//!   it changed. nsqd's RDY is a cap on in-flight messages, not a credit that
//!   deliveries consume, so nothing is re-sent in the steady state; what the
//!   rule buys is that a connection grows back to its share after another
//!   connection went away (go-nsq today leaves it at the lower count).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::config::Config;

/// Identifies one connection inside a consumer.
pub type ConnId = u64;

/// The knobs of the RDY logic (a subset of [`Config`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RdyConfig {
    pub max_in_flight: i64,
    pub backoff_multiplier: Duration,
    pub max_backoff_duration: Duration,
    pub low_rdy_idle_timeout: Duration,
    pub low_rdy_timeout: Duration,
    pub redistribute_interval: Duration,
    /// Delay before retrying an update that did not fit (go-nsq: 5 s).
    pub retry_interval: Duration,
}

impl RdyConfig {
    pub fn from_config(c: &Config) -> RdyConfig {
        RdyConfig {
            max_in_flight: c.max_in_flight,
            backoff_multiplier: c.backoff_multiplier,
            max_backoff_duration: c.max_backoff_duration,
            low_rdy_idle_timeout: c.low_rdy_idle_timeout,
            low_rdy_timeout: c.low_rdy_timeout,
            redistribute_interval: c.rdy_redistribute_interval,
            retry_interval: Duration::from_secs(5),
        }
    }
}

/// "Send `RDY count` on connection `conn`."
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RdyUpdate {
    pub conn: ConnId,
    pub count: i64,
}

/// How the consumer answered one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// FIN: a success, lowers the backoff level.
    Finished,
    /// REQ; `backoff: true` is a failure that raises the backoff level,
    /// `false` keeps the level (go-nsq's `RequeueWithoutBackoff`).
    Requeued { backoff: bool },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Signal {
    Resume,
    Backoff,
    Continue,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refused {
    Unknown,
    Closing,
    OverMaxInFlight,
}

#[derive(Debug, Clone)]
struct ConnRdy {
    rdy: i64,
    max_rdy: i64,
    in_flight: i64,
    /// Last time a non-zero RDY was set.
    last_rdy_at: Option<Instant>,
    last_msg_at: Instant,
    /// After CLOSE_WAIT or a broken socket: gets no more RDY.
    closing: bool,
    /// Whether it held (or was waiting for) RDY when it started closing;
    /// go-nsq looks at this when the connection goes.
    had_rdy: bool,
    /// An update that did not fit, to try again at the instant.
    retry: Option<(Instant, i64)>,
}

impl ConnRdy {
    /// Slots of `max_in_flight` this connection may be using.
    fn cost(&self) -> i64 {
        self.rdy.max(self.in_flight)
    }
}

/// RDY bookkeeping for all of one consumer's connections.
#[derive(Debug)]
pub struct RdyState {
    cfg: RdyConfig,
    conns: BTreeMap<ConnId, ConnRdy>,
    backoff_level: u32,
    /// Set while a backoff timer runs (go-nsq's `inBackoffTimeout`).
    backoff_until: Option<Instant>,
    need_redistribute: bool,
    next_redistribute: Instant,
    rng: SmallRng,
    updates: Vec<RdyUpdate>,
}

impl RdyState {
    /// `seed` drives the random choices (which connection resumes after a
    /// backoff, which ones get redistributed RDY).
    pub fn new(cfg: RdyConfig, now: Instant, seed: u64) -> RdyState {
        let next_redistribute = now + cfg.redistribute_interval;
        RdyState {
            cfg,
            conns: BTreeMap::new(),
            backoff_level: 0,
            backoff_until: None,
            need_redistribute: false,
            next_redistribute,
            rng: SmallRng::seed_from_u64(seed),
            updates: Vec::new(),
        }
    }

    // ----- queries -------------------------------------------------------

    pub fn max_in_flight(&self) -> i64 {
        self.cfg.max_in_flight
    }

    /// Sum of the RDY counts last sent.
    pub fn total_rdy(&self) -> i64 {
        self.conns.values().map(|c| c.rdy).sum()
    }

    /// Messages received and not yet answered, over all connections.
    pub fn total_in_flight(&self) -> i64 {
        self.conns.values().map(|c| c.in_flight).sum()
    }

    pub fn rdy(&self, conn: ConnId) -> Option<i64> {
        self.conns.get(&conn).map(|c| c.rdy)
    }

    pub fn in_flight(&self, conn: ConnId) -> Option<i64> {
        self.conns.get(&conn).map(|c| c.in_flight)
    }

    pub fn conn_count(&self) -> usize {
        self.conns.len()
    }

    /// The backoff level (0 = not backing off).
    pub fn backoff_level(&self) -> u32 {
        self.backoff_level
    }

    /// Whether a backoff timer is running, and until when.
    pub fn backoff_until(&self) -> Option<Instant> {
        self.backoff_until
    }

    fn in_backoff(&self) -> bool {
        self.backoff_level > 0
    }

    /// go-nsq's `IsStarved`: some connection has used 85% or more of its RDY.
    pub fn is_starved(&self) -> bool {
        self.conns.values().any(|c| {
            let threshold = (c.rdy as f64 * 0.85) as i64;
            c.in_flight > 0 && c.in_flight >= threshold && !c.closing
        })
    }

    /// When [`RdyState::poll`] next has something to do.
    pub fn next_deadline(&self) -> Instant {
        let retries = self.conns.values().filter_map(|c| c.retry.map(|(t, _)| t));
        retries
            .chain(self.backoff_until)
            .chain([self.next_redistribute])
            .min()
            .unwrap_or(self.next_redistribute)
    }

    // ----- events --------------------------------------------------------

    /// A connection finished SUB; `max_rdy` is its nsqd's `max_rdy_count`.
    pub fn add_conn(&mut self, conn: ConnId, max_rdy: i64, now: Instant) -> Vec<RdyUpdate> {
        self.conns.insert(
            conn,
            ConnRdy {
                rdy: 0,
                max_rdy,
                in_flight: 0,
                last_rdy_at: None,
                last_msg_at: now,
                closing: false,
                had_rdy: false,
                retry: None,
            },
        );
        // Lower the existing connections first so the new one finds room.
        for other in self.active_ids() {
            if other != conn {
                self.maybe_update(other, now);
            }
        }
        self.maybe_update(conn, now);
        self.take()
    }

    /// The connection got CLOSE_WAIT or lost its socket: nsqd will send no
    /// more on it, so its RDY stops counting (its in-flight messages still do).
    pub fn conn_closing(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.had_rdy |= c.rdy > 0 || c.retry.is_some();
            c.closing = true;
            c.rdy = 0;
            c.retry = None;
        }
    }

    /// The connection is gone (and its in-flight messages with it).
    pub fn remove_conn(&mut self, conn: ConnId, now: Instant) -> Vec<RdyUpdate> {
        if let Some(c) = self.conns.remove(&conn) {
            let left = self.active_ids().len() as i64;
            if (c.retry.is_some() || c.rdy > 0 || c.had_rdy)
                && (left == self.cfg.max_in_flight || self.in_backoff())
            {
                // Leaving redistribution mode (or backing off) with RDY that
                // must move to another connection.
                self.need_redistribute = true;
            }
            self.retry_pending(now);
        }
        self.take()
    }

    /// A message arrived on `conn`.
    pub fn on_message(&mut self, conn: ConnId, now: Instant) -> Vec<RdyUpdate> {
        let blocked = self.in_backoff() || self.backoff_until.is_some();
        let Some(c) = self.conns.get_mut(&conn) else {
            return Vec::new();
        };
        c.in_flight += 1;
        c.last_msg_at = now;
        if c.closing || blocked || c.rdy <= 0 {
            return Vec::new();
        }
        let remaining = c.rdy - c.in_flight;
        if remaining * 4 <= c.rdy {
            let (rdy, count) = (c.rdy, self.per_conn_max_in_flight());
            if count != rdy {
                let _ = self.update_rdy(conn, count, now);
            }
        }
        self.take()
    }

    /// The consumer answered a message of `conn` (FIN or REQ was sent).
    pub fn on_response(&mut self, conn: ConnId, outcome: Outcome, now: Instant) -> Vec<RdyUpdate> {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.in_flight = (c.in_flight - 1).max(0);
        }
        let signal = match outcome {
            Outcome::Finished => Signal::Resume,
            Outcome::Requeued { backoff: true } => Signal::Backoff,
            Outcome::Requeued { backoff: false } => Signal::Continue,
        };
        self.backoff_signal(signal, now);
        self.retry_pending(now);
        self.take()
    }

    /// go-nsq's `ChangeMaxInFlight`; 0 pauses the consumer.
    pub fn set_max_in_flight(&mut self, max_in_flight: i64, now: Instant) -> Vec<RdyUpdate> {
        if max_in_flight == self.cfg.max_in_flight {
            return Vec::new();
        }
        self.cfg.max_in_flight = max_in_flight;
        if self.in_backoff() || self.backoff_until.is_some() {
            return Vec::new();
        }
        // Lower first (a decrease never needs room), then let every
        // connection take its share of what is free.
        let target = self.per_conn_max_in_flight();
        for id in self.active_ids() {
            if self.conns[&id].rdy > target {
                self.send_rdy(id, target, now);
            }
        }
        for id in self.active_ids() {
            self.maybe_update(id, now);
        }
        self.take()
    }

    /// Runs what is due at `now`: the end of a backoff timer, retries of
    /// refused updates, the redistribution tick.
    pub fn poll(&mut self, now: Instant) -> Vec<RdyUpdate> {
        if self.backoff_until.is_some_and(|t| t <= now) {
            self.resume(now);
        }
        let due: Vec<(ConnId, i64)> = self
            .conns
            .iter()
            .filter_map(|(id, c)| c.retry.filter(|(t, _)| *t <= now).map(|(_, n)| (*id, n)))
            .collect();
        for (id, count) in due {
            if let Some(c) = self.conns.get_mut(&id) {
                c.retry = None;
            }
            let _ = self.update_rdy(id, count, now);
        }
        if now >= self.next_redistribute {
            self.next_redistribute = now + self.cfg.redistribute_interval;
            self.redistribute(now);
        }
        self.take()
    }

    // ----- internals -----------------------------------------------------

    fn take(&mut self) -> Vec<RdyUpdate> {
        std::mem::take(&mut self.updates)
    }

    fn active_ids(&self) -> Vec<ConnId> {
        self.conns
            .iter()
            .filter(|(_, c)| !c.closing)
            .map(|(id, _)| *id)
            .collect()
    }

    /// go-nsq's `perConnMaxInFlight`, over connections that can take RDY.
    fn per_conn_max_in_flight(&self) -> i64 {
        let b = self.cfg.max_in_flight as f64;
        let n = self.active_ids().len().max(1) as f64;
        (b / n).max(1.0).min(b) as i64
    }

    fn backoff_duration(&self, level: u32) -> Duration {
        let factor = 2u32.checked_pow(level).unwrap_or(u32::MAX);
        self.cfg.backoff_multiplier.saturating_mul(factor)
    }

    fn maybe_update(&mut self, conn: ConnId, now: Instant) {
        if self.in_backoff() || self.backoff_until.is_some() {
            return;
        }
        let count = self.per_conn_max_in_flight();
        let _ = self.update_rdy(conn, count, now);
    }

    /// go-nsq's `updateRDY`: cap by nsqd's max and by the budget left.
    fn update_rdy(&mut self, conn: ConnId, count: i64, now: Instant) -> Result<(), Refused> {
        let others: i64 = self
            .conns
            .iter()
            .filter(|(id, _)| **id != conn)
            .map(|(_, c)| c.cost())
            .sum();
        let retry_at = now + self.cfg.retry_interval;
        let max_in_flight = self.cfg.max_in_flight;
        let c = self.conns.get_mut(&conn).ok_or(Refused::Unknown)?;
        if c.closing {
            return Err(Refused::Closing);
        }
        let mut count = count.min(c.max_rdy);
        c.retry = None;
        let max_possible = max_in_flight - others;
        if max_possible > 0 && max_possible < count {
            count = max_possible;
        }
        if max_possible <= 0 && count > 0 {
            // No room: try again later (or as soon as a response frees a slot).
            c.retry = Some((retry_at, count));
            if c.rdy > 0 {
                self.send_rdy(conn, 0, now);
            }
            return Err(Refused::OverMaxInFlight);
        }
        self.send_rdy(conn, count, now);
        Ok(())
    }

    fn send_rdy(&mut self, conn: ConnId, count: i64, now: Instant) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if count == 0 && c.rdy == 0 {
            return;
        }
        let last = c.rdy;
        c.rdy = count;
        if count > 0 {
            c.last_rdy_at = Some(now);
        }
        if count != last {
            self.updates.push(RdyUpdate { conn, count });
        }
    }

    /// Retries refused updates when the budget has room again.
    fn retry_pending(&mut self, now: Instant) {
        let waiting: Vec<(ConnId, i64)> = self
            .conns
            .iter()
            .filter_map(|(id, c)| c.retry.map(|(_, n)| (*id, n)))
            .collect();
        for (id, count) in waiting {
            let used: i64 = self.conns.values().map(ConnRdy::cost).sum();
            if used >= self.cfg.max_in_flight {
                break;
            }
            let _ = self.update_rdy(id, count, now);
        }
    }

    /// go-nsq's `startStopContinueBackoff`.
    fn backoff_signal(&mut self, signal: Signal, now: Instant) {
        if self.backoff_until.is_some() {
            return;
        }
        let mut updated = false;
        match signal {
            Signal::Resume if self.backoff_level > 0 => {
                self.backoff_level -= 1;
                updated = true;
            }
            Signal::Backoff
                if self.backoff_duration(self.backoff_level + 1)
                    <= self.cfg.max_backoff_duration =>
            {
                self.backoff_level += 1;
                updated = true;
            }
            _ => {}
        }
        if self.backoff_level == 0 && updated {
            let count = self.per_conn_max_in_flight();
            tracing::warn!(rdy = count, "exiting backoff");
            for id in self.active_ids() {
                let _ = self.update_rdy(id, count, now);
            }
        } else if self.backoff_level > 0 {
            let d = self
                .backoff_duration(self.backoff_level)
                .min(self.cfg.max_backoff_duration);
            tracing::warn!(duration = ?d, level = self.backoff_level, "backing off, RDY 0 everywhere");
            for id in self.active_ids() {
                let _ = self.update_rdy(id, 0, now);
            }
            self.backoff_until = Some(now + d);
        }
    }

    /// End of a backoff timer: let one message through on a random connection.
    fn resume(&mut self, now: Instant) {
        let active = self.active_ids();
        if active.is_empty() {
            self.backoff_until = Some(now + Duration::from_secs(1));
            return;
        }
        let choice = active[self.rng.gen_range(0..active.len())];
        match self.update_rdy(choice, 1, now) {
            Ok(()) => {
                tracing::warn!(conn = choice, "backoff timeout expired, RDY 1");
                self.backoff_until = None;
            }
            Err(_) => self.backoff_until = Some(now + Duration::from_secs(1)),
        }
    }

    /// go-nsq's `redistributeRDY`.
    fn redistribute(&mut self, now: Instant) {
        if self.backoff_until.is_some() {
            return;
        }
        let active = self.active_ids();
        if active.is_empty() {
            return;
        }
        if active.len() as i64 > self.cfg.max_in_flight || (self.in_backoff() && active.len() > 1) {
            self.need_redistribute = true;
        }
        if !std::mem::take(&mut self.need_redistribute) {
            return;
        }
        for &id in &active {
            let c = &self.conns[&id];
            if c.rdy > 0 {
                let idle =
                    now.saturating_duration_since(c.last_msg_at) > self.cfg.low_rdy_idle_timeout;
                let held = match c.last_rdy_at {
                    Some(t) => now.saturating_duration_since(t) > self.cfg.low_rdy_timeout,
                    None => true,
                };
                if idle || held {
                    tracing::debug!(conn = id, idle, "giving up RDY");
                    let _ = self.update_rdy(id, 0, now);
                }
            }
        }
        let limit = if self.in_backoff() {
            1
        } else {
            self.cfg.max_in_flight
        };
        let mut available = limit - self.conns.values().map(ConnRdy::cost).sum::<i64>();
        let mut possible = active;
        while !possible.is_empty() && available > 0 {
            available -= 1;
            let i = self.rng.gen_range(0..possible.len());
            let id = possible.remove(i);
            let _ = self.update_rdy(id, 1, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(max_in_flight: i64) -> RdyConfig {
        RdyConfig {
            max_in_flight,
            ..RdyConfig::from_config(&Config::default())
        }
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn upd(conn: ConnId, count: i64) -> RdyUpdate {
        RdyUpdate { conn, count }
    }

    /// nsqd's side of the test: per connection, the RDY it last received and
    /// the messages it has in flight to us. Deliveries obey `in_flight < rdy`.
    #[derive(Default)]
    struct Server {
        rdy: BTreeMap<ConnId, i64>,
        in_flight: BTreeMap<ConnId, i64>,
    }

    impl Server {
        fn apply(&mut self, ups: &[RdyUpdate]) {
            for u in ups {
                self.rdy.insert(u.conn, u.count);
            }
        }
        fn can_deliver(&self, conn: ConnId) -> bool {
            self.in_flight.get(&conn).copied().unwrap_or(0)
                < self.rdy.get(&conn).copied().unwrap_or(0)
        }
        fn total_in_flight(&self) -> i64 {
            self.in_flight.values().sum()
        }
    }

    fn check_invariants(s: &RdyState, srv: &Server, max: i64) {
        assert!(s.total_rdy() <= max, "total RDY {} > {max}", s.total_rdy());
        let cost: i64 = s.conns.values().map(ConnRdy::cost).sum();
        assert!(cost <= max, "RDY+in-flight budget {cost} > {max}");
        assert!(
            srv.total_in_flight() <= max,
            "server in flight {} > {max}",
            srv.total_in_flight()
        );
        for (id, c) in &s.conns {
            assert!(c.rdy <= c.max_rdy, "conn {id} RDY above max_rdy");
        }
    }

    #[test]
    fn single_connection_gets_max_in_flight_capped_by_max_rdy() {
        let t0 = Instant::now();
        let mut s = RdyState::new(cfg(10), t0, 1);
        assert_eq!(s.add_conn(1, 2500, t0), vec![upd(1, 10)]);
        let mut s = RdyState::new(cfg(5000), t0, 1);
        assert_eq!(s.add_conn(1, 2500, t0), vec![upd(1, 2500)]);
    }

    #[test]
    fn new_connections_split_max_in_flight() {
        let t0 = Instant::now();
        let mut s = RdyState::new(cfg(10), t0, 1);
        s.add_conn(1, 2500, t0);
        assert_eq!(s.add_conn(2, 2500, t0), vec![upd(1, 5), upd(2, 5)]);
        // 10/3 = 3.33 → 3 each.
        assert_eq!(
            s.add_conn(3, 2500, t0),
            vec![upd(1, 3), upd(2, 3), upd(3, 3)]
        );
        assert_eq!(s.total_rdy(), 9);
        // Zero max_in_flight means RDY 0.
        let mut s = RdyState::new(cfg(0), t0, 1);
        assert!(s.add_conn(1, 2500, t0).is_empty());
        assert_eq!(s.rdy(1), Some(0));
    }

    #[test]
    fn spread_over_three_connections_when_max_in_flight_is_lower() {
        let t0 = Instant::now();
        let max = 2;
        let mut s = RdyState::new(cfg(max), t0, 7);
        let mut srv = Server::default();
        srv.apply(&s.add_conn(1, 2500, t0));
        srv.apply(&s.add_conn(2, 2500, t0));
        srv.apply(&s.add_conn(3, 2500, t0));
        // Two connections hold RDY 1; the third waits (it does not fit).
        assert_eq!((s.rdy(1), s.rdy(2), s.rdy(3)), (Some(1), Some(1), Some(0)));
        check_invariants(&s, &srv, max);

        // Every connection has messages waiting; run 2 minutes of 100 ms
        // steps: the handler answers each message on the next step, nsqd
        // delivers whenever RDY allows, RDY is redistributed every 5 s.
        let mut got = BTreeMap::<ConnId, u32>::new();
        let mut t = t0;
        let mut to_answer: Vec<ConnId> = Vec::new();
        // nsqd 1 always has messages; nsqds 2 and 3 get one every 15 s, so
        // their connections go idle and give their RDY away in between.
        let mut queued = BTreeMap::from([(1, u32::MAX), (2, 1), (3, 1)]);
        let mut next_publish = t0 + secs(15);
        for _ in 0..1200 {
            t += Duration::from_millis(100);
            if t >= next_publish {
                next_publish += secs(15);
                *queued.get_mut(&2).unwrap() += 1;
                *queued.get_mut(&3).unwrap() += 1;
            }
            for conn in to_answer.drain(..) {
                *srv.in_flight.get_mut(&conn).unwrap() -= 1;
                srv.apply(&s.on_response(conn, Outcome::Finished, t));
                check_invariants(&s, &srv, max);
            }
            srv.apply(&s.poll(t));
            check_invariants(&s, &srv, max);
            for conn in [1, 2, 3] {
                let waiting = queued.get_mut(&conn).unwrap();
                if *waiting > 0 && srv.can_deliver(conn) {
                    *waiting -= 1;
                    *srv.in_flight.entry(conn).or_default() += 1;
                    srv.apply(&s.on_message(conn, t));
                    check_invariants(&s, &srv, max);
                    *got.entry(conn).or_default() += 1;
                    to_answer.push(conn);
                }
            }
        }
        // Of the 9 messages each of nsqds 2 and 3 got, most went through:
        // RDY reaches them whenever the busy connection has held its RDY for
        // low_rdy_timeout (30 s) or they win a random redistribution.
        assert!(got[&2] >= 4 && got[&3] >= 4, "{got:?}");
        assert_eq!(
            got.len(),
            3,
            "all three connections received messages: {got:?}"
        );
    }

    #[test]
    fn never_more_than_max_in_flight_under_random_events() {
        let (mut delivered, mut backoffs) = (0u64, 0u64);
        for seed in 0..40u64 {
            let mut rng = SmallRng::seed_from_u64(seed);
            let max = rng.gen_range(0..6i64);
            let t0 = Instant::now();
            let mut t = t0;
            let mut s = RdyState::new(
                RdyConfig {
                    low_rdy_idle_timeout: secs(1),
                    low_rdy_timeout: secs(3),
                    ..cfg(max)
                },
                t0,
                seed,
            );
            let mut srv = Server::default();
            let mut next_id = 1;
            let mut held: Vec<ConnId> = Vec::new(); // messages awaiting a response
            for _ in 0..3000 {
                t += Duration::from_millis(rng.gen_range(0..400));
                match rng.gen_range(0..10) {
                    0 if s.conn_count() < 5 => {
                        srv.apply(&s.add_conn(next_id, rng.gen_range(1..4), t));
                        next_id += 1;
                    }
                    1 if s.conn_count() > 0 && rng.gen_bool(0.2) => {
                        let ids: Vec<ConnId> = s.conns.keys().copied().collect();
                        let id = ids[rng.gen_range(0..ids.len())];
                        // The socket breaks: nsqd drops what it had in flight.
                        s.conn_closing(id);
                        held.retain(|c| *c != id);
                        srv.in_flight.remove(&id);
                        srv.rdy.remove(&id);
                        srv.apply(&s.remove_conn(id, t));
                    }
                    2..=5 => {
                        let ids: Vec<ConnId> = s.conns.keys().copied().collect();
                        for id in ids {
                            if srv.can_deliver(id) && rng.gen_bool(0.5) {
                                *srv.in_flight.entry(id).or_default() += 1;
                                srv.apply(&s.on_message(id, t));
                                held.push(id);
                                delivered += 1;
                            }
                        }
                    }
                    6..=8 if !held.is_empty() => {
                        let id = held.swap_remove(rng.gen_range(0..held.len()));
                        *srv.in_flight.get_mut(&id).unwrap() -= 1;
                        let outcome = if rng.gen_bool(0.2) {
                            Outcome::Requeued {
                                backoff: rng.gen_bool(0.7),
                            }
                        } else {
                            Outcome::Finished
                        };
                        srv.apply(&s.on_response(id, outcome, t));
                    }
                    _ => srv.apply(&s.poll(t)),
                }
                backoffs += u64::from(s.backoff_level() > 0);
                check_invariants(&s, &srv, max);
            }
        }
        // The runs did exercise deliveries and backoff.
        assert!(
            delivered > 5_000 && backoffs > 1_000,
            "delivered {delivered}, steps in backoff {backoffs}"
        );
    }

    #[test]
    fn refresh_when_a_quarter_or_less_of_rdy_is_left() {
        let t0 = Instant::now();
        let mut s = RdyState::new(cfg(8), t0, 1);
        s.add_conn(1, 2500, t0);
        s.add_conn(2, 2500, t0);
        assert_eq!((s.rdy(1), s.rdy(2)), (Some(4), Some(4)));
        // Connection 2 goes away; like go-nsq, connection 1 is not raised at once.
        s.conn_closing(2);
        assert!(s.remove_conn(2, t0).is_empty());
        assert_eq!(s.rdy(1), Some(4));
        // Messages arrive: 3 and 2 of 4 left → nothing; 1 of 4 left (25%) → refresh.
        assert!(s.on_message(1, t0).is_empty());
        assert!(s.on_message(1, t0).is_empty());
        assert_eq!(s.on_message(1, t0), vec![upd(1, 8)]);
        // In the steady state the refresh finds nothing to change.
        for _ in 0..3 {
            s.on_response(1, Outcome::Finished, t0);
        }
        for _ in 0..8 {
            assert!(s.on_message(1, t0).is_empty());
        }
    }

    #[test]
    fn in_flight_messages_count_against_the_budget() {
        let t0 = Instant::now();
        let mut s = RdyState::new(cfg(2), t0, 1);
        s.add_conn(1, 2500, t0);
        s.on_message(1, t0);
        s.on_message(1, t0);
        // Connection 1 is lowered to 1 but still holds 2: no room for connection 2.
        assert_eq!(s.add_conn(2, 2500, t0), vec![upd(1, 1)]);
        assert_eq!(s.rdy(2), Some(0));
        // Finishing one frees a slot and the refused update goes through at once.
        assert_eq!(s.on_response(1, Outcome::Finished, t0), vec![upd(2, 1)]);
        assert_eq!(s.total_rdy(), 2);
    }

    #[test]
    fn refused_update_is_retried_after_five_seconds() {
        let t0 = Instant::now();
        let mut s = RdyState::new(cfg(1), t0, 1);
        s.add_conn(1, 2500, t0);
        s.add_conn(2, 2500, t0);
        assert_eq!((s.rdy(1), s.rdy(2)), (Some(1), Some(0)));
        assert!(s.next_deadline() <= t0 + secs(5));
        // Connection 1 leaves (RDY freed, nothing in flight): the retry fires immediately.
        s.conn_closing(1);
        assert_eq!(s.remove_conn(1, t0), vec![upd(2, 1)]);
    }

    #[test]
    fn backoff_sequence() {
        let t0 = Instant::now();
        // Redistribution is left out here (see `redistribution_during_backoff`).
        let mut s = RdyState::new(
            RdyConfig {
                redistribute_interval: secs(100_000),
                ..cfg(10)
            },
            t0,
            3,
        );
        s.add_conn(1, 2500, t0);
        s.add_conn(2, 2500, t0);
        let mut t = t0;
        // Failure 1: level 1, RDY 0 everywhere, 2 s timer.
        s.on_message(1, t);
        let ups = s.on_response(1, Outcome::Requeued { backoff: true }, t);
        assert_eq!(ups, vec![upd(1, 0), upd(2, 0)]);
        assert_eq!(
            (s.backoff_level(), s.backoff_until()),
            (1, Some(t + secs(2)))
        );
        // Results during the timer are ignored.
        s.on_response(1, Outcome::Requeued { backoff: true }, t);
        assert_eq!(s.backoff_level(), 1);
        // A new connection during backoff gets nothing.
        assert!(s.add_conn(3, 2500, t).is_empty());
        assert!(s.poll(t + secs(1)).is_empty());
        // Then each further failure doubles: 4, 8, 16, 32, 64 s; 128 s would
        // exceed max_backoff_duration (120 s), so the level stays at 6.
        let mut expected = Vec::new();
        let mut seen = Vec::new();
        for level in 1..=8u32 {
            let until = s.backoff_until().unwrap();
            t = until;
            let ups = s.poll(t);
            assert_eq!(ups.len(), 1, "RDY 1 on one connection after the timer");
            assert_eq!(ups[0].count, 1);
            assert_eq!(s.total_rdy(), 1);
            assert_eq!(s.backoff_until(), None);
            let conn = ups[0].conn;
            s.on_message(conn, t);
            s.on_response(conn, Outcome::Requeued { backoff: true }, t);
            seen.push((s.backoff_level(), s.backoff_until().unwrap() - t));
            let next = (level + 1).min(6);
            expected.push((next, secs(1 << next)));
        }
        assert_eq!(seen, expected);
        // Successes step down one level each, each followed by a wait at the lower level.
        for level in (0..6u32).rev() {
            t = s.backoff_until().unwrap();
            let ups = s.poll(t);
            let conn = ups[0].conn;
            s.on_message(conn, t);
            let ups = s.on_response(conn, Outcome::Finished, t);
            assert_eq!(s.backoff_level(), level);
            if level > 0 {
                assert_eq!(s.backoff_until(), Some(t + secs(1 << level)));
                assert_eq!(s.total_rdy(), 0);
            } else {
                // Out of backoff: full RDY again (10 / 3 = 3 each).
                assert_eq!(s.backoff_until(), None);
                assert_eq!(ups.len(), 3, "{ups:?}");
                assert!(ups.iter().all(|u| u.count == 3));
            }
        }
        // A requeue without backoff does not change the level.
        s.on_message(1, t);
        assert!(s
            .on_response(1, Outcome::Requeued { backoff: false }, t)
            .is_empty());
        assert_eq!(s.backoff_level(), 0);
    }

    #[test]
    fn redistribution_during_backoff() {
        let t0 = Instant::now();
        let mut s = RdyState::new(cfg(10), t0, 9);
        for id in 1..=3 {
            s.add_conn(id, 2500, t0);
        }
        s.on_message(1, t0);
        s.on_response(1, Outcome::Requeued { backoff: true }, t0);
        assert_eq!(s.total_rdy(), 0);
        // Timer ends at +2 s: RDY 1 somewhere. Every 5 s after, in backoff
        // with several connections, the single RDY may move but never grows.
        let mut holders = std::collections::BTreeSet::new();
        let mut t = t0;
        for _ in 0..200 {
            t += Duration::from_millis(500);
            s.poll(t);
            assert!(s.total_rdy() <= 1);
            for id in 1..=3 {
                if s.rdy(id) == Some(1) {
                    holders.insert(id);
                }
            }
        }
        assert_eq!(s.total_rdy(), 1);
        assert!(
            holders.len() > 1,
            "the RDY moved between connections: {holders:?}"
        );
    }

    #[test]
    fn zero_max_backoff_disables_backoff() {
        let t0 = Instant::now();
        let mut s = RdyState::new(
            RdyConfig {
                max_backoff_duration: Duration::ZERO,
                ..cfg(4)
            },
            t0,
            1,
        );
        s.add_conn(1, 2500, t0);
        s.on_message(1, t0);
        assert!(s
            .on_response(1, Outcome::Requeued { backoff: true }, t0)
            .is_empty());
        assert_eq!((s.backoff_level(), s.rdy(1)), (0, Some(4)));
    }

    #[test]
    fn change_max_in_flight() {
        let t0 = Instant::now();
        let mut s = RdyState::new(cfg(10), t0, 1);
        s.add_conn(1, 2500, t0);
        s.add_conn(2, 2500, t0);
        assert_eq!(s.set_max_in_flight(0, t0), vec![upd(1, 0), upd(2, 0)]);
        assert_eq!(s.set_max_in_flight(4, t0), vec![upd(1, 2), upd(2, 2)]);
        assert_eq!(s.set_max_in_flight(20, t0), vec![upd(1, 10), upd(2, 10)]);
        assert_eq!(s.set_max_in_flight(6, t0), vec![upd(1, 3), upd(2, 3)]);
    }

    #[test]
    fn idle_connection_gives_up_rdy_on_redistribution() {
        let t0 = Instant::now();
        let mut s = RdyState::new(cfg(1), t0, 5);
        s.add_conn(1, 2500, t0);
        s.add_conn(2, 2500, t0);
        assert_eq!((s.rdy(1), s.rdy(2)), (Some(1), Some(0)));
        // Connection 1 had its last message at t0; after 10 s idle it gives
        // its RDY up at the next tick, and one of the two gets it back.
        let t = t0 + secs(15);
        let ups = s.poll(t);
        assert_eq!(s.total_rdy(), 1);
        assert!(
            ups.contains(&upd(1, 0)) || ups.is_empty() || ups.contains(&upd(2, 1)),
            "{ups:?}"
        );
    }
}

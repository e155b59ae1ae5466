//! FINs left for whoever holds a channel's lock (flat combining), and the
//! error a FIN, REQ or TOUCH of a message not in flight answers.
//!
//! With consumers of one channel on both cores, their FIN batches met at
//! the channel's lock and one thread parked (a futex wait and a wake, a
//! context switch each) for every batch: 4 consumers cost 26% more CPU per
//! message than 1, nearly all of it there. A FIN batch that finds the lock
//! taken is left here instead and its connection goes on reading; the
//! holder does it before letting go, and checks once more after, so none
//! is stranded: a batch left after the holder's last look is seen either
//! by the holder's check after unlocking or by the leaver's second try of
//! the lock ([`Channel::finish`]).
//!
//! Never: the FINs themselves (the core's `finish`), or REQ and TOUCH,
//! which answer on their own connection and stay on the lock.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use nsq_protocol::error::E_FIN_FAILED;
use nsq_protocol::{MessageId, ProtocolError};
use parking_lot::{Mutex, MutexGuard};

use super::{Channel, DiskWork, Locked};
use crate::core::{ClientId, InFlightError};

/// What a FIN, REQ or TOUCH of a message that is not (or not this
/// client's) in flight answers: NSQ's non-fatal `E_*_FAILED`.
pub fn in_flight_error(
    code: &'static str,
    cmd: &str,
    id: &MessageId,
    e: InFlightError,
) -> ProtocolError {
    ProtocolError::non_fatal(code, format!("{cmd} {id} failed {}", e.text()))
}

/// One connection's FIN batch, as it would have been done.
pub struct Left {
    pub client: ClientId,
    pub ids: Vec<MessageId>,
    pub now: Instant,
    /// Wall clock for E2E latency (0 when not measured).
    pub wall: i64,
}

/// The batches left, and whether there are any (read without the lock on
/// every unlock of the channel).
#[derive(Default)]
pub struct LeftFins {
    inner: Mutex<Inner>,
    any: AtomicBool,
}

/// Vectors go back and forth between the connections and the holder
/// instead of being allocated on one core and freed on the other: that
/// made the two threads meet at the allocator's lock instead.
#[derive(Default)]
struct Inner {
    batches: Vec<Left>,
    spare_ids: Vec<Vec<MessageId>>,
    spare_batches: Vec<Vec<Left>>,
}

/// Rounds of others' left batches a connection does after its own.
const ROUNDS: usize = 2;

/// Spare vectors kept per channel, of each kind.
const SPARES: usize = 8;

impl LeftFins {
    /// Leaves a connection's batch; `ids` gets an empty vector back.
    pub fn leave(&self, client: ClientId, ids: &mut Vec<MessageId>, now: Instant, wall: i64) {
        let mut inner = self.inner.lock();
        let spare = inner.spare_ids.pop().unwrap_or_default();
        let ids = std::mem::replace(ids, spare);
        inner.batches.push(Left {
            client,
            ids,
            now,
            wall,
        });
        self.any.store(true, Ordering::SeqCst);
    }

    pub fn any(&self) -> bool {
        self.any.load(Ordering::SeqCst)
    }

    /// Every batch left so far, oldest first; hand the vector back with
    /// [`done`](LeftFins::done).
    pub fn take(&self) -> Vec<Left> {
        if !self.any() {
            return Vec::new();
        }
        let mut inner = self.inner.lock();
        self.any.store(false, Ordering::SeqCst);
        let spare = inner.spare_batches.pop().unwrap_or_default();
        std::mem::replace(&mut inner.batches, spare)
    }

    /// The vectors of batches that were done, for reuse.
    pub fn done(&self, mut batches: Vec<Left>) {
        if batches.capacity() == 0 {
            return;
        }
        let mut inner = self.inner.lock();
        for mut l in batches.drain(..) {
            if inner.spare_ids.len() < SPARES {
                l.ids.clear();
                inner.spare_ids.push(l.ids);
            }
        }
        if inner.spare_batches.len() < SPARES {
            inner.spare_batches.push(batches);
        }
    }
}

/// A channel's state lock, held; see [`Channel::lock`]. Fields drop in
/// order: the lock is let go of first, then the left batches are checked.
pub(super) struct Held<'a> {
    guard: MutexGuard<'a, Locked>,
    _then: CheckLeft<'a>,
}

pub(super) struct CheckLeft<'a>(&'a Channel);

impl Drop for CheckLeft<'_> {
    fn drop(&mut self) {
        self.0.check_left();
    }
}

impl std::ops::Deref for Held<'_> {
    type Target = Locked;
    fn deref(&self) -> &Locked {
        &self.guard
    }
}

impl std::ops::DerefMut for Held<'_> {
    fn deref_mut(&mut self) -> &mut Locked {
        &mut self.guard
    }
}

impl Channel {
    /// A connection's FIN batch (`ids`, left empty): done now, failures to
    /// `failed`, or left for the lock's holder when another core has it
    /// (failures then go to the client as error frames).
    pub fn finish(
        &self,
        client: ClientId,
        ids: &mut Vec<MessageId>,
        now: Instant,
        failed: impl FnMut(&MessageId, InFlightError),
    ) {
        let wall = if self.ctx.wants_e2e() {
            super::now_unix_ns()
        } else {
            0
        };
        let work = match self.state.try_lock() {
            Some(st) => {
                let ((), work) =
                    self.enter_locked(st, |st| st.core.finish(client, ids, now, wall, failed));
                ids.clear();
                work
            }
            None => {
                self.left.leave(client, ids, now, wall);
                // its holder may have looked already: one more try
                match self.state.try_lock() {
                    Some(st) => self.enter_locked(st, |_| ()).1,
                    None => DiskWork::default(),
                }
            }
        };
        // a connection's reader holds no disk queue lock: batches left after
        // the holder's last look can be done right here
        self.settle_left();
        if !work.is_empty() {
            // freed credit's refill: nobody waits for it
            let _ = self.carry_out(work, &mut Vec::new());
        }
    }

    /// Does batches left after the last holder's look, a few rounds at
    /// most (a connection on the other core may keep leaving them, and
    /// this core's own tasks wait meanwhile); the rest go to the timer
    /// task. Only where no disk queue lock is held.
    fn settle_left(&self) {
        for _ in 0..ROUNDS {
            if !self.left.any() {
                return;
            }
            // taken: its holder looks again before and after letting go
            let Some(st) = self.state.try_lock() else {
                return;
            };
            let ((), work) = self.enter_locked(st, |_| ());
            if !work.is_empty() {
                let _ = self.carry_out(work, &mut Vec::new());
            }
        }
        self.check_left();
    }

    /// FIN batches other connections left while the lock was taken; their
    /// failures go to their own clients.
    pub(super) fn do_left(&self, st: &mut Locked) {
        let batches = self.left.take();
        for l in &batches {
            let Locked { core, clients, .. } = &mut *st;
            core.finish(l.client, &l.ids, l.now, l.wall, |id, e| {
                if let Some(c) = clients.get(&l.client) {
                    c.send_error(&in_flight_error(E_FIN_FAILED, "FIN", id, e).payload());
                }
            });
        }
        self.left.done(batches);
    }

    /// After letting go of the lock: a batch left after its holder's last
    /// look goes to the channel's timer task, which takes the lock next.
    /// Never done here: this may run inside `carry_out`, under the disk
    /// queue's I/O lock, which doing the batch's disk work would take again.
    pub(super) fn check_left(&self) {
        if self.left.any() {
            self.timer.notify_one();
        }
    }

    /// The state's lock for a quick look or change that is not the core's
    /// delivering work; a batch left meanwhile is handed on as after
    /// [`enter`](Channel::enter).
    pub(super) fn lock(&self) -> Held<'_> {
        Held {
            guard: self.state.lock(),
            _then: CheckLeft(self),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use bytes::{Bytes, BytesMut};
    use nsq_protocol::{Message, MessageId};
    use tokio_util::sync::CancellationToken;

    use super::super::{Channel, Client};
    use crate::options::Options;
    use crate::server::clock::now;
    use crate::server::context::Context;

    fn frames(outbox: &crate::server::outbox::Outbox) -> Vec<u8> {
        let mut out = BytesMut::new();
        outbox.take(&mut out, &mut Vec::new());
        out.to_vec()
    }

    fn contains(hay: &[u8], needle: &[u8]) -> bool {
        hay.windows(needle.len()).any(|w| w == needle)
    }

    struct Setup {
        _dir: tempfile::TempDir,
        ch: Arc<Channel>,
        client: Arc<Client>,
        outbox: Arc<crate::server::outbox::Outbox>,
        ids: Vec<MessageId>,
    }

    /// A channel with one consumer holding two messages in flight.
    fn two_in_flight() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let ctx = Arc::new(Context::new(Options::default(), dir.path().into(), tx));
        let ch = Channel::new("t", "c", &ctx, &CancellationToken::new(), None);
        let (client, outbox) = Client::new("127.0.0.1:1".parse().unwrap(), 0);
        let client = Arc::new(client);
        ch.subscribe(&client, Duration::from_secs(60), 0).unwrap();
        let t = now();
        ch.set_rdy(client.id, 10, t);
        let ids: Vec<MessageId> = (1..=2).map(MessageId::from_guid).collect();
        let msgs = ids
            .iter()
            .map(|id| Message::new(*id, 1, Bytes::from_static(b"body")))
            .collect();
        assert!(ch.put(msgs, None, t).is_empty());
        assert_eq!(ch.stats(false, t).in_flight_count, 2);
        frames(&outbox);
        Setup {
            _dir: dir,
            ch,
            client,
            outbox,
            ids,
        }
    }

    #[test]
    fn a_fin_batch_that_finds_the_lock_taken_is_done_by_the_next_holder_failures_to_its_client() {
        let Setup {
            ch,
            client,
            outbox,
            ids,
            ..
        } = two_in_flight();
        let t = now();

        // another core holds the lock: the batch is left, nothing reported
        let held = ch.state.lock();
        let unknown = MessageId::from_guid(99);
        let mut batch = vec![ids[0], unknown];
        ch.finish(client.id, &mut batch, t, |id, e| {
            panic!("{id} {e:?}: a left batch reports to the client")
        });
        assert!(batch.is_empty() && ch.left.any());
        drop(held);
        assert_eq!(
            ch.stats(false, t).in_flight_count,
            2,
            "not done while nobody takes the lock"
        );

        // the next holder does it: one finished, the unknown id answered
        ch.set_rdy(client.id, 10, t);
        assert!(!ch.left.any());
        assert_eq!(ch.stats(false, t).in_flight_count, 1);
        let out = frames(&outbox);
        let text = format!("E_FIN_FAILED FIN {unknown} failed");
        assert!(contains(&out, text.as_bytes()), "{out:?}");

        // a batch that finds the lock free is done at once, failures inline
        let mut batch = vec![ids[1], unknown];
        let mut failed = Vec::new();
        ch.finish(client.id, &mut batch, t, |id, _| failed.push(*id));
        assert_eq!(failed, vec![unknown]);
        assert_eq!(ch.stats(false, t).in_flight_count, 0);
    }

    #[tokio::test]
    async fn a_batch_left_after_the_holders_last_look_goes_to_the_timer_task() {
        let Setup {
            ch, client, ids, ..
        } = two_in_flight();
        tokio::spawn(ch.clone().run_timer());
        // its first pass done, it sleeps until the in-flight timeouts (60 s)
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        let t = now();
        // a holder that does not look (its unlock comes after its last look)
        let held = ch.state.lock();
        let mut batch = vec![ids[0]];
        ch.finish(client.id, &mut batch, t, |_, _| {});
        drop(held);
        // the next unlock of any kind hands it to the timer task, which
        // (one thread here) runs once this test awaits
        assert_eq!(ch.stats(false, t).in_flight_count, 2);
        for _ in 0..500 {
            if ch.stats(false, t).in_flight_count == 1 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the left batch was never done");
    }

    #[test]
    fn an_operation_that_finds_the_lock_held_past_its_spin_waits_for_it() {
        let Setup { ch, outbox, .. } = two_in_flight();
        let held = ch.state.lock();
        let (tx, rx) = std::sync::mpsc::channel();
        let putter = {
            let ch = ch.clone();
            std::thread::spawn(move || {
                let msg = Message::new(MessageId::from_guid(3), 1, Bytes::from_static(b"third"));
                let work = ch.put(vec![msg], None, now());
                tx.send(work.is_empty()).unwrap();
            })
        };
        // a hundred times the spin: the putter has gone to sleep on the lock
        assert!(rx.recv_timeout(super::super::LOCK_SPIN * 100).is_err());
        drop(held);
        assert!(rx.recv_timeout(Duration::from_secs(10)).unwrap());
        putter.join().unwrap();
        assert!(contains(&frames(&outbox), b"third"));
    }
}

//! The group's log as a replicated topic's store, on a member that votes
//! in the topic's group: what a topic or channel holds past
//! `--mem-queue-size` is not written a second time (its batch is in the
//! log already, fsynced on a majority); only where it is: the batch's log
//! index and the message's place in the batch. A refill reads those
//! batches back from the log and takes the messages out of them.
//!
//! The [`Keeper`] of such a topic's and channels' queues (the server's
//! backend holds it as it would a disk queue). Owns: those places, in
//! queue order, and a read-ahead of the topic's decoded batches. Never:
//! which messages are unfinished (the group's progress,
//! `core::replicated::progress`, which also keeps the log from being
//! purged below any of them), or when to refill (the core's queue, as for
//! a disk queue).
//!
//! Places are kept as runs (index, first place, count): an overflow is
//! the tail of a batch, so one run a batch. A message put back on its own
//! (a requeue past a full memory) is a run of one and keeps its attempts.
//! A message the group's progress does not know (one a member took
//! before its group made the topic replicated) is kept whole, in memory:
//! never dropped.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use nsq_protocol::{Message, MessageId};
use nsq_replication::committed::CommittedLog;
use parking_lot::Mutex;

use crate::core::replicated::entry::{Entry, Published};
use crate::core::replicated::progress::Progress;
use crate::server::backend::{Keeper, OpenKeeper, Read};
use crate::server::clock::now_unix_ns;
use crate::server::disk::blocking;

/// How much of the log one read brings into the read-ahead.
const AHEAD_BYTES: usize = 512 << 10;

/// Where a replicated topic's messages are: its group's log, and the
/// group's progress (which knows each unfinished message's place).
#[derive(Clone)]
pub struct LogSource {
    topic: String,
    progress: Arc<Mutex<Progress>>,
    log: CommittedLog,
}

impl LogSource {
    pub fn new(topic: &str, progress: Arc<Mutex<Progress>>, log: CommittedLog) -> LogSource {
        LogSource {
            topic: topic.to_string(),
            progress,
            log,
        }
    }

    /// Opens a [`LogBackend`] for the topic's queue or a channel's.
    pub fn opener(self) -> OpenKeeper {
        Arc::new(move || Box::new(LogBackend::new(self.clone())) as Box<dyn Keeper>)
    }
}

/// A topic's or channel's queue past memory, kept as places in the log.
pub struct LogBackend {
    source: LogSource,
    places: Mutex<Places>,
    ahead: Mutex<ReadAhead>,
}

#[derive(Default)]
struct Places {
    queue: VecDeque<Place>,
    /// Messages in `queue`.
    count: u64,
    /// Bumped by every empty: a read that began before reports nothing.
    generation: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Place {
    /// Messages `first..first + count` of the batch at log `index`.
    Run {
        index: u64,
        first: u32,
        count: u32,
        attempts: u16,
    },
    /// A message the log does not hold for this topic.
    Kept(Message),
}

impl Place {
    fn len(&self) -> u64 {
        match self {
            Place::Run { count, .. } => u64::from(*count),
            Place::Kept(_) => 1,
        }
    }
}

impl Places {
    fn push(&mut self, place: Place) {
        self.count += place.len();
        if let (
            Some(Place::Run {
                index,
                first,
                count,
                attempts,
            }),
            Place::Run {
                index: i,
                first: f,
                attempts: a,
                ..
            },
        ) = (self.queue.back_mut(), &place)
        {
            if *index == *i && *attempts == *a && *first + *count == *f {
                *count += 1;
                return;
            }
        }
        self.queue.push_back(place);
    }

    /// The places of the next `max` messages (the last run cut to fit).
    fn front(&self, max: u64) -> Vec<Place> {
        let mut out = Vec::new();
        let mut left = max;
        for p in &self.queue {
            if left == 0 {
                break;
            }
            match p {
                Place::Run {
                    index,
                    first,
                    count,
                    attempts,
                } if u64::from(*count) > left => {
                    out.push(Place::Run {
                        index: *index,
                        first: *first,
                        count: left as u32,
                        attempts: *attempts,
                    });
                    left = 0;
                }
                p => {
                    left -= p.len();
                    out.push(p.clone());
                }
            }
        }
        out
    }

    /// Drops the next `n` messages' places.
    fn take(&mut self, mut n: u64) {
        while n > 0 {
            let Some(p) = self.queue.front_mut() else {
                break;
            };
            match p {
                Place::Run { first, count, .. } if u64::from(*count) > n => {
                    *first += n as u32;
                    *count -= n as u32;
                    self.count -= n;
                    return;
                }
                _ => {
                    let len = p.len();
                    n -= len;
                    self.count -= len;
                    self.queue.pop_front();
                }
            }
        }
    }

    fn clear(&mut self) {
        self.queue.clear();
        self.count = 0;
        self.generation += 1;
    }
}

/// Batches of the topic decoded from the last read of the log, by index.
#[derive(Default)]
struct ReadAhead {
    batches: BTreeMap<u64, Arc<Vec<Published>>>,
}

impl ReadAhead {
    /// The batch at `index`, read from the log (with what follows it in
    /// the same segment, up to [`AHEAD_BYTES`]) unless already here.
    fn batch(&mut self, source: &LogSource, index: u64) -> Result<Arc<Vec<Published>>, String> {
        if let Some(b) = self.batches.get(&index) {
            return Ok(b.clone());
        }
        self.batches.clear();
        let chunk = blocking(|| source.log.read_here(index, u64::MAX, AHEAD_BYTES))
            .map_err(|e| e.to_string())?;
        for (i, payload) in chunk.entries {
            if let Ok(Entry::Publish { topic, messages }) = Entry::decode(payload) {
                if topic == source.topic {
                    self.batches.insert(i, Arc::new(messages));
                }
            }
        }
        self.batches
            .get(&index)
            .cloned()
            .ok_or_else(|| "no publish of the topic at that index".to_string())
    }
}

impl LogBackend {
    pub fn new(source: LogSource) -> LogBackend {
        LogBackend {
            source,
            places: Mutex::default(),
            ahead: Mutex::default(),
        }
    }
}

impl Keeper for LogBackend {
    /// Keeps where `msgs` are, in order.
    fn append(&self, msgs: &[Message]) {
        let progress = self.source.progress.lock();
        let topic = progress.topic(&self.source.topic);
        let mut places = self.places.lock();
        for m in msgs {
            match topic.and_then(|t| t.place(&m.id)) {
                Some((index, first)) => places.push(Place::Run {
                    index,
                    first,
                    count: 1,
                    attempts: m.attempts,
                }),
                None => places.push(Place::Kept(m.clone())),
            }
        }
    }

    /// Keeps where the messages with these ids are, in order, as new
    /// deliveries (a new leader's put-back); ids the progress no longer
    /// knows are skipped. Returns how many were placed.
    fn put_back(&self, ids: &mut dyn Iterator<Item = MessageId>) -> u64 {
        let progress = self.source.progress.lock();
        let Some(topic) = progress.topic(&self.source.topic) else {
            return 0;
        };
        let mut places = self.places.lock();
        let before = places.count;
        for id in ids {
            if let Some((index, first)) = topic.place(&id) {
                places.push(Place::Run {
                    index,
                    first,
                    count: 1,
                    attempts: 0,
                });
            }
        }
        places.count - before
    }

    /// Up to `max` messages, oldest first, read back from the log. A
    /// message whose DPUB delay has not run out comes in
    /// [`Read::deferred`] with what is left of it. A batch that cannot be
    /// read (never expected: the log keeps every unfinished batch) is
    /// logged and its messages are not delivered here; the group still
    /// counts them unfinished, so the next leader delivers them.
    fn read(&self, max: usize) -> Read {
        let (wanted, generation) = {
            let places = self.places.lock();
            (places.front(max as u64), places.generation)
        };
        let mut read = Read::default();
        let now_ms = now_unix_ns() / 1_000_000;
        let mut ahead = self.ahead.lock();
        for place in &wanted {
            let (index, first, count, attempts) = match place {
                Place::Kept(m) => {
                    read.msgs.push(m.clone());
                    continue;
                }
                Place::Run {
                    index,
                    first,
                    count,
                    attempts,
                } => (*index, *first, *count, *attempts),
            };
            let batch = match ahead.batch(&self.source, index) {
                Ok(b) => b,
                Err(e) => {
                    tracing::error!(topic = %self.source.topic, index, count, error = %e, "REPLICATION: messages not read back from the log; not delivered here");
                    continue;
                }
            };
            for p in batch.iter().skip(first as usize).take(count as usize) {
                let mut msg = Message::new(p.id, p.timestamp, p.body.clone());
                msg.attempts = attempts;
                let due_ms = p.timestamp / 1_000_000 + p.defer_ms as i64;
                match u64::try_from(due_ms - now_ms) {
                    Ok(left) if p.defer_ms > 0 && left > 0 => {
                        read.deferred.push((msg, Duration::from_millis(left)))
                    }
                    _ => read.msgs.push(msg),
                }
            }
        }
        drop(ahead);
        let mut places = self.places.lock();
        if places.generation == generation {
            places.take(wanted.iter().map(Place::len).sum());
        } else {
            // emptied meanwhile: what was read is gone for the queue too
            read.msgs.clear();
            read.deferred.clear();
        }
        read.more = places.count > 0;
        read
    }

    /// The messages at the head published before `before_ns`, up to the
    /// first that was not (they expired): read back from the log, and
    /// their places dropped.
    fn take_expired(&self, before_ns: i64, max: usize) -> Vec<Message> {
        let (wanted, generation) = {
            let places = self.places.lock();
            (places.front(max as u64), places.generation)
        };
        let mut out = Vec::new();
        let mut ahead = self.ahead.lock();
        'places: for place in &wanted {
            let (index, first, count, attempts) = match place {
                Place::Kept(m) if m.timestamp < before_ns => {
                    out.push(m.clone());
                    continue;
                }
                Place::Kept(_) => break,
                Place::Run {
                    index,
                    first,
                    count,
                    attempts,
                } => (*index, *first, *count, *attempts),
            };
            let batch = match ahead.batch(&self.source, index) {
                Ok(b) => b,
                Err(e) => {
                    tracing::error!(topic = %self.source.topic, index, error = %e, "REPLICATION: expired messages not read back from the log; left in place");
                    break;
                }
            };
            for p in batch.iter().skip(first as usize).take(count as usize) {
                if p.timestamp >= before_ns {
                    break 'places;
                }
                let mut msg = Message::new(p.id, p.timestamp, p.body.clone());
                msg.attempts = attempts;
                out.push(msg);
            }
        }
        drop(ahead);
        let mut places = self.places.lock();
        if places.generation == generation {
            places.take(out.len() as u64);
        } else {
            // emptied meanwhile: nothing of it is the queue's any more
            out.clear();
        }
        out
    }

    fn depth(&self) -> u64 {
        self.places.lock().count
    }

    /// Forgets every place (the messages stay in the log, which the
    /// group's progress trims).
    fn empty(&self) {
        self.places.lock().clear();
        self.ahead.lock().batches.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(index: u64, first: u32, count: u32) -> Place {
        Place::Run {
            index,
            first,
            count,
            attempts: 0,
        }
    }

    #[test]
    fn consecutive_places_of_a_batch_make_one_run() {
        let mut p = Places::default();
        for k in 3..6 {
            p.push(run(7, k, 1));
        }
        p.push(run(8, 0, 1));
        p.push(run(8, 2, 1));
        assert_eq!(p.queue, [run(7, 3, 3), run(8, 0, 1), run(8, 2, 1)]);
        assert_eq!(p.count, 5);
    }

    #[test]
    fn a_read_takes_the_front_and_cuts_the_last_run() {
        let mut p = Places::default();
        p.push(run(1, 0, 1));
        p.push(run(1, 1, 1));
        p.push(run(2, 0, 1));
        p.push(run(2, 1, 1));
        p.push(run(2, 2, 1));
        assert_eq!(p.front(3), [run(1, 0, 2), run(2, 0, 1)]);
        p.take(3);
        assert_eq!(p.queue, [run(2, 1, 2)]);
        assert_eq!(p.count, 2);
        assert_eq!(p.front(10), [run(2, 1, 2)]);
        p.take(2);
        assert!(p.queue.is_empty() && p.count == 0);
    }

    #[test]
    fn different_attempts_are_not_merged() {
        let mut p = Places::default();
        p.push(run(1, 0, 1));
        p.push(Place::Run {
            index: 1,
            first: 1,
            count: 1,
            attempts: 2,
        });
        assert_eq!(p.queue.len(), 2);
    }

    #[test]
    fn kept_messages_count_one_each() {
        let mut p = Places::default();
        p.push(Place::Kept(Message::new(
            MessageId::from_guid(1),
            0,
            bytes::Bytes::new(),
        )));
        p.push(run(4, 0, 1));
        assert_eq!(p.count, 2);
        assert_eq!(p.front(1).len(), 1);
        p.take(1);
        assert_eq!(p.queue, [run(4, 0, 1)]);
        p.clear();
        assert_eq!((p.count, p.generation), (0, 1));
    }
}

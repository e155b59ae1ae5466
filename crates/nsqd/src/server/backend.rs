//! Where a topic's or channel's queue keeps what memory does not hold:
//! its `DiskQueue` (nsqd's), nothing (`#ephemeral` names: the core drops
//! their overflow), a [`Keeper`] that holds the messages elsewhere (a
//! replicated topic's group log; the server's seam, `super::cluster`,
//! hands it out), or the error of a disk queue that would not open (every
//! write refused). The server carries out here the appends and refills
//! the core asks for.
//!
//! Records are nsqd's message encoding (`nsq_protocol::Message::encode`), so
//! a data directory is interchangeable with Go nsqd's.
//!
//! Appends and reads run through [`blocking`]; no core lock is held while
//! they run. Syncs never run on the caller: the queue's [`Syncer`] runs
//! them (group commit, `super::disk`) when the sync policy asks
//! (`--sync-every`, a segment change) and when a writer waits for its
//! records ([`Ticket::durable`]).

use std::ops::RangeInclusive;
use std::sync::Arc;

use bytes::BytesMut;
use nsq_diskqueue::{DiskQueue, Durability, ReadSeq, Seq};
use nsq_protocol::Message;
use nsq_protocol::MessageId;
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::watch;

use super::disk::{blocking, BackendError, Syncer};
use super::health::Health;
use super::spill::SpillTicket;

/// Most messages written in one disk queue call, except with durable
/// acknowledgements, where a batch must stay whole (see `DiskQueue`).
const APPEND_BATCH: usize = 1024;

fn disk(e: nsq_diskqueue::Error) -> BackendError {
    BackendError::Disk(e.to_string())
}

/// Asks `syncer` for a sync of `queue`; a closed queue is no error.
fn request_sync(syncer: &Arc<Syncer>, queue: &Arc<DiskQueue>) {
    let queue = queue.clone();
    syncer.request(move || match queue.sync() {
        Err(e) if !matches!(e, nsq_diskqueue::Error::Closed) => Some(e.to_string()),
        _ => None,
    })
}

/// A topic's or channel's disk queue.
#[derive(Clone)]
pub struct DiskBackend {
    queue: Arc<DiskQueue>,
    syncer: Arc<Syncer>,
    /// Whole batches, and `Ticket`s worth waiting for (`--sync-every=1`).
    durable_acks: bool,
    /// Records read stay until acknowledged (a channel's queue with
    /// `--sync-every=1`).
    acked_reads: bool,
}

/// What a read took off a disk queue.
#[derive(Debug, Default)]
pub struct Read {
    pub msgs: Vec<Message>,
    /// The messages' read numbers, to acknowledge them by; empty unless the
    /// queue keeps what it hands out until then.
    pub reads: Vec<ReadSeq>,
    /// More records are unread.
    pub more: bool,
    /// Messages not due yet, with what is left of their delay (a DPUB a
    /// keeper held: see [`Keeper::read`]).
    pub deferred: Vec<(Message, std::time::Duration)>,
}

/// What a sweep for expired messages took off a queue's head.
#[derive(Debug, Default)]
pub struct Expired {
    /// Skipped unread: counted only.
    pub skipped: u64,
    /// Read whole (their bodies were wanted, or a keeper holds them).
    pub taken: Vec<Message>,
    /// `taken`'s read numbers, when the queue keeps what it hands out.
    pub reads: Vec<ReadSeq>,
}

/// Records appended to a disk queue (or to a channel's deferred run), to
/// wait for until they are durable.
#[derive(Clone)]
pub struct Ticket(Written);

#[derive(Clone)]
enum Written {
    Queue {
        disk: DiskBackend,
        range: RangeInclusive<Seq>,
    },
    Run(SpillTicket),
}

impl From<SpillTicket> for Ticket {
    fn from(t: SpillTicket) -> Ticket {
        Ticket(Written::Run(t))
    }
}

impl Ticket {
    /// Starts the sync that will cover these records, if none is running
    /// (the one running may not): ask for every ticket of a publish before
    /// waiting for any, so the queues' fsyncs overlap.
    pub fn request(&self) {
        match &self.0 {
            Written::Queue { disk, range } => {
                if disk.queue.durability(range) == Durability::Pending {
                    request_sync(&disk.syncer, &disk.queue);
                }
            }
            Written::Run(t) => t.request(),
        }
    }

    /// Whether a completed sync covered the records (Some(true)), the
    /// sync that should have failed (Some(false)), or neither yet.
    fn durability(&self) -> Option<bool> {
        match &self.0 {
            Written::Queue { disk, range } => match disk.queue.durability(range) {
                Durability::Durable => Some(true),
                Durability::Lost => Some(false),
                Durability::Pending => None,
            },
            Written::Run(t) => t.durability(),
        }
    }

    /// Waits until a completed sync covered the records; `NotDurable` if
    /// the sync that should have failed (they were discarded and will never
    /// be delivered). Cancel-safe: waiting again starts over.
    pub async fn durable(&self) -> Result<(), BackendError> {
        let mut done = match &self.0 {
            Written::Queue { disk, .. } => disk.syncer.subscribe(),
            Written::Run(t) => t.syncs(),
        };
        loop {
            match self.durability() {
                Some(true) => return Ok(()),
                Some(false) => return Err(BackendError::NotDurable),
                None => self.request(),
            }
            if done.changed().await.is_err() {
                return Err(BackendError::Disk("disk queue closed".into()));
            }
        }
    }
}

impl DiskBackend {
    /// nsqd's disk queue names: `<topic>` and `<topic>:<channel>`.
    pub fn open(
        name: &str,
        data_path: &std::path::Path,
        opts: nsq_diskqueue::Options,
        health: Arc<Health>,
    ) -> Result<DiskBackend, BackendError> {
        let durable_acks = opts.durable_reads;
        let acked_reads = opts.acked_reads;
        let queue = DiskQueue::open(name, data_path, opts).map_err(disk)?;
        let syncer = Syncer::new(health);
        Ok(DiskBackend {
            queue: Arc::new(queue),
            syncer: Arc::new(syncer),
            durable_acks,
            acked_reads,
        })
    }

    /// Appends messages in order, in batches each encoded into one buffer
    /// and written at once; batches are bounded so that writing a large
    /// channel out at shutdown does not copy all of it at once. With durable
    /// acknowledgements the messages stay one batch and the ticket covers
    /// them all.
    pub fn append(&self, msgs: &[Message]) -> Result<Option<Ticket>, BackendError> {
        let batch_len = if self.durable_acks {
            msgs.len().max(1)
        } else {
            APPEND_BATCH
        };
        let mut buf = BytesMut::new();
        let mut ends = Vec::new();
        let mut first = None;
        let mut last = 0;
        for batch in msgs.chunks(batch_len) {
            buf.clear();
            buf.reserve(batch.iter().map(Message::encoded_len).sum());
            ends.clear();
            for m in batch {
                m.encode(&mut buf);
                ends.push(buf.len());
            }
            let mut start = 0;
            let records: Vec<&[u8]> = ends
                .iter()
                .map(|&end| {
                    let r = &buf[start..end];
                    start = end;
                    r
                })
                .collect();
            let r = blocking(|| self.queue.put_batch(&records)).map_err(disk);
            self.kick_sync();
            let range = r?;
            first.get_or_insert(*range.start());
            last = *range.end();
        }
        Ok(first.map(|first| {
            Ticket(Written::Queue {
                disk: self.clone(),
                range: first..=last,
            })
        }))
    }

    /// Up to `max` messages, oldest first, and whether more are unread. A
    /// record that does not decode is logged and skipped, as nsqd does.
    pub fn read(&self, max: usize) -> Read {
        let mut records = Vec::with_capacity(max.min(1024));
        let mut first = 0;
        if self.queue.has_unread() {
            // What the reader has read ahead, or can read from the page
            // cache without waiting, is read right here; only what the cache
            // cannot serve goes to the blocking side (block_in_place hands
            // this worker's tasks to another thread: a wake-up and context
            // switches that cost more than a 64 KiB copy).
            let mut res = self.queue.read_batch(max, &mut records, true);
            if let Ok(f) = res {
                first = f;
            }
            if res.is_ok() && records.len() < max && self.queue.has_unread() {
                let more = max - records.len();
                res = blocking(|| self.queue.read_batch(more, &mut records, false));
            }
            if let Err(e) = res {
                tracing::error!(error = %e, "disk queue read failed");
            }
            self.kick_sync();
        }
        let mut read = Read {
            msgs: Vec::with_capacity(records.len()),
            reads: Vec::new(),
            more: self.queue.has_unread(),
            deferred: Vec::new(),
        };
        let mut skipped = Vec::new();
        // the records of both calls are numbered in order from `first`
        for (seq, data) in (first..).zip(records) {
            match Message::decode(data) {
                Ok(m) => {
                    read.msgs.push(m);
                    if self.acked_reads {
                        read.reads.push(seq);
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "failed to decode message from disk queue, skipped");
                    skipped.push(seq);
                }
            }
        }
        if self.acked_reads && !skipped.is_empty() {
            self.ack(&skipped);
        }
        read
    }

    /// The records at the head published before `before_ns` (a message's
    /// first 8 bytes are its timestamp), at most `max`: skipped unread, or
    /// with `bodies` read whole and returned (with their read numbers when
    /// the queue keeps what it hands out).
    pub fn expire(&self, before_ns: i64, bodies: bool, max: usize) -> Expired {
        let expired = |head: &[u8]| {
            head.get(..8)
                .and_then(|b| b.try_into().ok())
                .is_some_and(|ts| i64::from_be_bytes(ts) < before_ns)
        };
        let mut out = Expired::default();
        if !bodies {
            match blocking(|| self.queue.skip_while(max, 8, expired)) {
                Ok(n) => out.skipped = n as u64,
                Err(e) => tracing::error!(error = %e, "disk queue skip of expired messages failed"),
            }
            self.kick_sync();
            return out;
        }
        let mut records = Vec::new();
        let first = match blocking(|| self.queue.take_while(max, &mut records, expired)) {
            Ok(f) => f,
            Err(e) => {
                tracing::error!(error = %e, "disk queue read of expired messages failed");
                return out;
            }
        };
        self.kick_sync();
        let mut skipped = Vec::new();
        for (seq, data) in (first..).zip(records) {
            match Message::decode(data) {
                Ok(m) => {
                    out.taken.push(m);
                    if self.acked_reads {
                        out.reads.push(seq);
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "failed to decode message from disk queue, skipped");
                    skipped.push(seq);
                }
            }
        }
        self.ack(&skipped);
        out
    }

    /// With acknowledged reads: these records (by read number) are done
    /// with; the read position a restart begins at may move past them.
    pub fn ack(&self, reads: &[ReadSeq]) {
        if self.acked_reads && !reads.is_empty() {
            self.queue.ack(reads);
            self.kick_sync();
        }
    }

    pub fn depth(&self) -> i64 {
        self.queue.depth()
    }

    /// Whether a read may return a record. Not `depth() > 0`: a disk queue
    /// restored from a crash can under-count, and its records must still flow.
    pub fn has_unread(&self) -> bool {
        self.queue.has_unread()
    }

    /// Changes after every sync; with durable acknowledgements, records
    /// become readable only then.
    pub fn syncs(&self) -> watch::Receiver<u64> {
        self.syncer.subscribe()
    }

    pub fn empty(&self) -> Result<(), BackendError> {
        blocking(|| self.queue.empty()).map_err(disk)
    }

    /// Flushes and keeps the contents for the next start.
    pub fn close(&self) -> Result<(), BackendError> {
        blocking(|| self.queue.close()).map_err(disk)
    }

    /// Removes the contents for good.
    pub fn delete(&self) -> Result<(), BackendError> {
        blocking(|| self.queue.delete()).map_err(disk)
    }

    /// fsyncs if anything changed since the last sync (`--sync-timeout`).
    pub fn sync_if_needed(&self) {
        if self.queue.needs_sync() {
            request_sync(&self.syncer, &self.queue);
        }
    }

    /// Starts a sync if the sync policy calls for one.
    fn kick_sync(&self) {
        if self.queue.sync_due() {
            request_sync(&self.syncer, &self.queue);
        }
    }
}

/// A queue whose messages past memory are held by someone other than a
/// disk queue of its own: it keeps only where they are, and reads them
/// back from there. Implemented by a replicated topic's group log
/// (`super::replicated::store`); opened for a topic and each of its
/// channels through [`OpenKeeper`].
pub trait Keeper: Send + Sync {
    /// Keeps `msgs`, in order, behind what it holds.
    fn append(&self, msgs: &[Message]);
    /// Up to `max` messages, oldest first; a DPUB whose delay has not run
    /// out comes in [`Read::deferred`].
    fn read(&self, max: usize) -> Read;
    /// Messages it holds for the queue.
    fn depth(&self) -> u64;
    /// Forgets them all.
    fn empty(&self);
    /// Keeps, behind what it holds, the messages of these ids that it can
    /// find, as new deliveries (attempts start over); how many.
    fn put_back(&self, ids: &mut dyn Iterator<Item = MessageId>) -> u64;
    /// Takes the messages at the head published before `before_ns` (Unix
    /// ns), at most `max` (they expired).
    fn take_expired(&self, before_ns: i64, max: usize) -> Vec<Message>;
}

/// Opens the [`Keeper`] of a topic's queue or of one of its channels'.
pub type OpenKeeper = Arc<dyn Fn() -> Box<dyn Keeper> + Send + Sync>;

/// A topic's or channel's backend, as its server-side owner sees it.
pub struct Backend {
    store: Store,
    io: Mutex<()>,
}

enum Store {
    /// `#ephemeral`: nothing kept.
    Nothing,
    Disk(DiskBackend),
    /// Held by its keeper (a replicated topic's, on a member of its group).
    Kept(Box<dyn Keeper>),
    /// The disk queue would not open.
    Failed(BackendError),
}

impl Backend {
    /// `Ok(None)`: `#ephemeral`, nothing kept. `Err`: the disk queue would
    /// not open.
    pub fn new(disk: Result<Option<DiskBackend>, BackendError>) -> Backend {
        Backend {
            store: match disk {
                Ok(Some(d)) => Store::Disk(d),
                Ok(None) => Store::Nothing,
                Err(e) => Store::Failed(e),
            },
            io: Mutex::new(()),
        }
    }

    /// A queue whose messages past memory `keeper` holds.
    pub fn kept(keeper: Box<dyn Keeper>) -> Backend {
        Backend {
            store: Store::Kept(keeper),
            io: Mutex::new(()),
        }
    }

    /// Held while disk work is done and its result reported back to the
    /// core, and by shutdown: records a refill took off the disk are back in
    /// the core before the core is closed, never lost between the two.
    pub fn lock_io(&self) -> MutexGuard<'_, ()> {
        self.io.lock()
    }

    fn disk(&self) -> Option<&DiskBackend> {
        match &self.store {
            Store::Disk(d) => Some(d),
            _ => None,
        }
    }

    /// Puts back, under the I/O lock, the messages of these ids that the
    /// queue's keeper holds (see [`Keeper::put_back`]); None when no keeper
    /// holds the queue (the caller puts the messages in itself).
    pub fn put_back(&self, ids: &mut dyn Iterator<Item = MessageId>) -> Option<u64> {
        match &self.store {
            Store::Kept(k) => {
                let _io = self.lock_io();
                Some(k.put_back(ids))
            }
            _ => None,
        }
    }

    /// Whether a read may return a record (see [`DiskBackend::has_unread`]).
    pub fn has_unread(&self) -> bool {
        match &self.store {
            Store::Disk(d) => d.has_unread(),
            Store::Kept(k) => k.depth() > 0,
            _ => false,
        }
    }

    /// The records' ticket (`None` where nothing is kept, or where a
    /// keeper holds them already).
    pub fn append(&self, msgs: &[Message]) -> Result<Option<Ticket>, BackendError> {
        match &self.store {
            Store::Disk(d) => d.append(msgs),
            Store::Kept(k) => {
                k.append(msgs);
                Ok(None)
            }
            Store::Nothing => Ok(None),
            Store::Failed(e) => Err(e.clone()),
        }
    }

    pub fn read(&self, max: usize) -> Read {
        match &self.store {
            Store::Disk(d) => d.read(max),
            Store::Kept(k) => k.read(max),
            _ => Read::default(),
        }
    }

    /// The expired records at the queue's head (see
    /// [`DiskBackend::expire`]); a keeper's are taken whole.
    pub fn expire(&self, before_ns: i64, bodies: bool, max: usize) -> Expired {
        match &self.store {
            Store::Disk(d) => d.expire(before_ns, bodies, max),
            Store::Kept(k) => Expired {
                taken: k.take_expired(before_ns, max),
                ..Expired::default()
            },
            _ => Expired::default(),
        }
    }

    /// See [`DiskBackend::ack`].
    pub fn ack(&self, reads: &[ReadSeq]) {
        if let Some(d) = self.disk() {
            d.ack(reads);
        }
    }

    pub fn depth(&self) -> i64 {
        match &self.store {
            Store::Disk(d) => d.depth(),
            Store::Kept(k) => k.depth() as i64,
            _ => 0,
        }
    }

    /// With durable acknowledgements: a receiver that changes after every
    /// sync (records become readable only then).
    pub fn syncs(&self) -> Option<watch::Receiver<u64>> {
        self.disk().filter(|d| d.durable_acks).map(|d| d.syncs())
    }

    pub fn empty(&self) -> Result<(), BackendError> {
        match &self.store {
            Store::Disk(d) => d.empty(),
            Store::Kept(k) => {
                k.empty();
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Clean shutdown: `msgs` (what memory held) written, then closed. A
    /// keeper holds its queue's messages already: nothing to write.
    pub fn close_with(&self, msgs: &[Message]) -> Result<(), BackendError> {
        match self.disk() {
            Some(d) => {
                d.append(msgs)?;
                // what was read and not finished is in `msgs` again
                d.queue.ack_all();
                d.close()
            }
            None => Ok(()),
        }
    }

    /// Removes the disk queue's files; a keeper's queue is only emptied
    /// (what it holds is not the queue's alone).
    pub fn delete(&self) -> Result<(), BackendError> {
        match &self.store {
            Store::Disk(d) => d.delete(),
            _ => self.empty(),
        }
    }

    pub fn sync_if_needed(&self) {
        if let Some(d) = self.disk() {
            d.sync_if_needed();
        }
    }
}

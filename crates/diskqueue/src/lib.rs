//! On-disk FIFO of byte records, compatible with go-diskqueue v1.1.0.
//!
//! A data directory written by Go nsqd can be opened by this crate and the
//! other way round: file names, record framing and metadata text are the
//! same, and the positions stored in the metadata mean the same thing.
//!
//! # Files
//!
//! All files sit directly in `data_path`:
//!
//! * `<name>.diskqueue.<N>.dat` — data segment number `N`, printed as at
//!   least six zero-padded digits (`000000`, `000017`, `1234567`).
//! * `<name>.diskqueue.meta.dat` — the metadata, replaced atomically by
//!   writing `<name>.diskqueue.meta.dat.<random>.tmp`, fsyncing it and
//!   renaming it over the old one.
//! * `<name>.diskqueue.<N>.dat.bad` — a segment set aside after a read
//!   failure (renamed by the first sync after it). Never touched again; an
//!   operator may inspect or delete it.
//!
//! Files are created with mode 0600 on Unix.
//!
//! A segment is a bare concatenation of records with no header: a 4-byte
//! big-endian signed length followed by that many payload bytes. Lengths
//! outside `[min_msg_size, max_msg_size]` are refused on write and treated
//! as corruption on read.
//!
//! The metadata is three lines of ASCII decimals, each ending in `\n`:
//!
//! ```text
//! <depth>
//! <readFileNum>,<readPos>
//! <writeFileNum>,<writePos>
//! ```
//!
//! `(readFileNum, readPos)` is where the next unconsumed record starts;
//! `(writeFileNum, writePos)` is where the next record will be appended;
//! `depth` is the number of records between them.
//!
//! # Invariants
//!
//! * The reader never passes the writer: `(readFileNum, readPos) <=
//!   (writeFileNum, writePos)` in lexicographic order.
//! * Segments numbered below `readFileNum` have been consumed. Each is
//!   deleted by the first sync after the reader leaves it, once the metadata
//!   recording that is durable (see Durability). Segments between the
//!   reader and the writer are "complete": their size on disk is their end.
//! * A segment never grows past `max_bytes_per_file`, except that the first
//!   record of a segment is always written there even if it alone is larger.
//! * The segment being written is only meaningful up to `writePos`; the
//!   reader never looks beyond it.
//!
//! # Durability
//!
//! * `put` returns only after the record has been handed to the kernel
//!   (buffered writer flushed). A killed process loses nothing `put`
//!   acknowledged; a power cut can lose whatever was not yet fsynced.
//! * A "sync" fsyncs the segment being written and then replaces the
//!   metadata. It happens after `sync_every` puts+reads, when the writer
//!   starts a new segment, when the reader leaves a segment, after a read
//!   failure or depth correction, after `empty`, on `close`, and whenever the
//!   owner calls [`DiskQueue::sync`] (its timer, every `sync_timeout`, when
//!   [`DiskQueue::needs_sync`] says so). The queue runs no timer itself.
//! * The fsync itself runs without the queue's lock: `sync` flushes and
//!   snapshots the metadata under the lock, then fsyncs a duplicate of the
//!   segment's descriptor and writes the snapshot while puts and reads go
//!   on. Metadata files are written in snapshot order (an older snapshot
//!   finishing late is dropped), and never after `close`/`delete`.
//! * With [`Options::defer_sync`], `put`/`read` never sync themselves: they
//!   only raise [`DiskQueue::sync_due`] and the owner runs `sync` off its
//!   hot path (nsqd does it on a blocking thread). Like go-diskqueue, whose
//!   writer answers before its loop gets to the sync, a put may then be
//!   acknowledged before the fsync that covers it.
//! * Every record put gets a sequence number (`put_batch` returns the
//!   range). `sync` returns the highest one it made durable, and
//!   [`DiskQueue::durability`] says where a range stands, so an owner can
//!   answer a write only once it is on disk, and group commit: one sync
//!   covers every record put before it started.
//! * With [`Options::durable_reads`] (nsqd's `--sync-every=1`), what is
//!   acknowledged that way is exactly what can be read: the reader stops at
//!   the last write a completed sync covered; a batch is never split across
//!   segments (a rollover's sync in the middle would make half of it
//!   durable); the directory fsync after the metadata rename must succeed;
//!   and a sync that fails discards every record written since the last
//!   good one (segments past that point removed, that one cut back) and
//!   reports them [`Durability::Lost`] — Linux may already have dropped
//!   those pages, so no later fsync could vouch for them. Their writers are
//!   told they failed, and no reader of this process ever sees them.
//!   `durable_tests.rs` checks it on the simulated filesystem, with fsyncs
//!   that fail while the machine lives on, deaths mid-operation and power
//!   cuts.
//! * Between syncs the metadata lags behind memory. A crash therefore leaves
//!   a metadata file whose read position is older (records read since the
//!   last sync are delivered again — at-least-once, never lost) and whose
//!   write position is older (the last segment is longer than `writePos`).
//!   That is why a segment the reader has left is deleted, or renamed to
//!   `.bad`, only by a sync, after its metadata: done earlier, a crash would
//!   bring back a read position inside a segment that is gone. A crash may
//!   also leave a stray `*.tmp` file, or consumed segments just below
//!   `readFileNum` (between the metadata and the deletion); recovery deletes
//!   the latter.
//! * A power cut, unlike a killed process, also loses what only the page
//!   cache held: records put since the last sync may be lost (the last one
//!   possibly torn, which sets its segment aside), but every record put
//!   before a sync that completed is kept, and every record the surviving
//!   metadata does not record as read is delivered again. The power-cut
//!   tests (`simfs_tests.rs`; the cases they found in
//!   `simfs_regressions.rs`) check this on a simulated filesystem that
//!   drops whatever was not fsynced.
//!
//! * With [`Options::acked_reads`], reading a record no longer consumes
//!   it: the metadata's read position is the start of the oldest record
//!   read and not yet acknowledged ([`DiskQueue::ack`]), and its depth
//!   counts every record from there. A killed process, or a power cut,
//!   therefore brings back every record that was read but not
//!   acknowledged (and, after it, the acknowledged ones the oldest
//!   unacknowledged one held back: at-least-once), and a segment is
//!   deleted only once that position has left it.
//!
//! * [`DiskQueue::skip_while`] moves the reader past the records at its
//!   position that a predicate on their first bytes picks (nsqd's expired
//!   messages: a message starts with its timestamp), reading those bytes
//!   only and seeking over the rest; a skipped record counts as read and,
//!   with `acked_reads`, acknowledged. [`DiskQueue::take_while`] is its
//!   counterpart that reads them whole (to publish them elsewhere). Go's
//!   queue has neither.
//!
//! All file operations go through the [`Fs`] trait; [`DiskQueue`] uses the
//! real filesystem ([`OsFs`]) unless a test gives it another.
//!
//! # Recovery on open
//!
//! 1. Load the metadata. A missing file means a fresh queue at segment 0. A
//!    damaged file is logged; positions parsed before the damage are kept,
//!    everything else (including depth) is 0. A negative depth is clamped
//!    to 0.
//! 2. If the metadata parsed whole and the reader is not past the writer,
//!    consumed segments a crash left just below `readFileNum` are deleted,
//!    oldest first.
//! 3. If the segment at `writeFileNum` exists and is larger than `writePos`,
//!    the metadata is stale: the writer moves to a fresh segment
//!    (`writeFileNum + 1`, position 0) so that nothing past `writePos` is
//!    overwritten, and the old segment becomes complete, so the reader will
//!    deliver everything in it up to its real end. The whole records found
//!    past the stale `writePos` are added to depth, and the segment is
//!    fsynced: a killed process may have left them in the page cache only.
//!    If that segment is missing while `writePos > 0` and the reader is
//!    behind the writer (a crash inside `empty`), the writer moves to a
//!    fresh segment too, rather than recreate it with a hole at its start.
//! 4. If the reader has caught up with the writer the depth is forced to 0;
//!    if the reader is past the writer (corrupt metadata) both skip to a new
//!    empty segment, as go-diskqueue does when it detects that case.
//!
//! While reading, a missing segment is skipped, and a segment with an
//! impossible length, a short record or an I/O error is set aside to be
//! renamed to `.bad` (the records left in it are lost) and reading carries
//! on with the next segment. If that was the segment being written, the writer moves on too.
//! Depth may over-count after such a loss; it is forced back to 0 when the
//! reader catches up with the writer.
//!
//! # Differences from go-diskqueue
//!
//! The format and the observable file layout are unchanged; the behaviour
//! differs only where Go is known to misbehave:
//!
//! * A complete segment whose read position is already at its end (the
//!   reader had caught up just before the writer rolled over, go-diskqueue
//!   issue #42) is deleted like any consumed segment instead of being
//!   reported as corrupt and renamed to `.bad`.
//! * The stale-write-file check of step 3 also runs when the metadata is
//!   missing or damaged (Go would overwrite the segment from offset 0), and
//!   the records found past the stale `writePos` are counted into depth (Go
//!   leaves depth low and lets it drift negative until the tail check).
//! * Depth never goes below 0.
//! * "Has unread data" compares positions lexicographically, so corrupt
//!   metadata with the reader in a later segment than the writer cannot make
//!   the reader walk forward forever.
//! * `empty` persists the metadata straight away (as the nsq spec describes)
//!   rather than leaving no metadata file until the next sync; a crash just
//!   after emptying then cannot restart numbering at segment 0.
//! * `close` fsyncs the segment being written as well as persisting metadata,
//!   and the directory is fsynced after the metadata rename.
//! * `delete` removes the data segments and the metadata file itself (nsqd's
//!   `Empty` followed by `Delete`).
//! * A record whose length runs past the end of the readable data is treated
//!   as corrupt before its buffer is allocated.
//! * A segment the reader has left is deleted (or renamed to `.bad`) by the
//!   next sync, after the metadata; Go does it at once, so a crash before
//!   its next sync loses the records read from that segment since the last
//!   sync instead of delivering them again. Recovery's steps 2 and 3
//!   (deleting consumed leftovers, fsyncing the stale write segment, moving
//!   the writer off a missing one) have no Go counterpart; all were found by
//!   the power-cut tests.
//! * A failed fsync of the metadata temp file fails the sync and leaves the
//!   old metadata file in place; Go renames it anyway, and a power cut can
//!   then leave an empty metadata file under the real name, from which
//!   recovery restarts the writer over segments that hold records.

#![forbid(unsafe_code)]

mod meta;
mod read_ahead;
pub mod vfs;

#[cfg(test)]
mod durable_tests;
#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod simfs;
#[cfg(test)]
mod simfs_model;
#[cfg(test)]
mod simfs_regressions;
#[cfg(test)]
mod simfs_tests;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::ffi::OsString;
use std::fmt;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use tracing::{debug, error, info, warn};

use crate::meta::Meta;
use crate::read_ahead::ReadAhead;
pub use crate::vfs::{Fs, FsFile, OsFs, ReadCached};

// The test modules reach `std::fs` through `use super::*`.
#[cfg(test)]
use std::fs;

/// Size of a record's length prefix on disk.
const LEN_PREFIX: i64 = 4;

/// Above this many segment numbers, scanning the directory is cheaper than
/// probing each number (only reachable with damaged metadata).
const MAX_PROBED_FILES: i64 = 1024;

/// Tuning knobs, fixed for the lifetime of a queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// A segment is closed once the next record would push it past this size.
    pub max_bytes_per_file: i64,
    /// Smallest accepted record payload.
    pub min_msg_size: i32,
    /// Largest accepted record payload.
    pub max_msg_size: i32,
    /// Number of puts plus reads after which a sync is done.
    pub sync_every: i64,
    /// How often the owner is expected to call [`DiskQueue::sync`] when
    /// [`DiskQueue::needs_sync`] is true. Informational for this crate.
    pub sync_timeout: Duration,
    /// Leave the syncs that `sync_every` and the segment changes call for
    /// to the owner ([`DiskQueue::sync_due`] says when) instead of running
    /// them inside `put`/`read`. Rollover and `close` still sync inline.
    pub defer_sync: bool,
    /// Acknowledge only what is on stable storage: the reader never goes
    /// past the last write a completed sync covered, and a sync that fails
    /// discards every record written since the last good one (see
    /// [`DiskQueue::durability`]). For owners that answer a write only once
    /// it is durable (nsqd with `--sync-every=1`).
    pub durable_reads: bool,
    /// A read record stays on disk until the owner acknowledges it
    /// ([`DiskQueue::ack`]): what a crash interrupts between the read and
    /// the acknowledgement is read again after it. For owners that hand
    /// records out and must not lose them before they are done with them
    /// (nsqd's channels with `--sync-every=1`, whose messages stay on disk
    /// until a consumer finishes them).
    pub acked_reads: bool,
}

impl Default for Options {
    /// nsqd's defaults: 100 MiB segments, 1 MiB message bodies plus the
    /// 26-byte message header, sync every 2500 operations or 2 s.
    fn default() -> Self {
        Options {
            max_bytes_per_file: 100 * 1024 * 1024,
            min_msg_size: 26,
            max_msg_size: 1024 * 1024 + 26,
            sync_every: 2500,
            sync_timeout: Duration::from_secs(2),
            defer_sync: false,
            durable_reads: false,
            acked_reads: false,
        }
    }
}

/// Errors returned by [`DiskQueue`].
#[derive(thiserror::Error, Debug)]
pub enum Error {
    /// A filesystem operation failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// `put` was given a record outside the configured size bounds. The text
    /// matches go-diskqueue's so that client-visible errors stay the same.
    #[error("invalid message write size ({size}) minMsgSize={min} maxMsgSize={max}")]
    InvalidSize { size: usize, min: i32, max: i32 },
    /// The queue was closed or deleted. go-diskqueue reports this as "exiting".
    #[error("exiting")]
    Closed,
}

/// Where a range of records stands (see [`DiskQueue::durability`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// A completed sync covered every record of the range.
    Durable,
    /// Written, not yet covered by a completed sync.
    Pending,
    /// A sync failed before covering the range, and (with
    /// [`Options::durable_reads`]) its records were discarded: they will
    /// never be read.
    Lost,
}

/// Sequence numbers of records put since the queue was opened: the first
/// record put is 1. [`DiskQueue::put_batch`] returns the range it wrote.
pub type Seq = u64;

/// Numbers of records read since the queue was opened: the first record
/// read is 1. [`DiskQueue::read_batch`] returns the first one it read; the
/// others follow in order. With [`Options::acked_reads`] the owner
/// acknowledges records by these numbers ([`DiskQueue::ack`]).
pub type ReadSeq = u64;

impl Error {
    fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Error {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }
}

/// A go-diskqueue compatible queue. All methods take `&self`; an internal
/// mutex serialises them, and each holds it only for its own file I/O.
///
/// `F` is the filesystem; everything but tests uses the default, [`OsFs`].
pub struct DiskQueue<F: Fs = OsFs> {
    inner: Mutex<Inner<F>>,
}

impl<F: Fs> fmt::Debug for DiskQueue<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let q = self.lock();
        f.debug_struct("DiskQueue")
            .field("name", &q.name)
            .field("data_path", &q.data_path)
            .field("state", &q.meta())
            .field("closed", &q.closed)
            .finish()
    }
}

// `open` lives in an impl for the default filesystem only (as `HashMap::new`
// does for its default hasher): in expression position a defaulted type
// parameter is not inferred, so a generic `open` would make every
// `DiskQueue::open(..)` call ambiguous.
impl DiskQueue {
    /// Opens (or starts) the queue `name` in `data_path`, recovering from
    /// whatever state the files are in; see the module docs. Fails only if
    /// `data_path` is not an accessible directory.
    pub fn open(name: &str, data_path: &Path, opts: Options) -> Result<DiskQueue, Error> {
        DiskQueue::open_with_fs(OsFs, name, data_path, opts)
    }
}

impl<F: Fs> DiskQueue<F> {
    /// [`DiskQueue::open`] on the filesystem `fs`.
    pub fn open_with_fs(fs: F, name: &str, data_path: &Path, opts: Options) -> Result<Self, Error> {
        let is_dir = fs
            .is_dir(data_path)
            .map_err(|e| Error::io("stat", data_path, e))?;
        if !is_dir {
            return Err(Error::io(
                "open data path",
                data_path,
                io::Error::other("not a directory"),
            ));
        }
        let mut inner = Inner {
            fs,
            name: name.to_owned(),
            data_path: data_path.to_owned(),
            opts,
            depth: 0,
            read_file_num: 0,
            read_pos: 0,
            write_file_num: 0,
            write_pos: 0,
            read_file_end: 0,
            reader: None,
            writer: None,
            writer_file_num: 0,
            ops_since_sync: 0,
            dirty: false,
            sync_pending: false,
            closed: false,
            meta_gen: 0,
            meta_state: Arc::new(Mutex::new(MetaState::default())),
            left_segments: Vec::new(),
            written: 0,
            durable: 0,
            durable_end: (0, 0),
            lost: Vec::new(),
            reads: 0,
            unacked: VecDeque::new(),
            unacked_base: 1,
            held_segments: Vec::new(),
        };
        inner.recover();
        // Everything found at open is on disk: recovery fsynced what a
        // killed process left past the stale write position.
        inner.durable_end = (inner.write_file_num, inner.write_pos);
        inner.sync_if_due();
        Ok(DiskQueue {
            inner: Mutex::new(inner),
        })
    }

    /// Appends one record. Once this returns `Ok` the bytes are in the
    /// kernel's hands; they are fsynced according to the sync policy.
    /// Returns the record's sequence number.
    pub fn put(&self, data: &[u8]) -> Result<Seq, Error> {
        self.put_batch(&[data]).map(|r| *r.end())
    }

    /// Appends several records with as few writes as the segment boundaries
    /// allow (one per segment touched) — the same bytes and the same
    /// rollover points as that many `put`s, minus a syscall per record.
    /// Sizes are all checked first: on `InvalidSize` nothing is written.
    /// On an I/O error, the records of the segments already written stay.
    /// Returns the sequence numbers of the records written (an empty range
    /// for no records).
    pub fn put_batch(&self, records: &[&[u8]]) -> Result<std::ops::RangeInclusive<Seq>, Error> {
        let mut q = self.lock();
        q.check_open()?;
        let first = q.written + 1;
        let res = q.put_batch(records).map(|()| first..=q.written);
        if !q.opts.defer_sync {
            q.sync_if_due();
        }
        res
    }

    /// Takes the next record, or `None` when the reader has caught up.
    /// Corrupt segments are set aside (see module docs) rather than reported.
    pub fn read(&self) -> Result<Option<Bytes>, Error> {
        let mut q = self.lock();
        q.check_open()?;
        let rec = q.read();
        if !q.opts.defer_sync {
            q.sync_if_due();
        }
        Ok(rec)
    }

    /// Up to `max` records appended to `out`, under one lock. With
    /// `buffered_only`, only the records the reader holds in its read-ahead
    /// buffer or can top it up with from the page cache ([`ReadCached`]):
    /// nothing that waits for the device, so an async task may call it
    /// directly and save the blocking path for a read the cache cannot
    /// serve (and for opening the next segment).
    /// Returns the [`ReadSeq`] of the first record appended (the others
    /// follow it in order).
    pub fn read_batch(
        &self,
        max: usize,
        out: &mut Vec<Bytes>,
        buffered_only: bool,
    ) -> Result<ReadSeq, Error> {
        let mut q = self.lock();
        q.check_open()?;
        let first = q.reads + 1;
        for _ in 0..max {
            let rec = if buffered_only {
                q.read_buffered()
            } else {
                q.read()
            };
            match rec {
                Some(r) => out.push(r),
                None => break,
            }
        }
        if !q.opts.defer_sync {
            q.sync_if_due();
        }
        Ok(first)
    }

    /// Skips the records at the read position while `skip` says so of the
    /// first `peek` bytes of each one's data, up to `max` records, without
    /// reading the rest of them: what lies past the read-ahead is seeked
    /// over (nsqd's expired messages on disk: a message's first 8 bytes are
    /// its timestamp, and its body is never read). A record shorter than
    /// `peek` is not skipped. Skipped records are done with: with
    /// [`Options::acked_reads`] they are acknowledged here. Returns how
    /// many were skipped.
    pub fn skip_while(
        &self,
        max: usize,
        peek: usize,
        skip: impl Fn(&[u8]) -> bool,
    ) -> Result<usize, Error> {
        let mut q = self.lock();
        q.check_open()?;
        let n = q.skip_while(max, peek, &skip);
        if !q.opts.defer_sync {
            q.sync_if_due();
        }
        Ok(n)
    }

    /// Takes the records at the read position while `take` says so of each
    /// one's data, up to `max`, appended to `out`; the first it refuses
    /// stays. As [`DiskQueue::read_batch`] does, it returns the
    /// [`ReadSeq`] of the first record appended (with `acked_reads` they
    /// wait for their acknowledgement).
    pub fn take_while(
        &self,
        max: usize,
        out: &mut Vec<Bytes>,
        take: impl Fn(&[u8]) -> bool,
    ) -> Result<ReadSeq, Error> {
        let mut q = self.lock();
        q.check_open()?;
        let first = q.reads + 1;
        q.take_while(max, out, &take);
        if !q.opts.defer_sync {
            q.sync_if_due();
        }
        Ok(first)
    }

    /// With [`Options::acked_reads`]: the owner is done with these records
    /// (by the numbers [`DiskQueue::read_batch`] gave them), in any order.
    /// Once every record up to one is acknowledged, the next sync persists
    /// the read position past it. Unknown or repeated numbers are ignored;
    /// without `acked_reads` this does nothing.
    pub fn ack(&self, reads: &[ReadSeq]) {
        let mut q = self.lock();
        q.ack(reads);
        if !q.opts.defer_sync {
            q.sync_if_due();
        }
    }

    /// Acknowledges every record read so far (a clean shutdown, once the
    /// owner has written back what it still held).
    pub fn ack_all(&self) {
        let mut q = self.lock();
        q.ack_all();
        if !q.opts.defer_sync {
            q.sync_if_due();
        }
    }

    /// Records read and not yet acknowledged, from the oldest such one (so
    /// acknowledged ones after it count too); 0 without `acked_reads`.
    pub fn unacked(&self) -> usize {
        self.lock().unacked.len()
    }

    /// Records written but not yet read. Still answers after close.
    pub fn depth(&self) -> i64 {
        self.lock().depth
    }

    /// True while a record may be left to read: the read position is behind
    /// the write position. This, not `depth`, decides — as in go-diskqueue —
    /// because a depth restored from a crash-era metadata file can be wrong.
    pub fn has_unread(&self) -> bool {
        self.lock().has_unread()
    }

    /// True if state changed since the last successful sync.
    pub fn needs_sync(&self) -> bool {
        let q = self.lock();
        !q.closed && q.dirty
    }

    /// True when the sync policy asks for a sync now (`sync_every`
    /// operations, or a segment change); see [`Options::defer_sync`].
    pub fn sync_due(&self) -> bool {
        self.lock().sync_due()
    }

    /// Fsyncs the segment being written and persists the metadata. Only
    /// the flush and the snapshot hold the queue's lock; see module docs.
    /// Returns the highest sequence number every record up to which is now
    /// durable (see [`DiskQueue::durability`]).
    pub fn sync(&self) -> Result<Seq, Error> {
        let job = {
            let mut q = self.lock();
            q.check_open()?;
            match q.prepare_sync() {
                Ok(mut job) => {
                    job.appends_need_no_meta = q.opts.durable_reads;
                    job
                }
                Err(e) => {
                    q.sync_failed();
                    return Err(e);
                }
            }
        };
        let (written, end) = (job.written, (job.meta.write_file_num, job.meta.write_pos));
        let (res, left) = job.run();
        let mut q = self.lock();
        q.left_segments.extend(left);
        match res {
            Ok(()) => {
                q.synced(written, end);
                Ok(q.durable)
            }
            Err(e) => {
                // retried by the owner's timer or the next due sync
                q.dirty = true;
                q.sync_pending = true;
                if written > q.durable {
                    q.sync_failed();
                }
                Err(e)
            }
        }
    }

    /// Where the records `range` (as `put_batch` returned it) stand.
    pub fn durability(&self, range: &std::ops::RangeInclusive<Seq>) -> Durability {
        self.lock().durability(range)
    }

    /// Discards every record: deletes the segments from the reader's to the
    /// writer's, continues numbering at the next segment, depth 0.
    pub fn empty(&self) -> Result<(), Error> {
        let mut q = self.lock();
        q.check_open()?;
        info!(queue = %q.name, "DISKQUEUE({}): emptying", q.name);
        let files = q.skip_to_next_rw_file();
        let meta = q.remove_meta_file();
        q.ops_since_sync = 0;
        // Persist the new numbering now; see the module docs for why.
        q.sync_pending = true;
        q.sync_if_due();
        meta.and(files)
    }

    /// Syncs and closes. Every later call except `depth` fails with
    /// [`Error::Closed`]; the queue is closed even if the final sync fails.
    pub fn close(&self) -> Result<(), Error> {
        let mut q = self.lock();
        q.check_open()?;
        info!(queue = %q.name, "DISKQUEUE({}): closing", q.name);
        q.closed = true;
        let res = q.sync();
        q.meta_state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retired = true;
        q.reader = None;
        q.drop_writer();
        res
    }

    /// Closes without keeping anything: removes the data segments and the
    /// metadata file. `.bad` files and segments outside the reader..writer
    /// range are left alone, as go-diskqueue does.
    pub fn delete(&self) -> Result<(), Error> {
        let mut q = self.lock();
        q.check_open()?;
        info!(queue = %q.name, "DISKQUEUE({}): deleting", q.name);
        q.closed = true;
        let files = q.skip_to_next_rw_file();
        q.dirty = false;
        q.sync_pending = false;
        let meta = q.remove_meta_file();
        q.meta_state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retired = true;
        meta.and(files)
    }

    fn lock(&self) -> MutexGuard<'_, Inner<F>> {
        // Nothing in Inner panics mid-update, so a poisoned lock still
        // guards consistent state; refusing service would help no one.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Outcome of one attempt to read at the current position.
enum ReadStep {
    Record {
        data: Bytes,
        next_file_num: i64,
        next_pos: i64,
    },
    /// The complete segment has nothing left at the read position.
    Exhausted,
}

/// What [`Inner::skip_one`] found at the read position.
enum SkipStep {
    /// Skipped; the next record starts here.
    Skipped { next_file_num: i64, next_pos: i64 },
    /// The record is not to be skipped: the read position stays.
    Kept,
    /// The complete segment has nothing left at the read position.
    Exhausted,
}

/// Why the segment at the read position cannot be read any further.
enum ReadFailure {
    Missing,
    Io(&'static str, io::Error),
    BadLength(i32),
    Overrun { end: i64, limit: i64 },
}

impl fmt::Display for ReadFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadFailure::Missing => f.write_str("file does not exist"),
            ReadFailure::Io(op, e) => write!(f, "{op}: {e}"),
            ReadFailure::BadLength(n) => write!(f, "invalid message read size ({n})"),
            ReadFailure::Overrun { end, limit } => {
                write!(
                    f,
                    "record would end at {end}, past the readable data end {limit}"
                )
            }
        }
    }
}

struct Inner<F: Fs> {
    fs: F,
    name: String,
    data_path: PathBuf,
    opts: Options,

    depth: i64,
    read_file_num: i64,
    read_pos: i64,
    write_file_num: i64,
    write_pos: i64,

    /// End of the segment the reader has open. Only meaningful once that
    /// segment is complete: either its size when opened, or the write
    /// position at which the writer left it while the reader had it open.
    read_file_end: i64,
    reader: Option<ReadAhead<F::File>>,
    writer: Option<BufWriter<F::File>>,
    /// Segment `writer` belongs to; lags `write_file_num` during a rollover.
    writer_file_num: i64,

    ops_since_sync: i64,
    /// State differs from the last persisted metadata.
    dirty: bool,
    /// A step that go-diskqueue follows with a sync has happened.
    sync_pending: bool,
    closed: bool,
    /// Numbers metadata snapshots, so a late writer cannot go back in time.
    meta_gen: u64,
    meta_state: Arc<Mutex<MetaState>>,
    /// Segments the reader has left for good, not yet deleted (consumed) or
    /// renamed to `.bad` (unreadable). A sync does it once the metadata that
    /// puts the reader past them is durable: done before, a crash would
    /// bring back a read position inside a missing segment and lose the
    /// records read from it since the last sync instead of delivering them
    /// again (found by the power-cut model test; go-diskqueue does it at
    /// once). One that fails (read-only disk) stays here and is retried at
    /// every sync.
    left_segments: Vec<(i64, Leftover)>,

    /// Records put since open (the last one's sequence number).
    written: Seq,
    /// Every record up to this one was covered by a completed sync.
    durable: Seq,
    /// The write position as of that sync: with `durable_reads` the reader
    /// stops here.
    durable_end: (i64, i64),
    /// Ranges of records a failed sync discarded (`durable_reads` only).
    lost: Vec<(Seq, Seq)>,

    /// Records read since open (the last one's [`ReadSeq`]).
    reads: ReadSeq,
    /// `acked_reads`: every record read from the oldest unacknowledged one
    /// on, with where it starts and whether it was acknowledged since. The
    /// first one's start is the read position the metadata records.
    unacked: VecDeque<Unacked>,
    /// [`ReadSeq`] of `unacked[0]`.
    unacked_base: ReadSeq,
    /// Segments the reader has left that the acknowledged position has not:
    /// they join `left_segments` once it has. Without `acked_reads` they
    /// join at once.
    held_segments: Vec<(i64, Leftover)>,
}

/// A record read and not yet known to be done with; see `Inner::unacked`.
#[derive(Debug, Clone, Copy)]
struct Unacked {
    start: (i64, i64),
    acked: bool,
}

/// What becomes of a segment the reader has left; see `left_segments`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leftover {
    /// Read to its end: deleted.
    Consumed,
    /// Unreadable: renamed to `<segment>.bad` for an operator to inspect.
    Bad,
}

/// Deletes or quarantines a segment the reader has left. A segment that is
/// already gone is not an error.
fn dispose<F: Fs>(fs: &F, path: &Path, what: Leftover) -> io::Result<()> {
    let res = match what {
        Leftover::Consumed => fs.remove_file(path),
        Leftover::Bad => {
            let mut renamed = OsString::from(path.as_os_str());
            renamed.push(".bad");
            fs.rename(path, Path::new(&renamed))
        }
    };
    match res {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// What is on disk as the metadata file; every change to that file
/// happens under this lock (taken after the queue's, never before it).
#[derive(Default)]
struct MetaState {
    /// Snapshot number of the file on disk.
    persisted_gen: u64,
    /// Its contents.
    persisted: Option<Meta>,
    /// Closed or deleted: no more metadata writes.
    retired: bool,
}

/// The part of a sync that runs without the queue's lock.
struct SyncJob<F: Fs> {
    fs: F,
    segment: Option<(F::File, PathBuf)>,
    /// Segments to delete or quarantine once the metadata is persisted.
    left: Vec<(i64, Leftover, PathBuf)>,
    meta: Meta,
    /// Records put when the snapshot was taken: what the sync covers.
    written: Seq,
    /// `durable_reads`: a directory fsync that fails fails the sync.
    strict: bool,
    /// An owner's sync with `durable_reads`: the metadata need not be
    /// rewritten when only appends to a segment already on disk happened
    /// (see `persist`).
    appends_need_no_meta: bool,
    gen: u64,
    meta_path: PathBuf,
    data_path: PathBuf,
    meta_state: Arc<Mutex<MetaState>>,
}

impl<F: Fs> SyncJob<F> {
    /// Also returns the segments left for the next sync to delete or
    /// quarantine: all of them if the metadata could not be persisted.
    fn run(self) -> (Result<(), Error>, Vec<(i64, Leftover)>) {
        if let Err(e) = self.persist() {
            let left = self
                .left
                .into_iter()
                .map(|(num, what, _)| (num, what))
                .collect();
            return (Err(e), left);
        }
        // A newer snapshot on disk (or the final one of `close`) has the
        // reader at least as far on, so this is safe even when `persist`
        // skipped writing ours.
        let mut still_left = Vec::new();
        for (num, what, path) in &self.left {
            if let Err(e) = dispose(&self.fs, path, *what) {
                error!(
                    "DISKQUEUE failed to set aside {} ({what:?}) - {e}",
                    path.display()
                );
                still_left.push((*num, *what));
            }
        }
        if still_left.len() < self.left.len() {
            // Without it a power cut could bring a consumed segment back,
            // below the read position, to wait for the next open to delete it.
            if let Err(e) = self.fs.sync_dir(&self.data_path) {
                debug!("fsync of directory {}: {e}", self.data_path.display());
            }
        }
        (Ok(()), still_left)
    }

    /// Fsyncs the segment, then writes the metadata unless a newer snapshot
    /// got there first.
    fn persist(&self) -> Result<(), Error> {
        if let Some((f, path)) = &self.segment {
            f.sync_all()
                .map_err(|e| Error::io("fsync", path.clone(), e))?;
        }
        let mut st = self
            .meta_state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if st.retired || self.gen <= st.persisted_gen {
            return Ok(());
        }
        // Records appended to the segment the last metadata file already
        // names, with data in it (so its name is durable), are recovered
        // from the fsynced segment after a crash (the stale write position
        // step of recovery): the metadata adds nothing to their durability,
        // and skipping its two fsyncs is what lets `--sync-every=1` keep up.
        // Reads, segment changes and `close` still write it.
        if self.appends_need_no_meta && st.persisted.is_some_and(|p| only_appended(&p, &self.meta))
        {
            return Ok(());
        }
        write_meta_file(
            &self.fs,
            &self.meta_path,
            &self.data_path,
            &self.meta,
            self.strict,
        )?;
        st.persisted_gen = self.gen;
        st.persisted = Some(self.meta);
        Ok(())
    }
}

impl<F: Fs> Inner<F> {
    fn check_open(&self) -> Result<(), Error> {
        if self.closed {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }

    /// The read position a restart must begin at: the oldest record read
    /// and not acknowledged, or the reader's position.
    fn floor(&self) -> (i64, i64) {
        self.unacked
            .front()
            .map_or((self.read_file_num, self.read_pos), |u| u.start)
    }

    fn meta(&self) -> Meta {
        let (read_file_num, read_pos) = self.floor();
        Meta {
            depth: self.depth + self.unacked.len() as i64,
            read_file_num,
            read_pos,
            write_file_num: self.write_file_num,
            write_pos: self.write_pos,
        }
    }

    fn file_path(&self, num: i64) -> PathBuf {
        file_path(&self.data_path, &self.name, num)
    }

    fn meta_path(&self) -> PathBuf {
        self.data_path
            .join(format!("{}.diskqueue.meta.dat", self.name))
    }

    fn mark_changed(&mut self) {
        self.dirty = true;
    }

    fn schedule_sync(&mut self) {
        self.dirty = true;
        self.sync_pending = true;
    }

    /// Where the reader must stop: the writer, or with `durable_reads` the
    /// last write a completed sync covered.
    fn read_end(&self) -> (i64, i64) {
        if self.opts.durable_reads {
            self.durable_end.min((self.write_file_num, self.write_pos))
        } else {
            (self.write_file_num, self.write_pos)
        }
    }

    fn has_unread(&self) -> bool {
        (self.read_file_num, self.read_pos) < self.read_end()
    }

    /// How far into the read segment records may be read: its end once the
    /// writer has left it, else the write position — and with
    /// `durable_reads` never past the last write a completed sync covered.
    fn read_limit(&self, complete: bool) -> i64 {
        let limit = if complete {
            self.read_file_end
        } else {
            self.write_pos
        };
        if self.opts.durable_reads && self.read_file_num == self.durable_end.0 {
            limit.min(self.durable_end.1)
        } else {
            limit
        }
    }

    /// The reader is behind the writer, readable yet or not.
    fn behind_writer(&self) -> bool {
        (self.read_file_num, self.read_pos) < (self.write_file_num, self.write_pos)
    }

    // ---------------------------------------------------------------- open

    fn recover(&mut self) {
        let path = self.meta_path();
        let mut meta_whole = false;
        match read_small_file(&self.fs, &path) {
            Ok(text) => {
                let (m, res) = meta::parse(&text);
                match res {
                    Ok(()) => meta_whole = true,
                    Err(e) => {
                        error!(queue = %self.name, "DISKQUEUE({}) failed to retrieveMetaData - {}: {e}", self.name, path.display());
                    }
                }
                self.depth = m.depth;
                self.read_file_num = m.read_file_num;
                self.read_pos = m.read_pos;
                self.write_file_num = m.write_file_num;
                self.write_pos = m.write_pos;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                error!(queue = %self.name, "DISKQUEUE({}) failed to retrieveMetaData - {}: {e}", self.name, path.display());
            }
        }
        if self.read_file_num < 0
            || self.read_pos < 0
            || self.write_file_num < 0
            || self.write_pos < 0
        {
            // Corrupt metadata: positions can never be negative. Start from
            // segment 0; the stale-file recovery below counts what is there,
            // so records already on disk are read rather than lost behind a
            // position the reader refuses (found by fuzzing).
            error!(
                queue = %self.name,
                "DISKQUEUE({}) negative position in metadata ({},{} / {},{}), recovering from file 0",
                self.name, self.read_file_num, self.read_pos, self.write_file_num, self.write_pos
            );
            self.read_file_num = 0;
            self.read_pos = 0;
            self.write_file_num = 0;
            self.write_pos = 0;
            self.depth = 0;
            self.mark_changed();
        }
        if self.depth < 0 {
            warn!(queue = %self.name, "DISKQUEUE({}) negative depth {} in metadata, using 0", self.name, self.depth);
            self.depth = 0;
            self.mark_changed();
        }
        let sane = meta_whole
            && self.read_file_num >= 0
            && self.read_pos >= 0
            && (self.read_file_num, self.read_pos) <= (self.write_file_num, self.write_pos);
        if sane {
            self.remove_leftover_consumed();
        }
        self.recover_stale_write_file();
        self.check_tail();
    }

    /// Step 2 of recovery: a crash after a sync persisted the read position
    /// but before it deleted the segments the reader had left (see
    /// `left_segments`) leaves them just below `readFileNum`, where nothing
    /// else would ever delete them. Only trusted metadata gets here: these
    /// segments are consumed by the format's own definition. A clean queue
    /// pays one failed stat.
    fn remove_leftover_consumed(&mut self) {
        let mut lowest = self.read_file_num;
        while lowest > 0 {
            match self.fs.file_len(&self.file_path(lowest - 1)) {
                Ok(_) => lowest -= 1,
                Err(_) => break,
            }
        }
        // Oldest first, as the sync deletes them, so that a power cut
        // undoing only some of these deletions leaves the survivors next to
        // the reader, where the next open finds them.
        for num in lowest..self.read_file_num {
            let path = self.file_path(num);
            match self.fs.remove_file(&path) {
                Ok(()) => {
                    info!(queue = %self.name, "DISKQUEUE({}) removed consumed {} left by a crash", self.name, path.display());
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    warn!(queue = %self.name, "DISKQUEUE({}) failed to Remove({}) - {e}", self.name, path.display());
                    return;
                }
            }
        }
    }

    /// Step 3 of recovery: never append over bytes the metadata does not
    /// know about; let the reader drain them instead.
    fn recover_stale_write_file(&mut self) {
        let path = self.file_path(self.write_file_num);
        let size = match self.fs.file_len(&path) {
            Ok(len) => i64::try_from(len).unwrap_or(i64::MAX),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if self.write_pos > 0 && self.behind_writer() {
                    // The metadata puts the writer inside a segment that is
                    // gone (a crash in the middle of `empty`). Appending at
                    // writePos would recreate it with writePos zero bytes in
                    // front, which the reader, due to pass through it, would
                    // take for a corrupt record, and quarantine the new
                    // records with it (found by the power-cut model test).
                    warn!(
                        queue = %self.name,
                        "DISKQUEUE({}) {} is missing but metadata writePos is {}, skipping to new file",
                        self.name, path.display(), self.write_pos
                    );
                    self.write_file_num += 1;
                    self.write_pos = 0;
                    self.schedule_sync();
                }
                return;
            }
            Err(e) => {
                error!(queue = %self.name, "DISKQUEUE({}) stat {}: {e}", self.name, path.display());
                return;
            }
        };
        if self.write_pos >= size {
            return;
        }
        warn!(
            queue = %self.name,
            "DISKQUEUE({}) {} metadata writePos {} < file size of {}, skipping to new file",
            self.name, path.display(), self.write_pos, size
        );
        let from = self.write_pos.max(0);
        match count_records(
            &self.fs,
            &path,
            from,
            size,
            self.opts.min_msg_size,
            self.opts.max_msg_size,
        ) {
            Ok(n) => self.depth = self.depth.saturating_add(n),
            Err(e) => {
                warn!(queue = %self.name, "DISKQUEUE({}) counting records in {}: {e}", self.name, path.display())
            }
        }
        // The bytes past writePos may exist only in the page cache: the
        // process that appended them was killed before its sync. They are
        // part of the queue from now on and the metadata persisted after
        // recovery counts them, but no later sync would fsync this segment
        // (a sync covers only the segment being written), so a power cut
        // after a completed sync could still lose them. Found by the
        // power-cut model test (`simfs_tests.rs`). An fsync through a
        // read-only descriptor is valid on POSIX systems.
        if let Err(e) = self.fs.open_read(&path).and_then(|f| f.sync_all()) {
            error!(queue = %self.name, "DISKQUEUE({}) fsync of recovered {}: {e}", self.name, path.display());
        }
        self.write_file_num += 1;
        self.write_pos = 0;
        self.schedule_sync();
    }

    // ---------------------------------------------------------------- write

    fn put_batch(&mut self, records: &[&[u8]]) -> Result<(), Error> {
        let (min, max) = (self.opts.min_msg_size, self.opts.max_msg_size);
        for data in records {
            if !matches!(i32::try_from(data.len()), Ok(n) if n >= min && n <= max) {
                return Err(Error::InvalidSize {
                    size: data.len(),
                    min,
                    max,
                });
            }
        }
        if self.opts.durable_reads {
            return self.put_whole_batch(records);
        }
        let mut chunk = Vec::new();
        let mut i = 0;
        while i < records.len() {
            let first = LEN_PREFIX + records[i].len() as i64;
            if self.write_pos > 0
                && self.write_pos.saturating_add(first) > self.opts.max_bytes_per_file
            {
                self.roll_write_file()?;
            }
            // everything that fits in the current segment goes in one write
            chunk.clear();
            let mut pos = self.write_pos;
            let start = i;
            while i < records.len() {
                let total = LEN_PREFIX + records[i].len() as i64;
                if i > start && pos.saturating_add(total) > self.opts.max_bytes_per_file {
                    break;
                }
                chunk.extend_from_slice(&(records[i].len() as i32).to_be_bytes());
                chunk.extend_from_slice(records[i]);
                pos += total;
                i += 1;
            }
            self.write_chunk(&chunk, (i - start) as i64)?;
        }
        Ok(())
    }

    /// With `durable_reads` a batch never spans two segments: a rollover's
    /// sync in the middle of it would make half of it durable, and if the
    /// sync covering the other half failed, the batch could be neither
    /// acknowledged nor (after a crash brought the durable half back) kept
    /// from consumers. So the segment rolls before the batch when the batch
    /// does not fit, and a batch larger than a segment fills one alone (as
    /// a record larger than a segment does).
    fn put_whole_batch(&mut self, records: &[&[u8]]) -> Result<(), Error> {
        let total: i64 = records.iter().map(|r| LEN_PREFIX + r.len() as i64).sum();
        if self.write_pos > 0 && self.write_pos.saturating_add(total) > self.opts.max_bytes_per_file
        {
            self.roll_write_file()?;
        }
        let mut chunk = Vec::with_capacity(usize::try_from(total).unwrap_or(0));
        for r in records {
            chunk.extend_from_slice(&(r.len() as i32).to_be_bytes());
            chunk.extend_from_slice(r);
        }
        if records.is_empty() {
            return Ok(());
        }
        self.write_chunk(&chunk, records.len() as i64)
    }

    /// Writes whole encoded records at `write_pos` and flushes them to the
    /// kernel; positions and depth move only once that succeeded.
    fn write_chunk(&mut self, bytes: &[u8], records: i64) -> Result<(), Error> {
        let total = bytes.len() as i64;

        let path = self.file_path(self.write_file_num);
        let mut writer = match self.writer.take() {
            Some(w) => w,
            None => {
                let mut file = self
                    .fs
                    .open_rw(&path)
                    .map_err(|e| Error::io("open", &path, e))?;
                if self.write_pos > 0 {
                    let pos = u64::try_from(self.write_pos).unwrap_or(0);
                    file.seek(SeekFrom::Start(pos))
                        .map_err(|e| Error::io("seek", &path, e))?;
                } else {
                    // Starting a segment: whatever a file of that name holds is
                    // stale (the metadata knows of nothing written there). Left
                    // in place, its tail would be read back as phantom records
                    // after the new ones (found by fuzzing; go-diskqueue has
                    // the same hazard).
                    file.set_len(0)
                        .map_err(|e| Error::io("truncate", &path, e))?;
                }
                debug!(queue = %self.name, "DISKQUEUE({}): writeOne() opened {}", self.name, path.display());
                self.writer_file_num = self.write_file_num;
                BufWriter::new(file)
            }
        };

        let res = writer.write_all(bytes).and_then(|()| writer.flush());
        if let Err(e) = res {
            // Part of the record may be on disk past write_pos. Reopening
            // seeks back to write_pos, so the next put overwrites it; a reader
            // sharing this segment may have buffered those bytes, so drop it.
            // The unflushed buffer is discarded rather than written on drop.
            let (_file, _unflushed) = writer.into_parts();
            if self.read_file_num == self.write_file_num {
                self.reader = None;
            }
            return Err(Error::io("write", &path, e));
        }
        self.writer = Some(writer);

        self.write_pos += total;
        self.depth += records;
        self.written += records as Seq;
        self.ops_since_sync += records;
        self.mark_changed();
        Ok(())
    }

    /// Starts the next segment. Its sync failing is an error only with
    /// `durable_reads`, where it discarded the records of the batch being
    /// written (and would otherwise be retried at every record).
    fn roll_write_file(&mut self) -> Result<(), Error> {
        if self.read_file_num == self.write_file_num {
            // The reader may already have this segment open; tell it where
            // the segment now ends so it moves on instead of waiting for more.
            self.read_file_end = self.write_pos;
        }
        self.write_file_num += 1;
        self.write_pos = 0;
        // The fsync covers the segment just finished (still open).
        let res = self.sync();
        self.drop_writer();
        match res {
            Err(e) if self.opts.durable_reads => Err(e),
            Err(e) => {
                error!(queue = %self.name, "DISKQUEUE({}) failed to sync - {e}", self.name);
                Ok(())
            }
            Ok(()) => Ok(()),
        }
    }

    /// Closes the write segment without flushing: after an error whatever is
    /// buffered must not reach the file behind our back.
    fn drop_writer(&mut self) {
        if let Some(w) = self.writer.take() {
            let (_file, _unflushed) = w.into_parts();
        }
    }

    // ---------------------------------------------------------------- read

    fn read(&mut self) -> Option<Bytes> {
        // Every pass either returns or moves the reader to a later segment,
        // and it never moves past the writer, so this terminates.
        while self.has_unread() {
            match self.read_one() {
                Ok(ReadStep::Record {
                    data,
                    next_file_num,
                    next_pos,
                }) => {
                    self.move_forward(next_file_num, next_pos);
                    return Some(data);
                }
                Ok(ReadStep::Exhausted) => self.leave_exhausted_file(),
                Err(failure) => self.handle_read_error(failure),
            }
        }
        None
    }

    /// The next record if it is whole in the reader's read-ahead buffer,
    /// topped up from the page cache if need be (a read that never waits
    /// for the device); `None` means "ask `read`", which also handles every
    /// doubtful case (bad length, overrun, segment ends) and the device.
    fn read_buffered(&mut self) -> Option<Bytes> {
        if !self.has_unread() {
            return None;
        }
        let complete = self.read_file_num < self.write_file_num;
        let limit = self.read_limit(complete);
        let reader = self.reader.as_mut()?;
        if !reader.fill_cached(4) {
            return None;
        }
        let buf = reader.buffer();
        let len = i32::from_be_bytes(buf.get(..4)?.try_into().ok()?);
        if len < self.opts.min_msg_size || len > self.opts.max_msg_size {
            return None;
        }
        let end = self.read_pos.checked_add(LEN_PREFIX + i64::from(len))?;
        if end > limit {
            return None;
        }
        let len = len.unsigned_abs() as usize;
        if !reader.fill_cached(4 + len) {
            return None;
        }
        reader.consume(4);
        let data = reader.take(len);
        let (mut next_file_num, mut next_pos) = (self.read_file_num, end);
        if complete && next_pos >= self.read_file_end {
            next_file_num += 1;
            next_pos = 0;
            self.reader = None;
        }
        self.move_forward(next_file_num, next_pos);
        Some(data)
    }

    /// The open read segment's reader, positioned at the read position:
    /// the one kept from the last read, or the segment opened now.
    fn take_reader(&mut self, complete: bool) -> Result<ReadAhead<F::File>, ReadFailure> {
        if let Some(r) = self.reader.take() {
            return Ok(r);
        }
        let path = self.file_path(self.read_file_num);
        let mut file = self.fs.open_read(&path).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => ReadFailure::Missing,
            _ => ReadFailure::Io("open", e),
        })?;
        let pos = u64::try_from(self.read_pos).map_err(|_| {
            ReadFailure::Io(
                "seek",
                io::Error::new(io::ErrorKind::InvalidInput, "negative read position"),
            )
        })?;
        if pos > 0 {
            file.seek(SeekFrom::Start(pos))
                .map_err(|e| ReadFailure::Io("seek", e))?;
        }
        self.read_file_end = if complete {
            let len = file.size().map_err(|e| ReadFailure::Io("stat", e))?;
            i64::try_from(len).unwrap_or(i64::MAX)
        } else {
            self.opts.max_bytes_per_file
        };
        debug!(queue = %self.name, "DISKQUEUE({}): readOne() opened {}", self.name, path.display());
        Ok(ReadAhead::new(file))
    }

    /// Reads the record at the read position without consuming it. The read
    /// segment stays open for the next call unless the reader is done with
    /// it; on failure it is closed.
    fn read_one(&mut self) -> Result<ReadStep, ReadFailure> {
        let complete = self.read_file_num < self.write_file_num;
        let mut reader = self.take_reader(complete)?;

        if complete && self.read_pos >= self.read_file_end {
            return Ok(ReadStep::Exhausted);
        }

        let eof = || io::Error::new(io::ErrorKind::UnexpectedEof, "failed to fill whole buffer");
        match reader.fill(LEN_PREFIX as usize) {
            Ok(true) => {}
            Ok(false) => return Err(ReadFailure::Io("read length", eof())),
            Err(e) => return Err(ReadFailure::Io("read length", e)),
        }
        let buf = reader.buffer();
        let len = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
        if len < self.opts.min_msg_size || len > self.opts.max_msg_size {
            return Err(ReadFailure::BadLength(len));
        }
        // A record can never extend past the data the writer has produced
        // (or past the end of a finished segment); catching that here keeps a
        // garbage length from turning into a large allocation.
        let end = self.read_pos.saturating_add(LEN_PREFIX + i64::from(len));
        let limit = self.read_limit(complete);
        if end > limit {
            return Err(ReadFailure::Overrun { end, limit });
        }
        let len = len.unsigned_abs() as usize;
        match reader.fill(LEN_PREFIX as usize + len) {
            Ok(true) => {}
            Ok(false) => return Err(ReadFailure::Io("read record", eof())),
            Err(e) => return Err(ReadFailure::Io("read record", e)),
        }
        reader.consume(LEN_PREFIX as usize);
        let data = reader.take(len);

        let (mut next_file_num, mut next_pos) = (self.read_file_num, end);
        if complete && next_pos >= self.read_file_end {
            next_file_num += 1;
            next_pos = 0;
        } else {
            self.reader = Some(reader);
        }
        Ok(ReadStep::Record {
            data,
            next_file_num,
            next_pos,
        })
    }

    fn take_while(&mut self, max: usize, out: &mut Vec<Bytes>, take: &dyn Fn(&[u8]) -> bool) {
        let mut n = 0;
        while n < max && self.has_unread() {
            match self.read_one() {
                Ok(ReadStep::Record {
                    data,
                    next_file_num,
                    next_pos,
                }) => {
                    if !take(&data) {
                        // left unread: the reader has read past it, so it
                        // is closed, and the next read reopens the segment
                        // at the read position, which still points at it
                        self.reader = None;
                        return;
                    }
                    self.move_forward(next_file_num, next_pos);
                    out.push(data);
                    n += 1;
                }
                Ok(ReadStep::Exhausted) => self.leave_exhausted_file(),
                Err(failure) => self.handle_read_error(failure),
            }
        }
    }

    fn skip_while(&mut self, max: usize, peek: usize, skip: &dyn Fn(&[u8]) -> bool) -> usize {
        let mut n = 0;
        while n < max && self.has_unread() {
            match self.skip_one(peek, skip) {
                Ok(SkipStep::Skipped {
                    next_file_num,
                    next_pos,
                }) => {
                    self.move_forward(next_file_num, next_pos);
                    let read = self.reads;
                    self.ack(&[read]);
                    n += 1;
                }
                Ok(SkipStep::Kept) => break,
                Ok(SkipStep::Exhausted) => self.leave_exhausted_file(),
                Err(failure) => self.handle_read_error(failure),
            }
        }
        n
    }

    /// [`Inner::read_one`]'s checks on the record at the read position,
    /// reading only its length and the first `peek` bytes of its data; if
    /// `skip` says so of them, its end is where the reader goes on (the
    /// rest of the record is seeked over, not read).
    fn skip_one(
        &mut self,
        peek: usize,
        skip: &dyn Fn(&[u8]) -> bool,
    ) -> Result<SkipStep, ReadFailure> {
        let complete = self.read_file_num < self.write_file_num;
        let mut reader = self.take_reader(complete)?;
        if complete && self.read_pos >= self.read_file_end {
            return Ok(SkipStep::Exhausted);
        }
        let eof = || io::Error::new(io::ErrorKind::UnexpectedEof, "failed to fill whole buffer");
        match reader.fill(LEN_PREFIX as usize) {
            Ok(true) => {}
            Ok(false) => return Err(ReadFailure::Io("read length", eof())),
            Err(e) => return Err(ReadFailure::Io("read length", e)),
        }
        let buf = reader.buffer();
        let len = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
        if len < self.opts.min_msg_size || len > self.opts.max_msg_size {
            return Err(ReadFailure::BadLength(len));
        }
        let end = self.read_pos.saturating_add(LEN_PREFIX + i64::from(len));
        let limit = self.read_limit(complete);
        if end > limit {
            return Err(ReadFailure::Overrun { end, limit });
        }
        let len = len.unsigned_abs() as usize;
        if len < peek {
            self.reader = Some(reader);
            return Ok(SkipStep::Kept);
        }
        match reader.fill(LEN_PREFIX as usize + peek) {
            Ok(true) => {}
            Ok(false) => return Err(ReadFailure::Io("read record", eof())),
            Err(e) => return Err(ReadFailure::Io("read record", e)),
        }
        let head = &reader.buffer()[LEN_PREFIX as usize..LEN_PREFIX as usize + peek];
        if !skip(head) {
            self.reader = Some(reader);
            return Ok(SkipStep::Kept);
        }
        reader
            .skip(LEN_PREFIX as usize + len)
            .map_err(|e| ReadFailure::Io("seek", e))?;
        let (mut next_file_num, mut next_pos) = (self.read_file_num, end);
        if complete && next_pos >= self.read_file_end {
            next_file_num += 1;
            next_pos = 0;
        } else {
            self.reader = Some(reader);
        }
        Ok(SkipStep::Skipped {
            next_file_num,
            next_pos,
        })
    }

    fn move_forward(&mut self, next_file_num: i64, next_pos: i64) {
        let old_file_num = self.read_file_num;
        self.reads += 1;
        if self.opts.acked_reads {
            // the persisted position waits for the acknowledgement
            if self.unacked.is_empty() {
                self.unacked_base = self.reads;
            }
            self.unacked.push_back(Unacked {
                start: (self.read_file_num, self.read_pos),
                acked: false,
            });
        } else {
            self.ops_since_sync += 1;
            self.mark_changed();
        }
        self.read_file_num = next_file_num;
        self.read_pos = next_pos;
        self.depth = (self.depth - 1).max(0);
        if old_file_num != next_file_num {
            self.remove_consumed_file(old_file_num);
        }
        self.check_tail();
    }

    fn leave_exhausted_file(&mut self) {
        self.reader = None;
        let num = self.read_file_num;
        debug!(queue = %self.name, "DISKQUEUE({}) {} fully read, moving on", self.name, self.file_path(num).display());
        self.read_file_num += 1;
        self.read_pos = 0;
        self.remove_consumed_file(num);
        self.check_tail();
    }

    /// The segment is deleted by the sync this schedules, after the
    /// metadata saying it was consumed; see `left_segments`.
    fn remove_consumed_file(&mut self, num: i64) {
        self.held_segments.push((num, Leftover::Consumed));
        self.release_held();
    }

    /// Segments below the acknowledged position go to `left_segments`, for
    /// the next sync (which this schedules) to dispose of.
    fn release_held(&mut self) {
        let floor_file = self.floor().0;
        let before = self.held_segments.len();
        let left = &mut self.left_segments;
        self.held_segments.retain(|&(num, what)| {
            let release = num < floor_file;
            if release {
                left.push((num, what));
            }
            !release
        });
        if self.held_segments.len() < before {
            self.schedule_sync();
        }
    }

    fn ack(&mut self, reads: &[ReadSeq]) {
        if !self.opts.acked_reads || self.closed {
            return;
        }
        for &r in reads {
            if let Some(u) = r
                .checked_sub(self.unacked_base)
                .and_then(|i| usize::try_from(i).ok())
                .and_then(|i| self.unacked.get_mut(i))
            {
                u.acked = true;
            }
        }
        let mut done = 0;
        while self.unacked.front().is_some_and(|u| u.acked) {
            self.unacked.pop_front();
            done += 1;
        }
        self.unacked_base += done;
        if done > 0 {
            self.ops_since_sync += done as i64;
            self.mark_changed();
            self.release_held();
        }
    }

    fn ack_all(&mut self) {
        if self.unacked.is_empty() || self.closed {
            return;
        }
        self.ops_since_sync += self.unacked.len() as i64;
        self.unacked.clear();
        self.unacked_base = self.reads + 1;
        self.mark_changed();
        self.release_held();
    }

    fn handle_read_error(&mut self, failure: ReadFailure) {
        let bad = self.file_path(self.read_file_num);
        error!(
            queue = %self.name,
            "DISKQUEUE({}) reading at {} of {} - {failure}",
            self.name, self.read_pos, bad.display()
        );
        self.reader = None;

        if self.read_file_num == self.write_file_num {
            // The segment being written is unreadable, so appending to it
            // would only add records nobody can reach.
            self.drop_writer();
            self.write_file_num += 1;
            self.write_pos = 0;
        }

        if matches!(failure, ReadFailure::Missing) {
            self.read_file_num =
                self.next_existing_file(self.read_file_num + 1, self.write_file_num);
        } else {
            warn!(
                queue = %self.name,
                "DISKQUEUE({}) jump to next file and saving bad file as {}.bad",
                self.name, bad.display()
            );
            // renamed by a sync once the acknowledged position has left it;
            // see `left_segments`
            self.held_segments.push((self.read_file_num, Leftover::Bad));
            self.read_file_num += 1;
        }
        self.read_pos = 0;
        self.release_held();
        self.schedule_sync();
        self.check_tail();
    }

    /// Smallest segment number in `from..=to` that exists on disk, or `to`.
    /// Walking one number at a time is what go-diskqueue does; for a big gap
    /// (damaged metadata) a directory scan gets there without a syscall per
    /// number.
    fn next_existing_file(&self, from: i64, to: i64) -> i64 {
        if to.saturating_sub(from) < MAX_PROBED_FILES {
            return from;
        }
        match self.data_files_in(from, to) {
            Ok(nums) => nums.into_iter().min().unwrap_or(to),
            Err(_) => from,
        }
    }

    /// go-diskqueue's tail check: once the reader meets the writer the depth
    /// must be 0, and a reader past the writer means the positions are wrong.
    fn check_tail(&mut self) {
        if self.behind_writer() {
            return;
        }
        if self.depth != 0 {
            if self.depth < 0 {
                error!(queue = %self.name, "DISKQUEUE({}) negative depth at tail ({}), metadata corruption, resetting 0...", self.name, self.depth);
            } else {
                error!(queue = %self.name, "DISKQUEUE({}) positive depth at tail ({}), data loss, resetting 0...", self.name, self.depth);
            }
            self.depth = 0;
            self.schedule_sync();
        }
        if (self.read_file_num, self.read_pos) != (self.write_file_num, self.write_pos) {
            error!(
                queue = %self.name,
                "DISKQUEUE({}) reader ({},{}) is past writer ({},{}), corruption, skipping to next writeFileNum and resetting 0...",
                self.name, self.read_file_num, self.read_pos, self.write_file_num, self.write_pos
            );
            if let Err(e) = self.skip_to_next_rw_file() {
                error!(queue = %self.name, "DISKQUEUE({}) {e}", self.name);
            }
            self.schedule_sync();
        }
    }

    // ---------------------------------------------------------------- empty/sync

    /// Closes both segments, deletes segments reader..=writer and restarts
    /// both positions at the start of the next segment number.
    fn skip_to_next_rw_file(&mut self) -> Result<(), Error> {
        self.reader = None;
        self.drop_writer();

        let mut first_err = None;
        let nums = if self.write_file_num.saturating_sub(self.read_file_num) < MAX_PROBED_FILES {
            Ok((self.read_file_num..=self.write_file_num).collect::<Vec<_>>())
        } else {
            self.data_files_in(self.read_file_num, self.write_file_num)
        };
        // Everything is being discarded, so the segments left behind need
        // not wait for a sync (`delete` does not sync at all), and nothing
        // read is waiting for an acknowledgement any more.
        self.unacked.clear();
        self.unacked_base = self.reads + 1;
        let mut leftovers = std::mem::take(&mut self.left_segments);
        leftovers.append(&mut self.held_segments);
        for (num, what) in leftovers {
            let path = self.file_path(num);
            if let Err(e) = dispose(&self.fs, &path, what) {
                error!(queue = %self.name, "DISKQUEUE({}) failed to set aside {} ({what:?}) - {e}", self.name, path.display());
                first_err.get_or_insert(Error::io("remove", path, e));
            }
        }
        match nums {
            Ok(nums) => {
                for num in nums {
                    let path = self.file_path(num);
                    match self.fs.remove_file(&path) {
                        Ok(()) => {}
                        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                        Err(e) => {
                            error!(queue = %self.name, "DISKQUEUE({}) failed to remove data file - {}: {e}", self.name, path.display());
                            first_err.get_or_insert(Error::io("remove", path, e));
                        }
                    }
                }
            }
            Err(e) => first_err = Some(e),
        }

        self.write_file_num += 1;
        self.write_pos = 0;
        self.read_file_num = self.write_file_num;
        self.read_pos = 0;
        self.depth = 0;
        self.mark_changed();
        first_err.map_or(Ok(()), Err)
    }

    /// Segment numbers in `lo..=hi` that exist, from a directory listing.
    fn data_files_in(&self, lo: i64, hi: i64) -> Result<Vec<i64>, Error> {
        let prefix = format!("{}.diskqueue.", self.name);
        let entries = self
            .fs
            .list_dir(&self.data_path)
            .map_err(|e| Error::io("read dir", &self.data_path, e))?;
        let mut nums = Vec::new();
        for file_name in entries {
            let Some(rest) = file_name.to_str().and_then(|n| n.strip_prefix(&prefix)) else {
                continue;
            };
            let Some(digits) = rest.strip_suffix(".dat") else {
                continue;
            };
            if digits.len() < 6 || !digits.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            if let Ok(num) = digits.parse::<i64>() {
                if (lo..=hi).contains(&num)
                    && self.file_path(num) == self.data_path.join(&file_name)
                {
                    nums.push(num);
                }
            }
        }
        Ok(nums)
    }

    /// Removes the metadata file; snapshots taken before this never land.
    fn remove_meta_file(&mut self) -> Result<(), Error> {
        self.meta_gen += 1;
        let mut st = self
            .meta_state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        st.persisted_gen = self.meta_gen;
        st.persisted = None;
        let path = self.meta_path();
        match self.fs.remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => {
                error!(queue = %self.name, "DISKQUEUE({}) failed to remove metadata file - {e}", self.name);
                Err(Error::io("remove", path, e))
            }
        }
    }

    fn sync_due(&self) -> bool {
        let count_due = self.ops_since_sync > 0 && self.ops_since_sync >= self.opts.sync_every;
        !self.closed && (self.sync_pending || count_due)
    }

    fn sync_if_due(&mut self) {
        if !self.sync_due() {
            return;
        }
        if let Err(e) = self.sync() {
            // Stay dirty so the owner's timer (or the next operation) retries.
            error!(queue = %self.name, "DISKQUEUE({}) failed to sync - {e}", self.name);
        }
    }

    /// Inline sync: flush, fsync and metadata, all under the queue's lock
    /// (rollover, close, recovery, and queues without `defer_sync`).
    fn sync(&mut self) -> Result<(), Error> {
        let job = match self.prepare_sync() {
            Ok(job) => job,
            Err(e) => {
                self.sync_failed();
                return Err(e);
            }
        };
        let (written, end) = (job.written, (job.meta.write_file_num, job.meta.write_pos));
        let (res, left) = job.run();
        self.left_segments.extend(left);
        match &res {
            Ok(()) => self.synced(written, end),
            Err(_) => {
                self.dirty = true;
                self.sync_pending = true;
                self.sync_failed();
            }
        }
        res
    }

    /// A sync that covered the records up to `written`, ending at `end`,
    /// completed.
    fn synced(&mut self, written: Seq, end: (i64, i64)) {
        if written > self.durable {
            self.durable = written;
        }
        if end > self.durable_end {
            self.durable_end = end;
        }
    }

    /// A sync failed. With `durable_reads`, nothing written since the last
    /// good sync may be delivered or acknowledged: Linux may have dropped
    /// those pages already, and a later fsync that succeeds would not mean
    /// they are on disk. So they are discarded — the segments past the last
    /// durable write position removed, that one cut back to it — and their
    /// sequence numbers reported [`Durability::Lost`]. Without it the
    /// records stay and the next sync is tried again, as go-diskqueue does.
    fn sync_failed(&mut self) {
        if !self.opts.durable_reads || self.written == self.durable {
            return;
        }
        let lost = (self.durable + 1, self.written);
        // The reader may have moved from the end of the last durable
        // segment to the start of the next (the same point): the writer
        // must not go back behind it.
        let (file, pos) = self.durable_end.max((self.read_file_num, self.read_pos));
        error!(
            queue = %self.name,
            "DISKQUEUE({}) sync failed: discarding records {}..={} written after ({file},{pos})",
            self.name, lost.0, lost.1
        );
        self.drop_writer();
        for num in file + 1..=self.write_file_num {
            let path = self.file_path(num);
            if let Err(e) = self.fs.remove_file(&path) {
                if e.kind() != io::ErrorKind::NotFound {
                    error!(queue = %self.name, "DISKQUEUE({}) failed to remove {} - {e}", self.name, path.display());
                }
            }
        }
        let path = self.file_path(file);
        let cut = u64::try_from(pos).unwrap_or(0);
        if let Err(e) = self.fs.open_rw(&path).and_then(|f| f.set_len(cut)) {
            // the next put overwrites from `pos` anyway
            error!(queue = %self.name, "DISKQUEUE({}) failed to cut {} back to {pos} - {e}", self.name, path.display());
        }
        if self.read_file_num == file {
            // its read-ahead may hold the discarded bytes
            self.reader = None;
        }
        self.write_file_num = file;
        self.write_pos = pos;
        self.durable_end = (file, pos);
        self.depth = (self.depth - (lost.1 - lost.0 + 1) as i64).max(0);
        self.lost.push(lost);
        self.durable = self.written;
        self.schedule_sync();
    }

    fn durability(&self, range: &std::ops::RangeInclusive<Seq>) -> Durability {
        if range.is_empty() {
            return Durability::Durable;
        }
        let (first, last) = (*range.start(), *range.end());
        if self.lost.iter().any(|&(a, b)| first <= b && a <= last) {
            Durability::Lost
        } else if last <= self.durable {
            Durability::Durable
        } else {
            Durability::Pending
        }
    }

    /// Flushes the writer and snapshots what the sync will persist; resets
    /// the sync counters as if it had already succeeded (a failed run puts
    /// the flags back).
    fn prepare_sync(&mut self) -> Result<SyncJob<F>, Error> {
        let mut segment = None;
        let path = self.file_path(self.writer_file_num);
        if let Some(w) = self.writer.as_mut() {
            match w.flush().and_then(|()| w.get_ref().try_clone()) {
                Ok(f) => segment = Some((f, path)),
                Err(e) => {
                    self.drop_writer();
                    return Err(Error::io("fsync", path, e));
                }
            }
        } else if self.write_pos > 0 {
            // The writer was dropped (after an error) with records written
            // through it that no fsync has covered yet; an fsync through a
            // read-only descriptor covers them (found by the durable-reads
            // power-cut test: a sync claimed records it never fsynced).
            let path = self.file_path(self.write_file_num);
            match self.fs.open_read(&path) {
                Ok(f) => segment = Some((f, path)),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io("fsync", path, e)),
            }
        }
        self.meta_gen += 1;
        self.dirty = false;
        self.sync_pending = false;
        self.ops_since_sync = 0;
        // Every one is below the read position of the snapshot taken here.
        // `drain` keeps the capacity, so that leaving a segment (a push, on
        // the read path) does not allocate.
        let left = self
            .left_segments
            .drain(..)
            .map(|(num, what)| (num, what, file_path(&self.data_path, &self.name, num)))
            .collect();
        Ok(SyncJob {
            fs: self.fs.clone(),
            segment,
            left,
            meta: self.meta(),
            written: self.written,
            strict: self.opts.durable_reads,
            appends_need_no_meta: false,
            gen: self.meta_gen,
            meta_path: self.meta_path(),
            data_path: self.data_path.clone(),
            meta_state: self.meta_state.clone(),
        })
    }
}

/// `now` differs from `before` (the metadata on disk) only by records
/// appended to the segment `before` was writing, which already held data.
fn only_appended(before: &Meta, now: &Meta) -> bool {
    before.read_file_num == now.read_file_num
        && before.read_pos == now.read_pos
        && before.write_file_num == now.write_file_num
        && before.write_pos > 0
        && now.write_pos >= before.write_pos
}

/// Path of segment `num` of queue `name`.
fn file_path(data_path: &Path, name: &str, num: i64) -> PathBuf {
    data_path.join(format!("{name}.diskqueue.{num:06}.dat"))
}

/// Replaces the metadata file: temp file, fsync, rename, fsync the directory.
fn write_meta_file<F: Fs>(
    fs: &F,
    path: &Path,
    data_path: &Path,
    meta: &Meta,
    strict: bool,
) -> Result<(), Error> {
    let mut tmp = OsString::from(path.as_os_str());
    tmp.push(format!(".{}.tmp", random_suffix()));
    let tmp = PathBuf::from(tmp);

    let written = fs.create(&tmp).and_then(|mut f| {
        f.write_all(meta.encode().as_bytes())?;
        // go-diskqueue ignores a failed fsync here and renames anyway; the
        // rename can then reach the disk before the contents, and a power
        // cut leave an empty metadata file under the real name: recovery
        // would start the writer over segments holding acknowledged records
        // (found by the durable-reads power-cut test). The old file stays.
        f.sync_all()
    });
    if let Err(e) = written {
        let _ = fs.remove_file(&tmp);
        return Err(Error::io("write", tmp, e));
    }
    if let Err(e) = fs.rename(&tmp, path) {
        let _ = fs.remove_file(&tmp);
        return Err(Error::io("rename", path, e));
    }
    // Makes the rename (and segment creations and removals) durable. Best
    // effort, except where writes are acknowledged as durable (`strict`):
    // there a new segment whose name is not on disk is not on disk either.
    // A filesystem that cannot fsync a directory at all says so with
    // EINVAL, and is trusted to journal its names.
    match fs.sync_dir(data_path) {
        Err(e)
            if strict
                && e.kind() != io::ErrorKind::InvalidInput
                && e.kind() != io::ErrorKind::Unsupported =>
        {
            Err(Error::io("fsync directory", data_path, e))
        }
        Err(e) => {
            debug!("fsync of directory {}: {e}", data_path.display());
            Ok(())
        }
        Ok(()) => Ok(()),
    }
}

/// Reads at most a few KiB: a metadata file is ~60 bytes, and a huge file in
/// its place is damage, not something to load into memory.
fn read_small_file<F: Fs>(fs: &F, path: &Path) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    fs.open_read(path)?.take(4096).read_to_end(&mut buf)?;
    Ok(buf)
}

/// Counts whole, well-formed records in `path` between `from` and `size`.
/// Stops at the first impossible length or short record; the reader will
/// quarantine the segment when it gets there.
fn count_records<F: Fs>(
    fs: &F,
    path: &Path,
    from: i64,
    size: i64,
    min: i32,
    max: i32,
) -> io::Result<i64> {
    let mut file = fs.open_read(path)?;
    file.seek(SeekFrom::Start(u64::try_from(from).unwrap_or(0)))?;
    let mut reader = BufReader::new(file);
    let (mut pos, mut count) = (from, 0);
    while pos.saturating_add(LEN_PREFIX) <= size {
        let mut prefix = [0u8; 4];
        reader.read_exact(&mut prefix)?;
        let len = i32::from_be_bytes(prefix);
        if len < min || len > max {
            break;
        }
        let end = pos + LEN_PREFIX + i64::from(len);
        if end > size {
            break;
        }
        reader.seek_relative(i64::from(len))?;
        pos = end;
        count += 1;
    }
    Ok(count)
}

/// A non-negative random number for temp file names, like Go's `rand.Int()`.
fn random_suffix() -> u64 {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    h.finish() >> 1
}

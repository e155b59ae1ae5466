//! The replicated log of one Raft group on disk: append-only segment files
//! with an in-memory index, group-committed fsyncs, truncation and purging
//! by segment, recovery of a torn tail. Never: votes, the state machine or
//! openraft's traits (`store.rs` puts those on top), nor what a payload
//! means.
//!
//! # Layout
//! One directory per group. Segments are named by the index of their first
//! entry, `{first:020}.seg`, and hold consecutive entries as records
//! (`record.rs`: length, CRC32, index, term, leader node, kind, payload).
//! A segment is closed once it reaches `segment_bytes`; the next append
//! opens a new one at the next index. Beside them, `purged` (the last
//! purged log id) is written by [`meta`], as the store's `vote`,
//! `committed` and the state machine's `snapshot` are.
//!
//! # The index
//! In memory: per segment, the offset of each of its records (8 bytes an
//! entry), built on open by scanning every segment. The scan reads each
//! record once and checks its CRC, which recovery must do for the tail
//! anyway; an index file would need crash consistency of its own and would
//! still have to be checked against the segments. The log is trimmed below
//! the slowest channel's finished position, so what is scanned is what
//! nsqd still needs.
//!
//! # Durability
//! An append writes its records to the active segment (one `write` for the
//! batch, to the page cache) and hands its completion to the group commit
//! (`sync.rs`), which runs it after an fsync that began after the write.
//! A new segment also gets its directory fsynced before any append in it
//! completes. Truncation (a Raft conflict) cuts the segment holding the
//! first removed index, removes the segments after it, and fsyncs the cut
//! file and the directory before it returns, so a crash never brings back
//! entries after newer ones were acknowledged. Purging writes `purged`
//! durably first, then removes the segments wholly below it; a segment
//! left behind by a crash is removed by the next open.
//!
//! # Recovery
//! Each segment is scanned from its start. At the first record that is
//! incomplete, fails its CRC or names the wrong index (a torn write: the
//! process or machine died during an append, which therefore never
//! completed), the segment is cut back to the last whole record and every
//! later segment is removed: nothing after a torn record can have been
//! acknowledged. A segment that overlaps the previous one is removed with
//! all after it. Gaps between segments are kept: openraft never appends
//! past the end of its log, but its storage suite does.

pub mod lazy;
pub mod meta;
pub mod read;
pub mod record;
pub mod sync;

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use openraft::LogId;

use crate::{Entry, NodeId};
use record::{RecordError, HEADER, MAX_BODY};
use sync::{Completion, GroupCommit, Syncer};

/// The default size at which a segment is closed.
pub const DEFAULT_SEGMENT_BYTES: u64 = 64 << 20;

const PURGED: &str = "purged";
const SEGMENT_EXT: &str = "seg";

/// What can go wrong with the log.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("raft log I/O in {dir}: {err}")]
    Io { dir: PathBuf, err: io::Error },
    #[error("raft log record at index {index}: {err}")]
    Record { index: u64, err: RecordError },
    #[error("raft log record at index {0} fails its checksum")]
    Checksum(u64),
    #[error("raft log index {0} is not in the log")]
    Missing(u64),
    #[error("append at index {found} to a raft log whose next index is {expected}")]
    NotNext { expected: u64, found: u64 },
    #[error("{0}")]
    Failed(String),
}

/// How a log is opened.
#[derive(Clone)]
pub struct LogOptions {
    /// A segment is closed at this size (a batch is never split).
    pub segment_bytes: u64,
    /// The fsync seam (tests count, hold or fail syncs through it).
    pub syncer: Arc<dyn Syncer>,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            syncer: Arc::new(sync::Fsync),
        }
    }
}

struct Segment {
    first: u64,
    path: PathBuf,
    file: Arc<File>,
    /// Offset of the record of index `first + k`.
    offsets: Vec<u64>,
    /// Bytes of whole records: where the next one goes.
    len: u64,
}

impl Segment {
    fn next(&self) -> u64 {
        self.first + self.offsets.len() as u64
    }
}

/// One group's log on disk.
pub struct SegmentLog {
    dir: PathBuf,
    opts: LogOptions,
    /// By first index; the last one is the active segment.
    segments: BTreeMap<u64, Segment>,
    purged: Option<LogId<NodeId>>,
    last: Option<LogId<NodeId>>,
    next: u64,
    commit: GroupCommit,
}

impl SegmentLog {
    /// Opens (creating if needed) the log in `dir`, recovering a torn tail.
    pub fn open(dir: &Path, opts: LogOptions) -> Result<SegmentLog, LogError> {
        let io = |err| LogError::Io {
            dir: dir.to_path_buf(),
            err,
        };
        fs::create_dir_all(dir).map_err(io)?;
        let purged: Option<LogId<NodeId>> = meta::read(dir, PURGED).map_err(io)?;
        let mut names = Vec::new();
        for e in fs::read_dir(dir).map_err(io)? {
            let path = e.map_err(io)?.path();
            if path.extension().and_then(|x| x.to_str()) != Some(SEGMENT_EXT) {
                continue;
            }
            if let Some(first) = path
                .file_stem()
                .and_then(|s| s.to_str())
                .and_then(|s| s.parse::<u64>().ok())
            {
                names.push((first, path));
            }
        }
        names.sort();
        let floor = purged.map_or(0, |p| p.index + 1);
        let mut segments: BTreeMap<u64, Segment> = BTreeMap::new();
        let mut cut = false;
        let mut dir_dirty = false;
        for (first, path) in names {
            let overlaps = segments
                .values()
                .next_back()
                .is_some_and(|s| s.next() > first);
            if cut || overlaps {
                if !cut {
                    tracing::warn!(segment = %path.display(), "raft log segment overlaps the previous one; removed with all after it");
                }
                cut = true;
                fs::remove_file(&path).map_err(io)?;
                dir_dirty = true;
                continue;
            }
            let (seg, torn) = scan(first, &path).map_err(io)?;
            if torn {
                tracing::warn!(segment = %path.display(), records = seg.offsets.len(), "raft log segment has a torn tail; cut back to its last whole record");
                seg.file.set_len(seg.len).map_err(io)?;
                seg.file.sync_data().map_err(io)?;
                cut = true;
            }
            if seg.offsets.is_empty() || seg.next() <= floor {
                // Empty, or wholly purged (a purge interrupted by a crash).
                fs::remove_file(&path).map_err(io)?;
                dir_dirty = true;
                continue;
            }
            segments.insert(first, seg);
        }
        if dir_dirty {
            File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
        }
        let next = segments.values().next_back().map_or(floor, Segment::next);
        let commit = GroupCommit::start(dir.to_path_buf(), opts.syncer.clone()).map_err(io)?;
        let mut log = SegmentLog {
            dir: dir.to_path_buf(),
            opts,
            segments,
            purged,
            last: purged,
            next,
            commit,
        };
        log.last = log.last_present()?;
        Ok(log)
    }

    fn io(&self, err: io::Error) -> LogError {
        LogError::Io {
            dir: self.dir.clone(),
            err,
        }
    }

    /// The last purged log id.
    pub fn purged(&self) -> Option<LogId<NodeId>> {
        self.purged
    }

    /// The id of the last entry, or the last purged one when none is left.
    pub fn last(&self) -> Option<LogId<NodeId>> {
        self.last
    }

    /// The index the next append must start at.
    pub fn next_index(&self) -> u64 {
        self.next
    }

    /// The directory of the log.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// How many segment files the log has.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Writes `entries` (consecutive, starting at the next index) and hands
    /// `done` to the group commit: it runs once they are fsynced, or with
    /// the error that kept them from it. An `Err` return means nothing was
    /// appended and `done` was dropped without being called.
    pub fn append(&mut self, entries: &[Entry], done: Completion) -> Result<(), LogError> {
        if let Some(e) = self.commit.failed() {
            return Err(LogError::Failed(e));
        }
        let Some(first) = entries.first() else {
            self.commit.submit(None, false, done);
            return Ok(());
        };
        if first.log_id.index < self.next && self.segments.is_empty() {
            // Everything was purged: openraft never appends at or below
            // its purged point, its storage suite does (after purging up
            // to a state machine that is ahead of the log). Entries at or
            // below `purged` are written and never read.
            self.next = first.log_id.index;
        }
        if first.log_id.index < self.next {
            return Err(LogError::NotNext {
                expected: self.next,
                found: first.log_id.index,
            });
        }
        // Past the end (openraft never does this, its storage suite does):
        // the entries start a segment of their own.
        let gap = first.log_id.index > self.next;
        let start = first.log_id.index;
        let mut buf = BytesMut::new();
        let mut lens = Vec::with_capacity(entries.len());
        for (k, e) in entries.iter().enumerate() {
            let want = start + k as u64;
            if e.log_id.index != want {
                return Err(LogError::NotNext {
                    expected: want,
                    found: e.log_id.index,
                });
            }
            let before = buf.len();
            record::encode(e, &mut buf).map_err(|err| LogError::Record {
                index: e.log_id.index,
                err,
            })?;
            lens.push((buf.len() - before) as u64);
        }
        let mut dir_dirty = false;
        let need_new = match self.segments.values().next_back() {
            None => true,
            Some(s) => gap || s.len >= self.opts.segment_bytes,
        };
        if need_new {
            self.create_segment(first.log_id.index)?;
            dir_dirty = true;
        }
        let dir = self.dir.clone();
        let Some(seg) = self.segments.values_mut().next_back() else {
            return Err(LogError::Missing(first.log_id.index));
        };
        if let Err(err) = seg.file.write_all_at(&buf, seg.len) {
            // Nothing of a failed write may stay: the next append goes
            // where this one started.
            let _ = seg.file.set_len(seg.len);
            return Err(LogError::Io { dir, err });
        }
        let mut at = seg.len;
        for l in lens {
            seg.offsets.push(at);
            at += l;
        }
        seg.len = at;
        let file = seg.file.clone();
        self.next = start + entries.len() as u64;
        self.last = entries.last().map(|e| e.log_id).max(self.purged);
        self.commit.submit(Some(&file), dir_dirty, done);
        Ok(())
    }

    fn create_segment(&mut self, first: u64) -> Result<(), LogError> {
        let path = self.dir.join(format!("{first:020}.{SEGMENT_EXT}"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| self.io(e))?;
        self.segments.insert(
            first,
            Segment {
                first,
                path,
                file: Arc::new(file),
                offsets: Vec::new(),
                len: 0,
            },
        );
        Ok(())
    }

    /// The entries with indexes in `start..end` that the log holds, in
    /// order (fewer when the range runs past the end).
    pub fn entries(&self, start: u64, end: u64) -> Result<Vec<Entry>, LogError> {
        let start = start.max(self.purged.map_or(0, |p| p.index + 1));
        let end = end.min(self.next);
        let mut out = Vec::with_capacity(end.saturating_sub(start) as usize);
        if start >= end {
            return Ok(out);
        }
        // The segment holding `start` (if any), then every later one that
        // begins before `end`.
        let from = self
            .segments
            .range(..=start)
            .next_back()
            .map_or(start, |(k, _)| *k);
        for seg in self.segments.range(from..end).map(|(_, s)| s) {
            let i = start.max(seg.first);
            let stop = end.min(seg.next());
            if stop <= i {
                continue;
            }
            let at = seg.offsets[(i - seg.first) as usize];
            let to = if stop == seg.next() {
                seg.len
            } else {
                seg.offsets[(stop - seg.first) as usize]
            };
            let mut buf = vec![0u8; (to - at) as usize];
            seg.file
                .read_exact_at(&mut buf, at)
                .map_err(|e| self.io(e))?;
            out.extend(read::decode_run(&Bytes::from(buf), i, stop)?);
        }
        Ok(out)
    }

    /// The id of the last entry above `purged`, else `purged`.
    fn last_present(&self) -> Result<Option<LogId<NodeId>>, LogError> {
        let floor = self.purged.map_or(0, |p| p.index + 1);
        match self.segments.values().next_back() {
            Some(s) if s.next() > floor && s.next() > s.first => {
                Ok(Some(self.entry(s.next() - 1)?.log_id))
            }
            _ => Ok(self.purged),
        }
    }

    /// The entry at `index`.
    pub fn entry(&self, index: u64) -> Result<Entry, LogError> {
        self.entries(index, index + 1)?
            .pop()
            .ok_or(LogError::Missing(index))
    }

    /// Removes the entries from `index` on, durably before it returns.
    pub fn truncate(&mut self, index: u64) -> Result<(), LogError> {
        if index >= self.next {
            return Ok(());
        }
        let later: Vec<u64> = self.segments.range(index..).map(|(k, _)| *k).collect();
        let mut dir_dirty = false;
        for k in later {
            if let Some(s) = self.segments.remove(&k) {
                fs::remove_file(&s.path).map_err(|e| self.io(e))?;
                dir_dirty = true;
            }
        }
        if let Some((_, seg)) = self.segments.range_mut(..index).next_back() {
            if seg.next() > index {
                let keep = (index - seg.first) as usize;
                let len = seg.offsets[keep];
                seg.offsets.truncate(keep);
                seg.len = len;
                seg.file.set_len(len).map_err(|err| LogError::Io {
                    dir: self.dir.clone(),
                    err,
                })?;
                self.opts
                    .syncer
                    .sync_file(&seg.file)
                    .map_err(|err| LogError::Io {
                        dir: self.dir.clone(),
                        err,
                    })?;
            }
        }
        if dir_dirty {
            self.opts
                .syncer
                .sync_dir(&self.dir)
                .map_err(|e| self.io(e))?;
        }
        // A segment cut back to nothing goes too; the end is then the last
        // entry kept (or `purged`).
        if let Some((&k, s)) = self.segments.iter().next_back() {
            if s.offsets.is_empty() {
                if let Some(s) = self.segments.remove(&k) {
                    fs::remove_file(&s.path).map_err(|e| self.io(e))?;
                    self.opts
                        .syncer
                        .sync_dir(&self.dir)
                        .map_err(|e| self.io(e))?;
                }
            }
        }
        let floor = self.purged.map_or(0, |p| p.index + 1);
        self.next = self
            .segments
            .values()
            .next_back()
            .map_or(floor, Segment::next)
            .max(floor);
        self.last = self.last_present()?;
        Ok(())
    }

    /// Forgets the entries up to and including `upto`: `purged` is written
    /// durably, then the segments wholly at or below it are removed.
    pub fn purge(&mut self, upto: LogId<NodeId>) -> Result<(), LogError> {
        if !self.purges(upto) {
            return Ok(());
        }
        write_purged(&self.dir, upto)?;
        for path in self.forget(upto) {
            fs::remove_file(&path).map_err(|e| self.io(e))?;
        }
        Ok(())
    }

    /// Whether a purge up to `upto` forgets anything not purged yet.
    pub fn purges(&self, upto: LogId<NodeId>) -> bool {
        self.purged.is_none_or(|p| p.index < upto.index)
    }

    /// The second half of a purge, once [`write_purged`] wrote `upto`:
    /// the entries up to it are forgotten here, and the segment files
    /// wholly at or below it are answered, for the caller to remove (a
    /// crash before they are is recovered at open, as an interrupted
    /// purge).
    pub fn forget(&mut self, upto: LogId<NodeId>) -> Vec<PathBuf> {
        if !self.purges(upto) {
            return Vec::new();
        }
        self.purged = Some(upto);
        let whole: Vec<u64> = self
            .segments
            .values()
            .filter(|s| s.next() <= upto.index + 1)
            .map(|s| s.first)
            .collect();
        let files = whole
            .into_iter()
            .filter_map(|k| self.segments.remove(&k))
            .map(|s| s.path.clone())
            .collect();
        if self.next <= upto.index {
            self.next = upto.index + 1;
            self.last = Some(upto);
        }
        files
    }
}

/// The first half of a purge: `dir`'s `purged` file written durably. It
/// needs nothing of the log in memory, so the group commit goes on while
/// its fsyncs run ([`SegmentLog::forget`] is the second half).
pub fn write_purged(dir: &Path, upto: LogId<NodeId>) -> Result<(), LogError> {
    meta::write(dir, PURGED, &upto).map_err(|err| LogError::Io {
        dir: dir.to_path_buf(),
        err,
    })
}

/// The body of the record at `pos` in `buf` and where the next starts, if
/// the record is whole and its CRC matches.
fn split_record(buf: &Bytes, pos: usize) -> Option<(Bytes, usize)> {
    let hdr = buf.get(pos..pos + HEADER)?;
    let n = u32::from_be_bytes(hdr[0..4].try_into().ok()?);
    let crc = u32::from_be_bytes(hdr[4..8].try_into().ok()?);
    if n > MAX_BODY {
        return None;
    }
    let end = pos + HEADER + n as usize;
    let body = buf.get(pos + HEADER..end)?;
    if crc32fast::hash(body) != crc {
        return None;
    }
    Some((buf.slice(pos + HEADER..end), end))
}

/// Reads a segment's records; `true` when it ends in a torn or bad record
/// (the segment's `len` then stops before it).
fn scan(first: u64, path: &Path) -> io::Result<(Segment, bool)> {
    let file = OpenOptions::new().read(true).write(true).open(path)?;
    let buf = Bytes::from(fs::read(path)?);
    let mut offsets = Vec::new();
    let mut pos = 0usize;
    let mut torn = false;
    while pos < buf.len() {
        match split_record(&buf, pos) {
            Some((body, next)) if record::index_of(&body) == Some(first + offsets.len() as u64) => {
                offsets.push(pos as u64);
                pos = next;
            }
            _ => {
                torn = true;
                break;
            }
        }
    }
    Ok((
        Segment {
            first,
            path: path.to_path_buf(),
            file: Arc::new(file),
            offsets,
            len: pos as u64,
        },
        torn,
    ))
}

#[cfg(test)]
mod tests;

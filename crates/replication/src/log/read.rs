//! Reading a run of the log back without holding it: [`SegmentLog::span`]
//! finds, under the caller's lock, where a bounded run of records lies in
//! one segment, and [`Span::read`] reads and checks them afterwards, with
//! the lock released, so a large read never holds up appends. Never: which
//! entries are committed or what a payload means (`crate::committed` and
//! nsqd decide those).
//!
//! Why reading after the lock is safe: the span holds the segment's open
//! file, so a purge that removes the file meanwhile leaves it readable, and
//! only entries that are not committed are ever cut by a truncation (Raft
//! never truncates a committed entry), so a caller that asks only for
//! committed ones reads bytes that no longer change. Each record's CRC and
//! index are checked as it is read, as `SegmentLog::entries` does.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use bytes::Bytes;

use super::{record, split_record, LogError, SegmentLog};
use crate::Entry;

/// Consecutive records of one segment, located while the log was locked.
#[derive(Clone)]
pub struct Span {
    file: Arc<File>,
    dir: std::path::PathBuf,
    /// The index of the first record.
    first: u64,
    /// How many records.
    count: u64,
    /// Their bytes in the file: `at..to`.
    at: u64,
    to: u64,
}

impl Span {
    /// The index after the span's last record: where the next read starts.
    pub fn next(&self) -> u64 {
        self.first + self.count
    }

    /// The span's entries, read from its segment and checked.
    pub fn read(&self) -> Result<Vec<Entry>, LogError> {
        let mut buf = vec![0u8; (self.to - self.at) as usize];
        self.file
            .read_exact_at(&mut buf, self.at)
            .map_err(|err| LogError::Io {
                dir: self.dir.clone(),
                err,
            })?;
        decode_run(&Bytes::from(buf), self.first, self.next())
    }
}

/// Decodes the records of indexes `first..stop` laid end to end in `buf`,
/// checking each one's CRC and index.
pub(super) fn decode_run(buf: &Bytes, first: u64, stop: u64) -> Result<Vec<Entry>, LogError> {
    let mut out = Vec::with_capacity(stop.saturating_sub(first) as usize);
    let mut pos = 0usize;
    for index in first..stop {
        let (body, next) = split_record(buf, pos).ok_or(LogError::Checksum(index))?;
        let e = record::decode(body).map_err(|err| LogError::Record { index, err })?;
        if e.log_id.index != index {
            return Err(LogError::Checksum(index));
        }
        out.push(e);
        pos = next;
    }
    Ok(out)
}

impl SegmentLog {
    /// Where the records from `start` lie, up to `end` (exclusive), the end
    /// of `start`'s segment, or `max_bytes` of records, whichever comes
    /// first — but always `start`'s own record, however large. None when
    /// `start` is at or past the end of the log. An index below the purge
    /// point, or in a gap between segments, is `Missing`.
    pub fn span(&self, start: u64, end: u64, max_bytes: u64) -> Result<Option<Span>, LogError> {
        let end = end.min(self.next);
        if start >= end {
            return Ok(None);
        }
        if self.purged.is_some_and(|p| start <= p.index) {
            return Err(LogError::Missing(start));
        }
        let Some((_, seg)) = self.segments.range(..=start).next_back() else {
            return Err(LogError::Missing(start));
        };
        if start >= seg.next() {
            return Err(LogError::Missing(start));
        }
        let stop = end.min(seg.next());
        let at = seg.offsets[(start - seg.first) as usize];
        let offset_of = |i: u64| {
            if i == seg.next() {
                seg.len
            } else {
                seg.offsets[(i - seg.first) as usize]
            }
        };
        // The most records from `start` that end within `max_bytes` of
        // `at` (at least one): their ends grow with the index, so a binary
        // search, which keeps the time under the lock small however many
        // records a segment has.
        let (mut count, mut over) = (1, stop - start + 1);
        while over - count > 1 {
            let mid = count + (over - count) / 2;
            if offset_of(start + mid) - at <= max_bytes {
                count = mid;
            } else {
                over = mid;
            }
        }
        Ok(Some(Span {
            file: seg.file.clone(),
            dir: self.dir.clone(),
            first: start,
            count,
            at,
            to: offset_of(start + count),
        }))
    }
}

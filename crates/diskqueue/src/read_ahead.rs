//! The open read segment and what has been read of it ahead of the read
//! position; records are handed out as slices of that read-ahead.
//!
//! A refill reads up to [`READ_BUFFER`] bytes into one new buffer, and each
//! record taken from it shares that buffer instead of being copied into
//! its own: one allocation per few hundred small records rather than one
//! each. Copies were a tenth of nsqd's CPU reading from disk (the malloc
//! here, the free on whichever core finished the message, and glibc's
//! arena lock between them).
//!
//! A buffer is freed when the last record taken from it is: an owner that
//! keeps a few records long while the rest go keeps their buffers, up to
//! [`READ_BUFFER`] each (nsqd: a message held in flight while its
//! neighbours were finished; a deferred one is copied out). Dropping a record is an atomic decrement
//! of its buffer's count, which the cores finishing messages share; that
//! costs far less than the copy did (docs/performance.md).

use std::io::{self, Read, Seek, SeekFrom};

use bytes::{Buf, Bytes, BytesMut};

use crate::vfs::ReadCached;

/// One syscall per this many bytes of small records.
pub(crate) const READ_BUFFER: usize = 64 * 1024;

pub(crate) struct ReadAhead<R> {
    file: R,
    /// Read from the file, not yet handed out.
    buf: Bytes,
}

impl<R: Read> ReadAhead<R> {
    /// `file` positioned where the next record starts.
    pub fn new(file: R) -> ReadAhead<R> {
        ReadAhead {
            file,
            buf: Bytes::new(),
        }
    }

    /// What has been read ahead (no I/O).
    pub fn buffer(&self) -> &[u8] {
        &self.buf
    }

    /// Skips the next `n` bytes of the read-ahead.
    pub fn consume(&mut self, n: usize) {
        self.buf.advance(n);
    }

    /// The next `n` bytes of the read-ahead, sharing its buffer.
    pub fn take(&mut self, n: usize) -> Bytes {
        self.buf.split_to(n)
    }

    /// Reads until at least `want` bytes are read ahead. `Ok(false)`: the
    /// file ended first. What was read stays read ahead, also on error.
    pub fn fill(&mut self, want: usize) -> io::Result<bool> {
        self.fill_by(want, |f, out| f.read(out).map(Some))
    }

    /// `read` (`Some(n)`, 0 at the end) until `want` bytes are read ahead,
    /// or until it answers `None` (stop, no error).
    fn fill_by(
        &mut self,
        want: usize,
        mut read: impl FnMut(&mut R, &mut [u8]) -> io::Result<Option<usize>>,
    ) -> io::Result<bool> {
        if self.buf.len() >= want {
            return Ok(true);
        }
        // a new buffer: the records of the old one may still be in use
        let cap = want.max(READ_BUFFER);
        let mut next = BytesMut::with_capacity(cap);
        next.extend_from_slice(&self.buf);
        let start = next.len();
        let mut filled = start;
        next.resize(cap, 0);
        let mut result = Ok(());
        while filled < want {
            match read(&mut self.file, &mut next[filled..]) {
                Ok(Some(0) | None) => break,
                Ok(Some(n)) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if filled > start {
            next.truncate(filled);
            self.buf = next.freeze();
        }
        result.map(|()| filled >= want)
    }
}

impl<R: Read + Seek> ReadAhead<R> {
    /// Skips the next `n` bytes: what is read ahead, then the rest by
    /// seeking the file, never reading it.
    pub fn skip(&mut self, n: usize) -> io::Result<()> {
        if n <= self.buf.len() {
            self.buf.advance(n);
            return Ok(());
        }
        let rest = (n - self.buf.len()) as i64;
        self.buf = Bytes::new();
        self.file.seek(SeekFrom::Current(rest)).map(drop)
    }
}

impl<R: ReadCached> ReadAhead<R> {
    /// Like [`fill`](ReadAhead::fill), from what the page cache holds
    /// only: never waits for the device. False when fewer than `want`
    /// bytes could be read ahead that way (not cached, the end of the
    /// file, an error: the ordinary read finds out which).
    pub fn fill_cached(&mut self, want: usize) -> bool {
        self.fill_by(want, |f, out| f.read_cached(out))
            .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file that returns at most `step` bytes per read, then fails once
    /// if told to.
    struct Trickle {
        data: Vec<u8>,
        pos: usize,
        step: usize,
        fail_at: Option<usize>,
    }

    impl Read for Trickle {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            if self.fail_at.is_some_and(|f| self.pos >= f) {
                self.fail_at = None;
                return Err(io::Error::other("disk on fire"));
            }
            let n = out.len().min(self.step).min(self.data.len() - self.pos);
            out[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
            self.pos += n;
            Ok(n)
        }
    }

    /// The first `cached` bytes are "in the page cache".
    struct Cached {
        file: Trickle,
        cached: usize,
    }

    impl Read for Cached {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            self.file.read(out)
        }
    }

    impl ReadCached for Cached {
        fn read_cached(&mut self, out: &mut [u8]) -> io::Result<Option<usize>> {
            let pos = self.file.pos;
            if pos >= self.cached && pos < self.file.data.len() {
                return Ok(None);
            }
            let n = out.len().min((self.cached.max(pos) - pos).max(1));
            self.file.read(&mut out[..n]).map(Some)
        }
    }

    fn trickle(len: usize, step: usize, fail_at: Option<usize>) -> Trickle {
        Trickle {
            data: (0..len).map(|i| i as u8).collect(),
            pos: 0,
            step,
            fail_at,
        }
    }

    #[test]
    fn a_cached_fill_reads_what_memory_holds_and_leaves_the_rest_to_read() {
        let file = trickle(200_000, 10_000, None);
        let mut r = ReadAhead::new(Cached {
            file,
            cached: 25_000,
        });
        // short reads of the cache are retried until enough is read ahead
        assert!(r.fill_cached(20_000));
        assert_eq!(r.buffer().len(), 20_000);
        let a = r.take(19_990);
        // then what the cache holds past the 10 bytes left
        assert!(r.fill_cached(100));
        assert_eq!(r.buffer().len(), 5_010);
        r.consume(5_000);
        // the cache has no more: false, and nothing is lost
        assert!(!r.fill_cached(100));
        assert_eq!(r.buffer().len(), 10);
        // the ordinary read goes on from there
        assert!(r.fill(100).unwrap());
        let b = r.take(100);
        let want: Vec<u8> = (24_990..25_090).map(|i| i as u8).collect();
        assert_eq!(&b[..], &want[..]);
        assert_eq!(a[19_989], (19_989 % 256) as u8);
    }

    #[test]
    fn a_cached_fill_stops_at_the_end_and_at_an_error_without_losing_bytes() {
        let mut r = ReadAhead::new(Cached {
            file: trickle(50, 7, None),
            cached: 50,
        });
        assert!(!r.fill_cached(60));
        assert_eq!(r.buffer().len(), 50);
        let mut r = ReadAhead::new(Cached {
            file: trickle(100, 30, Some(60)),
            cached: 100,
        });
        assert!(!r.fill_cached(90));
        assert_eq!(r.buffer().len(), 60);
        assert!(r.fill_cached(90));
        assert_eq!(r.buffer(), &(0..90u8).collect::<Vec<_>>()[..]);
    }

    #[test]
    fn records_share_one_buffer_and_a_refill_keeps_the_partial_tail() {
        let mut r = ReadAhead::new(trickle(200_000, usize::MAX, None));
        assert!(r.fill(4).unwrap());
        // one read filled a whole buffer, not just the 4 bytes asked for
        assert_eq!(r.buffer().len(), READ_BUFFER);
        let a = r.take(10);
        let b = r.take(10);
        assert_eq!(&a[..], &(0..10u8).collect::<Vec<_>>()[..]);
        assert_eq!(b.as_ptr(), a.as_ptr().wrapping_add(10), "shares a's buffer");
        r.consume(READ_BUFFER - 25);
        // 5 bytes left; a record of 100 needs a refill that starts with them
        assert!(r.fill(100).unwrap());
        let c = r.take(100);
        let want: Vec<u8> = (READ_BUFFER - 5..READ_BUFFER + 95)
            .map(|i| i as u8)
            .collect();
        assert_eq!(&c[..], &want[..]);
        // the records taken before are intact
        assert_eq!(b[0], 10);
    }

    #[test]
    fn short_reads_are_retried_and_a_large_record_gets_a_buffer_of_its_size() {
        let mut r = ReadAhead::new(trickle(300_000, 1000, None));
        assert!(r.fill(200_000).unwrap());
        assert_eq!(r.take(200_000).len(), 200_000);
    }

    impl Seek for Trickle {
        fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
            let SeekFrom::Current(d) = to else {
                unreachable!("only relative seeks here")
            };
            self.pos = (self.pos as i64 + d) as usize;
            Ok(self.pos as u64)
        }
    }

    #[test]
    fn a_skip_takes_what_is_read_ahead_then_seeks_over_the_rest_unread() {
        let mut r = ReadAhead::new(trickle(300_000, usize::MAX, None));
        assert!(r.fill(4).unwrap());
        r.skip(10).unwrap();
        assert_eq!(r.buffer()[0], 10, "within the read-ahead: consumed");
        // past it: the file is seeked, and only then read again
        r.skip(200_000).unwrap();
        assert!(r.buffer().is_empty());
        assert_eq!(r.file.pos, 200_010, "the skipped bytes were never read");
        assert!(r.fill(1).unwrap());
        assert_eq!(r.buffer()[0], (200_010 % 256) as u8);
    }

    #[test]
    fn the_end_of_the_file_and_errors_keep_what_was_read() {
        let mut r = ReadAhead::new(trickle(50, 7, None));
        assert!(!r.fill(60).unwrap());
        assert_eq!(r.buffer().len(), 50);
        let mut r = ReadAhead::new(trickle(100, 30, Some(60)));
        assert!(r.fill(90).is_err());
        assert_eq!(r.buffer().len(), 60);
        // the failure was once: the rest can still be read
        assert!(r.fill(90).unwrap());
    }
}

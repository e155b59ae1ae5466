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

use std::io::{self, Read};

use bytes::{Buf, Bytes, BytesMut};

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
        if self.buf.len() >= want {
            return Ok(true);
        }
        // a new buffer: the records of the old one may still be in use
        let cap = want.max(READ_BUFFER);
        let mut next = BytesMut::with_capacity(cap);
        next.extend_from_slice(&self.buf);
        let mut filled = next.len();
        next.resize(cap, 0);
        let mut result = Ok(());
        while filled < want {
            match self.file.read(&mut next[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        next.truncate(filled);
        self.buf = next.freeze();
        result.map(|()| filled >= want)
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

    fn trickle(len: usize, step: usize, fail_at: Option<usize>) -> Trickle {
        Trickle {
            data: (0..len).map(|i| i as u8).collect(),
            pos: 0,
            step,
            fail_at,
        }
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

//! An open file of a [`SimFs`]: reads see the page cache (durable
//! contents with the pending log applied), writes and truncations append
//! to the file's pending log, and `sync_all` is the barrier that makes them
//! durable (or, while fsyncs are set to fail, drops them as Linux does).

use std::io::{self, Read, Seek, SeekFrom, Write};

use super::*;
use crate::vfs::ReadCached;

/// An open file of a [`SimFs`]. Unlike a real `dup`, a clone has its own
/// offset; the queue only fsyncs through its clones.
#[derive(Debug)]
pub(crate) struct SimFile {
    pub(super) fs: SimFs,
    pub(super) ino: u64,
    pub(super) pos: u64,
    pub(super) write: bool,
}

impl Read for SimFile {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut st = self.fs.lock();
        st.alive()?;
        let data = &st.inode(self.ino).data;
        let start = usize::try_from(self.pos)
            .unwrap_or(usize::MAX)
            .min(data.len());
        let n = buf.len().min(data.len() - start);
        buf[..n].copy_from_slice(&data[start..start + n]);
        self.pos += n as u64;
        Ok(n)
    }
}

/// The simulated page cache holds everything: a cached read is a read.
impl ReadCached for SimFile {
    fn read_cached(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        self.read(buf).map(Some)
    }
}

impl Write for SimFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if !self.write {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "read-only handle",
            ));
        }
        let mut st = self.fs.lock();
        if !st.tick() {
            return Err(dead());
        }
        st.write_op(
            self.ino,
            DataOp::Write {
                at: self.pos,
                bytes: buf.to_vec(),
            },
        );
        self.pos += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Seek for SimFile {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let mut st = self.fs.lock();
        st.alive()?;
        let len = st.inode(self.ino).data.len() as i128;
        let pos = match to {
            SeekFrom::Start(p) => i128::from(p),
            SeekFrom::End(d) => len + i128::from(d),
            SeekFrom::Current(d) => i128::from(self.pos) + i128::from(d),
        };
        self.pos = u64::try_from(pos)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "seek before start"))?;
        Ok(self.pos)
    }
}

impl FsFile for SimFile {
    fn size(&self) -> io::Result<u64> {
        let mut st = self.fs.lock();
        st.alive()?;
        Ok(st.inode(self.ino).data.len() as u64)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        if !self.write {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "read-only handle",
            ));
        }
        let mut st = self.fs.lock();
        if !st.tick() {
            return Err(dead());
        }
        st.write_op(self.ino, DataOp::SetLen(len));
        Ok(())
    }

    fn sync_all(&self) -> io::Result<()> {
        let mut st = self.fs.lock();
        if !st.tick() {
            return Err(dead());
        }
        if st.failing_fsyncs > 0 {
            st.failing_fsyncs -= 1;
            // Linux marks the pages clean after a writeback error: they
            // stay readable but are never written, not even by a later
            // fsync, and a power cut loses them.
            st.inode(self.ino).unsynced.clear();
            return Err(io::Error::other("simulated writeback error (EIO)"));
        }
        let inode = st.inode(self.ino);
        // The unsynced operations, not the live data: bytes a failed fsync
        // dropped must not reach the disk through a later one.
        for op in std::mem::take(&mut inode.unsynced) {
            apply(&mut inode.durable, &op);
        }
        st.stats.file_fsyncs += 1;
        if st.model == NsModel::Journaled {
            st.commit_ns();
        }
        Ok(())
    }

    fn try_clone(&self) -> io::Result<SimFile> {
        self.fs.lock().alive()?;
        Ok(SimFile {
            fs: self.fs.clone(),
            ino: self.ino,
            pos: 0,
            write: self.write,
        })
    }
}

//! The filesystem operations the queue performs, as a trait, and the real
//! one ([`OsFs`]).
//!
//! The queue is generic over [`Fs`] only so that tests can run it on a
//! simulated filesystem that forgets what was not fsynced (`SimFs`, in the
//! crate's tests). The trait is statically dispatched and [`OsFs`] is a
//! zero-sized type whose methods are the `std::fs` calls the queue made
//! before the trait existed, so the production path compiles to the same
//! code. The set of operations is deliberately the handful the queue needs,
//! with the flags it needs baked in (segments and metadata are always
//! created with mode 0600), rather than a general-purpose VFS.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::path::Path;

/// A directory tree the queue can keep its files in.
///
/// Cloned into each background sync job, so a handle should be cheap to
/// clone (a zero-sized type, or an `Arc`).
pub trait Fs: Clone + Send + Sync + 'static {
    /// An open file. Reads and writes go through the queue's own
    /// `BufReader`/`BufWriter`, so it needs no buffering of its own.
    type File: FsFile;

    /// Opens an existing file read-only. A missing file is
    /// [`io::ErrorKind::NotFound`], which the reader relies on.
    fn open_read(&self, path: &Path) -> io::Result<Self::File>;
    /// Opens a file for reading and writing, creating it (mode 0600) if it
    /// does not exist, without truncating it.
    fn open_rw(&self, path: &Path) -> io::Result<Self::File>;
    /// Like [`Fs::open_rw`], but truncates an existing file to 0 bytes.
    fn create(&self, path: &Path) -> io::Result<Self::File>;
    /// Size of the file at `path` (following symlinks, like `stat`).
    fn file_len(&self, path: &Path) -> io::Result<u64>;
    /// Whether `path` is an accessible directory.
    fn is_dir(&self, path: &Path) -> io::Result<bool>;
    /// Atomically replaces `to` with `from`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Unlinks a file. A missing file is [`io::ErrorKind::NotFound`].
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Names of the entries directly in `dir`. Only used on the rare paths
    /// that scan for segments (damaged metadata), so it may allocate.
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<OsString>>;
    /// Makes the creations, renames and removals done in `dir` durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
}

/// Reading what the page cache already holds, without waiting for the
/// device.
///
/// A consumer's reads of a segment just written are nearly always served
/// from memory, but a plain `read` may wait for the disk, so nsqd used to
/// hand its async worker to another thread around every one of them
/// (`block_in_place`): a thread wake-up and two context switches per 64 KiB
/// read, which cost more than the copy. A read that cannot wait needs none.
pub trait ReadCached: Read {
    /// Like `read`, but `Ok(None)` where the data is not in memory (or the
    /// platform cannot tell without waiting): ask `read` then. A short
    /// count is what was in memory.
    fn read_cached(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>>;
}

/// An open file of an [`Fs`].
pub trait FsFile: ReadCached + Write + Seek + Send + Sized + 'static {
    /// Current size in bytes (`fstat`).
    fn size(&self) -> io::Result<u64>;
    /// Truncates or extends the file (`ftruncate`).
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Makes the file's data and size durable (`fsync`).
    fn sync_all(&self) -> io::Result<()>;
    /// A second handle on the same open file (`dup`), so that an fsync can
    /// run while the queue keeps using the first one.
    fn try_clone(&self) -> io::Result<Self>;
}

/// The operating system's filesystem: what nsqd uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OsFs;

fn data_file_options() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.read(true).write(true).create(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    o
}

impl Fs for OsFs {
    type File = File;

    #[inline]
    fn open_read(&self, path: &Path) -> io::Result<File> {
        File::open(path)
    }

    #[inline]
    fn open_rw(&self, path: &Path) -> io::Result<File> {
        data_file_options().open(path)
    }

    #[inline]
    fn create(&self, path: &Path) -> io::Result<File> {
        data_file_options().truncate(true).open(path)
    }

    #[inline]
    fn file_len(&self, path: &Path) -> io::Result<u64> {
        fs::metadata(path).map(|m| m.len())
    }

    #[inline]
    fn is_dir(&self, path: &Path) -> io::Result<bool> {
        fs::metadata(path).map(|m| m.is_dir())
    }

    #[inline]
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    #[inline]
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        fs::read_dir(dir)?
            .map(|entry| entry.map(|e| e.file_name()))
            .collect()
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        #[cfg(unix)]
        {
            File::open(dir)?.sync_all()
        }
        #[cfg(not(unix))]
        {
            // Windows cannot open a directory as a file; NTFS journals
            // its metadata, so there is nothing to do.
            let _ = dir;
            Ok(())
        }
    }
}

/// Kernels before 4.14 (and some filesystems) refuse `RWF_NOWAIT`: after
/// the first refusal every read goes the ordinary way.
#[cfg(target_os = "linux")]
static NOWAIT_REFUSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl ReadCached for File {
    #[cfg(target_os = "linux")]
    fn read_cached(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        use rustix::io::{preadv2, Errno, ReadWriteFlags};
        use std::sync::atomic::Ordering;
        if NOWAIT_REFUSED.load(Ordering::Relaxed) {
            return Ok(None);
        }
        // u64::MAX: at the file's offset, which the read moves on, as `read`
        let bufs = &mut [io::IoSliceMut::new(buf)];
        match preadv2(&*self, bufs, u64::MAX, ReadWriteFlags::NOWAIT) {
            Ok(n) => Ok(Some(n)),
            Err(Errno::AGAIN | Errno::INTR) => Ok(None),
            Err(Errno::OPNOTSUPP | Errno::INVAL | Errno::NOSYS) => {
                NOWAIT_REFUSED.store(true, Ordering::Relaxed);
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn read_cached(&mut self, _buf: &mut [u8]) -> io::Result<Option<usize>> {
        Ok(None)
    }
}

impl FsFile for File {
    #[inline]
    fn size(&self) -> io::Result<u64> {
        self.metadata().map(|m| m.len())
    }

    #[inline]
    fn set_len(&self, len: u64) -> io::Result<()> {
        File::set_len(self, len)
    }

    #[inline]
    fn sync_all(&self) -> io::Result<()> {
        File::sync_all(self)
    }

    #[inline]
    fn try_clone(&self) -> io::Result<File> {
        File::try_clone(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn a_cached_read_of_a_file_just_written_gets_its_bytes_and_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seg");
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let mut f = OsFs.open_read(&path).unwrap();
        f.seek(io::SeekFrom::Start(10)).unwrap();
        let mut got = Vec::new();
        let mut buf = vec![0u8; 30_000];
        loop {
            match f.read_cached(&mut buf).unwrap() {
                Some(0) => break,
                Some(n) => got.extend_from_slice(&buf[..n]),
                // a kernel without RWF_NOWAIT: nothing to check here
                None if NOWAIT_REFUSED.load(std::sync::atomic::Ordering::Relaxed) => return,
                // evicted meanwhile: the ordinary read
                None => {
                    let n = f.read(&mut buf).unwrap();
                    got.extend_from_slice(&buf[..n]);
                }
            }
        }
        assert_eq!(got, data[10..], "read from the file's offset, moving it on");
    }
}

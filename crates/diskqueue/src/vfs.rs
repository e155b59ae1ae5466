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

/// An open file of an [`Fs`].
pub trait FsFile: Read + Write + Seek + Send + Sized + 'static {
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

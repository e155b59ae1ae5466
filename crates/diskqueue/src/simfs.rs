//! `SimFs`: an in-memory [`Fs`] for tests that can lose, at a simulated
//! power cut, everything that was not made durable — the test double behind
//! `simfs_tests.rs`.
//!
//! # Crash model
//!
//! Two kinds of state are tracked separately, because real filesystems
//! make them durable by different means.
//!
//! **File contents.** Each file (inode) has its durable contents, as of its
//! last `fsync`, and a log of the writes and truncations made since. What
//! readers see is the durable contents with the log applied (the page
//! cache). A power cut keeps a *prefix* of each file's log, possibly ending
//! in part of a write (a torn write), and forgets the rest; files are cut
//! independently of one another, as writeback has no order across files.
//! Keeping a prefix matches ext4 `data=ordered` and XFS for appends: both
//! publish a larger size only after the data under it reached the disk, so
//! a crash leaves a file cut short, never stretched over unwritten blocks.
//! Not modelled: zero-filled or stale blocks inside the new size
//! (ext4 `data=writeback`, ext3-era XFS), and writeback out of order within
//! one file — both can turn a torn record into one with a valid length and
//! a garbage payload, which go-diskqueue's format (no checksum) cannot
//! detect.
//!
//! **Names.** Creations, renames and removals are applied to the live
//! directory at once and appended to a log of pending namespace changes. A
//! barrier makes every pending change durable: an fsync of the directory
//! always; an fsync of any *file* only in [`NsModel::Journaled`]. A power
//! cut keeps a prefix of the pending changes (each rename all-or-nothing)
//! and forgets the rest. Keeping a prefix is what ext4 and XFS give: their
//! metadata changes go through one journal, committed in order. In
//! ext4 an fsync of a file commits the whole running journal transaction,
//! and in XFS it forces the log up to that inode's last change, which
//! includes every earlier change — hence `Journaled`. POSIX promises less:
//! a name is durable only after an fsync of its directory, and
//! [`NsModel::Strict`] holds the queue to that.
//!
//! **Crashing mid-operation.** [`SimFs::arm`] lets `n` more mutating
//! operations succeed; then the machine is "dead": that operation and every
//! later one fail with an I/O error and change nothing, until
//! [`SimFs::power_cut`]. That puts a power cut between any two system calls
//! of the queue, e.g. between a metadata rename and the directory fsync.
//!
//! **Failing fsyncs.** [`SimFs::fail_fsyncs`] makes the next file fsyncs
//! fail with an I/O error while the machine lives on, as Linux does after
//! a writeback error: the pages stay readable, but they are marked clean,
//! so what that fsync should have written never reaches the disk — a later
//! fsync that succeeds does not write it either, and a power cut loses it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::vfs::{Fs, FsFile};

mod file;
pub(crate) use file::SimFile;

/// Which fsyncs make namespace changes (create, rename, remove) durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NsModel {
    /// ext4 / XFS: an fsync of any file or of the directory commits every
    /// namespace change made before it.
    Journaled,
    /// POSIX: only an fsync of the directory does.
    Strict,
}

/// How much of the not-yet-durable state a power cut keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cut {
    /// Nothing: every file and the directory as of their last fsync.
    LoseAll,
    /// Everything (the disk happened to have written it all back).
    KeepAll,
    /// A random prefix of each file's unsynced writes (the last one possibly
    /// torn mid-way) and of the pending namespace changes, from this seed.
    Random(u64),
}

/// What a power cut left behind, for assertions and failure messages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CutReport {
    /// Unsynced bytes (net) dropped from files that are still named.
    pub bytes_lost: u64,
    /// Files whose kept log ended in part of a write.
    pub torn_writes: u32,
    /// Pending namespace changes dropped.
    pub ns_changes_lost: u32,
}

/// Counters of what reached the simulated disk; tests compare them before
/// and after an operation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Stats {
    /// Successful fsyncs of files.
    pub file_fsyncs: u64,
    /// Files created.
    pub creates: u64,
    /// Sequence number of the last rename onto a `*.meta.dat` name (the
    /// queue's metadata replacement); never reset.
    pub meta_renamed: u64,
    /// Highest `meta_renamed` known durable: committed by a barrier, or
    /// kept by a power cut.
    pub meta_durable: u64,
}

#[derive(Debug, Clone)]
enum DataOp {
    Write { at: u64, bytes: Vec<u8> },
    SetLen(u64),
}

#[derive(Debug, Default)]
struct Inode {
    /// What reads see.
    data: Vec<u8>,
    /// As of the last fsync.
    durable: Vec<u8>,
    /// Applied to `durable` in order, gives `data`.
    unsynced: Vec<DataOp>,
}

fn apply(buf: &mut Vec<u8>, op: &DataOp) {
    match op {
        DataOp::Write { at, bytes } => {
            let at = usize::try_from(*at).expect("offset fits in memory");
            let end = at + bytes.len();
            if buf.len() < end {
                buf.resize(end, 0);
            }
            buf[at..end].copy_from_slice(bytes);
        }
        DataOp::SetLen(len) => buf.resize(usize::try_from(*len).expect("length fits in memory"), 0),
    }
}

/// One namespace change: each name set to an inode (or removed), atomically.
type NsChange = Vec<(PathBuf, Option<u64>)>;

#[derive(Debug)]
struct State {
    model: NsModel,
    dirs: BTreeSet<PathBuf>,
    inodes: HashMap<u64, Inode>,
    next_ino: u64,
    /// The live directory: path -> inode.
    names: BTreeMap<PathBuf, u64>,
    /// The directory as of the last barrier.
    durable_names: BTreeMap<PathBuf, u64>,
    /// Changes since the last barrier, oldest first, with the
    /// `meta_renamed` sequence number a change carries (0 if none).
    pending: Vec<(NsChange, u64)>,
    /// `Some(n)`: n more mutating operations succeed, then the machine dies.
    budget: Option<u64>,
    dead: bool,
    /// File fsyncs left to fail (see [`SimFs::fail_fsyncs`]).
    failing_fsyncs: u32,
    stats: Stats,
}

impl State {
    /// Accounts for one mutating operation; false if the machine is (now)
    /// dead and the operation must fail without effect.
    fn tick(&mut self) -> bool {
        if self.dead {
            return false;
        }
        match self.budget {
            Some(0) => {
                self.dead = true;
                false
            }
            Some(n) => {
                self.budget = Some(n - 1);
                true
            }
            None => true,
        }
    }

    fn alive(&self) -> io::Result<()> {
        if self.dead {
            Err(dead())
        } else {
            Ok(())
        }
    }

    fn commit_ns(&mut self) {
        for (change, _) in self.pending.drain(..) {
            for (name, ino) in change {
                match ino {
                    Some(i) => self.durable_names.insert(name, i),
                    None => self.durable_names.remove(&name),
                };
            }
        }
        self.stats.meta_durable = self.stats.meta_renamed;
    }

    fn check_parent(&self, path: &Path) -> io::Result<()> {
        match path.parent() {
            Some(p) if self.dirs.contains(p) => Ok(()),
            _ => Err(io::Error::new(io::ErrorKind::NotFound, "no such directory")),
        }
    }

    fn inode(&mut self, ino: u64) -> &mut Inode {
        self.inodes
            .get_mut(&ino)
            .expect("open handles keep their inode")
    }

    fn write_op(&mut self, ino: u64, op: DataOp) {
        let inode = self.inode(ino);
        apply(&mut inode.data, &op);
        inode.unsynced.push(op);
    }
}

fn dead() -> io::Error {
    io::Error::other("simulated power loss: machine is down")
}

/// Handle on a simulated filesystem; clones share it.
#[derive(Debug, Clone)]
pub(crate) struct SimFs {
    st: Arc<Mutex<State>>,
}

impl SimFs {
    /// An empty filesystem containing the directory `dir`.
    pub(crate) fn new(dir: &Path, model: NsModel) -> SimFs {
        let mut dirs = BTreeSet::new();
        dirs.insert(dir.to_owned());
        SimFs {
            st: Arc::new(Mutex::new(State {
                model,
                dirs,
                inodes: HashMap::new(),
                next_ino: 1,
                names: BTreeMap::new(),
                durable_names: BTreeMap::new(),
                pending: Vec::new(),
                budget: None,
                dead: false,
                failing_fsyncs: 0,
                stats: Stats::default(),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The machine dies at the `(n+1)`-th mutating operation from now.
    pub(crate) fn arm(&self, n: u64) {
        let mut st = self.lock();
        if !st.dead {
            st.budget = Some(n);
        }
    }

    /// The next `n` file fsyncs fail with an I/O error; what each should
    /// have written is never written (see the crash model).
    pub(crate) fn fail_fsyncs(&self, n: u32) {
        self.lock().failing_fsyncs = n;
    }

    pub(crate) fn disarm(&self) {
        self.lock().budget = None;
    }

    pub(crate) fn is_dead(&self) -> bool {
        self.lock().dead
    }

    pub(crate) fn stats(&self) -> Stats {
        self.lock().stats
    }

    /// Power comes back: the disk holds what was durable plus what `cut`
    /// keeps of the rest, and the page cache is that. Revives a dead
    /// machine and disarms it. Handles opened before must not be used again.
    pub(crate) fn power_cut(&self, cut: Cut) -> CutReport {
        let mut st = self.lock();
        let mut rng = Rng(match cut {
            Cut::Random(seed) => seed,
            _ => 0,
        });
        let mut report = CutReport::default();

        let keep_ns = match cut {
            Cut::LoseAll => 0,
            Cut::KeepAll => st.pending.len(),
            Cut::Random(_) => rng.below(st.pending.len() as u64 + 1) as usize,
        };
        let pending = std::mem::take(&mut st.pending);
        report.ns_changes_lost = (pending.len() - keep_ns) as u32;
        for (change, meta_seq) in pending.into_iter().take(keep_ns) {
            for (name, ino) in change {
                match ino {
                    Some(i) => st.durable_names.insert(name, i),
                    None => st.durable_names.remove(&name),
                };
            }
            st.stats.meta_durable = st.stats.meta_durable.max(meta_seq);
        }
        st.names = st.durable_names.clone();

        let named: BTreeSet<u64> = st.names.values().copied().collect();
        let mut inos: Vec<u64> = st.inodes.keys().copied().collect();
        inos.sort_unstable(); // a seed must give the same cut every run
        for ino in inos {
            let inode = st.inode(ino);
            let ops = std::mem::take(&mut inode.unsynced);
            let keep = match cut {
                Cut::LoseAll => 0,
                Cut::KeepAll => ops.len(),
                Cut::Random(_) => rng.below(ops.len() as u64 + 1) as usize,
            };
            let mut disk = std::mem::take(&mut inode.durable);
            for op in &ops[..keep] {
                apply(&mut disk, op);
            }
            if let (Cut::Random(_), Some(DataOp::Write { at, bytes })) = (cut, ops.get(keep)) {
                let part = rng.below(bytes.len() as u64 + 1) as usize;
                if part > 0 {
                    apply(
                        &mut disk,
                        &DataOp::Write {
                            at: *at,
                            bytes: bytes[..part].to_vec(),
                        },
                    );
                    if part < bytes.len() {
                        report.torn_writes += u32::from(named.contains(&ino));
                    }
                }
            }
            if named.contains(&ino) {
                report.bytes_lost += (inode.data.len() as u64).saturating_sub(disk.len() as u64);
            }
            inode.data = disk.clone();
            inode.durable = disk;
        }
        st.dead = false;
        st.budget = None;
        report
    }

    /// Live contents of the file at `path` (what a reader would see now).
    pub(crate) fn contents(&self, path: &Path) -> Option<Vec<u8>> {
        let st = self.lock();
        let ino = *st.names.get(path)?;
        Some(st.inodes[&ino].data.clone())
    }

    /// Names of the files in `dir`, sorted.
    pub(crate) fn file_names(&self, dir: &Path) -> Vec<String> {
        let st = self.lock();
        st.names
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .collect()
    }

    fn open(&self, path: &Path, write: bool, create: bool, truncate: bool) -> io::Result<SimFile> {
        let mut st = self.lock();
        st.alive()?;
        let ino = match st.names.get(path) {
            Some(&ino) => ino,
            None if create => {
                st.check_parent(path)?;
                if !st.tick() {
                    return Err(dead());
                }
                let ino = st.next_ino;
                st.next_ino += 1;
                st.inodes.insert(ino, Inode::default());
                st.names.insert(path.to_owned(), ino);
                st.pending.push((vec![(path.to_owned(), Some(ino))], 0));
                st.stats.creates += 1;
                ino
            }
            None => return Err(io::Error::new(io::ErrorKind::NotFound, "no such file")),
        };
        if truncate && !st.inodes[&ino].data.is_empty() {
            if !st.tick() {
                return Err(dead());
            }
            st.write_op(ino, DataOp::SetLen(0));
        }
        Ok(SimFile {
            fs: self.clone(),
            ino,
            pos: 0,
            write,
        })
    }
}

impl Fs for SimFs {
    type File = SimFile;

    fn open_read(&self, path: &Path) -> io::Result<SimFile> {
        self.open(path, false, false, false)
    }

    fn open_rw(&self, path: &Path) -> io::Result<SimFile> {
        self.open(path, true, true, false)
    }

    fn create(&self, path: &Path) -> io::Result<SimFile> {
        self.open(path, true, true, true)
    }

    fn file_len(&self, path: &Path) -> io::Result<u64> {
        let st = self.lock();
        st.alive()?;
        match st.names.get(path) {
            Some(ino) => Ok(st.inodes[ino].data.len() as u64),
            None => Err(io::Error::new(io::ErrorKind::NotFound, "no such file")),
        }
    }

    fn is_dir(&self, path: &Path) -> io::Result<bool> {
        let st = self.lock();
        st.alive()?;
        if st.dirs.contains(path) {
            Ok(true)
        } else if st.names.contains_key(path) {
            Ok(false)
        } else {
            Err(io::Error::new(
                io::ErrorKind::NotFound,
                "no such file or directory",
            ))
        }
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = self.lock();
        st.alive()?;
        let Some(&ino) = st.names.get(from) else {
            return Err(io::Error::new(io::ErrorKind::NotFound, "no such file"));
        };
        st.check_parent(to)?;
        if !st.tick() {
            return Err(dead());
        }
        st.names.remove(from);
        st.names.insert(to.to_owned(), ino);
        let meta_seq = if to.to_string_lossy().ends_with(".meta.dat") {
            st.stats.meta_renamed += 1;
            st.stats.meta_renamed
        } else {
            0
        };
        st.pending.push((
            vec![(to.to_owned(), Some(ino)), (from.to_owned(), None)],
            meta_seq,
        ));
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut st = self.lock();
        st.alive()?;
        if !st.names.contains_key(path) {
            return Err(io::Error::new(io::ErrorKind::NotFound, "no such file"));
        }
        if !st.tick() {
            return Err(dead());
        }
        st.names.remove(path);
        st.pending.push((vec![(path.to_owned(), None)], 0));
        Ok(())
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        let st = self.lock();
        st.alive()?;
        if !st.dirs.contains(dir) {
            return Err(io::Error::new(io::ErrorKind::NotFound, "no such directory"));
        }
        Ok(st
            .names
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name().map(|n| n.to_owned()))
            .collect())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.lock();
        st.alive()?;
        if !st.dirs.contains(dir) {
            return Err(io::Error::new(io::ErrorKind::NotFound, "no such directory"));
        }
        if !st.tick() {
            return Err(dead());
        }
        st.commit_ns();
        Ok(())
    }
}

/// splitmix64: deterministic, so a failing proptest seed replays exactly.
#[derive(Debug, Clone)]
pub(crate) struct Rng(pub u64);

impl Rng {
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform-ish in `0..n` (`n > 0`).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

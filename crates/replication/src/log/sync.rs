//! Group commit: one thread per log that fsyncs what appends wrote and
//! then tells their callers. Never: writing records or deciding what is
//! in the log (the log does that before it hands work here).
//!
//! The rule: an append's completion runs only after an fsync that *began*
//! after its records were written. [`GroupCommit::submit`] is called after
//! the write; the thread takes everything submitted so far under the lock,
//! releases it, and only then starts the fsync, so every submission it took
//! was written before the fsync began. Appends submitted while an fsync
//! runs wait for the next one, which covers all of them: one fsync per
//! burst, not per append.
//!
//! A failed fsync fails every completion it was to cover and every later
//! one: after a failed writeback Linux may have dropped the dirty pages, so
//! nothing written before can be called durable again. The log is then
//! unusable until reopened (recovery reads what the disk really has).

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

/// Called once with the outcome of the fsync that covers an append.
pub type Completion = Box<dyn FnOnce(io::Result<()>) + Send>;

/// The fsync calls, behind a seam so tests can count, hold or fail them.
pub trait Syncer: Send + Sync + 'static {
    /// Makes a segment's written data durable.
    fn sync_file(&self, file: &File) -> io::Result<()>;
    /// Makes a directory's entries (a new or removed segment) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
}

/// The real thing: `fdatasync` on files, `fsync` on directories.
#[derive(Debug, Default, Clone, Copy)]
pub struct Fsync;

impl Syncer for Fsync {
    fn sync_file(&self, file: &File) -> io::Result<()> {
        file.sync_data()
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}

#[derive(Default)]
struct State {
    /// Files written since the last fsync began (by pointer: one entry each).
    files: Vec<Arc<File>>,
    /// A segment was created or removed since the last fsync began.
    dir_dirty: bool,
    waiting: Vec<Completion>,
    /// Set by the first failed fsync, for good.
    failed: Option<String>,
    closing: bool,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

/// The sync thread of one log and what is waiting for it.
pub struct GroupCommit {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl GroupCommit {
    /// Starts the sync thread for the log in `dir`.
    pub fn start(dir: PathBuf, syncer: Arc<dyn Syncer>) -> io::Result<GroupCommit> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("nsq-raftlog-sync".into())
            .spawn(move || run(&s, &dir, &*syncer))?;
        Ok(GroupCommit {
            shared,
            thread: Some(thread),
        })
    }

    /// Registers writes already made to `file` (and, with `dir_dirty`, a
    /// segment created or removed); `done` runs after the fsync that
    /// covers them, or at once with an error if an fsync failed before.
    pub fn submit(&self, file: Option<&Arc<File>>, dir_dirty: bool, done: Completion) {
        let mut st = self.shared.state.lock();
        if let Some(err) = &st.failed {
            let err = io::Error::other(err.clone());
            drop(st);
            done(Err(err));
            return;
        }
        if let Some(f) = file {
            if !st.files.iter().any(|x| Arc::ptr_eq(x, f)) {
                st.files.push(f.clone());
            }
        }
        st.dir_dirty |= dir_dirty;
        st.waiting.push(done);
        drop(st);
        self.shared.wake.notify_one();
    }

    /// The error of the fsync that failed, if one did.
    pub fn failed(&self) -> Option<String> {
        self.shared.state.lock().failed.clone()
    }
}

impl Drop for GroupCommit {
    /// Finishes what was submitted (one last fsync), then joins the thread.
    fn drop(&mut self) {
        self.shared.state.lock().closing = true;
        self.shared.wake.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(shared: &Shared, dir: &Path, syncer: &dyn Syncer) {
    loop {
        let (files, dir_dirty, waiting) = {
            let mut st = shared.state.lock();
            while st.waiting.is_empty() && !st.closing {
                shared.wake.wait(&mut st);
            }
            if st.waiting.is_empty() {
                return;
            }
            (
                std::mem::take(&mut st.files),
                std::mem::take(&mut st.dir_dirty),
                std::mem::take(&mut st.waiting),
            )
        };
        // Everything taken above was written before this point: the
        // fsyncs below begin after those writes.
        let mut result = Ok(());
        for f in &files {
            result = syncer.sync_file(f);
            if result.is_err() {
                break;
            }
        }
        if result.is_ok() && dir_dirty {
            result = syncer.sync_dir(dir);
        }
        match result {
            Ok(()) => {
                for done in waiting {
                    done(Ok(()));
                }
            }
            Err(e) => {
                tracing::error!(dir = %dir.display(), error = %e, "raft log fsync failed; the log refuses further appends");
                let msg = format!("fsync of the raft log in {} failed: {e}", dir.display());
                let later = {
                    let mut st = shared.state.lock();
                    st.failed = Some(msg.clone());
                    std::mem::take(&mut st.waiting)
                };
                for done in waiting.into_iter().chain(later) {
                    done(Err(io::Error::new(e.kind(), msg.clone())));
                }
            }
        }
    }
}

//! A small file beside the segments kept up to date off the write path:
//! the committed index, which openraft saves at every advance and waits
//! for. Written through [`meta::write`] (durable, old or new after a
//! crash) by one thread that takes the latest value each time it is done
//! with the previous, so a burst of advances costs one write, and the
//! caller never waits. Never: values that must be durable before the
//! caller goes on (a vote).
//!
//! Losing the latest value in a crash is harmless for the committed
//! index: Raft never takes back a committed entry, and a member that
//! restarts with an older one applies less at start and learns the rest
//! from the leader's next message.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};
use serde::Serialize;

use super::meta;

struct Slot<T> {
    /// The latest value not yet written.
    pending: Option<T>,
    closed: bool,
}

struct Shared<T> {
    slot: Mutex<Slot<T>>,
    wake: Condvar,
}

/// Writes `dir/name` lazily; dropping it writes what is pending and stops.
pub struct LazyFile<T: Serialize + Send + 'static> {
    shared: Arc<Shared<T>>,
    thread: Option<JoinHandle<()>>,
}

impl<T: Serialize + Send + 'static> LazyFile<T> {
    pub fn new(dir: &Path, name: &'static str) -> std::io::Result<LazyFile<T>> {
        let shared = Arc::new(Shared {
            slot: Mutex::new(Slot {
                pending: None,
                closed: false,
            }),
            wake: Condvar::new(),
        });
        let (s, dir): (Arc<Shared<T>>, PathBuf) = (shared.clone(), dir.to_path_buf());
        let thread = std::thread::Builder::new()
            .name(format!("raft-{name}"))
            .spawn(move || write_loop(&s, &dir, name))?;
        Ok(LazyFile {
            shared,
            thread: Some(thread),
        })
    }

    /// Replaces what is pending with `value`; returns at once.
    pub fn set(&self, value: T) {
        self.shared.slot.lock().pending = Some(value);
        self.shared.wake.notify_one();
    }
}

fn write_loop<T: Serialize>(s: &Shared<T>, dir: &Path, name: &str) {
    loop {
        let value = {
            let mut slot = s.slot.lock();
            loop {
                if let Some(v) = slot.pending.take() {
                    break v;
                }
                if slot.closed {
                    return;
                }
                s.wake.wait(&mut slot);
            }
        };
        if let Err(e) = meta::write(dir, name, &value) {
            // The file is a hint (see the module doc): the next value
            // tries again.
            tracing::warn!(dir = %dir.display(), file = name, error = %e, "REPLICATION: could not save {name}");
        }
    }
}

impl<T: Serialize + Send + 'static> Drop for LazyFile<T> {
    fn drop(&mut self) {
        self.shared.slot.lock().closed = true;
        self.shared.wake.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_value_set_is_on_disk_once_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let f = LazyFile::new(dir.path(), "committed").unwrap();
        for i in 0..1000u64 {
            f.set(Some(i));
        }
        drop(f);
        let got: Option<Option<u64>> = meta::read(dir.path(), "committed").unwrap();
        assert_eq!(got, Some(Some(999)));
        // Nothing set: nothing written.
        let empty = tempfile::tempdir().unwrap();
        drop(LazyFile::<u64>::new(empty.path(), "committed").unwrap());
        assert!(!empty.path().join("committed").exists());
    }
}

//! The run files of a channel's spilled deferred messages (nsq-rs,
//! `--deferred-spill`), where the server carries out the writes, loads and
//! deletions the core asks for ([`crate::core::DeferredWork`]).
//!
//! A run is `<topic>:<channel>.deferred.<NNNNNN>.dat`, beside the channel's
//! disk queue, a sequence of records in due order:
//!
//! ```text
//! u32 BE  length of the message encoding (n)
//! u32 BE  CRC-32 (IEEE) of the next 8 + n bytes
//! i64 BE  due time, Unix nanoseconds
//! n bytes nsqd's message encoding: timestamp, attempts, id, body
//! ```
//!
//! Due times are wall-clock on disk, so they survive a restart. A clean
//! close writes `<topic>:<channel>.deferred.meta.dat` (`<run> <offset>`
//! per line) for runs read part-way; a start reads it once and removes it,
//! so after a crash a run is read from its start again (duplicates, as
//! at-least-once allows, never a loss). Go's nsqd ignores these files.
//!
//! With `--sync-every=1` a write comes with a [`SpillTicket`]: its records
//! are durable once a sync covers them, and syncs are group commits run by
//! a [`Syncer`] as the disk queue's are. Never: decides what spills or
//! when; that is the core's.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use nsq_protocol::Message;
use parking_lot::Mutex;

use super::disk::{blocking, BackendError, Syncer};
use super::health::Health;

/// Header bytes of a record: length, CRC, due time.
const HEADER: usize = 16;
/// How much of a run one read takes into memory at once.
const WINDOW: usize = 256 * 1024;
/// A length past this is a damaged header, not a message (nsqd's bodies
/// are bounded far below it).
const MAX_RECORD: usize = 1 << 30;

fn io(e: std::io::Error) -> BackendError {
    BackendError::Disk(e.to_string())
}

/// Wall-clock Unix nanoseconds of `due`, given `now` on both clocks.
pub fn to_unix_ns(due: Instant, now: Instant, now_ns: i64) -> i64 {
    if due >= now {
        now_ns.saturating_add((due - now).as_nanos() as i64)
    } else {
        now_ns.saturating_sub((now - due).as_nanos() as i64)
    }
}

/// The monotonic time of a wall-clock due time (now if it has passed).
pub fn to_instant(due_ns: i64, now: Instant, now_ns: i64) -> Instant {
    let ahead = due_ns.saturating_sub(now_ns);
    if ahead <= 0 {
        now
    } else {
        now + std::time::Duration::from_nanos(ahead as u64)
    }
}

/// A run found at start: its number, records left and first due time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FoundRun {
    pub id: u64,
    pub count: u64,
    pub head_ns: i64,
}

struct RunFile {
    file: File,
    /// Where the next unread record starts.
    read: u64,
}

#[derive(Default)]
struct State {
    runs: HashMap<u64, RunFile>,
    /// Runs deleted: a write that arrives late must not bring one back.
    deleted: HashSet<u64>,
    /// Runs written since the last sync.
    dirty: HashSet<u64>,
    /// A file was created or removed since the last sync (the directory
    /// must be synced too).
    dir_changed: bool,
    /// Writes so far, and the last one a sync covered or failed to.
    written: u64,
    synced: u64,
    failed: u64,
}

/// The run number in a run file's name (`<channel>.deferred.NNNNNN.dat`),
/// and the channel part before it.
fn parse_run_name(file: &str) -> Option<(&str, u64)> {
    let (channel, n) = file.strip_suffix(".dat")?.rsplit_once(".deferred.")?;
    if n.len() == 6 && n.bytes().all(|b| b.is_ascii_digit()) {
        Some((channel, n.parse().ok()?))
    } else {
        None
    }
}

/// The channels (`topic:channel`) that have run files in `dir`, in one
/// pass over the directory.
pub fn channels_with_runs(dir: &Path) -> HashSet<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| {
                    let name = e.file_name().into_string().ok()?;
                    parse_run_name(&name).map(|(c, _)| c.to_string())
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A channel's run files.
pub struct Spill {
    dir: PathBuf,
    name: String,
    state: Mutex<State>,
    syncer: Arc<Syncer>,
}

/// Records written to a run, to wait for until they are durable.
#[derive(Clone)]
pub struct SpillTicket {
    spill: Arc<Spill>,
    seq: u64,
}

impl SpillTicket {
    /// Covered by a completed sync (Some(true)), lost to a failed one
    /// (Some(false)), or not yet.
    pub fn durability(&self) -> Option<bool> {
        let st = self.spill.state.lock();
        if st.synced >= self.seq {
            Some(true)
        } else if st.failed >= self.seq {
            Some(false)
        } else {
            None
        }
    }

    pub fn request(&self) {
        if self.durability().is_none() {
            self.spill.request_sync();
        }
    }

    pub fn syncs(&self) -> tokio::sync::watch::Receiver<u64> {
        self.spill.syncer.subscribe()
    }
}

impl Spill {
    pub fn new(dir: &Path, name: &str, health: Arc<Health>) -> Arc<Spill> {
        Arc::new(Spill {
            dir: dir.to_path_buf(),
            name: name.to_string(),
            state: Mutex::new(State::default()),
            syncer: Arc::new(Syncer::new(health)),
        })
    }

    fn path(&self, run: u64) -> PathBuf {
        self.dir
            .join(format!("{}.deferred.{run:06}.dat", self.name))
    }

    fn meta_path(&self) -> PathBuf {
        self.dir.join(format!("{}.deferred.meta.dat", self.name))
    }

    /// The run numbers of this channel's files in the data directory.
    fn run_ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = std::fs::read_dir(&self.dir)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter_map(|e| {
                        let name = e.file_name().into_string().ok()?;
                        match parse_run_name(&name) {
                            Some((c, n)) if c == self.name => Some(n),
                            _ => None,
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        ids.sort_unstable();
        ids
    }

    /// Opens the runs an earlier process left, from where a clean close
    /// said they were read to, and counts what is left of each.
    pub fn restore(&self) -> Vec<FoundRun> {
        let offsets: HashMap<u64, u64> = std::fs::read_to_string(self.meta_path())
            .map(|s| {
                s.lines()
                    .filter_map(|l| {
                        let (a, b) = l.split_once(' ')?;
                        Some((a.parse().ok()?, b.parse().ok()?))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let mut found = Vec::new();
        let mut st = self.state.lock();
        for id in self.run_ids() {
            let path = self.path(id);
            let file = match OpenOptions::new().read(true).append(true).open(&path) {
                Ok(f) => f,
                Err(e) => {
                    tracing::error!(path = %path.display(), error = %e, "cannot open deferred run");
                    continue;
                }
            };
            let read = offsets.get(&id).copied().unwrap_or(0);
            let (count, head_ns) = scan(&file, read, &path);
            st.runs.insert(id, RunFile { file, read });
            found.push(FoundRun {
                id,
                count,
                head_ns: head_ns.unwrap_or(0),
            });
        }
        // from here on the offsets move; a crash starts the runs over
        let _ = std::fs::remove_file(self.meta_path());
        found
    }

    /// Appends records (due order, Unix-ns due times) to run `run`,
    /// creating it if `new`. The ticket is for waiting until they are
    /// durable; Ok(None) if the run was deleted meanwhile (they are gone
    /// with it).
    pub fn append(
        self: &Arc<Self>,
        run: u64,
        new: bool,
        records: &[(i64, &Message)],
    ) -> Result<Option<SpillTicket>, BackendError> {
        let mut buf = BytesMut::new();
        let mut enc = BytesMut::new();
        for (due, m) in records {
            enc.clear();
            m.encode(&mut enc);
            let mut crc = crc32fast::Hasher::new();
            crc.update(&due.to_be_bytes());
            crc.update(&enc);
            buf.extend_from_slice(&(enc.len() as u32).to_be_bytes());
            buf.extend_from_slice(&crc.finalize().to_be_bytes());
            buf.extend_from_slice(&due.to_be_bytes());
            buf.extend_from_slice(&enc);
        }
        let mut st = self.state.lock();
        if st.deleted.contains(&run) {
            return Ok(None);
        }
        let st = &mut *st;
        let f = match st.runs.entry(run) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let file = OpenOptions::new()
                    .read(true)
                    .append(true)
                    .create(new)
                    .open(self.path(run))
                    .map_err(io)?;
                st.dir_changed = true;
                e.insert(RunFile { file, read: 0 })
            }
        };
        blocking(|| (&f.file).write_all(&buf)).map_err(io)?;
        st.dirty.insert(run);
        st.written += 1;
        Ok(Some(SpillTicket {
            spill: self.clone(),
            seq: st.written,
        }))
    }

    /// Up to `max` records of run `run` due at or before `until_ns`, and
    /// the due time of the next one (None: the end, or a damaged record,
    /// which is logged and ends the run).
    pub fn read(&self, run: u64, max: usize, until_ns: i64) -> (Vec<(i64, Message)>, Option<i64>) {
        let mut st = self.state.lock();
        let Some(f) = st.runs.get_mut(&run) else {
            return (Vec::new(), None);
        };
        let path = self.path(run);
        let mut win = Window::default();
        let mut out = Vec::new();
        loop {
            let Some((len, crc, due)) = win.header(&f.file, f.read) else {
                return (out, None);
            };
            if out.len() >= max || due > until_ns {
                return (out, Some(due));
            }
            let Some(body) = win.get(&f.file, f.read + HEADER as u64, len) else {
                tracing::error!(path = %path.display(), offset = f.read, "deferred run ends in a partial record");
                return (out, None);
            };
            let mut h = crc32fast::Hasher::new();
            h.update(&due.to_be_bytes());
            h.update(body);
            let msg = if h.finalize() == crc {
                Message::decode(Bytes::copy_from_slice(body)).ok()
            } else {
                None
            };
            let Some(msg) = msg else {
                tracing::error!(path = %path.display(), offset = f.read, "damaged record in a deferred run; the rest of the run is skipped");
                return (out, None);
            };
            f.read += (HEADER + len) as u64;
            out.push((due, msg));
        }
    }

    /// Removes a run done with.
    pub fn delete(&self, run: u64) {
        let mut st = self.state.lock();
        st.deleted.insert(run);
        st.dirty.remove(&run);
        if st.runs.remove(&run).is_some() || self.path(run).exists() {
            if let Err(e) = std::fs::remove_file(self.path(run)) {
                tracing::error!(run, error = %e, "cannot remove deferred run");
            }
            st.dir_changed = true;
        }
    }

    /// Removes every run file and the offsets (channel delete).
    pub fn delete_all(&self) {
        for id in self.run_ids() {
            self.delete(id);
        }
        let _ = std::fs::remove_file(self.meta_path());
    }

    /// Clean close: the read offsets of runs read part-way, then every
    /// run and the directory fsynced.
    pub fn close(&self) -> Result<(), BackendError> {
        let st = self.state.lock();
        if st.runs.is_empty() && !st.dir_changed {
            // nothing was ever spilled here: no file to touch
            return Ok(());
        }
        let mut meta = String::new();
        for (id, f) in &st.runs {
            if f.read > 0 {
                meta.push_str(&format!("{id} {}\n", f.read));
            }
        }
        blocking(|| {
            for f in st.runs.values() {
                f.file.sync_data()?;
            }
            if !meta.is_empty() {
                let tmp = self.meta_path().with_extension("tmp");
                let mut f = File::create(&tmp)?;
                f.write_all(meta.as_bytes())?;
                f.sync_all()?;
                std::fs::rename(&tmp, self.meta_path())?;
            }
            File::open(&self.dir)?.sync_all()
        })
        .map_err(io)
    }

    fn request_sync(self: &Arc<Self>) {
        let spill = self.clone();
        self.syncer
            .request(move || spill.sync().err().map(|e| e.to_string()));
    }

    /// fsyncs every run written since the last sync (and the directory if
    /// files came or went); the writes made before it started are durable.
    fn sync(&self) -> std::io::Result<()> {
        let (files, upto, dir) = {
            let mut st = self.state.lock();
            let dirty: Vec<u64> = st.dirty.drain().collect();
            let files: Vec<std::io::Result<File>> = dirty
                .iter()
                .filter_map(|id| st.runs.get(id).map(|f| f.file.try_clone()))
                .collect();
            (files, st.written, std::mem::take(&mut st.dir_changed))
        };
        let r = (|| {
            for f in files {
                f?.sync_data()?;
            }
            if dir {
                File::open(&self.dir)?.sync_all()?;
            }
            Ok(())
        })();
        let mut st = self.state.lock();
        match &r {
            Ok(()) => st.synced = st.synced.max(upto),
            Err(_) => st.failed = st.failed.max(upto),
        }
        r
    }
}

/// Counts the records of a run from `from` on and the first one's due time.
fn scan(file: &File, from: u64, path: &Path) -> (u64, Option<i64>) {
    let mut win = Window::default();
    let (mut at, mut count, mut head) = (from, 0, None);
    while let Some((len, _, due)) = win.header(file, at) {
        if win.get(file, at + HEADER as u64, len).is_none() {
            tracing::warn!(path = %path.display(), offset = at, "deferred run ends in a partial record (a crash during a write); it is ignored");
            break;
        }
        head.get_or_insert(due);
        count += 1;
        at += (HEADER + len) as u64;
    }
    (count, head)
}

/// A read-ahead window over a run file.
#[derive(Default)]
struct Window {
    start: u64,
    data: Vec<u8>,
}

impl Window {
    /// `len` bytes at `at`, or None if the file ends first.
    fn get(&mut self, file: &File, at: u64, len: usize) -> Option<&[u8]> {
        let end = at + len as u64;
        if at < self.start || end > self.start + self.data.len() as u64 {
            self.data.resize(len.max(WINDOW), 0);
            let mut got = 0;
            while got < self.data.len() {
                match file.read_at(&mut self.data[got..], at + got as u64) {
                    Ok(0) => break,
                    Ok(n) => got += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            self.data.truncate(got);
            self.start = at;
            if got < len {
                return None;
            }
        }
        let from = (at - self.start) as usize;
        Some(&self.data[from..from + len])
    }

    /// A record's length, CRC and due time at `at`.
    fn header(&mut self, file: &File, at: u64) -> Option<(usize, u32, i64)> {
        let h = self.get(file, at, HEADER)?;
        let len = u32::from_be_bytes(h[0..4].try_into().ok()?) as usize;
        let crc = u32::from_be_bytes(h[4..8].try_into().ok()?);
        let due = i64::from_be_bytes(h[8..16].try_into().ok()?);
        (len <= MAX_RECORD).then_some((len, crc, due))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nsq_protocol::MessageId;

    fn msg(n: u64) -> Message {
        Message::new(MessageId::from_guid(n), 7, Bytes::from(format!("body{n}")))
    }

    #[test]
    fn records_come_back_in_order_up_to_the_due_limit_and_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let s = Spill::new(dir.path(), "t:c", Arc::default());
        let ms: Vec<Message> = (0..5).map(msg).collect();
        let recs: Vec<(i64, &Message)> = ms
            .iter()
            .enumerate()
            .map(|(i, m)| (100 + i as i64, m))
            .collect();
        s.append(3, true, &recs[..2]).unwrap();
        s.append(3, false, &recs[2..]).unwrap();
        let (got, next) = s.read(3, 10, 102);
        assert_eq!(
            got.iter().map(|r| r.0).collect::<Vec<_>>(),
            vec![100, 101, 102]
        );
        assert_eq!(got[1].1, ms[1]);
        assert_eq!(next, Some(103));
        s.close().unwrap();
        let s = Spill::new(dir.path(), "t:c", Arc::default());
        assert_eq!(
            s.restore(),
            vec![FoundRun {
                id: 3,
                count: 2,
                head_ns: 103
            }],
            "read from where the clean close left it"
        );
        let (got, next) = s.read(3, 1, i64::MAX);
        assert_eq!((got.len(), next), (1, Some(104)));
        // no clean close: the next start reads the run from its start
        let s = Spill::new(dir.path(), "t:c", Arc::default());
        assert_eq!(s.restore()[0].count, 5);
        s.delete(3);
        assert!(s.restore().is_empty());
    }

    #[test]
    fn channels_with_runs_are_found_by_name_in_one_scan() {
        let dir = tempfile::tempdir().unwrap();
        for f in [
            "t:c.deferred.000001.dat",
            "t:c.deferred.000002.dat",
            "a.b:c.d.deferred.000007.dat",
            "t:m.deferred.meta.dat",
            "t:x.deferred.12.dat",
            "t:y.diskqueue.000000.dat",
        ] {
            std::fs::write(dir.path().join(f), b"").unwrap();
        }
        let mut found: Vec<String> = channels_with_runs(dir.path()).into_iter().collect();
        found.sort();
        assert_eq!(found, ["a.b:c.d", "t:c"]);
        let s = Spill::new(dir.path(), "a.b:c.d", Arc::default());
        assert_eq!(s.run_ids(), [7]);
        let s = Spill::new(dir.path(), "b:c.d", Arc::default());
        assert!(
            s.run_ids().is_empty(),
            "a name that ends another's is not it"
        );
    }

    #[test]
    fn a_torn_or_damaged_record_ends_the_run() {
        let dir = tempfile::tempdir().unwrap();
        let s = Spill::new(dir.path(), "t:c", Arc::default());
        let ms: Vec<Message> = (0..3).map(msg).collect();
        let recs: Vec<(i64, &Message)> = ms.iter().map(|m| (1, m)).collect();
        s.append(0, true, &recs).unwrap();
        let path = s.path(0);
        let len = std::fs::metadata(&path).unwrap().len();
        // a write torn by a crash: the last record is cut short
        OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(len - 3)
            .unwrap();
        let s = Spill::new(dir.path(), "t:c", Arc::default());
        assert_eq!(s.restore()[0].count, 2);
        // a flipped byte in the second record's body
        let mut data = std::fs::read(&path).unwrap();
        let second = data.len() / 2 + 20;
        data[second] ^= 0xff;
        std::fs::write(&path, &data).unwrap();
        let s = Spill::new(dir.path(), "t:c", Arc::default());
        s.restore();
        let (got, next) = s.read(0, 10, i64::MAX);
        assert_eq!((got.len(), next), (1, None));
    }

    #[test]
    fn a_write_to_a_deleted_run_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let s = Spill::new(dir.path(), "t:c", Arc::default());
        let m = msg(1);
        s.append(0, true, &[(1, &m)]).unwrap();
        s.delete(0);
        assert!(s.append(0, false, &[(2, &m)]).unwrap().is_none());
        assert!(!s.path(0).exists());
    }
}

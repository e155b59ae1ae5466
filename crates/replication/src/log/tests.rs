//! The log's own rules: reopen, torn tails, purge and truncate across
//! segments, and group commit counted through the `Syncer` seam.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};

use bytes::Bytes;
use openraft::{CommittedLeaderId, EntryPayload, LogId};
use parking_lot::Mutex;

use super::sync::{Completion, Fsync, Syncer};
use super::*;
use crate::{Entry, Payload};

fn ent(term: u64, index: u64) -> Entry {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
        payload: EntryPayload::Normal(Payload(Bytes::from(format!(
            "payload {index} {}",
            "x".repeat(40)
        )))),
    }
}

fn small() -> LogOptions {
    LogOptions {
        segment_bytes: 512,
        syncer: Arc::new(Fsync),
    }
}

/// A completion that reports its result on a channel.
fn on(tx: &mpsc::Sender<io::Result<()>>) -> Completion {
    let tx = tx.clone();
    Box::new(move |r| {
        let _ = tx.send(r);
    })
}

/// Appends `from..to` one entry per call and waits for every fsync.
fn fill(log: &mut SegmentLog, term: u64, from: u64, to: u64) {
    let (tx, rx) = mpsc::channel();
    for i in from..to {
        log.append(&[ent(term, i)], on(&tx)).unwrap();
    }
    for _ in from..to {
        rx.recv().unwrap().unwrap();
    }
}

fn indexes(log: &SegmentLog) -> Vec<u64> {
    log.entries(0, u64::MAX)
        .unwrap()
        .iter()
        .map(|e| e.log_id.index)
        .collect()
}

fn segments(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".seg"))
        .collect();
    v.sort();
    v
}

#[test]
fn appends_roll_segments_and_survive_reopen() {
    let d = tempfile::tempdir().unwrap();
    let mut log = SegmentLog::open(d.path(), small()).unwrap();
    assert_eq!((log.last(), log.next_index()), (None, 0));
    fill(&mut log, 1, 0, 40);
    assert!(log.segment_count() > 3, "{} segments", log.segment_count());
    let before = log.entries(0, 40).unwrap();
    assert_eq!(before.len(), 40);
    assert_eq!(before[17], ent(1, 17));
    assert_eq!(
        log.entries(10, 13).unwrap(),
        vec![ent(1, 10), ent(1, 11), ent(1, 12)]
    );
    drop(log);

    let log = SegmentLog::open(d.path(), small()).unwrap();
    assert_eq!(log.entries(0, 40).unwrap(), before);
    assert_eq!(log.last(), Some(ent(1, 39).log_id));
    assert_eq!(log.next_index(), 40);
    assert!(matches!(
        SegmentLog::open(d.path(), small()).map(|_| ()),
        Ok(())
    ));
}

#[test]
fn an_append_overlapping_the_log_or_with_a_hole_inside_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let mut log = SegmentLog::open(d.path(), small()).unwrap();
    fill(&mut log, 1, 0, 3);
    let (tx, _rx) = mpsc::channel();
    let err = log.append(&[ent(1, 2)], on(&tx)).unwrap_err();
    assert!(
        matches!(
            err,
            LogError::NotNext {
                expected: 3,
                found: 2
            }
        ),
        "{err}"
    );
    let err = log.append(&[ent(1, 3), ent(1, 5)], on(&tx)).unwrap_err();
    assert!(
        matches!(
            err,
            LogError::NotNext {
                expected: 4,
                found: 5
            }
        ),
        "{err}"
    );
    assert_eq!(indexes(&log), vec![0, 1, 2]);
}

#[test]
fn a_torn_tail_is_cut_back_to_the_last_whole_record() {
    let d = tempfile::tempdir().unwrap();
    let mut log = SegmentLog::open(d.path(), small()).unwrap();
    fill(&mut log, 1, 0, 20);
    drop(log);
    let last = d.path().join(segments(d.path()).last().unwrap());
    let whole = fs::metadata(&last).unwrap().len();

    // Half of a record, as a death in the middle of a write leaves it.
    let mut buf = bytes::BytesMut::new();
    record::encode(&ent(1, 20), &mut buf).unwrap();
    let mut f = OpenOptions::new().append(true).open(&last).unwrap();
    f.write_all(&buf[..buf.len() / 2]).unwrap();
    drop(f);

    let mut log = SegmentLog::open(d.path(), small()).unwrap();
    assert_eq!(fs::metadata(&last).unwrap().len(), whole);
    assert_eq!(indexes(&log), (0..20).collect::<Vec<_>>());
    assert_eq!(log.next_index(), 20);
    fill(&mut log, 2, 20, 22);
    assert_eq!(log.entry(21).unwrap(), ent(2, 21));
}

#[test]
fn a_bad_checksum_cuts_there_and_drops_the_segments_after_it() {
    let d = tempfile::tempdir().unwrap();
    let mut log = SegmentLog::open(d.path(), small()).unwrap();
    fill(&mut log, 1, 0, 40);
    drop(log);
    let names = segments(d.path());
    assert!(names.len() >= 3);
    // Flip a byte in the last record of the second segment.
    let second = d.path().join(&names[1]);
    let mut bytes = fs::read(&second).unwrap();
    let n = bytes.len();
    bytes[n - 3] ^= 0xff;
    fs::write(&second, &bytes).unwrap();
    let first_of_third: u64 = names[2].trim_end_matches(".seg").parse().unwrap();

    let log = SegmentLog::open(d.path(), small()).unwrap();
    assert_eq!(log.next_index(), first_of_third - 1);
    assert_eq!(segments(d.path()), names[..2].to_vec());
    assert_eq!(indexes(&log), (0..first_of_third - 1).collect::<Vec<_>>());
}

#[test]
fn purge_removes_whole_segments_and_is_kept_across_reopen() {
    let d = tempfile::tempdir().unwrap();
    let mut log = SegmentLog::open(d.path(), small()).unwrap();
    fill(&mut log, 1, 0, 40);
    let names = segments(d.path());
    let second: u64 = names[1].trim_end_matches(".seg").parse().unwrap();
    let third: u64 = names[2].trim_end_matches(".seg").parse().unwrap();
    // Up to the middle of the second segment: only the first goes.
    let upto = ent(1, second + 1).log_id;
    log.purge(upto).unwrap();
    assert_eq!(segments(d.path()), names[1..].to_vec());
    assert_eq!(log.purged(), Some(upto));
    assert_eq!(indexes(&log), (second + 2..40).collect::<Vec<_>>());
    drop(log);

    let mut log = SegmentLog::open(d.path(), small()).unwrap();
    assert_eq!(log.purged(), Some(upto));
    assert_eq!(indexes(&log), (second + 2..40).collect::<Vec<_>>());
    // Up to the last entry of the second segment: it goes too.
    log.purge(ent(1, third - 1).log_id).unwrap();
    assert_eq!(segments(d.path()), names[2..].to_vec());
    // Beyond the end: every segment goes, the next append starts after it.
    log.purge(ent(1, 50).log_id).unwrap();
    assert!(segments(d.path()).is_empty());
    assert_eq!(
        (log.next_index(), log.last()),
        (51, Some(ent(1, 50).log_id))
    );
    fill(&mut log, 2, 51, 53);
    drop(log);
    let log = SegmentLog::open(d.path(), small()).unwrap();
    assert_eq!(indexes(&log), vec![51, 52]);
}

#[test]
fn truncate_across_segments_removes_the_later_ones() {
    let d = tempfile::tempdir().unwrap();
    let mut log = SegmentLog::open(d.path(), small()).unwrap();
    fill(&mut log, 1, 0, 40);
    let names = segments(d.path());
    let second: u64 = names[1].trim_end_matches(".seg").parse().unwrap();
    log.truncate(second + 2).unwrap();
    assert_eq!(segments(d.path()), names[..2].to_vec());
    assert_eq!(log.last(), Some(ent(1, second + 1).log_id));
    // The conflict's replacement, in a newer term.
    fill(&mut log, 2, second + 2, second + 5);
    drop(log);
    let log = SegmentLog::open(d.path(), small()).unwrap();
    assert_eq!(log.entry(second + 1).unwrap(), ent(1, second + 1));
    assert_eq!(log.entry(second + 4).unwrap(), ent(2, second + 4));
    assert_eq!(log.next_index(), second + 5);
    // Truncating at a segment's first index removes that segment whole.
    let mut log = log;
    log.truncate(second).unwrap();
    assert_eq!(segments(d.path()), names[..1].to_vec());
    assert_eq!(log.last(), Some(ent(1, second - 1).log_id));
}

#[test]
fn an_append_past_the_end_starts_its_own_segment() {
    // openraft never leaves a gap; its storage suite appends past the end
    // of an empty log and across gaps, so the log keeps what it is given.
    let d = tempfile::tempdir().unwrap();
    let mut log = SegmentLog::open(d.path(), small()).unwrap();
    fill(&mut log, 1, 3, 5);
    fill(&mut log, 1, 8, 10);
    assert_eq!(log.segment_count(), 2);
    assert_eq!(indexes(&log), vec![3, 4, 8, 9]);
    assert_eq!(log.entries(0, 8).unwrap().len(), 2);
    let (tx, _rx) = mpsc::channel();
    assert!(matches!(
        log.append(&[ent(1, 9)], on(&tx)),
        Err(LogError::NotNext {
            expected: 10,
            found: 9
        })
    ));
    drop(log);
    let mut log = SegmentLog::open(d.path(), small()).unwrap();
    assert_eq!(indexes(&log), vec![3, 4, 8, 9]);
    assert_eq!(log.last(), Some(ent(1, 9).log_id));
    // Truncating into the gap leaves the first run.
    log.truncate(6).unwrap();
    assert_eq!((log.next_index(), log.last()), (5, Some(ent(1, 4).log_id)));
}

/// Counts fsyncs; holds the first one until released, so appends can be
/// made while it runs without any sleep.
struct Gate {
    started: AtomicUsize,
    finished: AtomicUsize,
    entered: Mutex<Option<mpsc::Sender<()>>>,
    release: Mutex<Option<mpsc::Receiver<()>>>,
}

impl Syncer for Gate {
    fn sync_file(&self, file: &File) -> io::Result<()> {
        self.started.fetch_add(1, Ordering::SeqCst);
        if let Some(tx) = self.entered.lock().take() {
            let _ = tx.send(());
            if let Some(rx) = self.release.lock().take() {
                let _ = rx.recv();
            }
        }
        let r = file.sync_data();
        self.finished.fetch_add(1, Ordering::SeqCst);
        r
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}

#[test]
fn group_commit_covers_every_append_made_during_an_fsync_with_one_more() {
    let (entered_tx, entered_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel();
    let gate = Arc::new(Gate {
        started: AtomicUsize::new(0),
        finished: AtomicUsize::new(0),
        entered: Mutex::new(Some(entered_tx)),
        release: Mutex::new(Some(release_rx)),
    });
    let d = tempfile::tempdir().unwrap();
    let opts = LogOptions {
        segment_bytes: DEFAULT_SEGMENT_BYTES,
        syncer: gate.clone(),
    };
    let mut log = SegmentLog::open(d.path(), opts).unwrap();
    // Each completion records how many fsyncs had finished when it ran.
    let (tx, rx) = mpsc::channel::<(u64, usize)>();
    let done = |i: u64| -> Completion {
        let tx = tx.clone();
        let gate = gate.clone();
        Box::new(move |r| {
            r.unwrap();
            let _ = tx.send((i, gate.finished.load(Ordering::SeqCst)));
        })
    };

    log.append(&[ent(1, 0)], done(0)).unwrap();
    entered_rx.recv().unwrap(); // the first fsync has begun, after append 0's write
    for i in 1..=50 {
        log.append(&[ent(1, i)], done(i)).unwrap();
    }
    assert!(rx.try_recv().is_err(), "a completion ran before its fsync");
    assert_eq!(gate.started.load(Ordering::SeqCst), 1);
    release_tx.send(()).unwrap();

    let mut seen = Vec::new();
    for _ in 0..=50 {
        seen.push(rx.recv().unwrap());
    }
    seen.sort();
    // Append 0 was covered by the first fsync, which began after it.
    assert_eq!(seen[0], (0, 1));
    // Appends 1..=50 were written while the first ran: covered by the
    // second, one fsync for all fifty.
    for (i, finished) in &seen[1..] {
        assert_eq!(*finished, 2, "append {i}");
    }
    drop(log); // joins the sync thread
    assert_eq!(gate.started.load(Ordering::SeqCst), 2);
}

struct Failing(AtomicUsize);

impl Syncer for Failing {
    fn sync_file(&self, _: &File) -> io::Result<()> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Err(io::Error::other("injected EIO"))
    }

    fn sync_dir(&self, _: &Path) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_failed_fsync_is_an_error_for_its_appends_and_every_later_one() {
    let d = tempfile::tempdir().unwrap();
    let failing = Arc::new(Failing(AtomicUsize::new(0)));
    let opts = LogOptions {
        segment_bytes: DEFAULT_SEGMENT_BYTES,
        syncer: failing.clone(),
    };
    let mut log = SegmentLog::open(d.path(), opts).unwrap();
    let (tx, rx) = mpsc::channel();
    log.append(&[ent(1, 0)], on(&tx)).unwrap();
    let err = rx.recv().unwrap().unwrap_err();
    assert!(err.to_string().contains("injected EIO"), "{err}");
    let err = log.append(&[ent(1, 1)], on(&tx)).unwrap_err();
    assert!(matches!(err, LogError::Failed(_)), "{err}");
    assert_eq!(failing.0.load(Ordering::SeqCst), 1);
}

/// A purge done in halves (the marker without the log, then the segments
/// forgotten and their files removed by the caller) that stopped between
/// the two, as a crash would: the log opens at the marker, the files left
/// wholly below it are dropped at open.
#[test]
fn a_purge_stopped_after_its_marker_is_finished_at_open() {
    let d = tempfile::tempdir().unwrap();
    let mut log = SegmentLog::open(d.path(), small()).unwrap();
    fill(&mut log, 1, 0, 40);
    let names = segments(d.path());
    let third: u64 = names[2].trim_end_matches(".seg").parse().unwrap();
    let upto = ent(1, third - 1).log_id;
    assert!(log.purges(upto));
    write_purged(d.path(), upto).unwrap();
    // Appends go on between the halves.
    fill(&mut log, 1, 40, 42);
    drop(log);

    let mut log = SegmentLog::open(d.path(), small()).unwrap();
    assert_eq!(log.purged(), Some(upto));
    assert_eq!(indexes(&log), (third..42).collect::<Vec<_>>());
    assert!(!log.purges(upto));
    assert!(log.forget(upto).is_empty());

    // Both halves: the files answered are those wholly below.
    let fourth: u64 = names[3].trim_end_matches(".seg").parse().unwrap();
    let upto = ent(1, fourth - 1).log_id;
    write_purged(d.path(), upto).unwrap();
    let files = log.forget(upto);
    assert_eq!(files.len(), 1, "{files:?}");
    for f in files {
        std::fs::remove_file(f).unwrap();
    }
    assert_eq!(segments(d.path()), names[3..].to_vec());
    assert_eq!(indexes(&log), (fourth..42).collect::<Vec<_>>());
}

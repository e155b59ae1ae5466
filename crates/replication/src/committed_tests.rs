//! Reading committed entries back: only committed payloads, in bounded
//! chunks that never cross a segment, Raft's own entries skipped, a purged
//! range an error.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{mpsc, Arc};

use bytes::Bytes;
use openraft::{CommittedLeaderId, EntryPayload, LogId, Membership};
use parking_lot::Mutex;
use tokio::sync::watch;

use super::*;
use crate::log::sync::Fsync;
use crate::log::LogOptions;
use crate::{Entry, Member, NodeId, Payload};

/// Blank at 0 and every 10th index, membership at 5, else a payload.
fn entry(index: u64, body: usize) -> Entry {
    let payload = match index {
        5 => {
            let nodes: BTreeMap<NodeId, Member> = [(1, Member::new("127.0.0.1:1"))].into();
            EntryPayload::Membership(Membership::new(vec![BTreeSet::from([1])], nodes))
        }
        i if i % 10 == 0 => EntryPayload::Blank,
        i => EntryPayload::Normal(Payload(payload(i, body))),
    };
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload,
    }
}

fn payload(index: u64, body: usize) -> Bytes {
    Bytes::from(format!("batch {index} {}", "x".repeat(body)))
}

/// A log of `0..n` (entries of `body` bytes, segments of 512) read up to
/// `committed`.
fn log(dir: &std::path::Path, n: u64, body: usize, committed: Option<u64>) -> Fixture {
    let opts = LogOptions {
        segment_bytes: 512,
        syncer: Arc::new(Fsync),
    };
    let mut log = SegmentLog::open(dir, opts).unwrap();
    let (tx, rx) = mpsc::channel();
    for i in 0..n {
        let tx = tx.clone();
        log.append(
            &[entry(i, body)],
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        )
        .unwrap();
    }
    for _ in 0..n {
        rx.recv().unwrap().unwrap();
    }
    let log = Arc::new(Mutex::new(log));
    let (committed_tx, committed_rx) = watch::channel(committed);
    Fixture {
        reader: CommittedLog::new(log.clone(), committed_rx),
        log,
        committed: committed_tx,
    }
}

struct Fixture {
    reader: CommittedLog,
    log: Arc<Mutex<SegmentLog>>,
    committed: watch::Sender<Option<u64>>,
}

/// Reads `start..end` to its end chunk by chunk: the entries and the
/// chunks' `next`s.
async fn read_all(
    r: &CommittedLog,
    start: u64,
    end: u64,
    max: usize,
) -> (Vec<(u64, Bytes)>, Vec<u64>) {
    let (mut all, mut nexts, mut at) = (Vec::new(), Vec::new(), start);
    loop {
        let c = r.read(at, end, max).await.unwrap();
        if c.next == at {
            return (all, nexts);
        }
        all.extend(c.entries);
        nexts.push(c.next);
        at = c.next;
    }
}

#[tokio::test]
async fn committed_payloads_come_back_in_bounded_chunks_without_raft_entries() {
    let d = tempfile::tempdir().unwrap();
    let f = log(d.path(), 60, 40, Some(44));
    let segments = f.log.lock().segment_count();
    assert!(segments > 4, "{segments} segments");
    let (got, nexts) = read_all(&f.reader, 1, u64::MAX, 150).await;
    let want: Vec<(u64, Bytes)> = (1..=44)
        .filter(|i| i % 10 != 0 && *i != 5)
        .map(|i| (i, payload(i, 40)))
        .collect();
    assert_eq!(got, want, "committed payloads only, in order");
    // Records are about 80 bytes: at most one more than fits in 150 would
    // be 2 a chunk; chunks also stop at each segment's end.
    let mut at = 1;
    for n in &nexts {
        assert!(n - at <= 2, "chunk {at}..{n} holds more than 150 bytes");
        at = *n;
    }
    assert_eq!(
        *nexts.last().unwrap(),
        45,
        "stops after the committed index"
    );
    // Nothing above the committed index, until it advances.
    let c = f.reader.read(45, 60, 1 << 20).await.unwrap();
    assert_eq!((c.entries.len(), c.next), (0, 45));
    f.committed.send_replace(Some(59));
    let (got, _) = read_all(&f.reader, 45, 60, 1 << 20).await;
    assert_eq!(got.first().map(|e| e.0), Some(45));
    assert_eq!(got.last().map(|e| e.0), Some(59));
    assert_eq!(f.reader.committed(), Some(59));
}

#[tokio::test]
async fn a_chunk_never_crosses_a_segment_and_one_large_entry_still_comes() {
    let d = tempfile::tempdir().unwrap();
    let f = log(d.path(), 30, 40, Some(29));
    let (_, nexts) = read_all(&f.reader, 1, 30, 1 << 20).await;
    // With room for everything, each chunk is one whole segment.
    assert_eq!(nexts.len(), f.log.lock().segment_count());
    // max_bytes smaller than one record: one entry a chunk.
    let c = f.reader.read(1, 30, 1).await.unwrap();
    assert_eq!((c.entries, c.next), (vec![(1, payload(1, 40))], 2));
    // A range that is a single index.
    let c = f.reader.read(7, 8, 1 << 20).await.unwrap();
    assert_eq!((c.entries, c.next), (vec![(7, payload(7, 40))], 8));
}

#[tokio::test]
async fn a_purged_range_is_an_error_and_the_rest_reads() {
    let d = tempfile::tempdir().unwrap();
    let f = log(d.path(), 30, 40, Some(29));
    f.log
        .lock()
        .purge(LogId::new(CommittedLeaderId::new(1, 1), 12))
        .unwrap();
    assert_eq!(f.reader.purged(), Some(12));
    for start in [0, 5, 12] {
        match f.reader.read(start, 30, 1 << 20).await {
            Err(ReadError::Purged {
                start: s,
                purged: 12,
            }) => assert_eq!(s, start),
            other => panic!("read from {start}: {other:?}"),
        }
    }
    let (got, _) = read_all(&f.reader, 13, 30, 1 << 20).await;
    assert_eq!(got.first().map(|e| e.0), Some(13));
    assert_eq!(got.len(), 16, "13..=29 without the blank at 20");
}

#[tokio::test]
async fn a_read_survives_a_purge_of_its_segment_after_it_was_located() {
    let d = tempfile::tempdir().unwrap();
    let f = log(d.path(), 30, 40, Some(29));
    let span = f.log.lock().span(1, 30, 1 << 20).unwrap().unwrap();
    let last = span.next() - 1;
    f.log
        .lock()
        .purge(LogId::new(CommittedLeaderId::new(1, 1), last))
        .unwrap();
    // The segment file is gone from the directory, its records are not
    // gone from the open file the span holds.
    let got = span.read().unwrap();
    assert_eq!(got.first().map(|e| e.log_id.index), Some(1));
    assert_eq!(got.last().map(|e| e.log_id.index), Some(last));
}

#[tokio::test]
async fn a_read_on_the_calling_thread_answers_as_the_async_one() {
    let d = tempfile::tempdir().unwrap();
    let f = log(d.path(), 60, 40, Some(44));
    for (start, end, max) in [(1, u64::MAX, 150), (12, 30, 1 << 20), (44, 60, 10)] {
        let here = f.reader.read_here(start, end, max).unwrap();
        let there = f.reader.read(start, end, max).await.unwrap();
        assert_eq!(here, there, "{start}..{end} by {max}");
    }
    // nothing above the committed index; the purged range is an error
    let c = f.reader.read_here(45, 60, 1 << 20).unwrap();
    assert_eq!((c.entries.len(), c.next), (0, 45));
    f.log
        .lock()
        .purge(LogId::new(CommittedLeaderId::new(1, 1), 20))
        .unwrap();
    assert!(matches!(
        f.reader.read_here(20, 30, 1 << 20),
        Err(ReadError::Purged {
            start: 20,
            purged: 20
        })
    ));
    assert!(!f
        .reader
        .read_here(21, 30, 1 << 20)
        .unwrap()
        .entries
        .is_empty());
}

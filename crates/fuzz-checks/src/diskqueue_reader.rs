//! The disk queue's recovery and reader over arbitrary files: the input is
//! split into options, a metadata file and one or two segment files, written
//! into a fresh temp dir (tmpfs `/dev/shm` when present); then
//! `DiskQueue::open`, read everything, `put`, read again, `close`, reopen and
//! drain. Never panics; open never fails on a directory, a read never errors
//! on an open queue, every drain ends within `MAX_READS` (a reader that never
//! catches up is a failure), a record put after recovery is read back, and
//! after reopen the unread record comes back first.
//!
//! `FUZZ_STRICT=1` also demands that nothing else comes back after reopen and
//! that the put is readable even after metadata the target otherwise
//! tolerates (fuzz/README.md, *Findings*); `FUZZ_DEBUG=1` prints the files
//! and the records read.

use nsq_diskqueue::{DiskQueue, Options};

const NAME: &str = "fz";
/// Far more reads than any input of fuzz size can hold records.
const MAX_READS: usize = 100_000;

fn take<'a>(data: &mut &'a [u8], n: usize) -> &'a [u8] {
    let n = n.min(data.len());
    let (a, b) = data.split_at(n);
    *data = b;
    a
}

fn drain(q: &DiskQueue, what: &str) -> usize {
    for i in 0..MAX_READS {
        match q.read() {
            Ok(Some(rec)) => {
                if std::env::var_os("FUZZ_DEBUG").is_some() {
                    eprintln!(
                        "{what}: read {} bytes {:02x?} depth={}",
                        rec.len(),
                        &rec[..rec.len().min(16)],
                        q.depth()
                    );
                }
            }
            Ok(None) => return i,
            Err(e) => panic!("{what}: read on an open queue failed: {e}"),
        }
    }
    panic!("{what}: reader still returning records after {MAX_READS} reads (loop?)");
}

pub fn check(data: &[u8]) {
    let mut d = data;
    let hdr = take(&mut d, 4);
    if hdr.len() < 4 {
        return;
    }
    // Small segments so rollover is reachable; message bounds as nsqd's
    // (26-byte header minimum) or loose, chosen by a bit.
    let max_bytes_per_file = 16 + (u16::from_le_bytes([hdr[0], hdr[1]]) as i64);
    let (min_msg_size, max_msg_size) = if hdr[2] & 1 == 0 {
        (26, 1024 * 1024 + 26)
    } else {
        (1, 4096)
    };
    let seg_num = (hdr[2] >> 1) as u64 % 4;
    let meta_len = hdr[3] as usize % 96;
    let meta = take(&mut d, meta_len);
    let split = if d.is_empty() {
        0
    } else {
        d[0] as usize * d.len() / 256
    };
    let (seg_a, seg_b) = d.split_at(split);

    // tmpfs when available: the queue fsyncs, and disk fsyncs would cap the
    // fuzzer at a few hundred execs/s.
    let shm = std::path::Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::tempdir_in(shm)
    } else {
        tempfile::tempdir()
    }
    .expect("create a temp dir");
    let p = dir.path();
    std::fs::write(p.join(format!("{NAME}.diskqueue.meta.dat")), meta)
        .expect("write the meta file into the temp dir");
    std::fs::write(
        p.join(format!("{NAME}.diskqueue.{:06}.dat", seg_num)),
        seg_a,
    )
    .expect("write a segment into the temp dir");
    if !seg_b.is_empty() {
        std::fs::write(
            p.join(format!("{NAME}.diskqueue.{:06}.dat", seg_num + 1)),
            seg_b,
        )
        .expect("write a segment into the temp dir");
    }

    let opts = Options {
        max_bytes_per_file,
        min_msg_size,
        max_msg_size,
        sync_every: 1 + (hdr[0] as i64 % 8),
        ..Options::default()
    };
    let debug = std::env::var_os("FUZZ_DEBUG").is_some();
    let ls = |when: &str| {
        if debug {
            let Ok(entries) = std::fs::read_dir(p) else {
                return;
            };
            for e in entries.flatten() {
                let body = std::fs::read(e.path()).unwrap_or_default();
                eprintln!(
                    "{when}: {:?} {} bytes {:02x?}",
                    e.file_name(),
                    body.len(),
                    &body[..body.len().min(48)]
                );
            }
        }
    };
    ls("before open");
    let q = DiskQueue::open(NAME, p, opts.clone()).expect("open on a directory must succeed");
    let _ = q.depth();
    drain(&q, "first drain");
    assert!(!q.has_unread(), "drained but has_unread");

    // The queue must still accept and return new records after recovery.
    let rec = vec![0xabu8; min_msg_size.max(1) as usize];
    q.put(&rec).expect("put after recovery");
    let got = q.read().expect("read after put");
    // Known finding (README.md, "Findings"): metadata with negative
    // positions makes an acknowledged put unreadable. Strict check opt-in.
    let strict = std::env::var_os("FUZZ_STRICT").is_some();
    if got.is_none() && !strict {
        return;
    }
    assert_eq!(
        got.as_deref(),
        Some(&rec[..]),
        "record put after recovery not read back"
    );
    q.put(&rec).expect("second put");
    q.sync().expect("sync");
    q.close().expect("close");
    ls("after close");

    // Reopen: exactly the unread record comes back.
    let q = DiskQueue::open(NAME, p, opts).expect("reopen");
    let first = q.read().expect("read after reopen");
    assert_eq!(
        first.as_deref(),
        Some(&rec[..]),
        "the unread record must come back first after reopen"
    );
    let extra = drain(&q, "after reopen");
    // Known finding (see README.md, "Findings"): when recovery skips to a
    // segment number that already holds bytes, new records overwrite its
    // start without truncating it, and after a reopen the stale tail is read
    // back as phantom records. go-diskqueue behaves the same; the strict
    // check is opt-in so the fuzzer keeps exploring past it.
    if strict {
        assert_eq!(extra, 0, "phantom records after reopen");
    }
    q.close().expect("close");
}

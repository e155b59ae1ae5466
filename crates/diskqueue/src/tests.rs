//! Format and behaviour tests. Expected bytes come from the nsq spec
//! (diskqueue.md), including what the Go binary was observed to write.

use super::*;
use std::sync::Arc;
use tempfile::TempDir;

fn opts(min: i32, max: i32, max_bytes: i64) -> Options {
    Options {
        max_bytes_per_file: max_bytes,
        min_msg_size: min,
        max_msg_size: max,
        sync_every: 2500,
        sync_timeout: Duration::from_secs(2),
        defer_sync: false,
        durable_reads: false,
        acked_reads: false,
    }
}

fn seg(dir: &Path, name: &str, n: i64) -> PathBuf {
    dir.join(format!("{name}.diskqueue.{n:06}.dat"))
}

fn meta_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.diskqueue.meta.dat"))
}

fn meta_text(dir: &Path, name: &str) -> String {
    fs::read_to_string(meta_path(dir, name)).expect("metadata file")
}

/// On-disk framing of one record, built independently of the crate.
fn frame(payload: &[u8]) -> Vec<u8> {
    let mut v = (payload.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(payload);
    v
}

/// An nsqd message payload: 8-byte timestamp, 2-byte attempts, 16-byte hex
/// id, body. 26 bytes + body, as nsqd stores it.
fn nsq_message(seq: u64, attempts: u16, body: &[u8]) -> Vec<u8> {
    let mut v = (1_700_000_000_000_000_000i64 + seq as i64)
        .to_be_bytes()
        .to_vec();
    v.extend_from_slice(&attempts.to_be_bytes());
    v.extend_from_slice(format!("{seq:016x}").as_bytes());
    v.extend_from_slice(body);
    v
}

fn payload(seq: u64, len: usize) -> Vec<u8> {
    let mut v = seq.to_be_bytes().to_vec();
    v.resize(len.max(8), (seq % 251) as u8);
    v
}

fn files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn read_all(q: &DiskQueue) -> Vec<Bytes> {
    let mut out = Vec::new();
    while let Some(r) = q.read().expect("read") {
        assert!(q.depth() >= 0);
        out.push(r);
    }
    out
}

// ------------------------------------------------------------ Go-written data

#[test]
fn reads_queue_written_by_go_nsqd() {
    // §9a: `tp:c2` holds 12 records, the first consumed: eleven 2-byte
    // bodies (32 bytes on disk) and the deferred message last, whose 8-byte
    // body makes the 390 bytes observed (11 * 32 + 38).
    let dir = TempDir::new().unwrap();
    let name = "tp:c2";
    let msgs: Vec<Vec<u8>> = (0..12)
        .map(|i| {
            let body: &[u8] = if i == 11 { b"deferred" } else { b"hi" };
            nsq_message(i, u16::from(i == 10), body)
        })
        .collect();
    let data: Vec<u8> = msgs.iter().flat_map(|m| frame(m)).collect();
    assert_eq!(data.len(), 390);
    assert_eq!(&data[..4], &[0, 0, 0, 0x1c]);
    fs::write(seg(dir.path(), name, 0), &data).unwrap();
    fs::write(meta_path(dir.path(), name), "11\n0,32\n0,390\n").unwrap();

    let q = DiskQueue::open(name, dir.path(), Options::default()).unwrap();
    assert_eq!(q.depth(), 11);
    let got = read_all(&q);
    assert_eq!(got.len(), 11);
    for (g, want) in got.iter().zip(&msgs[1..]) {
        assert_eq!(&g[..], &want[..]);
    }
    assert_eq!(q.depth(), 0);
    q.close().unwrap();

    // Consumed records stay in the current segment; only positions move.
    assert_eq!(meta_text(dir.path(), name), "0\n0,390\n0,390\n");
    assert_eq!(fs::read(seg(dir.path(), name, 0)).unwrap(), data);
    assert_eq!(
        files(dir.path()),
        ["tp:c2.diskqueue.000000.dat", "tp:c2.diskqueue.meta.dat"]
    );
}

#[test]
fn reads_go_rollover_layout_and_removes_consumed_segments() {
    // §9a rollover: 100-byte segments, seven 34-byte records.
    let dir = TempDir::new().unwrap();
    let name = "r";
    let msgs: Vec<Vec<u8>> = (0..7).map(|i| nsq_message(i, 0, b"body")).collect();
    for (n, chunk) in msgs.chunks(2).enumerate() {
        let bytes: Vec<u8> = chunk.iter().flat_map(|m| frame(m)).collect();
        fs::write(seg(dir.path(), name, n as i64), bytes).unwrap();
    }
    fs::write(meta_path(dir.path(), name), "7\n0,0\n3,34\n").unwrap();

    let q = DiskQueue::open(name, dir.path(), opts(26, 1050, 100)).unwrap();
    assert_eq!(q.depth(), 7);
    for (i, want) in msgs.iter().enumerate() {
        assert_eq!(&q.read().unwrap().unwrap()[..], &want[..], "record {i}");
    }
    assert_eq!(q.read().unwrap(), None);
    q.close().unwrap();
    assert_eq!(meta_text(dir.path(), name), "0\n3,34\n3,34\n");
    assert_eq!(
        files(dir.path()),
        ["r.diskqueue.000003.dat", "r.diskqueue.meta.dat"]
    );
}

// ------------------------------------------------------------ what we write

#[test]
fn single_put_bytes_and_meta_match_go() {
    // §9a: one PUB of a 5-byte body -> 35-byte segment, meta `1\n0,0\n0,35\n`.
    let dir = TempDir::new().unwrap();
    let q = DiskQueue::open("t", dir.path(), Options::default()).unwrap();
    assert!(!q.needs_sync());
    let m = nsq_message(1, 0, b"hello");
    q.put(&m).unwrap();
    assert_eq!(fs::read(seg(dir.path(), "t", 0)).unwrap(), frame(&m));
    // Go only writes metadata on a sync; so do we.
    assert!(!meta_path(dir.path(), "t").exists());
    assert!(q.needs_sync());
    q.sync().unwrap();
    assert!(!q.needs_sync());
    assert_eq!(meta_text(dir.path(), "t"), "1\n0,0\n0,35\n");
    assert_eq!(
        files(dir.path()),
        ["t.diskqueue.000000.dat", "t.diskqueue.meta.dat"]
    );
}

#[test]
fn close_of_unused_queue_writes_zero_meta_and_no_segment() {
    let dir = TempDir::new().unwrap();
    let q = DiskQueue::open("tp", dir.path(), Options::default()).unwrap();
    q.close().unwrap();
    assert_eq!(files(dir.path()), ["tp.diskqueue.meta.dat"]);
    assert_eq!(meta_text(dir.path(), "tp"), "0\n0,0\n0,0\n");
}

#[test]
fn rollover_matches_go() {
    let dir = TempDir::new().unwrap();
    let q = DiskQueue::open("r", dir.path(), opts(26, 1050, 100)).unwrap();
    let msgs: Vec<Vec<u8>> = (0..7).map(|i| nsq_message(i, 0, b"body")).collect();
    for m in &msgs {
        q.put(m).unwrap();
    }
    assert_eq!(
        files(dir.path()),
        [
            "r.diskqueue.000000.dat",
            "r.diskqueue.000001.dat",
            "r.diskqueue.000002.dat",
            "r.diskqueue.000003.dat",
            "r.diskqueue.meta.dat"
        ]
    );
    for n in 0..3 {
        let want: Vec<u8> = msgs[2 * n..2 * n + 2]
            .iter()
            .flat_map(|m| frame(m))
            .collect();
        assert_eq!(fs::read(seg(dir.path(), "r", n as i64)).unwrap(), want);
    }
    assert_eq!(fs::read(seg(dir.path(), "r", 3)).unwrap(), frame(&msgs[6]));
    // Each rollover syncs with the new segment number before the record that
    // caused it is written.
    assert_eq!(meta_text(dir.path(), "r"), "6\n0,0\n3,0\n");
    q.sync().unwrap();
    assert_eq!(meta_text(dir.path(), "r"), "7\n0,0\n3,34\n");

    // Leaving a segment deletes it and persists the new read position.
    q.read().unwrap().unwrap();
    assert!(seg(dir.path(), "r", 0).exists());
    q.read().unwrap().unwrap();
    assert!(!seg(dir.path(), "r", 0).exists());
    assert_eq!(meta_text(dir.path(), "r"), "5\n1,0\n3,34\n");

    assert_eq!(read_all(&q).len(), 5);
    q.close().unwrap();
    assert_eq!(meta_text(dir.path(), "r"), "0\n3,34\n3,34\n");
    assert_eq!(
        files(dir.path()),
        ["r.diskqueue.000003.dat", "r.diskqueue.meta.dat"]
    );
}

#[test]
fn oversized_record_is_alone_in_its_segment() {
    let dir = TempDir::new().unwrap();
    let q = DiskQueue::open("big", dir.path(), opts(1, 1000, 50)).unwrap();
    q.put(&[7; 100]).unwrap();
    q.put(&[8; 10]).unwrap();
    q.put(&[9; 10]).unwrap();
    assert_eq!(fs::metadata(seg(dir.path(), "big", 0)).unwrap().len(), 104);
    assert_eq!(fs::metadata(seg(dir.path(), "big", 1)).unwrap().len(), 28);
    let got = read_all(&q);
    assert_eq!(
        got,
        vec![
            Bytes::from(vec![7; 100]),
            Bytes::from(vec![8; 10]),
            Bytes::from(vec![9; 10])
        ]
    );
}

#[test]
fn segment_numbers_wider_than_six_digits() {
    let dir = TempDir::new().unwrap();
    fs::write(meta_path(dir.path(), "w"), "0\n1234567,0\n1234567,0\n").unwrap();
    let q = DiskQueue::open("w", dir.path(), opts(1, 100, 1000)).unwrap();
    q.put(b"x").unwrap();
    assert!(dir.path().join("w.diskqueue.1234567.dat").exists());
    assert_eq!(q.read().unwrap().unwrap(), Bytes::from_static(b"x"));
    q.close().unwrap();
    assert_eq!(meta_text(dir.path(), "w"), "0\n1234567,5\n1234567,5\n");
    assert_eq!(
        seg(dir.path(), "x", 17).file_name().unwrap(),
        "x.diskqueue.000017.dat"
    );
}

#[cfg(unix)]
#[test]
fn files_are_private_and_no_temp_files_remain() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new().unwrap();
    let q = DiskQueue::open("p", dir.path(), opts(1, 100, 1000)).unwrap();
    q.put(b"abc").unwrap();
    q.sync().unwrap();
    q.close().unwrap();
    for f in ["p.diskqueue.000000.dat", "p.diskqueue.meta.dat"] {
        let mode = fs::metadata(dir.path().join(f))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{f}");
    }
    assert_eq!(
        files(dir.path()),
        ["p.diskqueue.000000.dat", "p.diskqueue.meta.dat"]
    );
}

// ------------------------------------------------------------ lifecycle

#[test]
fn restart_keeps_depth_and_order() {
    let dir = TempDir::new().unwrap();
    let o = opts(8, 64, 120);
    let q = DiskQueue::open("q", dir.path(), o.clone()).unwrap();
    for i in 0..20 {
        q.put(&payload(i, 8 + (i as usize * 7) % 40)).unwrap();
    }
    for i in 0..5 {
        assert_eq!(
            q.read().unwrap().unwrap(),
            payload(i, 8 + (i as usize * 7) % 40)
        );
    }
    q.close().unwrap();
    drop(q);

    let q = DiskQueue::open("q", dir.path(), o.clone()).unwrap();
    assert_eq!(q.depth(), 15);
    for i in 20..25 {
        q.put(&payload(i, 8 + (i as usize * 7) % 40)).unwrap();
    }
    q.close().unwrap();

    let q = DiskQueue::open("q", dir.path(), o).unwrap();
    assert_eq!(q.depth(), 20);
    let got = read_all(&q);
    let want: Vec<Bytes> = (5..25)
        .map(|i| Bytes::from(payload(i, 8 + (i as usize * 7) % 40)))
        .collect();
    assert_eq!(got, want);
    assert_eq!(q.depth(), 0);
}

#[test]
fn empty_drops_everything_and_continues_numbering() {
    let dir = TempDir::new().unwrap();
    let q = DiskQueue::open("e", dir.path(), opts(26, 1050, 100)).unwrap();
    for i in 0..7 {
        q.put(&nsq_message(i, 0, b"body")).unwrap();
    }
    q.read().unwrap().unwrap();
    q.empty().unwrap();
    assert_eq!(q.depth(), 0);
    assert_eq!(q.read().unwrap(), None);
    // All segments reader..writer are gone and the new numbering is on disk.
    assert_eq!(files(dir.path()), ["e.diskqueue.meta.dat"]);
    assert_eq!(meta_text(dir.path(), "e"), "0\n4,0\n4,0\n");

    let m = nsq_message(99, 0, b"after");
    q.put(&m).unwrap();
    assert!(seg(dir.path(), "e", 4).exists());
    assert_eq!(q.depth(), 1);
    assert_eq!(&q.read().unwrap().unwrap()[..], &m[..]);
    q.close().unwrap();
    assert_eq!(meta_text(dir.path(), "e"), "0\n4,35\n4,35\n");
}

#[test]
fn delete_removes_segments_and_meta_but_nothing_else() {
    let dir = TempDir::new().unwrap();
    fs::write(dir.path().join("d.diskqueue.000000.dat.bad"), b"junk").unwrap();
    fs::write(dir.path().join("d:c.diskqueue.meta.dat"), "0\n0,0\n0,0\n").unwrap();
    fs::write(dir.path().join("nsqd.dat"), "{}").unwrap();
    let q = DiskQueue::open("d", dir.path(), opts(1, 100, 20)).unwrap();
    for i in 0..6 {
        q.put(&payload(i, 8)).unwrap();
    }
    q.read().unwrap().unwrap();
    q.sync().unwrap();
    q.delete().unwrap();
    assert_eq!(
        files(dir.path()),
        [
            "d.diskqueue.000000.dat.bad",
            "d:c.diskqueue.meta.dat",
            "nsqd.dat"
        ]
    );
    assert!(matches!(q.put(b"x"), Err(Error::Closed)));
    assert!(matches!(q.delete(), Err(Error::Closed)));
    assert!(!q.needs_sync());
}

#[test]
fn closed_queue_refuses_work_but_reports_depth() {
    let dir = TempDir::new().unwrap();
    let q = DiskQueue::open("c", dir.path(), opts(1, 100, 1000)).unwrap();
    q.put(b"a").unwrap();
    q.put(b"b").unwrap();
    q.close().unwrap();
    assert_eq!(q.depth(), 2);
    assert!(!q.needs_sync());
    assert!(matches!(q.put(b"x"), Err(Error::Closed)));
    assert!(matches!(q.read(), Err(Error::Closed)));
    assert!(matches!(q.empty(), Err(Error::Closed)));
    assert!(matches!(q.sync(), Err(Error::Closed)));
    assert!(matches!(q.close(), Err(Error::Closed)));
    assert!(matches!(q.delete(), Err(Error::Closed)));
    assert_eq!(Error::Closed.to_string(), "exiting");
    // Closing did not delete anything.
    assert_eq!(meta_text(dir.path(), "c"), "2\n0,0\n0,10\n");
}

#[test]
fn size_limits_are_enforced_with_gos_message() {
    let dir = TempDir::new().unwrap();
    let q = DiskQueue::open("s", dir.path(), opts(26, 30, 1000)).unwrap();
    let err = q.put(&[0; 25]).unwrap_err();
    assert!(matches!(
        err,
        Error::InvalidSize {
            size: 25,
            min: 26,
            max: 30
        }
    ));
    assert_eq!(
        err.to_string(),
        "invalid message write size (25) minMsgSize=26 maxMsgSize=30"
    );
    assert!(matches!(
        q.put(&[0; 31]),
        Err(Error::InvalidSize { size: 31, .. })
    ));
    assert_eq!(q.depth(), 0);
    assert!(!seg(dir.path(), "s", 0).exists());
    q.put(&[1; 26]).unwrap();
    q.put(&[2; 30]).unwrap();
    assert_eq!(q.depth(), 2);
    assert_eq!(
        fs::metadata(seg(dir.path(), "s", 0)).unwrap().len(),
        30 + 34
    );
}

#[test]
fn open_requires_a_directory() {
    let dir = TempDir::new().unwrap();
    let missing = dir.path().join("nope");
    assert!(matches!(
        DiskQueue::open("x", &missing, Options::default()),
        Err(Error::Io { .. })
    ));
    let file = dir.path().join("file");
    fs::write(&file, b"").unwrap();
    assert!(matches!(
        DiskQueue::open("x", &file, Options::default()),
        Err(Error::Io { .. })
    ));
}

#[test]
fn sync_every_counts_puts_and_reads() {
    let dir = TempDir::new().unwrap();
    let mut o = opts(1, 100, 1000);
    o.sync_every = 3;
    let q = DiskQueue::open("n", dir.path(), o).unwrap();
    q.put(b"a").unwrap();
    q.put(b"b").unwrap();
    assert!(!meta_path(dir.path(), "n").exists());
    q.put(b"c").unwrap();
    assert_eq!(meta_text(dir.path(), "n"), "3\n0,0\n0,15\n");
    assert!(!q.needs_sync());
    q.read().unwrap().unwrap();
    assert!(q.needs_sync());
    q.read().unwrap().unwrap();
    assert_eq!(meta_text(dir.path(), "n"), "3\n0,0\n0,15\n");
    q.read().unwrap().unwrap();
    assert_eq!(meta_text(dir.path(), "n"), "0\n0,15\n0,15\n");
    assert!(!q.needs_sync());
    // Nothing to read is not an operation.
    assert_eq!(q.read().unwrap(), None);
    assert!(!q.needs_sync());
}

#[test]
fn defaults_are_nsqds() {
    let o = Options::default();
    assert_eq!(o.max_bytes_per_file, 104_857_600);
    assert_eq!(o.min_msg_size, 26);
    assert_eq!(o.max_msg_size, 1_048_576 + 26);
    assert_eq!(o.sync_every, 2500);
    assert_eq!(o.sync_timeout, Duration::from_secs(2));
}

#[test]
fn queue_is_shareable_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<DiskQueue>();

    let dir = TempDir::new().unwrap();
    let q = Arc::new(DiskQueue::open("mt", dir.path(), opts(9, 9, 300)).unwrap());
    let writers: Vec<_> = (0..2u8)
        .map(|w| {
            let q = Arc::clone(&q);
            std::thread::spawn(move || {
                for i in 0..300u64 {
                    let mut m = vec![w];
                    m.extend_from_slice(&i.to_be_bytes());
                    q.put(&m).unwrap();
                }
            })
        })
        .collect();
    let mut next = [0u64; 2];
    let mut got = 0;
    while got < 600 {
        match q.read().unwrap() {
            Some(m) => {
                let w = m[0] as usize;
                let i = u64::from_be_bytes(m[1..9].try_into().unwrap());
                assert_eq!(i, next[w], "writer {w} out of order");
                next[w] += 1;
                got += 1;
            }
            None => std::thread::yield_now(),
        }
        assert!(q.depth() >= 0);
    }
    for w in writers {
        w.join().unwrap();
    }
    assert_eq!(q.depth(), 0);
    assert!(files(dir.path()).iter().all(|f| !f.ends_with(".bad")));
}

// ------------------------------------------------------------ corruption

#[test]
fn garbage_length_quarantines_segment_and_reading_continues() {
    let dir = TempDir::new().unwrap();
    let name = "g";
    let recs: Vec<Vec<u8>> = (0..5).map(|i| payload(i, 20)).collect();
    let f0: Vec<u8> = recs[0..2].iter().flat_map(|r| frame(r)).collect();
    let mut f1 = frame(&recs[2]);
    f1.extend_from_slice(&[0xff, 0xff, 0xff, 0xff]);
    f1.extend_from_slice(&[0xab; 40]);
    let f2: Vec<u8> = recs[3..5].iter().flat_map(|r| frame(r)).collect();
    fs::write(seg(dir.path(), name, 0), &f0).unwrap();
    fs::write(seg(dir.path(), name, 1), &f1).unwrap();
    fs::write(seg(dir.path(), name, 2), &f2).unwrap();
    // Depth claims one more record than survives.
    fs::write(
        meta_path(dir.path(), name),
        format!("6\n0,0\n2,{}\n", f2.len()),
    )
    .unwrap();

    let q = DiskQueue::open(name, dir.path(), opts(8, 64, 1000)).unwrap();
    let got = read_all(&q);
    assert_eq!(
        got,
        recs.iter()
            .map(|r| Bytes::from(r.clone()))
            .collect::<Vec<_>>()
    );
    assert_eq!(q.depth(), 0, "tail check corrects the over-count");
    q.close().unwrap();
    assert_eq!(
        files(dir.path()),
        [
            "g.diskqueue.000001.dat.bad",
            "g.diskqueue.000002.dat",
            "g.diskqueue.meta.dat"
        ]
    );
    assert_eq!(
        fs::read(dir.path().join("g.diskqueue.000001.dat.bad")).unwrap(),
        f1
    );
    assert_eq!(
        meta_text(dir.path(), name),
        format!("0\n2,{0}\n2,{0}\n", f2.len())
    );
}

#[test]
fn length_past_end_of_segment_is_corruption_not_allocation() {
    let dir = TempDir::new().unwrap();
    let mut f0 = frame(&payload(0, 10));
    f0.extend_from_slice(&(1_000_000u32).to_be_bytes());
    f0.extend_from_slice(b"short");
    fs::write(seg(dir.path(), "l", 0), &f0).unwrap();
    fs::write(seg(dir.path(), "l", 1), frame(&payload(1, 10))).unwrap();
    fs::write(meta_path(dir.path(), "l"), "3\n0,0\n1,14\n").unwrap();
    let q = DiskQueue::open("l", dir.path(), opts(1, i32::MAX, 1000)).unwrap();
    assert_eq!(
        read_all(&q),
        vec![Bytes::from(payload(0, 10)), Bytes::from(payload(1, 10))]
    );
    assert!(dir.path().join("l.diskqueue.000000.dat.bad").exists());
    assert_eq!(q.depth(), 0);
}

#[test]
fn truncated_record_in_write_segment_moves_writer_on() {
    let dir = TempDir::new().unwrap();
    let o = opts(8, 64, 1000);
    let q = DiskQueue::open("t", dir.path(), o.clone()).unwrap();
    for i in 0..3 {
        q.put(&payload(i, 30)).unwrap();
    }
    assert_eq!(q.read().unwrap().unwrap(), payload(0, 30));
    q.close().unwrap();
    // Cut the second record in half behind the queue's back.
    let f = fs::OpenOptions::new()
        .write(true)
        .open(seg(dir.path(), "t", 0))
        .unwrap();
    f.set_len(34 + 17).unwrap();
    drop(f);

    let q = DiskQueue::open("t", dir.path(), o).unwrap();
    assert_eq!(q.depth(), 2);
    assert_eq!(q.read().unwrap(), None);
    assert_eq!(q.depth(), 0);
    assert!(dir.path().join("t.diskqueue.000000.dat.bad").exists());
    q.put(&payload(7, 30)).unwrap();
    assert!(seg(dir.path(), "t", 1).exists());
    assert_eq!(q.read().unwrap().unwrap(), payload(7, 30));
    q.close().unwrap();
    assert_eq!(meta_text(dir.path(), "t"), "0\n1,34\n1,34\n");
}

#[test]
fn zero_length_record_in_write_segment() {
    // Like go-diskqueue's own corruption test: a 0 length where min is 10.
    let dir = TempDir::new().unwrap();
    let mut f0 = frame(&payload(0, 12));
    f0.extend_from_slice(&[0, 0, 0, 0]);
    f0.extend_from_slice(&frame(&payload(1, 12)));
    fs::write(seg(dir.path(), "z", 0), &f0).unwrap();
    fs::write(
        meta_path(dir.path(), "z"),
        format!("2\n0,0\n0,{}\n", f0.len()),
    )
    .unwrap();
    let q = DiskQueue::open("z", dir.path(), opts(10, 64, 1000)).unwrap();
    assert_eq!(q.read().unwrap().unwrap(), payload(0, 12));
    assert_eq!(q.read().unwrap(), None);
    assert_eq!(q.depth(), 0);
    q.put(&payload(2, 12)).unwrap();
    assert_eq!(q.read().unwrap().unwrap(), payload(2, 12));
    assert!(dir.path().join("z.diskqueue.000000.dat.bad").exists());
    assert!(seg(dir.path(), "z", 1).exists());
}

#[test]
fn missing_segment_is_skipped_without_bad_file() {
    let dir = TempDir::new().unwrap();
    let f0 = frame(&payload(0, 10));
    let f2 = frame(&payload(2, 10));
    fs::write(seg(dir.path(), "m", 0), &f0).unwrap();
    fs::write(seg(dir.path(), "m", 2), &f2).unwrap();
    fs::write(meta_path(dir.path(), "m"), "3\n0,0\n2,14\n").unwrap();
    let q = DiskQueue::open("m", dir.path(), opts(1, 100, 1000)).unwrap();
    assert_eq!(
        read_all(&q),
        vec![Bytes::from(payload(0, 10)), Bytes::from(payload(2, 10))]
    );
    assert_eq!(q.depth(), 0);
    q.close().unwrap();
    assert_eq!(
        files(dir.path()),
        ["m.diskqueue.000002.dat", "m.diskqueue.meta.dat"]
    );
}

#[test]
fn huge_gap_in_damaged_meta_is_crossed_quickly() {
    let dir = TempDir::new().unwrap();
    fs::write(seg(dir.path(), "h", 4000), frame(&payload(1, 10))).unwrap();
    fs::write(meta_path(dir.path(), "h"), "1\n0,0\n50000000,0\n").unwrap();
    let q = DiskQueue::open("h", dir.path(), opts(1, 100, 1000)).unwrap();
    let t = std::time::Instant::now();
    assert_eq!(read_all(&q), vec![Bytes::from(payload(1, 10))]);
    q.empty().unwrap();
    assert!(t.elapsed() < Duration::from_secs(5));
    assert_eq!(q.depth(), 0);
    q.close().unwrap();
    assert_eq!(meta_text(dir.path(), "h"), "0\n50000001,0\n50000001,0\n");
}

#[test]
fn caught_up_reader_survives_writer_rollover_without_bad_file() {
    // go-diskqueue issue #42: Go would rename segment 0 to .bad here.
    let dir = TempDir::new().unwrap();
    let q = DiskQueue::open("c", dir.path(), opts(26, 1050, 100)).unwrap();
    let msgs: Vec<Vec<u8>> = (0..3).map(|i| nsq_message(i, 0, b"body")).collect();
    q.put(&msgs[0]).unwrap();
    q.put(&msgs[1]).unwrap();
    assert_eq!(&q.read().unwrap().unwrap()[..], &msgs[0][..]);
    assert_eq!(&q.read().unwrap().unwrap()[..], &msgs[1][..]);
    q.put(&msgs[2]).unwrap();
    assert_eq!(&q.read().unwrap().unwrap()[..], &msgs[2][..]);
    assert_eq!(q.depth(), 0);
    q.close().unwrap();
    assert_eq!(
        files(dir.path()),
        ["c.diskqueue.000001.dat", "c.diskqueue.meta.dat"]
    );
    assert_eq!(meta_text(dir.path(), "c"), "0\n1,34\n1,34\n");
}

#[test]
fn reader_at_end_of_complete_segment_after_restart() {
    // The state go-diskqueue persists in the issue #42 situation.
    let dir = TempDir::new().unwrap();
    let msgs: Vec<Vec<u8>> = (0..3).map(|i| nsq_message(i, 0, b"body")).collect();
    fs::write(
        seg(dir.path(), "c", 0),
        [frame(&msgs[0]), frame(&msgs[1])].concat(),
    )
    .unwrap();
    fs::write(seg(dir.path(), "c", 1), frame(&msgs[2])).unwrap();
    fs::write(meta_path(dir.path(), "c"), "1\n0,68\n1,34\n").unwrap();
    let q = DiskQueue::open("c", dir.path(), opts(26, 1050, 100)).unwrap();
    assert_eq!(read_all(&q).len(), 1);
    q.close().unwrap();
    assert_eq!(
        files(dir.path()),
        ["c.diskqueue.000001.dat", "c.diskqueue.meta.dat"]
    );
}

// ------------------------------------------------------------ crash recovery

#[test]
fn crash_keeps_every_put_and_replays_unsynced_reads() {
    let dir = TempDir::new().unwrap();
    let o = opts(8, 64, 1000);
    let q = DiskQueue::open("k", dir.path(), o.clone()).unwrap();
    for i in 0..5 {
        q.put(&payload(i, 16)).unwrap();
    }
    q.sync().unwrap();
    for i in 5..8 {
        q.put(&payload(i, 16)).unwrap();
    }
    q.read().unwrap().unwrap();
    q.read().unwrap().unwrap();
    drop(q); // no close: like SIGKILL after the writes reached the kernel

    let q = DiskQueue::open("k", dir.path(), o).unwrap();
    // 5 from the metadata + 3 whole records found past its writePos.
    assert_eq!(q.depth(), 8);
    // Recovery moved the writer to a fresh segment and recorded that.
    assert_eq!(meta_text(dir.path(), "k"), "8\n0,0\n1,0\n");
    q.put(&payload(8, 16)).unwrap();
    assert!(seg(dir.path(), "k", 1).exists());
    let want: Vec<Bytes> = (0..9).map(|i| Bytes::from(payload(i, 16))).collect();
    assert_eq!(read_all(&q), want);
    assert_eq!(q.depth(), 0);
    assert!(files(dir.path()).iter().all(|f| !f.ends_with(".bad")));
}

#[test]
fn crash_before_first_sync_keeps_data() {
    // go-diskqueue would start at 0,0 and overwrite segment 0 here.
    let dir = TempDir::new().unwrap();
    let o = opts(8, 64, 1000);
    let q = DiskQueue::open("f", dir.path(), o.clone()).unwrap();
    for i in 0..3 {
        q.put(&payload(i, 16)).unwrap();
    }
    drop(q);
    assert!(!meta_path(dir.path(), "f").exists());
    let q = DiskQueue::open("f", dir.path(), o).unwrap();
    assert_eq!(q.depth(), 3);
    q.put(&payload(3, 16)).unwrap();
    let want: Vec<Bytes> = (0..4).map(|i| Bytes::from(payload(i, 16))).collect();
    assert_eq!(read_all(&q), want);
}

#[test]
fn crash_right_after_rollover() {
    let dir = TempDir::new().unwrap();
    let o = opts(26, 1050, 100);
    let q = DiskQueue::open("c", dir.path(), o.clone()).unwrap();
    let msgs: Vec<Vec<u8>> = (0..3).map(|i| nsq_message(i, 0, b"body")).collect();
    q.put(&msgs[0]).unwrap();
    q.put(&msgs[1]).unwrap();
    q.read().unwrap().unwrap();
    q.read().unwrap().unwrap();
    q.put(&msgs[2]).unwrap();
    drop(q);
    assert_eq!(meta_text(dir.path(), "c"), "0\n0,68\n1,0\n");

    let q = DiskQueue::open("c", dir.path(), o).unwrap();
    assert_eq!(q.depth(), 1);
    assert_eq!(read_all(&q), vec![Bytes::from(msgs[2].clone())]);
    q.close().unwrap();
    // Segment 0 was fully read, segment 1 drained; the writer sits at 2.
    assert_eq!(files(dir.path()), ["c.diskqueue.meta.dat"]);
    assert_eq!(meta_text(dir.path(), "c"), "0\n2,0\n2,0\n");
}

#[test]
fn torn_tail_after_crash_loses_only_the_torn_record() {
    let dir = TempDir::new().unwrap();
    let o = opts(8, 64, 1000);
    let q = DiskQueue::open("tt", dir.path(), o.clone()).unwrap();
    q.put(&payload(0, 16)).unwrap();
    q.sync().unwrap();
    q.put(&payload(1, 16)).unwrap();
    drop(q);
    // Half a record appended, as a power cut mid-write could leave.
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(seg(dir.path(), "tt", 0))
        .unwrap();
    f.write_all(&frame(&payload(2, 16))[..10]).unwrap();
    drop(f);

    let q = DiskQueue::open("tt", dir.path(), o).unwrap();
    assert_eq!(q.depth(), 2);
    assert_eq!(
        read_all(&q),
        vec![Bytes::from(payload(0, 16)), Bytes::from(payload(1, 16))]
    );
    assert_eq!(q.depth(), 0);
    assert!(dir.path().join("tt.diskqueue.000000.dat.bad").exists());
}

#[test]
fn damaged_metadata_is_survivable() {
    let dir = TempDir::new().unwrap();
    let data: Vec<u8> = (0..2).flat_map(|i| frame(&payload(i, 10))).collect();
    fs::write(seg(dir.path(), "b", 0), &data).unwrap();
    fs::write(meta_path(dir.path(), "b"), "not metadata").unwrap();
    let q = DiskQueue::open("b", dir.path(), opts(1, 100, 1000)).unwrap();
    assert_eq!(q.depth(), 2);
    assert_eq!(read_all(&q).len(), 2);
    q.close().unwrap();
    assert_eq!(meta_text(dir.path(), "b"), "0\n1,0\n1,0\n");
}

#[test]
fn negative_depth_in_metadata_is_clamped() {
    let dir = TempDir::new().unwrap();
    fs::write(seg(dir.path(), "n", 0), [frame(b"a"), frame(b"b")].concat()).unwrap();
    fs::write(meta_path(dir.path(), "n"), "-5\n0,0\n0,10\n").unwrap();
    let q = DiskQueue::open("n", dir.path(), opts(1, 100, 1000)).unwrap();
    assert_eq!(q.depth(), 0);
    assert_eq!(q.read().unwrap().unwrap(), Bytes::from_static(b"a"));
    assert_eq!(q.depth(), 0);
    assert_eq!(q.read().unwrap().unwrap(), Bytes::from_static(b"b"));
    assert_eq!(q.depth(), 0);
    assert_eq!(q.read().unwrap(), None);
}

#[test]
fn stale_depth_at_tail_is_reset_on_open() {
    let dir = TempDir::new().unwrap();
    fs::write(meta_path(dir.path(), "s"), "4\n2,10\n2,10\n").unwrap();
    let q = DiskQueue::open("s", dir.path(), opts(1, 100, 1000)).unwrap();
    assert_eq!(q.depth(), 0);
    assert_eq!(meta_text(dir.path(), "s"), "0\n2,10\n2,10\n");
}

#[test]
fn reader_past_writer_in_metadata_skips_to_fresh_segment() {
    let dir = TempDir::new().unwrap();
    fs::write(seg(dir.path(), "p", 5), frame(b"zz")).unwrap();
    fs::write(meta_path(dir.path(), "p"), "3\n5,0\n2,10\n").unwrap();
    let q = DiskQueue::open("p", dir.path(), opts(1, 100, 1000)).unwrap();
    assert_eq!(q.depth(), 0);
    assert_eq!(q.read().unwrap(), None);
    assert_eq!(meta_text(dir.path(), "p"), "0\n3,0\n3,0\n");
    q.put(b"new").unwrap();
    assert_eq!(q.read().unwrap().unwrap(), Bytes::from_static(b"new"));
}

/// Fuzzing found this: recovery moved the writer onto a segment file that
/// already existed with stale records, the new record overwrote only its
/// start, and the stale tail came back as a phantom record. Starting a
/// segment now truncates it.
#[test]
fn writer_starting_over_an_existing_segment_leaves_no_phantom_records() {
    let dir = tempfile::tempdir().unwrap();
    let name = "phantom";
    std::fs::write(meta_path(dir.path(), name), "0\n0,0\n0,0\n").unwrap();
    // segment 0: one record the metadata does not know about (recovered, read first)
    std::fs::write(seg(dir.path(), name, 0), frame(b"old0")).unwrap();
    // segment 1: stale bytes from an earlier life
    let mut stale = frame(b"zzzz");
    stale.extend(frame(b"yyyy"));
    std::fs::write(seg(dir.path(), name, 1), &stale).unwrap();
    let q = DiskQueue::open(name, dir.path(), opts(1, 1024, 1 << 20)).unwrap();
    q.put(b"new!").unwrap();
    q.close().unwrap();
    let q = DiskQueue::open(name, dir.path(), opts(1, 1024, 1 << 20)).unwrap();
    let got: Vec<Vec<u8>> = read_all(&q).into_iter().map(|b| b.to_vec()).collect();
    assert_eq!(got, vec![b"old0".to_vec(), b"new!".to_vec()]);
    assert_eq!(q.depth(), 0);
}

/// Fuzzing found this: negative positions in the metadata made the reader
/// refuse to read while put still wrote, losing an acknowledged record.
#[test]
fn negative_positions_in_metadata_do_not_lose_puts() {
    let dir = tempfile::tempdir().unwrap();
    let name = "negpos";
    std::fs::write(meta_path(dir.path(), name), "55\n6,-55\n6,-55\n").unwrap();
    let q = DiskQueue::open(name, dir.path(), opts(1, 1024, 1 << 20)).unwrap();
    q.put(b"acked").unwrap();
    assert_eq!(
        q.read().unwrap().map(|b| b.to_vec()),
        Some(b"acked".to_vec())
    );
    assert_eq!(q.read().unwrap(), None);
    assert_eq!(q.depth(), 0);
}

/// `defer_sync`: puts and reads leave the sync to the owner, who runs it on
/// another thread while puts go on (as nsqd does). Metadata must only move
/// forward, nothing may be lost across a crash, and close/delete must win
/// over a sync that finishes late.
#[test]
fn deferred_syncs_run_beside_puts_and_never_move_metadata_back() {
    let dir = tempfile::TempDir::new().unwrap();
    let o = Options {
        sync_every: 50,
        defer_sync: true,
        ..opts(8, 64, 16 * 1024)
    };
    let q = std::sync::Arc::new(DiskQueue::open("d", dir.path(), o.clone()).unwrap());

    q.put(&payload(0, 16)).unwrap();
    assert!(!q.sync_due(), "one put is not due");
    assert!(
        !meta_path(dir.path(), "d").exists(),
        "a deferred put does not sync itself"
    );

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let syncer = {
        let (q, stop, dir) = (q.clone(), stop.clone(), dir.path().to_owned());
        std::thread::spawn(move || {
            let mut last = (0i64, 0i64);
            let mut syncs = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if q.sync_due() {
                    q.sync().unwrap();
                    syncs += 1;
                    if let Ok(text) = fs::read_to_string(meta_path(&dir, "d")) {
                        let (m, parsed) = crate::meta::parse(text.as_bytes());
                        parsed.unwrap();
                        let w = (m.write_file_num, m.write_pos);
                        assert!(w >= last, "metadata went back from {last:?} to {w:?}");
                        last = w;
                    }
                }
                std::thread::yield_now();
            }
            syncs
        })
    };
    for i in 1..2000u64 {
        q.put(&payload(i, 16 + (i % 40) as usize)).unwrap();
        if i % 25 == 0 {
            // let the syncer in, mid-stream and across rollovers
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let syncs = syncer.join().unwrap();
    assert!(syncs > 0, "the owner saw syncs due");

    // crash: no close; every put is still there, in order
    drop(q);
    let q = DiskQueue::open("d", dir.path(), o.clone()).unwrap();
    let got = read_all(&q);
    assert_eq!(got.len(), 2000);
    for (i, r) in got.iter().enumerate() {
        assert_eq!(&r[..8], &(i as u64).to_be_bytes());
    }
    q.close().unwrap();
    // a sync after close is refused and leaves the closed queue's metadata alone
    let closed_meta = meta_text(dir.path(), "d");
    assert!(matches!(q.sync(), Err(Error::Closed)));
    assert_eq!(meta_text(dir.path(), "d"), closed_meta);
}

/// `read_batch(.., buffered_only)` serves what the reader read ahead, in
/// order, and nothing before the reader has touched the disk.
#[test]
fn buffered_reads_serve_the_read_ahead_only() {
    let dir = tempfile::TempDir::new().unwrap();
    let q = DiskQueue::open("b", dir.path(), opts(8, 64, 1 << 20)).unwrap();
    for i in 0..100u64 {
        q.put(&payload(i, 20)).unwrap();
    }
    let mut got = Vec::new();
    q.read_batch(10, &mut got, true).unwrap();
    assert!(got.is_empty(), "no segment open yet: nothing is buffered");
    q.read_batch(1, &mut got, false).unwrap();
    q.read_batch(200, &mut got, true).unwrap();
    assert_eq!(
        got.len(),
        100,
        "one read fetched the whole 2.4 KB segment ahead"
    );
    for (i, r) in got.iter().enumerate() {
        assert_eq!(&r[..8], &(i as u64).to_be_bytes());
    }
    assert_eq!(q.depth(), 0);
    q.put(&payload(100, 20)).unwrap();
    got.clear();
    q.read_batch(5, &mut got, false).unwrap();
    assert_eq!(
        got.len(),
        1,
        "appended after the read-ahead: found by a full read"
    );
}

// ------------------------------------------------------------ skip_while

/// The first 8 bytes of a `payload(seq, _)` record, as a number.
fn head_seq(head: &[u8]) -> u64 {
    u64::from_be_bytes(head[..8].try_into().expect("8 bytes"))
}

#[test]
fn skip_while_skips_matching_records_across_segments_and_stops_at_the_first_kept() {
    let dir = TempDir::new().unwrap();
    // 300-byte records, four to a segment: the skip crosses segments
    let q = DiskQueue::open("s", dir.path(), opts(8, 1 << 20, 1200)).unwrap();
    for seq in 0..10 {
        q.put(&payload(seq, 300)).unwrap();
    }
    let n = q.skip_while(100, 8, |h| head_seq(h) < 6).unwrap();
    assert_eq!(n, 6);
    assert_eq!(q.depth(), 4);
    // the first record kept is read whole, then the rest
    let rest: Vec<u64> = read_all(&q).iter().map(|r| head_seq(r)).collect();
    assert_eq!(rest, vec![6, 7, 8, 9]);
    assert!(
        !files(dir.path()).iter().any(|f| f.ends_with("000000.dat")),
        "a segment skipped through is removed like one read: {:?}",
        files(dir.path())
    );
    // max bounds it; nothing to skip is no error
    assert_eq!(q.skip_while(100, 8, |_| true).unwrap(), 0);
}

#[test]
fn skip_while_stops_at_max_and_keeps_short_records() {
    let dir = TempDir::new().unwrap();
    let q = DiskQueue::open("m", dir.path(), opts(1, 1 << 20, 1 << 20)).unwrap();
    for seq in 0..5 {
        q.put(&payload(seq, 20)).unwrap();
    }
    q.put(b"tiny").unwrap();
    q.put(&payload(9, 20)).unwrap();
    assert_eq!(q.skip_while(2, 8, |_| true).unwrap(), 2);
    assert_eq!(q.skip_while(100, 8, |_| true).unwrap(), 3);
    // a record shorter than the bytes to judge it by is not skipped
    assert_eq!(q.skip_while(100, 8, |_| true).unwrap(), 0);
    assert_eq!(&q.read().unwrap().unwrap()[..], b"tiny");
    assert_eq!(q.depth(), 1);
}

#[test]
fn skip_while_seeks_over_bodies_past_the_read_ahead_and_survives_a_restart() {
    let dir = TempDir::new().unwrap();
    let mut o = opts(8, 1 << 22, 1 << 24);
    o.sync_every = 1;
    {
        let q = DiskQueue::open("big", dir.path(), o.clone()).unwrap();
        // bodies far larger than the 64 KiB read-ahead
        for seq in 0..4 {
            q.put(&payload(seq, 1 << 20)).unwrap();
        }
        assert_eq!(q.skip_while(100, 8, |h| head_seq(h) < 3).unwrap(), 3);
        q.close().unwrap();
    }
    let q = DiskQueue::open("big", dir.path(), o).unwrap();
    assert_eq!(q.depth(), 1);
    let rest = read_all(&q);
    assert_eq!(rest.len(), 1);
    assert_eq!(head_seq(&rest[0]), 3);
    assert_eq!(rest[0].len(), 1 << 20, "the record after a seek is whole");
}

#[test]
fn skipped_records_need_no_acknowledgement() {
    let dir = TempDir::new().unwrap();
    let mut o = opts(8, 1 << 20, 1 << 20);
    o.acked_reads = true;
    o.sync_every = 1;
    {
        let q = DiskQueue::open("a", dir.path(), o.clone()).unwrap();
        for seq in 0..4 {
            q.put(&payload(seq, 20)).unwrap();
        }
        assert_eq!(q.skip_while(100, 8, |h| head_seq(h) < 2).unwrap(), 2);
        assert_eq!(q.unacked(), 0, "skipped ones are done with");
        // one read and not acknowledged: it must come back after a restart
        let mut got = Vec::new();
        q.read_batch(1, &mut got, false).unwrap();
        assert_eq!(head_seq(&got[0]), 2);
        q.close().unwrap();
    }
    let q = DiskQueue::open("a", dir.path(), o).unwrap();
    let rest: Vec<u64> = read_all(&q).iter().map(|r| head_seq(r)).collect();
    assert_eq!(
        rest,
        vec![2, 3],
        "the skipped ones never again, the unacked one again"
    );
}

#[test]
fn take_while_reads_matching_records_whole_and_leaves_the_first_refused() {
    let dir = TempDir::new().unwrap();
    let q = DiskQueue::open("t", dir.path(), opts(8, 1 << 20, 1000)).unwrap();
    for seq in 0..8 {
        q.put(&payload(seq, 300)).unwrap();
    }
    let mut got = Vec::new();
    q.take_while(100, &mut got, |d| head_seq(d) < 5).unwrap();
    assert_eq!(
        got.iter().map(|r| head_seq(r)).collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4]
    );
    assert!(got.iter().all(|r| r.len() == 300), "whole");
    // the refused one is read next, then the rest, in order
    let rest: Vec<u64> = read_all(&q).iter().map(|r| head_seq(r)).collect();
    assert_eq!(rest, vec![5, 6, 7]);
}

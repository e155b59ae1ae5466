//! nsqd durability and Go drop-in compatibility of the data directory, black-box
//! (issue 3 "must show" list; /work/shared/spec/diskqueue.md, nsqd.md §2.1, §3, §5,
//! tcp-protocol.md §3).
//!
//! Everything on disk is checked against the spec, byte for byte where the spec
//! fixes the bytes: a disk record is `[i32 BE length][i64 BE timestamp ns][u16 BE
//! attempts][16 ASCII hex id][body]`, segment files are
//! `<name>.diskqueue.%06d.dat`, the metadata is `<depth>\n<rf>,<rp>\n<wf>,<wp>\n`.
//! The drop-in and corruption tests build the data directory by hand, exactly as
//! Go's nsqd 1.3.0 would leave it, then start our nsqd on it.
//!
//! Not repeated here (see nsqd_persist.rs): items 94–101, paused-state restore,
//! topic delete removing files.

#![forbid(unsafe_code)]

use nsq_tests::*;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

// ---------------------------------------------------------------------------
// Helpers (local to this file; lib.rs is owned by someone else)
// ---------------------------------------------------------------------------

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn data_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("nsqd-durability-")
        .tempdir()
        .unwrap()
}

/// Sorted file names in `dir`.
fn files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// SIGTERM and require exit status 0.
fn stop(n: &mut Nsqd) {
    let st = n.sigterm_and_wait(secs(20));
    assert_eq!(
        st.code(),
        Some(0),
        "nsqd exit status after SIGTERM: {st}\nstderr:\n{}",
        n.stderr()
    );
}

/// `<data>/<name>.diskqueue.<NNNNNN>.dat`
fn seg(dir: &Path, name: &str, n: u32) -> PathBuf {
    dir.join(format!("{name}.diskqueue.{n:06}.dat"))
}

/// `<data>/<name>.diskqueue.meta.dat`
fn meta_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.diskqueue.meta.dat"))
}

/// diskqueue.md §3: exactly three `\n`-terminated lines.
fn meta_text(depth: i64, rf: i64, rp: i64, wf: i64, wp: i64) -> String {
    format!("{depth}\n{rf},{rp}\n{wf},{wp}\n")
}

/// tcp-protocol.md §3: the message encoding (also the disk record payload).
fn encode_msg(ts: i64, attempts: u16, id: &str, body: &[u8]) -> Vec<u8> {
    assert_eq!(id.len(), 16, "message ids are 16 ASCII hex bytes");
    let mut v = Vec::with_capacity(26 + body.len());
    v.extend_from_slice(&ts.to_be_bytes());
    v.extend_from_slice(&attempts.to_be_bytes());
    v.extend_from_slice(id.as_bytes());
    v.extend_from_slice(body);
    v
}

/// diskqueue.md §2: `[i32 BE length][payload]`.
fn disk_record(payload: &[u8]) -> Vec<u8> {
    let mut v = (payload.len() as i32).to_be_bytes().to_vec();
    v.extend_from_slice(payload);
    v
}

/// On-disk size of a record holding a message with a `body_len`-byte body.
fn record_size(body_len: usize) -> u64 {
    (4 + 26 + body_len) as u64
}

/// A message as written by Go nsqd to a segment.
#[derive(Clone, Debug)]
struct DiskMsg {
    ts: i64,
    attempts: u16,
    id: String,
    body: Vec<u8>,
}

impl DiskMsg {
    fn new(ts: i64, id: &str, body: &[u8]) -> DiskMsg {
        DiskMsg {
            ts,
            attempts: 0,
            id: id.to_string(),
            body: body.to_vec(),
        }
    }
    fn record(&self) -> Vec<u8> {
        disk_record(&encode_msg(self.ts, self.attempts, &self.id, &self.body))
    }
}

fn segment_bytes(msgs: &[DiskMsg]) -> Vec<u8> {
    msgs.iter().flat_map(|m| m.record()).collect()
}

/// Create a file with mode 0600 (as go-diskqueue and nsqd do).
fn write_0600(path: &Path, bytes: &[u8]) {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
    f.write_all(bytes).unwrap();
    f.sync_all().unwrap();
}

fn file_size(p: &Path) -> Option<u64> {
    fs::metadata(p).ok().map(|m| m.len())
}

/// Wait until the channel's (depth, backend_depth) equal `want`; report the last value otherwise.
fn wait_chan_depths(
    n: &Nsqd,
    topic: &str,
    channel: &str,
    want: (i64, i64),
    timeout: Duration,
) -> Value {
    let mut last = Value::Null;
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(c) = n.channel_stats(topic, channel) {
            if (int(&c, "depth"), int(&c, "backend_depth")) == want {
                return c;
            }
            last = c;
        }
        if std::time::Instant::now() >= deadline {
            panic!("channel {topic}/{channel}: expected (depth, backend_depth) = {want:?} within {timeout:?}; last stats: {last}");
        }
        sleep_ms(50);
    }
}

/// Wait until a file's content equals `want`; report what it was otherwise.
fn wait_file_eq(p: &Path, want: &str, timeout: Duration) {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let got = fs::read_to_string(p).ok();
        if got.as_deref() == Some(want) {
            return;
        }
        if std::time::Instant::now() >= deadline {
            panic!(
                "{}: expected {want:?} within {timeout:?}, got {got:?}",
                p.display()
            );
        }
        sleep_ms(50);
    }
}

/// Set RDY, receive exactly `n` messages (FIN each), then require silence.
fn consume_exactly(c: &mut Conn, n: usize, rdy: i64) -> Vec<Msg> {
    c.rdy(rdy);
    let got = recv_msgs(c, n, secs(30), true);
    c.expect_nothing(ms(600));
    got
}

/// Assert `got` is exactly the multiset `want` of bodies (no loss, no duplicate).
fn assert_exactly_once(got: &[Msg], want: &[Vec<u8>], what: &str) {
    let mut counts: BTreeMap<&[u8], usize> = BTreeMap::new();
    for m in got {
        *counts.entry(m.body.as_slice()).or_default() += 1;
    }
    let dups: Vec<String> = counts
        .iter()
        .filter(|(_, &c)| c > 1)
        .map(|(b, c)| format!("{:?}×{c}", String::from_utf8_lossy(b)))
        .collect();
    assert!(dups.is_empty(), "{what}: duplicate deliveries: {dups:?}");
    let want_set: BTreeSet<&[u8]> = want.iter().map(|b| b.as_slice()).collect();
    let got_set: BTreeSet<&[u8]> = counts.keys().copied().collect();
    let missing: Vec<String> = want_set.difference(&got_set).map(|b| short(b)).collect();
    let extra: Vec<String> = got_set.difference(&want_set).map(|b| short(b)).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{what}: {} received, {} expected; missing {missing:?}; unexpected {extra:?}",
        got.len(),
        want.len()
    );
}

fn short(b: &[u8]) -> String {
    if b.len() > 40 {
        format!(
            "<{} bytes starting {:?}>",
            b.len(),
            String::from_utf8_lossy(&b[..20])
        )
    } else {
        format!("{:?}", String::from_utf8_lossy(b))
    }
}

/// diskqueue.md §6: the unreadable segment `file` is renamed `<file>.bad`
/// (content untouched) and the original name is gone.
fn wait_bad(dp: &Path, file: &str, content: &[u8], what: &str) {
    let bad = dp.join(format!("{file}.bad"));
    let deadline = std::time::Instant::now() + secs(3);
    while !bad.exists() || dp.join(file).exists() {
        if std::time::Instant::now() >= deadline {
            panic!(
                "{what}: expected {file} renamed to {file}.bad within 3 s; data dir: {:?}",
                files(dp)
            );
        }
        sleep_ms(50);
    }
    assert!(
        fs::read(&bad).unwrap() == content,
        "{what}: {file}.bad must hold the original bytes"
    );
}

fn refs(v: &[Vec<u8>]) -> Vec<&[u8]> {
    v.iter().map(|b| b.as_slice()).collect()
}

fn http_ok(n: &Nsqd, path: &str) {
    let r = n.post(path, b"");
    assert_eq!(r.status, 200, "POST {path}: {}", r.text());
}

/// `/topic/create` then `/channel/create` (the topic must exist first).
fn create_channel(n: &Nsqd, topic: &str, channel: &str) {
    http_ok(n, &format!("/topic/create?topic={topic}"));
    http_ok(
        n,
        &format!("/channel/create?topic={topic}&channel={channel}"),
    );
}

// ---------------------------------------------------------------------------
// 1. Overflow to disk
// ---------------------------------------------------------------------------

/// 1000 bodies of 14 bytes each: every record is 4+26+14 = 44 bytes on disk.
fn overflow_bodies() -> Vec<Vec<u8>> {
    (0..1000)
        .map(|i| format!("overflow-{i:05}").into_bytes())
        .collect()
}

const REC: u64 = 44;

#[test]
fn overflow_mem_queue_10_spills_990_to_channel_segment() {
    let n = Nsqd::start(&["--mem-queue-size=10", "--sync-timeout=200ms"]);
    create_channel(&n, "ovf", "c");
    let bodies = overflow_bodies();
    assert!(bodies.iter().all(|b| record_size(b.len()) == REC));
    let mut p = n.connect();
    p.mpublish("ovf", &refs(&bodies));

    // 10 in the channel's memory queue, 990 in its disk queue (nothing left in the topic).
    let ch = wait_chan_depths(&n, "ovf", "c", (1000, 990), secs(10));
    assert_eq!(ch["message_count"], 1000, "{ch}");
    let t = wait_for(secs(5), "topic ovf drained into its channel", || {
        n.topic_stats("ovf").filter(|t| t["depth"] == 0)
    });
    assert_eq!(t["message_count"], 1000, "{t}");

    let dp = n.data_path().to_path_buf();
    let dat = seg(&dp, "ovf:c", 0);
    assert_eq!(
        file_size(&dat),
        Some(990 * REC),
        "{} must hold exactly the 990 spilled records (990 × (4+26+14) bytes); dir: {:?}",
        dat.display(),
        files(&dp)
    );
    assert!(
        !seg(&dp, "ovf:c", 1).exists(),
        "one segment only: {:?}",
        files(&dp)
    );
    // The sync timer persists the metadata (diskqueue.md §3, §8).
    wait_file_eq(
        &meta_path(&dp, "ovf:c"),
        &meta_text(990, 0, 0, 0, 990 * REC as i64),
        secs(5),
    );

    // Every record is a well-formed message record of one of our bodies, attempts 0.
    let raw = fs::read(&dat).unwrap();
    let mut pos = 0;
    let mut on_disk = BTreeSet::new();
    while pos < raw.len() {
        let len = i32::from_be_bytes(raw[pos..pos + 4].try_into().unwrap()) as usize;
        assert_eq!(len, 40, "record length at offset {pos}");
        let m = Msg::parse(&raw[pos + 4..pos + 4 + len]);
        assert_eq!(m.attempts, 0, "never delivered → attempts 0 on disk: {m:?}");
        assert!(
            m.id.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
            "id is lowercase hex: {m:?}"
        );
        assert!(
            on_disk.insert(m.body.clone()),
            "record written twice: {m:?}"
        );
        pos += 4 + len;
    }
    assert_eq!(on_disk.len(), 990);

    let mut c = n.connect();
    c.sub("ovf", "c");
    let got = consume_exactly(&mut c, 1000, 200);
    assert_exactly_once(&got, &bodies, "mem-queue-size=10 overflow");
    assert!(
        got.iter().all(|m| m.attempts == 1),
        "first delivery has attempts 1"
    );
    wait_chan_depths(&n, "ovf", "c", (0, 0), secs(5));
    // Consumed records stay in the current write file; the reader sits at its end.
    wait_file_eq(
        &meta_path(&dp, "ovf:c"),
        &meta_text(0, 0, 990 * REC as i64, 0, 990 * REC as i64),
        secs(5),
    );
}

#[test]
fn overflow_mem_queue_0_puts_everything_on_disk() {
    let n = Nsqd::start(&["--mem-queue-size=0", "--sync-timeout=200ms"]);
    create_channel(&n, "ovf0", "c");
    let bodies = overflow_bodies();
    let mut p = n.connect();
    p.mpublish("ovf0", &refs(&bodies));

    wait_chan_depths(&n, "ovf0", "c", (1000, 1000), secs(10));
    wait_for(secs(5), "topic ovf0 drained", || {
        n.topic_stats("ovf0").filter(|t| t["depth"] == 0)
    });
    let dp = n.data_path().to_path_buf();
    let dat = seg(&dp, "ovf0:c", 0);
    assert_eq!(
        file_size(&dat),
        Some(1000 * REC),
        "{}: 1000 × 44 bytes; dir {:?}",
        dat.display(),
        files(&dp)
    );
    wait_file_eq(
        &meta_path(&dp, "ovf0:c"),
        &meta_text(1000, 0, 0, 0, 1000 * REC as i64),
        secs(5),
    );

    let mut c = n.connect();
    c.sub("ovf0", "c");
    let got = consume_exactly(&mut c, 1000, 200);
    assert_exactly_once(&got, &bodies, "mem-queue-size=0");
    // All from one disk queue, written in publish order: read back in that order.
    let order: Vec<Vec<u8>> = got.iter().map(|m| m.body.clone()).collect();
    assert_eq!(order, bodies, "a single disk queue is FIFO");
    wait_chan_depths(&n, "ovf0", "c", (0, 0), secs(5));
    wait_file_eq(
        &meta_path(&dp, "ovf0:c"),
        &meta_text(0, 0, 1000 * REC as i64, 0, 1000 * REC as i64),
        secs(5),
    );
}

#[test]
fn overflow_small_max_bytes_per_file_rolls_segments_and_deletes_read_ones() {
    // 4000-byte segments hold 90 records of 44 bytes (3960; a 91st would make 4004 > 4000).
    // 1000 records → segments 000000..000010 full (3960 bytes) + 000011 with 10 records (440).
    let n = Nsqd::start(&[
        "--mem-queue-size=0",
        "--max-bytes-per-file=4000",
        "--sync-timeout=200ms",
    ]);
    create_channel(&n, "roll", "c");
    let bodies = overflow_bodies();
    let mut p = n.connect();
    p.mpublish("roll", &refs(&bodies));
    wait_chan_depths(&n, "roll", "c", (1000, 1000), secs(10));
    wait_for(secs(5), "topic roll drained", || {
        n.topic_stats("roll").filter(|t| t["depth"] == 0)
    });

    let dp = n.data_path().to_path_buf();
    for i in 0..=11u32 {
        let want = if i < 11 { 90 * REC } else { 10 * REC };
        assert_eq!(
            file_size(&seg(&dp, "roll:c", i)),
            Some(want),
            "segment {i}; dir {:?}",
            files(&dp)
        );
    }
    assert!(
        !seg(&dp, "roll:c", 12).exists(),
        "no 13th segment: {:?}",
        files(&dp)
    );
    wait_file_eq(
        &meta_path(&dp, "roll:c"),
        &meta_text(1000, 0, 0, 11, 10 * REC as i64),
        secs(5),
    );

    // Read 200 one at a time: the reader has taken at most 201 records, so
    // segments 0 and 1 (records 0..179) are consumed and deleted, 2.. remain.
    let mut c = n.connect();
    c.sub("roll", "c");
    c.rdy(1);
    let mut got = recv_msgs(&mut c, 200, secs(30), true);
    wait_for(
        secs(5),
        "segments 000000 and 000001 deleted once read",
        || (!seg(&dp, "roll:c", 0).exists() && !seg(&dp, "roll:c", 1).exists()).then_some(()),
    );
    for i in 2..=11u32 {
        assert!(
            seg(&dp, "roll:c", i).exists(),
            "segment {i} not fully read yet must still exist: {:?}",
            files(&dp)
        );
    }
    got.extend(consume_exactly(&mut c, 800, 200));
    assert_exactly_once(&got, &bodies, "multi-segment");
    let order: Vec<Vec<u8>> = got.iter().map(|m| m.body.clone()).collect();
    assert_eq!(order, bodies, "segments are read in order");
    wait_chan_depths(&n, "roll", "c", (0, 0), secs(5));
    wait_for(secs(5), "segments 000000..000010 deleted", || {
        (0..=10u32)
            .all(|i| !seg(&dp, "roll:c", i).exists())
            .then_some(())
    });
    assert!(
        seg(&dp, "roll:c", 11).exists(),
        "the current write segment stays: {:?}",
        files(&dp)
    );
    wait_file_eq(
        &meta_path(&dp, "roll:c"),
        &meta_text(0, 11, 10 * REC as i64, 11, 10 * REC as i64),
        secs(5),
    );
    assert!(
        !files(&dp)
            .iter()
            .any(|f| f.starts_with("roll:c.") && f.ends_with(".bad")),
        "no segment quarantined: {:?}",
        files(&dp)
    );
}

// ---------------------------------------------------------------------------
// 2. Clean restart
// ---------------------------------------------------------------------------

#[test]
fn clean_restart_redelivers_memory_inflight_deferred_and_dpub_exactly_once() {
    let dir = data_dir();
    // mem-queue-size=2: part of the backlog is in memory, part on disk while running.
    let args = ["--mem-queue-size=2"];
    let mut n = Nsqd::start_in(dir.path(), &args);
    create_channel(&n, "rs", "c");

    // 22 first-wave bodies: mixed sizes, binary, 1 MiB (= --max-msg-size).
    let mut first_wave: Vec<Vec<u8>> = Vec::new();
    for i in 0..22usize {
        let b = match i {
            2 => (0..=255u8).collect::<Vec<u8>>(),
            3 => (0..1024 * 1024).map(|k| (k * 7 % 251) as u8).collect(),
            _ => {
                let mut v = format!("wave1-{i:02}-").into_bytes();
                v.extend(std::iter::repeat_n(b'x', i * 53));
                v.extend_from_slice(&[0, b'\n', b'\r', 0xff]);
                v
            }
        };
        first_wave.push(b);
    }
    let mut p = n.connect();
    let t0 = now_ns();
    for b in &first_wave {
        p.publish("rs", b);
    }
    let t1 = now_ns();

    let mut c = n.connect();
    c.sub("rs", "c");
    c.rdy(100);
    let first = recv_msgs(&mut c, 22, secs(20), false);
    c.rdy(0);
    c.expect_nothing(ms(300));
    assert_exactly_once(&first, &first_wave, "first delivery");
    for m in &first {
        assert_eq!(m.attempts, 1, "{m:?}");
        assert!(
            m.ts >= t0 && m.ts <= t1,
            "timestamp {} is the publish time [{t0}, {t1}]",
            m.ts
        );
    }
    let idx = |body: &[u8]| first_wave.iter().position(|b| b == body).unwrap();
    let mut inflight = Vec::new();
    let mut requeued = Vec::new();
    for m in &first {
        match idx(&m.body) % 4 {
            0 => c.fin(&m.id),
            1 => {
                c.req(&m.id, 600_000);
                requeued.push(m.clone());
            }
            _ => inflight.push(m.clone()),
        }
    }
    assert_eq!((inflight.len(), requeued.len()), (10, 6));
    assert!(
        inflight.iter().any(|m| m.body.len() == 1024 * 1024),
        "the 1 MiB body stays in flight"
    );
    assert!(
        inflight
            .iter()
            .any(|m| m.body == (0..=255u8).collect::<Vec<u8>>()),
        "the 0..255 body stays in flight"
    );
    wait_for(secs(5), "in_flight 10, deferred 6", || {
        n.channel_stats("rs", "c")
            .filter(|s| s["in_flight_count"] == 10 && s["deferred_count"] == 6)
    });

    // Never delivered: 4 plain PUBs (RDY 0) and 3 DPUBs deferred for 10 minutes.
    let late: Vec<Vec<u8>> = vec![
        b"late-0".to_vec(),
        (0..=255u8).rev().chain(b"late-1".iter().copied()).collect(),
        [b"late-2-".to_vec(), vec![0xAB; 512 * 1024]].concat(),
        b"late-3".to_vec(),
    ];
    let dpub: Vec<Vec<u8>> = vec![
        b"dpub-0".to_vec(),
        vec![0, 1, 2, 0xfe, b'd', b'p', b'1'],
        b"dpub-2".to_vec(),
    ];
    let t2 = now_ns();
    for b in &late {
        p.publish("rs", b);
    }
    for b in &dpub {
        p.send(&dpub_cmd("rs", 600_000, b));
        p.expect_ok();
    }
    let t3 = now_ns();
    let before = wait_for(secs(5), "depth 4, in_flight 10, deferred 9", || {
        n.channel_stats("rs", "c")
            .filter(|s| s["depth"] == 4 && s["in_flight_count"] == 10 && s["deferred_count"] == 9)
    });
    assert_eq!(
        before["backend_depth"], 2,
        "mem-queue-size=2: two late messages spilled to disk: {before}"
    );

    stop(&mut n);

    let n = Nsqd::start_in(dir.path(), &args);
    // Everything now waits in the channel's disk queue (memory, in-flight, deferred were flushed).
    let ch = wait_chan_depths(&n, "rs", "c", (23, 23), secs(5));
    assert_eq!(
        (ch["in_flight_count"].clone(), ch["deferred_count"].clone()),
        (0.into(), 0.into()),
        "{ch}"
    );
    let t = n.topic_stats("rs").expect("topic rs restored");
    assert_eq!((int(&t, "depth"), int(&t, "backend_depth")), (0, 0), "{t}");

    let mut c = n.connect();
    c.sub("rs", "c");
    let again = consume_exactly(&mut c, 23, 100);
    let want: Vec<Vec<u8>> = inflight
        .iter()
        .chain(requeued.iter())
        .map(|m| m.body.clone())
        .chain(late.iter().cloned())
        .chain(dpub.iter().cloned())
        .collect();
    assert_exactly_once(&again, &want, "after clean restart");

    let mut ids = BTreeSet::new();
    for m in &again {
        assert!(ids.insert(m.id.clone()), "duplicate id {m:?}");
        if let Some(orig) = inflight
            .iter()
            .chain(requeued.iter())
            .find(|o| o.body == m.body)
        {
            assert_eq!(m.id, orig.id, "id preserved for {}", short(&m.body));
            assert_eq!(m.ts, orig.ts, "timestamp preserved for {}", short(&m.body));
            assert_eq!(
                m.attempts,
                2,
                "delivered once before the restart → attempts 2: {}",
                short(&m.body)
            );
        } else {
            assert_eq!(
                m.attempts,
                1,
                "never delivered before → attempts 1: {}",
                short(&m.body)
            );
            assert!(
                m.ts >= t2 && m.ts <= t3,
                "timestamp of {} is its publish time [{t2}, {t3}], got {}",
                short(&m.body),
                m.ts
            );
        }
    }
    // nsqd.md §5.3 / diskqueue.md §9a: at shutdown the channel writes memory-queue
    // messages, then in-flight, then deferred — after what had spilled while running.
    let cat = |m: &Msg| {
        if late.contains(&m.body) {
            0
        } else if inflight.iter().any(|o| o.body == m.body) {
            1
        } else {
            2
        }
    };
    let cats: Vec<i32> = again.iter().map(cat).collect();
    let mut sorted = cats.clone();
    sorted.sort();
    assert_eq!(
        cats, sorted,
        "disk order must be: queued (0), in-flight (1), deferred/REQ'd (2)"
    );
    wait_chan_depths(&n, "rs", "c", (0, 0), secs(5));
}

// ---------------------------------------------------------------------------
// 3. Drop-in on a data directory left by Go nsqd 1.3.0
// ---------------------------------------------------------------------------

const TS0: i64 = 1_700_000_000_123_456_789;

#[test]
fn dropin_go_data_dir_is_picked_up() {
    let dir = data_dir();
    let dp = dir.path();
    write_0600(
        &dp.join("nsqd.dat"),
        br#"{"topics":[{"name":"legacy","paused":false,"channels":[{"name":"c1","paused":false},{"name":"c2","paused":true}]}],"version":"1.3.0"}"#,
    );
    // c1: four records, the first one already consumed (readPos after it).
    let c1 = vec![
        DiskMsg::new(TS0 - 5, "0a1b2c3d4e5f6070", b"legacy-c1-consumed"),
        DiskMsg::new(TS0 + 1, "0a1b2c3d4e5f6071", b"legacy-c1-one"),
        DiskMsg::new(
            TS0 + 2,
            "0a1b2c3d4e5f6072",
            &(0..=255u8).collect::<Vec<u8>>(),
        ),
        DiskMsg::new(
            TS0 + 3_000_000_007,
            "0a1b2c3d4e5f6073",
            b"legacy-c1-three \x00\n",
        ),
    ];
    let c1_bytes = segment_bytes(&c1);
    let c1_consumed = c1[0].record().len() as i64;
    write_0600(&seg(dp, "legacy:c1", 0), &c1_bytes);
    write_0600(
        &meta_path(dp, "legacy:c1"),
        meta_text(3, 0, c1_consumed, 0, c1_bytes.len() as i64).as_bytes(),
    );
    // c2 (paused): two records.
    let c2 = vec![
        DiskMsg::new(TS0 + 10, "0a1b2c3d4e5f6091", b"legacy-c2-a"),
        DiskMsg::new(TS0 + 11, "0a1b2c3d4e5f6092", b"legacy-c2-b"),
    ];
    let c2_bytes = segment_bytes(&c2);
    write_0600(&seg(dp, "legacy:c2", 0), &c2_bytes);
    write_0600(
        &meta_path(dp, "legacy:c2"),
        meta_text(2, 0, 0, 0, c2_bytes.len() as i64).as_bytes(),
    );
    // the topic's own backlog: two records, to be copied to both channels.
    let tq = vec![
        DiskMsg::new(TS0 + 20, "0a1b2c3d4e5f6081", b"legacy-topic-x"),
        DiskMsg::new(TS0 + 21, "0a1b2c3d4e5f6082", b"legacy-topic-y"),
    ];
    let tq_bytes = segment_bytes(&tq);
    write_0600(&seg(dp, "legacy", 0), &tq_bytes);
    write_0600(
        &meta_path(dp, "legacy"),
        meta_text(2, 0, 0, 0, tq_bytes.len() as i64).as_bytes(),
    );

    let mut n = Nsqd::start_in(dp, &[]);
    // The topic pump moves the topic backlog into both channels' memory queues.
    let t = wait_for(
        secs(5),
        "topic legacy backlog moved to its channels",
        || n.topic_stats("legacy").filter(|t| t["depth"] == 0),
    );
    assert_eq!(t["paused"], false, "{t}");
    let s1 = wait_chan_depths(&n, "legacy", "c1", (5, 3), secs(5));
    assert_eq!(s1["paused"], false, "{s1}");
    let s2 = wait_chan_depths(&n, "legacy", "c2", (4, 2), secs(5));
    assert_eq!(s2["paused"], true, "c2 restored paused from nsqd.dat: {s2}");

    let key = |m: &Msg| (m.id.clone(), m.ts, m.body.clone(), m.attempts);
    let want_key = |d: &DiskMsg| (d.id.clone(), d.ts, d.body.clone(), d.attempts + 1);

    let mut a = n.connect();
    a.sub("legacy", "c1");
    let got: BTreeSet<_> = consume_exactly(&mut a, 5, 10).iter().map(key).collect();
    let want: BTreeSet<_> = c1[1..].iter().chain(tq.iter()).map(want_key).collect();
    assert_eq!(got, want, "c1 delivers its 3 unconsumed records and the 2 topic records, ids/timestamps/bodies as on disk, attempts 0+1");

    let mut b = n.connect();
    b.sub("legacy", "c2");
    b.rdy(10);
    b.expect_nothing(ms(500));
    http_ok(&n, "/channel/unpause?topic=legacy&channel=c2");
    let got: BTreeSet<_> = recv_msgs(&mut b, 4, secs(10), true)
        .iter()
        .map(key)
        .collect();
    b.expect_nothing(ms(500));
    let want: BTreeSet<_> = c2.iter().chain(tq.iter()).map(want_key).collect();
    assert_eq!(got, want, "c2 after unpause");
    wait_chan_depths(&n, "legacy", "c1", (0, 0), secs(5));
    wait_chan_depths(&n, "legacy", "c2", (0, 0), secs(5));

    stop(&mut n);
    // Left for the next nsqd (Go or ours) in the same format: readers at the end of
    // the current write files, which stay (diskqueue.md §9a).
    let l1 = c1_bytes.len() as i64;
    let l2 = c2_bytes.len() as i64;
    let lt = tq_bytes.len() as i64;
    assert_eq!(
        fs::read_to_string(meta_path(dp, "legacy:c1")).ok(),
        Some(meta_text(0, 0, l1, 0, l1))
    );
    assert_eq!(
        fs::read_to_string(meta_path(dp, "legacy:c2")).ok(),
        Some(meta_text(0, 0, l2, 0, l2))
    );
    assert_eq!(
        fs::read_to_string(meta_path(dp, "legacy")).ok(),
        Some(meta_text(0, 0, lt, 0, lt))
    );
    assert_eq!(
        fs::read(seg(dp, "legacy:c1", 0)).ok(),
        Some(c1_bytes),
        "segment untouched"
    );
    let md: Value =
        serde_json::from_str(&fs::read_to_string(dp.join("nsqd.dat")).unwrap()).unwrap();
    let topic = &md["topics"][0];
    assert_eq!(topic["name"], "legacy", "{md}");
    let mut chans: Vec<(String, bool)> = topic["channels"]
        .as_array()
        .unwrap_or_else(|| panic!("channels array: {md}"))
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["paused"].as_bool().unwrap(),
            )
        })
        .collect();
    chans.sort();
    assert_eq!(
        chans,
        vec![("c1".into(), false), ("c2".into(), false)],
        "{md}"
    );
}

/// Go's diskqueue does not use `depth` to decide whether data is available
/// (diskqueue.md §5: `readFileNum < writeFileNum || readPos < writePos`), and
/// after a crash + restart it lets depth drift low or negative while the reader
/// drains the records past the stale write position (diskqueue.md §3, §9). A
/// clean shutdown then persists that low depth. Example: crash with meta
/// `3\n0,0\n0,<3 records>\n` and 5 records in the file; restart (writer skips to
/// file 1); 3 consumed; SIGTERM → `0\n0,<3 records>\n1,0\n` with 2 records still
/// unread (`-1\n...` when the crash-time meta said 2). Go nsqd started on that
/// directory delivers the 2 records; so must ours — for channel queues and for
/// the topic queue — and a message published afterwards must not get stuck
/// behind them either.
#[test]
fn dropin_go_meta_with_low_depth_after_crash_recovery_still_delivers() {
    let dir = data_dir();
    let dp = dir.path();
    write_0600(
        &dp.join("nsqd.dat"),
        br#"{"topics":[{"name":"lowd","paused":false,"channels":[{"name":"zero","paused":false},{"name":"neg","paused":false}]}],"version":"1.3.0"}"#,
    );
    let five = |tag: &str, id_prefix: &str, ts: i64| -> Vec<DiskMsg> {
        (0..5)
            .map(|i| {
                DiskMsg::new(
                    ts + i,
                    &format!("{id_prefix}{i}"),
                    format!("lowd-{tag}-{i}").as_bytes(),
                )
            })
            .collect()
    };
    let mut unread: BTreeMap<&str, Vec<DiskMsg>> = BTreeMap::new();
    for (name, depth, id_prefix, ts) in [
        ("lowd:zero", 0i64, "0a1b2c3d4e5f60c", TS0),
        ("lowd:neg", -1, "0a1b2c3d4e5f60d", TS0 + 100),
        ("lowd", 0, "0a1b2c3d4e5f60e", TS0 + 200),
    ] {
        let recs = five(name, id_prefix, ts);
        let after3: i64 = recs[..3].iter().map(|m| m.record().len() as i64).sum();
        write_0600(&seg(dp, name, 0), &segment_bytes(&recs));
        write_0600(
            &meta_path(dp, name),
            meta_text(depth, 0, after3, 1, 0).as_bytes(),
        );
        unread.insert(name, recs[3..].to_vec());
    }

    let n = Nsqd::start_in(dp, &["--mem-queue-size=0"]);
    let mut p = n.connect();
    p.publish("lowd", b"fresh-after-start");
    for ch in ["zero", "neg"] {
        let mut c = n.connect();
        c.sub("lowd", ch);
        c.rdy(10);
        let mut got = Vec::new();
        while let Some(f) = c.recv_timeout(secs(3)) {
            let m = f.msg();
            c.fin(&m.id);
            got.push(m);
        }
        let got_bodies: BTreeSet<String> = got.iter().map(|m| m.body_str()).collect();
        let chan_name = format!("lowd:{ch}");
        let own: Vec<&DiskMsg> = unread[chan_name.as_str()].iter().collect();
        let topic: Vec<&DiskMsg> = unread["lowd"].iter().collect();
        let missing_own: Vec<String> = own
            .iter()
            .map(|d| String::from_utf8_lossy(&d.body).into_owned())
            .filter(|b| !got_bodies.contains(b))
            .collect();
        let missing_topic: Vec<String> = topic
            .iter()
            .map(|d| String::from_utf8_lossy(&d.body).into_owned())
            .filter(|b| !got_bodies.contains(b))
            .collect();
        let fresh = got_bodies.contains("fresh-after-start");
        assert!(
            missing_own.is_empty() && missing_topic.is_empty() && fresh,
            "channel {ch}: undelivered channel-queue records {missing_own:?} (meta depth {}), undelivered topic-queue records {missing_topic:?} (meta depth 0), fresh message delivered: {fresh}; got {got:?}",
            if ch == "zero" { 0 } else { -1 }
        );
        assert_eq!(got.len(), 5, "{ch}: exactly once: {got:?}");
        for m in &got {
            if let Some(d) = own.iter().chain(topic.iter()).find(|d| d.body == m.body) {
                assert_eq!((&m.id, m.ts, m.attempts), (&d.id, d.ts, 1), "{ch}: {m:?}");
            }
        }
    }
}

// ---------------------------------------------------------------------------
// 4. Corruption → `.bad`
// ---------------------------------------------------------------------------

#[test]
fn corruption_garbage_length_quarantines_segment_and_continues_with_next() {
    let dir = data_dir();
    let dp = dir.path();
    write_0600(
        &dp.join("nsqd.dat"),
        br#"{"topics":[{"name":"corrupt","paused":false,"channels":[{"name":"c","paused":false}]}],"version":"1.3.0"}"#,
    );
    let good0: Vec<DiskMsg> = (0..3)
        .map(|i| {
            DiskMsg::new(
                TS0 + i,
                &format!("0a1b2c3d4e5f60a{i}"),
                format!("seg0-good-{i}").as_bytes(),
            )
        })
        .collect();
    let good1: Vec<DiskMsg> = (0..4)
        .map(|i| {
            DiskMsg::new(
                TS0 + 100 + i,
                &format!("0a1b2c3d4e5f60b{i}"),
                format!("seg1-good-{i}").as_bytes(),
            )
        })
        .collect();
    let mut seg0 = segment_bytes(&good0);
    seg0.extend_from_slice(&[0xFF, 0xFF, 0xFF, 0xF0]); // record length -16
    seg0.extend_from_slice(&encode_msg(
        TS0 + 50,
        0,
        "0a1b2c3d4e5f60af",
        b"lost-behind-garbage",
    ));
    let seg1 = segment_bytes(&good1);
    write_0600(&seg(dp, "corrupt:c", 0), &seg0);
    write_0600(&seg(dp, "corrupt:c", 1), &seg1);
    // As Go wrote it: 8 records put (3 + the one whose length got damaged + 4), none read.
    write_0600(
        &meta_path(dp, "corrupt:c"),
        meta_text(8, 0, 0, 1, seg1.len() as i64).as_bytes(),
    );

    let mut n = Nsqd::start_in(dp, &[]);

    // A second, unrelated client keeps being served.
    let mut other = n.connect();
    other.sub("other", "c");
    other.rdy(100);
    let mut p = n.connect();
    p.publish("other", b"other-before");
    assert_eq!(other.expect_msg_within(secs(5)).body, b"other-before");

    let mut a = n.connect();
    a.sub("corrupt", "c");
    let got = consume_exactly(&mut a, 7, 100);
    let got: Vec<_> = got
        .iter()
        .map(|m| (m.id.clone(), m.ts, m.body.clone(), m.attempts))
        .collect();
    let want: Vec<_> = good0
        .iter()
        .chain(good1.iter())
        .map(|d| (d.id.clone(), d.ts, d.body.clone(), 1u16))
        .collect();
    assert_eq!(
        got, want,
        "the 3 records before the garbage length, then every record of the next segment, in order"
    );

    let r = n.get("/ping");
    assert_eq!(
        (r.status, r.text()),
        (200, "OK".to_string()),
        "a read error does not make nsqd unhealthy"
    );
    assert!(n.is_running(), "nsqd keeps running");
    wait_bad(
        dp,
        "corrupt:c.diskqueue.000000.dat",
        &seg0,
        "garbage length",
    );
    // Reader caught up with the writer: the tail check forces depth to 0.
    wait_chan_depths(&n, "corrupt", "c", (0, 0), secs(5));
    assert_eq!(n.stats("")["health"], "OK");

    p.publish("other", b"other-after");
    assert_eq!(other.expect_msg_within(secs(5)).body, b"other-after");
    p.publish("corrupt", b"corrupt-after");
    let m = a.expect_msg_within(secs(5));
    assert_eq!((m.body.as_slice(), m.attempts), (&b"corrupt-after"[..], 1));
    a.fin(&m.id);
    n.assert_alive();
    stop(&mut n);
}

#[test]
fn corruption_truncated_last_record_is_quarantined() {
    let dir = data_dir();
    let dp = dir.path();
    write_0600(
        &dp.join("nsqd.dat"),
        br#"{"topics":[{"name":"trunc","paused":false,"channels":[{"name":"crash","paused":false},{"name":"mid","paused":false}]}],"version":"1.3.0"}"#,
    );
    let truncated = |ts: i64, id: &str| {
        // a 60-byte message record whose last 30 bytes never reached the disk
        let full = disk_record(&encode_msg(ts, 0, id, &[b'z'; 34]));
        full[..full.len() - 30].to_vec()
    };
    // (a) "crash": Go died while appending. Its last synced metadata covers the first
    // two records; the file holds 3 whole records and a partial 4th. On start the
    // writer skips to file 1 and the reader reads file 0 to its real end.
    let crash: Vec<DiskMsg> = (0..3)
        .map(|i| {
            DiskMsg::new(
                TS0 + i,
                &format!("0a1b2c3d4e5f60d{i}"),
                format!("crash-good-{i}").as_bytes(),
            )
        })
        .collect();
    let mut crash0 = segment_bytes(&crash);
    let crash_synced: i64 = crash[..2].iter().map(|m| m.record().len() as i64).sum();
    crash0.extend(truncated(TS0 + 9, "0a1b2c3d4e5f60df"));
    write_0600(&seg(dp, "trunc:crash", 0), &crash0);
    write_0600(
        &meta_path(dp, "trunc:crash"),
        meta_text(2, 0, 0, 0, crash_synced).as_bytes(),
    );
    // (b) "mid": a complete segment ending in a truncated record, followed by a good one.
    let mid0: Vec<DiskMsg> = (0..2)
        .map(|i| {
            DiskMsg::new(
                TS0 + 20 + i,
                &format!("0a1b2c3d4e5f60e{i}"),
                format!("mid0-good-{i}").as_bytes(),
            )
        })
        .collect();
    let mid1: Vec<DiskMsg> = (0..2)
        .map(|i| {
            DiskMsg::new(
                TS0 + 30 + i,
                &format!("0a1b2c3d4e5f60f{i}"),
                format!("mid1-good-{i}").as_bytes(),
            )
        })
        .collect();
    let mut mid0_bytes = segment_bytes(&mid0);
    mid0_bytes.extend(truncated(TS0 + 29, "0a1b2c3d4e5f60ef"));
    let mid1_bytes = segment_bytes(&mid1);
    write_0600(&seg(dp, "trunc:mid", 0), &mid0_bytes);
    write_0600(&seg(dp, "trunc:mid", 1), &mid1_bytes);
    write_0600(
        &meta_path(dp, "trunc:mid"),
        meta_text(5, 0, 0, 1, mid1_bytes.len() as i64).as_bytes(),
    );

    let mut n = Nsqd::start_in(dp, &["--mem-queue-size=0"]);
    let k = |m: &Msg| (m.id.clone(), m.ts, m.body.clone(), m.attempts);
    let kd = |d: &DiskMsg| (d.id.clone(), d.ts, d.body.clone(), 1u16);

    let mut a = n.connect();
    a.sub("trunc", "crash");
    let got: Vec<_> = consume_exactly(&mut a, 3, 10).iter().map(k).collect();
    assert_eq!(
        got,
        crash.iter().map(kd).collect::<Vec<_>>(),
        "crash: all 3 whole records (also the one past the stale writePos)"
    );

    let mut b = n.connect();
    b.sub("trunc", "mid");
    let got: Vec<_> = consume_exactly(&mut b, 4, 10).iter().map(k).collect();
    assert_eq!(
        got,
        mid0.iter().chain(mid1.iter()).map(kd).collect::<Vec<_>>(),
        "mid: records before the truncated one, then the next segment"
    );
    wait_bad(dp, "trunc:mid.diskqueue.000000.dat", &mid0_bytes, "mid");
    wait_chan_depths(&n, "trunc", "mid", (0, 0), secs(5));

    let r = n.get("/ping");
    assert_eq!((r.status, r.text()), (200, "OK".to_string()));
    // diskqueue.md §5/§6: the reader reads ahead as soon as a record is taken, so
    // the short read happens right after the 3rd record and the file is quarantined
    // (checked before anything new is published to the topic).
    wait_bad(dp, "trunc:crash.diskqueue.000000.dat", &crash0, "crash");
    wait_chan_depths(&n, "trunc", "crash", (0, 0), secs(5));

    // New messages go through both channels' disk queues (RDY 0 while publishing,
    // --mem-queue-size=0) and are delivered normally.
    a.rdy(0);
    b.rdy(0);
    let mut p = n.connect();
    p.publish("trunc", b"after-trunc");
    for c in [&mut a, &mut b] {
        c.rdy(1);
        let m = c.expect_msg_within(secs(5));
        assert_eq!(m.body, b"after-trunc");
        c.fin(&m.id);
    }
    n.assert_alive();
    stop(&mut n);
}

// ---------------------------------------------------------------------------
// 5. Ephemeral topics/channels never touch the disk
// ---------------------------------------------------------------------------

/// Records every file name containing `ephemeral` that shows up in `dir`
/// (polled every few ms on a thread until stopped).
struct Watcher {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<BTreeSet<String>>>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Watcher {
    fn start(dir: &Path) -> Watcher {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(BTreeSet::new()));
        let (s2, seen2, d) = (stop.clone(), seen.clone(), dir.to_path_buf());
        let handle = std::thread::spawn(move || {
            while !s2.load(Ordering::Relaxed) {
                if let Ok(rd) = fs::read_dir(&d) {
                    for e in rd.flatten() {
                        let name = e.file_name().to_string_lossy().into_owned();
                        if name.contains("ephemeral") {
                            seen2.lock().unwrap().insert(name);
                        }
                    }
                }
                std::thread::sleep(ms(3));
            }
        });
        Watcher {
            stop,
            seen,
            handle: Some(handle),
        }
    }
    fn seen(&self) -> BTreeSet<String> {
        self.seen.lock().unwrap().clone()
    }
    fn finish(mut self) -> BTreeSet<String> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.join().unwrap();
        }
        self.seen()
    }
}

#[test]
fn ephemeral_overflow_never_creates_files_even_at_shutdown() {
    let dir = data_dir();
    let dp = dir.path();
    let watch = Watcher::start(dp);
    let args = ["--mem-queue-size=1", "--sync-timeout=100ms"];
    let mut n = Nsqd::start_in(dp, &args);

    // t#ephemeral: no channel (topic overflow). t:c#ephemeral: channel overflow
    // under a normal topic, with one message left in flight. u#ephemeral:c#ephemeral: both.
    let mut a = n.connect();
    a.sub("t", "c#ephemeral");
    a.rdy(1);
    let mut b = n.connect();
    b.sub("u#ephemeral", "c#ephemeral");
    let bodies: Vec<Vec<u8>> = (0..50)
        .map(|i| format!("eph-{i:03}").into_bytes())
        .collect();
    let mut p = n.connect();
    p.mpublish("t#ephemeral", &refs(&bodies));
    p.mpublish("t", &refs(&bodies));
    p.mpublish("u#ephemeral", &refs(&bodies));
    for b in &bodies[..10] {
        p.publish("t#ephemeral", b);
        p.publish("t", b);
        p.publish("u#ephemeral", b);
    }
    let inflight = a.expect_msg_within(secs(5));
    assert_eq!(inflight.attempts, 1);

    let t = wait_for(secs(5), "t#ephemeral stats", || {
        n.topic_stats("t#ephemeral")
            .filter(|t| t["message_count"] == 60)
    });
    assert_eq!(
        (int(&t, "depth"), int(&t, "backend_depth")),
        (1, 0),
        "overflow of an ephemeral topic is dropped: {t}"
    );
    let ca = wait_for(secs(5), "t/c#ephemeral settled", || {
        n.channel_stats("t", "c#ephemeral")
            .filter(|c| c["message_count"].as_i64().unwrap_or(0) >= 1 && c["in_flight_count"] == 1)
    });
    assert_eq!(int(&ca, "backend_depth"), 0, "{ca}");
    assert!(
        int(&ca, "depth") <= 1,
        "ephemeral channel holds at most --mem-queue-size: {ca}"
    );
    let cb = wait_for(
        secs(5),
        "u#ephemeral/c#ephemeral has its memory message",
        || {
            n.channel_stats("u#ephemeral", "c#ephemeral")
                .filter(|c| c["depth"] == 1)
        },
    );
    assert_eq!(int(&cb, "backend_depth"), 0, "{cb}");
    let tu = n.topic_stats("u#ephemeral").unwrap();
    assert_eq!(int(&tu, "backend_depth"), 0, "{tu}");

    sleep_ms(400); // several --sync-timeout ticks
    assert!(
        watch.seen().is_empty(),
        "ephemeral files appeared while running: {:?}",
        watch.seen()
    );
    let md = n.read_metadata().unwrap_or_default();
    assert!(!md.contains("ephemeral"), "nsqd.dat while running: {md}");

    stop(&mut n);
    sleep_ms(50);
    let seen = watch.finish();
    assert!(
        seen.is_empty(),
        "ephemeral files appeared (at shutdown?): {seen:?}; dir now {:?}",
        files(dp)
    );
    let now_files = files(dp);
    assert!(
        !now_files.iter().any(|f| f.contains("ephemeral")),
        "{now_files:?}"
    );
    let md = fs::read_to_string(dp.join("nsqd.dat")).unwrap();
    assert!(
        !md.contains("ephemeral"),
        "nsqd.dat after shutdown lists ephemeral names: {md}"
    );
    let v: Value =
        serde_json::from_str(&md).unwrap_or_else(|e| panic!("nsqd.dat JSON ({e}): {md}"));
    let topics = v["topics"]
        .as_array()
        .unwrap_or_else(|| panic!("topic t is persisted: {md}"));
    assert_eq!(topics.len(), 1, "{md}");
    assert_eq!(topics[0]["name"], "t", "{md}");
    assert_eq!(
        topics[0]["channels"],
        Value::Null,
        "only an ephemeral channel → \"channels\":null: {md}"
    );

    // Nothing ephemeral comes back.
    let n = Nsqd::start_in(dp, &args);
    let s = n.stats("");
    let names: Vec<String> = s["topics"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|t| t["topic_name"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(names, vec!["t".to_string()], "{s}");
    assert_eq!(
        find_topic(&s, "t").unwrap()["channels"],
        serde_json::json!([]),
        "{s}"
    );
    assert!(
        !files(dp).iter().any(|f| f.contains("ephemeral")),
        "{:?}",
        files(dp)
    );
}

// ---------------------------------------------------------------------------
// 6. SIGKILL with --sync-every=1
// ---------------------------------------------------------------------------

#[test]
fn sigkill_with_sync_every_1_loses_no_acknowledged_message() {
    let dir = data_dir();
    // mem-queue-size=0: acknowledged messages live on disk, not only in memory.
    let args = ["--mem-queue-size=0", "--sync-every=1", "--sync-timeout=60s"];
    let mut n = Nsqd::start_in(dir.path(), &args);
    create_channel(&n, "kill", "c");
    let bodies: Vec<Vec<u8>> = (0..200)
        .map(|i| format!("kill-{i:03}").into_bytes())
        .collect();

    let mut p = n.connect();
    for b in &bodies[..100] {
        p.publish("kill", b);
    }
    // Some deliveries before the crash: 30 received, 25 FINed, 5 left in flight.
    let mut c = n.connect();
    c.sub("kill", "c");
    c.rdy(30);
    let pre = recv_msgs(&mut c, 30, secs(10), false);
    c.rdy(0);
    for m in &pre[..25] {
        c.fin(&m.id);
    }
    c.expect_nothing(ms(200));
    for b in &bodies[100..] {
        p.publish("kill", b);
    }
    // Every PUB got OK. Crash now.
    n.kill9();

    let n = Nsqd::start_in(dir.path(), &args);
    let mut c = n.connect();
    c.sub("kill", "c");
    c.rdy(100);
    let mut post = Vec::new();
    while let Some(f) = c.recv_timeout(secs(2)) {
        let m = f.msg();
        c.fin(&m.id);
        post.push(m);
    }
    let pre_set: BTreeSet<Vec<u8>> = pre.iter().map(|m| m.body.clone()).collect();
    let mut post_count: BTreeMap<Vec<u8>, usize> = BTreeMap::new();
    for m in &post {
        *post_count.entry(m.body.clone()).or_default() += 1;
    }
    let missing: Vec<String> = bodies
        .iter()
        .filter(|b| !pre_set.contains(*b) && !post_count.contains_key(*b))
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .collect();
    assert!(
        missing.is_empty(),
        "acknowledged messages lost by SIGKILL with --sync-every=1: {} of them: {missing:?}\n(delivered after restart: {})",
        missing.len(),
        post.len()
    );
    let dups: Vec<String> = post_count
        .iter()
        .filter(|(_, &k)| k > 1)
        .map(|(b, k)| format!("{}×{k}", String::from_utf8_lossy(b)))
        .collect();
    assert!(
        dups.is_empty(),
        "delivered more than once after the restart: {dups:?}"
    );
    let unknown: Vec<&Vec<u8>> = post_count.keys().filter(|b| !bodies.contains(b)).collect();
    assert!(unknown.is_empty(), "unexpected bodies: {unknown:?}");
    for m in &post {
        if !pre_set.contains(&m.body) {
            assert_eq!(
                m.attempts, 1,
                "never delivered before the crash → attempts 1: {m:?}"
            );
        }
    }
    wait_chan_depths(&n, "kill", "c", (0, 0), secs(5));
}

/// At-least-once across a crash, for messages already handed out: a
/// message a consumer REQueued, or still holds unfinished, when nsqd is
/// SIGKILLed is delivered again after the restart — it was acknowledged to
/// its publisher and no consumer finished it. With `--sync-every=1` a
/// channel's disk queue keeps every record it handed out until its message
/// is finished (Go's nsqd 1.3.0 loses both: its read position moves on at
/// the read, and deferred and in-flight messages live only in memory).
#[test]
fn sigkill_redelivers_requeued_and_unfinished_messages() {
    let dir = data_dir();
    let args = ["--mem-queue-size=0", "--sync-every=1", "--msg-timeout=5s"];
    let mut n = Nsqd::start_in(dir.path(), &args);
    create_channel(&n, "held", "c");
    let mut p = n.connect();
    for b in ["finished", "requeued", "unfinished"] {
        p.publish("held", b.as_bytes());
    }
    let mut c = n.connect();
    c.sub("held", "c");
    c.rdy(3);
    for m in recv_msgs(&mut c, 3, secs(10), false) {
        match m.body_str().as_str() {
            "finished" => c.fin(&m.id),
            "requeued" => c.req(&m.id, 1000),
            _ => {}
        }
    }
    wait_for(secs(5), "1 in flight and 1 deferred", || {
        let ch = n.channel_stats("held", "c")?;
        (int(&ch, "in_flight_count") == 1 && int(&ch, "deferred_count") == 1).then_some(())
    });
    n.kill9();

    let n = Nsqd::start_in(dir.path(), &args);
    let mut c = n.connect();
    c.sub("held", "c");
    c.rdy(10);
    let mut bodies = BTreeSet::new();
    // The REQ delay (1 s) and msg-timeout (5 s) are long past by then.
    while let Some(f) = c.recv_timeout(secs(8)) {
        let m = f.msg();
        c.fin(&m.id);
        bodies.insert(m.body_str());
    }
    let want: BTreeSet<String> = ["requeued", "unfinished"].map(String::from).into();
    // "finished" may come back too: its FIN moved the read position past it
    // in memory, and the kill may beat the sync that persists that
    // (at-least-once: a duplicate, never a loss)
    assert!(
        bodies.is_superset(&want) && bodies.len() <= 3,
        "after SIGKILL and restart: {bodies:?}"
    );
}

/// An `#ephemeral` channel has no disk, so with `--mem-queue-size=0` a
/// message reaches it only by the hand-off to a consumer that is ready that
/// instant (Go: the channel's unbuffered `memoryMsgChan`, which it makes for
/// ephemeral channels even at size 0). With `--sync-every=1` nsq-rs turned
/// the hand-off off for every channel (`ChannelConfig::hand_off`, "consumers
/// see only durable messages") and an ephemeral channel then dropped every
/// message, even with a ready consumer waiting; it keeps the hand-off now,
/// having no disk to wait for. Go's nsqd 1.3.0 delivers all five here (run
/// with NSQ_BIN_DIR pointing at it). Found by the cluster test: its two
/// consumers of `e#ephemeral` got nothing.
#[test]
fn ephemeral_channel_hands_off_to_a_ready_consumer_with_sync_every_1() {
    let dir = data_dir();
    let n = Nsqd::start_in(dir.path(), &["--mem-queue-size=0", "--sync-every=1"]);
    let mut c = n.connect();
    c.sub("eph", "e#ephemeral");
    c.rdy(10);
    wait_for(secs(5), "the consumer ready on e#ephemeral", || {
        let ch = n.channel_stats("eph", "e#ephemeral")?;
        let clients = ch["clients"].as_array()?;
        clients
            .iter()
            .any(|cl| int(cl, "ready_count") == 10)
            .then_some(())
    });
    let mut p = n.connect();
    let mut got = Vec::new();
    for i in 0..5 {
        // one at a time: the consumer is idle and ready at every PUB
        p.publish("eph", format!("m{i}").as_bytes());
        if let Some(f) = c.recv_timeout(secs(2)) {
            let m = f.msg();
            c.fin(&m.id);
            got.push(m.body_str());
        }
    }
    assert_eq!(
        got,
        ["m0", "m1", "m2", "m3", "m4"],
        "delivered on e#ephemeral"
    );
}

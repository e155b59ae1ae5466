//! nsqd persistence, metadata and lifecycle, black-box
//! (/work/shared/spec/README.md checklist items 62, 94–101; nsqd.md §3, §5; diskqueue.md).

#![forbid(unsafe_code)]

use nsq_tests::*;
use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::time::Duration;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn data_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("nsqd-persist-")
        .tempdir()
        .unwrap()
}

fn files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn stop(n: &mut Nsqd) {
    let st = n.sigterm_and_wait(secs(15));
    assert_eq!(
        st.code(),
        Some(0),
        "nsqd exit status after SIGTERM: {st}\nstderr:\n{}",
        n.stderr()
    );
}

// ---------------------------------------------------------------------------
// Shutdown and metadata (no disk queue needed)
// ---------------------------------------------------------------------------

#[test]
fn sigterm_exits_zero_and_releases_data_path() {
    let dir = data_dir();
    let mut n = Nsqd::start_in(dir.path(), &[]);
    let mut c = n.connect();
    c.publish("t", b"x");
    let mut sub = n.connect();
    sub.sub("t", "c");
    stop(&mut n);
    // clients are disconnected (no frames sent)
    sub.expect_closed_silently(secs(5));
    // the lock is released: a new instance starts on the same data path
    let n2 = Nsqd::start_in(dir.path(), &[]);
    n2.assert_alive();
}

#[test]
fn sigint_exits_zero() {
    let mut n = Nsqd::start(&[]);
    send_signal(n.pid(), libc::SIGINT);
    let st = n.wait_exit(secs(15)).expect("nsqd exits after SIGINT");
    assert_eq!(st.code(), Some(0), "{st}");
}

#[test]
fn item97_metadata_file_on_fresh_start() {
    let n = Nsqd::start(&[]);
    let md = wait_for(secs(5), "nsqd.dat exists", || n.read_metadata());
    assert_eq!(
        md.trim_end(),
        r#"{"topics":null,"version":"1.3.0"}"#,
        "fresh nsqd.dat"
    );
}

#[test]
fn item97b_metadata_lists_topics_and_channels() {
    let n = Nsqd::start(&[]);
    assert_eq!(n.post("/topic/create?topic=t1", b"").status, 200);
    assert_eq!(
        n.post("/channel/create?topic=t1&channel=c1", b"").status,
        200
    );
    assert_eq!(n.post("/topic/create?topic=t2", b"").status, 200);
    assert_eq!(n.post("/topic/pause?topic=t2", b"").status, 200);
    let md = wait_for(secs(5), "nsqd.dat lists t1/c1 and t2", || {
        n.read_metadata()
            .filter(|s| s.contains(r#""name":"c1""#) && s.contains(r#""name":"t2""#))
    });
    let j = ojson::parse(&md).unwrap_or_else(|e| panic!("nsqd.dat is not JSON ({e}): {md}"));
    assert_eq!(j.keys(), ["topics", "version"]);
    assert_eq!(j.get("version"), Some(&ojson::J::Str("1.3.0".into())));
    let topics = match j.get("topics") {
        Some(ojson::J::Arr(a)) => a.clone(),
        other => panic!("topics must be an array: {other:?}"),
    };
    assert_eq!(topics.len(), 2, "{md}");
    for t in &topics {
        assert_eq!(t.keys(), ["name", "paused", "channels"], "{md}");
    }
    let v: Value = serde_json::from_str(&md).unwrap();
    let t1 = v["topics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "t1")
        .unwrap();
    assert_eq!(t1["paused"], false);
    assert_eq!(
        t1["channels"],
        serde_json::json!([{"name":"c1","paused":false}])
    );
    assert!(
        md.contains(r#"{"name":"c1","paused":false}"#),
        "channel key order name, paused: {md}"
    );
    let t2 = v["topics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "t2")
        .unwrap();
    assert_eq!(t2["paused"], true);
    assert_eq!(
        t2["channels"],
        Value::Null,
        "topic without channels has \"channels\":null: {md}"
    );
}

#[test]
fn metadata_restores_paused_state_after_restart() {
    let dir = data_dir();
    let mut n = Nsqd::start_in(dir.path(), &[]);
    assert_eq!(n.post("/topic/create?topic=t", b"").status, 200);
    assert_eq!(n.post("/channel/create?topic=t&channel=c", b"").status, 200);
    assert_eq!(n.post("/channel/create?topic=t&channel=d", b"").status, 200);
    assert_eq!(n.post("/topic/pause?topic=t", b"").status, 200);
    assert_eq!(n.post("/channel/pause?topic=t&channel=c", b"").status, 200);
    stop(&mut n);
    let n = Nsqd::start_in(dir.path(), &[]);
    let t = n.topic_stats("t").expect("topic t restored from nsqd.dat");
    assert_eq!(t["paused"], true, "{t}");
    let c = n.channel_stats("t", "c").expect("channel c restored");
    assert_eq!(c["paused"], true, "{c}");
    let d = n.channel_stats("t", "d").expect("channel d restored");
    assert_eq!(d["paused"], false, "{d}");
}

#[test]
fn item62b_ephemeral_never_in_metadata_even_after_shutdown() {
    let dir = data_dir();
    let mut n = Nsqd::start_in(dir.path(), &[]);
    let mut a = n.connect();
    a.sub("t", "c#ephemeral");
    let mut b = n.connect();
    b.sub("e#ephemeral", "c");
    let mut p = n.connect();
    p.publish("t", b"x");
    p.publish("e#ephemeral", b"y");
    sleep_ms(500);
    let md = n.read_metadata().unwrap();
    assert!(!md.contains("ephemeral"), "{md}");
    stop(&mut n);
    let md = fs::read_to_string(dir.path().join("nsqd.dat")).unwrap();
    assert!(
        !md.contains("ephemeral"),
        "ephemeral topic/channel persisted at shutdown: {md}"
    );
    assert!(
        md.contains(r#""name":"t""#),
        "non-ephemeral topic persisted: {md}"
    );
    // Queues of ephemeral topics/channels never touch disk. (A normal channel `c`
    // under the ephemeral topic has a real diskqueue in NSQ — channel ephemerality
    // depends only on the channel's own name — so `e#ephemeral:c.*` may exist.)
    let names = files(dir.path());
    assert!(
        names
            .iter()
            .all(|f| !f.starts_with("e#ephemeral.diskqueue") && !f.contains("c#ephemeral")),
        "ephemeral queue data on disk: {names:?}"
    );
}

#[test]
fn item101_ephemeral_topic_overflow_is_dropped() {
    let n = Nsqd::start(&["--mem-queue-size=1"]);
    let mut c = n.connect();
    c.publish("t#ephemeral", b"one");
    c.publish("t#ephemeral", b"two");
    let t = wait_for(secs(5), "ephemeral topic stats", || {
        n.topic_stats("t#ephemeral")
    });
    assert_eq!(t["depth"], 1, "second message silently dropped: {t}");
    assert_eq!(t["backend_depth"], 0, "{t}");
    assert_eq!(t["message_count"], 2, "both publishes counted: {t}");
    let names = files(n.data_path());
    assert!(
        names.iter().all(|f| !f.contains("ephemeral")),
        "ephemeral data on disk: {names:?}"
    );
}

#[test]
fn item100_second_instance_on_same_data_path_fails() {
    let dir = data_dir();
    let n = Nsqd::start_in(dir.path(), &[]);
    let tcp = format!("--tcp-address=127.0.0.1:{}", free_port());
    let http = format!("--http-address=127.0.0.1:{}", free_port());
    let dp = format!("--data-path={}", dir.path().display());
    let out = run_bin("nsqd", &[&tcp, &http, &dp], secs(15));
    let st = out.status.expect("second nsqd must exit on its own");
    assert_eq!(st.code(), Some(1), "exit status; stderr:\n{}", out.stderr);
    let want = format!(
        "FATAL: failed to instantiate nsqd - failed to lock data-path: cannot flock directory {} - resource temporarily unavailable (possibly in use by another instance of nsqd)",
        dir.path().display()
    );
    let line = out
        .stderr
        .lines()
        .find(|l| l.contains("FATAL"))
        .unwrap_or_else(|| panic!("no FATAL line on stderr:\n{}", out.stderr));
    assert!(line.starts_with("[nsqd] "), "log prefix: {line:?}");
    assert!(
        line.ends_with(&want),
        "stderr line\n got  {line:?}\n want [nsqd] <ts> {want}"
    );
    n.assert_alive();
}

// ---------------------------------------------------------------------------
// Disk-backed queue (diskqueue) items
// ---------------------------------------------------------------------------

#[test]
fn item94_backlog_survives_restart() {
    let dir = data_dir();
    let mut n = Nsqd::start_in(dir.path(), &[]);
    assert_eq!(n.post("/topic/create?topic=t", b"").status, 200);
    assert_eq!(n.post("/channel/create?topic=t&channel=c", b"").status, 200);
    let mut p = n.connect();
    let want: BTreeSet<Vec<u8>> = (0..10)
        .map(|i| format!("persist-{i}").into_bytes())
        .collect();
    for b in &want {
        p.publish("t", b);
    }
    wait_for(secs(5), "channel depth 10", || {
        n.channel_stats("t", "c").filter(|c| c["depth"] == 10)
    });
    stop(&mut n);
    let n = Nsqd::start_in(dir.path(), &[]);
    let ch = wait_for(secs(5), "channel c depth 10 after restart", || {
        n.channel_stats("t", "c").filter(|c| c["depth"] == 10)
    });
    assert_eq!(ch["depth"], 10);
    let mut c = n.connect();
    c.sub("t", "c");
    c.rdy(20);
    let got: BTreeSet<Vec<u8>> = recv_msgs(&mut c, 10, secs(10), true)
        .into_iter()
        .map(|m| m.body)
        .collect();
    assert_eq!(got, want);
    c.expect_nothing(ms(500));
}

#[test]
fn item95_inflight_at_shutdown_redelivered_with_attempts_preserved() {
    let dir = data_dir();
    let mut n = Nsqd::start_in(dir.path(), &[]);
    let mut c = n.connect();
    c.sub("t", "c");
    c.rdy(3);
    let mut p = n.connect();
    for i in 0..3 {
        p.publish("t", format!("inflight-{i}").as_bytes());
    }
    let first = recv_msgs(&mut c, 3, secs(5), false);
    assert!(first.iter().all(|m| m.attempts == 1));
    stop(&mut n);
    let n = Nsqd::start_in(dir.path(), &[]);
    let mut c = n.connect();
    c.sub("t", "c");
    c.rdy(10);
    let again = recv_msgs(&mut c, 3, secs(10), true);
    let ids1: BTreeSet<String> = first.iter().map(|m| m.id.clone()).collect();
    let ids2: BTreeSet<String> = again.iter().map(|m| m.id.clone()).collect();
    assert_eq!(ids1, ids2, "same messages (same ids) after restart");
    for m in &again {
        assert_eq!(m.attempts, 2, "attempts preserved +1: {m:?}");
        let orig = first.iter().find(|o| o.id == m.id).unwrap();
        assert_eq!(
            (m.ts, &m.body),
            (orig.ts, &orig.body),
            "timestamp and body preserved"
        );
    }
}

#[test]
fn item96_deferred_at_shutdown_delivered_immediately_after_restart() {
    let dir = data_dir();
    let mut n = Nsqd::start_in(dir.path(), &[]);
    let mut c = n.connect();
    c.sub("t", "c");
    let mut p = n.connect();
    p.send(&dpub_cmd("t", 3_600_000, b"deferred-an-hour"));
    p.expect_ok();
    wait_for(secs(5), "deferred_count 1", || {
        n.channel_stats("t", "c")
            .filter(|c| c["deferred_count"] == 1)
    });
    drop(c);
    stop(&mut n);
    let n = Nsqd::start_in(dir.path(), &[]);
    let mut c = n.connect();
    c.sub("t", "c");
    c.rdy(1);
    let m = c.expect_msg_within(secs(8));
    assert_eq!(m.body, b"deferred-an-hour");
}

#[test]
fn item98_mem_queue_size_zero_writes_diskqueue_files() {
    let n = Nsqd::start(&["--mem-queue-size=0", "--sync-timeout=2s"]);
    let mut p = n.connect();
    p.publish("t", b"on-disk");
    let dat = n.data_path().join("t.diskqueue.000000.dat");
    wait_for(secs(5), "t.diskqueue.000000.dat", || {
        dat.exists().then_some(())
    });
    let meta = n.data_path().join("t.diskqueue.meta.dat");
    let text = wait_for(
        secs(6),
        "t.diskqueue.meta.dat within --sync-timeout",
        || fs::read_to_string(&meta).ok(),
    );
    let lines: Vec<&str> = text.split('\n').collect();
    let ok = text.ends_with('\n')
        && lines.len() == 4
        && lines[0].chars().all(|c| c.is_ascii_digit())
        && !lines[0].is_empty()
        && [lines[1], lines[2]].iter().all(|l| {
            let mut it = l.split(',');
            let a = it.next().unwrap_or("");
            let b = it.next().unwrap_or("");
            it.next().is_none()
                && !a.is_empty()
                && !b.is_empty()
                && a.chars().chain(b.chars()).all(|c| c.is_ascii_digit())
        });
    assert!(
        ok,
        "meta file must match ^\\d+\\n\\d+,\\d+\\n\\d+,\\d+\\n$, got {text:?}"
    );
    let t = n.topic_stats("t").unwrap();
    assert_eq!(t["backend_depth"], 1, "{t}");
}

#[test]
fn item99_channel_diskqueue_file_names() {
    let n = Nsqd::start(&["--mem-queue-size=0"]);
    assert_eq!(n.post("/topic/create?topic=t", b"").status, 200);
    assert_eq!(n.post("/channel/create?topic=t&channel=c", b"").status, 200);
    let mut p = n.connect();
    p.publish("t", b"to-channel-disk");
    let dat = n.data_path().join("t:c.diskqueue.000000.dat");
    wait_for(secs(5), "t:c.diskqueue.000000.dat", || {
        dat.exists().then_some(())
    });
    let ch = wait_for(secs(5), "channel backend_depth 1", || {
        n.channel_stats("t", "c")
            .filter(|c| c["backend_depth"] == 1)
    });
    assert_eq!(ch["depth"], 1);
    let mut c = n.connect();
    c.sub("t", "c");
    c.rdy(1);
    assert_eq!(c.expect_msg().body, b"to-channel-disk");
}

#[test]
fn topic_delete_removes_diskqueue_files() {
    let n = Nsqd::start(&["--mem-queue-size=0"]);
    let mut p = n.connect();
    p.publish("t", b"x");
    let dat = n.data_path().join("t.diskqueue.000000.dat");
    wait_for(secs(5), "t.diskqueue.000000.dat", || {
        dat.exists().then_some(())
    });
    assert_eq!(n.post("/topic/delete?topic=t", b"").status, 200);
    wait_for(secs(5), "topic files deleted", || {
        files(n.data_path())
            .iter()
            .all(|f| !f.starts_with("t.diskqueue"))
            .then_some(())
    });
}

#[test]
fn memory_overflow_spills_to_channel_disk_queue() {
    let n = Nsqd::start(&["--mem-queue-size=2"]);
    assert_eq!(n.post("/topic/create?topic=t", b"").status, 200);
    assert_eq!(n.post("/channel/create?topic=t&channel=c", b"").status, 200);
    let mut p = n.connect();
    let want: BTreeSet<Vec<u8>> = (0..5).map(|i| format!("spill-{i}").into_bytes()).collect();
    for b in &want {
        p.publish("t", b);
    }
    let ch = wait_for(secs(5), "channel depth 5", || {
        n.channel_stats("t", "c").filter(|c| c["depth"] == 5)
    });
    assert_eq!(ch["backend_depth"], 3, "2 in memory, 3 on disk: {ch}");
    let mut c = n.connect();
    c.sub("t", "c");
    c.rdy(10);
    let got: BTreeSet<Vec<u8>> = recv_msgs(&mut c, 5, secs(10), true)
        .into_iter()
        .map(|m| m.body)
        .collect();
    assert_eq!(got, want);
}

#[test]
fn ephemeral_channel_overflow_is_discarded() {
    let n = Nsqd::start(&["--mem-queue-size=2"]);
    let mut c = n.connect();
    c.sub("t", "c#ephemeral"); // RDY 0: nothing consumed
    let mut p = n.connect();
    for i in 0..5 {
        p.publish("t", format!("e{i}").as_bytes());
    }
    let ch = wait_for(secs(5), "ephemeral channel message_count 5", || {
        n.channel_stats("t", "c#ephemeral")
            .filter(|c| c["message_count"] == 5)
    });
    assert_eq!(
        ch["depth"], 2,
        "overflow of an ephemeral channel is dropped: {ch}"
    );
    assert_eq!(ch["backend_depth"], 0, "{ch}");
    c.rdy(10);
    let got = recv_msgs(&mut c, 2, secs(5), true);
    assert_eq!(got.len(), 2);
    c.expect_nothing(Duration::from_millis(700));
}

#[test]
fn channel_delete_removes_its_diskqueue_files() {
    let n = Nsqd::start(&["--mem-queue-size=0"]);
    assert_eq!(n.post("/topic/create?topic=t", b"").status, 200);
    assert_eq!(n.post("/channel/create?topic=t&channel=c", b"").status, 200);
    n.http_pub("t", b"x");
    let dat = n.data_path().join("t:c.diskqueue.000000.dat");
    wait_for(secs(5), "t:c.diskqueue.000000.dat", || {
        dat.exists().then_some(())
    });
    assert_eq!(n.post("/channel/delete?topic=t&channel=c", b"").status, 200);
    wait_for(secs(5), "channel files deleted", || {
        files(n.data_path())
            .iter()
            .all(|f| !f.starts_with("t:c.diskqueue"))
            .then_some(())
    });
    assert!(n.topic_stats("t").is_some());
}

//! Retention and replay of a replicated topic (docs/features/replay.md):
//! with `retention=1h` a channel reset to a time gets again exactly the
//! messages published since, by id, through an unmodified pynsq Reader
//! found through nsqlookupd, attempts starting over; the leader is
//! SIGKILLed part-way and the new leader delivers the rest, none lost. A
//! channel made with `start=earliest` reads the whole retained log. And
//! bad input is a 400 saying why, with nothing changed. With a size
//! retention every member purges its log below the kept part, and after a
//! restart and a failover a reset to the earliest replays that part.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nsq_tests::{recv_msgs, wait_for, Conn, Nsqd};
use serde_json::Value;

use super::leader::leader_of;
use super::members::*;

/// `secs` since the epoch as RFC 3339 in UTC.
fn rfc3339(secs: i64) -> String {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let (h, mi, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Publishes `prefix{i}` for each i of `n`, one PUB each (one batch each),
/// and consumes and FINs them all on the leader's channel `c`: their ids
/// by body.
fn publish_and_finish(
    publisher: &mut Conn,
    consumer: &mut Conn,
    t: &str,
    prefix: &str,
    n: usize,
) -> BTreeMap<String, String> {
    for i in 0..n {
        publisher.publish(t, format!("{prefix}{i:03}").as_bytes());
    }
    recv_msgs(consumer, n, Duration::from_secs(30), true)
        .into_iter()
        .map(|m| (String::from_utf8(m.body).unwrap(), m.id))
        .collect()
}

/// A pynsq Reader (tests/python/replay_reader.py) of `t`/`channel`.
struct Reader {
    child: Child,
    out: PathBuf,
}

impl Reader {
    fn start(lookupd_http: &str, t: &str, channel: &str, dir: &std::path::Path) -> Reader {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let python = std::env::var("NSQ_PYTHON")
            .map(PathBuf::from)
            .unwrap_or_else(|_| root.join(".venv/bin/python"));
        let out = dir.join(format!("{channel}.ledger"));
        let child = Command::new(&python)
            .arg(root.join("tests/python/replay_reader.py"))
            .args(["--topic", t, "--channel", channel])
            .args(["--lookupd-http-address", lookupd_http])
            .arg("--out")
            .arg(&out)
            .args(["--work-ms", "25", "--max-in-flight", "2"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join(format!("{channel}.log"))).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("{} (scripts/test.sh makes .venv): {e}", python.display()));
        Reader { child, out }
    }

    /// Each line: (id, attempts, body).
    fn finished(&self) -> Vec<(String, u16, String)> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let mut f = l.splitn(4, ' ').skip(1);
                Some((
                    f.next()?.to_string(),
                    f.next()?.parse().ok()?,
                    f.next()?.to_string(),
                ))
            })
            .collect()
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn json(n: &Nsqd, path: &str) -> (u16, Value) {
    let r = n.post(path, b"");
    let v = serde_json::from_str(&r.text()).unwrap_or(Value::String(r.text()));
    (r.status, v)
}

#[test]
fn a_reset_to_a_time_replays_exactly_what_was_published_since_through_a_failover() {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let work = tempfile::tempdir().unwrap();
    let (lookupd, mut members) = start_cluster_with_lookupd(&dirs);
    let t = "replay_to_time";
    let lid = led_topic_with_channel(&members, t);
    let follower = members.iter().find(|m| m.id != lid).unwrap();
    let (status, cfg) = json(
        &follower.nsqd,
        &format!("/topic/config?topic={t}&retention=1h"),
    );
    assert_eq!(status, 200, "{cfg}");
    assert_eq!(cfg["retention"], "1h0m0s");
    for m in &members {
        wait_for(WAIT, "every member showing the retention", || {
            let r = m.nsqd.topic_stats(t)?;
            (r["replication"]["retention"] == "1h0m0s").then_some(())
        });
    }

    // 30 messages before the time, 120 after, all finished.
    let leader = by_id(&members, lid);
    let mut publisher = leader.nsqd.connect();
    let mut consumer = leader.nsqd.connect();
    consumer.sub(t, "c");
    consumer.rdy(200);
    let before = publish_and_finish(&mut publisher, &mut consumer, t, "a", 30);
    let since = now_secs() + 1;
    while now_secs() < since {
        std::thread::sleep(Duration::from_millis(20));
    }
    let after = publish_and_finish(&mut publisher, &mut consumer, t, "b", 120);
    drop(consumer);
    let all: Vec<&Member> = members.iter().collect();
    wait_unfinished(&all, t, 0);
    let retained = leader.nsqd.topic_stats(t).unwrap()["replication"]["retained_messages"].clone();
    assert_eq!(retained, 150, "{retained}");
    let metrics = leader.nsqd.get("/metrics").text();
    assert!(
        metrics.contains(&format!(
            "nsqd_replication_topic_retained_messages{{topic=\"{t}\"}} 150"
        )),
        "{metrics}"
    );

    // The reset, asked of a follower: the 120 are the channel's again on
    // every member.
    let (status, answer) = json(
        &follower.nsqd,
        &format!("/channel/reset?topic={t}&channel=c&to={}", rfc3339(since)),
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["before_retention"], false);
    wait_unfinished(&all, t, 120);

    // An unmodified pynsq Reader gets them; the leader dies part-way.
    let reader = Reader::start(&lookupd.http, t, "c", work.path());
    wait_for(WAIT, "the Reader finishing 30 replayed messages", || {
        (reader.finished().len() >= 30).then_some(())
    });
    let first_pass = reader.finished();
    assert!(
        first_pass.len() < 120,
        "the Reader finished before the kill"
    );
    let mut gone = members.remove(members.iter().position(|m| m.id == lid).unwrap());
    gone.nsqd.kill9();
    let left: Vec<&Member> = members.iter().collect();
    leader_of(&left, t, Some(lid));
    let want: BTreeSet<&String> = after.values().collect();
    wait_for(
        Duration::from_secs(60),
        "every replayed message finished",
        || {
            let got: BTreeSet<String> =
                reader.finished().into_iter().map(|(id, _, _)| id).collect();
            want.iter().all(|id| got.contains(*id)).then_some(())
        },
    );
    wait_unfinished(&left, t, 0);
    std::thread::sleep(Duration::from_millis(500));
    let finished = reader.finished();
    let ids: BTreeSet<&String> = finished.iter().map(|(id, _, _)| id).collect();
    assert_eq!(ids, want, "exactly the messages published since, by id");
    for (id, attempts, body) in &finished {
        assert_eq!(after.get(body), Some(id), "{body} under another id");
        assert!(!before.contains_key(body), "{body} was published before");
        let _ = attempts;
    }
    // Attempts start over: the old leader's first deliveries were 1.
    assert!(first_pass.iter().all(|(_, a, _)| *a == 1), "{first_pass:?}");
    drop(gone);
}

#[test]
fn a_new_channel_may_start_at_the_earliest_and_bad_input_changes_nothing() {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let members = start_cluster(&dirs, |_| Vec::new());
    let t = "replay_earliest";
    let lid = led_topic_with_channel(&members, t);
    let leader = by_id(&members, lid);
    let n = &leader.nsqd;
    let all: Vec<&Member> = members.iter().collect();

    // Without a retention there is nothing to replay: said so.
    let (status, v) = json(
        n,
        &format!("/channel/reset?topic={t}&channel=c&to=earliest"),
    );
    assert_eq!(status, 400);
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .starts_with("RETENTION_NOT_SET"),
        "{v}"
    );
    assert_eq!(
        json(n, &format!("/topic/config?topic={t}&retention=24h")).0,
        200
    );

    let mut publisher = n.connect();
    let mut consumer = n.connect();
    consumer.sub(t, "c");
    consumer.rdy(100);
    let published = publish_and_finish(&mut publisher, &mut consumer, t, "m", 40);
    wait_unfinished(&all, t, 0);

    // A new channel at the earliest gets all 40 again, a second create
    // with start= changes nothing, a plain new channel gets none of them.
    let r = n.post(
        &format!("/channel/create?topic={t}&channel=late&start=earliest"),
        b"",
    );
    assert_eq!((r.status, r.text()), (200, String::new()));
    wait_unfinished(&all, t, 40);
    let mut late = n.connect();
    late.sub(t, "late");
    late.rdy(100);
    let got = recv_msgs(&mut late, 40, Duration::from_secs(20), true);
    let got: BTreeMap<String, String> = got
        .into_iter()
        .map(|m| (String::from_utf8(m.body).unwrap(), m.id))
        .collect();
    assert_eq!(got, published);
    let r = n.post(
        &format!("/channel/create?topic={t}&channel=late&start=earliest"),
        b"",
    );
    assert_eq!(r.status, 200);
    late.expect_nothing(Duration::from_millis(500));
    assert_eq!(
        n.post(&format!("/channel/create?topic={t}&channel=plain"), b"")
            .status,
        200
    );
    let mut plain = n.connect();
    plain.sub(t, "plain");
    plain.rdy(10);
    plain.expect_nothing(Duration::from_millis(500));

    // A time before what is retained goes to the earliest, and says so.
    let (status, v) = json(
        n,
        &format!("/channel/reset?topic={t}&channel=plain&to=2001-01-01T00:00:00Z"),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["before_retention"], true, "{v}");
    assert!(v["message"].as_str().unwrap().contains("earliest"), "{v}");
    assert_eq!(
        recv_msgs(&mut plain, 40, Duration::from_secs(20), true).len(),
        40
    );

    // Bad input: a 400 naming it, and nothing changed.
    assert_eq!(n.post("/topic/create?topic=unreplicated", b"").status, 200);
    assert_eq!(
        n.post("/channel/create?topic=unreplicated&channel=c", b"")
            .status,
        200
    );
    let bad = |path: &str, code: &str| {
        let (status, v) = json(n, path);
        assert_eq!(status, 400, "{path}: {v}");
        let msg = v["message"].as_str().unwrap_or_default().to_string();
        assert!(msg.starts_with(code), "{path}: {msg}");
        msg
    };
    let why = bad(
        "/channel/reset?topic=unreplicated&channel=c&to=earliest",
        "REPLAY_NOT_REPLICATED",
    );
    assert!(
        why.contains("replicas=3") && why.contains("retention="),
        "{why}"
    );
    bad(
        "/channel/create?topic=unreplicated&channel=d&start=earliest",
        "REPLAY_NOT_REPLICATED",
    );
    bad(
        "/topic/config?topic=unreplicated&retention=1h",
        "RETENTION_NOT_REPLICATED",
    );
    bad(
        &format!("/channel/reset?topic={t}&channel=c&to=yesterday"),
        "INVALID_ARG_TO",
    );
    bad(
        &format!("/channel/reset?topic={t}&channel=c&to=2026-13-01T00:00:00Z"),
        "INVALID_ARG_TO",
    );
    bad(
        &format!("/channel/reset?topic={t}&channel=c"),
        "MISSING_ARG_TO",
    );
    bad(
        &format!("/topic/config?topic={t}&retention=-1h"),
        "INVALID_ARG_RETENTION",
    );
    bad(
        &format!("/topic/config?topic={t}&retention=1h&max_depth=-1"),
        "INVALID_ARG_MAX_DEPTH",
    );
    bad(
        &format!("/channel/reset?topic={t}&channel=x%23ephemeral&to=earliest"),
        "REPLAY_EPHEMERAL",
    );
    assert_eq!(
        n.post("/channel/create?topic=unreplicated&channel=d", b"")
            .status,
        200
    );
    let (_, cfg) = json(n, &format!("/topic/config?topic={t}"));
    assert_eq!(cfg["retention"], "24h0m0s", "{cfg}");
    let r = n.post(
        &format!("/channel/reset?topic={t}&channel=nope&to=earliest"),
        b"",
    );
    assert_eq!(r.status, 404);
    wait_unfinished(&all, t, 0);
}

/// The snapshot index and purge point of `topic`'s group on `n`.
fn purged_of(n: &Nsqd, topic: &str) -> (Option<u64>, Option<u64>) {
    let r = replication(n);
    let g = r["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .find(|g| g["group"].as_u64() == Some(group_of(topic) as u64))
        .cloned()
        .unwrap_or(Value::Null);
    (g["snapshot"].as_u64(), g["purged"].as_u64())
}

#[test]
fn the_purge_keeps_a_size_retention_and_a_restarted_member_replays_it() {
    // Snapshots every 20 entries; 4 KiB bodies, 128 KiB kept (marks every
    // 64 KiB): of 100 finished messages the newest 32 to 48 are kept, and
    // every member purges its log below them.
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut members = start_cluster(&dirs, |_| {
        vec!["--replication-snapshot-entries=20".to_string()]
    });
    let t = "replay_purged";
    let lid = led_topic_with_channel(&members, t);
    let leader = by_id(&members, lid);
    let (status, v) = json(
        &leader.nsqd,
        &format!("/topic/config?topic={t}&retention=128KiB"),
    );
    assert_eq!(
        (status, &v["retention"]),
        (200, &Value::from("131072B")),
        "{v}"
    );
    let mut publisher = leader.nsqd.connect();
    let mut consumer = leader.nsqd.connect();
    consumer.sub(t, "c");
    consumer.rdy(100);
    let body = |i: usize| format!("{i:03}{}", "x".repeat(4093));
    for i in 0..100 {
        publisher.publish(t, body(i).as_bytes());
    }
    recv_msgs(&mut consumer, 100, Duration::from_secs(30), true);
    drop(consumer);
    let all: Vec<&Member> = members.iter().collect();
    wait_unfinished(&all, t, 0);
    for m in &members {
        wait_for(WAIT, &format!("node {} purging its log", m.id), || {
            let (snapshot, purged) = purged_of(&m.nsqd, t);
            (snapshot.is_some() && purged.is_some()).then_some(())
        });
    }

    // One member restarts from its snapshot and log, the leader is lost:
    // the next leader replays the kept part, the newest messages only.
    let follower = members.iter().find(|m| m.id != lid).unwrap().id;
    let back = stop_member(&mut members, follower);
    let nsqd = start(dirs[at_dir(follower)].path(), &back.args);
    members.push(Member {
        id: follower,
        nsqd,
        args: back.args.clone(),
    });
    let mut gone = members.remove(members.iter().position(|m| m.id == lid).unwrap());
    gone.nsqd.kill9();
    let left: Vec<&Member> = members.iter().collect();
    let next = by_id(&members, leader_of(&left, t, Some(lid)));
    let (status, v) = json(
        &next.nsqd,
        &format!("/channel/reset?topic={t}&channel=c&to=earliest"),
    );
    assert_eq!(status, 200, "{v}");
    let kept = wait_for(WAIT, "the kept part unfinished again", || {
        unfinished(&next.nsqd, t).filter(|&n| n > 0)
    });
    assert!((32..=48).contains(&kept), "kept {kept}");
    wait_unfinished(&left, t, kept);
    let mut consumer = next.nsqd.connect();
    consumer.sub(t, "c");
    consumer.rdy(100);
    let got: BTreeSet<String> =
        recv_msgs(&mut consumer, kept as usize, Duration::from_secs(30), true)
            .into_iter()
            .map(|m| String::from_utf8_lossy(&m.body[..3]).into_owned())
            .collect();
    let want: BTreeSet<String> = (100 - kept as usize..100)
        .map(|i| format!("{i:03}"))
        .collect();
    assert_eq!(got, want, "the newest {kept}");
    consumer.expect_nothing(Duration::from_millis(500));
    drop(gone);
}

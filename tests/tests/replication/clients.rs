//! Real clients across membership changes and a failover (issue 45): three
//! members that register with nsqlookupd carry a `replicas=3` topic under
//! the publish load of `load.rs`; an unmodified pynsq Reader
//! (tests/python/replay_reader.py) and an unmodified nsqjs Reader
//! (tests/node/reader.js), each on its own channel, find the members
//! through nsqlookupd only. Meanwhile a member is added online, the leader
//! of the topic's group is removed (a failover) and a lost member is
//! removed while down and replaced under a new node id and address. At the
//! end every acknowledged message has reached each Reader (0 lost); the
//! duplicates each got are counted and printed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use nsq_tests::{free_ports, sleep_ms, wait_for};

use super::load::*;
use super::members::*;
use super::membership::{
    change_until_made, join, lose_and_remove_newest, remove_topic_leader, wait_settled,
};

/// A real client's Reader in its own process, writing one line
/// `F <id> <attempts> <body>` per message it finished.
struct Reader {
    name: &'static str,
    child: Child,
    out: PathBuf,
    log: PathBuf,
}

impl Reader {
    fn spawn(name: &'static str, mut cmd: Command, out: PathBuf, dir: &Path) -> Reader {
        let log = dir.join(format!("{name}.log"));
        let child = cmd
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("{name} (scripts/test.sh installs it): {e}"));
        Reader {
            name,
            child,
            out,
            log,
        }
    }

    /// pynsq's Reader of `t`/`channel` (the .venv scripts/test.sh makes).
    fn pynsq(lookupd_http: &str, t: &str, channel: &str, dir: &Path) -> Reader {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let python = std::env::var("NSQ_PYTHON")
            .map(PathBuf::from)
            .unwrap_or_else(|_| root.join(".venv/bin/python"));
        let out = dir.join(format!("{channel}.ledger"));
        let mut cmd = Command::new(python);
        cmd.arg(root.join("tests/python/replay_reader.py"))
            .args(["--topic", t, "--channel", channel])
            .args(["--lookupd-http-address", lookupd_http])
            .arg("--out")
            .arg(&out)
            .args(["--work-ms", "1", "--max-in-flight", "20"]);
        Reader::spawn("pynsq", cmd, out, dir)
    }

    /// nsqjs's Reader of `t`/`channel` (tests/node, `npm ci` by scripts/test.sh).
    fn nsqjs(lookupd_http: &str, t: &str, channel: &str, dir: &Path) -> Reader {
        let node_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("node");
        assert!(
            node_dir.join("node_modules/nsqjs").is_dir(),
            "nsqjs is not installed in {}: scripts/test.sh runs `npm ci` there",
            node_dir.display()
        );
        let out = dir.join(format!("{channel}.ledger"));
        let mut cmd = Command::new("node");
        cmd.arg(node_dir.join("reader.js"))
            .args([t, channel, lookupd_http])
            .arg(&out)
            .arg("20");
        Reader::spawn("nsqjs", cmd, out, dir)
    }

    /// Each body it finished, with the number of times.
    fn finished(&self) -> BTreeMap<String, u32> {
        let mut got = BTreeMap::new();
        for l in std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
        {
            if let Some(body) = l.splitn(4, ' ').nth(3) {
                *got.entry(body.to_string()).or_default() += 1;
            }
        }
        got
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().rev().take(30).collect();
        lines.into_iter().rev().collect::<Vec<_>>().join("\n")
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_pynsq_and_an_nsqjs_reader_lose_nothing_across_membership_changes_and_a_failover() {
    let dirs: Vec<tempfile::TempDir> = (0..5).map(|_| tempfile::tempdir().unwrap()).collect();
    let work = tempfile::tempdir().unwrap();
    let (lookupd, mut members) = start_cluster_with_lookupd(&dirs);
    let lookupd_flags = vec![
        format!("--lookupd-tcp-address={}", lookupd.tcp),
        "--broadcast-address=127.0.0.1".to_string(),
    ];
    for m in &members {
        wait_standing(&m.nsqd, "member");
    }
    agreed_leaders(&members.iter().collect::<Vec<_>>(), None);
    assert_eq!(create(&members[0].nsqd, TOPIC, 3), (200, String::new()));
    wait_replicas(&members, TOPIC, 3);
    // the load's own consumer's channel, and one per Reader: made before
    // the first message, so each gets every one
    for c in ["c", "py", "js"] {
        let r = members[1]
            .nsqd
            .post(&format!("/channel/create?topic={TOPIC}&channel={c}"), b"");
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let readers = [
        Reader::pynsq(&lookupd.http, TOPIC, "py", work.path()),
        Reader::nsqjs(&lookupd.http, TOPIC, "js", work.path()),
    ];
    let load = Load::start(&members);
    for r in &readers {
        wait_for(
            ELECTION_WAIT,
            &format!("the {} Reader finishing messages", r.name),
            || (r.finished().len() >= 50).then_some(()),
        );
    }
    let ports = free_ports(2);
    let mut windows = Vec::new();

    // Member 4 is added through member 2.
    let from = Instant::now();
    let peers = peer_list(&members);
    let new = join(4, ports[0], &peers, &lookupd_flags, dirs[3].path(), || {
        change_until_made(
            &members[1].nsqd,
            "add",
            &format!("id=4&address=127.0.0.1:{}", ports[0]),
            4,
        );
    });
    load.up(&new);
    members.push(new);
    wait_settled(&members, &[1, 2, 3, 4]);
    wait_standing(&by_id(&members, 4).nsqd, "member");
    let leaders = agreed_leaders(&members.iter().collect::<Vec<_>>(), None);
    sleep_ms(2000);
    windows.push(("add member 4".to_string(), from, Instant::now()));

    // The leader of the topic's group is removed (a failover), then stopped.
    remove_topic_leader(&mut members, &load, &leaders, &mut windows);

    // A member is lost (SIGKILL), removed while down, and replaced by
    // member 5 under a new address.
    let from = Instant::now();
    let lost = lose_and_remove_newest(&mut members, &load);
    let peers = peer_list(&members);
    let new = join(5, ports[1], &peers, &lookupd_flags, dirs[4].path(), || {
        change_until_made(
            &members[members.len() - 1].nsqd,
            "add",
            &format!("id=5&address=127.0.0.1:{}", ports[1]),
            5,
        );
    });
    load.up(&new);
    members.push(new);
    let left: Vec<u64> = members.iter().map(|m| m.id).collect();
    wait_settled(&members, &left);
    wait_standing(&by_id(&members, 5).nsqd, "member");
    agreed_leaders(&members.iter().collect::<Vec<_>>(), None);
    sleep_ms(2000);
    windows.push((
        format!("member {lost} lost, removed while down, replaced by 5"),
        from,
        Instant::now(),
    ));

    // The account: the load's consumer's, then each Reader's.
    let account = load.finish(&members, &windows);
    let mut report = account.report.clone();
    assert!(
        account.lost.is_empty(),
        "acknowledged and never delivered on channel c: {:?}\n{report}",
        account.lost
    );
    assert!(
        account.quiet_steps.is_empty(),
        "the load ran through every step: {report}"
    );
    let mut failures = Vec::new();
    for r in &readers {
        let deadline = Instant::now() + ELECTION_WAIT;
        let got = loop {
            let got = r.finished();
            if account.acked.iter().all(|b| got.contains_key(b)) || Instant::now() > deadline {
                break got;
            }
            sleep_ms(500);
        };
        let lost: BTreeSet<&String> = account
            .acked
            .iter()
            .filter(|b| !got.contains_key(*b))
            .collect();
        let duplicates: u32 = got.values().map(|n| n - 1).sum();
        let unacked = got.keys().filter(|b| !account.acked.contains(*b)).count();
        report += &format!(
            "{} Reader: {} acknowledged, lost {}, duplicates {duplicates}, \
             finished without an acknowledgement {unacked}\n",
            r.name,
            account.acknowledged,
            lost.len()
        );
        if !lost.is_empty() {
            failures.push(format!(
                "{} lost {} (first {:?})\n--- its log ---\n{}",
                r.name,
                lost.len(),
                lost.iter().take(10).collect::<Vec<_>>(),
                r.log_tail()
            ));
        }
    }
    eprintln!("{report}");
    assert!(failures.is_empty(), "{}\n{report}", failures.join("\n"));
}

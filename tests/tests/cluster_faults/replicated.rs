//! A replicated topic survives losing its leader's host (project issue 21,
//! the short version the test command runs): the namespace hosts of the
//! cluster test, three nsqds `n1..n3` forming a replication cluster, the
//! topic created with `replicas=3` and its durable channels `a` and `b`
//! made through its group, a producer on every nsqd host publishing to its
//! local nsqd (a follower forwards to the leader), consumers `c2` (the
//! client crate) and `c3` (pynsq) finding the leader through the three
//! lookupds. Under load, each time with a backlog on the leader's channels
//! (the consumers stopped for 3 s), the leader's host is cut off for 10 s,
//! then the next leader's nsqd is paused (SIGSTOP) for 6 s, then the next
//! one's is SIGKILLed and its data directory removed (the page cache of a
//! namespace survives a SIGKILL; only a lost disk shows that the majority
//! had the batch) and a fresh host takes its place (the same flags, an
//! empty disk), then, once it votes, the leader is cut off again: the
//! replacement's vote elects the next. Each time the others elect a new
//! leader, which registers the topic and delivers every message its group
//! has not finished.
//!
//! Must hold: no message a producer had `OK` for is missing on `a` or
//! `b`; a leader cut off from the majority acknowledges nothing from a
//! second after the cut until the heal; after each fault publishes are
//! acknowledged again and both consumers receive steadily from the leader
//! on both channels; once drained every member counts nothing unfinished.
//! Reported: duplicates, the time until publishes succeed again and until
//! the consumers receive steadily again.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use nsq_tests::ledger::Ledgers;
use nsq_tests::{bin_dir, http_request_timeout, netns, now_ns, sleep_ms};

use crate::topology::*;

const MEMBERS: [&str; 3] = ["n1", "n2", "n3"];
const READERS: [&str; 2] = ["c2", "c3"];
/// Port of each member's replication listener.
const RAFT_PORT: u16 = 4200;

#[test]
fn replicated_topic_survives_losing_its_leader() {
    if let Err(why) = netns::available() {
        eprintln!("SKIPPED replicated_topic_survives_losing_its_leader: {why}");
        return;
    }
    if crate::is_go(&bin_dir().join("nsqd")) {
        eprintln!("SKIPPED replicated_topic_survives_losing_its_leader: NSQ's nsqd has no replicated topics");
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("nsq-replicated-")
        .tempdir()
        .expect("temp dir");
    let path = dir.path().to_path_buf();
    eprintln!("replicated cluster run in {}", path.display());
    let outcome = std::panic::catch_unwind(|| run(&path));
    let failures = match outcome {
        Ok(Ok(failures)) => failures,
        Ok(Err(e)) => vec![e],
        Err(panic) => {
            let _ = dir.keep();
            eprintln!("run directory kept: {}", path.display());
            std::panic::resume_unwind(panic);
        }
    };
    if !failures.is_empty() {
        let _ = dir.keep();
        eprintln!("run directory kept: {}", path.display());
    }
    assert!(
        failures.is_empty(),
        "replicated run failed:\n{}",
        failures.join("\n")
    );
}

fn http(addr: &str, method: &str, path: &str) -> Result<serde_json::Value, String> {
    let r = http_request_timeout(addr, method, path, &[], None, Duration::from_secs(8))
        .map_err(|e| format!("{method} {path} on {addr}: {e}"))?;
    if r.status != 200 {
        return Err(format!(
            "{method} {path} on {addr}: {} {}",
            r.status,
            r.text()
        ));
    }
    Ok(serde_json::from_slice(&r.body).unwrap_or(serde_json::Value::Null))
}

/// The leader of `TOPIC`'s group as every one of `hosts` reports it.
fn agreed_leader(hosts: &[&str]) -> Option<String> {
    let mut seen = BTreeSet::new();
    for h in hosts {
        let v = http(
            &nsqd_http(h),
            "GET",
            &format!("/stats?format=json&topic={TOPIC}"),
        )
        .ok()?;
        let topic = v["topics"]
            .as_array()?
            .iter()
            .find(|t| t["topic_name"] == TOPIC)?;
        seen.insert(topic["replication"]["leader"].as_u64()?);
    }
    match seen.len() {
        1 => seen.first().map(|id| format!("n{id}")),
        _ => None,
    }
}

fn wait<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Some(v) = f() {
            return Some(v);
        }
        sleep_ms(200);
    }
    None
}

fn secs(ns: i64) -> f64 {
    ns as f64 / 1e9
}

fn run(dir: &Path) -> Result<Vec<String>, String> {
    let started = Instant::now();
    let log = |what: &str| eprintln!("[{:>6.1}s] {what}", started.elapsed().as_secs_f64());
    let mut cluster = Cluster::create(dir, Timing::standard(), Bins::locate()?)?;
    for l in LOOKUPDS {
        cluster.start_lookupd(l)?;
    }
    let peers = MEMBERS
        .iter()
        .map(|h| format!("{}@{}:{RAFT_PORT}", &h[1..], ip_of(h)))
        .collect::<Vec<_>>()
        .join(",");
    let member_flags = |h: &str| {
        [
            format!("--replication-address={}:{RAFT_PORT}", ip_of(h)),
            format!("--replication-peer={peers}"),
            "--replication-groups=4".to_string(),
        ]
    };
    for h in MEMBERS {
        cluster.start_nsqd_with(h, &member_flags(h))?;
        cluster.live.insert(h.to_string());
    }
    // Created through any member once the groups have leaders; the
    // channels too, so each gets every message.
    wait(Duration::from_secs(60), || {
        http(
            &nsqd_http("n1"),
            "POST",
            &format!("/topic/create?topic={TOPIC}&replicas=3"),
        )
        .ok()
    })
    .ok_or("the replicated topic was not created within 60 s")?;
    // Through another member, once it has applied the topic.
    for ch in DURABLE {
        let path = format!("/channel/create?topic={TOPIC}&channel={ch}");
        wait(Duration::from_secs(30), || {
            http(&nsqd_http("n2"), "POST", &path).ok()
        })
        .ok_or(format!("{path} on n2 did not succeed within 30 s"))?;
    }
    let leader = wait(Duration::from_secs(30), || agreed_leader(&MEMBERS))
        .ok_or("the members never agreed on the topic's leader")?;
    log(&format!("replicated topic led by {leader}"));
    let rate = 20.0;
    for h in MEMBERS {
        cluster.start_producer(h, rate)?;
    }
    for c in READERS {
        cluster.start_consumer(c)?;
    }
    // Both consumers on both channels of the leader.
    wait(Duration::from_secs(60), || {
        let b = http(
            &nsqd_http(&leader),
            "GET",
            &format!("/stats?format=json&topic={TOPIC}"),
        )
        .ok()?;
        let t = b["topics"].as_array()?.first()?.clone();
        let ready =
            DURABLE.iter().all(|ch| {
                t["channels"].as_array().into_iter().flatten().any(|c| {
                    c["channel_name"] == *ch && c["client_count"].as_u64().unwrap_or(0) >= 2
                })
            });
        ready.then_some(())
    })
    .ok_or("the consumers did not reach the leader within 60 s")?;
    log("load running");
    sleep_ms(5_000);

    let mut failures = Vec::new();
    let mut rounds = Vec::new();
    let mut leader = leader;
    let mut replaced_in = None;
    for fault in [
        Fault::Partition,
        Fault::Pause,
        Fault::Loss,
        Fault::Partition,
    ] {
        let round = leader_fault(&mut cluster, fault, &leader)?;
        log(&format!(
            "{}: {} led, then {}, after the heal {}",
            fault.name(),
            round.lost,
            round.next,
            round.settled
        ));
        leader = round.settled.clone();
        if fault == Fault::Loss {
            // A fresh host takes its place: the same flags, an empty disk.
            // It must hold what the group committed before it votes; the
            // next partition of the leader needs its vote.
            let lost = round.lost.clone();
            let since = Instant::now();
            cluster.start_nsqd_with(&lost, &member_flags(&lost))?;
            cluster.live.insert(lost.clone());
            cluster.start_producer(&lost, rate)?;
            let standing = || {
                http(&nsqd_http(&lost), "GET", "/replication")
                    .ok()
                    .and_then(|v| v["standing"].as_str().map(str::to_string))
            };
            wait(Duration::from_secs(60), || {
                (standing().as_deref() == Some("member")).then_some(())
            })
            .ok_or(format!(
                "the replacement of {lost} never voted again (standing {:?})",
                standing()
            ))?;
            let took = since.elapsed();
            log(&format!(
                "{lost} replaced by a fresh host: voting after {:.1} s",
                took.as_secs_f64()
            ));
            replaced_in = Some(took);
        }
        rounds.push(round);
        sleep_ms(8_000);
    }
    // Each round's deliveries are judged until the consumers stop for the
    // next one.
    for i in 1..rounds.len() {
        rounds[i - 1].until = rounds[i].fault_at - 3_500_000_000;
    }
    let left: Vec<&str> = MEMBERS
        .iter()
        .copied()
        .filter(|h| cluster.live.contains(*h))
        .collect();
    let last = leader;
    for h in &left {
        let st = cluster
            .proc(&format!("producer@{h}"))
            .terminate(Duration::from_secs(20));
        if st.and_then(|s| s.code()) != Some(0) {
            failures.push(format!("producer on {h} did not exit cleanly: {st:?}"));
        }
    }
    let drained = wait(Duration::from_secs(120), || {
        let b = cluster.backlog(&last)?;
        ["topic", "a", "b"]
            .iter()
            .all(|k| b.get(*k).copied().unwrap_or(0) == 0)
            .then_some(())
    });
    if drained.is_none() {
        failures.push(format!(
            "{last} did not drain: {:?}",
            cluster.backlog(&last)
        ));
    }
    // Drained on the leader, and every FIN reached the log: both members
    // count nothing committed and not finished (the last FINs commit
    // within a round of 100 ms).
    for h in &left {
        let unfinished = || {
            http(
                &nsqd_http(h),
                "GET",
                &format!("/stats?format=json&topic={TOPIC}"),
            )
            .ok()
            .and_then(|v| v["topics"][0]["replication"]["unfinished"].as_u64())
        };
        if wait(Duration::from_secs(10), || {
            (unfinished() == Some(0)).then_some(())
        })
        .is_none()
        {
            failures.push(format!(
                "{h} still counts {:?} messages unfinished after the drain",
                unfinished()
            ));
        }
    }
    for c in READERS {
        let st = cluster
            .proc(&format!("consumer@{c}"))
            .terminate(Duration::from_secs(40));
        if st.and_then(|s| s.code()) != Some(0) {
            failures.push(format!("consumer {c} did not exit cleanly: {st:?}"));
        }
    }
    for h in &left {
        let st = cluster
            .proc(&format!("nsqd@{h}"))
            .terminate(Duration::from_secs(30));
        if st.and_then(|s| s.code()) != Some(0) {
            failures.push(format!("nsqd {h} did not exit cleanly on SIGTERM: {st:?}"));
        }
    }
    log("drained and stopped");

    let mut ledgers = Ledgers::default();
    for h in MEMBERS {
        if let Ok(text) = std::fs::read_to_string(cluster.producer_ledger(h)) {
            ledgers.add_producer(&text);
        }
    }
    for c in READERS {
        let text = std::fs::read_to_string(cluster.consumer_ledger(c))
            .map_err(|e| format!("ledger of {c}: {e}"))?;
        ledgers.add_consumer(c, &text);
    }
    let mut report = "replicated topic, replicas=3 on 3 members: the leader partitioned, paused, lost with its disk and replaced by a fresh host, then partitioned again\n\n| channel | acknowledged | lost | duplicates | publish→delivery p99 |\n|---|---|---|---|---|\n"
        .to_string();
    for ch in DURABLE {
        let acc = ledgers.account(ch, i64::MIN, i64::MAX);
        report.push_str(&format!(
            "| {ch} | {} | {} | {} | {:.2} s |\n",
            acc.acknowledged,
            acc.lost,
            acc.duplicates,
            secs(acc.latency_p99_ns)
        ));
        if acc.lost > 0 {
            failures.push(format!(
                "channel {ch}: {} acknowledged messages lost, e.g. {:?}",
                acc.lost, acc.lost_examples
            ));
        }
        if acc.acknowledged == 0 {
            failures.push(format!("channel {ch}: nothing acknowledged"));
        }
    }
    report.push_str("\n| fault | leader, then | longest time without an OK | consumers steady from the new leader | OKs from the cut-off side meanwhile |\n|---|---|---|---|---|\n");
    let gap = cluster.timing.steady_gap.as_nanos() as i64;
    for r in &rounds {
        let oks = |h: &str| -> Vec<i64> {
            std::fs::read_to_string(cluster.producer_ledger(h))
                .unwrap_or_default()
                .lines()
                .filter(|l| l.starts_with("OK "))
                .filter_map(|l| l.split(' ').nth(3)?.parse::<i64>().ok())
                .collect()
        };
        // The publish outage: the longest time without an `OK` to a
        // producer on another member (`OK <id> <sent_ns> <ok_ns>`) from the
        // fault until the round's end (a batch the old leader committed
        // just before may still be answered just after).
        let mut acked: Vec<i64> = MEMBERS
            .iter()
            .filter(|h| **h != r.lost)
            .flat_map(|h| oks(h))
            .filter(|ok| *ok > r.fault_at && *ok < r.until)
            .collect();
        acked.sort_unstable();
        let outage = acked.first().map(|first| {
            acked
                .windows(2)
                .map(|w| w[1] - w[0])
                .fold(first - r.fault_at, i64::max)
        });
        // The cut-off leader must not acknowledge once it cannot reach a
        // majority: a second after the fault (a batch already on the
        // others may still be answered) until the heal.
        let cut_off = match r.fault {
            Fault::Loss => 0,
            _ => oks(&r.lost)
                .into_iter()
                .filter(|ok| *ok > r.fault_at + 1_000_000_000 && *ok < r.heal_at)
                .count(),
        };
        if cut_off > 0 {
            failures.push(format!(
                "{}: {} publishes acknowledged by {} while it could not reach a majority",
                r.fault.name(),
                cut_off,
                r.lost
            ));
        }
        let wanted: Vec<(String, String, String)> = READERS
            .iter()
            .flat_map(|c| {
                DURABLE
                    .iter()
                    .map(|ch| (c.to_string(), ch.to_string(), nsqd_tcp(&r.settled)))
            })
            .collect();
        let steady = ledgers.steady_after(r.fault_at, r.until, gap, i64::MAX, &wanted);
        let mut worst = 0i64;
        for (w, since) in wanted.iter().zip(steady) {
            match since {
                Some(at) => worst = worst.max(at - r.fault_at),
                None => failures.push(format!(
                    "{}: {} on {} never received steadily from {}",
                    r.fault.name(),
                    w.0,
                    w.1,
                    r.settled
                )),
            }
        }
        match outage {
            Some(outage) => report.push_str(&format!(
                "| {} | {}, then {} ({} after the heal) | {:.1} s | {:.1} s | {} |\n",
                r.fault.name(),
                r.lost,
                r.next,
                r.settled,
                secs(outage),
                secs(worst),
                cut_off
            )),
            None => failures.push(format!(
                "{}: no publish acknowledged after the fault",
                r.fault.name()
            )),
        }
    }
    if let Some(took) = replaced_in {
        report.push_str(&format!(
            "\nthe fresh host replacing the lost one voted {:.1} s after it started\n",
            took.as_secs_f64()
        ));
    }
    eprintln!("{report}");
    Ok(failures)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// The leader's host cut off (link down) for 10 s.
    Partition,
    /// The leader's nsqd SIGSTOPped for 6 s (past the election timeout).
    Pause,
    /// The leader's nsqd SIGKILLed and its data directory removed.
    Loss,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::Partition => "leader partitioned 10 s",
            Fault::Pause => "leader paused 6 s",
            Fault::Loss => "leader's host lost (SIGKILL, disk removed)",
        }
    }
}

/// One fault of the leader and what followed.
struct Round {
    fault: Fault,
    /// The leader it happened to.
    lost: String,
    /// The leader the others elected.
    next: String,
    /// The leader every live member agreed on after the heal.
    settled: String,
    fault_at: i64,
    heal_at: i64,
    /// Where the round's deliveries are judged to (the next round's fault).
    until: i64,
}

/// Stops both consumers for 3 s (the leader's channels then hold a backlog
/// only the group's log has once the leader is gone), does `fault` to
/// `leader`'s host, waits until the others elect another, lets the
/// consumers go on, heals (partition, pause), and waits until every live
/// member agrees on the new leader.
fn leader_fault(cluster: &mut Cluster, fault: Fault, leader: &str) -> Result<Round, String> {
    for c in READERS {
        cluster.proc(&format!("consumer@{c}")).freeze();
    }
    sleep_ms(3_000);
    let fault_at = now_ns();
    match fault {
        Fault::Partition => cluster.net.link_down(leader)?,
        Fault::Pause => cluster.proc(&format!("nsqd@{leader}")).freeze(),
        Fault::Loss => {
            cluster.proc(&format!("nsqd@{leader}")).kill();
            let _ = std::fs::remove_dir_all(cluster.data_dir(leader));
            cluster
                .proc(&format!("producer@{leader}"))
                .terminate(Duration::from_secs(20));
            cluster.live.remove(leader);
        }
    }
    let others: Vec<&str> = MEMBERS
        .iter()
        .copied()
        .filter(|h| *h != leader && cluster.live.contains(*h))
        .collect();
    // Until their election timeout they still name the lost one.
    let next = wait(Duration::from_secs(60), || {
        agreed_leader(&others).filter(|l| l != leader)
    });
    for c in READERS {
        cluster.proc(&format!("consumer@{c}")).signal(libc::SIGCONT);
    }
    let held = match fault {
        Fault::Partition => Duration::from_secs(10),
        Fault::Pause => Duration::from_secs(6),
        Fault::Loss => Duration::ZERO,
    };
    let deadline = Instant::now() + held;
    while Instant::now() < deadline {
        sleep_ms(100);
    }
    match fault {
        Fault::Partition => cluster.net.link_up(leader)?,
        Fault::Pause => cluster
            .proc(&format!("nsqd@{leader}"))
            .signal(libc::SIGCONT),
        Fault::Loss => {}
    }
    let heal_at = now_ns();
    let next = next.ok_or(format!(
        "{}: the others never agreed on a new leader",
        fault.name()
    ))?;
    let live: Vec<&str> = MEMBERS
        .iter()
        .copied()
        .filter(|h| cluster.live.contains(*h))
        .collect();
    // The one cut off may have stood for election meanwhile (in a later
    // term): after the heal the members may elect again.
    let settled = wait(Duration::from_secs(60), || agreed_leader(&live)).ok_or(format!(
        "{}: the members never agreed on a leader after the heal",
        fault.name()
    ))?;
    Ok(Round {
        fault,
        lost: leader.to_string(),
        next,
        settled,
        fault_at,
        heal_at,
        until: i64::MAX,
    })
}

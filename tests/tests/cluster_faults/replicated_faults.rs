//! The faults of the replicated topic's run (`replicated.rs`) and how each
//! is done to the namespace cluster: which member it hits, what heals it,
//! and which leader the members agree on after. Never: judging the
//! deliveries (the run reads the ledgers).

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use nsq_tests::{http_request_timeout, now_ns, sleep_ms};

use crate::topology::*;

/// The members of the three-member shape.
pub const MEMBERS: [&str; 3] = ["n1", "n2", "n3"];
pub const READERS: [&str; 2] = ["c2", "c3"];
/// Port of each member's replication listener.
pub const RAFT_PORT: u16 = 4200;

/// Entries between a group's snapshots: small, so every member snapshots
/// and purges its log during the run (about every 5 s at the run's rate)
/// and a host replacing a lost one is sent the leader's snapshot.
pub const SNAPSHOT_ENTRIES: u32 = 500;

/// The members of a fault run and the replicas of its topic.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub members: &'static [&'static str],
    pub replicas: u8,
}

/// Three members, the topic on all three.
pub const THREE: Shape = Shape {
    members: &MEMBERS,
    replicas: 3,
};

/// Five members, the topic on a group of three of them: two members
/// outside it forward their publishes.
pub const FIVE: Shape = Shape {
    members: &["n1", "n2", "n3", "n4", "n5"],
    replicas: 3,
};

impl Shape {
    /// `NSQ_REPLICATED_MEMBERS`: 3 or 5 (the default).
    pub fn from_env() -> Shape {
        match nsq_tests::env_usize("NSQ_REPLICATED_MEMBERS", 5) {
            3 => THREE,
            _ => FIVE,
        }
    }
}

/// A member's replication flags in a cluster of `members`: the same on
/// every member.
pub fn member_flags_in(h: &str, members: &[&str]) -> Vec<String> {
    let peers = members
        .iter()
        .map(|m| format!("{}@{}:{RAFT_PORT}", &m[1..], ip_of(m)))
        .collect::<Vec<_>>()
        .join(",");
    vec![
        format!("--replication-address={}:{RAFT_PORT}", ip_of(h)),
        format!("--replication-peer={peers}"),
        "--replication-groups=4".to_string(),
        format!("--replication-snapshot-entries={SNAPSHOT_ENTRIES}"),
    ]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The leader's host cut off (link down) for 10 s.
    Partition,
    /// The leader's nsqd SIGSTOPped for 6 s (past the election timeout).
    Pause,
    /// The leader's nsqd SIGKILLed, its data directory removed, and a
    /// fresh host (same flags, empty disk) started in its place.
    Loss,
    /// The same done to a follower.
    FollowerLoss,
    /// The leader and a follower SIGKILLed (disks kept): no majority for
    /// 10 s, then the follower back, then the old leader.
    TwoLost,
}

impl Fault {
    pub const ALL: [Fault; 5] = [
        Fault::Partition,
        Fault::Pause,
        Fault::Loss,
        Fault::FollowerLoss,
        Fault::TwoLost,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fault::Partition => "leader partitioned 10 s",
            Fault::Pause => "leader paused 6 s",
            Fault::Loss => "leader's host lost (SIGKILL, disk removed), replaced",
            Fault::FollowerLoss => "a follower's host lost (SIGKILL, disk removed), replaced",
            Fault::TwoLost => "two of three lost (SIGKILL) 10 s",
        }
    }

    fn held(self) -> Duration {
        match self {
            Fault::Partition | Fault::TwoLost => Duration::from_secs(10),
            Fault::Pause => Duration::from_secs(6),
            Fault::Loss | Fault::FollowerLoss => Duration::ZERO,
        }
    }
}

/// One fault and what followed.
pub struct Round {
    pub fault: Fault,
    /// The leader before the fault.
    pub leader: String,
    /// The members it hit.
    pub hit: Vec<String>,
    /// The members that must not acknowledge from a second after the
    /// fault until the heal: the leader cut off or paused; with two of
    /// the group's three lost, every member left.
    pub cut_off: Vec<String>,
    /// The leader the others elected (for two lost: once one came back).
    pub next: String,
    /// The leader every live member agreed on after the heal.
    pub settled: String,
    pub fault_at: i64,
    pub heal_at: i64,
    /// Where the round's deliveries are judged to (the next round's fault).
    pub until: i64,
    /// How long a fresh host took to vote again, where one was started.
    pub replaced_in: Option<Duration>,
}

pub fn http(addr: &str, method: &str, path: &str) -> Result<serde_json::Value, String> {
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
pub fn agreed_leader(hosts: &[&str]) -> Option<String> {
    agreed_leader_of(TOPIC, hosts)
}

/// `topic` in `host`'s JSON `/stats`.
fn topic_stats(host: &str, topic: &str) -> Option<serde_json::Value> {
    let v = http(
        &nsqd_http(host),
        "GET",
        &format!("/stats?format=json&topic={topic}"),
    )
    .ok()?;
    v["topics"]
        .as_array()?
        .iter()
        .find(|t| t["topic_name"] == topic)
        .cloned()
}

/// The member every one of `hosts` names as `topic`'s leader.
pub fn agreed_leader_of(topic: &str, hosts: &[&str]) -> Option<String> {
    let mut seen = BTreeSet::new();
    for h in hosts {
        let t = topic_stats(h, topic)?;
        seen.insert(t["replication"]["leader"].as_u64()?);
    }
    match seen.len() {
        1 => seen.first().map(|id| format!("n{id}")),
        _ => None,
    }
}

/// The voters of `TOPIC`'s group as member `host` lists them.
pub fn topic_voters(host: &str) -> Option<Vec<String>> {
    topic_stats(host, TOPIC)?["replication"]["replicas"]
        .as_array()?
        .iter()
        .map(|r| r["node_id"].as_u64().map(|id| format!("n{id}")))
        .collect()
}

/// The namespace hosts with the three lookupds and `members` running,
/// each with `flags(host)` (the fault run: [`member_flags_in`]).
pub fn start_members(
    dir: &Path,
    members: &[&str],
    flags: impl Fn(&str) -> Vec<String>,
) -> Result<Cluster, String> {
    let mut cluster = Cluster::create(dir, Timing::standard(), Bins::locate()?)?;
    for l in LOOKUPDS {
        cluster.start_lookupd(l)?;
    }
    for &h in members {
        cluster.start_nsqd_with(h, &flags(h))?;
        cluster.live.insert(h.to_string());
    }
    Ok(cluster)
}

pub fn wait<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Some(v) = f() {
            return Some(v);
        }
        sleep_ms(200);
    }
    None
}

fn live_members(cluster: &Cluster, shape: Shape) -> Vec<&'static str> {
    shape
        .members
        .iter()
        .copied()
        .filter(|h| cluster.live.contains(*h))
        .collect()
}

/// Kills `host`'s nsqd and its producer and removes its disk.
fn lose_host(cluster: &mut Cluster, host: &str) {
    cluster.proc(&format!("nsqd@{host}")).kill();
    let _ = std::fs::remove_dir_all(cluster.data_dir(host));
    cluster
        .proc(&format!("producer@{host}"))
        .terminate(Duration::from_secs(20));
    cluster.live.remove(host);
}

/// A fresh host in `host`'s place (same flags, empty disk) and its
/// producer; how long until it votes again.
fn replace_host(
    cluster: &mut Cluster,
    shape: Shape,
    host: &str,
    rate: f64,
) -> Result<Duration, String> {
    let since = Instant::now();
    cluster.start_nsqd_with(host, &member_flags_in(host, shape.members))?;
    cluster.live.insert(host.to_string());
    cluster.start_producer(host, rate)?;
    let standing = || {
        http(&nsqd_http(host), "GET", "/replication")
            .ok()
            .and_then(|v| v["standing"].as_str().map(str::to_string))
    };
    wait(Duration::from_secs(60), || {
        (standing().as_deref() == Some("member")).then_some(())
    })
    .ok_or(format!(
        "the replacement of {host} never voted again (standing {:?})",
        standing()
    ))?;
    Ok(since.elapsed())
}

/// Stops both consumers for 3 s (the leader's channels then hold a backlog
/// only the group's log has once the leader is gone), does `fault`, waits
/// until the others elect a leader, lets the consumers go on, heals, and
/// waits until every live member agrees on the leader. The follower hit
/// is a voter of the topic's group.
pub fn apply(
    cluster: &mut Cluster,
    shape: Shape,
    fault: Fault,
    leader: &str,
    rate: f64,
) -> Result<Round, String> {
    let voters = topic_voters(leader).ok_or(format!("{leader} lists no voters of the topic"))?;
    for c in READERS {
        cluster.proc(&format!("consumer@{c}")).freeze();
    }
    sleep_ms(3_000);
    let follower = live_members(cluster, shape)
        .into_iter()
        .find(|h| *h != leader && voters.iter().any(|v| v == h))
        .ok_or("no follower to hit")?
        .to_string();
    let flags = |h: &str| member_flags_in(h, shape.members);
    let fault_at = now_ns();
    let hit: Vec<String> = match fault {
        Fault::Partition => {
            cluster.net.link_down(leader)?;
            vec![leader.to_string()]
        }
        Fault::Pause => {
            cluster.proc(&format!("nsqd@{leader}")).freeze();
            vec![leader.to_string()]
        }
        Fault::Loss => {
            lose_host(cluster, leader);
            vec![leader.to_string()]
        }
        Fault::FollowerLoss => {
            lose_host(cluster, &follower);
            vec![follower.clone()]
        }
        Fault::TwoLost => {
            for h in [leader, follower.as_str()] {
                cluster.proc(&format!("nsqd@{h}")).kill();
                cluster.live.remove(h);
            }
            vec![leader.to_string(), follower.clone()]
        }
    };
    let others: Vec<&str> = shape
        .members
        .iter()
        .copied()
        .filter(|h| !hit.iter().any(|x| x == h) && cluster.live.contains(*h))
        .collect();
    let cut_off = match fault {
        Fault::Partition | Fault::Pause => vec![leader.to_string()],
        Fault::TwoLost => others.iter().map(|h| h.to_string()).collect(),
        Fault::Loss | Fault::FollowerLoss => Vec::new(),
    };
    // Until their election timeout they still name the lost one; a
    // follower's loss changes no leader; two lost leave no majority.
    let next = match fault {
        Fault::TwoLost => None,
        Fault::FollowerLoss => wait(Duration::from_secs(60), || agreed_leader(&others)),
        _ => wait(Duration::from_secs(60), || {
            agreed_leader(&others).filter(|l| l != leader)
        }),
    };
    for c in READERS {
        cluster.proc(&format!("consumer@{c}")).signal(libc::SIGCONT);
    }
    let deadline = Instant::now() + fault.held();
    while Instant::now() < deadline {
        sleep_ms(100);
    }
    let mut replaced_in = None;
    match fault {
        Fault::Partition => cluster.net.link_up(leader)?,
        Fault::Pause => cluster
            .proc(&format!("nsqd@{leader}"))
            .signal(libc::SIGCONT),
        Fault::Loss | Fault::FollowerLoss => {
            replaced_in = Some(replace_host(cluster, shape, &hit[0], rate)?);
        }
        Fault::TwoLost => {
            cluster.start_nsqd_with(&follower, &flags(&follower))?;
            cluster.live.insert(follower.clone());
        }
    }
    let heal_at = now_ns();
    let next = match (fault, next) {
        (Fault::TwoLost, _) => wait(Duration::from_secs(60), || {
            agreed_leader(&live_members(cluster, shape))
        }),
        (_, next) => next,
    }
    .ok_or(format!(
        "{}: the others never agreed on a new leader",
        fault.name()
    ))?;
    if fault == Fault::TwoLost {
        cluster.start_nsqd_with(leader, &flags(leader))?;
        cluster.live.insert(leader.to_string());
    }
    // The one cut off may have stood for election meanwhile (in a later
    // term): after the heal the members may elect again.
    let settled = wait(Duration::from_secs(60), || {
        agreed_leader(&live_members(cluster, shape))
    })
    .ok_or(format!(
        "{}: the members never agreed on a leader after the heal",
        fault.name()
    ))?;
    Ok(Round {
        fault,
        leader: leader.to_string(),
        hit,
        cut_off,
        next,
        settled,
        fault_at,
        heal_at,
        until: i64::MAX,
        replaced_in,
    })
}

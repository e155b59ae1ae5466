//! The helpers of the replication tests: three members on 127.0.0.1 with
//! the replication flags, what `GET /replication` says of their groups,
//! placement computed independently of nsqd, and replicated topics'
//! creation and presence on every member.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use nsq_tests::{free_ports, wait_for, Lookupd, Nsqd};
use serde_json::Value;

pub const GROUPS: usize = 4;
pub const WAIT: Duration = Duration::from_secs(30);
/// For the members to agree on every group's leader after one is stopped:
/// on a loaded CI machine (debug builds, eight suites at once, the
/// 300 ms election timeout below) this once took longer than `WAIT`;
/// alone it takes about a second.
pub const ELECTION_WAIT: Duration = Duration::from_secs(60);

pub struct Member {
    pub id: u64,
    pub nsqd: Nsqd,
    pub args: Vec<String>,
}

/// Takes member `id` out of `members` and stops it with SIGTERM (a clean
/// exit, checked); the stopped member is returned to be restarted or kept.
pub fn stop_member(members: &mut Vec<Member>, id: u64) -> Member {
    let at = members
        .iter()
        .position(|m| m.id == id)
        .unwrap_or_else(|| panic!("no member {id}"));
    let mut gone = members.remove(at);
    let st = gone.nsqd.sigterm_and_wait(Duration::from_secs(10));
    assert!(st.success(), "member {id} stopped with {st}");
    gone
}

pub fn member_args(id: u64, port: u16, peers: &str) -> Vec<String> {
    vec![
        format!("--node-id={id}"),
        format!("--replication-address=127.0.0.1:{port}"),
        format!("--replication-peer={peers}"),
        format!("--replication-groups={GROUPS}"),
        "--replication-election-timeout=300ms".into(),
    ]
}

/// The running members as `--replication-peer` names them (`id@address`),
/// for a member that joins them.
pub fn peer_list(members: &[Member]) -> String {
    members
        .iter()
        .map(|m| {
            let addr = m
                .args
                .iter()
                .find_map(|a| a.strip_prefix("--replication-address="))
                .unwrap_or_else(|| panic!("member {} has no --replication-address", m.id));
            format!("{}@{addr}", m.id)
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Once every member stands and agrees on each group's leader: `topic`
/// created with `replicas` through member 0, on every member, and its
/// channel `c` created through member 1.
pub fn topic_with_channel(members: &[Member], topic: &str, replicas: u8) {
    for m in members {
        wait_standing(&m.nsqd, "member");
    }
    agreed_leaders(&members.iter().collect::<Vec<_>>(), None);
    assert_eq!(
        create(&members[0].nsqd, topic, replicas),
        (200, String::new())
    );
    wait_replicas(members, topic, u64::from(replicas));
    let r = members[1]
        .nsqd
        .post(&format!("/channel/create?topic={topic}&channel=c"), b"");
    assert_eq!(r.status, 200, "{}", r.text());
}

pub fn start(dir: &Path, args: &[String]) -> Nsqd {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    Nsqd::start_in(dir, &a)
}

pub fn replication(n: &Nsqd) -> Value {
    let r = n.get("/replication");
    assert_eq!(r.status, 200, "GET /replication: {}", r.text());
    r.json()
}

/// Waits (up to `WAIT`) until `n`'s `GET /replication` says `standing`:
/// a new cluster's members start as `joining` until they have greeted a
/// majority, which a loaded machine can make take seconds.
pub fn wait_standing(n: &Nsqd, standing: &str) {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let r = replication(n);
        if r["standing"] == standing {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "standing is not {standing}: {r}\n{}",
            n.stderr()
        );
        nsq_tests::sleep_ms(100);
    }
}

/// Each group's leader as `n` sees it (None while it knows none).
pub fn leaders(n: &Nsqd) -> Vec<Option<u64>> {
    let r = replication(n);
    let groups = r["groups"].as_array().expect("groups");
    assert_eq!(groups.len(), GROUPS);
    groups.iter().map(|g| g["leader"].as_u64()).collect()
}

/// Waits until every member in `ms` sees a leader in every group, all the
/// same, none of them `not`; those leaders. On a timeout it panics with
/// what each member saw last and the end of each one's log.
pub fn agreed_leaders(ms: &[&Member], not: Option<u64>) -> Vec<u64> {
    agreed_leaders_with(ms, not, None)
}

/// [`agreed_leaders`], with `not` barred from leading `group` only (a
/// member that was stopped and resumed may lead other groups again).
pub fn agreed_leaders_except_in(ms: &[&Member], group: usize, not: u64) -> Vec<u64> {
    agreed_leaders_with(ms, Some(not), Some(group))
}

fn agreed_leaders_with(ms: &[&Member], not: Option<u64>, only: Option<usize>) -> Vec<u64> {
    let deadline = std::time::Instant::now() + ELECTION_WAIT;
    loop {
        let views: Vec<Vec<Option<u64>>> = ms.iter().map(|m| leaders(&m.nsqd)).collect();
        let all: Option<Vec<u64>> = views[0].iter().copied().collect();
        if let Some(all) = all {
            let fresh = match (not, only) {
                (None, _) => true,
                (Some(x), None) => !all.contains(&x),
                (Some(x), Some(g)) => all.get(g) != Some(&x),
            };
            if fresh && views.iter().all(|v| *v == views[0]) {
                return all;
            }
        }
        if std::time::Instant::now() > deadline {
            let logs: Vec<String> = ms
                .iter()
                .map(|m| {
                    let err = m.nsqd.stderr();
                    let tail: Vec<&str> = err.lines().rev().take(40).collect();
                    let tail: Vec<&str> = tail.into_iter().rev().collect();
                    format!("--- member {} ---\n{}", m.id, tail.join("\n"))
                })
                .collect();
            panic!(
                "members never agreed on a leader per group within {ELECTION_WAIT:?} (not {not:?}); last views {views:?}\n{}",
                logs.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Three members, ids 1 to 3, each in its own directory of `dirs`, with
/// `extra(id)` flags.
pub fn start_cluster(
    dirs: &[tempfile::TempDir],
    extra: impl Fn(u64) -> Vec<String>,
) -> Vec<Member> {
    start_cluster_of(3, dirs, extra)
}

/// [`start_cluster`] of `n` members, ids 1 to `n`.
pub fn start_cluster_of(
    n: u64,
    dirs: &[tempfile::TempDir],
    extra: impl Fn(u64) -> Vec<String>,
) -> Vec<Member> {
    let ports = free_ports(n as usize);
    let peers = (1..=n)
        .map(|id| format!("{id}@127.0.0.1:{}", ports[id as usize - 1]))
        .collect::<Vec<_>>()
        .join(",");
    (1..=n)
        .map(|id| {
            let mut args = member_args(id, ports[id as usize - 1], &peers);
            args.extend(extra(id));
            let nsqd = start(dirs[id as usize - 1].path(), &args);
            Member { id, nsqd, args }
        })
        .collect()
}

/// A lookupd, and three members (as [`start_cluster`]) that register with
/// it as 127.0.0.1.
pub fn start_cluster_with_lookupd(dirs: &[tempfile::TempDir]) -> (Lookupd, Vec<Member>) {
    let lookupd = Lookupd::start(&[]);
    let members = start_cluster(dirs, |_| {
        vec![
            format!("--lookupd-tcp-address={}", lookupd.tcp),
            "--broadcast-address=127.0.0.1".into(),
        ]
    });
    (lookupd, members)
}

/// CRC-32 (IEEE), bit by bit: the placement docs/replication.md gives
/// (`core::replicas::group_of`), computed here independently.
pub fn crc32(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 == 1 {
                (c >> 1) ^ 0xEDB8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}

pub fn group_of(topic: &str) -> usize {
    (crc32(topic.as_bytes()) % GROUPS as u32) as usize
}

pub fn create(n: &Nsqd, topic: &str, replicas: u8) -> (u16, String) {
    let r = n.post(
        &format!("/topic/create?topic={topic}&replicas={replicas}"),
        b"",
    );
    (r.status, r.text())
}

/// The topic's `replicas` in `n`'s `/stats`: None for an unreplicated
/// topic, Some(None) when it has none.
pub fn replicas_of(n: &Nsqd, topic: &str) -> Option<Option<u64>> {
    n.topic_stats(topic)
        .map(|t| t.get("replicas").and_then(Value::as_u64))
}

pub fn wait_replicas(ms: &[Member], topic: &str, want: u64) {
    for m in ms {
        wait_for(WAIT, &format!("node {} showing {topic}", m.id), || {
            (replicas_of(&m.nsqd, topic) == Some(Some(want))).then_some(())
        });
    }
}

pub fn wait_gone(ms: &[Member], topic: &str) {
    for m in ms {
        wait_for(WAIT, &format!("node {} without {topic}", m.id), || {
            m.nsqd.topic_stats(topic).is_none().then_some(())
        });
    }
}

/// Each group's term as `n` sees it.
pub fn terms(n: &Nsqd) -> BTreeMap<u64, u64> {
    replication(n)["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .map(|g| (g["group"].as_u64().unwrap(), g["term"].as_u64().unwrap()))
        .collect()
}

pub fn by_id(ms: &[Member], id: u64) -> &Member {
    ms.iter().find(|m| m.id == id).expect("a member of that id")
}

/// The data directory index of member `id` (ids are 1-based).
pub fn at_dir(id: u64) -> usize {
    id as usize - 1
}

/// `topic`'s committed but not finished messages in `n`'s `/stats`.
pub fn unfinished(n: &Nsqd, topic: &str) -> Option<u64> {
    n.topic_stats(topic)?["replication"]["unfinished"].as_u64()
}

/// Waits until every member in `ms` counts `want` unfinished on `topic`.
pub fn wait_unfinished(ms: &[&Member], topic: &str, want: u64) {
    for m in ms {
        wait_for(
            WAIT,
            &format!("node {} counting {want} unfinished on {topic}", m.id),
            || (unfinished(&m.nsqd, topic) == Some(want)).then_some(()),
        );
    }
}

/// `topic` (replicas=3) and its channel `c`, made through the topic's
/// group leader among `members`; that leader's id.
pub fn led_topic_with_channel(members: &[Member], topic: &str) -> u64 {
    let all: Vec<&Member> = members.iter().collect();
    let lid = super::leader::leader_of(&all, topic, None);
    let leader = by_id(members, lid);
    assert_eq!(create(&leader.nsqd, topic, 3), (200, String::new()));
    wait_replicas(members, topic, 3);
    let r = leader
        .nsqd
        .post(&format!("/channel/create?topic={topic}&channel=c"), b"");
    assert_eq!(r.status, 200, "{}", r.text());
    lid
}

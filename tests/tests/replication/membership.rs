//! Members added and removed online (docs/replication.md, "Membership
//! online"): three members formed by `--replication-peer`, a `replicas=3`
//! topic that three producers publish to at 50 messages a second through
//! every member and a consumer that follows its group's leader; bad
//! requests are answered 400, 404 or 409 and change nothing (the map's
//! version stays); member 4 and then 5 are started naming the running
//! members only and added through `POST /replication/members/add` on
//! another member (a second change while the first is carried out is
//! 409); the leader of the topic's group is removed through
//! `/replication/members/remove` and stopped; a member is SIGKILLed,
//! removed while down, and replaced by a fresh one under a new node id and
//! address; a member formed by the flags is restarted and keeps the map
//! changed online. The account at the end:
//! every acknowledged message delivered (0 lost).

use std::net::TcpStream;
use std::time::{Duration, Instant};

use nsq_tests::{free_ports, sleep_ms, Nsqd};
use serde_json::Value;

use super::load::*;
use super::members::*;

/// `POST /replication/members/<what>?<q>` on `n`: status and body.
fn members_post(n: &Nsqd, what: &str, q: &str) -> (u16, String) {
    let r = n.post(&format!("/replication/members/{what}?{q}"), b"");
    (r.status, r.text())
}

/// Asks `n` for a change of member `id` until it is made, as an operator
/// would: a 503 (no leader of group 0, or one that changed under the
/// request) is asked again; a change an earlier attempt made after all is
/// found in the map (the next attempt is then refused). `n`'s view once
/// it is made.
pub fn change_until_made(n: &Nsqd, what: &str, q: &str, id: u64) -> Value {
    let deadline = Instant::now() + ELECTION_WAIT;
    loop {
        let (status, body) = members_post(n, what, q);
        if status == 200 {
            return serde_json::from_str(&body).unwrap();
        }
        let r = replication(n);
        if status != 503 && member_ids(&r).contains(&id) == (what == "add") {
            return r;
        }
        assert!(
            status == 503 && Instant::now() < deadline,
            "{what}?{q}: {status} {body}\n{r}"
        );
        sleep_ms(500);
    }
}

fn map_version(n: &Nsqd) -> u64 {
    replication(n)["map_version"].as_u64().expect("map_version")
}

pub fn member_ids(r: &Value) -> Vec<u64> {
    r["peers"]
        .as_array()
        .expect("peers")
        .iter()
        .map(|p| p["node_id"].as_u64().unwrap())
        .collect()
}

/// Waits until every member in `ms` shows the members `ids` and no change
/// under way.
pub fn wait_settled(ms: &[Member], ids: &[u64]) {
    let deadline = Instant::now() + ELECTION_WAIT;
    loop {
        let views: Vec<Value> = ms.iter().map(|m| replication(&m.nsqd)).collect();
        if views
            .iter()
            .all(|r| member_ids(r) == ids && r.get("change").is_none())
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the change was not carried out: {views:?}\n{}",
            ms.iter()
                .map(|m| format!("--- member {} ---\n{}", m.id, tail(&m.nsqd)))
                .collect::<Vec<_>>()
                .join("\n")
        );
        sleep_ms(200);
    }
}

fn tail(n: &Nsqd) -> String {
    let err = n.stderr();
    let lines: Vec<&str> = err.lines().rev().take(30).collect();
    lines.into_iter().rev().collect::<Vec<_>>().join("\n")
}

/// Starts member `id` naming `peers` (the running members, not itself):
/// it answers HTTP once added, so it starts on a thread while `add`
/// (called once its replication listener answers) adds it. `extra`: more
/// flags (say, nsqlookupd's address).
pub fn join(
    id: u64,
    port: u16,
    peers: &str,
    extra: &[String],
    dir: &std::path::Path,
    add: impl FnOnce(),
) -> Member {
    let mut args = member_args(id, port, peers);
    args.extend_from_slice(extra);
    let (a, d) = (args.clone(), dir.to_path_buf());
    let started = std::thread::spawn(move || start(&d, &a));
    nsq_tests::wait_for(WAIT, "the new member's replication listener", || {
        TcpStream::connect(("127.0.0.1", port)).ok()
    });
    add();
    let nsqd = started.join().expect("the new member started");
    Member { id, nsqd, args }
}

/// The step both scenarios take for a failover: the leader of `TOPIC`'s
/// group (of `leaders`) removed through another member while the load
/// runs, the others agreeing on new leaders without it, then stopped with
/// SIGTERM; the step's window (2 s of load after it) goes to `windows`.
pub fn remove_topic_leader(
    members: &mut Vec<Member>,
    load: &Load,
    leaders: &[u64],
    windows: &mut Vec<(String, Instant, Instant)>,
) {
    let from = Instant::now();
    let leader = leaders[group_of(TOPIC)];
    let asked = members
        .iter()
        .find(|m| m.id != leader)
        .expect("another member");
    load.down(leader);
    change_until_made(&asked.nsqd, "remove", &format!("id={leader}"), leader);
    let at = members
        .iter()
        .position(|m| m.id == leader)
        .expect("the leader is a member");
    let mut gone = members.remove(at);
    let left: Vec<u64> = members.iter().map(|m| m.id).collect();
    wait_settled(members, &left);
    let leaders = agreed_leaders(&members.iter().collect::<Vec<_>>(), None);
    assert!(!leaders.contains(&leader), "{leaders:?}");
    assert!(gone
        .nsqd
        .sigterm_and_wait(Duration::from_secs(10))
        .success());
    sleep_ms(2000);
    windows.push((
        format!("remove member {leader} (the leader)"),
        from,
        Instant::now(),
    ));
}

/// A host lost with its disk: the member of the highest id killed
/// (SIGKILL) and, down, removed through the first member; returns its id.
pub fn lose_and_remove_newest(members: &mut Vec<Member>, load: &Load) -> u64 {
    let lost = members.iter().map(|m| m.id).max().expect("a member");
    load.down(lost);
    let at = members.iter().position(|m| m.id == lost).expect("a member");
    let mut dead = members.remove(at);
    dead.nsqd.kill9();
    change_until_made(&members[0].nsqd, "remove", &format!("id={lost}"), lost);
    let left: Vec<u64> = members.iter().map(|m| m.id).collect();
    wait_settled(members, &left);
    lost
}

#[test]
fn members_are_added_and_removed_under_load_and_nothing_acknowledged_is_lost() {
    let dirs: Vec<tempfile::TempDir> = (0..6).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut members = start_cluster(&dirs, |_| Vec::new());
    topic_with_channel(&members, TOPIC, 3);
    let running = peer_list(&members);
    let load = Load::start(&members);
    sleep_ms(2000);
    let mut windows = Vec::new();

    // Bad requests: a clear answer, and the map unchanged.
    let n = &members[0].nsqd;
    let ports = free_ports(4);
    let nobody = format!("127.0.0.1:{}", ports[3]);
    let code = |(status, body): (u16, String)| {
        let v: Value = serde_json::from_str(&body).unwrap_or_default();
        let msg = v["message"].as_str().unwrap_or_default().to_string();
        (
            status,
            msg.split(' ').next().unwrap_or_default().to_string(),
        )
    };
    for (what, q, want) in [
        (
            "add",
            "id=2&address=127.0.0.1:1".to_string(),
            (409, "REPLICATION_MEMBER_EXISTS"),
        ),
        (
            "add",
            format!("id=4&address={nobody}"),
            (400, "REPLICATION_MEMBER_UNREACHABLE"),
        ),
        (
            "add",
            "address=127.0.0.1:1".to_string(),
            (400, "MISSING_ARG_ID"),
        ),
        (
            "add",
            "id=4&address=nohost".to_string(),
            (400, "INVALID_ARG_ADDRESS"),
        ),
        (
            "remove",
            "id=9".to_string(),
            (404, "REPLICATION_NOT_A_MEMBER"),
        ),
    ] {
        let got = code(members_post(n, what, &q));
        assert_eq!((got.0, got.1.as_str()), want, "{what}?{q}");
    }
    // an address taken by another member
    let taken = running
        .split(',')
        .nth(1)
        .unwrap()
        .split_once('@')
        .unwrap()
        .1;
    assert_eq!(
        code(members_post(n, "add", &format!("id=7&address={taken}"))),
        (409, "REPLICATION_ADDRESS_IN_USE".to_string())
    );
    for m in &members {
        assert_eq!(map_version(&m.nsqd), 0, "a refused change changed the map");
    }

    // Member 4 joins: added through member 2, a learner first; a second
    // change asked meanwhile is refused.
    let from = Instant::now();
    let new = join(4, ports[0], &running, &[], dirs[3].path(), || {
        let v = change_until_made(
            &members[1].nsqd,
            "add",
            &format!("id=4&address=127.0.0.1:{}", ports[0]),
            4,
        );
        assert_eq!(member_ids(&v), vec![1, 2, 3, 4], "{v}");
        // asked of the member that applied the add before it answered
        // (the groups carry it out from the leaders' next round, 200 ms)
        assert_eq!(
            code(members_post(
                &members[1].nsqd,
                "add",
                &format!("id=5&address=127.0.0.1:{}", ports[1])
            )),
            (409, "REPLICATION_CHANGE_IN_PROGRESS".to_string())
        );
    });
    load.up(&new);
    members.push(new);
    wait_settled(&members, &[1, 2, 3, 4]);
    wait_standing(&by_id(&members, 4).nsqd, "member");
    agreed_leaders(&members.iter().collect::<Vec<_>>(), None);
    sleep_ms(2000);
    windows.push(("add member 4".to_string(), from, Instant::now()));

    // Member 5 joins through member 4, itself added online.
    let from = Instant::now();
    let running4 = format!("{running},4@127.0.0.1:{}", ports[0]);
    let new = join(5, ports[1], &running4, &[], dirs[4].path(), || {
        change_until_made(
            &by_id(&members, 4).nsqd,
            "add",
            &format!("id=5&address=127.0.0.1:{}", ports[1]),
            5,
        );
    });
    load.up(&new);
    members.push(new);
    wait_settled(&members, &[1, 2, 3, 4, 5]);
    wait_standing(&by_id(&members, 5).nsqd, "member");
    let leaders = agreed_leaders(&members.iter().collect::<Vec<_>>(), None);
    // the topic's group has every member as a voter now
    let voters = members[0].nsqd.topic_stats(TOPIC).expect("topic")["replication"]["replicas"]
        .as_array()
        .map(|a| a.len());
    assert_eq!(voters, Some(5), "{:?}", members[0].nsqd.topic_stats(TOPIC));
    sleep_ms(2000);
    windows.push(("add member 5".to_string(), from, Instant::now()));

    // The leader of the topic's group is removed, through another member,
    // then stopped.
    remove_topic_leader(&mut members, &load, &leaders, &mut windows);

    // A host is lost with its disk (SIGKILL); the member, down, is removed,
    // and a fresh host under a new node id and address replaces it.
    let from = Instant::now();
    let lost = lose_and_remove_newest(&mut members, &load);
    let running = peer_list(&members);
    let new = join(6, ports[2], &running, &[], dirs[5].path(), || {
        change_until_made(
            &members[members.len() - 1].nsqd,
            "add",
            &format!("id=6&address=127.0.0.1:{}", ports[2]),
            6,
        );
    });
    load.up(&new);
    members.push(new);
    let left: Vec<u64> = members.iter().map(|m| m.id).collect();
    wait_settled(&members, &left);
    wait_standing(&by_id(&members, 6).nsqd, "member");
    agreed_leaders(&members.iter().collect::<Vec<_>>(), None);
    sleep_ms(2000);
    windows.push((
        format!("member {lost} lost, removed while down, replaced by 6"),
        from,
        Instant::now(),
    ));

    // A member formed by the flags restarts with them and keeps the map
    // changed online.
    let from = Instant::now();
    let id = members.iter().find(|m| m.id <= 3).unwrap().id;
    load.down(id);
    let stopped = stop_member(&mut members, id);
    let nsqd = start(dirs[at_dir(id)].path(), &stopped.args);
    let back = Member {
        id,
        nsqd,
        args: stopped.args.clone(),
    };
    load.up(&back);
    members.push(back);
    members.sort_by_key(|m| m.id);
    let r = replication(&by_id(&members, id).nsqd);
    assert_eq!(member_ids(&r), left, "{r}");
    agreed_leaders(&members.iter().collect::<Vec<_>>(), None);
    sleep_ms(2000);
    windows.push((format!("restart member {id}"), from, Instant::now()));

    let account = load.finish(&members, &windows);
    eprintln!("{}", account.report);
    assert!(
        account.lost.is_empty(),
        "acknowledged and never delivered: {:?}\n{}",
        account.lost,
        account.report
    );
    assert!(
        account.quiet_steps.is_empty(),
        "the load ran through every step: {}",
        account.report
    );
}

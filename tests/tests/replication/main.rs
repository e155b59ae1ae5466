//! nsqd as a member of a replication cluster (docs/replication.md, "nsqd
//! integration"): three real nsqd binaries on 127.0.0.1 started with the
//! replication flags form a cluster whose groups every member reports with
//! the same leaders; one is SIGKILLed and the other two elect leaders for
//! its groups; it restarts from its data path and rejoins. A replicated
//! topic is created through its group from any member and exists on all
//! of them, across restarts; without a majority its creation fails. Also:
//! bad replication flags are startup errors, `replicas=` on
//! `/topic/create` is checked and never creates an unreplicated topic in
//! its place, and an nsqd without the flags shows nothing of it. Only the
//! group's leader serves a replicated topic to consumers (`leader.rs`).
//! Its channels are made, paused and deleted through its group, so a new
//! leader has them (`channels.rs`). Every member shows a replicated
//! topic's group, the leader each replica's lag, in `/stats`, `/metrics`
//! and nsqadmin (`stats.rs`). What a replicated topic or channel does not
//! hold in memory is a place in its group's log, never a disk queue
//! (`store.rs`). A depth limit of a replicated topic or channel is its
//! group's, the same on every member and after a failover (`limits.rs`).
//! A channel of a topic with a retention is moved back to replay what its
//! group's log kept, through a failover (`replay.rs`). Members are added
//! and removed online under load, losing nothing acknowledged
//! (`membership.rs`; the load and its account: `load.rs`), and an
//! unmodified pynsq and nsqjs Reader found through nsqlookupd lose nothing
//! across those changes and a failover (`clients.rs`).

mod admin;
#[path = "../../src/admin_util.rs"]
mod admin_util;
mod channels;
mod clients;
mod failover;
mod leader;
mod limits;
mod load;
mod members;
mod membership;
mod quiet;
mod replaced;
mod replay;
mod smaller;
mod snapshots;
mod stats;
mod store;
mod topics;
mod upgrade;

use std::time::Duration;

use members::*;
use nsq_tests::{free_port, run_nsqd_once, Nsqd};

#[test]
fn three_nsqds_form_a_cluster_fail_over_and_rejoin() {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut members = start_cluster(&dirs, |_| Vec::new());

    // They form a cluster: every group has one leader, the same everywhere.
    let before = agreed_leaders(&members.iter().collect::<Vec<_>>(), None);
    let terms_before = terms(&members[0].nsqd);
    for m in &members {
        let r = replication(&m.nsqd);
        assert_eq!(r["node_id"], m.id);
        assert_eq!(r["peers"].as_array().unwrap().len(), 3);
        let stats = m.nsqd.stats("");
        assert_eq!(
            stats["replication"]["node_id"], m.id,
            "/stats shows the member"
        );
        let metrics = m.nsqd.get("/metrics").text();
        assert!(
            metrics.contains("nsqd_replication_group_leader{group=\"0\"}"),
            "{metrics}"
        );
    }
    assert!(dirs[0].path().join("raft").join("0000").is_dir());

    // replicas= is checked against the cluster; nothing is created.
    let n = &members[0].nsqd;
    let create = |q: &str| {
        let r = n.post(&format!("/topic/create?{q}"), b"");
        (r.status, r.text())
    };
    let bad = |code: &str| (400, format!("{{\"message\":\"{code}\"}}"));
    assert_eq!(
        create("topic=r&replicas=4"),
        bad("REPLICAS_EXCEED_CLUSTER_SIZE")
    );
    assert_eq!(create("topic=r&replicas=0"), bad("INVALID_ARG_REPLICAS"));
    assert_eq!(
        create("topic=r&replicas=three"),
        bad("INVALID_ARG_REPLICAS")
    );
    assert_eq!(
        create("topic=r%23ephemeral&replicas=3"),
        bad("EPHEMERAL_TOPIC_NOT_REPLICABLE")
    );
    assert_eq!(create("topic=plain"), (200, String::new()));
    assert_eq!(
        create("topic=plain&replicas=3"),
        bad("TOPIC_EXISTS_UNREPLICATED")
    );
    assert!(n.topic_stats("r").is_none(), "a refused create made it");

    // The member leading group 0 is killed; the other two elect leaders for
    // every group it led.
    let victim = before[0];
    let at = members.iter().position(|m| m.id == victim).unwrap();
    let mut gone = members.remove(at);
    gone.nsqd.kill9();
    let after = agreed_leaders(&members.iter().collect::<Vec<_>>(), Some(victim));
    for (g, (b, a)) in before.iter().zip(&after).enumerate() {
        if *b != victim {
            // A group whose leader lived keeps it (or elected another of
            // the two; either way not the dead one).
            assert_ne!(*a, victim, "group {g}");
        }
    }
    let terms_after = terms(&members[0].nsqd);
    assert!(
        terms_after[&0] > terms_before[&0],
        "group 0 elected a new leader in a later term: {terms_before:?} then {terms_after:?}"
    );

    // It restarts from its data path and rejoins: it sees the leaders the
    // others see, at the terms they reached (it did not start a new
    // cluster of its own).
    gone.nsqd = start(dirs[at_dir(victim)].path(), &gone.args);
    members.push(gone);
    let rejoined = agreed_leaders(&members.iter().collect::<Vec<_>>(), None);
    let back = members.last().unwrap();
    let r = replication(&back.nsqd);
    for g in r["groups"].as_array().unwrap() {
        let id = g["group"].as_u64().unwrap();
        assert!(
            g["term"].as_u64().unwrap() >= terms_after[&id],
            "group {id}: {g}"
        );
        assert!(g["last_applied"].as_u64().is_some(), "group {id}: {g}");
    }
    assert_eq!(rejoined.len(), GROUPS);

    // The member stops on nsqd's shutdown path: SIGTERM, exit 0.
    for m in &mut members {
        let st = m.nsqd.sigterm_and_wait(Duration::from_secs(10));
        assert!(st.success(), "node {}: {st}\n{}", m.id, m.nsqd.stderr());
        assert!(m.nsqd.stderr().contains("REPLICATION: stopped"));
    }
}

/// With the daemons' certificates the members speak TLS, verified both
/// ways: two members with certificates of one CA form the majority; the
/// third, whose certificate is of another CA, is refused both ways and
/// never learns a leader (over plain TCP it would follow them).
#[test]
fn members_speak_tls_with_the_daemons_flags() {
    let pki = nsq_tests::pki::Pki::new();
    let other = nsq_tests::pki::Pki::new();
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let members = start_cluster(&dirs, |id| {
        let p = if id == 3 { &other } else { &pki };
        let mut f = p.flags();
        f.push(format!("--tls-root-ca-file={}", p.path("ca.pem")));
        f
    });
    let two = agreed_leaders(&[&members[0], &members[1]], None);
    assert!(two.iter().all(|l| *l != 3));
    nsq_tests::sleep_ms(1000);
    assert!(
        leaders(&members[2].nsqd).iter().all(Option::is_none),
        "a member with another CA's certificate was let in: {}",
        replication(&members[2].nsqd)
    );
}

#[test]
fn a_member_started_with_other_replication_flags_is_refused_and_says_why() {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    // the last --replication-groups wins, as with Go's flag package
    let other = format!("--replication-groups={}", GROUPS + 1);
    let members = start_cluster(&dirs, |id| {
        if id == 3 {
            vec![other.clone()]
        } else {
            Vec::new()
        }
    });
    // the other two are a majority of the configured three
    let two = agreed_leaders(&[&members[0], &members[1]], None);
    assert!(two.iter().all(|l| *l != 3));
    // Member 3 has no membership (member 1 initialised the groups and
    // cannot reach it), so it calls no one: the others' calls to it are
    // refused by its listener, and both ends say so.
    let said = |m: &Member, what: &str| m.nsqd.stderr().matches(what).count();
    let caller = format!(
        "REPLICATION: refused by peer {}",
        members[2].args[1].trim_start_matches("--replication-address=")
    );
    let why = format!("node 3 with --replication-groups={}", GROUPS + 1);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while said(&members[0], &why) == 0
        || said(&members[0], &caller) == 0
        || said(&members[2], "REPLICATION: refused node 1") == 0
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no refusal logged; member 1:\n{}\nmember 3:\n{}",
            members[0].nsqd.stderr(),
            members[2].nsqd.stderr()
        );
        nsq_tests::sleep_ms(100);
    }
    // member 3 takes part in nothing, and the refusals are not logged at
    // every one of openraft's retries
    nsq_tests::sleep_ms(2000);
    let r = replication(&members[2].nsqd);
    let groups = r["groups"].as_array().expect("groups");
    assert_eq!(groups.len(), GROUPS + 1);
    assert!(
        groups.iter().all(|g| g["leader"].is_null()),
        "a member with other flags was let in: {r}"
    );
    // (a member that leads no group and stood in no election calls no one)
    for m in &members {
        let n = said(m, "REPLICATION: refused");
        assert!(
            n <= 4,
            "member {} logged {n} refusals:\n{}",
            m.id,
            m.nsqd.stderr()
        );
    }
}

#[test]
fn replicated_topics_are_created_through_their_group() {
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926, "the CRC-32 check value");
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut members = start_cluster(&dirs, |_| Vec::new());
    let leaders = agreed_leaders(&members.iter().collect::<Vec<_>>(), None);

    // Created on a member that does not lead the topic's group: forwarded
    // to the leader, committed, and applied on the member that answered
    // before it answered.
    let t1 = "made_on_a_follower";
    let follower = members
        .iter()
        .find(|m| m.id != leaders[group_of(t1)])
        .unwrap();
    assert_eq!(create(&follower.nsqd, t1, 3), (200, String::new()));
    assert_eq!(replicas_of(&follower.nsqd, t1), Some(Some(3)));
    wait_replicas(&members, t1, 3);

    // Created on the leader of its group.
    let t2 = "made_on_the_leader";
    let leader = members
        .iter()
        .find(|m| m.id == leaders[group_of(t2)])
        .unwrap();
    assert_eq!(create(&leader.nsqd, t2, 2), (200, String::new()));
    assert_eq!(replicas_of(&leader.nsqd, t2), Some(Some(2)));
    wait_replicas(&members, t2, 2);

    // Again with the same replicas, anywhere: nothing changes; with other
    // replicas: refused.
    for m in &members {
        assert_eq!(
            create(&m.nsqd, t1, 3),
            (200, String::new()),
            "node {}",
            m.id
        );
    }
    assert_eq!(
        create(&members[0].nsqd, t1, 2),
        (
            400,
            "{\"message\":\"TOPIC_EXISTS_WITH_OTHER_REPLICAS\"}".to_string()
        )
    );
    wait_replicas(&members, t1, 3);

    // An unreplicated topic shows no replicas, and nsqd.dat has the key
    // only on the replicated ones.
    let plain = members[0].nsqd.post("/topic/create?topic=plain", b"");
    assert_eq!(plain.status, 200);
    assert_eq!(replicas_of(&members[0].nsqd, "plain"), Some(None));
    // (Creating an unreplicated topic does not write nsqd.dat at once, as
    // NSQ; an unpause does.)
    let unpause = members[0].nsqd.post("/topic/unpause?topic=plain", b"");
    assert_eq!(unpause.status, 200);
    let dat = members[0].nsqd.read_metadata().expect("nsqd.dat");
    assert!(
        dat.contains(
            r#"{"name":"made_on_a_follower","paused":false,"channels":null,"replicas":3}"#
        ),
        "{dat}"
    );
    assert!(
        dat.contains(r#"{"name":"plain","paused":false,"channels":null}"#),
        "{dat}"
    );

    // A member restarted from its data path still has both, replicated.
    let m = &mut members[2];
    let st = m.nsqd.sigterm_and_wait(Duration::from_secs(10));
    assert!(st.success(), "{st}");
    m.nsqd = start(dirs[at_dir(m.id)].path(), &m.args);
    assert_eq!(replicas_of(&m.nsqd, t1), Some(Some(3)));
    assert_eq!(replicas_of(&m.nsqd, t2), Some(Some(2)));
    agreed_leaders(&members.iter().collect::<Vec<_>>(), None);
    wait_replicas(&members, t1, 3);

    // Deleted through its group from any member: gone on every member and
    // from nsqd.dat, and a restart (which applies the group's log again,
    // the create and then the delete) does not bring it back. The
    // unreplicated topic is deleted as NSQ deletes one, here only.
    let d = members[2]
        .nsqd
        .post(&format!("/topic/delete?topic={t2}"), b"");
    assert_eq!((d.status, d.text()), (200, String::new()));
    wait_gone(&members, t2);
    let dat = members[1].nsqd.read_metadata().expect("nsqd.dat");
    assert!(!dat.contains(t2), "{dat}");
    let m = &mut members[1];
    let st = m.nsqd.sigterm_and_wait(Duration::from_secs(10));
    assert!(st.success(), "{st}");
    m.nsqd = start(dirs[at_dir(m.id)].path(), &m.args);
    agreed_leaders(&members.iter().collect::<Vec<_>>(), None);
    wait_replicas(&members, t1, 3);
    wait_gone(&members[1..2], t2);
    let d = members[0].nsqd.post("/topic/delete?topic=plain", b"");
    assert_eq!(d.status, 200);
    assert!(members[0].nsqd.topic_stats("plain").is_none());

    // Two of three stopped: the one left cannot commit; a create fails
    // with a 503 once the commit timeout (5 s) is up, and creates nothing.
    for m in &mut members[1..] {
        let st = m.nsqd.sigterm_and_wait(Duration::from_secs(10));
        assert!(st.success(), "{st}");
    }
    let started = std::time::Instant::now();
    let (status, body) = create(&members[0].nsqd, "no_majority", 3);
    let took = started.elapsed();
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("REPLICATION_NO_LEADER") || body.contains("REPLICATION_TIMEOUT"),
        "{body}"
    );
    assert!(took < Duration::from_secs(8), "answered after {took:?}");
    assert!(members[0].nsqd.topic_stats("no_majority").is_none());
}

#[test]
fn without_the_flags_nothing_of_it_shows() {
    let n = Nsqd::start(&[]);
    assert_eq!(n.get("/replication").status, 404);
    let stats = n.get("/stats?format=json").text();
    assert!(!stats.contains("replication"), "{stats}");
    assert!(!n.get("/metrics").text().contains("replication"));
    let r = n.post("/topic/create?topic=t&replicas=3", b"");
    assert_eq!(
        (r.status, r.text()),
        (400, "{\"message\":\"REPLICATION_NOT_ENABLED\"}".to_string())
    );
    assert!(n.topic_stats("t").is_none());
    assert!(!n.data_path().join("raft").exists());
}

#[test]
fn bad_replication_flags_are_startup_errors() {
    let port = free_port();
    let me = format!("--replication-address=127.0.0.1:{port}");
    let cases: &[(&[&str], &str)] = &[
        (
            &[
                "--node-id=1",
                "--replication-peer=1@127.0.0.1:1,2@127.0.0.1:2",
            ],
            "--replication-peer needs --replication-address",
        ),
        (
            &["--node-id=1", &me, "--replication-peer=1@127.0.0.1:1"],
            "at least one other",
        ),
        (
            &[
                "--node-id=1",
                &me,
                "--replication-peer=1@127.0.0.1:1,2@nowhere",
            ],
            "invalid --replication-peer",
        ),
        (
            &[
                "--node-id=1",
                &me,
                "--replication-peer=1@127.0.0.1:1,2@127.0.0.1:2",
                "--replication-groups=0",
            ],
            "--replication-groups must be [1,1024]",
        ),
        (
            &[
                "--node-id=1",
                &me,
                "--replication-peer=1@127.0.0.1:1,2@127.0.0.1:2",
                "--replication-snapshot-entries=0",
            ],
            "--replication-snapshot-entries must be at least 1",
        ),
        (
            &[
                "--node-id=1",
                "--replication-address=256.0.0.1:1",
                "--replication-peer=1@127.0.0.1:1,2@127.0.0.1:2",
            ],
            "replication listener on 256.0.0.1:1",
        ),
    ];
    for (args, needle) in cases {
        let out = run_nsqd_once(args, Duration::from_secs(10));
        let code = out.status.and_then(|s| s.code());
        assert!(
            matches!(code, Some(1) | Some(2)),
            "{args:?}: exit {code:?}\n{}",
            out.stderr
        );
        assert!(
            out.stderr.contains("FATAL: ") || out.stderr.contains("invalid value"),
            "{args:?}: {}",
            out.stderr
        );
        assert!(
            out.stderr.contains(needle),
            "{args:?} wants {needle:?}: {}",
            out.stderr
        );
    }
}

/// Publishes to a replicated topic, on the leader of its group or on a
/// member that forwards them, are answered OK once committed and
/// delivered by the leader; without a majority a publish fails with
/// E_PUB_FAILED once the commit timeout is up, and the connection stays.
#[test]
fn publishes_to_a_replicated_topic_are_committed_then_delivered_by_the_leader() {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut members = start_cluster(&dirs, |_| Vec::new());
    let leaders = agreed_leaders(&members.iter().collect::<Vec<_>>(), None);
    let t = "replicated_pub";
    let lid = leaders[group_of(t)];
    let leader = members.iter().find(|m| m.id == lid).unwrap();
    let follower = members.iter().find(|m| m.id != lid).unwrap();
    assert_eq!(create(&leader.nsqd, t, 3), (200, String::new()));
    wait_replicas(&members, t, 3);

    let mut sub = leader.nsqd.connect();
    sub.sub(t, "c");
    sub.rdy(10);
    let mut on_follower = follower.nsqd.connect();
    on_follower.publish(t, b"pub on a follower");
    on_follower.mpublish(t, &[b"mpub 1", b"mpub 2"]);
    on_follower.send(&nsq_tests::dpub_cmd(t, 200, b"dpub on a follower"));
    on_follower.expect_ok();
    let mut on_leader = leader.nsqd.connect();
    on_leader.publish(t, b"pub on the leader");
    follower.nsqd.http_pub(t, b"http on a follower");
    let r = leader
        .nsqd
        .post(&format!("/mpub?topic={t}"), b"http mpub 1\nhttp mpub 2");
    assert_eq!((r.status, r.text()), (200, "OK".to_string()));

    let mut want: Vec<&[u8]> = vec![
        b"pub on a follower",
        b"mpub 1",
        b"mpub 2",
        b"dpub on a follower",
        b"pub on the leader",
        b"http on a follower",
        b"http mpub 1",
        b"http mpub 2",
    ];
    let mut got = Vec::new();
    for _ in 0..want.len() {
        let m = sub.expect_msg_within(Duration::from_secs(10));
        sub.fin(&m.id);
        got.push(m.body);
    }
    want.sort();
    got.sort();
    assert_eq!(got, want.iter().map(|b| b.to_vec()).collect::<Vec<_>>());
    sub.expect_nothing(Duration::from_millis(500));
    // The followers delivered nothing of it: they keep the batches in the
    // log only.
    for m in members.iter().filter(|m| m.id != lid) {
        let ts = m.nsqd.topic_stats(t).expect("the topic on every member");
        assert_eq!(ts["message_count"], 0, "node {}: {ts}", m.id);
    }

    // Two of three stopped: a publish fails once the commit timeout (5 s)
    // is up, with NSQ's error, and the connection stays open.
    let keep = members.iter().position(|m| m.id == lid).unwrap();
    let mut kept = members.remove(keep);
    for m in &mut members {
        let st = m.nsqd.sigterm_and_wait(Duration::from_secs(10));
        assert!(st.success(), "{st}");
    }
    let mut c = kept.nsqd.connect();
    let started = std::time::Instant::now();
    c.send(&nsq_tests::pub_cmd(t, b"no majority"));
    let f = c.recv_timeout(Duration::from_secs(10)).expect("an answer");
    let took = started.elapsed();
    let text = f.text();
    assert!(
        text.starts_with("E_PUB_FAILED PUB failed REPLICATION_"),
        "{text}"
    );
    assert!(took < Duration::from_secs(8), "answered after {took:?}");
    c.nop();
    let r = kept.nsqd.post(&format!("/pub?topic={t}"), b"no majority");
    assert_eq!(r.status, 503, "{}", r.text());
    let st = kept.nsqd.sigterm_and_wait(Duration::from_secs(10));
    assert!(st.success(), "{st}");
}

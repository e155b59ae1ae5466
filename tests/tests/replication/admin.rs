//! nsqadmin creates a replicated topic (the Lookup page's Replicas field:
//! `POST /api/topics` with `replicas`) through a member nsqd, so every
//! member has it with its replicas, and its channel too. An nsqd without
//! the replication flags, listed first, is passed over and gets nothing; a
//! refusal a member makes (`replicas` larger than the cluster) is passed on
//! as it is, with nothing created; a `replicas` that is not a number never
//! leaves nsqadmin. A replicated topic's retention is set, and its channel
//! replayed (*Replay from*), through nsqadmin too. Its Replication page's
//! API shows the members and changes them through a member.

use std::time::Duration;

use nsq_tests::{wait_for, Nsqd};

use super::admin_util::start_admin;
use super::members::*;

fn message(r: &nsq_tests::HttpResponse) -> String {
    r.json()["message"].as_str().unwrap_or_default().to_string()
}

#[test]
fn nsqadmin_creates_a_replicated_topic_through_a_member() {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let members = start_cluster(&dirs, |_| Vec::new());
    let plain = Nsqd::start(&[]);
    let flags: Vec<String> = std::iter::once(&plain.http_addr)
        .chain(members.iter().map(|m| &m.nsqd.http_addr))
        .map(|a| format!("--nsqd-http-address={a}"))
        .collect();
    let admin = start_admin(&flags.iter().map(String::as_str).collect::<Vec<_>>());

    let r = admin.post_json(
        "/api/topics",
        r#"{"topic":"from_admin","channel":"c","replicas":3}"#,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    wait_replicas(&members, "from_admin", 3);
    for m in &members {
        wait_for(WAIT, &format!("channel c on node {}", m.id), || {
            m.nsqd.channel_stats("from_admin", "c").map(|_| ())
        });
    }
    assert!(plain.topic_stats("from_admin").is_none());

    // Its retention is set through nsqadmin's settings (every member shows
    // the group's), and its channel is replayed from the channel page: one
    // reset, answered in words; a bad time is nsqd's 400, passed on.
    let r = admin.post_json(
        "/api/topics/from_admin",
        r#"{"action":"config","retention":"1h"}"#,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    for m in &members {
        wait_for(
            WAIT,
            &format!("node {} showing the retention", m.id),
            || {
                let t = m.nsqd.topic_stats("from_admin")?;
                (t["replication"]["retention"] == "1h0m0s").then_some(())
            },
        );
    }
    let shown = admin.get("/api/topics/from_admin").json();
    assert_eq!(shown["replication"]["retention"], "1h0m0s", "{shown}");
    let r = admin.post_json(
        "/api/topics/from_admin/c",
        r#"{"action":"reset","to":"earliest"}"#,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(message(&r).starts_with("Channel reset"), "{}", r.text());
    let r = admin.post_json(
        "/api/topics/from_admin/c",
        r#"{"action":"reset","to":"soon"}"#,
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(message(&r).starts_with("INVALID_ARG_TO"), "{}", r.text());

    // A member's refusal is passed on; nothing is made anywhere.
    let r = admin.post_json("/api/topics", r#"{"topic":"too_many","replicas":"5"}"#);
    assert_eq!(
        (r.status, message(&r)),
        (400, "REPLICAS_EXCEED_CLUSTER_SIZE".to_string())
    );
    let r = admin.post_json("/api/topics", r#"{"topic":"not_a_number","replicas":"x"}"#);
    assert_eq!(
        (r.status, message(&r)),
        (400, "INVALID_ARG_REPLICAS".to_string())
    );
    std::thread::sleep(Duration::from_millis(300));
    for n in members.iter().map(|m| &m.nsqd).chain([&plain]) {
        assert!(n.topic_stats("too_many").is_none());
        assert!(n.topic_stats("not_a_number").is_none());
    }

    // Without any member, it says so.
    let flag = format!("--nsqd-http-address={}", plain.http_addr);
    let alone = start_admin(&[flag.as_str()]);
    let r = alone.post_json("/api/topics", r#"{"topic":"nowhere","replicas":3}"#);
    assert_eq!(
        (r.status, message(&r)),
        (400, "REPLICATION_NOT_ENABLED".to_string())
    );
    assert!(plain.topic_stats("nowhere").is_none());
}

/// nsqadmin's Replication page's API: the cluster as the first member
/// shows it (an nsqd without the flags, listed first, passed over); bad
/// input refused by nsqadmin, a member's refusals passed on with its
/// status and words, the map unchanged; a member removed through it; only
/// admins may change anything; without any member it says so.
#[test]
fn nsqadmin_shows_the_members_and_adds_and_removes_them_through_a_member() {
    use super::membership::{member_ids, wait_settled};
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut members = start_cluster(&dirs, |_| Vec::new());
    for m in &members {
        wait_standing(&m.nsqd, "member");
    }
    let plain = Nsqd::start(&[]);
    let flags: Vec<String> = std::iter::once(&plain.http_addr)
        .chain(members.iter().map(|m| &m.nsqd.http_addr))
        .map(|a| format!("--nsqd-http-address={a}"))
        .collect();
    let admin = start_admin(&flags.iter().map(String::as_str).collect::<Vec<_>>());

    let shown = admin.get("/api/replication").json();
    // the first member (by its broadcast address: the host's name here)
    let port = members[0].nsqd.http_addr.rsplit(':').next().unwrap();
    let node = shown["node"].as_str().unwrap_or_default();
    assert!(node.ends_with(&format!(":{port}")), "{shown}");
    assert_eq!(shown["replication"]["node_id"], 1, "{shown}");
    assert_eq!(member_ids(&shown["replication"]), vec![1, 2, 3], "{shown}");

    let unreachable = format!("127.0.0.1:{}", nsq_tests::free_port());
    for (body, status, code) in [
        (
            r#"{"action":"add","address":"127.0.0.1:1"}"#.to_string(),
            400,
            "MISSING_ARG_ID",
        ),
        (
            r#"{"action":"add","id":"x","address":"127.0.0.1:1"}"#.into(),
            400,
            "INVALID_ARG_ID",
        ),
        (
            r#"{"action":"add","id":"4"}"#.into(),
            400,
            "MISSING_ARG_ADDRESS",
        ),
        (
            r#"{"action":"grow","id":"4"}"#.into(),
            400,
            "INVALID_ACTION",
        ),
        (
            r#"{"action":"add","id":"2","address":"127.0.0.1:1"}"#.into(),
            409,
            "REPLICATION_MEMBER_EXISTS",
        ),
        (
            r#"{"action":"remove","id":"9"}"#.into(),
            404,
            "REPLICATION_NOT_A_MEMBER",
        ),
        (
            format!(r#"{{"action":"add","id":"4","address":"{unreachable}"}}"#),
            400,
            "REPLICATION_MEMBER_UNREACHABLE",
        ),
    ] {
        let r = admin.post_json("/api/replication", &body);
        assert_eq!(r.status, status, "{body}: {}", r.text());
        assert!(message(&r).starts_with(code), "{body}: {}", r.text());
    }
    for m in &members {
        assert_eq!(
            replication(&m.nsqd)["map_version"],
            0,
            "a refusal changed the map"
        );
    }

    // Member 3 removed through nsqadmin: every member left carries it out.
    let r = admin.post_json("/api/replication", r#"{"action":"remove","id":"3"}"#);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(message(&r).starts_with("Member 3 removed"), "{}", r.text());
    let gone = stop_member(&mut members, 3);
    wait_settled(&members, &[1, 2]);

    // Only admins change anything.
    let guarded = start_admin(&[flags[1].as_str(), "--admin-user=alice"]);
    let r = guarded.post_json("/api/replication", r#"{"action":"remove","id":"2"}"#);
    assert_eq!((r.status, message(&r)), (403, "FORBIDDEN".to_string()));
    assert_eq!(member_ids(&replication(&members[0].nsqd)), vec![1, 2]);

    // Without any member, it says so.
    let flag = format!("--nsqd-http-address={}", plain.http_addr);
    let alone = start_admin(&[flag.as_str()]);
    let shown = alone.get("/api/replication").json();
    assert!(
        shown["node"].is_null() && shown["replication"].is_null(),
        "{shown}"
    );
    let r = alone.post_json("/api/replication", r#"{"action":"remove","id":"2"}"#);
    assert_eq!(r.status, 502, "{}", r.text());
    assert!(message(&r).contains("no nsqd is a member"), "{}", r.text());
    drop(gone);
}

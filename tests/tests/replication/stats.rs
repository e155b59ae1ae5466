//! What a replicated topic shows (docs/replication.md, "What a member
//! shows"): every member's `/stats` carries the topic's group with the
//! same leader and its address; the leader knows every replica's lag and
//! it reaches 0, a follower its own log alone; `/metrics` has the topic's
//! series; every member counts the messages committed and not finished;
//! nsqadmin's `/api/topics/:topic` carries the leader's report;
//! after the leader's SIGTERM the others agree on a new one. An
//! unreplicated topic beside it shows nothing of it.

use nsq_tests::{wait_for, Nsqd};
use serde_json::Value;

use super::admin_util::start_admin;
use super::leader::leader_of;
use super::members::*;

/// The topic's `replication` object in `n`'s `/stats` (Null without it).
fn replication_of(n: &Nsqd, topic: &str) -> Value {
    n.topic_stats(topic)
        .map(|t| t["replication"].clone())
        .unwrap_or(Value::Null)
}

/// The replicas' `(node_id, matched_index, lag)`, in node order.
fn replicas(r: &Value) -> Vec<(u64, Option<u64>, Option<u64>)> {
    r["replicas"]
        .as_array()
        .expect("replicas")
        .iter()
        .map(|x| {
            (
                x["node_id"].as_u64().expect("node_id"),
                x["matched_index"].as_u64(),
                x["lag"].as_u64(),
            )
        })
        .collect()
}

/// Waits until every member in `ms` shows `topic` led by `lid`, with the
/// leader's TCP address once its `Serving` entry reached them.
fn wait_shown_led_by(ms: &[&Member], topic: &str, lid: u64, address: &str) {
    for m in ms {
        wait_for(
            WAIT,
            &format!("node {} showing {topic} led by {lid} at {address}", m.id),
            || {
                let r = replication_of(&m.nsqd, topic);
                (r["leader"] == lid
                    && r["leader_address"] == address
                    && r["is_leader"] == (m.id == lid)
                    && r["group"] == group_of(topic) as u64)
                    .then_some(())
            },
        );
    }
}

/// Waits until the leader `on` reports each of `live` with a lag of 0 and
/// a matched index at its own last log index, the committed index there
/// too; that report.
fn wait_caught_up(on: &Member, topic: &str, live: &[u64]) -> Value {
    wait_for(
        WAIT,
        &format!("node {} showing lag 0 for {live:?}", on.id),
        || {
            let r = replication_of(&on.nsqd, topic);
            let last = r["last_log_index"].as_u64()?;
            let caught_up = replicas(&r)
                .into_iter()
                .filter(|(id, ..)| live.contains(id))
                .all(|(_, matched, lag)| matched == Some(last) && lag == Some(0));
            (caught_up && r["committed_index"] == last).then_some(r)
        },
    )
}

#[test]
fn every_member_shows_a_replicated_topics_group_and_lag() {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut members = start_cluster(&dirs, |_| vec!["--broadcast-address=127.0.0.1".into()]);
    let all: Vec<&Member> = members.iter().collect();
    let t = "shown_replicated";
    let lid = leader_of(&all, t, None);
    let leader = by_id(&members, lid);
    let follower = all.iter().copied().find(|m| m.id != lid).unwrap();
    assert_eq!(create(&follower.nsqd, t, 3), (200, String::new()));
    wait_replicas(&members, t, 3);
    for i in 0..3 {
        follower
            .nsqd
            .connect()
            .publish(t, format!("f{i}").as_bytes());
        leader.nsqd.connect().publish(t, format!("l{i}").as_bytes());
    }
    for m in &members {
        m.nsqd.http_pub("plain", b"x");
    }

    // Every member shows the group with the same leader and its address.
    let address = format!("127.0.0.1:{}", leader.nsqd.tcp_port);
    wait_shown_led_by(&all, t, lid, &address);
    for m in &members {
        let plain = m.nsqd.topic_stats("plain").expect("plain");
        assert!(
            plain.get("replication").is_none() && plain.get("replicas").is_none(),
            "an unreplicated topic shows nothing of replication: {plain}"
        );
    }

    // The leader knows every replica, and their lag reaches 0.
    let r = wait_caught_up(leader, t, &[1, 2, 3]);

    // The text /stats: the member and its groups, and the topic's line
    // ends with its group; an unreplicated topic's line is NSQ's.
    let text = leader.nsqd.get("/stats").text();
    assert!(
        text.contains(&format!("\nReplication: node {lid} (member) on 127.0.0.1:")),
        "{text}"
    );
    assert!(text.contains("\n   [group 0   ] "), "{text}");
    let line = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("   [{name:<15}]")))
            .unwrap_or_else(|| panic!("no line for {name}: {text}"))
            .to_string()
    };
    assert!(
        line(t).contains(&format!(
            " replicas: 3 group: {} leader: {lid} ({address}) here unfinished: ",
            r["group"]
        )),
        "{text}"
    );
    assert!(line(t).ends_with(" lag: 1=0 2=0 3=0"), "{text}");
    assert!(!line("plain").contains("replica"), "{text}");
    assert_eq!(
        replicas(&r).iter().map(|x| x.0).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    // A follower knows its own log alone.
    wait_for(WAIT, "a follower showing its own log", || {
        let r = replication_of(&follower.nsqd, t);
        let own = r["last_log_index"].as_u64()?;
        let rs = replicas(&r);
        (rs.iter().all(|(id, matched, lag)| {
            lag.is_none() && (*matched == (*id == follower.id).then_some(own))
        }) && rs.len() == 3)
            .then_some(())
    });

    // ?topic= (and include_clients=false, as nsqadmin asks) keeps it.
    let only = follower
        .nsqd
        .stats(&format!("topic={t}&include_clients=false"));
    let topics = only["topics"].as_array().expect("topics");
    assert_eq!(topics.len(), 1);
    assert_eq!(topics[0]["replication"]["leader"], lid);

    // Six committed, none finished (the topic has no channel to finish
    // them on): every member counts them from its own log.
    for m in &members {
        wait_for(
            WAIT,
            &format!("node {} counting 6 unfinished", m.id),
            || (replication_of(&m.nsqd, t)["unfinished"] == 6).then_some(()),
        );
    }

    // /metrics: the leader leads the topic and reports each replica's lag;
    // a follower does not lead it and reports no lag it does not know.
    let metrics = leader.nsqd.get("/metrics").text();
    assert!(
        metrics.contains("# TYPE nsqd_replication_topic_is_leader gauge\n"),
        "{metrics}"
    );
    assert!(metrics.contains(&format!(
        "nsqd_replication_topic_is_leader{{topic=\"{t}\"}} 1\n"
    )));
    for id in 1..=3 {
        assert!(
            metrics.contains(&format!(
                "nsqd_replication_topic_replica_lag{{topic=\"{t}\",node=\"{id}\"}} 0\n"
            )),
            "{metrics}"
        );
    }
    assert!(!metrics.contains("nsqd_replication_topic_is_leader{topic=\"plain\"}"));
    let metrics = follower.nsqd.get("/metrics").text();
    assert!(metrics.contains(&format!(
        "nsqd_replication_topic_is_leader{{topic=\"{t}\"}} 0\n"
    )));
    assert!(
        metrics.contains(&format!(
            "nsqd_replication_topic_unfinished{{topic=\"{t}\"}} 6\n"
        )),
        "{metrics}"
    );
    assert!(
        !metrics.contains("nsqd_replication_topic_replica_lag"),
        "{metrics}"
    );

    // nsqadmin over the three nsqds: the topic carries the leader's report,
    // every member is listed with its own, and the totals are the leader's.
    let nsqds: Vec<String> = members
        .iter()
        .map(|m| format!("--nsqd-http-address={}", m.nsqd.http_addr))
        .collect();
    let admin = start_admin(&nsqds.iter().map(String::as_str).collect::<Vec<_>>());
    let api = admin.get(&format!("/api/topics/{t}"));
    assert_eq!(api.status, 200, "{}", api.text());
    let api = api.json();
    assert_eq!(api["replicas"], 3, "{api}");
    assert_eq!(api["replication"]["leader"], lid);
    assert_eq!(api["replication"]["leader_address"], address.as_str());
    assert_eq!(api["replication"]["is_leader"], true);
    assert_eq!(api["replication"]["unfinished"], 6);
    assert_eq!(api["message_count"], 6, "{api}");
    let nodes = api["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 3);
    assert!(nodes.iter().all(|n| n["replication"]["leader"] == lid));
    let plain = admin.get("/api/topics/plain").json();
    assert!(
        plain.get("replication").is_none() && plain.get("replicas").is_none(),
        "{plain}"
    );

    // The leader stops (SIGTERM): the other two agree on a new one, shown
    // with its own address; it knows the live follower caught up and not
    // the stopped member.
    let _gone = stop_member(&mut members, lid);
    let left: Vec<&Member> = members.iter().collect();
    let second = leader_of(&left, t, Some(lid));
    let new_leader = by_id(&members, second);
    let address = format!("127.0.0.1:{}", new_leader.nsqd.tcp_port);
    wait_shown_led_by(&left, t, second, &address);
    let other = left.iter().find(|m| m.id != second).unwrap().id;
    new_leader.nsqd.connect().publish(t, b"after");
    let r = wait_caught_up(new_leader, t, &[second, other]);
    let stopped = replicas(&r).into_iter().find(|x| x.0 == lid);
    assert!(
        stopped.is_some_and(|(_, _, lag)| lag.is_none_or(|l| l > 0)),
        "the stopped member is not shown caught up: {r}"
    );
}

//! The per-node and aggregated `/api` shapes against real nsqadmin answers
//! (byte for byte) and the merging rules.

use super::super::input::NsqdStats;
use super::*;

fn node(addr_port: i64, host: &str) -> Producer {
    let info = NsqdInfo {
        hostname: host.into(),
        broadcast_address: "127.0.0.1".into(),
        http_port: addr_port,
        tcp_port: addr_port - 1,
        version: "1.3.0".into(),
        ..Default::default()
    };
    Producer::from_nsqd(info, vec![])
}

fn topics(stats_json: &str, p: &Producer, now: i64) -> Vec<TopicStats> {
    let s: NsqdStats = serde_json::from_str(stats_json).unwrap();
    s.topics
        .unwrap()
        .into_iter()
        .map(|t| TopicStats::from_nsqd(t, p, now))
        .collect()
}

fn ojson(v: &impl Serialize) -> String {
    String::from_utf8(nsq_protocol::gofmt::to_json(v)).unwrap()
}

/// The real nsqadmin's `/api/topics/sample/c1` answer, rebuilt from the
/// same nsqd `/stats` (with clients), byte for byte.
#[test]
fn channel_sample_byte_exact() {
    let p = node(24151, "vm");
    let ts = topics(
        include_str!("../../testdata/stats_with_producer.json"),
        &p,
        1796012575,
    );
    let per_node: Vec<ChannelStats> = ts[0]
        .channels
        .clone()
        .unwrap()
        .into_iter()
        .filter(|c| c.channel_name == "c1")
        .collect();
    let mut agg = ChannelStats::aggregate("sample", "c1", per_node);
    if let Some(c) = agg.clients.as_mut() {
        sort_clients_by_node_topology(c);
    }
    let mut got = ojson(&agg);
    got.truncate(got.len() - 1);
    got.push_str(r#","message":""}"#);
    assert_eq!(
        got,
        include_str!("../../testdata/nsqadmin_api_channel.json").trim_end()
    );
}

/// The real `/api/topics/sample` answer (stats fetched without clients).
#[test]
fn topic_sample_byte_exact() {
    let p = node(24151, "vm");
    let mut stats: serde_json::Value =
        serde_json::from_str(include_str!("../../testdata/stats_with_producer.json")).unwrap();
    for c in stats["topics"][0]["channels"].as_array_mut().unwrap() {
        c["clients"] = serde_json::Value::Null;
    }
    let ts = topics(&stats.to_string(), &p, 0);
    let agg = TopicStats::aggregate("sample", ts);
    let mut got = ojson(&agg);
    got.truncate(got.len() - 1);
    got.push_str(r#","message":""}"#);
    assert_eq!(
        got,
        include_str!("../../testdata/nsqadmin_api_topic.json").trim_end()
    );
}

#[test]
fn two_nodes_merge_channels_by_name() {
    let a = node(1, "a");
    let b = node(2, "b");
    let s = include_str!("../../testdata/stats_with_producer.json");
    let mut per_node = topics(s, &b, 0);
    per_node.extend(topics(s, &a, 0));
    sort_by_host(&mut per_node, |t| (&t.hostname, &t.node));
    let agg = TopicStats::aggregate("sample", per_node);
    assert_eq!(
        (agg.node.as_str(), agg.depths.depth, agg.message_count),
        ("*", 0, 8)
    );
    let nodes = agg.nodes.as_ref().unwrap();
    assert_eq!(
        (nodes[0].hostname.as_str(), nodes[1].hostname.as_str()),
        ("a", "b")
    );
    let chans = agg.channels.as_ref().unwrap();
    assert_eq!(chans.len(), 2);
    assert_eq!(
        (
            chans[0].node.as_str(),
            chans[0].depths.depth,
            chans[0].in_flight_count,
            chans[0].client_count
        ),
        ("*", 2, 4, 2)
    );
    assert_eq!(chans[0].nodes.as_ref().unwrap().len(), 2);
    // per-node entries are left untouched
    assert_eq!(nodes[0].channels.as_ref().unwrap()[0].depths.depth, 1);
}

#[test]
fn lookupd_producer_pairs_topics_with_tombstones() {
    let p: nsq_protocol::lookupd::Nodes =
        serde_json::from_str(include_str!("../../testdata/nsqlookupd_nodes.json")).unwrap();
    let p = Producer::from_lookupd(p.producers[0].clone());
    assert_eq!(
        (p.http_address().as_str(), p.tcp_address().as_str()),
        ("127.0.0.1:24151", "127.0.0.1:24150")
    );
    assert_eq!(p.topics.as_ref().unwrap().len(), 27);
    let empty = Producer::from_lookupd(Default::default());
    assert_eq!(
        ojson(&empty),
        r#"{"remote_addresses":null,"remote_address":"","hostname":"","broadcast_address":"","tcp_port":0,"http_port":0,"version":"","topics":null,"out_of_date":false}"#
    );
}

/// One member's `/stats` of replicated topic `r`, each holding the same
/// messages (as followers will once channels read the log).
fn member_stats(port: i64, host: &str, node_id: u64, leader: Option<u64>) -> TopicStats {
    let json = format!(
        r#"{{"topics":[{{"topic_name":"r","depth":5,"backend_depth":1,"message_count":8,
        "channels":[{{"channel_name":"c","depth":2,"message_count":8,"in_flight_count":1}}],
        "paused":false,"replicas":3,"replication":{{"group":1,"leader":{},"leader_address":null,
        "is_leader":{},"replicas":[],"last_log_index":12,"committed_index":12,"unfinished":0,"put_back":0}}}}]}}"#,
        leader.map_or("null".to_string(), |l| l.to_string()),
        leader == Some(node_id)
    );
    topics(&json, &node(port, host), 0).remove(0)
}

#[test]
fn a_replicated_topics_totals_are_the_leaders_not_the_sum_over_members() {
    let per_node = vec![
        member_stats(1, "a", 1, Some(2)),
        member_stats(2, "b", 2, Some(2)),
        member_stats(3, "c", 3, Some(2)),
    ];
    let agg = TopicStats::aggregate("r", per_node.clone());
    assert_eq!(
        (
            agg.depths.depth,
            agg.depths.backend_depth,
            agg.message_count
        ),
        (5, 1, 8),
        "counted once, from the leader"
    );
    let chans = agg.channels.as_ref().unwrap();
    assert_eq!(
        (chans.len(), chans[0].depths.depth, chans[0].message_count),
        (1, 2, 8)
    );
    // Every member is still listed, and the view is the leader's report.
    assert_eq!(agg.nodes.as_ref().unwrap().len(), 3);
    let r = agg.replicated.replication.as_ref().unwrap();
    assert_eq!((r.leader, r.is_leader), (Some(2), true));
    assert_eq!(agg.replicated.replicas, Some(3));
    let json = ojson(&agg);
    assert!(
        json.contains(r#""replicas":3,"replication":{"group":1,"leader":2,"#),
        "{json}"
    );

    // No member says it leads (an election): summed, as for any topic.
    let leaderless: Vec<TopicStats> = (1..=3)
        .map(|n| member_stats(n, "h", n as u64, None))
        .collect();
    let agg = TopicStats::aggregate("r", leaderless);
    assert_eq!((agg.depths.depth, agg.message_count), (15, 24));
    assert_eq!(agg.channels.as_ref().unwrap()[0].depths.depth, 6);
}

/// nsq-rs's keys (settings, depth limits, locality counts) read from two
/// nsqds and merged: counters add up, a setting is the first node's that
/// has one, and every key keeps its place in the topic's and the channel's
/// object.
#[test]
fn nsq_rs_keys_merge_across_nodes_in_place() {
    let stats = |max_attempts: i64, max_depth: i64, dropped: i64| {
        format!(
            r#"{{"topics":[{{"topic_name":"t","depth":4,"backend_depth":1,"message_count":9,
            "zone_local_msg_count":2,"global_msg_count":1,"paused":false,
            "max_depth":{max_depth},"max_depth_policy":"reject","dropped_count":{dropped},
            "channels":[{{"channel_name":"c","depth":3,"backend_depth":2,"message_count":9,
            "region_local_msg_count":4,"max_attempts":{max_attempts},"dead_letter_topic":"t_dl",
            "dead_letter_count":1,"max_depth":{max_depth},"max_depth_policy":"drop-oldest",
            "dropped_count":{dropped}}}]}}]}}"#
        )
    };
    let mut per_node = topics(&stats(0, 0, 2), &node(1, "a"), 0);
    per_node.extend(topics(&stats(5, 7, 3), &node(2, "b"), 0));
    let agg = TopicStats::aggregate("t", per_node);
    let mut topic = agg.clone();
    topic.channels = None;
    topic.nodes = None;
    topic.e2e_processing_latency = None;
    assert_eq!(
        ojson(&topic),
        r#"{"node":"*","hostname":"","topic_name":"t","depth":8,"memory_depth":6,"backend_depth":2,"message_count":18,"delivery_msg_count":6,"zone_local_msg_count":4,"global_msg_count":2,"nodes":null,"channels":null,"paused":false,"e2e_processing_latency":null,"max_depth":7,"max_depth_policy":"reject","dropped_count":5}"#
    );
    let mut channel = agg.channels.unwrap().remove(0);
    channel.nodes = None;
    channel.e2e_processing_latency = None;
    assert_eq!(
        ojson(&channel),
        r#"{"node":"*","hostname":"a","topic_name":"t","channel_name":"c","depth":6,"memory_depth":2,"backend_depth":4,"in_flight_count":0,"deferred_count":0,"requeue_count":0,"timeout_count":0,"message_count":18,"delivery_msg_count":8,"region_local_msg_count":8,"client_count":0,"nodes":null,"clients":null,"paused":false,"e2e_processing_latency":null,"max_attempts":5,"dead_letter_topic":"t_dl","dead_letter_count":2,"max_depth":7,"max_depth_policy":"drop-oldest","dropped_count":5}"#
    );
}

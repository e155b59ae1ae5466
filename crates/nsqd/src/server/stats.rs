//! `/stats`: the snapshot of every topic, channel and client, as JSON (the
//! shared `nsq_protocol::stats` types) and as nsqd's text table.

use std::fmt::Write;
use std::sync::Arc;

use nsq_protocol::stats::{
    ClientStats, E2eLatency, MemStats, ReplicationStats, Stats, TopicReplication, TopicStats,
};

use super::nsqd::NsqdInner;

pub struct StatsQuery<'a> {
    pub topic: Option<&'a str>,
    pub channel: Option<&'a str>,
    pub include_clients: bool,
    pub include_mem: bool,
}

/// Keeps what `grant` may see (`--http-auth-required`): its topics, their
/// channels it may see, and the producers' counts for its topics (a
/// producer publishing to none of them is left out).
pub fn retain_visible(s: &mut Stats, grant: &nsq_http::guard::Grant) {
    if let Some(topics) = &mut s.topics {
        topics.retain(|t| grant.sees_topic(&t.topic_name));
        for t in topics.iter_mut() {
            let name = t.topic_name.clone();
            t.channels
                .retain(|c| grant.sees_channel(&name, &c.channel_name));
        }
    }
    if let Some(producers) = &mut s.producers {
        for p in producers.iter_mut() {
            p.pub_counts.retain(|c| grant.sees_topic(&c.topic));
        }
        producers.retain(|p| !p.pub_counts.is_empty());
    }
}

pub fn collect(nsqd: &Arc<NsqdInner>, q: &StatsQuery) -> Stats {
    let topics: Option<Vec<TopicStats>> = match q.topic {
        Some(name) => nsqd
            .get_topic(name)
            .map(|t| vec![t.stats(q.channel, q.include_clients)]),
        None => Some(
            nsqd.topics()
                .iter()
                .map(|t| t.stats(q.channel, q.include_clients))
                .collect(),
        ),
    };
    let cluster = nsqd.cluster();
    let topics = topics.map(|ts| {
        ts.into_iter()
            .filter(|t| q.channel.is_none() || !t.channels.is_empty())
            .map(|mut t| {
                // Replicated topics only, on a member: an unreplicated
                // topic's JSON stays NSQ's.
                if let Some(n) = t.replicas {
                    t.replication = cluster.topic_stats(&t.topic_name, n);
                    // Its depth limits are its group's (the member's own
                    // stay unset), and so is what `drop-oldest` dropped:
                    // the same on every member that holds the group.
                    let limit = |c: Option<&str>| cluster.group_limit(&t.topic_name, n, c);
                    if let Some(g) = limit(None).filter(|g| g.limit.is_set()) {
                        t.max_depth = g.limit.max_depth;
                        t.max_depth_policy = Some(g.limit.policy.to_string());
                    }
                    let groups: Vec<_> = t
                        .channels
                        .iter()
                        .map(|c| limit(Some(&c.channel_name)))
                        .collect();
                    for (c, g) in t.channels.iter_mut().zip(groups) {
                        let Some(g) = g else { continue };
                        if g.limit.is_set() {
                            c.max_depth = g.limit.max_depth;
                            c.max_depth_policy = Some(g.limit.policy.to_string());
                        }
                        c.dropped_count = g.dropped;
                    }
                }
                t
            })
            .collect::<Vec<_>>()
    });
    let producers = if q.include_clients {
        let mut p: Vec<ClientStats> = nsqd
            .clients()
            .iter()
            .filter(|c| c.has_published())
            .map(|c| {
                // a client that also subscribed reports its channel counters
                let channel = c
                    .subscription()
                    .and_then(|(t, ch)| nsqd.get_topic(&t)?.get_channel(&ch));
                let mut s = match channel {
                    Some(ch) => ch.client_stats(c),
                    None => c.stats(None),
                };
                if let Some(t) = q.topic {
                    s.pub_counts = c
                        .pub_counts()
                        .into_iter()
                        .filter(|p| p.topic == t)
                        .collect();
                }
                s
            })
            .collect();
        p.sort_by(|a, b| a.remote_address.cmp(&b.remote_address));
        (!p.is_empty()).then_some(p)
    } else {
        None
    };
    Stats {
        version: nsq_protocol::VERSION.to_string(),
        health: nsqd.health(),
        start_time: nsqd.start_time,
        topics,
        memory: q.include_mem.then(mem_stats),
        producers,
        replication: cluster.stats(),
    }
}

/// Go-runtime numbers have no Rust equivalent; report what the process has.
fn mem_stats() -> MemStats {
    let rss = rss_bytes();
    MemStats {
        heap_in_use_bytes: rss,
        ..Default::default()
    }
}

/// Resident set size from /proc (0 where unavailable).
pub fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|v| v.parse::<u64>().ok())
        })
        .map(|pages| pages * 4096)
        .unwrap_or(0)
}

fn e2e_text(e: &E2eLatency) -> String {
    let Some(ps) = &e.percentiles else {
        return String::new();
    };
    ps.iter()
        .map(|p| {
            let v = p.value;
            let (val, unit) = if v > 1e9 {
                (v / 1e9, "s")
            } else if v > 1e6 {
                (v / 1e6, "ms")
            } else if v > 1e3 {
                (v / 1e3, "us")
            } else {
                (v, "ns")
            };
            format!("{val:.1}{unit}")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn client_line(c: &ClientStats, now_secs: i64) -> String {
    let port = c.remote_address.rsplit(':').next().unwrap_or("");
    let id = format!("{}:{} {}", c.hostname, port, c.user_agent);
    let connected = go_duration_secs(now_secs - c.connect_ts);
    if !c.pub_counts.is_empty() {
        let topics = c
            .pub_counts
            .iter()
            .map(|p| format!("{}={}", p.topic, p.count))
            .collect::<Vec<_>>()
            .join(",");
        let published: u64 = c.pub_counts.iter().map(|p| p.count).sum();
        format!(
            "[{} {:<21}] msgs: {:<8} topics: {} connected: {}",
            c.version, id, published, topics, connected
        )
    } else {
        format!(
            "[{} {:<21}] state: {} inflt: {:<4} rdy: {:<4} fin: {:<8} re-q: {:<8} msgs: {:<8} connected: {}",
            c.version, id, c.state, c.in_flight_count, c.ready_count, c.finish_count, c.requeue_count, c.message_count, connected
        )
    }
}

/// nsq-rs limits and expiry at the end of a topic's or channel's line,
/// only those set (an nsqd with none prints NSQ's lines).
fn limits_text(
    mem_queue_size: Option<i64>,
    max_depth: u64,
    policy: Option<&str>,
    dropped: u64,
    (max_age, expired): (Option<&str>, u64),
) -> String {
    let mut s = String::new();
    if let Some(m) = mem_queue_size {
        let _ = write!(s, " mem-queue-size: {m}");
    }
    if max_depth > 0 {
        let _ = write!(
            s,
            " max-depth: {max_depth} ({})",
            policy.unwrap_or("reject")
        );
    }
    if dropped > 0 {
        let _ = write!(s, " dropped: {dropped}");
    }
    if let Some(a) = max_age {
        let _ = write!(s, " max-age: {a}");
    }
    if expired > 0 {
        let _ = write!(s, " expired: {expired}");
    }
    s
}

/// nsq-rs replicated topics at the end of a topic's line: its `replicas`
/// and, on a replication member, its group as this member sees it (an
/// unreplicated topic prints NSQ's line).
fn replication_text(replicas: Option<u8>, r: Option<&TopicReplication>) -> String {
    let mut s = String::new();
    if let Some(n) = replicas {
        let _ = write!(s, " replicas: {n}");
    }
    let Some(r) = r else {
        return s;
    };
    let _ = write!(s, " group: {} leader: ", r.group);
    match r.leader {
        Some(id) => {
            let _ = write!(s, "{id}");
        }
        None => s.push_str("none"),
    }
    if let Some(a) = &r.leader_address {
        let _ = write!(s, " ({a})");
    }
    if r.is_leader {
        s.push_str(" here");
    }
    let _ = write!(
        s,
        " unfinished: {} put-back: {} lag:",
        r.unfinished, r.put_back
    );
    for replica in &r.replicas {
        match replica.lag {
            Some(lag) => {
                let _ = write!(s, " {}={lag}", replica.node_id);
            }
            None => {
                let _ = write!(s, " {}=?", replica.node_id);
            }
        }
    }
    if let Some(ret) = &r.retention {
        let _ = write!(
            s,
            " retention: {ret} retained: {} ({} bytes)",
            r.retained_messages, r.retained_bytes
        );
    }
    s
}

/// nsq-rs: this nsqd as a replication member, and each of its groups.
fn member_text(r: &ReplicationStats) -> String {
    let mut s = format!(
        "\nReplication: node {} ({}) on {}\n",
        r.node_id,
        if r.standing.is_empty() {
            "member"
        } else {
            &r.standing
        },
        r.address
    );
    let opt = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
    for g in &r.groups {
        let _ = writeln!(
            s,
            "   [group {:<4}] {:<9} leader: {:<4} term: {:<5} log: {:<8} applied: {:<8} snapshot: {:<8} purged: {}{}",
            g.group,
            g.state,
            opt(g.leader),
            g.term,
            opt(g.last_log_index),
            opt(g.last_applied),
            opt(g.snapshot),
            opt(g.purged),
            if g.quiet { " quiet" } else { "" }
        );
    }
    s
}

/// nsqd's plain-text `/stats`.
pub fn text(stats: &Stats) -> String {
    let now_ns = super::clock::now_unix_ns();
    let now = now_ns / 1_000_000_000;
    let mut s = String::new();
    let _ = writeln!(s, "nsqd v{} (built w/rust)", stats.version);
    let _ = writeln!(s, "start_time {}", rfc3339(stats.start_time));
    let _ = writeln!(
        s,
        "uptime {}",
        go_duration_ns(now_ns - stats.start_time * 1_000_000_000)
    );
    let _ = write!(s, "\nHealth: {}\n", stats.health);
    if let Some(m) = &stats.memory {
        s.push_str("\nMemory:\n");
        for (k, v) in [
            ("heap_objects", m.heap_objects),
            ("heap_idle_bytes", m.heap_idle_bytes),
            ("heap_in_use_bytes", m.heap_in_use_bytes),
            ("heap_released_bytes", m.heap_released_bytes),
            ("gc_pause_usec_100", m.gc_pause_usec_100),
            ("gc_pause_usec_99", m.gc_pause_usec_99),
            ("gc_pause_usec_95", m.gc_pause_usec_95),
            ("next_gc_bytes", m.next_gc_bytes),
            ("gc_total_runs", m.gc_total_runs as u64),
        ] {
            let _ = writeln!(s, "   {k:<25}\t{v}");
        }
    }
    if let Some(r) = &stats.replication {
        s.push_str(&member_text(r));
    }
    match &stats.topics {
        Some(ts) if !ts.is_empty() => {
            s.push_str("\nTopics:");
            for t in ts {
                let p = if t.paused { "*P " } else { "   " };
                let _ = write!(
                    s,
                    "\n{p}[{:<15}] depth: {:<5} be-depth: {:<5} msgs: {:<8} e2e%: {}{}{}\n",
                    t.topic_name,
                    t.depth,
                    t.backend_depth,
                    t.message_count,
                    e2e_text(&t.e2e_processing_latency),
                    limits_text(
                        t.mem_queue_size,
                        t.max_depth,
                        t.max_depth_policy.as_deref(),
                        t.dropped_count,
                        (t.max_age.as_deref(), t.expired_count)
                    ),
                    replication_text(t.replicas, t.replication.as_ref())
                );
                for c in &t.channels {
                    let p = if c.paused { "   *P " } else { "      " };
                    let _ = writeln!(
                        s,
                        "{p}[{:<25}] depth: {:<5} be-depth: {:<5} inflt: {:<4} def: {:<4} re-q: {:<5} timeout: {:<5} msgs: {:<8} e2e%: {}{}",
                        c.channel_name,
                        c.depth,
                        c.backend_depth,
                        c.in_flight_count,
                        c.deferred_count,
                        c.requeue_count,
                        c.timeout_count,
                        c.message_count,
                        e2e_text(&c.e2e_processing_latency),
                        limits_text(
                            None,
                            c.max_depth,
                            c.max_depth_policy.as_deref(),
                            c.dropped_count,
                            (c.max_age.as_deref(), c.expired_count)
                        )
                    );
                    for cl in c.clients.iter().flatten() {
                        let _ = writeln!(s, "        {}", client_line(cl, now));
                    }
                }
            }
        }
        _ => s.push_str("\nTopics: None\n"),
    }
    match &stats.producers {
        Some(ps) if !ps.is_empty() => {
            s.push_str("\nProducers:\n");
            for p in ps {
                let _ = writeln!(s, "   {}", client_line(p, now));
            }
        }
        _ => s.push_str("\nProducers: None\n"),
    }
    s
}

pub use nsq_protocol::duration::rfc3339;

/// A Go duration string (`1h2m3.5s`) from nanoseconds.
pub fn go_duration_ns(ns: i64) -> String {
    nsq_protocol::duration::format(std::time::Duration::from_nanos(ns.max(0) as u64))
}

pub fn go_duration_secs(secs: i64) -> String {
    go_duration_ns(secs * 1_000_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replicated_topic_line_names_its_group_leader_and_lags() {
        use nsq_protocol::stats::{ReplicaStats, ReplicationGroup, ReplicationPeer};
        assert_eq!(replication_text(None, None), "", "NSQ's line");
        assert_eq!(replication_text(Some(3), None), " replicas: 3");
        let replica = |node_id, lag| ReplicaStats {
            node_id,
            matched_index: None,
            lag,
        };
        let r = TopicReplication {
            group: 2,
            leader: Some(1),
            leader_address: Some("10.0.0.1:4150".into()),
            is_leader: true,
            replicas: vec![replica(1, Some(0)), replica(2, Some(7)), replica(3, None)],
            unfinished: 12,
            put_back: 4,
            ..TopicReplication::default()
        };
        assert_eq!(
            replication_text(Some(3), Some(&r)),
            " replicas: 3 group: 2 leader: 1 (10.0.0.1:4150) here unfinished: 12 put-back: 4 lag: 1=0 2=7 3=?"
        );
        let none = TopicReplication {
            leader: None,
            ..TopicReplication::default()
        };
        assert_eq!(
            replication_text(Some(3), Some(&none)),
            " replicas: 3 group: 0 leader: none unfinished: 0 put-back: 0 lag:"
        );

        let m = ReplicationStats {
            node_id: 2,
            address: "10.0.0.2:4200".into(),
            peers: vec![ReplicationPeer::default()],
            standing: "member".into(),
            protocol: 2,
            groups: vec![ReplicationGroup {
                group: 0,
                leader: Some(1),
                term: 3,
                state: "follower".into(),
                last_log_index: Some(120),
                last_applied: Some(119),
                snapshot: None,
                purged: Some(99),
                quiet: true,
            }],
            ..ReplicationStats::default()
        };
        assert_eq!(
            member_text(&m),
            "\nReplication: node 2 (member) on 10.0.0.2:4200\n   [group 0   ] follower  leader: 1    term: 3     log: 120      applied: 119      snapshot: -        purged: 99 quiet\n"
        );
    }

    #[test]
    fn go_durations() {
        assert_eq!(go_duration_ns(374_649_454_075), "6m14.649454075s");
        assert_eq!(go_duration_ns(12_000_000_000), "12s");
        assert_eq!(go_duration_ns(3_723_000_000_000), "1h2m3s");
        assert_eq!(go_duration_ns(0), "0s");
        assert_eq!(go_duration_ns(250_000_000), "250ms");
        assert_eq!(go_duration_ns(3_600_000_000_000), "1h0m0s");
    }
}
//

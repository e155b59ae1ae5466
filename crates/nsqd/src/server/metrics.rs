//! `GET /metrics`: the numbers of `/stats` in the Prometheus text exposition
//! format 0.0.4 — an nsq-rs addition (Go nsqd answers 404 there), so a
//! Prometheus server can scrape nsqd without an exporter.
//!
//! Everything is rendered from one `/stats` snapshot, so the two never
//! disagree. Counters are the totals since start (Prometheus computes
//! rates); E2E latency quantiles are gauges in seconds over nsqd's window.

use std::fmt::Write;

use nsq_protocol::stats::Stats;

pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A label value with `\`, `"` and newlines escaped.
fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

struct Family {
    name: &'static str,
    help: &'static str,
    kind: &'static str,
    samples: Vec<(String, String)>,
}

impl Family {
    fn new(name: &'static str, kind: &'static str, help: &'static str) -> Family {
        Family {
            name,
            help,
            kind,
            samples: Vec::new(),
        }
    }
    fn add(&mut self, labels: String, v: impl std::fmt::Display) {
        self.samples.push((labels, v.to_string()));
    }
}

fn topic_label(t: &str) -> String {
    format!("topic=\"{}\"", esc(t))
}

fn channel_labels(t: &str, c: &str) -> String {
    format!("topic=\"{}\",channel=\"{}\"", esc(t), esc(c))
}

/// Prometheus floats: integral values without a fraction, NaN/Inf spelled
/// the way the format wants.
fn float(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{v}")
    }
}

/// Renders a snapshot taken with clients excluded and memory included.
pub fn render(s: &Stats, clients: usize) -> String {
    let mut up = Family::new(
        "nsqd_up",
        "gauge",
        "1 when nsqd is healthy (/ping answers OK), else 0.",
    );
    up.add(String::new(), if s.health == "OK" { 1 } else { 0 });
    let mut start = Family::new(
        "nsqd_start_time_seconds",
        "gauge",
        "Unix time nsqd started.",
    );
    start.add(String::new(), s.start_time);
    let mut conns = Family::new(
        "nsqd_clients",
        "gauge",
        "Connected TCP clients (producers and consumers).",
    );
    conns.add(String::new(), clients);

    let mut t_depth = Family::new(
        "nsqd_topic_depth",
        "gauge",
        "Messages queued in the topic (memory and disk).",
    );
    let mut t_backend = Family::new(
        "nsqd_topic_backend_depth",
        "gauge",
        "Messages queued in the topic's disk queue.",
    );
    let mut t_msgs = Family::new(
        "nsqd_topic_messages_total",
        "counter",
        "Messages published to the topic since nsqd started.",
    );
    let mut t_bytes = Family::new(
        "nsqd_topic_message_bytes_total",
        "counter",
        "Body bytes published to the topic since nsqd started.",
    );
    let mut t_paused = Family::new("nsqd_topic_paused", "gauge", "1 when the topic is paused.");
    let mut t_chans = Family::new("nsqd_topic_channels", "gauge", "Channels of the topic.");
    let mut t_e2e = Family::new(
        "nsqd_topic_e2e_processing_latency_seconds",
        "gauge",
        "End-to-end processing latency quantile over the topic's channels, in the current window.",
    );
    let mut t_max = Family::new(
        "nsqd_topic_max_depth",
        "gauge",
        "The topic's max_depth limit (only topics that have one).",
    );
    let mut t_dropped = Family::new(
        "nsqd_topic_dropped_total",
        "counter",
        "Messages the topic's drop-oldest limit dropped.",
    );
    let mut t_expired = Family::new(
        "nsqd_topic_expired_total",
        "counter",
        "Messages of the topic's own queue that expired past its max_age.",
    );

    let mut c_depth = Family::new(
        "nsqd_channel_depth",
        "gauge",
        "Messages queued in the channel (memory and disk).",
    );
    let mut c_backend = Family::new(
        "nsqd_channel_backend_depth",
        "gauge",
        "Messages queued in the channel's disk queue.",
    );
    let mut c_inflight = Family::new(
        "nsqd_channel_in_flight",
        "gauge",
        "Messages delivered and not yet finished, requeued or timed out.",
    );
    let mut c_deferred = Family::new(
        "nsqd_channel_deferred",
        "gauge",
        "Deferred messages (DPUB, REQ with a delay).",
    );
    let mut c_msgs = Family::new(
        "nsqd_channel_messages_total",
        "counter",
        "Messages put into the channel since nsqd started.",
    );
    let mut c_requeue = Family::new(
        "nsqd_channel_requeued_total",
        "counter",
        "Messages requeued by REQ.",
    );
    let mut c_timeout = Family::new(
        "nsqd_channel_timed_out_total",
        "counter",
        "In-flight messages that timed out.",
    );
    let mut c_dead = Family::new(
        "nsqd_channel_dead_letters_total",
        "counter",
        "Messages moved to the channel's dead-letter topic after max_attempts.",
    );
    let mut c_max = Family::new(
        "nsqd_channel_max_depth",
        "gauge",
        "The channel's max_depth limit (only channels that have one).",
    );
    let mut c_dropped = Family::new(
        "nsqd_channel_dropped_total",
        "counter",
        "Messages the channel's drop-oldest limit dropped.",
    );
    let mut c_expired = Family::new(
        "nsqd_channel_expired_total",
        "counter",
        "Messages of the channel that expired past its max_age (dropped or dead-lettered).",
    );
    let mut c_clients = Family::new(
        "nsqd_channel_clients",
        "gauge",
        "Consumers subscribed to the channel.",
    );
    let mut c_paused = Family::new(
        "nsqd_channel_paused",
        "gauge",
        "1 when the channel is paused.",
    );
    let mut c_e2e = Family::new(
        "nsqd_channel_e2e_processing_latency_seconds",
        "gauge",
        "End-to-end processing latency quantile of the channel, in the current window.",
    );
    let mut c_e2e_n = Family::new(
        "nsqd_channel_e2e_processing_latency_samples",
        "gauge",
        "Latency samples in the channel's current window.",
    );

    for t in s.topics.iter().flatten() {
        let tl = topic_label(&t.topic_name);
        t_depth.add(tl.clone(), t.depth);
        t_backend.add(tl.clone(), t.backend_depth);
        t_msgs.add(tl.clone(), t.message_count);
        t_bytes.add(tl.clone(), t.message_bytes);
        t_paused.add(tl.clone(), t.paused as u8);
        t_chans.add(tl.clone(), t.channels.len());
        t_dropped.add(tl.clone(), t.dropped_count);
        t_expired.add(tl.clone(), t.expired_count);
        if t.max_depth > 0 {
            t_max.add(tl.clone(), t.max_depth);
        }
        for p in t.e2e_processing_latency.percentiles.iter().flatten() {
            t_e2e.add(
                format!("{tl},quantile=\"{}\"", p.quantile),
                float(p.value / 1e9),
            );
        }
        for c in &t.channels {
            let cl = channel_labels(&t.topic_name, &c.channel_name);
            c_depth.add(cl.clone(), c.depth);
            c_backend.add(cl.clone(), c.backend_depth);
            c_inflight.add(cl.clone(), c.in_flight_count);
            c_deferred.add(cl.clone(), c.deferred_count);
            c_msgs.add(cl.clone(), c.message_count);
            c_requeue.add(cl.clone(), c.requeue_count);
            c_timeout.add(cl.clone(), c.timeout_count);
            c_dead.add(cl.clone(), c.dead_letter_count);
            c_dropped.add(cl.clone(), c.dropped_count);
            c_expired.add(cl.clone(), c.expired_count);
            if c.max_depth > 0 {
                c_max.add(cl.clone(), c.max_depth);
            }
            c_clients.add(cl.clone(), c.client_count);
            c_paused.add(cl.clone(), c.paused as u8);
            if let Some(ps) = &c.e2e_processing_latency.percentiles {
                for p in ps {
                    c_e2e.add(
                        format!("{cl},quantile=\"{}\"", p.quantile),
                        float(p.value / 1e9),
                    );
                }
                c_e2e_n.add(cl.clone(), c.e2e_processing_latency.count);
            }
        }
    }
    let mut mem = Family::new(
        "nsqd_resident_memory_bytes",
        "gauge",
        "Resident set size of the nsqd process.",
    );
    if let Some(m) = &s.memory {
        mem.add(String::new(), m.heap_in_use_bytes);
    }

    let mut r_leader = Family::new(
        "nsqd_replication_group_leader",
        "gauge",
        "nsq-rs replication: the node id of the group's leader as this member sees it (-1: none).",
    );
    let mut r_term = Family::new(
        "nsqd_replication_group_term",
        "gauge",
        "nsq-rs replication: the group's Raft term on this member.",
    );
    let mut r_is_leader = Family::new(
        "nsqd_replication_group_is_leader",
        "gauge",
        "nsq-rs replication: 1 when this member leads the group.",
    );
    let mut r_applied = Family::new(
        "nsqd_replication_group_last_applied",
        "gauge",
        "nsq-rs replication: the last log index this member applied in the group.",
    );
    let mut r_snapshot = Family::new(
        "nsqd_replication_group_snapshot",
        "gauge",
        "nsq-rs replication: the last log index the group's snapshot on this member holds (0: none).",
    );
    let mut r_purged = Family::new(
        "nsqd_replication_group_purged",
        "gauge",
        "nsq-rs replication: the group's log on this member keeps only the entries above this index (0: none purged).",
    );
    let mut rt_is_leader = Family::new(
        "nsqd_replication_topic_is_leader",
        "gauge",
        "nsq-rs replication: 1 when this member leads the replicated topic's group.",
    );
    let mut rt_lag = Family::new(
        "nsqd_replication_topic_replica_lag",
        "gauge",
        "nsq-rs replication: log entries a replica of the topic's group is behind the leader's last (only where known: on the leader).",
    );
    let mut rt_unfinished = Family::new(
        "nsqd_replication_topic_unfinished",
        "gauge",
        "nsq-rs replication: messages committed to the topic's group and not yet finished, as this member applied its log.",
    );
    let mut rt_put_back = Family::new(
        "nsqd_replication_topic_put_back",
        "counter",
        "nsq-rs replication: messages this member put back when it gained the topic's group (each possibly a duplicate).",
    );
    let mut rt_retained = Family::new(
        "nsqd_replication_topic_retained_messages",
        "gauge",
        "nsq-rs replay: about how many of the topic's messages its group's log keeps for its retention (finished or not); only with a retention.",
    );
    let mut rt_retained_bytes = Family::new(
        "nsqd_replication_topic_retained_bytes",
        "gauge",
        "nsq-rs replay: about how many body bytes of the topic its group's log keeps for its retention; only with a retention.",
    );
    for t in s.topics.iter().flatten() {
        let Some(r) = &t.replication else { continue };
        let tl = topic_label(&t.topic_name);
        if r.retention.is_some() {
            rt_retained.add(tl.clone(), r.retained_messages);
            rt_retained_bytes.add(tl.clone(), r.retained_bytes);
        }
        rt_is_leader.add(tl.clone(), u8::from(r.is_leader));
        rt_unfinished.add(tl.clone(), r.unfinished);
        rt_put_back.add(tl.clone(), r.put_back);
        for replica in &r.replicas {
            if let Some(lag) = replica.lag {
                rt_lag.add(format!("{tl},node=\"{}\"", replica.node_id), lag);
            }
        }
    }
    if let Some(r) = &s.replication {
        for g in &r.groups {
            let l = format!("group=\"{}\"", g.group);
            r_leader.add(l.clone(), g.leader.map_or(-1, |id| id as i64));
            r_term.add(l.clone(), g.term);
            r_is_leader.add(l.clone(), u8::from(g.leader == Some(r.node_id)));
            r_applied.add(l.clone(), g.last_applied.unwrap_or(0));
            r_snapshot.add(l.clone(), g.snapshot.unwrap_or(0));
            r_purged.add(l, g.purged.unwrap_or(0));
        }
    }

    let families = [
        up,
        start,
        conns,
        mem,
        t_depth,
        t_backend,
        t_msgs,
        t_bytes,
        t_paused,
        t_chans,
        t_e2e,
        t_max,
        t_dropped,
        t_expired,
        c_depth,
        c_backend,
        c_inflight,
        c_deferred,
        c_msgs,
        c_requeue,
        c_timeout,
        c_dead,
        c_max,
        c_dropped,
        c_expired,
        c_clients,
        c_paused,
        c_e2e,
        c_e2e_n,
        r_leader,
        r_term,
        r_is_leader,
        r_applied,
        r_snapshot,
        r_purged,
        rt_is_leader,
        rt_lag,
        rt_unfinished,
        rt_put_back,
        rt_retained,
        rt_retained_bytes,
    ];
    let mut out = String::new();
    for f in families.iter().filter(|f| !f.samples.is_empty()) {
        let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
        let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
        for (labels, v) in &f.samples {
            if labels.is_empty() {
                let _ = writeln!(out, "{} {v}", f.name);
            } else {
                let _ = writeln!(out, "{}{{{labels}}} {v}", f.name);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use nsq_protocol::stats::{ChannelStats, E2eLatency, Percentile, TopicStats};

    #[test]
    fn renders_families_with_help_type_and_labels() {
        let s = Stats {
            version: "1.3.0".into(),
            health: "OK".into(),
            start_time: 17,
            topics: Some(vec![TopicStats {
                topic_name: "t".into(),
                channels: vec![ChannelStats {
                    channel_name: "c#ephemeral".into(),
                    depth: 4,
                    backend_depth: 0,
                    in_flight_count: 1,
                    deferred_count: 2,
                    message_count: 9,
                    zone_local_msg_count: 0,
                    region_local_msg_count: 0,
                    global_msg_count: 0,
                    requeue_count: 3,
                    timeout_count: 1,
                    dead_letter_count: 0,
                    max_attempts: 0,
                    dead_letter_topic: None,
                    max_depth: 0,
                    max_depth_policy: None,
                    dropped_count: 0,
                    max_age: None,
                    expired_count: 0,
                    client_count: 1,
                    clients: None,
                    paused: true,
                    e2e_processing_latency: E2eLatency {
                        count: 5,
                        percentiles: Some(vec![Percentile {
                            quantile: 0.99,
                            value: 1_500_000.0,
                        }]),
                    },
                }],
                depth: 0,
                backend_depth: 0,
                message_count: 9,
                message_bytes: 90,
                paused: false,
                e2e_processing_latency: E2eLatency::default(),
                mem_queue_size: None,
                max_depth: 0,
                max_depth_policy: None,
                dropped_count: 0,
                max_age: None,
                expired_count: 0,
                replicas: None,
                replication: None,
            }]),
            memory: None,
            producers: None,
            replication: None,
        };
        let m = render(&s, 2);
        assert!(m.contains("# HELP nsqd_channel_depth "));
        assert!(m.contains("# TYPE nsqd_channel_messages_total counter\n"));
        assert!(m.contains("nsqd_channel_depth{topic=\"t\",channel=\"c#ephemeral\"} 4\n"));
        assert!(m.contains("nsqd_channel_e2e_processing_latency_seconds{topic=\"t\",channel=\"c#ephemeral\",quantile=\"0.99\"} 0.0015\n"), "{m}");
        assert!(m.contains("nsqd_topic_messages_total{topic=\"t\"} 9\n"));
        assert!(m.contains("nsqd_clients 2\n"));
        assert!(m.contains("nsqd_channel_paused{topic=\"t\",channel=\"c#ephemeral\"} 1\n"));
        assert!(!m.contains("nsqd_topic_e2e"), "no samples, no family");
        assert!(
            !m.contains("nsqd_replication"),
            "no replicated topic, no member: nothing of replication"
        );
        assert_eq!(esc("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn a_replicated_topic_shows_leadership_and_the_lags_known() {
        let s: Stats = serde_json::from_str(
            r#"{"version":"1.3.0","health":"OK","start_time":1,"producers":null,"topics":[
            {"topic_name":"r","channels":[],"depth":0,"backend_depth":0,"message_count":0,
             "message_bytes":0,"paused":false,"e2e_processing_latency":{"count":0,"percentiles":null},
             "replicas":3,"replication":{"group":1,"leader":1,"is_leader":true,"replicas":[
               {"node_id":1,"matched_index":9,"lag":0},{"node_id":2,"matched_index":7,"lag":2},
               {"node_id":3,"matched_index":null,"lag":null}]}},
            {"topic_name":"u","channels":[],"depth":0,"backend_depth":0,"message_count":0,
             "message_bytes":0,"paused":false,"e2e_processing_latency":{"count":0,"percentiles":null}}]}"#,
        )
        .unwrap();
        let m = render(&s, 0);
        assert!(m.contains("# TYPE nsqd_replication_topic_is_leader gauge\n"));
        assert!(m.contains("nsqd_replication_topic_is_leader{topic=\"r\"} 1\n"));
        assert!(m.contains("nsqd_replication_topic_replica_lag{topic=\"r\",node=\"2\"} 2\n"));
        assert!(m.contains("nsqd_replication_topic_replica_lag{topic=\"r\",node=\"1\"} 0\n"));
        // Unknown lag: no sample, rather than a made-up number.
        assert!(!m.contains("node=\"3\""), "{m}");
        assert!(!m.contains("nsqd_replication_topic_is_leader{topic=\"u\"}"));
    }
}

//! statsd: every `--statsd-interval`, nsqd's topic, channel and memory
//! numbers as statsd lines over UDP to `--statsd-address`.
//!
//! Counters go out as the change since the previous round (the first round
//! sends totals), gauges as they are. Lines are packed into datagrams of at
//! most `--statsd-udp-packet-size` bytes, never splitting a line, and the
//! datagrams are spread evenly over `interval − 1 s` as Go nsqd spreads them.
//! Unlike Go nsqd (which panics with a 1 s interval because that spread is
//! zero), any positive interval works: a zero spread sends them back to back.
//!
//! Hand-rolled over tokio's `UdpSocket` rather than with `cadence`: cadence
//! flushes a datagram as soon as its buffer fills, with no way to spread the
//! datagrams over the interval, and its sinks block on std sockets; what is
//! left for a library to do here — formatting `name:value|c` — is one line.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use nsq_protocol::stats::Stats;
use tokio::net::UdpSocket;

use super::nsqd::NsqdInner;
use super::stats::{self, StatsQuery};

/// Counter totals of the previous round, by metric name.
pub type Previous = HashMap<String, u64>;

/// One round's lines (without the trailing `\n`), and the counter totals to
/// diff the next round against.
pub fn lines(
    prefix: &str,
    s: &Stats,
    prev: &Previous,
    exclude_ephemeral: bool,
) -> (Vec<String>, Previous) {
    let mut out = Vec::new();
    let mut next = Previous::new();
    let mut counter = |out: &mut Vec<String>, name: String, total: u64| {
        let delta = total.wrapping_sub(prev.get(&name).copied().unwrap_or(0)) as i64;
        out.push(format!("{prefix}{name}:{delta}|c"));
        next.insert(name, total);
    };
    let gauge =
        |out: &mut Vec<String>, name: String, v: i64| out.push(format!("{prefix}{name}:{v}|g"));
    let ephemeral = |n: &str| exclude_ephemeral && n.ends_with("#ephemeral");
    for t in s.topics.iter().flatten() {
        if ephemeral(&t.topic_name) {
            continue;
        }
        let tn = &t.topic_name;
        counter(
            &mut out,
            format!("topic.{tn}.message_count"),
            t.message_count,
        );
        counter(
            &mut out,
            format!("topic.{tn}.message_bytes"),
            t.message_bytes,
        );
        gauge(&mut out, format!("topic.{tn}.depth"), t.depth);
        gauge(
            &mut out,
            format!("topic.{tn}.backend_depth"),
            t.backend_depth,
        );
        // nsq-rs: only once a limit has dropped (NSQ's lines otherwise)
        if t.dropped_count > 0 || prev.contains_key(&format!("topic.{tn}.dropped_count")) {
            counter(
                &mut out,
                format!("topic.{tn}.dropped_count"),
                t.dropped_count,
            );
        }
        // nsq-rs: only once a message has expired
        if t.expired_count > 0 || prev.contains_key(&format!("topic.{tn}.expired_count")) {
            counter(
                &mut out,
                format!("topic.{tn}.expired_count"),
                t.expired_count,
            );
        }
        for p in t.e2e_processing_latency.percentiles.iter().flatten() {
            gauge(
                &mut out,
                format!(
                    "topic.{tn}.e2e_processing_latency_{:.0}",
                    p.quantile * 100.0
                ),
                p.value as i64,
            );
        }
        for c in &t.channels {
            if ephemeral(&c.channel_name) {
                continue;
            }
            let base = format!("topic.{tn}.channel.{}", c.channel_name);
            counter(&mut out, format!("{base}.message_count"), c.message_count);
            gauge(&mut out, format!("{base}.depth"), c.depth);
            gauge(&mut out, format!("{base}.backend_depth"), c.backend_depth);
            gauge(
                &mut out,
                format!("{base}.in_flight_count"),
                c.in_flight_count,
            );
            gauge(&mut out, format!("{base}.deferred_count"), c.deferred_count);
            counter(&mut out, format!("{base}.requeue_count"), c.requeue_count);
            counter(&mut out, format!("{base}.timeout_count"), c.timeout_count);
            // nsq-rs: only once a channel has dead-lettered (NSQ's lines otherwise)
            if c.dead_letter_count > 0 || prev.contains_key(&format!("{base}.dead_letter_count")) {
                counter(
                    &mut out,
                    format!("{base}.dead_letter_count"),
                    c.dead_letter_count,
                );
            }
            if c.dropped_count > 0 || prev.contains_key(&format!("{base}.dropped_count")) {
                counter(&mut out, format!("{base}.dropped_count"), c.dropped_count);
            }
            if c.expired_count > 0 || prev.contains_key(&format!("{base}.expired_count")) {
                counter(&mut out, format!("{base}.expired_count"), c.expired_count);
            }
            gauge(&mut out, format!("{base}.clients"), c.client_count);
            for p in c.e2e_processing_latency.percentiles.iter().flatten() {
                gauge(
                    &mut out,
                    format!("{base}.e2e_processing_latency_{:.0}", p.quantile * 100.0),
                    p.value as i64,
                );
            }
        }
    }
    if let Some(m) = &s.memory {
        gauge(&mut out, "mem.heap_objects".into(), m.heap_objects as i64);
        gauge(
            &mut out,
            "mem.heap_idle_bytes".into(),
            m.heap_idle_bytes as i64,
        );
        gauge(
            &mut out,
            "mem.heap_in_use_bytes".into(),
            m.heap_in_use_bytes as i64,
        );
        gauge(
            &mut out,
            "mem.heap_released_bytes".into(),
            m.heap_released_bytes as i64,
        );
        gauge(
            &mut out,
            "mem.gc_pause_usec_100".into(),
            m.gc_pause_usec_100 as i64,
        );
        gauge(
            &mut out,
            "mem.gc_pause_usec_99".into(),
            m.gc_pause_usec_99 as i64,
        );
        gauge(
            &mut out,
            "mem.gc_pause_usec_95".into(),
            m.gc_pause_usec_95 as i64,
        );
        gauge(&mut out, "mem.next_gc_bytes".into(), m.next_gc_bytes as i64);
        counter(&mut out, "mem.gc_runs".into(), m.gc_total_runs as u64);
    }
    (out, next)
}

/// Packs `\n`-terminated lines into datagrams of at most `size` bytes; a
/// line longer than that travels alone.
pub fn pack(lines: &[String], size: usize) -> Vec<Vec<u8>> {
    let mut grams = Vec::new();
    let mut cur: Vec<u8> = Vec::with_capacity(size);
    for l in lines {
        let need = l.len() + 1;
        if !cur.is_empty() && cur.len() + need > size {
            grams.push(std::mem::take(&mut cur));
        }
        cur.extend_from_slice(l.as_bytes());
        cur.push(b'\n');
    }
    if !cur.is_empty() {
        grams.push(cur);
    }
    grams
}

async fn socket(addr: &str) -> std::io::Result<UdpSocket> {
    let target = tokio::time::timeout(Duration::from_secs(1), tokio::net::lookup_host(addr))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "lookup timed out"))??
        .next()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no address"))?;
    let local = if target.is_ipv6() {
        "[::]:0"
    } else {
        "0.0.0.0:0"
    };
    let s = UdpSocket::bind(local).await?;
    s.connect(target).await?;
    Ok(s)
}

/// The statsd loop; returns when nsqd shuts down.
pub async fn run(nsqd: Arc<NsqdInner>) {
    let addr = nsqd.opts().statsd_address.clone();
    let interval = nsqd.opts().statsd_interval.max(Duration::from_millis(1));
    let spread = interval.saturating_sub(Duration::from_secs(1));
    let size = nsqd.opts().statsd_udp_packet_size.max(1) as usize;
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut prev = Previous::new();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = nsqd.ctx.cancel.cancelled() => break,
        }
        let sock = match socket(&addr).await {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(%addr, error = %e, "failed to create UDP socket to statsd");
                continue;
            }
        };
        tracing::info!(%addr, "STATSD: pushing stats");
        let q = StatsQuery {
            topic: None,
            channel: None,
            include_clients: false,
            include_mem: nsqd.opts().statsd_mem_stats,
        };
        let snapshot = stats::collect(&nsqd, &q);
        let prefix = nsqd.statsd_prefix.lock().clone();
        let (ls, next) = lines(
            &prefix,
            &snapshot,
            &prev,
            nsqd.opts().statsd_exclude_ephemeral,
        );
        prev = next;
        let grams = pack(&ls, size);
        let gap = spread / grams.len().max(1) as u32;
        let mut hurry = false;
        for (i, g) in grams.iter().enumerate() {
            if let Err(e) = sock.send(g).await {
                tracing::debug!(%addr, error = %e, "statsd send failed");
            }
            // On shutdown, send the rest at once rather than drop them.
            if !hurry && !gap.is_zero() && i + 1 < grams.len() {
                tokio::select! {
                    _ = tokio::time::sleep(gap) => {}
                    _ = nsqd.ctx.cancel.cancelled() => hurry = true,
                }
            }
        }
    }
    tracing::info!("STATSD: closing");
}

#[cfg(test)]
mod tests {
    use super::*;
    use nsq_protocol::stats::{ChannelStats, E2eLatency, MemStats, Percentile, TopicStats};

    fn snapshot(msgs: u64) -> Stats {
        let ch = |name: &str| ChannelStats {
            channel_name: name.into(),
            depth: 2,
            backend_depth: 0,
            in_flight_count: 1,
            deferred_count: 0,
            message_count: msgs,
            zone_local_msg_count: 0,
            region_local_msg_count: 0,
            global_msg_count: 0,
            requeue_count: 0,
            timeout_count: 0,
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
            paused: false,
            e2e_processing_latency: E2eLatency {
                count: 1,
                percentiles: Some(vec![Percentile {
                    quantile: 0.999,
                    value: 1234.7,
                }]),
            },
        };
        Stats {
            version: "1.3.0".into(),
            health: "OK".into(),
            start_time: 0,
            topics: Some(vec![TopicStats {
                topic_name: "t".into(),
                channels: vec![ch("c"), ch("e#ephemeral")],
                depth: 3,
                backend_depth: 0,
                message_count: msgs,
                message_bytes: msgs * 4,
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
            memory: Some(MemStats::default()),
            producers: None,
            replication: None,
        }
    }

    #[test]
    fn counters_are_deltas_and_names_match_nsqd() {
        let (l1, prev) = lines("nsq.h_4151.", &snapshot(3), &Previous::new(), false);
        assert!(l1.contains(&"nsq.h_4151.topic.t.message_count:3|c".to_string()));
        assert!(l1.contains(&"nsq.h_4151.topic.t.message_bytes:12|c".to_string()));
        assert!(l1.contains(&"nsq.h_4151.topic.t.depth:3|g".to_string()));
        assert!(l1.contains(&"nsq.h_4151.topic.t.channel.c.clients:1|g".to_string()));
        assert!(l1.contains(
            &"nsq.h_4151.topic.t.channel.c.e2e_processing_latency_100:1234|g".to_string()
        ));
        assert!(l1.contains(&"nsq.h_4151.topic.t.channel.e#ephemeral.depth:2|g".to_string()));
        assert!(l1.contains(&"nsq.h_4151.mem.gc_runs:0|c".to_string()));
        let (l2, _) = lines("", &snapshot(5), &prev, true);
        assert!(
            l2.contains(&"topic.t.message_count:2|c".to_string()),
            "{l2:?}"
        );
        assert!(l2.contains(&"topic.t.channel.c.message_count:2|c".to_string()));
        assert!(
            !l2.iter().any(|l| l.contains("ephemeral")),
            "--statsd-exclude-ephemeral"
        );
    }

    #[test]
    fn packing_never_splits_lines() {
        let ls: Vec<String> = (0..50)
            .map(|i| format!("some.metric.name.{i}:{i}|g"))
            .collect();
        let grams = pack(&ls, 100);
        assert!(grams.len() > 1);
        for g in &grams {
            assert!(g.len() <= 100 && g.ends_with(b"\n"));
        }
        let joined: Vec<u8> = grams.concat();
        assert_eq!(
            String::from_utf8(joined).unwrap(),
            ls.iter().map(|l| format!("{l}\n")).collect::<String>()
        );
        assert_eq!(
            pack(&["x".repeat(20)], 10).len(),
            1,
            "an overlong line goes alone"
        );
    }
}

//! Server-side max attempts and dead letters (nsq-rs, beyond NSQ): off by
//! default (NSQ's behaviour, NSQ's `/stats`), on with `--max-attempts` or
//! per channel with `/channel/config`; a message that would be delivered
//! for attempt `max_attempts + 1` goes, body unchanged, to the channel's
//! dead-letter topic; settings survive a restart; bad settings change
//! nothing. The default dead-letter topic's name past NSQ's 64 characters
//! is cut with a hash of the full name; a dead letter that topic refuses
//! stays in the channel and is sent again only at its next delivery, i.e.
//! while a consumer is subscribed with RDY.

#![forbid(unsafe_code)]

use std::time::Duration;

use nsq_tests::*;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn create_channel(n: &Nsqd, topic: &str, channel: &str) {
    assert_eq!(
        n.post(&format!("/topic/create?topic={topic}"), b"").status,
        200
    );
    assert_eq!(
        n.post(
            &format!("/channel/create?topic={topic}&channel={channel}"),
            b""
        )
        .status,
        200
    );
}

/// A consumer that requeues every delivery; returns the attempts it saw.
fn requeue_all(n: &Nsqd, topic: &str, channel: &str, deliveries: usize) -> Vec<u16> {
    let mut c = n.connect();
    c.sub(topic, channel);
    c.rdy(1);
    let mut seen = Vec::new();
    for _ in 0..deliveries {
        let m = recv_msgs(&mut c, 1, secs(10), false).remove(0);
        seen.push(m.attempts);
        c.req(&m.id, 0);
    }
    seen
}

fn config(n: &Nsqd, query: &str) -> Value {
    let r = n.get(&format!("/channel/config?{query}"));
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

#[test]
fn off_by_default_messages_are_retried_forever_and_stats_are_nsqs() {
    let n = Nsqd::start(&[]);
    create_channel(&n, "t", "c");
    n.http_pub("t", b"poison");
    assert_eq!(requeue_all(&n, "t", "c", 6), vec![1, 2, 3, 4, 5, 6]);
    let stats = n.get("/stats?format=json").text();
    assert!(
        !stats.contains("dead_letter"),
        "NSQ's /stats, no new key: {stats}"
    );
    let cfg = config(&n, "topic=t&channel=c");
    assert_eq!(cfg["max_attempts"], 0);
    assert_eq!(cfg["dead_letter_topic"], "t.c.dead");
    assert!(n.stats("").get("topics").is_some());
    assert!(
        n.topic_stats("t.c.dead").is_none(),
        "no dead-letter topic until one is needed"
    );
}

#[test]
fn the_flag_sends_a_message_past_max_attempts_to_the_dead_letter_topic_body_unchanged() {
    let n = Nsqd::start(&["--max-attempts=2"]);
    create_channel(&n, "orders", "billing");
    n.http_pub("orders", b"poison \x00\xff body");
    assert_eq!(requeue_all(&n, "orders", "billing", 2), vec![1, 2]);
    let dead = wait_for(secs(10), "the dead-letter topic gets the message", || {
        n.topic_stats("orders.billing.dead")
            .filter(|t| int(t, "message_count") == 1)
    });
    assert_eq!(
        int(&dead, "depth"),
        1,
        "kept with no channel, like any topic"
    );
    let ch = n.channel_stats("orders", "billing").unwrap();
    assert_eq!(
        (
            int(&ch, "dead_letter_count"),
            int(&ch, "depth"),
            int(&ch, "in_flight_count")
        ),
        (1, 0, 0)
    );
    let metrics = n.get("/metrics").text();
    assert!(
        metrics.contains("nsqd_channel_dead_letters_total{topic=\"orders\",channel=\"billing\"} 1"),
        "{metrics}"
    );
    // a consumer of the dead-letter topic gets the body byte for byte
    let mut c = n.connect();
    c.sub("orders.billing.dead", "inspect");
    c.rdy(1);
    let m = recv_msgs(&mut c, 1, secs(10), true).remove(0);
    assert_eq!(m.body, b"poison \x00\xff body");
    assert_eq!(m.attempts, 1);
}

#[test]
fn per_channel_settings_are_checked_applied_and_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = Nsqd::start_in(dir.path(), &[]);
    create_channel(&n, "t", "c");
    create_channel(&n, "t", "other");
    for (q, want) in [
        (
            "topic=t&channel=c&max_attempts=x",
            "INVALID_ARG_MAX_ATTEMPTS",
        ),
        (
            "topic=t&channel=c&max_attempts=-1",
            "INVALID_ARG_MAX_ATTEMPTS",
        ),
        (
            "topic=t&channel=c&dead_letter_topic=t",
            "INVALID_ARG_DEAD_LETTER_TOPIC",
        ),
        (
            "topic=t&channel=c&dead_letter_topic=bad!name",
            "INVALID_ARG_DEAD_LETTER_TOPIC",
        ),
    ] {
        n.post(&format!("/channel/config?{q}"), b"")
            .assert_error(400, want);
    }
    n.post("/channel/config?topic=t&channel=nope&max_attempts=1", b"")
        .assert_error(404, "CHANNEL_NOT_FOUND");
    n.post("/channel/config?topic=nope&channel=c&max_attempts=1", b"")
        .assert_error(404, "TOPIC_NOT_FOUND");
    assert_eq!(
        config(&n, "topic=t&channel=c")["max_attempts"],
        0,
        "bad settings changed nothing"
    );

    let r = n.post(
        "/channel/config?topic=t&channel=c&max_attempts=1&dead_letter_topic=poison",
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["max_attempts"], 1);
    assert_eq!(r.json()["dead_letter_topic"], "poison");
    assert_eq!(
        config(&n, "topic=t&channel=other")["max_attempts"],
        0,
        "per channel"
    );
    let meta = n.read_metadata().unwrap();
    assert!(
        meta.contains("\"max_attempts\":1") && meta.contains("\"dead_letter_topic\":\"poison\""),
        "{meta}"
    );

    n.sigterm_and_wait(secs(15));
    let n = Nsqd::start_in(dir.path(), &[]);
    let cfg = config(&n, "topic=t&channel=c");
    assert_eq!(
        (
            cfg["max_attempts"].as_i64(),
            cfg["dead_letter_topic"].as_str()
        ),
        (Some(1), Some("poison"))
    );
    n.http_pub("t", b"m");
    assert_eq!(requeue_all(&n, "t", "c", 1), vec![1]);
    wait_for(secs(10), "dead-lettered to the configured topic", || {
        n.topic_stats("poison")
            .filter(|t| int(t, "message_count") == 1)
    });
    // `other` still has its copy, retried as NSQ does
    assert_eq!(requeue_all(&n, "t", "other", 3), vec![1, 2, 3]);
    // back to the defaults
    let r = n.post(
        "/channel/config?topic=t&channel=c&max_attempts=0&dead_letter_topic=",
        b"",
    );
    assert_eq!(r.json()["dead_letter_topic"], "t.c.dead");
    assert!(!n.read_metadata().unwrap().contains("max_attempts"));
}

fn post_ok(n: &Nsqd, path: &str) {
    let r = n.post(path, b"");
    assert_eq!(r.status, 200, "{path}: {}", r.text());
}

/// CRC-32 (IEEE), as the dead-letter topic's shortened name carries it.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[test]
fn a_default_dead_letter_topic_past_64_characters_is_cut_with_a_hash_of_the_full_name() {
    let n = Nsqd::start(&[]);
    let topic = "orders-from-the-european-warehouses-2026";
    let (a, b) = (
        "billing-and-invoicing-service-a",
        "billing-and-invoicing-service-b",
    );
    create_channel(&n, topic, a);
    create_channel(&n, topic, b);
    let full = format!("{topic}.{a}.dead");
    assert!(full.len() > 64);
    let name = config(&n, &format!("topic={topic}&channel={a}"))["dead_letter_topic"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        name,
        format!("{}.{:08x}.dead", &full[..50], crc32(full.as_bytes())),
        "the first 50 characters, the CRC-32 of the whole name, .dead: 64 in all"
    );
    assert_eq!(name.len(), 64);
    let other = config(&n, &format!("topic={topic}&channel={b}"))["dead_letter_topic"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(name, other, "channels whose names differ late still differ");
    // `#ephemeral` is dropped from both parts
    post_ok(&n, "/topic/create?topic=t");
    post_ok(&n, "/channel/create?topic=t&channel=c%23ephemeral");
    assert_eq!(
        config(&n, "topic=t&channel=c%23ephemeral")["dead_letter_topic"],
        "t.c.dead"
    );
}

#[test]
fn a_dead_letter_the_dead_letter_topic_refuses_waits_in_the_channel_for_its_next_delivery() {
    let n = Nsqd::start(&[]);
    create_channel(&n, "t", "c");
    post_ok(&n, "/channel/config?topic=t&channel=c&max_attempts=1");
    // the dead-letter topic is full: a reject limit of 1, one message in it
    post_ok(&n, "/topic/create?topic=t.c.dead");
    post_ok(&n, "/topic/config?topic=t.c.dead&max_depth=1");
    n.http_pub("t.c.dead", b"filler");
    n.http_pub("t", b"poison");
    {
        // attempt 1, requeued; attempt 2 would be next: dead-lettered,
        // refused, kept
        let mut c = n.connect();
        c.sub("t", "c");
        c.rdy(1);
        let m = recv_msgs(&mut c, 1, secs(10), false).remove(0);
        c.req(&m.id, 0);
        c.expect_nothing(Duration::from_millis(1500));
    }
    // No consumer: it stays in the channel, however long, and is not tried.
    wait_for(
        secs(10),
        "the refused dead letter back in the channel",
        || {
            let ch = n.channel_stats("t", "c")?;
            (int(&ch, "depth") == 1 && int(&ch, "client_count") == 0).then_some(())
        },
    );
    post_ok(&n, "/topic/empty?topic=t.c.dead");
    sleep_ms(2500);
    let ch = n.channel_stats("t", "c").unwrap();
    assert_eq!(
        (int(&ch, "depth"), ch.get("dead_letter_count")),
        (1, None),
        "not tried while no consumer is subscribed (the count shows once one is sent)"
    );
    assert_eq!(int(&n.topic_stats("t.c.dead").unwrap(), "depth"), 0);
    // A consumer with RDY: at its next delivery it goes to the dead-letter topic.
    let mut c = n.connect();
    c.sub("t", "c");
    c.rdy(1);
    wait_for(secs(10), "dead-lettered once a consumer is ready", || {
        let t = n.topic_stats("t.c.dead")?;
        (int(&t, "depth") == 1).then_some(())
    });
    c.expect_nothing(Duration::from_millis(500));
    let ch = n.channel_stats("t", "c").unwrap();
    assert_eq!((int(&ch, "depth"), int(&ch, "dead_letter_count")), (0, 1));
}

//! Producer against the real nsqd: PUB / MPUB / DPUB round trips through a
//! consumer, nsqd's error text, reconnect after a fatal error, concurrent
//! publishers on one connection, heartbeats.

#![forbid(unsafe_code)]

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::*;
use nsq_client::{handler_fn, Config, Consumer, Message, Producer, PublishError};
use tokio::sync::mpsc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_mpub_dpub_round_trip() {
    let nsqd = start_nsqd(&[]);
    let p = Producer::new(nsqd.tcp.clone(), Config::default()).unwrap();
    p.publish("rt", b"one").await.unwrap();
    p.multi_publish("rt", &[&b"two"[..], b"three", b"four"])
        .await
        .unwrap();
    let dpub_sent = Instant::now();
    p.deferred_publish("rt", Duration::from_millis(1500), b"later")
        .await
        .unwrap();

    let (tx, mut rx) = mpsc::unbounded_channel();
    let c = Consumer::new(
        "rt",
        "ch",
        Config {
            max_in_flight: 10,
            ..Config::default()
        },
    )
    .unwrap();
    c.add_handler(handler_fn(move |m: Message| {
        let tx = tx.clone();
        async move {
            let _ = tx.send((
                String::from_utf8_lossy(m.body()).into_owned(),
                m.attempts(),
                Instant::now(),
            ));
            Ok(())
        }
    }))
    .unwrap();
    c.connect_to_nsqd(&nsqd.tcp).await.unwrap();

    let mut got = BTreeSet::new();
    while got.len() < 5 {
        let (body, attempts, at) = tokio::time::timeout(Duration::from_secs(20), rx.recv())
            .await
            .expect("5 messages")
            .unwrap();
        assert_eq!(attempts, 1, "{body}");
        if body == "later" {
            assert!(
                at.duration_since(dpub_sent) >= Duration::from_millis(1500),
                "DPUB delivered early"
            );
        }
        assert!(got.insert(body));
    }
    let want: BTreeSet<String> = ["one", "two", "three", "four", "later"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(got, want);

    wait_until(Duration::from_secs(5), "5 FINs", || {
        c.stats().messages_finished == 5
    })
    .await;
    c.stop().await;
    let st = c.stats();
    assert_eq!(
        (
            st.messages_received,
            st.messages_finished,
            st.messages_requeued,
            st.connections
        ),
        (5, 5, 0, 0)
    );
    let stats = stats_without_clients(&nsqd.http, "rt", "ch").await;
    let ch = channel_of(&stats, "rt", "ch").unwrap();
    assert_eq!(ch["message_count"], 5);
    assert_eq!(ch["in_flight_count"], 0);
    assert_eq!(ch["requeue_count"], 0);
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_frames_carry_nsqd_text_and_next_publish_reconnects() {
    let nsqd = start_nsqd(&[]);
    let p = Producer::new(nsqd.tcp.clone(), Config::default()).unwrap();
    let e = p.publish("bad!topic", b"x").await.unwrap_err();
    match &e {
        PublishError::Protocol(text) => assert_eq!(
            text,
            r#"E_BAD_TOPIC PUB topic name "bad!topic" is not valid"#
        ),
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(e.code(), Some("E_BAD_TOPIC"));
    // The error was fatal (nsqd closed the socket); the next publish dials again.
    p.publish("good", b"x").await.unwrap();
    let e = p.publish("good", b"").await.unwrap_err();
    assert_eq!(e.code(), Some("E_BAD_MESSAGE"), "{e}");
    let e = p
        .deferred_publish("good", Duration::from_secs(3 * 3600), b"x")
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("E_INVALID"), "{e}");
    p.multi_publish("good", &[b"a", b"b"]).await.unwrap();

    let stats = nsqd_stats(&nsqd.http, "good", "").await;
    let topic = stats["topics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["topic_name"] == "good")
        .unwrap();
    assert_eq!(topic["message_count"], 3);

    p.stop().await;
    assert!(matches!(
        p.publish("good", b"x").await,
        Err(PublishError::Stopped)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_publishers_are_answered_in_order() {
    let nsqd = start_nsqd(&[]);
    let p = Producer::new(nsqd.tcp.clone(), Config::default()).unwrap();
    // 8 tasks x 25 publishes, all pipelined on one connection.
    let mut tasks = Vec::new();
    for t in 0..8 {
        let p = p.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..25 {
                p.publish("conc", format!("{t}-{i}")).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let stats = nsqd_stats(&nsqd.http, "conc", "").await;
    let topic = stats["topics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["topic_name"] == "conc")
        .unwrap();
    assert_eq!(topic["message_count"], 200);
    let producers = stats["producers"].as_array().unwrap();
    assert_eq!(producers.len(), 1, "one connection: {producers:?}");
    assert!(producers[0]["user_agent"]
        .as_str()
        .unwrap()
        .starts_with("nsq-rs-client/"));

    // Three requests issued back to back: the answers go to the right
    // callers (OK, then the error). The third was either written on the
    // same connection, which nsqd never read after its fatal error
    // (Disconnected), or, when the writer had flushed the first two alone
    // and the close came first, on the next connection (OK); never the
    // second one's error.
    let (a, b, c) = tokio::join!(
        p.publish("conc", b"a"),
        p.publish("conc", b""),
        p.publish("conc", b"c")
    );
    assert!(a.is_ok(), "{a:?}");
    assert_eq!(b.unwrap_err().code(), Some("E_BAD_MESSAGE"));
    assert!(
        matches!(c, Ok(()) | Err(PublishError::Disconnected(_))),
        "{c:?}"
    );
    p.publish("conc", b"d").await.unwrap();
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_keep_idle_connections_alive() {
    let nsqd = start_nsqd(&[]);
    let cfg = Config {
        heartbeat_interval: Duration::from_secs(1),
        ..Config::default()
    };
    let p = Producer::new(nsqd.tcp.clone(), cfg.clone()).unwrap();
    p.publish("hb", b"x").await.unwrap();
    let c = Consumer::new("hb", "ch", cfg).unwrap();
    c.add_handler(handler_fn(|_m: Message| async { Ok(()) }))
        .unwrap();
    c.connect_to_nsqd(&nsqd.tcp).await.unwrap();
    wait_until(Duration::from_secs(10), "message", || {
        c.stats().messages_finished == 1
    })
    .await;

    let before = nsqd_stats(&nsqd.http, "hb", "ch").await;
    // nsqd drops a client that ignores two heartbeats (2 s here).
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let after = nsqd_stats(&nsqd.http, "hb", "ch").await;
    let prod = |s: &serde_json::Value| s["producers"][0]["remote_address"].clone();
    assert_eq!(prod(&before), prod(&after), "producer kept its connection");
    let cons = |s: &serde_json::Value| {
        channel_of(s, "hb", "ch").unwrap()["clients"][0]["remote_address"].clone()
    };
    assert!(cons(&after).is_string());
    assert_eq!(cons(&before), cons(&after), "consumer kept its connection");
    assert_eq!(c.stats().connections, 1);
    c.stop().await;
    p.stop().await;
}

//! Consumer against real nsqds: max_in_flight over several nsqds, requeue on
//! handler error, max_attempts, manual responses, graceful stop, reconnect.

#![forbid(unsafe_code)]

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use nsq_client::{
    handler_fn, Config, Consumer, ConsumerError, Handler, HandlerResult, Message, MessageId,
    Producer,
};
use parking_lot::Mutex;

fn fast_backoff() -> Config {
    Config {
        backoff_multiplier: Duration::from_millis(100),
        ..Config::default()
    }
}

async fn publish_n(tcp: &str, topic: &str, tag: &str, n: usize) {
    let p = Producer::new(tcp.to_string(), Config::default()).unwrap();
    let bodies: Vec<String> = (0..n).map(|i| format!("{tag}-{i}")).collect();
    p.multi_publish(topic, &bodies).await.unwrap();
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_in_flight_two_over_three_nsqds() {
    let nsqds: Vec<Daemon> = (0..3).map(|_| start_nsqd(&[])).collect();
    for (i, n) in nsqds.iter().enumerate() {
        publish_n(&n.tcp, "spread", &format!("n{i}"), 15).await;
    }
    let cfg = Config {
        max_in_flight: 2,
        low_rdy_idle_timeout: Duration::from_secs(1),
        rdy_redistribute_interval: Duration::from_millis(250),
        ..Config::default()
    };
    let c = Consumer::new("spread", "ch", cfg).unwrap();
    let active = Arc::new(AtomicI64::new(0));
    let high = Arc::new(AtomicI64::new(0));
    let per_nsqd = Arc::new(Mutex::new(BTreeMap::<String, u32>::new()));
    // When each handler started with more than 2 held.
    let overs = Arc::new(Mutex::new(Vec::<Instant>::new()));
    {
        let (active, high, per_nsqd, overs) = (
            active.clone(),
            high.clone(),
            per_nsqd.clone(),
            overs.clone(),
        );
        // More handler tasks than max_in_flight: only RDY can limit concurrency.
        c.add_concurrent_handlers(
            handler_fn(move |m: Message| {
                let (active, high, per_nsqd, overs) = (
                    active.clone(),
                    high.clone(),
                    per_nsqd.clone(),
                    overs.clone(),
                );
                async move {
                    let now = active.fetch_add(1, Ordering::SeqCst) + 1;
                    high.fetch_max(now, Ordering::SeqCst);
                    if now > 2 {
                        overs.lock().push(Instant::now());
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    *per_nsqd
                        .lock()
                        .entry(m.nsqd_address().to_string())
                        .or_default() += 1;
                    active.fetch_sub(1, Ordering::SeqCst);
                    Ok(())
                }
            }),
            6,
        )
        .unwrap();
    }

    // Sample every nsqd's view while the consumer runs.
    let done = Arc::new(AtomicBool::new(false));
    let https: Vec<String> = nsqds.iter().map(|n| n.http.clone()).collect();
    let sampler = {
        let done = done.clone();
        tokio::spawn(async move {
            let (mut samples, mut max_in_flight, mut max_ready, mut persistent) =
                (0, 0, 0, Vec::new());
            let mut over_samples = 0;
            let mut prev_over = false;
            while !done.load(Ordering::SeqCst) {
                let (mut in_flight, mut ready) = (0, 0);
                for h in &https {
                    let s = nsqd_stats(h, "spread", "ch").await;
                    in_flight += client_sum(&s, "spread", "ch", "in_flight_count");
                    ready += client_sum(&s, "spread", "ch", "ready_count");
                }
                samples += 1;
                max_in_flight = max_in_flight.max(in_flight);
                max_ready = max_ready.max(ready);
                // The three nsqds are read one after another, so a sum can
                // straddle a RDY move; a real excess shows in consecutive samples.
                let over = in_flight > 2 || ready > 2;
                over_samples += over as usize;
                if over && prev_over {
                    persistent.push((in_flight, ready, Instant::now()));
                }
                prev_over = over;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            (samples, max_in_flight, max_ready, persistent, over_samples)
        })
    };

    for n in &nsqds {
        c.connect_to_nsqd(&n.tcp).await.unwrap();
    }
    let start = Instant::now();
    // Joining connections lower the RDY of those already there (2, then
    // 1 each); a message nsqd wrote under the old RDY before it read the
    // new one is still on its way, unseen by the client, which hands the
    // slot to the newcomer: one message over the limit, for a moment, as
    // with go-nsq (the protocol has no acknowledgement of RDY). Only then.
    let joined = start + Duration::from_millis(200);
    wait_until(Duration::from_secs(60), "45 messages", || {
        c.stats().messages_finished == 45
    })
    .await;
    let took = start.elapsed();
    done.store(true, Ordering::SeqCst);
    let (samples, max_if, max_rdy, persistent, over_samples) = sampler.await.unwrap();

    let st = c.stats();
    eprintln!("took {took:?}; {samples} samples ({over_samples} over 2), server max in_flight {max_if} max ready {max_rdy}; client {st:?}");
    assert!(samples > 10);
    // The same allowance as the handlers' below: while the connections
    // join, a message written under the old RDY may still be in flight
    // (CI once saw two samples in a row of 3 then, on a loaded machine).
    let persistent: Vec<_> = persistent
        .into_iter()
        .filter(|(.., at)| *at > joined)
        .map(|(f, r, at)| (f, r, at.duration_since(start)))
        .collect();
    assert!(
        persistent.is_empty(),
        "nsqd saw more than 2 in flight / RDY after the connections joined: {persistent:?}"
    );
    // A lone straddling sample can inflate either sum (a FIN still on its way
    // to one nsqd while the next RDY reached another); a client really
    // holding more than 2 shows in most samples. (At most a tenth was
    // judged before: a loaded CI machine took only 19 samples, 2 of them
    // lone straddles, none consecutive.)
    assert!(
        over_samples * 2 <= samples,
        "{over_samples} of {samples} samples over 2 in flight / RDY"
    );
    let late: Vec<_> = overs
        .lock()
        .iter()
        .filter(|t| **t > joined)
        .map(|t| t.duration_since(start))
        .collect();
    assert!(
        late.is_empty(),
        "handlers held more than 2 after the connections joined, at {late:?}"
    );
    assert!(
        high.load(Ordering::SeqCst) <= 3,
        "handlers held {} at once",
        high.load(Ordering::SeqCst)
    );
    assert!(st.max_in_flight_seen <= 3, "{st:?}");
    assert!(st.total_rdy <= 2);
    let per = per_nsqd.lock().clone();
    assert_eq!(per.len(), 3, "received from all three: {per:?}");
    assert!(per.values().all(|n| *n == 15), "{per:?}");
    assert_eq!(st.connections, 3);
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_error_requeues_with_attempts_plus_one() {
    let nsqd = start_nsqd(&[]);
    publish_n(&nsqd.tcp, "req", "m", 1).await;
    let cfg = Config {
        default_requeue_delay: Duration::from_millis(500),
        ..fast_backoff()
    };
    let c = Consumer::new("req", "ch", cfg).unwrap();
    let seen = Arc::new(Mutex::new(Vec::<(MessageId, u16, Instant)>::new()));
    {
        let seen = seen.clone();
        c.add_handler(handler_fn(move |m: Message| {
            let seen = seen.clone();
            async move {
                seen.lock().push((m.id(), m.attempts(), Instant::now()));
                if m.attempts() == 1 {
                    Err("first attempt fails".into())
                } else {
                    Ok(())
                }
            }
        }))
        .unwrap();
    }
    c.connect_to_nsqd(&nsqd.tcp).await.unwrap();
    wait_until(Duration::from_secs(20), "redelivery", || {
        c.stats().messages_finished == 1
    })
    .await;
    let seen = seen.lock().clone();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].0, seen[1].0, "same message");
    assert_eq!((seen[0].1, seen[1].1), (1, 2));
    // REQ delay = default_requeue_delay × attempts = 500 ms.
    assert!(seen[1].2.duration_since(seen[0].2) >= Duration::from_millis(500));
    let st = c.stats();
    assert_eq!(
        (
            st.messages_received,
            st.messages_requeued,
            st.messages_finished
        ),
        (2, 1, 1)
    );
    assert_eq!(
        st.backoff_level, 0,
        "success after the failure ends the backoff"
    );
    // the client counts a FIN once written; nsqd may read it a moment later
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let counts = loop {
        let s = nsqd_stats(&nsqd.http, "req", "ch").await;
        let ch = channel_of(&s, "req", "ch").unwrap();
        let counts = (
            ch["requeue_count"].as_i64(),
            ch["in_flight_count"].as_i64(),
            ch["depth"].as_i64(),
        );
        if counts.1 == Some(0) || tokio::time::Instant::now() > deadline {
            break counts;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(counts, (Some(1), Some(0), Some(0)));
    c.stop().await;
}

struct AlwaysFails {
    calls: Arc<AtomicU32>,
    gave_up: Arc<Mutex<Vec<u16>>>,
}

impl Handler for AlwaysFails {
    async fn handle_message(&self, _m: Message) -> HandlerResult {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Err("nope".into())
    }

    fn log_failed_message(&self, m: &Message) {
        self.gave_up.lock().push(m.attempts());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_attempts_finishes_without_calling_the_handler() {
    let nsqd = start_nsqd(&[]);
    publish_n(&nsqd.tcp, "att", "m", 1).await;
    let cfg = Config {
        max_attempts: 2,
        default_requeue_delay: Duration::ZERO,
        ..fast_backoff()
    };
    let c = Consumer::new("att", "ch", cfg).unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let gave_up = Arc::new(Mutex::new(Vec::new()));
    c.add_handler(AlwaysFails {
        calls: calls.clone(),
        gave_up: gave_up.clone(),
    })
    .unwrap();
    c.connect_to_nsqd(&nsqd.tcp).await.unwrap();
    wait_until(Duration::from_secs(20), "give up", || {
        c.stats().messages_finished == 1
    })
    .await;
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(*gave_up.lock(), vec![3]);
    let st = c.stats();
    assert_eq!(
        (
            st.messages_received,
            st.messages_requeued,
            st.messages_finished
        ),
        (3, 2, 1)
    );
    // the client counts a FIN once it is sent; nsqd may not have read it yet
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let s = nsqd_stats(&nsqd.http, "att", "ch").await;
        let ch = channel_of(&s, "att", "ch").unwrap();
        let counts = (
            ch["depth"].as_i64(),
            ch["in_flight_count"].as_i64(),
            ch["deferred_count"].as_i64(),
        );
        if counts == (Some(0), Some(0), Some(0)) || std::time::Instant::now() > deadline {
            assert_eq!(counts, (Some(0), Some(0), Some(0)));
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_touch_finish_and_requeue() {
    let nsqd = start_nsqd(&[]);
    publish_n(&nsqd.tcp, "man", "m", 2).await;
    // A 1 s server-side timeout: the TOUCHes below must keep the first message alive.
    let cfg = Config {
        msg_timeout: Duration::from_secs(1),
        max_in_flight: 2,
        ..Config::default()
    };
    let c = Consumer::new("man", "ch", cfg).unwrap();
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    {
        let log = log.clone();
        c.add_handler(handler_fn(move |m: Message| {
            let log = log.clone();
            async move {
                let body = String::from_utf8_lossy(m.body()).into_owned();
                log.lock().push(format!("{body}@{}", m.attempts()));
                if body == "m-0" {
                    // Keep it past the handler: touch for 1.5 s, then FIN.
                    m.disable_auto_response();
                    tokio::spawn(async move {
                        for _ in 0..6 {
                            tokio::time::sleep(Duration::from_millis(250)).await;
                            m.touch();
                        }
                        m.finish();
                        m.requeue(None); // ignored: already answered
                    });
                } else if m.attempts() == 1 {
                    // Answer early; the automatic FIN on return is then ignored.
                    m.requeue_without_backoff(Some(Duration::ZERO));
                }
                Ok(())
            }
        }))
        .unwrap();
    }
    c.connect_to_nsqd(&nsqd.tcp).await.unwrap();
    wait_until(Duration::from_secs(20), "both finished", || {
        c.stats().messages_finished == 2
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut got = log.lock().clone();
    got.sort();
    assert_eq!(got, vec!["m-0@1", "m-1@1", "m-1@2"]);
    let st = c.stats();
    assert_eq!(
        (st.messages_requeued, st.messages_finished, st.backoff_level),
        (1, 2, 0)
    );
    let s = nsqd_stats(&nsqd.http, "man", "ch").await;
    let ch = channel_of(&s, "man", "ch").unwrap();
    assert_eq!(ch["timeout_count"], 0, "TOUCH kept m-0 in flight");
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_waits_for_in_flight_messages() {
    let nsqd = start_nsqd(&[]);
    publish_n(&nsqd.tcp, "stop", "m", 5).await;
    let c = Consumer::new(
        "stop",
        "ch",
        Config {
            max_in_flight: 5,
            ..Config::default()
        },
    )
    .unwrap();
    c.add_concurrent_handlers(
        handler_fn(|_m: Message| async {
            tokio::time::sleep(Duration::from_millis(700)).await;
            Ok(())
        }),
        5,
    )
    .unwrap();
    c.connect_to_nsqd(&nsqd.tcp).await.unwrap();
    wait_until(Duration::from_secs(10), "5 in flight", || {
        c.stats().in_flight == 5
    })
    .await;
    let t = Instant::now();
    c.stop().await;
    assert!(t.elapsed() < Duration::from_secs(10));
    let st = c.stats();
    assert_eq!(
        (st.messages_finished, st.connections, st.in_flight),
        (5, 0, 0),
        "{st:?}"
    );
    let s = stats_without_clients(&nsqd.http, "stop", "ch").await;
    let ch = channel_of(&s, "stop", "ch").unwrap();
    assert_eq!(
        (
            ch["in_flight_count"].as_i64(),
            ch["requeue_count"].as_i64(),
            ch["timeout_count"].as_i64()
        ),
        (Some(0), Some(0), Some(0))
    );
    assert!(matches!(
        c.connect_to_nsqd(&nsqd.tcp).await,
        Err(ConsumerError::Stopped)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn change_max_in_flight_pauses_and_resumes() {
    let nsqd = start_nsqd(&[]);
    let c = Consumer::new(
        "pause",
        "ch",
        Config {
            max_in_flight: 4,
            ..Config::default()
        },
    )
    .unwrap();
    c.add_handler(handler_fn(|_m: Message| async { Ok(()) }))
        .unwrap();
    c.connect_to_nsqd(&nsqd.tcp).await.unwrap();
    wait_until(Duration::from_secs(5), "RDY 4", || c.stats().total_rdy == 4).await;
    c.change_max_in_flight(0);
    wait_until(Duration::from_secs(5), "RDY 0", || c.stats().total_rdy == 0).await;
    // Give nsqd time to apply RDY 0, then publish: nothing must arrive.
    tokio::time::sleep(Duration::from_millis(200)).await;
    publish_n(&nsqd.tcp, "pause", "m", 3).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(c.stats().messages_received, 0);
    let s = nsqd_stats(&nsqd.http, "pause", "ch").await;
    assert_eq!(client_sum(&s, "pause", "ch", "ready_count"), 0);
    c.change_max_in_flight(4);
    wait_until(Duration::from_secs(5), "3 messages", || {
        c.stats().messages_finished == 3
    })
    .await;
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnects_to_a_restarted_nsqd() {
    let data = tempfile::tempdir().unwrap();
    let (tcp_port, http_port) = (free_port(), free_port());
    let tcp = format!("127.0.0.1:{tcp_port}");
    let mut nsqd = nsq_tests::Nsqd::start_on(data.path(), tcp_port, http_port, &[]);

    let cfg = Config {
        lookupd_poll_interval: Duration::from_millis(300),
        ..Config::default()
    };
    let c = Consumer::new("re", "ch", cfg).unwrap();
    let got = Arc::new(AtomicU32::new(0));
    {
        let got = got.clone();
        c.add_handler(handler_fn(move |_m: Message| {
            let got = got.clone();
            async move {
                got.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        }))
        .unwrap();
    }
    c.connect_to_nsqd(&tcp).await.unwrap();
    publish_n(&tcp, "re", "a", 1).await;
    wait_until(Duration::from_secs(10), "first message", || {
        got.load(Ordering::SeqCst) == 1
    })
    .await;

    // Kill it: the consumer notices and retries every 300 ms.
    nsqd.kill9();
    wait_until(Duration::from_secs(10), "connection lost", || {
        c.stats().connections == 0
    })
    .await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    nsqd = nsq_tests::Nsqd::start_on(data.path(), tcp_port, http_port, &[]);
    wait_until(Duration::from_secs(20), "reconnected", || {
        c.stats().connections == 1
    })
    .await;
    publish_n(&tcp, "re", "b", 1).await;
    wait_until(Duration::from_secs(10), "second message", || {
        got.load(Ordering::SeqCst) == 2
    })
    .await;
    c.stop().await;
    drop(nsqd);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_argument_errors() {
    assert!(matches!(
        Consumer::new("bad topic", "ch", Config::default()),
        Err(ConsumerError::InvalidTopic(_))
    ));
    assert!(matches!(
        Consumer::new("t", "", Config::default()),
        Err(ConsumerError::InvalidChannel(_))
    ));
    assert!(matches!(
        Consumer::new(
            "t",
            "c",
            Config {
                sample_rate: 100,
                ..Config::default()
            }
        ),
        Err(ConsumerError::Config(_))
    ));
    let c = Consumer::new("t", "c", Config::default()).unwrap();
    assert!(matches!(
        c.connect_to_nsqd("127.0.0.1:1").await,
        Err(ConsumerError::NoHandler)
    ));
    c.add_handler(handler_fn(|_m: Message| async { Ok(()) }))
        .unwrap();
    let e = c
        .connect_to_nsqd(&format!("127.0.0.1:{}", free_port()))
        .await
        .unwrap_err();
    assert!(matches!(e, ConsumerError::Connect { .. }), "{e}");
    assert!(matches!(
        c.add_handler(handler_fn(|_m: Message| async { Ok(()) })),
        Err(ConsumerError::AlreadyConnecting)
    ));
    c.stop().await;
}

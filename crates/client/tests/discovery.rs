//! Consumer discovery through nsqlookupd: the real nsqlookupd with two
//! registered nsqds, and fake lookupds that change their answers (legacy
//! and current JSON shapes, union over lookupds, dropping vanished nsqds,
//! no drop while a lookupd fails).

#![forbid(unsafe_code)]

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use nsq_client::{handler_fn, Config, Consumer, Message, Producer};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

fn recorder(c: &Consumer) -> Arc<Mutex<Vec<(String, String)>>> {
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    c.add_handler(handler_fn(move |m: Message| {
        let g = g.clone();
        async move {
            g.lock().push((
                m.nsqd_address().to_string(),
                String::from_utf8_lossy(m.body()).into_owned(),
            ));
            Ok(())
        }
    }))
    .unwrap();
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finds_two_nsqds_through_real_nsqlookupd() {
    let lookupd = start_nsqlookupd();
    let flag = format!("--lookupd-tcp-address={}", lookupd.tcp);
    let nsqds = [start_nsqd(std::slice::from_ref(&flag)), start_nsqd(&[flag])];
    for (i, n) in nsqds.iter().enumerate() {
        let p = Producer::new(n.tcp.clone(), Config::default()).unwrap();
        p.publish("disc", format!("from-{i}")).await.unwrap();
        p.stop().await;
    }
    // Wait until both registrations are visible.
    let mut listed = 0;
    for _ in 0..200 {
        let (status, body) = http_get(&lookupd.http, "/lookup?topic=disc").await;
        if status == 200 {
            listed = nsq_protocol::lookupd::decode_v1::<nsq_protocol::lookupd::Lookup>(&body)
                .unwrap()
                .producers
                .len();
            if listed == 2 {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(listed, 2, "both nsqds registered the topic");

    let c = Consumer::new(
        "disc",
        "ch",
        Config {
            max_in_flight: 4,
            ..Config::default()
        },
    )
    .unwrap();
    let got = recorder(&c);
    c.connect_to_nsqd_lookupd(&lookupd.http).await.unwrap();
    assert_eq!(
        c.stats().connections,
        2,
        "first poll happens before connect_to_nsqd_lookupd returns"
    );
    wait_until(Duration::from_secs(10), "two messages", || {
        got.lock().len() == 2
    })
    .await;
    let from: BTreeSet<String> = got.lock().iter().map(|(a, _)| a.clone()).collect();
    let want: BTreeSet<String> = nsqds.iter().map(|n| n.tcp.clone()).collect();
    assert_eq!(from, want);
    c.stop().await;
}

/// What a fake lookupd answers: status, whether to send the X-NSQ header, body.
type Answer = Arc<Mutex<(u16, bool, String)>>;

/// A tiny HTTP server answering every request with the current `Answer`,
/// recording request heads.
async fn fake_lookupd(answer: Answer) -> (String, Arc<Mutex<Vec<String>>>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let requests = Arc::new(Mutex::new(Vec::new()));
    let reqs = requests.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            let (answer, reqs) = (answer.clone(), reqs.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 1024];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                reqs.lock().push(String::from_utf8_lossy(&buf).into_owned());
                let (status, header, body) = answer.lock().clone();
                let extra = if header {
                    "X-NSQ-Content-Type: nsq; version=1.0\r\n"
                } else {
                    ""
                };
                let resp = format!(
                    "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
            });
        }
    });
    (addr, requests)
}

fn port_of(addr: &str) -> u16 {
    addr.rsplit_once(':').unwrap().1.parse().unwrap()
}

fn legacy(ports: &[u16]) -> String {
    let ps: Vec<String> = ports
        .iter()
        .map(|p| format!(r#"{{"broadcast_address":"127.0.0.1","tcp_port":{p},"http_port":1}}"#))
        .collect();
    format!(
        r#"{{"status_code":200,"status_txt":"OK","data":{{"channels":[],"producers":[{}]}}}}"#,
        ps.join(",")
    )
}

fn current(ports: &[u16]) -> String {
    let ps: Vec<String> = ports
        .iter()
        .map(|p| format!(r#"{{"remote_address":"127.0.0.1:9","hostname":"h","broadcast_address":"127.0.0.1","tcp_port":{p},"http_port":1,"version":"1.3.0","topology_zone":"","topology_region":""}}"#))
        .collect();
    format!(r#"{{"channels":["ch"],"producers":[{}]}}"#, ps.join(","))
}

async fn clients_on(n: &Daemon) -> usize {
    let s = nsqd_stats(&n.http, "fake", "ch").await;
    channel_of(&s, "fake", "ch")
        .and_then(|c| c["clients"].as_array().map(Vec::len))
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_fake_lookupds_union_and_drops() {
    let n1 = start_nsqd(&[]);
    let n2 = start_nsqd(&[]);
    let (p1, p2) = (port_of(&n1.tcp), port_of(&n2.tcp));
    let a: Answer = Arc::new(Mutex::new((200, false, legacy(&[p1]))));
    let b: Answer = Arc::new(Mutex::new((200, true, current(&[]))));
    let (a_addr, a_reqs) = fake_lookupd(a.clone()).await;
    let (b_addr, _) = fake_lookupd(b.clone()).await;

    // max_in_flight 2 so both nsqds get RDY without waiting for redistribution.
    let cfg = Config {
        max_in_flight: 2,
        lookupd_poll_interval: Duration::from_millis(200),
        lookupd_poll_jitter: 0.0,
        ..Config::default()
    };
    let c = Consumer::new("fake", "ch", cfg).unwrap();
    let got = recorder(&c);
    c.connect_to_nsqd_lookupd(&a_addr).await.unwrap();
    c.connect_to_nsqd_lookupd(&format!("http://{b_addr}/"))
        .await
        .unwrap();
    assert_eq!(c.stats().connections, 1, "legacy answer from lookupd A");
    {
        let reqs = a_reqs.lock();
        assert!(
            reqs[0].starts_with("GET /lookup?topic=fake HTTP/1."),
            "{}",
            reqs[0]
        );
        assert!(
            reqs[0].contains("Accept: application/vnd.nsq; version=1.0"),
            "{}",
            reqs[0]
        );
    }

    // B now lists n2: the consumer holds the union.
    *b.lock() = (200, true, current(&[p2]));
    wait_until(Duration::from_secs(10), "two connections", || {
        c.stats().connections == 2
    })
    .await;
    for (i, n) in [&n1, &n2].iter().enumerate() {
        let p = Producer::new(n.tcp.clone(), Config::default()).unwrap();
        p.publish("fake", format!("m{i}")).await.unwrap();
        p.stop().await;
    }
    wait_until(Duration::from_secs(10), "a message from each", || {
        got.lock().len() == 2
    })
    .await;

    // A fails: an incomplete round never drops anything.
    *a.lock() = (500, false, r#"{"message":"INTERNAL_ERROR"}"#.to_string());
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(c.stats().connections, 2);
    assert_eq!(clients_on(&n1).await, 1);

    // A answers again, without n1: nobody lists n1 any more, so it is dropped.
    *a.lock() = (200, false, legacy(&[]));
    wait_until(Duration::from_secs(10), "n1 dropped", || {
        c.stats().connections == 1
    })
    .await;
    let mut n1_clients = 1;
    for _ in 0..100 {
        n1_clients = clients_on(&n1).await;
        if n1_clients == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(n1_clients, 0, "connection to n1 closed");
    assert_eq!(clients_on(&n2).await, 1);
    c.stop().await;
}

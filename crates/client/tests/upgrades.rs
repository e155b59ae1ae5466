//! Connection upgrades against the real nsqd: snappy, deflate, TLS (a
//! self-signed certificate made here with rcgen) and TLS + snappy, each as
//! a Producer → nsqd → Consumer round trip with large, compressible and
//! random bodies, checked against what nsqd reports for the consumer.

#![forbid(unsafe_code)]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use nsq_client::{handler_fn, Config, ConnectError, Consumer, Message, Producer, PublishError};
use tokio::sync::mpsc;

/// A self-signed server certificate for `localhost` and 127.0.0.1, written
/// as PEM files into a temporary directory.
struct Cert {
    dir: tempfile::TempDir,
}

impl Cert {
    fn new() -> Cert {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        p.subject_alt_names
            .push(rcgen::SanType::IpAddress("127.0.0.1".parse().unwrap()));
        p.distinguished_name
            .push(rcgen::DnType::CommonName, "localhost");
        let cert = p.self_signed(&key).unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("cert.pem"), cert.pem()).unwrap();
        std::fs::write(dir.path().join("key.pem"), key.serialize_pem()).unwrap();
        Cert { dir }
    }

    fn path(&self, f: &str) -> String {
        self.dir.path().join(f).display().to_string()
    }

    fn nsqd_args(&self) -> Vec<String> {
        vec![
            format!("--tls-cert={}", self.path("cert.pem")),
            format!("--tls-key={}", self.path("key.pem")),
        ]
    }
}

/// Bodies that exercise the codecs: tiny, larger than one 64 KiB snappy
/// block, compressible and not.
fn bodies() -> Vec<Vec<u8>> {
    let mut seed = 0x2545_f491_u32;
    let mut random = |n: usize| {
        (0..n)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                seed as u8
            })
            .collect::<Vec<u8>>()
    };
    let mut v = vec![b"x".to_vec(), b"hello".to_vec()];
    v.push((0..200_000u32).map(|i| (i % 13) as u8).collect());
    v.push(random(150_000));
    for i in 0..40 {
        v.push(format!("message {i} {}", "abc".repeat(i)).into_bytes());
    }
    v
}

/// PUB + MPUB through a producer, everything back through a consumer, both
/// with `cfg`; checks nsqd saw the consumer with the expected
/// (tls, snappy, deflate).
async fn round_trip(extra: &[String], cfg: Config, want: (bool, bool, bool)) {
    let nsqd = start_nsqd(extra);
    let topic = "up";
    let all = bodies();
    let p = Producer::new(nsqd.tcp.clone(), cfg.clone()).unwrap();
    p.publish(topic, &all[0]).await.unwrap();
    p.publish(topic, &all[2]).await.unwrap();
    let rest: Vec<&[u8]> = all
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 0 && *i != 2)
        .map(|(_, b)| &b[..])
        .collect();
    p.multi_publish(topic, &rest).await.unwrap();

    let (tx, mut rx) = mpsc::unbounded_channel();
    let c = Consumer::new(
        topic,
        "ch",
        Config {
            max_in_flight: 16,
            ..cfg.clone()
        },
    )
    .unwrap();
    c.add_handler(handler_fn(move |m: Message| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(m.body().to_vec());
            Ok(())
        }
    }))
    .unwrap();
    c.connect_to_nsqd(&nsqd.tcp).await.unwrap();

    let mut want_counts: BTreeMap<Vec<u8>, usize> = BTreeMap::new();
    for b in &all {
        *want_counts.entry(b.clone()).or_default() += 1;
    }
    let mut got: BTreeMap<Vec<u8>, usize> = BTreeMap::new();
    for _ in 0..all.len() {
        let b = tokio::time::timeout(Duration::from_secs(20), rx.recv())
            .await
            .expect("all messages")
            .unwrap();
        *got.entry(b).or_default() += 1;
    }
    assert!(got == want_counts, "bodies differ");

    // The consumer's connection as nsqd sees it.
    let stats = nsqd_stats(&nsqd.http, topic, "ch").await;
    let clients = channel_of(&stats, topic, "ch").unwrap()["clients"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(clients.len(), 1, "{clients:?}");
    let cl = &clients[0];
    let seen = (
        cl["tls"].as_bool().unwrap_or(false),
        cl["snappy"].as_bool().unwrap_or(false),
        cl["deflate"].as_bool().unwrap_or(false),
    );
    assert_eq!(seen, want, "nsqd's view (tls, snappy, deflate): {cl}");

    wait_until(Duration::from_secs(5), "all FINs", || {
        c.stats().messages_finished == all.len() as u64
    })
    .await;
    // A later publish on the same (upgraded) producer connection still works.
    p.publish(topic, b"after").await.unwrap();
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .unwrap()
            .unwrap(),
        b"after"
    );
    c.stop().await;
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snappy_round_trip() {
    round_trip(
        &[],
        Config {
            snappy: true,
            ..Config::default()
        },
        (false, true, false),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deflate_round_trip() {
    round_trip(
        &[],
        Config {
            deflate: true,
            deflate_level: 3,
            ..Config::default()
        },
        (false, false, true),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_round_trip_trusting_the_cert_file() {
    let cert = Cert::new();
    let cfg = Config {
        tls_v1: true,
        tls_root_ca_file: Some(cert.path("cert.pem")),
        ..Config::default()
    };
    round_trip(&cert.nsqd_args(), cfg, (true, false, false)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_snappy_round_trip() {
    let cert = Cert::new();
    let cfg = Config {
        tls_v1: true,
        tls_root_ca_file: Some(cert.path("cert.pem")),
        tls_server_name: Some("localhost".into()),
        snappy: true,
        ..Config::default()
    };
    round_trip(&cert.nsqd_args(), cfg, (true, true, false)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_insecure_with_deflate_round_trip() {
    let cert = Cert::new();
    let mut cfg = Config::default();
    // Through the go-nsq option names, as the apps pass them.
    for opt in [
        "tls_v1",
        "tls_insecure_skip_verify,true",
        "deflate,true",
        "deflate_level,9",
    ] {
        cfg.set_opt(opt).unwrap();
    }
    round_trip(&cert.nsqd_args(), cfg, (true, false, true)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_rejects_an_untrusted_certificate() {
    let cert = Cert::new();
    let nsqd = start_nsqd(&cert.nsqd_args());
    // No CA file and verification on: nothing is trusted.
    let p = Producer::new(
        nsqd.tcp.clone(),
        Config {
            tls_v1: true,
            ..Config::default()
        },
    )
    .unwrap();
    match p.publish("t", b"x").await {
        Err(PublishError::Connect(ConnectError::Tls(e))) => {
            assert!(e.to_lowercase().contains("certificate"), "{e}")
        }
        other => panic!("expected a TLS error, got {other:?}"),
    }
    // The right name is checked too.
    let cfg = Config {
        tls_v1: true,
        tls_root_ca_file: Some(cert.path("cert.pem")),
        tls_server_name: Some("not-localhost".into()),
        ..Config::default()
    };
    let p = Producer::new(nsqd.tcp.clone(), cfg).unwrap();
    assert!(matches!(
        p.publish("t", b"x").await,
        Err(PublishError::Connect(ConnectError::Tls(_)))
    ));
    p.stop().await;
}

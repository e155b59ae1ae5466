//! Three members on 127.0.0.1 in one process, over real sockets: a leader
//! is elected, proposed entries are committed and applied on all three,
//! the leader is stopped and another elected with nothing committed lost,
//! and a member restarted from its directory catches up (every member
//! reads the committed batches back from its log). Also: TLS between
//! members, and connections from addresses that are not peers refused.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use common::*;
use nsq_replication::machine::Applied;
use nsq_replication::network::frame::{self, Reply, Rpc};
use nsq_replication::network::hello::{ClusterConfig, Hello};
use nsq_replication::network::ClusterTls;
use nsq_replication::{GroupId, NodeId};
use openraft::raft::VoteRequest;
use openraft::Vote;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_commit_fail_over_and_catch_up() {
    let dir = tempfile::tempdir().unwrap();
    let peers = addresses(3);
    let mut members = Vec::new();
    for id in 1..=3 {
        members.push(start(id, &peers, dir.path(), None).await);
    }
    members[0].initialize().await.unwrap();
    let mut applied: BTreeMap<(NodeId, GroupId), mpsc::Receiver<Applied>> = BTreeMap::new();
    for m in &mut members {
        for g in &mut m.groups {
            applied.insert((m.node_id, g.id), g.applied.take().unwrap());
        }
    }

    // Both groups elect; entries proposed to each leader reach all three.
    let l0 = leader(&members[0], 0, None).await;
    let l1 = leader(&members[0], 1, None).await;
    let at = |id: NodeId| members.iter().position(|m| m.node_id == id).unwrap();
    propose(&members[at(l0)], 0, 0..20).await;
    propose(&members[at(l1)], 1, 0..5).await;
    for id in 1..=3 {
        expect_applied(applied.get_mut(&(id, 0)).unwrap(), 0, 0..20).await;
        expect_applied(applied.get_mut(&(id, 1)).unwrap(), 1, 0..5).await;
    }

    // The leader of group 0 stops; the other two elect another.
    let old = members.remove(at(l0));
    old.shutdown().await;
    applied.retain(|(id, _), _| *id != l0);
    let new = leader(&members[0], 0, Some(l0)).await;
    assert_ne!(new, l0);
    let at = |id: NodeId| members.iter().position(|m| m.node_id == id).unwrap();
    propose(&members[at(new)], 0, 20..30).await;
    for m in &members {
        expect_applied(applied.get_mut(&(m.node_id, 0)).unwrap(), 0, 20..30).await;
        // Nothing committed before the failover was lost: the 20 batches
        // before it and the 10 after are all applied, and the applied
        // index counts them (plus the membership and leaders' blank
        // entries).
        let metrics = m.group(0).unwrap().raft.metrics().borrow().clone();
        assert!(metrics.last_applied.is_some_and(|l| l.index >= 30));
        // The storage saved a committed index at least as far as applied
        // (an entry is applied only once committed), leader or follower.
        let committed = *m.group(0).unwrap().committed.borrow();
        assert!(
            committed >= metrics.last_applied.map(|l| l.index),
            "committed {committed:?}, applied {:?}",
            metrics.last_applied
        );
        // Read back from the log, leader or follower: every committed
        // batch in order, without Raft's blank and membership entries.
        let want: Vec<Bytes> = (0..30).map(|i| payload(0, i)).collect();
        assert_eq!(read_back(m, 0, 64).await, want, "node {}", m.node_id);
    }

    // The old leader comes back from its directory and catches up: what it
    // had is applied again at start, not handed over (the subscriber reads
    // it from the log: `replayed`); what it missed, and what comes next,
    // is handed over.
    let mut back = start(l0, &peers, dir.path(), None).await;
    let replayed = back.groups[0].replayed.expect("a committed index at start");
    let mut rx = back.groups[0].applied.take().unwrap();
    let chunk = back
        .group(0)
        .unwrap()
        .read_entries(0, replayed + 1, 1 << 20)
        .await
        .unwrap();
    let m = chunk.entries.len() as u64;
    let want: Vec<Bytes> = (0..m).map(|i| payload(0, i)).collect();
    let had: Vec<Bytes> = chunk.entries.into_iter().map(|(_, p)| p).collect();
    assert_eq!(had, want, "what it had, read from its log");
    assert!(m >= 20, "it had the 20 batches committed before it stopped");
    expect_applied(&mut rx, 0, m..30).await;
    propose(&members[at(new)], 0, 30..31).await;
    expect_applied(&mut rx, 0, 30..31).await;
    let m = back.group(0).unwrap().raft.metrics().borrow().clone();
    assert_eq!(m.current_leader, Some(new));

    back.shutdown().await;
    for m in members {
        m.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_speak_tls_verified_both_ways() {
    let pki = nsq_tests::pki::Pki::new();
    let (cert, key, ca) = (
        pki.path("cert.pem"),
        pki.path("key.pem"),
        pki.path("ca.pem"),
    );
    let tls = ClusterTls::from_flags(nsq_http::tls::ServerTls {
        cert_file: &cert,
        key_file: &key,
        root_ca_file: &ca,
        client_auth_policy: "",
        min_version: 0x0303,
    })
    .unwrap()
    .expect("certificates given");
    let dir = tempfile::tempdir().unwrap();
    let peers = addresses(3);
    let mut members = Vec::new();
    for id in 1..=3 {
        members.push(start(id, &peers, dir.path(), Some(tls.clone())).await);
    }
    members[0].initialize().await.unwrap();
    let l = leader(&members[0], 0, None).await;
    let at = members.iter().position(|m| m.node_id == l).unwrap();
    propose(&members[at], 0, 0..3).await;
    for m in &mut members {
        let mut rx = m.groups[0].applied.take().unwrap();
        expect_applied(&mut rx, 0, 0..3).await;
    }

    // Plain TCP to a TLS member gets no answer: the connection is closed
    // when the handshake fails.
    let mut s = tokio::net::TcpStream::connect(&peers[&1]).await.unwrap();
    s.write_all(&vote_frame(0)).await.unwrap();
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(WAIT, s.read(&mut buf))
        .await
        .unwrap()
        .unwrap_or(0);
    assert!(frame::decode(&mut BytesMut::from(&buf[..n])).map_or(true, |f| f.is_none()));

    // TLS to a member without a client certificate: refused, no answer.
    let anonymous = nsq_http::tls::ServerTls {
        root_ca_file: &ca,
        min_version: 0x0303,
        ..Default::default()
    }
    .client_config()
    .unwrap();
    let tcp = tokio::net::TcpStream::connect(&peers[&1]).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let answered = match tokio_rustls::TlsConnector::from(anonymous)
        .connect(name, tcp)
        .await
    {
        Err(_) => false,
        Ok(mut t) => {
            let _ = t.write_all(&vote_frame(0)).await;
            let mut b = [0u8; 64];
            matches!(tokio::time::timeout(WAIT, t.read(&mut b)).await.unwrap(), Ok(n) if n > 0)
        }
    };
    assert!(!answered, "a caller without a certificate was answered");

    for m in members {
        m.shutdown().await;
    }
}

fn vote_frame(group: GroupId) -> BytesMut {
    let mut out = BytesMut::new();
    let rpc = Rpc::Vote(VoteRequest::new(Vote::new(1, 9), None));
    frame::encode(group, 77, &rpc, &mut out).unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_configured_peers_are_answered() {
    let dir = tempfile::tempdir().unwrap();
    let peers = addresses(1);
    let m = start(1, &peers, dir.path(), None).await;

    // From a configured peer's address (127.0.0.1), after its hello: an
    // answer, here that there is no group 9.
    let mut s = tokio::net::TcpStream::connect(&peers[&1]).await.unwrap();
    s.write_all(&hello_frame(2, &peers)).await.unwrap();
    s.write_all(&vote_frame(9)).await.unwrap();
    let mut buf = BytesMut::new();
    let f = next_frame(&mut s, &mut buf).await.expect("hello answered");
    assert!(matches!(
        frame::body::<Reply>(&f).unwrap(),
        Reply::Hello(Ok(_))
    ));
    let f = next_frame(&mut s, &mut buf).await.expect("vote answered");
    assert_eq!((f.group, f.id), (9, 77));
    assert!(matches!(
        frame::body::<Reply>(&f).unwrap(),
        Reply::NoGroup(9)
    ));

    // A hello with other groups, or no hello at all: told why, then closed
    // without the vote being answered.
    for first in [hello_frame(3, &peers), vote_frame(9)] {
        let mut s = tokio::net::TcpStream::connect(&peers[&1]).await.unwrap();
        s.write_all(&first).await.unwrap();
        let _ = s.write_all(&vote_frame(9)).await;
        let mut buf = BytesMut::new();
        let f = next_frame(&mut s, &mut buf).await.expect("refusal");
        match frame::body::<Reply>(&f).unwrap() {
            Reply::Hello(Err(why)) => assert!(
                why.contains("--replication-groups=3") || why.contains("not a hello"),
                "{why}"
            ),
            other => panic!("answered {other:?}"),
        }
        assert!(
            next_frame(&mut s, &mut buf).await.is_none(),
            "went on after the refusal"
        );
    }

    // From 127.0.0.2, which no peer has: closed without an answer.
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let mut s = sock.connect(peers[&1].parse().unwrap()).await.unwrap();
    let _ = s.write_all(&vote_frame(0)).await;
    let mut b = [0u8; 64];
    let n = tokio::time::timeout(WAIT, s.read(&mut b))
        .await
        .unwrap()
        .unwrap_or(0);
    assert_eq!(n, 0, "a non-peer got an answer");

    // Garbage from a peer's address drops that connection, not the member.
    let mut s = tokio::net::TcpStream::connect(&peers[&1]).await.unwrap();
    let mut junk = BytesMut::new();
    junk.put_u32(u32::MAX);
    s.write_all(&junk).await.unwrap();
    let n = tokio::time::timeout(WAIT, s.read(&mut b))
        .await
        .unwrap()
        .unwrap_or(0);
    assert_eq!(n, 0);
    let mut s = tokio::net::TcpStream::connect(&peers[&1]).await.unwrap();
    s.write_all(&hello_frame(2, &peers)).await.unwrap();
    let n = tokio::time::timeout(WAIT, s.read(&mut b))
        .await
        .unwrap()
        .unwrap();
    assert!(n > 0);

    m.shutdown().await;
}

/// Member 1's hello to member 1's listener, claiming `groups`.
fn hello_frame(groups: u32, peers: &BTreeMap<NodeId, String>) -> BytesMut {
    let mut out = BytesMut::new();
    let rpc = Rpc::Hello(Hello {
        from: 1,
        config: ClusterConfig {
            groups,
            peers: peers.clone(),
        },
        incarnation: 1,
        knew: None,
        about: String::new(),
    });
    frame::encode(0, 1, &rpc, &mut out).unwrap();
    out
}

/// The next frame on `s`, or None once it is closed.
async fn next_frame(s: &mut tokio::net::TcpStream, buf: &mut BytesMut) -> Option<frame::Frame> {
    loop {
        if let Some(f) = frame::decode(buf).unwrap() {
            return Some(f);
        }
        let n = tokio::time::timeout(WAIT, s.read_buf(buf))
            .await
            .unwrap()
            .unwrap_or(0);
        if n == 0 {
            return None;
        }
    }
}

/// A payload proposed through `Proposer` from a member that does not lead
/// the group is forwarded to the leader and committed like one proposed
/// there; the leader's check refuses one, nothing written; without a
/// majority a proposal is refused once its time is up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proposals_from_any_member_commit_through_the_leader() {
    use nsq_replication::propose::ProposeError;

    let dir = tempfile::tempdir().unwrap();
    let peers = addresses(3);
    let mut members = Vec::new();
    for id in 1..=3 {
        members.push(start(id, &peers, dir.path(), None).await);
    }
    members[0].initialize().await.unwrap();
    let mut applied = BTreeMap::new();
    for m in &mut members {
        applied.insert(m.node_id, m.groups[0].applied.take().unwrap());
    }
    let l = leader(&members[0], 0, None).await;
    for m in &members {
        // Every member sees the leader before proposing, so a follower's
        // proposal goes through the forward path, not a retry.
        leader(m, 0, None).await;
    }
    let follower = members.iter().find(|m| m.node_id != l).unwrap();
    let on_leader = members.iter().find(|m| m.node_id == l).unwrap();
    let first = follower
        .proposer()
        .propose(0, payload(0, 0), Duration::from_secs(5))
        .await
        .expect("forwarded and committed");
    let second = on_leader
        .proposer()
        .propose(0, payload(0, 1), Duration::from_secs(5))
        .await
        .expect("committed on the leader");
    assert!(second > first, "{first} then {second}");
    for id in 1..=3 {
        expect_applied(applied.get_mut(&id).unwrap(), 0, 0..2).await;
    }

    // A check the subscriber set refuses a forwarded proposal on the
    // leader, nothing written; the proposer is told why.
    let refused = payload(0, 99);
    for m in &members {
        let no = refused.clone();
        m.check_forwarded(std::sync::Arc::new(move |group, p: &[u8]| {
            if group == 0 && p == &no[..] {
                Err("not this one".to_string())
            } else {
                Ok(())
            }
        }));
    }
    let r = follower
        .proposer()
        .propose(0, refused, Duration::from_secs(5))
        .await;
    assert_eq!(
        r,
        Err(ProposeError::Refused {
            group: 0,
            reason: "not this one".into()
        })
    );
    follower
        .proposer()
        .propose(0, payload(0, 2), Duration::from_secs(5))
        .await
        .expect("forwarded and committed");
    // Batch 2 is the next applied everywhere: the refused one is nowhere.
    for id in 1..=3 {
        expect_applied(applied.get_mut(&id).unwrap(), 0, 2..3).await;
    }

    // Two of three stop: the one left cannot commit, whoever it was.
    let last = members.remove(0);
    for m in members {
        m.shutdown().await;
    }
    let started = std::time::Instant::now();
    let r = last
        .proposer()
        .propose(0, payload(0, 3), Duration::from_secs(1))
        .await;
    assert!(
        matches!(
            r,
            Err(ProposeError::NoLeader(0)) | Err(ProposeError::Timeout(0, _))
        ),
        "{r:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(matches!(
        last.proposer()
            .propose(7, payload(7, 0), Duration::from_secs(1))
            .await,
        Err(ProposeError::NoGroup(7))
    ));
    last.shutdown().await;
}

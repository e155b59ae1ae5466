//! A member's cluster listener: accepts connections from configured peers
//! only (by source address), over TLS when the member has certificates, and
//! answers each request from the Raft of the frame's group. Never: calling
//! out (`peer.rs`), or deciding anything a Raft answers (a forwarded
//! proposal is handed to the group's Raft as its own client's would be).
//!
//! Each request is answered by its own task, so a slow one (a snapshot
//! being installed) holds up no other group's heartbeats on the same
//! connection; the answers share the connection's one writer. The first
//! frame must be the caller's hello (`hello.rs`), answered before anything
//! else is read; a caller configured otherwise is told why and dropped.
//! A vote is answered only in a group this member may vote in
//! (`standing.rs`); otherwise the caller is told it abstains.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::ops::ControlFlow;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use parking_lot::RwLock;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::frame::{self, Frame, Reply, Rpc};
use super::hello::{Greeting, Speaks, Welcome};
use super::stream::{read_frames, write_frames, Io};
use crate::{answer, GroupId, Raft};

/// How long a TLS handshake may take before the connection is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The groups a member serves, by id.
pub type Groups = Arc<RwLock<HashMap<GroupId, Raft>>>;

/// Source addresses allowed to connect: the members' (kept up to date as
/// the cluster map changes: `group.rs`).
pub type Allowed = Arc<RwLock<HashSet<IpAddr>>>;

/// What the listener needs besides its socket.
pub struct Serve {
    /// Source addresses allowed to connect: the members'. A member waiting
    /// to be added takes any (it answers probes and hellos only, and
    /// takes a map only if it names it).
    pub allowed: Allowed,
    pub tls: Option<Arc<rustls::ServerConfig>>,
    pub groups: Groups,
    pub greeting: Arc<Greeting>,
    pub shutdown: CancellationToken,
    /// The subscriber's check of forwarded proposals, once it set one.
    pub checks: crate::answer::ForwardChecks,
}

/// Accepts until `shutdown`; each connection runs on its own task.
pub async fn serve(listener: TcpListener, s: Serve) {
    let s = Arc::new(s);
    loop {
        let (stream, remote) = tokio::select! {
            _ = s.shutdown.cancelled() => return,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // EMFILE and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "replication listener accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        if s.greeting.maps.get().is_some() && !s.allowed.read().contains(&remote.ip()) {
            tracing::warn!(%remote, "replication connection from an address that is not a configured peer; refused");
            drop(stream);
            continue;
        }
        let s = s.clone();
        tokio::spawn(async move {
            let shutdown = s.shutdown.clone();
            tokio::select! {
                _ = shutdown.cancelled() => {}
                _ = connection(stream, remote, s) => {}
            }
        });
    }
}

async fn connection(stream: TcpStream, remote: SocketAddr, s: Arc<Serve>) {
    let _ = stream.set_nodelay(true);
    let io: Box<dyn Io> = match &s.tls {
        None => Box::new(stream),
        Some(cfg) => {
            let acceptor = tokio_rustls::TlsAcceptor::from(cfg.clone());
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(t)) => Box::new(t),
                Ok(Err(e)) => {
                    tracing::warn!(%remote, error = %e, "replication TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::warn!(%remote, "replication TLS handshake timed out");
                    return;
                }
            }
        }
    };
    let (rd, wr) = tokio::io::split(io);
    let (tx, rx) = mpsc::unbounded_channel();
    let writer = tokio::spawn(write_frames(wr, rx, Arc::new(AtomicBool::new(false))));
    let mut greeted = false;
    let read = read_frames(rd, |f| {
        if !greeted {
            // A probe (before this member is added, or by one asked to add
            // another) is answered and the connection closed.
            if let Ok(Rpc::Probe) = frame::body::<Rpc>(&f) {
                let mut out = BytesMut::new();
                let reply = Reply::Probe(s.greeting.probed());
                if frame::encode(f.group, f.id, &reply, &mut out).is_ok() {
                    let _ = tx.send(out.freeze());
                }
                return ControlFlow::Break(());
            }
            let verdict = greet(&s.greeting, remote, &f);
            greeted = verdict.is_ok();
            let mut out = BytesMut::new();
            let reply = Reply::Hello(verdict);
            let trailer = s.greeting.trailer();
            if frame::encode_with_trailer(f.group, f.id, &reply, &trailer, &mut out).is_ok() {
                let _ = tx.send(out.freeze());
            }
            return if greeted {
                ControlFlow::Continue(())
            } else {
                ControlFlow::Break(())
            };
        }
        let s = s.clone();
        let tx = tx.clone();
        tokio::spawn(async move {
            let (group, id) = (f.group, f.id);
            let reply = answer(&s, f).await;
            let mut out = BytesMut::new();
            match reply.map(|r| frame::encode(group, id, &r, &mut out)) {
                Ok(Ok(())) => {
                    let _ = tx.send(out.freeze());
                }
                Ok(Err(e)) | Err(e) => {
                    tracing::warn!(group, error = %e, "replication request not answered");
                }
            }
        });
        ControlFlow::Continue(())
    })
    .await;
    if let Err(e) = read {
        tracing::warn!(%remote, error = %e, "bad frame from a replication peer; connection dropped");
    }
    drop(tx);
    let _ = writer.await;
}

/// The verdict on a connection's first frame, logged when it is news.
fn greet(greeting: &Greeting, remote: SocketAddr, f: &Frame) -> Result<Welcome, String> {
    let verdict = match frame::body_and_trailer::<Rpc>(f) {
        Ok((Rpc::Hello(hello), trailer)) => {
            let who = format!("node {}", hello.from);
            let theirs = Speaks::map(trailer);
            match greeting.welcome(&hello, Speaks::read(trailer), theirs.as_ref()) {
                Ok(welcome) => {
                    greeting.refusals.accepted(&who);
                    Ok(welcome)
                }
                Err(why) => Err((who, why)),
            }
        }
        Ok(_) | Err(_) => Err((
            remote.ip().to_string(),
            "its first frame was not a hello (another version of nsqd?)".to_string(),
        )),
    };
    match verdict {
        Ok(welcome) => Ok(welcome),
        Err((who, why)) => {
            if greeting.refusals.refused(&who, &why) {
                tracing::error!(%remote, "REPLICATION: refused {who}: {why}");
            }
            Err(why)
        }
    }
}

async fn answer(s: &Serve, f: Frame) -> Result<Reply, frame::FrameError> {
    let rpc: Rpc = frame::body(&f)?;
    // A pulse is for the member, not for the frame's group.
    if let Rpc::Pulse = rpc {
        return Ok(Reply::Pulse(answer::pulse(&s.groups.read())));
    }
    let Some(raft) = s.groups.read().get(&f.group).cloned() else {
        return Ok(Reply::NoGroup(f.group));
    };
    let identity = &s.greeting.identity;
    Ok(match rpc {
        Rpc::Append(r) => Reply::Append(raft.append_entries(r).await),
        Rpc::Vote(_) if !identity.may_vote(f.group) => Reply::Abstain(format!(
            "node {} does not vote in group {} yet ({})",
            identity.me,
            f.group,
            *identity.standing().borrow()
        )),
        Rpc::Vote(r) => Reply::Vote(raft.vote(r).await),
        Rpc::Snapshot(r) => Reply::Snapshot(raft.install_snapshot(r).await),
        Rpc::Forward {
            payload,
            timeout_ms,
        } => {
            let timeout = Duration::from_millis(timeout_ms);
            let check = s.checks.get();
            Reply::Forward(answer::forward(&raft, f.group, check, payload, timeout).await)
        }
        // only the first frame is a hello; a second one is not welcome
        Rpc::Hello(_) => Reply::Hello(Err("a second hello on one connection".into())),
        Rpc::Probe => Reply::Probe(s.greeting.probed()),
        Rpc::Pulse => Reply::Pulse(answer::pulse(&s.groups.read())),
    })
}

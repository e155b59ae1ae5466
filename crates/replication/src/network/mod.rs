//! openraft's RPCs between the members of a replication cluster. Never:
//! what is in the log or who leads (openraft decides), nor reading
//! certificate files (nsq-http's `ServerTls` does, as for every daemon).
//!
//! * [`frame`]: the framed protocol (length, group id, request id,
//!   postcard body).
//! * [`hello`]: the first exchange on a connection, which refuses a peer
//!   started with another cluster configuration.
//! * [`peer`]: the member's side of a call: one connection per peer,
//!   shared by every group, opened on first use and again after a failure.
//! * [`listener`]: the peer's side: accepts connections from configured
//!   peers only, and answers each request from the Raft of its group.
//! * [`stream`]: what both sides share: the batching writer and the loop
//!   that reads frames off a connection.
//!
//! With certificates (the daemons' `--tls-*` flags) every connection is TLS
//! verified both ways: the caller checks the peer's certificate against
//! the root CA, and the listener asks for the caller's and checks it the
//! same way (`--tls-client-auth-policy=require-verify`, whatever the flag
//! says for clients). Without certificates, plain TCP.

pub mod frame;
pub mod hello;
pub mod listener;
pub mod peer;
pub mod stream;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use parking_lot::Mutex;

use crate::{GroupId, Member, NodeId, TypeConfig};
use frame::{Reply, Rpc};
use peer::{CallError, Peer};

/// The TLS of a member's cluster traffic, both ways.
#[derive(Clone)]
pub struct ClusterTls {
    /// The listener's: asks for and verifies the caller's certificate.
    pub server: Arc<rustls::ServerConfig>,
    /// The caller's: verifies the peer, presents the member's certificate.
    pub client: Arc<rustls::ClientConfig>,
}

impl ClusterTls {
    /// From a daemon's TLS flags: `None` without a certificate and key.
    pub fn from_flags(
        flags: nsq_http::tls::ServerTls<'_>,
    ) -> Result<Option<ClusterTls>, nsq_http::tls::TlsError> {
        let verified = nsq_http::tls::ServerTls {
            client_auth_policy: "require-verify",
            ..flags
        };
        let Some(server) = verified.config()? else {
            return Ok(None);
        };
        Ok(Some(ClusterTls {
            server,
            client: verified.client_config_with_identity()?,
        }))
    }
}

/// The member's connections to its peers, by address, shared by every
/// group.
pub struct Peers {
    tls: Option<Arc<rustls::ClientConfig>>,
    connect_timeout: Duration,
    greeting: Arc<hello::Greeting>,
    by_addr: Mutex<HashMap<String, Arc<Peer>>>,
}

impl Peers {
    pub fn new(
        tls: Option<Arc<rustls::ClientConfig>>,
        connect_timeout: Duration,
        greeting: Arc<hello::Greeting>,
    ) -> Arc<Peers> {
        Arc::new(Peers {
            tls,
            connect_timeout,
            greeting,
            by_addr: Mutex::new(HashMap::new()),
        })
    }

    pub fn get(&self, addr: &str) -> Arc<Peer> {
        self.by_addr
            .lock()
            .entry(addr.to_string())
            .or_insert_with(|| {
                Arc::new(Peer::new(
                    addr.to_string(),
                    self.tls.clone(),
                    self.connect_timeout,
                    self.greeting.clone(),
                ))
            })
            .clone()
    }

    /// Closes every connection (a member shutting down).
    pub fn close(&self) {
        for p in self.by_addr.lock().drain().map(|(_, p)| p) {
            p.close();
        }
    }
}

/// openraft's network factory for one group.
#[derive(Clone)]
pub struct Network {
    pub group: GroupId,
    pub peers: Arc<Peers>,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = GroupClient;

    async fn new_client(&mut self, target: NodeId, node: &Member) -> GroupClient {
        GroupClient {
            group: self.group,
            target,
            peer: self.peers.get(&node.addr),
        }
    }
}

/// One group's calls to one peer.
pub struct GroupClient {
    group: GroupId,
    target: NodeId,
    peer: Arc<Peer>,
}

type RpcErr<E = openraft::error::Infallible> = RPCError<NodeId, Member, RaftError<NodeId, E>>;

/// A reply of the wrong kind: the peer speaks another version.
#[derive(Debug, thiserror::Error)]
#[error("peer answered {0} with a reply of another kind")]
struct WrongReply(&'static str);

impl GroupClient {
    async fn call<E: std::error::Error>(
        &self,
        rpc: Rpc,
        option: &RPCOption,
    ) -> Result<Reply, RPCError<NodeId, Member, RaftError<NodeId, E>>> {
        match self.peer.call(self.group, &rpc, option.hard_ttl()).await {
            Ok(Reply::NoGroup(g)) => {
                Err(RPCError::Network(NetworkError::new(&CallError::NoGroup(g))))
            }
            // a vote that will not come: as good as an unreachable voter
            Ok(Reply::Abstain(why)) => Err(RPCError::Unreachable(Unreachable::new(
                &CallError::Abstained(why),
            ))),
            Ok(r) => Ok(r),
            // openraft backs off from an unreachable peer; a refused one
            // stays refused until someone fixes its flags
            Err(e @ (CallError::Connect { .. } | CallError::Refused { .. })) => {
                Err(RPCError::Unreachable(Unreachable::new(&e)))
            }
            Err(e) => Err(RPCError::Network(NetworkError::new(&e))),
        }
    }
}

impl RaftNetwork<TypeConfig> for GroupClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RpcErr> {
        match self.call(Rpc::Append(rpc), &option).await? {
            Reply::Append(Ok(r)) => Ok(r),
            Reply::Append(Err(e)) => Err(RPCError::RemoteError(RemoteError::new(self.target, e))),
            _ => Err(RPCError::Network(NetworkError::new(&WrongReply("append")))),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RpcErr<InstallSnapshotError>> {
        match self.call(Rpc::Snapshot(rpc), &option).await? {
            Reply::Snapshot(Ok(r)) => Ok(r),
            Reply::Snapshot(Err(e)) => Err(RPCError::RemoteError(RemoteError::new(self.target, e))),
            _ => Err(RPCError::Network(NetworkError::new(&WrongReply(
                "snapshot",
            )))),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RpcErr> {
        match self.call(Rpc::Vote(rpc), &option).await? {
            Reply::Vote(Ok(r)) => Ok(r),
            Reply::Vote(Err(e)) => Err(RPCError::RemoteError(RemoteError::new(self.target, e))),
            _ => Err(RPCError::Network(NetworkError::new(&WrongReply("vote")))),
        }
    }
}

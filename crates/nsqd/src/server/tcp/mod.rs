//! The TCP V2 server: the listener, and per connection a reader task
//! ([`reader`]: decode, the [`session`]'s rules, dispatch to one file per
//! command family — [`identify`], [`auth`], [`subscribe`], [`publish`]) and
//! a writer task ([`writer`]: frames from the client's outbox, batched).
//! [`crate::server::transport`] is the byte stream under both, which
//! IDENTIFY may upgrade.

pub mod auth;
pub mod conn;
pub mod identify;
pub mod publish;
pub mod reader;
pub mod session;
pub mod subscribe;
pub mod writer;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use nsq_protocol::error::E_BAD_PROTOCOL;
use nsq_protocol::frame::{encode_frame, FrameType, MAGIC_V2};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use self::conn::{Conn, Inbound};
use self::session::Session;
use super::client::Client;
use super::clock::now_unix_ns;
use super::nsqd::NsqdInner;
use super::outbox::{Control, WriterSettings};
use super::transport;
use crate::options::TLS_NOT_REQUIRED;

/// Longest pause after consecutive accept errors (out of file descriptors
/// and the like): back off, don't spin, and don't give up.
const MAX_ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

/// Accepts clients until nsqd shuts down.
pub async fn serve(listener: TcpListener, nsqd: Arc<NsqdInner>) {
    let mut backoff = Duration::from_millis(5);
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, addr)) => {
                    backoff = Duration::from_millis(5);
                    let n = nsqd.clone();
                    nsqd.ctx.tasks.spawn(async move { handle(stream, addr, n).await });
                }
                Err(e) => {
                    tracing::error!(error = %e, "accept failed");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_ACCEPT_BACKOFF);
                }
            },
            _ = nsqd.ctx.cancel.cancelled() => break,
        }
    }
    tracing::info!("TCP: closing listener");
}

async fn handle(mut stream: TcpStream, addr: SocketAddr, nsqd: Arc<NsqdInner>) {
    let _ = stream.set_nodelay(true);
    let mut magic = [0u8; 4];
    let got = tokio::select! {
        r = stream.read_exact(&mut magic) => r.is_ok(),
        _ = nsqd.ctx.cancel.cancelled() => false,
    };
    if !got {
        return;
    }
    if &magic != MAGIC_V2 {
        let mut b = BytesMut::new();
        encode_frame(&mut b, FrameType::Error, E_BAD_PROTOCOL.as_bytes());
        let _ = stream.write_all(&b).await;
        tracing::debug!(%addr, "bad protocol magic");
        return;
    }
    let fd = std::os::fd::AsRawFd::as_raw_fd(&stream);
    let (rd, wr) = transport::split_tcp(stream);
    let (client, outbox) = Client::new(addr, now_unix_ns() / 1_000_000_000);
    let client = Arc::new(client);
    nsqd.add_client(client.clone());
    if nsqd.ctx.cancel.is_cancelled() {
        // shutdown may have told every client to go before this one was added
        client.closer.cancel();
    }
    let hb = nsqd.features.default_heartbeat_ms;
    let settings = WriterSettings {
        heartbeat_ms: Some(hb),
        output_buffer_size: nsqd.features.default_output_buffer_size as usize,
    };
    let writer = tokio::spawn(writer::write_loop(
        wr,
        fd,
        outbox,
        settings,
        client.closer.clone(),
    ));
    let opts = nsqd.opts();
    let session = Session::new(
        nsqd.auth.is_some(),
        opts.tls_required != TLS_NOT_REQUIRED,
        hb,
        opts.msg_timeout,
    );
    let mut conn = Conn {
        nsqd: nsqd.clone(),
        client: client.clone(),
        session,
        subscription: None,
        topics: HashMap::new(),
        now: Instant::now(),
        pending_fins: Vec::new(),
        replies: Default::default(),
        unresponsive: false,
    };
    let mut inbound = Inbound::new(rd);
    reader::run(&mut conn, &mut inbound).await;
    if conn.unresponsive {
        // A client that stopped reading leaves nsqd's send buffer full
        // (megabytes, autotuned); a graceful close would have the kernel
        // trickle it out through a zero window for minutes and the peer
        // see no end. Reset it, as a write past its deadline does.
        transport::abort_on_close(fd);
    }
    subscribe::leave(&mut conn);
    client.send_control(Control::Close);
    drop(conn);
    let _ = writer.await;
    nsqd.remove_client(client.id);
}

//! The TCP listener and the per-connection shell of the V1 protocol.
//!
//! Owns: accepting connections (over TLS from the first byte with
//! `--tls-required`), reading the magic, lines and IDENTIFY bodies,
//! writing framed responses, closing on fatal errors and on shutdown, and
//! removing the peer's registrations when its connection ends. Never: protocol
//! decisions — those live in [`v1`], which this shell feeds bytes and `now`.
//!
//! Shutdown: every connection task selects on the server's
//! [`CancellationToken`]; the listener stops accepting, then waits for all
//! connection tasks (`nsq_http::server::accept_loop`) before returning.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use nsq_http::stream::Stream;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, ReadHalf, WriteHalf};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info};

use super::v1::Session;
use crate::context::Context;
use nsq_protocol::lookupd::{self as wire, Command, V1Error};

/// Longest command line accepted (NSQ has no limit; nsqd's lines are
/// `REGISTER <64-byte topic> <64-byte channel>`). A longer line closes the
/// connection without a response.
const MAX_LINE: usize = 64 * 1024;

/// Accepts V1 clients until `shutdown`, then waits for every connection to
/// finish (each closes itself on `shutdown`).
pub(crate) async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    ctx: Arc<Context>,
    shutdown: CancellationToken,
) {
    let local = listener
        .local_addr()
        .map(nsq_http::server::go_addr)
        .unwrap_or_default();
    let proto = if tls.is_some() { "TCP (TLS)" } else { "TCP" };
    info!("{proto}: listening on {local}");
    nsq_http::server::accept_loop(listener, shutdown.clone(), |stream, remote| {
        let (ctx, shutdown, tls) = (ctx.clone(), shutdown.clone(), tls.clone());
        async move {
            // Go sets TCP_NODELAY on every accepted connection.
            let _ = stream.set_nodelay(true);
            let stream = match tls {
                None => Stream::Plain(stream),
                // `--tls-required`: TLS from the first byte; a failed
                // handshake never reaches the protocol.
                Some(acceptor) => {
                    match nsq_http::server::accept_tls(&acceptor, stream, remote).await {
                        Some(s) => s,
                        None => return,
                    }
                }
            };
            handle(stream, remote, ctx, shutdown).await
        }
    })
    .await;
    info!("TCP: closing {local}");
}

/// One connection: run the protocol until EOF, a fatal error or shutdown,
/// then drop the peer's registrations.
async fn handle(
    stream: Stream,
    remote: SocketAddr,
    ctx: Arc<Context>,
    shutdown: CancellationToken,
) {
    let remote = nsq_http::server::go_addr(remote);
    info!(client = %remote, "TCP: new client");
    let (rd, wr) = tokio::io::split(stream);
    let mut conn = Connection {
        rd: BufReader::new(rd),
        wr,
        ctx: ctx.clone(),
    };
    let mut session = Session::new(remote.clone());
    tokio::select! {
        res = conn.run(&mut session) => {
            if let Err(e) = res {
                debug!(client = %remote, error = %e, "connection error");
            }
        }
        _ = shutdown.cancelled() => {}
    }
    session.close(&mut ctx.db());
    info!(client = %remote, "PROTOCOL(V1): exiting ioloop");
    // Dropping `conn` closes the socket.
}

struct Connection {
    rd: BufReader<ReadHalf<Stream>>,
    wr: WriteHalf<Stream>,
    ctx: Arc<Context>,
}

enum Line {
    Complete,
    Eof,
    TooLong,
}

impl Connection {
    /// Returns `Ok` when the connection should simply close (EOF, fatal
    /// protocol error already answered), `Err` on I/O failure.
    async fn run(&mut self, session: &mut Session) -> io::Result<()> {
        let mut magic = [0u8; 4];
        if let Err(e) = self.rd.read_exact(&mut magic).await {
            error!(client = %session.remote_addr(), error = %e, "failed to read protocol version");
            return Ok(());
        }
        info!(client = %session.remote_addr(), magic = %String::from_utf8_lossy(&magic), "CLIENT: desired protocol magic");
        if &magic != wire::MAGIC_V1 {
            error!(client = %session.remote_addr(), magic = %String::from_utf8_lossy(&magic), "bad protocol magic");
            self.send(&V1Error::BadProtocol.wire()).await?;
            return Ok(());
        }

        let mut line = Vec::new();
        loop {
            match self.read_line(&mut line).await? {
                Line::Complete => {}
                Line::Eof => return Ok(()),
                Line::TooLong => {
                    error!(client = %session.remote_addr(), "command line too long, closing");
                    return Ok(());
                }
            }
            let words = wire::split_line(&line);
            match self.exec(session, &words).await {
                Ok(response) => self.send(&response).await?,
                Err(e) => {
                    error!(client = %session.remote_addr(), error = %e, "protocol error");
                    self.send(&e.wire()).await?;
                    return Ok(()); // every V1 error is fatal
                }
            }
        }
    }

    /// Runs one command; the IDENTIFY body is read here, after the
    /// "already identified" check, as NSQ does.
    async fn exec(&mut self, session: &mut Session, words: &[&[u8]]) -> Result<Bytes, V1Error> {
        let params = words.get(1..).unwrap_or_default();
        match Command::parse(words)? {
            Command::Ping => {
                let mut db = self.ctx.db();
                Ok(Bytes::from_static(session.ping(&mut db, Instant::now())))
            }
            Command::Identify => {
                session.check_identify()?;
                let size = self.rd.read_i32().await.map_err(|_| V1Error::BodySize)?;
                let len = wire::identify_body_len(size)?;
                let mut body = vec![0u8; len];
                self.rd
                    .read_exact(&mut body)
                    .await
                    .map_err(|_| V1Error::BodyRead)?;
                let mut db = self.ctx.db();
                session.identify(&body, &mut db, Instant::now())?;
                Ok(self.ctx.identify_response.clone())
            }
            Command::Register => {
                let mut db = self.ctx.db();
                session.register(params, &mut db).map(Bytes::from_static)
            }
            Command::Unregister => {
                let mut db = self.ctx.db();
                session.unregister(params, &mut db).map(Bytes::from_static)
            }
        }
    }

    /// Reads up to and including `\n` into `line` (cleared first). A partial
    /// line at EOF is discarded, as Go's `ReadString` loop does.
    async fn read_line(&mut self, line: &mut Vec<u8>) -> io::Result<Line> {
        line.clear();
        let n = (&mut self.rd)
            .take(MAX_LINE as u64)
            .read_until(b'\n', line)
            .await?;
        Ok(match line.last() {
            Some(b'\n') => Line::Complete,
            _ if n >= MAX_LINE => Line::TooLong,
            _ => Line::Eof,
        })
    }

    async fn send(&mut self, data: &[u8]) -> io::Result<()> {
        self.wr.write_all(&wire::frame(data)).await?;
        // TLS buffers what it encrypts; a response must leave now.
        self.wr.flush().await
    }
}

//! The byte stream under one V2 connection, and how it changes in mid-stream
//! when IDENTIFY negotiates TLS.
//!
//! A connection starts as a plain TCP stream split into a read half (owned by
//! the connection's reader task) and a write half (owned by its writer task).
//! For the TLS upgrade the reader takes the write half back, re-assembles the
//! socket, runs the server handshake on it — first replaying any bytes the
//! client sent after IDENTIFY that the reader had already buffered — and
//! splits the TLS stream again. Compression is not a transport change: it is
//! a codec the tasks apply on top (see [`nsq_protocol::compress`]).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

/// A TCP stream that first yields bytes already read from it.
#[derive(Debug)]
pub struct Prefixed {
    prefix: Bytes,
    inner: TcpStream,
}

impl Prefixed {
    pub fn new(prefix: Bytes, inner: TcpStream) -> Prefixed {
        Prefixed { prefix, inner }
    }

    pub fn into_inner(self) -> TcpStream {
        self.inner
    }
}

impl AsyncRead for Prefixed {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            buf.put_slice(&self.prefix[..n]);
            self.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Prefixed {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

pub type Tls = TlsStream<Prefixed>;

/// The reader task's half.
#[derive(Debug)]
pub enum Reader {
    Tcp(OwnedReadHalf),
    Tls(tokio::io::ReadHalf<Tls>),
    /// Handed over for an upgrade (reads as end of stream).
    Detached,
}

/// The writer task's half.
#[derive(Debug)]
pub enum Writer {
    Tcp(OwnedWriteHalf),
    Tls(tokio::io::WriteHalf<Tls>),
}

impl AsyncRead for Reader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Reader::Tcp(r) => Pin::new(r).poll_read(cx, buf),
            Reader::Tls(r) => Pin::new(r).poll_read(cx, buf),
            Reader::Detached => Poll::Ready(Ok(())),
        }
    }
}

impl AsyncWrite for Writer {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Writer::Tcp(w) => Pin::new(w).poll_write(cx, buf),
            Writer::Tls(w) => Pin::new(w).poll_write(cx, buf),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Writer::Tcp(w) => Pin::new(w).poll_flush(cx),
            Writer::Tls(w) => Pin::new(w).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Writer::Tcp(w) => Pin::new(w).poll_shutdown(cx),
            Writer::Tls(w) => Pin::new(w).poll_shutdown(cx),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    #[error("connection is already TLS")]
    AlreadyTls,
    #[error("connection halves do not belong together")]
    Mismatch,
}

/// Puts the plain TCP socket back together from its two halves.
pub fn reunite(r: Reader, w: Writer) -> Result<TcpStream, UpgradeError> {
    match (r, w) {
        (Reader::Tcp(r), Writer::Tcp(w)) => r.reunite(w).map_err(|_| UpgradeError::Mismatch),
        (Reader::Tls(_), _) | (_, Writer::Tls(_)) => Err(UpgradeError::AlreadyTls),
        _ => Err(UpgradeError::Mismatch),
    }
}

/// Splits a plain socket for the two tasks.
pub fn split_tcp(s: TcpStream) -> (Reader, Writer) {
    let (r, w) = s.into_split();
    (Reader::Tcp(r), Writer::Tcp(w))
}

/// Splits a TLS stream for the two tasks.
pub fn split_tls(s: Tls) -> (Reader, Writer) {
    let (r, w) = tokio::io::split(s);
    (Reader::Tls(r), Writer::Tls(w))
}

/// Makes closing the socket abortive (SO_LINGER 0: a reset, unsent bytes
/// dropped). For a client that stopped reading and hit the write deadline:
/// otherwise the kernel keeps the orphaned socket and trickles its buffered
/// megabytes out to a peer nsqd has already forgotten.
pub fn abort_on_close(fd: std::os::fd::RawFd) {
    if let Err(e) = nsq_cli::sys::abort_on_close(fd) {
        tracing::debug!(error = %e, "SO_LINGER 0 failed");
    }
}

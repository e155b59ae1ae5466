//! The socket under one HTTP connection, and the ledger that turns "the
//! bytes reached the socket" into FIN.
//!
//! hyper buffers what a response body yields and writes that buffer out
//! before it calls the socket's `poll_flush` (as every buffered writer
//! flushes itself before its inner writer). So when [`Wire::poll_flush`]
//! succeeds, every message hyper has taken from a subscriber's stream so
//! far has been handed to the kernel: the [`Ledger`] finishes those
//! messages then. A message still pending when the HTTP client is seen gone
//! (EOF or an error on read, an error on write) or when the connection is
//! dropped is requeued at once, so another subscriber of the channel gets it.
//!
//! What TCP cannot tell us: bytes the kernel accepted but the client never
//! read (it vanished with them in its receive buffer) count as written. That
//! window is a socket buffer long; nsq_pubsub has no application-level ack.
//!
//! This module owns the socket and the pending list. It never decides what
//! is written, and never talks to nsqd itself: [`Settle`] does.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// How a written (or unwritable) item is answered: FIN or immediate REQ
/// for an nsq-client message; a recorder in the tests.
pub trait Settle: Send + 'static {
    fn finish(self);
    fn requeue(self);
}

impl Settle for nsq_client::Message {
    fn finish(self) {
        nsq_client::Message::finish(&self);
    }

    /// No delay and no backoff: the HTTP client went away, the message
    /// itself is fine and another subscriber may take it now.
    fn requeue(self) {
        self.requeue_without_backoff(Some(std::time::Duration::ZERO));
    }
}

/// Items whose bytes hyper has taken but not yet flushed, for one connection.
pub struct Ledger<T> {
    pending: Mutex<Vec<T>>,
    /// The peer is gone: nothing more will be finished on this connection.
    gone: AtomicBool,
    /// Run once, when the peer is seen gone, before anything is requeued.
    on_gone: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl<T: Settle> Default for Ledger<T> {
    fn default() -> Self {
        Ledger {
            pending: Mutex::new(Vec::new()),
            gone: AtomicBool::new(false),
            on_gone: Mutex::new(None),
        }
    }
}

impl<T: Settle> Ledger<T> {
    /// `f` runs when the peer is seen gone, before the first requeue (the
    /// subscriber pauses its consumer there, so nsqd does not hand the
    /// requeued messages straight back to it).
    pub fn when_gone(&self, f: impl FnOnce() + Send + 'static) {
        *self.on_gone.lock() = Some(Box::new(f));
    }

    /// The stream gave `item`'s bytes to hyper; it is settled at the next
    /// flush (or requeued at once if the peer is already gone).
    pub fn taken(&self, item: T) {
        let mut pending = self.pending.lock();
        if self.gone.load(Ordering::SeqCst) {
            drop(pending);
            item.requeue();
        } else {
            pending.push(item);
        }
    }

    /// Whether the peer has been seen gone.
    pub fn is_gone(&self) -> bool {
        self.gone.load(Ordering::SeqCst)
    }

    /// Everything taken so far is in the kernel.
    fn flushed(&self) {
        let items = std::mem::take(&mut *self.pending.lock());
        let gone = self.is_gone();
        for item in items {
            if gone {
                item.requeue();
            } else {
                item.finish();
            }
        }
    }

    /// The peer is gone (or the connection is being dropped): requeue
    /// what is pending, and whatever is taken from now on.
    fn peer_gone(&self) {
        self.gone.store(true, Ordering::SeqCst);
        let hook = self.on_gone.lock().take();
        if let Some(f) = hook {
            f();
        }
        let items = std::mem::take(&mut *self.pending.lock());
        for item in items {
            item.requeue();
        }
    }
}

/// A socket that reports flushes, EOF and errors to its connection's [`Ledger`].
pub struct Wire<S, T: Settle> {
    io: S,
    ledger: Arc<Ledger<T>>,
}

impl<S, T: Settle> Wire<S, T> {
    pub fn new(io: S, ledger: Arc<Ledger<T>>) -> Self {
        Wire { io, ledger }
    }

    fn check<R>(&self, r: &Poll<io::Result<R>>) {
        if let Poll::Ready(Err(_)) = r {
            self.ledger.peer_gone();
        }
    }
}

impl<S, T: Settle> Drop for Wire<S, T> {
    fn drop(&mut self) {
        self.ledger.peer_gone();
    }
}

impl<S: AsyncRead + Unpin, T: Settle> AsyncRead for Wire<S, T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let (had_room, before) = (buf.remaining() > 0, buf.filled().len());
        let r = Pin::new(&mut this.io).poll_read(cx, buf);
        match &r {
            // EOF: hyper reads while it streams a response only to notice this.
            Poll::Ready(Ok(())) if had_room && buf.filled().len() == before => {
                this.ledger.peer_gone()
            }
            Poll::Ready(Err(_)) => this.ledger.peer_gone(),
            _ => {}
        }
        r
    }
}

impl<S: AsyncWrite + Unpin, T: Settle> AsyncWrite for Wire<S, T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write(cx, buf);
        this.check(&r);
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.check(&r);
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_flush(cx);
        match &r {
            Poll::Ready(Ok(())) => this.ledger.flushed(),
            Poll::Ready(Err(_)) => this.ledger.peer_gone(),
            Poll::Pending => {}
        }
        r
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_shutdown(cx);
        this.check(&r);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    type Log = Arc<Mutex<Vec<(u32, &'static str)>>>;

    struct Probe(u32, Log);

    impl Settle for Probe {
        fn finish(self) {
            self.1.lock().push((self.0, "FIN"));
        }
        fn requeue(self) {
            self.1.lock().push((self.0, "REQ"));
        }
    }

    #[tokio::test]
    async fn flush_finishes_what_was_taken() {
        let log = Log::default();
        let ledger = Arc::new(Ledger::default());
        let (a, mut b) = tokio::io::duplex(64);
        let mut wire = Wire::new(a, ledger.clone());
        ledger.taken(Probe(1, log.clone()));
        wire.write_all(b"one\n").await.unwrap();
        assert!(
            log.lock().is_empty(),
            "written but not flushed: not settled yet"
        );
        wire.flush().await.unwrap();
        assert_eq!(*log.lock(), [(1, "FIN")]);
        let mut got = [0u8; 4];
        b.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"one\n");
    }

    #[tokio::test]
    async fn eof_requeues_pending_and_later_items() {
        let log = Log::default();
        let ledger = Arc::new(Ledger::default());
        let (a, b) = tokio::io::duplex(64);
        let mut wire = Wire::new(a, ledger.clone());
        ledger.taken(Probe(1, log.clone()));
        let l = log.clone();
        ledger.when_gone(move || l.lock().push((0, "PAUSE")));
        drop(b);
        let mut buf = [0u8; 8];
        assert_eq!(wire.read(&mut buf).await.unwrap(), 0);
        assert!(ledger.is_gone());
        assert_eq!(*log.lock(), [(0, "PAUSE"), (1, "REQ")]);
        ledger.taken(Probe(2, log.clone()));
        drop(wire); // the hook ran once
        assert_eq!(*log.lock(), [(0, "PAUSE"), (1, "REQ"), (2, "REQ")]);
        // A flush after the peer left finishes nothing.
        ledger.flushed();
        assert_eq!(log.lock().len(), 3);
    }

    #[tokio::test]
    async fn dropping_the_connection_requeues_pending() {
        let log = Log::default();
        let ledger = Arc::new(Ledger::default());
        let (a, _b) = tokio::io::duplex(64);
        let wire = Wire::new(a, ledger.clone());
        ledger.taken(Probe(7, log.clone()));
        drop(wire);
        assert_eq!(*log.lock(), [(7, "REQ")]);
    }

    #[tokio::test]
    async fn write_error_marks_the_peer_gone() {
        let log = Log::default();
        let ledger = Arc::new(Ledger::default());
        let (a, b) = tokio::io::duplex(64);
        let mut wire = Wire::new(a, ledger.clone());
        drop(b);
        ledger.taken(Probe(3, log.clone()));
        assert!(wire.write_all(b"x").await.is_err());
        assert_eq!(*log.lock(), [(3, "REQ")]);
    }
}

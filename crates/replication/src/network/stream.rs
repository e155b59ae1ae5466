//! The byte stream between two members, as both ends use it: one writer
//! task that batches the frames handed to it, and the read loop that splits
//! what arrives into frames. Never: what a frame asks or answers (the
//! listener answers requests, the peer pairs answers with its calls).

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use super::frame::{self, Frame, FrameError};

/// A byte stream between members: TCP, or TLS over it.
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

/// Writes the frames handed to it, as many per write as are waiting; sets
/// `broken` when the stream fails or `broken` was set by another part.
pub async fn write_frames(
    mut wr: impl AsyncWrite + Unpin,
    mut rx: mpsc::UnboundedReceiver<Bytes>,
    broken: Arc<AtomicBool>,
) {
    let mut buf = BytesMut::new();
    while let Some(f) = rx.recv().await {
        buf.extend_from_slice(&f);
        while let Ok(f) = rx.try_recv() {
            buf.extend_from_slice(&f);
        }
        if wr.write_all(&buf).await.is_err() || wr.flush().await.is_err() {
            break;
        }
        buf.clear();
        if broken.load(Ordering::Acquire) {
            break;
        }
    }
    broken.store(true, Ordering::Release);
    let _ = wr.shutdown().await;
}

/// Hands every whole frame read from `rd` to `on_frame`, in order, until
/// the stream ends (`Ok`), `on_frame` breaks (`Ok`) or a frame is bad
/// (`Err`: the stream cannot be resynchronised, so the caller drops it).
pub async fn read_frames(
    mut rd: impl AsyncRead + Unpin,
    mut on_frame: impl FnMut(Frame) -> ControlFlow<()>,
) -> Result<(), FrameError> {
    let mut buf = BytesMut::with_capacity(64 << 10);
    loop {
        match rd.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return Ok(()),
            Ok(_) => {}
        }
        while let Some(f) = frame::decode(&mut buf)? {
            if on_frame(f).is_break() {
                return Ok(());
            }
        }
    }
}

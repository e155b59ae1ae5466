//! Frames waiting for a connection's writer, shared by whoever queues them
//! (the connection's reader, channels delivering to it) and the writer.
//!
//! The outbox holds frames already encoded: a channel delivering a message
//! appends the frame right there, so the hot path moves no `Message`
//! between tasks, clones no body (no reference-count traffic on a cache
//! line other threads own) and allocates nothing per message. The writer
//! swaps the whole buffer out and writes it in one go.

use bytes::BytesMut;
use parking_lot::Mutex;
use tokio::sync::{oneshot, Notify};

use super::transport::Writer;
use nsq_protocol::compress::Encoder;

/// Settings the writer needs after IDENTIFY.
#[derive(Debug, Clone, Copy)]
pub struct WriterSettings {
    pub heartbeat_ms: Option<i64>,
    pub output_buffer_size: usize,
}

/// A step for the writer that is not a frame; it runs once the frames
/// queued before it are written.
#[derive(Debug)]
pub enum Control {
    Settings(WriterSettings),
    /// Write what is queued, hand the write half to the reader (`give`) for
    /// a TLS upgrade, and wait for the upgraded one (`take`); no frame may
    /// be written in between.
    Detach {
        give: oneshot::Sender<Writer>,
        take: oneshot::Receiver<Writer>,
    },
    /// Compress everything after this point (boxed: a Snappy encoder is
    /// kilobytes).
    Compress(Box<Encoder>),
    /// Close the socket.
    Close,
}

#[derive(Debug, Default)]
pub struct Outbox {
    state: Mutex<OutboxState>,
    ready: Notify,
}

#[derive(Debug, Default)]
pub(crate) struct OutboxState {
    pub(crate) frames: BytesMut,
    /// Controls, each tagged with the length of `frames` when it was queued.
    controls: Vec<(usize, Control)>,
    /// The writer has stopped: nothing queued will be written.
    writer_gone: bool,
    /// The connection has gone: nothing more will be queued.
    senders_gone: bool,
}

impl OutboxState {
    fn is_empty(&self) -> bool {
        self.frames.is_empty() && self.controls.is_empty()
    }
}

/// What [`Outbox::take`] handed the writer.
pub struct Taken {
    /// Nothing more will ever be queued (the batch may still hold frames).
    pub last: bool,
}

impl Outbox {
    /// Appends under the lock; wakes the writer only on the empty→queued
    /// edge (a non-empty outbox means a wake-up is already pending). False
    /// when the writer is gone.
    pub(crate) fn push(&self, f: impl FnOnce(&mut OutboxState)) -> bool {
        let mut st = self.state.lock();
        if st.writer_gone {
            return false;
        }
        let was_empty = st.is_empty();
        f(&mut st);
        drop(st);
        if was_empty {
            self.ready.notify_one();
        }
        true
    }

    /// Queues a writer step, to run after the frames queued before it.
    pub fn push_control(&self, control: Control) -> bool {
        self.push(|st| {
            let at = st.frames.len();
            st.controls.push((at, control));
        })
    }

    /// Waits until something was queued since the last `take`.
    pub async fn ready(&self) {
        self.ready.notified().await
    }

    /// Swaps everything queued into `frames` (which must be empty; its
    /// capacity goes back to the outbox for the next batch) and `controls`.
    pub fn take(&self, frames: &mut BytesMut, controls: &mut Vec<(usize, Control)>) -> Taken {
        let mut st = self.state.lock();
        std::mem::swap(&mut st.frames, frames);
        std::mem::swap(&mut st.controls, controls);
        Taken {
            last: st.senders_gone,
        }
    }

    /// The writer has stopped; later sends fail and queued frames are dropped.
    pub fn writer_gone(&self) {
        let mut st = self.state.lock();
        st.writer_gone = true;
        st.frames = BytesMut::new();
        st.controls.clear();
    }

    /// Nothing more will be queued: the writer finishes the last batch.
    pub fn senders_gone(&self) {
        self.state.lock().senders_gone = true;
        self.ready.notify_one();
    }
}

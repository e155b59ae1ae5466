//! What reaches the consumer's core task ([`Event`]), and a handler's answer
//! to one message ([`Action`]) among it. The connection tasks, the
//! handler workers, each [`Message`](super::message::Message) handle and
//! the consumer's own calls send them; only the core reads them.

use std::time::Duration;

use bytes::Bytes;
use nsq_protocol::MessageId;
use tokio::sync::{mpsc, oneshot};

use crate::rdy::ConnId;

/// Everything that reaches the core task.
pub(crate) enum Event {
    /// `ack` fires once the core has counted the connection and sent its RDY.
    Connected {
        conn: ConnId,
        addr: String,
        cmds: mpsc::UnboundedSender<Bytes>,
        max_rdy: i64,
        ack: oneshot::Sender<()>,
    },
    Message {
        conn: ConnId,
        msg: nsq_protocol::Message,
    },
    Respond {
        conn: ConnId,
        id: MessageId,
        action: Action,
    },
    CloseWait {
        conn: ConnId,
    },
    Lost {
        conn: ConnId,
        reason: String,
    },
    Disconnect {
        addr: String,
    },
    SetMaxInFlight(i64),
    Stop,
}

/// A handler's answer to one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    Finish,
    Requeue { delay: Duration, backoff: bool },
    Touch,
}

//! What the server takes out of a channel after each call: the frames
//! encoded for each client, the disk work to do unlocked, and whether the
//! timer must be woken. A child of [`super`]; the call itself fills
//! the channel's effects, and this only empties them.
//!
//! Never: decides anything (the delivery code does).

use bytes::BytesMut;

use super::{Channel, ClientId, DiskWork};

impl Channel {
    /// Hands each client's frames of this call to `send` (its outbox), once
    /// per client: the outbox lock is shared with the client's writer on
    /// another core, and taking it per message was nsqd's hottest line.
    /// `send` may take the buffer itself and leave another in its place
    /// (an empty outbox swaps instead of copying); whatever it leaves is
    /// kept for the next call.
    pub fn flush_deliveries(&mut self, mut send: impl FnMut(ClientId, &mut BytesMut)) {
        let out = &mut self.effects;
        for (client, mut frames) in out.deliveries.drain(..) {
            send(client, &mut frames);
            frames.clear();
            if out.spare.len() < 8 {
                out.spare.push(frames);
            }
        }
    }

    /// Backend work this call produced (the server does it unlocked).
    pub fn take_disk_work(&mut self) -> DiskWork {
        DiskWork {
            append: std::mem::take(&mut self.effects.append),
            refill: self.effects.refill.take(),
            skip: std::mem::take(&mut self.effects.skip),
            expire: self.effects.expire.take(),
            dead_letters: std::mem::take(&mut self.effects.dead_letters),
            acks: std::mem::take(&mut self.effects.acks),
            dead_letter_acks: std::mem::take(&mut self.effects.dead_letter_acks),
            deferred: self.deferred.take_work(),
        }
    }

    /// Whether the timer must be woken (an earlier deadline appeared).
    pub fn take_wake(&mut self) -> bool {
        std::mem::take(&mut self.effects.wake)
    }
}

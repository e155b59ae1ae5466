//! A channel's run files of spilled deferred messages (nsq-rs,
//! `--deferred-spill`), as the server carries out the core's work on them:
//! runs written, loaded and deleted, their tickets for a publisher that
//! answers once they are durable, and the run a clean close writes. A
//! child of [`super`]. Never: which messages spill or when (the core's
//! `Deferred`), or the run file format (`super::super::spill`).

use std::time::Instant;

use nsq_protocol::Message;

use super::super::backend::Ticket;
use super::super::clock::{now, now_unix_ns};
use super::super::disk::blocking;
use super::super::spill::{to_instant, to_unix_ns};
use super::Channel;
use crate::core::{DeferredWork, SpillBatch};

/// Deferred messages with their due times, as the core hands them over.
pub(super) type Records = Vec<(Instant, Message)>;

/// What came of the run file work of one pass, for the core.
#[derive(Default)]
pub(super) struct RunsDone {
    /// Runs written (with the records that could not be: they stay in memory).
    pub(super) spilled: Vec<(u64, Records)>,
    /// Runs read: their records and the due time of the next one.
    pub(super) loaded: Vec<(u64, Records, Option<Instant>)>,
}

impl Channel {
    /// Writes, loads and deletes run files of spilled deferred messages.
    /// Writes leave their tickets in `tickets` (a DPUB is answered once its
    /// run is durable, with `--sync-every=1`).
    pub(super) fn carry_out_runs(
        &self,
        work: DeferredWork,
        last_append: Option<Ticket>,
        tickets: &mut Vec<Ticket>,
    ) -> RunsDone {
        let mut done = RunsDone::default();
        if work.is_empty() {
            return done;
        }
        let Some(spill) = &self.spill else {
            // never asked for without run files; keep the records anyway
            done.spilled = work.spill.into_iter().map(|b| (b.run, b.records)).collect();
            return done;
        };
        let (now, now_ns) = (now(), now_unix_ns());
        for b in work.spill {
            let recs: Vec<(i64, &Message)> = b
                .records
                .iter()
                .map(|(due, m)| (to_unix_ns(*due, now, now_ns), m))
                .collect();
            match spill.append(b.run, b.new, &recs) {
                Ok(ticket) => {
                    if self.ctx.durable_acks() {
                        tickets.extend(ticket.map(Ticket::from));
                    }
                    done.spilled.push((b.run, Vec::new()));
                }
                Err(e) => {
                    tracing::error!(topic = %self.topic_name, channel = %self.name, run = b.run, error = %e, "deferred run write failed; its messages stay in memory");
                    self.ctx.set_health(Some(e.to_string()));
                    done.spilled.push((b.run, b.records));
                }
            }
        }
        for l in work.load {
            let until = to_unix_ns(l.until, now, now_ns);
            let (records, next) = blocking(|| spill.read(l.run, l.max, until));
            let records = records
                .into_iter()
                .map(|(due, m)| (to_instant(due, now, now_ns), m))
                .collect();
            done.loaded
                .push((l.run, records, next.map(|d| to_instant(d, now, now_ns))));
        }
        if !work.delete.is_empty() {
            match last_append.filter(|_| self.ctx.durable_acks()) {
                Some(ticket) => {
                    let spill = spill.clone();
                    // untracked: shutdown does not wait for it; a run left
                    // behind is read again after the restart (duplicates)
                    tokio::spawn(async move {
                        // not durable: the run stays, and a crash brings its
                        // records back (duplicates, never a loss)
                        if ticket.durable().await.is_ok() {
                            for run in work.delete {
                                spill.delete(run);
                            }
                        }
                    });
                }
                None => {
                    for run in work.delete {
                        spill.delete(run);
                    }
                }
            }
        }
        done
    }

    /// The deferred messages memory held at a clean close, as a new run.
    pub(super) fn write_closing_run(&self, b: SpillBatch) -> Result<(), Vec<Message>> {
        let Some(spill) = &self.spill else {
            return Err(b.records.into_iter().map(|(_, m)| m).collect());
        };
        let (now, now_ns) = (now(), now_unix_ns());
        let recs: Vec<(i64, &Message)> = b
            .records
            .iter()
            .map(|(due, m)| (to_unix_ns(*due, now, now_ns), m))
            .collect();
        match spill.append(b.run, true, &recs) {
            Ok(_) => Ok(()),
            Err(e) => {
                tracing::error!(topic = %self.topic_name, channel = %self.name, error = %e, "deferred run write failed at close; deferred messages go to the disk queue");
                Err(b.records.into_iter().map(|(_, m)| m).collect())
            }
        }
    }
}

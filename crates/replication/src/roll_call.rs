//! What a member does about its standing while it runs: greets every peer
//! once per start (each learns this member's incarnation and says which
//! one it knew), and while it replaces a lost member, checks each group's
//! catch-up. Never: the rule itself (`standing.rs`), nor turning
//! elections on and off (`pulse.rs` does, from the standing and the
//! group's leader).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::identity::Identity;
use crate::network::peer::Peer;
use crate::standing::{applied_in_current_term, Standing};
use crate::{GroupId, NodeId, Raft};

/// Between greetings of a peer not greeted yet: at first, and at most
/// (a peer that refuses this member is asked again, but not often).
const GREET_FIRST: Duration = Duration::from_millis(500);
const GREET_MAX: Duration = Duration::from_secs(10);
/// Between catch-up checks while replacing.
const CHECK_EVERY: Duration = Duration::from_millis(100);

/// Runs until `shutdown`.
pub async fn run(
    identity: Arc<Identity>,
    groups: Vec<(GroupId, Raft)>,
    peers: Vec<(NodeId, Arc<Peer>)>,
    shutdown: CancellationToken,
) {
    let greeters: Vec<_> = peers
        .into_iter()
        .map(|(id, peer)| tokio::spawn(greet(identity.clone(), id, peer, shutdown.clone())))
        .collect();
    let mut standing = identity.standing();
    let mut check = tokio::time::interval(CHECK_EVERY);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        let replacing = matches!(*standing.borrow(), Standing::Replacing { .. });
        tokio::select! {
            _ = shutdown.cancelled() => break,
            changed = standing.changed() => if changed.is_err() { break },
            _ = check.tick(), if replacing => {
                for (g, raft) in &groups {
                    if identity.may_vote(*g) {
                        continue;
                    }
                    let m = raft.metrics().borrow().clone();
                    let applied = m.last_applied.map(|l| l.leader_id.get_term());
                    if applied_in_current_term(m.current_term, m.current_leader, applied) {
                        if let Err(e) = identity.caught_up(*g) {
                            tracing::error!("REPLICATION: {e}");
                        }
                    }
                }
            }
        }
    }
    for g in greeters {
        let _ = g.await;
    }
}

/// Greets `peer` until it answered once, or `shutdown`.
async fn greet(identity: Arc<Identity>, id: NodeId, peer: Arc<Peer>, shutdown: CancellationToken) {
    let mut pause = GREET_FIRST;
    while !identity.greeted(id) {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            r = peer.greet_once() => if let Err(e) = r {
                tracing::debug!(peer = id, error = %e, "replication peer not greeted yet");
            },
        }
        if identity.greeted(id) {
            return;
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(pause) => {}
        }
        pause = (pause * 2).min(GREET_MAX);
    }
}

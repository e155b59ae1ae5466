//! Keeps idle groups quiet while the member runs: pulses every peer once
//! per heartbeat interval (one request for all groups), and at the same
//! pace turns each group's heartbeats and elections on or off by the rules
//! of `quiet.rs` and the member's standing. Never: the rules themselves.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use crate::identity::Identity;
use crate::maps::Maps;
use crate::network::frame::{Reply, Rpc};
use crate::network::peer::Peer;
use crate::network::Peers;
use crate::quiet::{self, Activity, Heard, Leading, QuietFlags, Timing};
use crate::{GroupId, NodeId, Raft};

/// The peers' last answers to this member's pulses, shared by the pulse
/// task that writes them and whoever asks who leads a group this member
/// does not vote in (cheap to clone).
#[derive(Clone)]
pub struct Pulses {
    heard: Arc<Mutex<HashMap<NodeId, Heard>>>,
    timing: Timing,
}

impl Pulses {
    pub(crate) fn new(timing: Timing) -> Pulses {
        Pulses {
            heard: Arc::default(),
            timing,
        }
    }

    /// Who leads `group` and in which term, as the peers' answers say
    /// ([`quiet::leader_heard`]).
    pub fn leader(&self, group: GroupId) -> Option<(NodeId, u64)> {
        quiet::leader_heard(
            Instant::now().into_std(),
            self.timing,
            group,
            &self.heard.lock(),
        )
    }
}

/// Runs until `shutdown`: `every` is openraft's heartbeat interval.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    identity: Arc<Identity>,
    groups: Vec<(GroupId, Raft)>,
    maps: Maps,
    peers: Arc<Peers>,
    pulses: Pulses,
    every: Duration,
    quiet: QuietFlags,
    shutdown: CancellationToken,
) {
    let timing = pulses.timing;
    let heard = pulses.heard;
    let me = identity.me;
    // One pulse task per member other than this one, started as the map
    // names them (a member added is pulsed from then on; a removed one is
    // refused its hello, and its answers are missed).
    let mut pulsed: HashSet<NodeId> = HashSet::new();
    let mut pulses = Vec::new();
    let mut spawn_new = |pulses: &mut Vec<tokio::task::JoinHandle<()>>| {
        let Some(map) = maps.get() else { return };
        for (id, addr) in map.members.iter().filter(|(id, _)| **id != me) {
            if pulsed.insert(*id) {
                pulses.push(tokio::spawn(pulse(
                    *id,
                    peers.get(addr),
                    every,
                    timing.fresh_for,
                    heard.clone(),
                    shutdown.clone(),
                )));
            }
        }
    };
    spawn_new(&mut pulses);
    let mut map_changed = maps.watch();
    let mut activity: Vec<Activity> = groups
        .iter()
        .map(|_| Activity::new(Instant::now().into_std()))
        .collect();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tick.tick() => {}
        }
        if map_changed.has_changed().unwrap_or(false) {
            map_changed.borrow_and_update();
            spawn_new(&mut pulses);
        }
        let now = Instant::now().into_std();
        let heard = heard.lock().clone();
        for ((g, raft), act) in groups.iter().zip(activity.iter_mut()) {
            let (leads, heartbeat, elect) = {
                let m = raft.metrics();
                let m = m.borrow();
                let leads = m.state == openraft::ServerState::Leader;
                let last_index = m.last_log_index.unwrap_or(0);
                let mark = (
                    m.current_term,
                    last_index,
                    m.last_applied.map_or(0, |l| l.index),
                    m.replication
                        .as_ref()
                        .map_or(0, |r| r.values().map(|l| l.map_or(0, |l| l.index)).sum()),
                );
                let idle = act.observe(now, mark);
                if leads {
                    let members: Vec<NodeId> = m
                        .membership_config
                        .membership()
                        .nodes()
                        .map(|(id, _)| *id)
                        .collect();
                    let l = Leading {
                        me,
                        group: *g,
                        term: m.current_term,
                        last_index,
                        idle,
                    };
                    let hb = quiet::leader_heartbeats(now, timing, l, &members, &heard);
                    (true, hb, true)
                } else {
                    let elect = quiet::may_elect(now, timing, me, *g, m.current_term, &heard);
                    // A member that becomes leader heartbeats until the
                    // rules say otherwise.
                    (false, true, elect)
                }
            };
            let elect = elect && identity.may_vote(*g);
            let rt = raft.runtime_config();
            rt.heartbeat(heartbeat);
            rt.elect(elect);
            // openraft's timer only checks for an election and sends
            // heartbeats: a group that needs neither (quiet, or following
            // with elections off) is not woken for it at all.
            rt.tick(if leads { heartbeat } else { elect });
            if let Some(flag) = quiet.get(*g as usize) {
                let was = flag.swap(leads && !heartbeat, Ordering::Relaxed);
                if was != (leads && !heartbeat) {
                    tracing::debug!(group = g, quiet = !was, "replication group");
                }
            }
        }
    }
    for p in pulses {
        let _ = p.await;
    }
}

/// Asks `peer` what it knows of its groups every `every`, keeping its
/// last answer in `heard`.
async fn pulse(
    id: NodeId,
    peer: Arc<Peer>,
    every: Duration,
    timeout: Duration,
    heard: Arc<Mutex<HashMap<NodeId, Heard>>>,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let answer = tokio::select! {
            _ = shutdown.cancelled() => return,
            a = peer.call(0, &Rpc::Pulse, timeout) => a,
        };
        match answer {
            Ok(Reply::Pulse(groups)) => {
                heard.lock().insert(
                    id,
                    Heard {
                        at: Instant::now().into_std(),
                        groups,
                        missed: false,
                    },
                );
                continue;
            }
            Ok(other) => {
                tracing::debug!(peer = id, "replication pulse answered with {other:?}");
            }
            Err(e) => tracing::debug!(peer = id, error = %e, "replication pulse not answered"),
        }
        if let Some(h) = heard.lock().get_mut(&id) {
            h.missed = true;
        }
    }
}

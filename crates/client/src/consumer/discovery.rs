//! nsqlookupd polling for a consumer.
//!
//! Every `lookupd_poll_interval` (after a random start delay of up to
//! `lookupd_poll_jitter` of it, and at once whenever a connection goes) the
//! consumer asks every configured nsqlookupd for its topic, connects to each
//! nsqd any of them lists, and — when every lookupd answered — drops the
//! connections it had discovered that none lists any more.
//!
//! go-nsq asks one lookupd per poll (round robin) and never drops a
//! connection; asking all of them gives the union the brief asks for, and
//! dropping only after a complete round keeps a lookupd outage from cutting
//! connections.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::sync::mpsc;

use super::event::Event;
use super::{connect_nsqd, Shared};
use crate::error::ConsumerError;
use crate::lookup;

/// Polls until the consumer stops. The first poll was made by the caller.
pub(crate) async fn lookupd_loop(shared: Arc<Shared>, events: mpsc::UnboundedSender<Event>) {
    let interval = shared.config.lookupd_poll_interval;
    let jitter =
        interval.mul_f64(rand::thread_rng().gen::<f64>() * shared.config.lookupd_poll_jitter);
    tokio::select! {
        _ = tokio::time::sleep(jitter) => {}
        _ = shared.cancel.cancelled() => return,
    }
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = shared.recheck.notified() => {}
            _ = shared.cancel.cancelled() => break,
        }
        query_lookupds(&shared, &events).await;
    }
    tracing::info!(topic = %shared.topic, "lookupd loop exiting");
}

/// One round: ask every lookupd, connect to new nsqds, drop vanished ones.
pub(crate) async fn query_lookupds(shared: &Arc<Shared>, events: &mpsc::UnboundedSender<Event>) {
    let endpoints = shared.registry.lock().lookupds.clone();
    if endpoints.is_empty() {
        return;
    }
    let mut union = BTreeSet::new();
    let mut complete = true;
    for ep in &endpoints {
        tracing::info!(lookupd = %ep.host_port, topic = %shared.topic, "querying nsqlookupd");
        match lookup::query(&shared.lookupd_client, ep, &shared.topic).await {
            Ok(addrs) => union.extend(addrs),
            Err(e) => {
                tracing::error!(lookupd = %ep.host_port, error = %e, "error querying nsqlookupd");
                complete = false;
            }
        }
    }
    for addr in &union {
        if shared.cancel.is_cancelled() {
            return;
        }
        match connect_nsqd(shared, events, addr, super::Origin::Discovered).await {
            Ok(()) | Err(ConsumerError::AlreadyConnected(_)) => {}
            Err(e) => tracing::error!(nsqd = %addr, error = %e, "error connecting to nsqd"),
        }
    }
    if complete {
        let gone: Vec<String> = {
            let mut reg = shared.registry.lock();
            let gone: Vec<String> = reg
                .discovered
                .iter()
                .filter(|a| !union.contains(*a) && !reg.direct.contains(*a))
                .cloned()
                .collect();
            for a in &gone {
                reg.discovered.remove(a);
                reg.nsqd_tcp_addrs.retain(|x| x != a);
            }
            gone
        };
        for addr in gone {
            tracing::info!(nsqd = %addr, topic = %shared.topic, "no longer listed by any nsqlookupd, disconnecting");
            let _ = events.send(Event::Disconnect { addr });
        }
    }
}

/// Reconnects to a lost nsqd every `lookupd_poll_interval` until it works,
/// the address is removed, or the consumer stops (go-nsq, without lookupds).
pub(crate) async fn reconnect_loop(
    shared: Arc<Shared>,
    events: mpsc::UnboundedSender<Event>,
    addr: String,
) {
    let delay: Duration = shared.config.lookupd_poll_interval;
    loop {
        tracing::info!(nsqd = %addr, in_ = ?delay, "reconnecting");
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = shared.cancel.cancelled() => return,
        }
        if !shared.registry.lock().nsqd_tcp_addrs.contains(&addr) {
            tracing::warn!(nsqd = %addr, "skipped reconnect after removal");
            return;
        }
        match connect_nsqd(&shared, &events, &addr, super::Origin::Reconnect).await {
            Ok(()) | Err(ConsumerError::AlreadyConnected(_)) => return,
            Err(ConsumerError::Stopped) => return,
            Err(e) => tracing::error!(nsqd = %addr, error = %e, "error reconnecting to nsqd"),
        }
    }
}

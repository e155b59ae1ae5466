//! Loopback ports for the daemons the tests start.
//!
//! The test executables run side by side (scripts/suites.sh) and open many
//! short outgoing connections, and each connection takes its local port
//! from the kernel's ephemeral range (`net.ipv4.ip_local_port_range`,
//! 32768-60999 by default). A port found free in that range (bind to port
//! 0, then release it for the daemon) can become some connection's local
//! port before the daemon binds it, and the daemon fails with "Address
//! already in use". So ports are picked below that range, at random, and
//! checked by binding them; only connections a test makes itself to a
//! fixed port could still collide there, and none does.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::Rng;

/// Picks so far in this process, mixed into each pick's seed.
static PICKS: AtomicU64 = AtomicU64::new(0);

/// A port that was free a moment ago on 127.0.0.1, below the ephemeral range.
pub fn free_port() -> u16 {
    let (lo, hi) = pick_range();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let pick = PICKS.fetch_add(1, Ordering::Relaxed);
    let mut rng = Rng::new(
        nanos ^ (u64::from(std::process::id()) << 32) ^ pick.wrapping_mul(0x9E37_79B9_7F4A_7C15),
    );
    for _ in 0..1000 {
        let port = lo + rng.below(u64::from(hi - lo)) as u16;
        if reserve(port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    // Nearly every port below the range is taken: the kernel's choice.
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr()
        .expect("a bound listener has an address")
        .port()
}

/// Claims `port` for this process among every test process of the run: a
/// file named after it, created exclusively in a directory under the temp
/// dir, so two test executables running side by side never both pick a
/// port that is free because neither daemon has bound it yet (the second
/// would find the first one's daemon answering on it). A claim older than
/// a minute is stale (its daemon has bound the port or is gone) and is
/// taken over.
fn reserve(port: u16) -> bool {
    let dir = std::env::temp_dir().join("nsq-rs-test-ports");
    if std::fs::create_dir_all(&dir).is_err() {
        return true;
    }
    let path = dir.join(port.to_string());
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
    {
        Ok(_) => true,
        Err(_) => {
            let stale = std::fs::metadata(&path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > std::time::Duration::from_secs(60));
            // Take a stale claim over by renewing it (another process may do
            // the same at the same moment: the bind check still guards).
            stale && std::fs::write(&path, b"1").is_ok()
        }
    }
}

/// `n` distinct ports, each free a moment ago (for daemons that must know
/// each other's addresses before any of them starts).
pub fn free_ports(n: usize) -> Vec<u16> {
    let mut ports: Vec<u16> = Vec::with_capacity(n);
    while ports.len() < n {
        let p = free_port();
        if !ports.contains(&p) {
            ports.push(p);
        }
    }
    ports
}

/// `[lo, hi)`: the half of the ports below the ephemeral range nearest it
/// (16384-32767 with the default range), well above the daemons' default
/// ports (4150-4171) a developer may have running.
fn pick_range() -> (u16, u16) {
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    if low >= 10_000 {
        (low / 2, low)
    } else {
        // An unusual range that starts low: above its end instead.
        (61_000, 65_535)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_free_ports_below_the_ephemeral_range() {
        let (lo, hi) = pick_range();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..50 {
            let p = free_port();
            assert!((lo..hi).contains(&p), "{p} not in {lo}..{hi}");
            seen.insert(p);
            TcpListener::bind(("127.0.0.1", p)).expect("the picked port binds");
        }
        assert!(seen.len() > 40, "random picks repeat too often: {seen:?}");
    }
}

//! What nsqlookupd's TCP and HTTP sides share while it serves: the
//! registry behind its lock, the IDENTIFY answer built once, the wall clock
//! `/debug` prints instants with, and the HTTP access control. The daemon
//! (`daemon.rs`) builds it at startup and hands it to both listeners.
//! Never: sockets or options.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use crate::registration::RegistrationDb;

/// State shared by the TCP and HTTP sides.
pub(crate) struct Context {
    /// `std` mutex, not tokio's: critical sections are short, never span an
    /// `.await`, and the registry is the only shared state.
    pub(crate) db: Mutex<RegistrationDb>,
    /// IDENTIFY's answer never changes for a running server: built once.
    pub(crate) identify_response: Bytes,
    pub(crate) clock: WallClock,
    /// `--http-auth-required`: the HTTP API's access control.
    pub(crate) http_guard: Option<Arc<nsq_http::guard::Guard>>,
}

impl Context {
    pub(crate) fn db(&self) -> MutexGuard<'_, RegistrationDb> {
        // A panic while holding the lock cannot leave the registry
        // half-updated in a way worse than refusing to serve, so keep going.
        self.db.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Maps monotonic instants to Unix nanoseconds for `/debug` output, anchored
/// once at startup (the registry only stores [`Instant`]s).
#[derive(Debug, Clone, Copy)]
pub(crate) struct WallClock {
    anchor: Instant,
    anchor_unix_nanos: i64,
}

impl WallClock {
    pub(crate) fn now() -> Self {
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Self {
            anchor: Instant::now(),
            anchor_unix_nanos: i64::try_from(unix.as_nanos()).unwrap_or(i64::MAX),
        }
    }

    pub(crate) fn unix_nanos(&self, t: Instant) -> i64 {
        let nanos = |d: Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
        match t.checked_duration_since(self.anchor) {
            Some(after) => self.anchor_unix_nanos.saturating_add(nanos(after)),
            None => self
                .anchor_unix_nanos
                .saturating_sub(nanos(self.anchor - t)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wall_clock_maps_instants() {
        let c = WallClock::now();
        let later = c.anchor + Duration::from_nanos(1500);
        assert_eq!(c.unix_nanos(later) - c.unix_nanos(c.anchor), 1500);
    }
}

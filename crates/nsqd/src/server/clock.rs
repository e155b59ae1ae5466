//! The server's two clocks, read in one place so every read is accounted
//! for: monotonic time for the core's deadlines, and the wall clock in
//! Unix nanoseconds for message timestamps and E2E latency. The core never
//! reads either; the server passes them in.

use std::time::Instant;

/// Wall-clock time in Unix nanoseconds (message timestamps, E2E latency).
pub fn now_unix_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// Monotonic time for the core.
pub fn now() -> Instant {
    Instant::now()
}

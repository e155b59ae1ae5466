//! The host, as Go's `os` and `time` packages see it: its name
//! (`os.Hostname`) and local time (`time.Local`); and the one socket option
//! std lacks (`SO_LINGER`).
//!
//! The one module of the workspace with `unsafe` code: `localtime_r` (which
//! reads `TZ` and `/etc/localtime` the way Go does) has no safe wrapper, and
//! a socket known only by its descriptor must be borrowed. Every crate else
//! forbids `unsafe`.

#![allow(unsafe_code)]

use std::time::{SystemTime, UNIX_EPOCH};

/// The host's name, read as Go's `os.Hostname` reads it on Linux
/// (`/proc/sys/kernel/hostname`, else `uname`).
pub fn hostname() -> std::io::Result<String> {
    match std::fs::read_to_string("/proc/sys/kernel/hostname") {
        Ok(name) => Ok(name.trim_end_matches('\n').to_string()),
        Err(e) => {
            let uts = rustix::system::uname();
            let name = uts.nodename().to_string_lossy().into_owned();
            if name.is_empty() {
                Err(e)
            } else {
                Ok(name)
            }
        }
    }
}

/// Makes closing the socket `fd` abortive (`SO_LINGER` 0: a reset, unsent
/// bytes dropped). The caller owns `fd` and keeps it open during the call.
pub fn abort_on_close(fd: std::os::fd::RawFd) -> std::io::Result<()> {
    // SAFETY: the caller guarantees `fd` is an open socket for the call.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    rustix::net::sockopt::set_socket_linger(fd, Some(std::time::Duration::ZERO))?;
    Ok(())
}

/// A broken-down local time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalTime {
    pub year: i64,
    /// 1..=12
    pub month: u32,
    /// 1..=31
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    pub nanos: u32,
    /// 0 = Sunday
    pub weekday: u32,
    /// 1..=366
    pub yearday: u32,
    /// Seconds east of UTC.
    pub offset: i64,
    /// Zone abbreviation (`UTC`, `CET`, ...); may be empty.
    pub zone: String,
}

impl LocalTime {
    pub fn now() -> LocalTime {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        LocalTime::at(now.as_secs() as i64, now.subsec_nanos())
    }

    /// The local time at a Unix instant.
    pub fn at(secs: i64, nanos: u32) -> LocalTime {
        let t: libc::time_t = secs as libc::time_t;
        // SAFETY: `tm` is plain old data, fully written by localtime_r on
        // success; both pointers are valid for the call; the zone name
        // pointer refers to static storage of the C library and is copied
        // out before any other time call on this thread.
        let (tm, zone) = unsafe {
            let mut tm: libc::tm = std::mem::zeroed();
            if libc::localtime_r(&t, &mut tm).is_null() {
                return LocalTime::utc(secs, nanos);
            }
            let zone = if tm.tm_zone.is_null() {
                String::new()
            } else {
                std::ffi::CStr::from_ptr(tm.tm_zone)
                    .to_string_lossy()
                    .into_owned()
            };
            (tm, zone)
        };
        LocalTime {
            year: i64::from(tm.tm_year) + 1900,
            month: (tm.tm_mon + 1) as u32,
            day: tm.tm_mday as u32,
            hour: tm.tm_hour as u32,
            minute: tm.tm_min as u32,
            second: tm.tm_sec.min(59) as u32,
            nanos,
            weekday: tm.tm_wday as u32,
            yearday: (tm.tm_yday + 1) as u32,
            #[allow(clippy::useless_conversion)] // c_long is i32 on 32-bit targets
            offset: i64::from(tm.tm_gmtoff),
            zone,
        }
    }

    /// The UTC time at a Unix instant (also what `at` falls back to).
    pub fn utc(secs: i64, nanos: u32) -> LocalTime {
        let (year, month, day, hour, minute, second) = nsq_protocol::duration::civil_utc(secs);
        let days = secs.div_euclid(86_400);
        let weekday = (days + 4).rem_euclid(7) as u32; // 1970-01-01 was a Thursday
        let jan1 = {
            let mut d = days;
            let mut y = year;
            // Walk back to January 1st via the civil calendar.
            while y == year {
                d -= 1;
                y = nsq_protocol::duration::civil_utc(d * 86_400).0;
            }
            d + 1
        };
        LocalTime {
            year,
            month,
            day,
            hour,
            minute,
            second,
            nanos,
            weekday,
            yearday: (days - jan1 + 1) as u32,
            offset: 0,
            zone: "UTC".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_time_and_host() {
        let t = LocalTime::at(86_400 * 365, 5);
        assert!(t.year == 1971 || t.year == 1970, "{t:?}");
        assert_eq!(t.nanos, 5);
        assert!(!hostname().unwrap().is_empty());
    }
}

//! Go's standard `log` output, which is all nsq_to_http's own messages use:
//! `2006/01/02 15:04:05 message` in local time (read through the C
//! library's `localtime_r`, which honours `TZ` and `/etc/localtime` as Go
//! does). `log.Fatal` adds exit status 1.

use std::time::{SystemTime, UNIX_EPOCH};

/// `2006/01/02 15:04:05`, local time.
#[allow(unsafe_code)] // the one libc call: localtime_r
pub fn timestamp() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs() as i64;
    let t: libc::time_t = secs as libc::time_t;
    // SAFETY: `tm` is plain old data that localtime_r fills in; both
    // pointers are valid for the duration of the call.
    let tm = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            None
        } else {
            Some(tm)
        }
    };
    match tm {
        Some(tm) => format!(
            "{:04}/{:02}/{:02} {:02}:{:02}:{:02}",
            i64::from(tm.tm_year) + 1900,
            tm.tm_mon + 1,
            tm.tm_mday,
            tm.tm_hour,
            tm.tm_min,
            tm.tm_sec.min(59)
        ),
        None => {
            let (y, mo, d, h, mi, s) = nsq_protocol::duration::civil_utc(secs);
            format!("{y:04}/{mo:02}/{d:02} {h:02}:{mi:02}:{s:02}")
        }
    }
}

/// `log.Printf`.
pub fn go_log(msg: impl std::fmt::Display) {
    eprintln!("{} {msg}", timestamp());
}

/// `log.Fatal`.
pub fn go_log_fatal(msg: impl std::fmt::Display) -> ! {
    go_log(msg);
    std::process::exit(1)
}

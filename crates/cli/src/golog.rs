//! Go's standard `log` package as NSQ's apps use it: `log.Print` writes
//! `2006/01/02 15:04:05 message` to stderr, `log.Fatal` adds exit status 1.
//! Timestamps are local time (read through the C library's `localtime_r`,
//! which honours `TZ` and `/etc/localtime` as Go does).

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

/// `2006/01/02 15:04:05` (`Ldate|Ltime`), plus `.000000` when `micros`
/// (`Lmicroseconds`), in local time.
#[allow(unsafe_code)] // the one libc call: localtime_r
pub fn timestamp(micros: bool) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs() as i64;
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
    let (y, mo, d, h, mi, s) = match tm {
        Some(tm) => (
            i64::from(tm.tm_year) + 1900,
            (tm.tm_mon + 1) as u32,
            tm.tm_mday as u32,
            tm.tm_hour as u32,
            tm.tm_min as u32,
            tm.tm_sec.min(59) as u32,
        ),
        None => nsq_protocol::duration::civil_utc(secs),
    };
    let mut out = format!("{y:04}/{mo:02}/{d:02} {h:02}:{mi:02}:{s:02}");
    if micros {
        out.push_str(&format!(".{:06}", now.subsec_micros()));
    }
    out
}

/// `log.Print`: one stderr line with the timestamp (a trailing newline of
/// `msg` is not doubled).
pub fn log(msg: impl std::fmt::Display) {
    let msg = msg.to_string();
    let line = format!(
        "{} {}\n",
        timestamp(false),
        msg.strip_suffix('\n').unwrap_or(&msg)
    );
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// `log.Fatal`: [`log`], then exit 1.
pub fn fatal(msg: impl std::fmt::Display) -> ! {
    log(msg);
    std::process::exit(1)
}

#[cfg(test)]
mod tests {
    #[test]
    fn timestamp_layout() {
        let t = super::timestamp(true);
        let b = t.as_bytes();
        assert_eq!(t.len(), "2006/01/02 15:04:05.000000".len(), "{t}");
        assert_eq!(
            (b[4], b[7], b[10], b[13], b[16], b[19]),
            (b'/', b'/', b' ', b':', b':', b'.')
        );
        assert_eq!(super::timestamp(false).len(), 19);
    }
}

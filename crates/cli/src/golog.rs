//! Go's standard `log` package as NSQ's apps use it: `log.Print` writes
//! `2006/01/02 15:04:05 message` to stderr, `log.Fatal` adds exit status 1.
//! Timestamps are local time (`crate::sys::LocalTime`, which honours `TZ`
//! and `/etc/localtime` as Go does).

use std::io::Write;

/// `2006/01/02 15:04:05` (`Ldate|Ltime`), plus `.000000` when `micros`
/// (`Lmicroseconds`), in local time.
pub fn timestamp(micros: bool) -> String {
    let t = crate::sys::LocalTime::now();
    let mut out = format!(
        "{:04}/{:02}/{:02} {:02}:{:02}:{:02}",
        t.year, t.month, t.day, t.hour, t.minute, t.second
    );
    if micros {
        out.push_str(&format!(".{:06}", t.nanos / 1000));
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

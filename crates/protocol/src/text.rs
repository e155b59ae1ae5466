//! Small byte/text helpers that reproduce Go standard-library behaviour the
//! wire depends on: `strings.TrimSpace` on raw (possibly non-UTF-8) lines and
//! Unicode case-insensitive comparison (`strings.EqualFold`).
//!
//! Never: allocation-heavy or I/O; these run on every command line.

/// Go's `strings.TrimSpace` on bytes: strips leading and trailing Unicode
/// white space; invalid UTF-8 is never white space.
pub fn trim_space(mut b: &[u8]) -> &[u8] {
    while let Some((c, n)) = first_char(b) {
        if !c.is_whitespace() {
            break;
        }
        b = &b[n..];
    }
    while let Some((c, n)) = last_char(b) {
        if !c.is_whitespace() {
            break;
        }
        b = &b[..b.len() - n];
    }
    b
}

/// The first UTF-8 character of `b` and its length, if `b` starts with one.
fn first_char(b: &[u8]) -> Option<(char, usize)> {
    let head = &b[..b.len().min(4)];
    let valid = match std::str::from_utf8(head) {
        Ok(s) => s,
        Err(e) => std::str::from_utf8(&head[..e.valid_up_to()]).ok()?,
    };
    valid.chars().next().map(|c| (c, c.len_utf8()))
}

/// The last UTF-8 character of `b` and its length, if `b` ends with one.
fn last_char(b: &[u8]) -> Option<(char, usize)> {
    for n in 1..=b.len().min(4) {
        if let Ok(s) = std::str::from_utf8(&b[b.len() - n..]) {
            let mut chars = s.chars();
            let c = chars.next_back()?;
            return (chars.next().is_none()).then_some((c, n));
        }
    }
    None
}

/// Unicode simple case-insensitive equality, like Go's `strings.EqualFold`
/// (so `K` KELVIN SIGN equals `k`, `ſ` equals `s`).
pub fn fold_eq(a: &str, b: &str) -> bool {
    let mut a = a.chars();
    let mut b = b.chars();
    loop {
        match (a.next(), b.next()) {
            (None, None) => return true,
            (Some(x), Some(y)) if chars_fold_eq(x, y) => {}
            _ => return false,
        }
    }
}

fn chars_fold_eq(x: char, y: char) -> bool {
    x == y || x.to_lowercase().eq(y.to_lowercase()) || x.to_uppercase().eq(y.to_uppercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_like_go() {
        assert_eq!(trim_space(b"  PING  \r\n"), b"PING");
        assert_eq!(trim_space(b"\t\x0b\x0cX\xc2\xa0"), b"X");
        assert_eq!(trim_space(b"\xe3\x80\x80X\xe2\x80\xa8"), b"X");
        assert_eq!(trim_space(b""), b"");
        assert_eq!(trim_space(b" \n "), b"");
        // Invalid UTF-8 is kept, never treated as space.
        assert_eq!(trim_space(b" \xff \xa0"), b"\xff \xa0");
    }

    #[test]
    fn folds_like_go() {
        assert!(fold_eq("Broadcast_Address", "broadcast_address"));
        assert!(fold_eq("loo\u{212a}up", "lookup"));
        assert!(fold_eq("\u{17f}", "S"));
        assert!(!fold_eq("lookup", "lookups"));
        assert!(!fold_eq("a", "b"));
    }
}

//! Go library behaviour nsqadmin depends on beyond `nsq_protocol::gofmt`:
//! the semantic-version ordering used for `out_of_date` and URL escaping.
//!
//! Pure functions only: no I/O, no clock.

use std::cmp::Ordering;

/// A semantic version as blang/semver parses it (`MAJOR.MINOR.PATCH[-pre][+build]`);
/// anything else is `0.0.0`, as nsqadmin treats unparsable versions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Semver {
    major: u64,
    minor: u64,
    patch: u64,
    pre: Vec<String>,
}

impl Semver {
    pub fn parse(s: &str) -> Semver {
        Self::try_parse(s).unwrap_or_default()
    }

    fn try_parse(s: &str) -> Option<Semver> {
        let s = s.split_once('+').map_or(s, |(v, _)| v);
        let (core, pre) = match s.split_once('-') {
            Some((c, p)) => (c, p.split('.').map(str::to_string).collect::<Vec<_>>()),
            None => (s, Vec::new()),
        };
        if pre.iter().any(|p| p.is_empty()) {
            return None;
        }
        let mut parts = core.split('.');
        let num = |p: Option<&str>| -> Option<u64> {
            let p = p?;
            if p.is_empty()
                || (p.len() > 1 && p.starts_with('0'))
                || !p.bytes().all(|b| b.is_ascii_digit())
            {
                return None;
            }
            p.parse().ok()
        };
        let v = Semver {
            major: num(parts.next())?,
            minor: num(parts.next())?,
            patch: num(parts.next())?,
            pre,
        };
        parts.next().is_none().then_some(v)
    }
}

impl PartialOrd for Semver {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Semver {
    fn cmp(&self, other: &Self) -> Ordering {
        let core =
            (self.major, self.minor, self.patch).cmp(&(other.major, other.minor, other.patch));
        if core != Ordering::Equal {
            return core;
        }
        match (self.pre.is_empty(), other.pre.is_empty()) {
            (true, true) => return Ordering::Equal,
            (true, false) => return Ordering::Greater,
            (false, true) => return Ordering::Less,
            _ => {}
        }
        for (a, b) in self.pre.iter().zip(other.pre.iter()) {
            let ord = match (a.parse::<u64>(), b.parse::<u64>()) {
                (Ok(x), Ok(y)) => x.cmp(&y),
                (Ok(_), Err(_)) => Ordering::Less,
                (Err(_), Ok(_)) => Ordering::Greater,
                _ => a.cmp(b),
            };
            if ord != Ordering::Equal {
                return ord;
            }
        }
        self.pre.len().cmp(&other.pre.len())
    }
}

/// Go's `url.QueryEscape`.
pub fn query_escape(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// `%XX` decoding (invalid escapes are kept as written).
pub fn percent_decode(s: &str) -> Vec<u8> {
    fn hex(c: u8) -> Option<u8> {
        (c as char).to_digit(16).map(|d| d as u8)
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push(h << 4 | l);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn semver_order() {
        assert!(Semver::parse("1.3.0") > Semver::parse("1.2.1"));
        assert!(Semver::parse("1.3.0") > Semver::parse("1.3.0-alpha"));
        assert!(Semver::parse("1.3.0-alpha.2") > Semver::parse("1.3.0-alpha.1"));
        assert_eq!(Semver::parse("1.3"), Semver::default());
        assert_eq!(Semver::parse("junk"), Semver::parse("0.0.0"));
        assert_eq!(Semver::parse("1.3.0+build"), Semver::parse("1.3.0"));
    }

    #[test]
    fn host_port() {
        assert_eq!(query_escape("a b&c"), "a+b%26c");
        assert_eq!(percent_decode("a%3Ab%2"), b"a:b%2");
    }
}

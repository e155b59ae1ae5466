//! The semantic-version ordering nsqadmin uses for `out_of_date`
//! (blang/semver's, as Go's nsqadmin compares versions).
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
}

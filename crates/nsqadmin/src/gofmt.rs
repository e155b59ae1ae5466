//! Text the way Go's nsqadmin writes it, where clients can see the difference:
//! `%q`-quoted upstream bodies inside error messages, `encoding/json` output
//! (`<`, `>`, `&`, U+2028/U+2029 escaped; floats without a needless `.0`),
//! and the semantic-version ordering used for `out_of_date`.
//!
//! Pure functions only: no I/O, no clock.

use std::cmp::Ordering;
use std::io;

use serde::Serialize;
use serde_json::ser::Formatter;

/// Go's `strconv.Quote` over raw bytes: `"` and `\` escaped, the usual C
/// escapes, other control characters as `\xNN`/`\uNNNN`, invalid UTF-8 bytes as `\xNN`.
pub fn quote(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() + 2);
    out.push('"');
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\u{7}' => out.push_str("\\a"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{b}' => out.push_str("\\v"),
                c if (c as u32) < 0x20 || c == '\u{7f}' => {
                    out.push_str(&format!("\\x{:02x}", c as u32))
                }
                c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out.push('"');
    out
}

/// A serde_json formatter that writes what Go's `encoding/json` writes.
#[derive(Default)]
pub struct GoFormatter;

impl Formatter for GoFormatter {
    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let mut last = 0;
        for (i, c) in fragment.char_indices() {
            let esc = match c {
                '<' => "\\u003c",
                '>' => "\\u003e",
                '&' => "\\u0026",
                '\u{2028}' => "\\u2028",
                '\u{2029}' => "\\u2029",
                _ => continue,
            };
            w.write_all(&fragment.as_bytes()[last..i])?;
            w.write_all(esc.as_bytes())?;
            last = i + c.len_utf8();
        }
        w.write_all(&fragment.as_bytes()[last..])
    }

    fn write_f64<W: ?Sized + io::Write>(&mut self, w: &mut W, value: f64) -> io::Result<()> {
        w.write_all(go_float(value).as_bytes())
    }

    fn write_f32<W: ?Sized + io::Write>(&mut self, w: &mut W, value: f32) -> io::Result<()> {
        w.write_all(go_float(value as f64).as_bytes())
    }
}

/// A float as Go's `encoding/json` prints it: shortest representation,
/// no exponent between 1e-6 and 1e21, `e-7`/`e+21` style otherwise.
pub fn go_float(v: f64) -> String {
    if !v.is_finite() {
        // Go refuses to encode these; 0 keeps the document valid.
        return "0".into();
    }
    let abs = v.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let s = format!("{v:e}");
        // Rust writes `1e21`/`1e-7`; Go writes `1e+21`/`1e-07` and then trims `e-0N` to `e-N`.
        return match s.split_once('e') {
            Some((m, e)) if !e.starts_with('-') => format!("{m}e+{e}"),
            _ => s,
        };
    }
    format!("{v}")
}

/// Serializes `v` as Go's `json.Marshal` would (compact).
pub fn to_json<T: Serialize + ?Sized>(v: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    let mut ser = serde_json::Serializer::with_formatter(&mut out, GoFormatter);
    if let Err(e) = v.serialize(&mut ser) {
        // Only possible for maps with non-string keys, which nsqadmin never builds.
        tracing::error!(error = %e, "failed to serialize JSON response");
        return br#"{"message":"INTERNAL_ERROR"}"#.to_vec();
    }
    out
}

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

/// Go's `net.JoinHostPort`: brackets around hosts that contain `:`.
pub fn join_host_port(host: &str, port: i64) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
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
    fn quote_like_go() {
        assert_eq!(
            quote(br#"{"message":"TOPIC_NOT_FOUND"}"#),
            r#""{\"message\":\"TOPIC_NOT_FOUND\"}""#
        );
        assert_eq!(quote(b"a\nb\t\x01\xff"), r#""a\nb\t\x01\xff""#);
        assert_eq!(quote("é".as_bytes()), "\"é\"");
    }

    #[test]
    fn json_like_go() {
        let v = serde_json::json!({"m": "a<b>&c", "f": 123456.0, "g": 0.99, "h": 1e-7, "i": 1e21});
        assert_eq!(
            String::from_utf8(to_json(&v)).unwrap(),
            r#"{"f":123456,"g":0.99,"h":1e-7,"i":1e+21,"m":"a\u003cb\u003e\u0026c"}"#
        );
    }

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
        assert_eq!(join_host_port("::1", 4151), "[::1]:4151");
        assert_eq!(join_host_port("h", 1), "h:1");
        assert_eq!(query_escape("a b&c"), "a+b%26c");
        assert_eq!(percent_decode("a%3Ab%2"), b"a:b%2");
    }
}

//! URL and header text as Go's `net/url` and `net/http` write and read it:
//! query escaping, `url.ParseQuery` and path unescaping (whose errors decide
//! between a handler's answer and 400 `INVALID_REQUEST`), resolving a
//! redirect's `Location`, and the base64 of basic authentication. Pure
//! functions.

/// The URL base of a daemon's HTTP address as the tools take it:
/// `host:port` is plain HTTP, as in NSQ; `http://host:port` and (nsq-rs)
/// `https://host:port` name the scheme. A trailing `/` is dropped.
pub fn base_url(addr: &str) -> String {
    if addr.starts_with("http://") || addr.starts_with("https://") {
        addr.trim_end_matches('/').to_string()
    } else {
        format!("http://{addr}")
    }
}

/// Go's `url.QueryEscape`: everything but `A-Z a-z 0-9 - _ . ~` is
/// `%XX`-escaped, and space becomes `+`.
pub fn query_escape(s: impl AsRef<[u8]>) -> String {
    let b = s.as_ref();
    let mut out = String::with_capacity(b.len() * 3);
    for &c in b {
        match c {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(c as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{c:02X}")),
        }
    }
    out
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

/// Resolves a `Location` against the URL that answered (RFC 3986 §5.2 for
/// the forms servers send: absolute, `//authority/...`, `/path`, `?query`,
/// relative path). Fragments are dropped.
pub fn resolve(base: &str, location: &str) -> String {
    let location = location.split('#').next().unwrap_or_default();
    if let Some(i) = location.find("://") {
        if location[..i]
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
            && i > 0
        {
            return location.to_string();
        }
    }
    let (scheme, rest) = base.split_once("://").unwrap_or(("http", base));
    if let Some(auth_path) = location.strip_prefix("//") {
        return format!("{scheme}://{auth_path}");
    }
    let auth_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..auth_end];
    let path_query = &rest[auth_end..];
    let (base_path, _) = path_query.split_once('?').unwrap_or((path_query, ""));
    if location.starts_with('/') {
        let (p, q) = split_query(location);
        return format!("{scheme}://{authority}{}{q}", remove_dot_segments(p));
    }
    if location.starts_with('?') {
        return format!("{scheme}://{authority}{base_path}{location}");
    }
    if location.is_empty() {
        return format!("{scheme}://{authority}{path_query}");
    }
    let dir = match base_path.rfind('/') {
        Some(i) => &base_path[..=i],
        None => "/",
    };
    let (p, q) = split_query(location);
    format!(
        "{scheme}://{authority}{}{q}",
        remove_dot_segments(&format!("{dir}{p}"))
    )
}

fn split_query(s: &str) -> (&str, &str) {
    match s.find('?') {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, ""),
    }
}

fn remove_dot_segments(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    let segs: Vec<&str> = path.split('/').collect();
    for (i, seg) in segs.iter().enumerate() {
        let last = i == segs.len() - 1;
        match *seg {
            "." => {
                if last {
                    out.push("");
                }
            }
            ".." => {
                if out.len() > 1 {
                    out.pop();
                }
                if last {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    let joined = out.join("/");
    if joined.starts_with('/') {
        joined
    } else {
        format!("/{joined}")
    }
}

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 (basic authentication).
pub fn base64(input: &[u8]) -> String {
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        out.push(BASE64[(n >> 18) as usize & 63] as char);
        out.push(BASE64[(n >> 12) as usize & 63] as char);
        out.push(if chunk.len() > 1 {
            BASE64[(n >> 6) as usize & 63] as char
        } else {
            '='
        });
        out.push(if chunk.len() > 2 {
            BASE64[n as usize & 63] as char
        } else {
            '='
        });
    }
    out
}

/// Decodes standard base64 (a request's basic-auth credentials).
pub fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let val = |c: u8| -> Option<u32> { BASE64.iter().position(|&b| b == c).map(|p| p as u32) };
    let s = s.as_bytes();
    if s.chunks(4).any(|c| c.len() != 4) {
        return None;
    }
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    for chunk in s.chunks(4) {
        let pad = chunk.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 {
            return None;
        }
        let mut n = 0u32;
        for &c in &chunk[..4 - pad] {
            n = (n << 6) | val(c)?;
        }
        n <<= 6 * pad as u32;
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    Some(out)
}

/// A malformed query string or path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("invalid URL escape {0:?}")]
    Escape(String),
    #[error("invalid semicolon separator in query")]
    Semicolon,
}

/// Parsed query parameters, in order of appearance.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Params(Vec<(String, String)>);

impl Params {
    /// Go's `url.ParseQuery`. Like Go, an error anywhere fails the whole query.
    pub fn parse(raw: &str) -> Result<Self, UrlError> {
        let mut out = Vec::new();
        for pair in raw.split('&') {
            if pair.contains(';') {
                return Err(UrlError::Semicolon);
            }
            if pair.is_empty() {
                continue;
            }
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            out.push((unescape(k, true)?, unescape(v, true)?));
        }
        Ok(Params(out))
    }

    /// The first value of `key`, if present (an empty value counts).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Go's path unescaping (`url.PathUnescape` semantics: `+` stays `+`).
pub fn unescape_path(raw: &str) -> Result<String, UrlError> {
    unescape(raw, false)
}

/// `%XX` decoding; `plus_is_space` for query components. Decoded bytes that
/// are not UTF-8 become U+FFFD (such names can never be valid anyway).
fn unescape(s: &str, plus_is_space: bool) -> Result<String, UrlError> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = |j: usize| b.get(j).and_then(|c| (*c as char).to_digit(16));
                match (hex(i + 1), hex(i + 2)) {
                    (Some(hi), Some(lo)) => {
                        // Two hex digits always fit in a byte.
                        out.push((hi * 16 + lo) as u8);
                        i += 3;
                    }
                    _ => {
                        let end = (i + 3).min(b.len());
                        return Err(UrlError::Escape(
                            String::from_utf8_lossy(&b[i..end]).into_owned(),
                        ));
                    }
                }
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Ok(String::from_utf8(out)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls() {
        assert_eq!(base_url("h:1"), "http://h:1");
        assert_eq!(base_url("http://h:1/"), "http://h:1");
        assert_eq!(base_url("https://h:1"), "https://h:1");
    }

    #[test]
    fn query_escape_is_gos() {
        assert_eq!(query_escape("a b&c=d/e~f*g"), "a+b%26c%3Dd%2Fe~f%2Ag");
        assert_eq!(query_escape("é"), "%C3%A9");
        assert_eq!(percent_decode("a%3Ab%2"), b"a:b%2");
    }

    #[test]
    fn location_resolution() {
        assert_eq!(resolve("http://h:1/a/b?x", "http://o/p"), "http://o/p");
        assert_eq!(resolve("http://h:1/a/b?x", "//o:2/p"), "http://o:2/p");
        assert_eq!(resolve("http://h:1/a/b?x", "/c?d"), "http://h:1/c?d");
        assert_eq!(resolve("http://h:1/a/b?x", "c"), "http://h:1/a/c");
        assert_eq!(resolve("http://h:1/a/b?x", "../c"), "http://h:1/c");
        assert_eq!(resolve("http://h:1/a/b?x", "?y"), "http://h:1/a/b?y");
        assert_eq!(resolve("http://h:1", "c"), "http://h:1/c");
    }

    #[test]
    fn base64_roundtrip() {
        for s in ["", "a", "ab", "abc", "user:pass", "ÿþ"] {
            assert_eq!(base64_decode(&base64(s.as_bytes())).unwrap(), s.as_bytes());
        }
        assert_eq!(base64(b"user:pass"), "dXNlcjpwYXNz");
        assert_eq!(base64_decode("a"), None);
    }

    #[test]
    fn parses_like_go() {
        let p = Params::parse("topic=a%2Fb&x&topic=second&c=d+e&&=v").unwrap();
        assert_eq!(p.get("topic"), Some("a/b"));
        assert_eq!(p.get("x"), Some(""));
        assert_eq!(p.get("c"), Some("d e"));
        assert_eq!(p.get(""), Some("v"));
        assert_eq!(p.get("missing"), None);
        assert_eq!(Params::parse("").unwrap(), Params::default());
    }

    #[test]
    fn errors_like_go() {
        assert_eq!(Params::parse("topic=a;b"), Err(UrlError::Semicolon));
        assert_eq!(
            Params::parse("topic=%zz"),
            Err(UrlError::Escape("%zz".into()))
        );
        assert_eq!(
            Params::parse("ok=1&topic=%4"),
            Err(UrlError::Escape("%4".into()))
        );
        assert_eq!(Params::parse("%g1=x"), Err(UrlError::Escape("%g1".into())));
    }

    #[test]
    fn paths() {
        assert_eq!(unescape_path("/p%69ng").unwrap(), "/ping");
        assert_eq!(unescape_path("/a+b").unwrap(), "/a+b");
        assert!(unescape_path("/%").is_err());
    }
}

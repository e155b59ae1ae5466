//! URL decoding with Go's `net/url` rules, which decide between a handler's
//! answer and 400 `INVALID_REQUEST`.
//!
//! Owns: `url.ParseQuery` (a `;` in a pair or a bad `%` escape anywhere is an
//! error; `+` is a space; only the first value of a key is used) and path
//! unescaping. Never: routing or validation of names.

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

//! Text the way Go's standard library writes it, wherever a user or a
//! client can see the difference: `strconv.Quote` (`%q`) for quoted names
//! and bodies in error messages, and `encoding/json` output.
//!
//! Owns the one Go quoter and the one Go-compatible JSON formatter of the
//! workspace. Never: parsing JSON (serde_json does that), I/O.
//!
//! Why not plain serde_json for output: Go escapes `<`, `>`, `&` as
//! `\u003c`, `\u003e`, `\u0026`, U+2028/U+2029 as `\u2028`/`\u2029`, and
//! control characters other than `\n`, `\r`, `\t` as `\u00XX` (NSQ 1.3.0 is
//! built with a Go that has no `\b`/`\f` short forms), and prints floats
//! without a needless `.0` (`123456`, `1e+21`). serde_json does none of
//! that, and names, hostnames and bodies in these documents come from the
//! network.

use std::io;

use serde::Serialize;
use serde_json::ser::{CharEscape, Formatter};

/// Go's `strconv.Quote` of a string.
pub fn quote(s: &str) -> String {
    quote_bytes(s.as_bytes())
}

/// Go's `strconv.Quote` over raw bytes (what `%q` prints for a `[]byte`):
/// `"` and `\` escaped, the C escapes `\a \b \f \n \r \t \v`, other control
/// characters as `\xNN` (below U+0080) or `\uNNNN`, and each byte that is
/// not part of valid UTF-8 as `\xNN`.
pub fn quote_bytes(bytes: &[u8]) -> String {
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

/// An OS error's text as Go's `syscall.Errno` prints it: lower-case, no
/// ` (os error N)` (`no such file or directory`, `address already in use`).
pub fn errno_text(e: &io::Error) -> String {
    let s = e.to_string();
    let s = match s.find(" (os error") {
        Some(i) if e.raw_os_error().is_some() => s[..i].to_string(),
        _ => s,
    };
    let mut c = s.chars();
    match c.next() {
        Some(first) => first.to_lowercase().collect::<String>() + c.as_str(),
        None => s,
    }
}

/// Go's `net.Listen("tcp", addr)` error text, e.g. `listen tcp
/// 0.0.0.0:4160: bind: address already in use`: what NSQ's daemons print
/// after `listen (<addr>) failed - `.
pub fn listen_error(addr: &str, e: &io::Error) -> String {
    if !addr.contains(':') {
        return format!("listen tcp: address {addr}: missing port in address");
    }
    let text = errno_text(e);
    if e.raw_os_error().is_some() {
        format!("listen tcp {addr}: bind: {text}")
    } else {
        format!("listen tcp {addr}: {text}")
    }
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

    fn write_char_escape<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        escape: CharEscape,
    ) -> io::Result<()> {
        let s: &[u8] = match escape {
            CharEscape::Quote => b"\\\"",
            CharEscape::ReverseSolidus => b"\\\\",
            CharEscape::Solidus => b"\\/",
            CharEscape::LineFeed => b"\\n",
            CharEscape::CarriageReturn => b"\\r",
            CharEscape::Tab => b"\\t",
            CharEscape::Backspace => b"\\u0008",
            CharEscape::FormFeed => b"\\u000c",
            CharEscape::AsciiControl(byte) => {
                return write!(w, "\\u{:04x}", byte);
            }
        };
        w.write_all(s)
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
        // Rust writes `1e21`/`1e-7`; Go writes `1e+21`/`1e-7`.
        return match s.split_once('e') {
            Some((m, e)) if !e.starts_with('-') => format!("{m}e+{e}"),
            _ => s,
        };
    }
    format!("{v}")
}

/// Serializes `v` as Go's `json.Marshal` would (compact). Serializing
/// the workspace's own types cannot fail (no maps with non-string keys);
/// if it ever did, the document is `null` rather than half written.
pub fn to_json<T: Serialize + ?Sized>(v: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    let mut ser = serde_json::Serializer::with_formatter(&mut out, GoFormatter);
    if v.serialize(&mut ser).is_err() {
        return b"null".to_vec();
    }
    out
}

/// [`to_json`] as a `String` (Go's JSON is always UTF-8).
pub fn to_json_string<T: Serialize + ?Sized>(v: &T) -> String {
    String::from_utf8_lossy(&to_json(v)).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_errors_read_like_go() {
        let e = io::Error::from_raw_os_error(98);
        assert_eq!(
            listen_error("0.0.0.0:4160", &e),
            "listen tcp 0.0.0.0:4160: bind: address already in use"
        );
        assert_eq!(
            listen_error("foo", &e),
            "listen tcp: address foo: missing port in address"
        );
    }

    #[test]
    fn quote_like_go() {
        assert_eq!(
            quote_bytes(br#"{"message":"TOPIC_NOT_FOUND"}"#),
            r#""{\"message\":\"TOPIC_NOT_FOUND\"}""#
        );
        assert_eq!(quote_bytes(b"a\nb\t\x01\xff"), r#""a\nb\t\x01\xff""#);
        assert_eq!(quote("é"), "\"é\"");
        assert_eq!(quote("\u{7}\u{8}\u{c}\u{b}\u{7f}"), r#""\a\b\f\v\x7f""#);
        assert_eq!(quote("\u{85}"), r#""\u0085""#);
        assert_eq!(quote("bad!topic"), "\"bad!topic\"");
        assert_eq!(
            errno_text(&io::Error::from_raw_os_error(2)),
            "no such file or directory"
        );
    }

    #[test]
    fn json_like_go() {
        let v = serde_json::json!({"m": "a<b>&c", "f": 123456.0, "g": 0.99, "h": 1e-7, "i": 1e21});
        assert_eq!(
            to_json_string(&v),
            r#"{"f":123456,"g":0.99,"h":1e-7,"i":1e+21,"m":"a\u003cb\u003e\u0026c"}"#
        );
        let s = |v: &str| to_json_string(v);
        assert_eq!(s("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(s("\n\r\t"), r#""\n\r\t""#);
        assert_eq!(s("\u{8}\u{c}\u{1}\u{1f}"), r#""\u0008\u000c\u0001\u001f""#);
        assert_eq!(s("\u{2028}\u{2029}"), r#""\u2028\u2029""#);
        assert_eq!(s("é\u{7f}"), "\"é\u{7f}\"");
    }
}

//! JSON output byte-compatible with Go's `encoding/json` as nsqlookupd 1.3.0
//! (built with go1.19) emits it.
//!
//! Owns: string escaping and a tiny object/array writer so every response
//! states its key order explicitly (struct order for structs, sorted for Go
//! maps). Never: parsing (IDENTIFY uses serde_json for that).
//!
//! Why not serde_json for output: Go escapes `<`, `>`, `&` as `\u003c`,
//! `\u003e`, `\u0026`, U+2028/U+2029 as `\u2028`/`\u2029`, and control
//! characters other than `\n`, `\r`, `\t` as `\u00XX` (lowercase hex; go1.19
//! has no `\b`/`\f` short forms). serde_json does none of that, and peer
//! strings (hostname, broadcast address, version) come from the network.

use std::fmt::Write as _;

/// Appends `s` as a Go-escaped JSON string literal.
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    for c in s.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => push_unicode_escape(out, c),
            c if (c as u32) < 0x20 => push_unicode_escape(out, c),
            c => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out.push(b'"');
}

fn push_unicode_escape(out: &mut Vec<u8>, c: char) {
    let mut s = String::with_capacity(6);
    // Writing to a String cannot fail.
    let _ = write!(s, "\\u{:04x}", c as u32);
    out.extend_from_slice(s.as_bytes());
}

fn write_int(out: &mut Vec<u8>, v: i64) {
    out.extend_from_slice(v.to_string().as_bytes());
}

/// Writes one JSON object; keys come out in call order.
pub struct Object<'a> {
    out: &'a mut Vec<u8>,
    empty: bool,
}

impl<'a> Object<'a> {
    pub fn new(out: &'a mut Vec<u8>) -> Self {
        out.push(b'{');
        Self { out, empty: true }
    }

    fn key(&mut self, k: &str) -> &mut Vec<u8> {
        if !self.empty {
            self.out.push(b',');
        }
        self.empty = false;
        write_str(self.out, k);
        self.out.push(b':');
        self.out
    }

    pub fn str(&mut self, k: &str, v: &str) -> &mut Self {
        write_str(self.key(k), v);
        self
    }

    pub fn int(&mut self, k: &str, v: i64) -> &mut Self {
        write_int(self.key(k), v);
        self
    }

    pub fn bool(&mut self, k: &str, v: bool) -> &mut Self {
        self.key(k)
            .extend_from_slice(if v { b"true" } else { b"false" });
        self
    }

    /// A string array; empty is `[]` (the handlers never produce Go's `null`).
    pub fn str_array<S: AsRef<str>>(&mut self, k: &str, items: &[S]) -> &mut Self {
        let out = self.key(k);
        array(out, items, |out, s| write_str(out, s.as_ref()));
        self
    }

    pub fn bool_array(&mut self, k: &str, items: &[bool]) -> &mut Self {
        let out = self.key(k);
        array(out, items, |out, b| {
            out.extend_from_slice(if *b { b"true" } else { b"false" })
        });
        self
    }

    /// Any other value, written by `f`.
    pub fn raw(&mut self, k: &str, f: impl FnOnce(&mut Vec<u8>)) -> &mut Self {
        f(self.key(k));
        self
    }

    pub fn finish(self) {
        self.out.push(b'}');
    }
}

/// Writes `[item,item,...]`.
pub fn array<T>(out: &mut Vec<u8>, items: &[T], mut f: impl FnMut(&mut Vec<u8>, &T)) {
    out.push(b'[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        f(out, item);
    }
    out.push(b']');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> String {
        let mut out = Vec::new();
        write_str(&mut out, v);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn escapes_like_go() {
        assert_eq!(s("plain"), r#""plain""#);
        assert_eq!(s("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(s("<a&b>"), r#""\u003ca\u0026b\u003e""#);
        assert_eq!(s("\n\r\t"), r#""\n\r\t""#);
        assert_eq!(s("\u{8}\u{c}\u{1}\u{1f}"), r#""\u0008\u000c\u0001\u001f""#);
        assert_eq!(s("\u{2028}\u{2029}"), r#""\u2028\u2029""#);
        assert_eq!(s("é\u{7f}"), "\"é\u{7f}\"");
    }

    #[test]
    fn object_in_call_order() {
        let mut out = Vec::new();
        let mut o = Object::new(&mut out);
        o.str("b", "x")
            .int("a", -5)
            .bool("c", true)
            .str_array::<&str>("d", &[])
            .bool_array("e", &[false, true]);
        o.finish();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"b":"x","a":-5,"c":true,"d":[],"e":[false,true]}"#
        );
    }
}

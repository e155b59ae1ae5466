//! Text codec for `<name>.diskqueue.meta.dat`.
//!
//! The layout is three `\n`-terminated lines of decimal integers:
//! `depth`, `readFileNum,readPos`, `writeFileNum,writePos`. go-diskqueue
//! reads it with a `Fscanf`-style scan, so the parser here accepts what that
//! scan accepts in practice (optional sign, blanks before a number or a line
//! end, `\r\n`, missing final newline, trailing junk after line three) and
//! reports partial progress the same way: positions parsed before the first
//! error keep their values, while depth is only taken from a fully parsed
//! file (Go scans depth into a temporary that is dropped on error).

use std::fmt;

/// Persistent queue state as stored in the metadata file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Meta {
    pub depth: i64,
    pub read_file_num: i64,
    pub read_pos: i64,
    pub write_file_num: i64,
    pub write_pos: i64,
}

impl Meta {
    /// Exact bytes go-diskqueue writes (`%d\n%d,%d\n%d,%d\n`).
    pub(crate) fn encode(&self) -> String {
        format!(
            "{}\n{},{}\n{},{}\n",
            self.depth, self.read_file_num, self.read_pos, self.write_file_num, self.write_pos
        )
    }
}

/// Why a metadata file could not be fully parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParseError {
    pub offset: usize,
    pub what: &'static str,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at byte {}", self.what, self.offset)
    }
}

/// Parses metadata text. On error the returned `Meta` still carries the
/// positions that were parsed before the failure (depth stays 0).
pub(crate) fn parse(text: &[u8]) -> (Meta, Result<(), ParseError>) {
    let mut meta = Meta::default();
    let mut sc = Scanner { buf: text, pos: 0 };
    let res = (|| {
        let depth = sc.int()?;
        sc.line_end()?;
        meta.read_file_num = sc.int()?;
        sc.comma()?;
        meta.read_pos = sc.int()?;
        sc.line_end()?;
        meta.write_file_num = sc.int()?;
        sc.comma()?;
        meta.write_pos = sc.int()?;
        sc.line_end()?;
        meta.depth = depth;
        Ok(())
    })();
    (meta, res)
}

struct Scanner<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Scanner<'_> {
    fn err(&self, what: &'static str) -> ParseError {
        ParseError {
            offset: self.pos,
            what,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.buf.get(self.pos).copied()
    }

    fn skip_blanks(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.pos += 1;
        }
    }

    fn int(&mut self) -> Result<i64, ParseError> {
        self.skip_blanks();
        let negative = match self.peek() {
            Some(b'-') => {
                self.pos += 1;
                true
            }
            Some(b'+') => {
                self.pos += 1;
                false
            }
            _ => false,
        };
        let start = self.pos;
        let mut value: i64 = 0;
        while let Some(c @ b'0'..=b'9') = self.peek() {
            let digit = i64::from(c - b'0');
            // Accumulate towards the sign so that i64::MIN is representable.
            value = value
                .checked_mul(10)
                .and_then(|v| {
                    if negative {
                        v.checked_sub(digit)
                    } else {
                        v.checked_add(digit)
                    }
                })
                .ok_or_else(|| self.err("integer out of range"))?;
            self.pos += 1;
        }
        if self.pos == start {
            return Err(self.err("expected integer"));
        }
        Ok(value)
    }

    fn comma(&mut self) -> Result<(), ParseError> {
        if self.peek() == Some(b',') {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.err("expected ','"))
        }
    }

    fn line_end(&mut self) -> Result<(), ParseError> {
        self.skip_blanks();
        if self.peek() == Some(b'\r') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'\n') => {
                self.pos += 1;
                Ok(())
            }
            None => Ok(()),
            Some(_) => Err(self.err("expected newline")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_is_go_layout() {
        let m = Meta {
            depth: 11,
            read_file_num: 0,
            read_pos: 32,
            write_file_num: 0,
            write_pos: 390,
        };
        assert_eq!(m.encode(), "11\n0,32\n0,390\n");
        assert_eq!(Meta::default().encode(), "0\n0,0\n0,0\n");
    }

    #[test]
    fn parse_roundtrip() {
        let m = Meta {
            depth: -3,
            read_file_num: 12,
            read_pos: 7,
            write_file_num: 1_234_567,
            write_pos: i64::MAX,
        };
        let (p, r) = parse(m.encode().as_bytes());
        assert_eq!(r, Ok(()));
        assert_eq!(p, m);
        let (p, r) = parse(b"-9223372036854775808\n0,0\n0,0\n");
        assert_eq!(r, Ok(()));
        assert_eq!(p.depth, i64::MIN);
    }

    #[test]
    fn parse_tolerates_what_fscanf_tolerates() {
        let want = Meta {
            depth: 7,
            read_file_num: 0,
            read_pos: 0,
            write_file_num: 3,
            write_pos: 34,
        };
        for text in [
            "7\n0,0\n3,34\n",
            "7\n0,0\n3,34",
            " 7 \n+0,0\n3,34\nextra junk",
            "7\r\n0,0\r\n3,34\r\n",
        ] {
            let (p, r) = parse(text.as_bytes());
            assert_eq!(r, Ok(()), "{text:?}");
            assert_eq!(p, want, "{text:?}");
        }
    }

    #[test]
    fn partial_parse_keeps_positions_but_not_depth() {
        let (p, r) = parse(b"5\n2,100\n3,x\n");
        assert!(r.is_err());
        assert_eq!(
            p,
            Meta {
                depth: 0,
                read_file_num: 2,
                read_pos: 100,
                write_file_num: 3,
                write_pos: 0
            }
        );

        let (p, r) = parse(b"");
        assert!(r.is_err());
        assert_eq!(p, Meta::default());

        let (_, r) = parse(b"5\n2 ,100\n3,4\n");
        assert!(
            r.is_err(),
            "blank before a comma is not accepted by Fscanf either"
        );
        let (_, r) = parse(b"99999999999999999999\n0,0\n0,0\n");
        assert!(r.is_err());
    }
}

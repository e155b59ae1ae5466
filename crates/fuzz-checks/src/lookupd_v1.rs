//! nsqlookupd's V1 protocol (`nsq_protocol::lookupd`'s decoding, the session
//! logic of `nsqlookupd::tcp::v1`) driven by a byte stream the way the
//! connection shell (`tcp/mod.rs`, async, not pure) feeds it: 4-byte magic,
//! then `\n`-terminated lines; IDENTIFY is followed by a big-endian i32 size
//! and the JSON body. Every error is rendered with `wire()`. Never panics
//! (at most 10 000 lines per input).

use std::time::{Duration, Instant};

use nsq_protocol::lookupd::{self as v1, Command, V1Error, MAGIC_V1};
use nsqlookupd::registration::RegistrationDb;
use nsqlookupd::tcp::v1::Session;

fn err(e: V1Error) -> bool {
    let w = e.wire();
    assert!(!w.is_empty());
    let _ = v1::frame(&w);
    // the shell closes on fatal errors; keep going on the rest to cover more
    true
}

pub fn check(data: &[u8]) {
    // Half the inputs get the right magic so the parser is reached.
    let (magic_ok, mut rest) = match data.split_first() {
        Some((b, r)) if b & 1 == 0 => (true, r),
        Some((_, r)) => (
            r.len() >= 4 && &r[..4] == MAGIC_V1,
            r.get(4..).unwrap_or_default(),
        ),
        None => return,
    };
    if !magic_ok {
        return;
    }
    let mut db = RegistrationDb::new(Duration::from_secs(300), Duration::from_secs(45));
    let mut session = Session::new("127.0.0.1:4150".to_owned());
    let now = Instant::now();
    for _ in 0..10_000 {
        let Some(nl) = rest.iter().position(|&b| b == b'\n') else {
            break;
        };
        let line = &rest[..nl];
        rest = &rest[nl + 1..];
        let words = v1::split_line(line);
        let cmd = match Command::parse(&words) {
            Ok(c) => c,
            Err(e) => {
                err(e);
                continue;
            }
        };
        match cmd {
            Command::Ping => {
                let _ = v1::frame(session.ping(&mut db, now));
            }
            Command::Identify => {
                if let Err(e) = session.check_identify() {
                    err(e);
                    continue;
                }
                let [a, b, c, d, tail @ ..] = rest else {
                    break;
                };
                let size = i32::from_be_bytes([*a, *b, *c, *d]);
                rest = tail;
                let len = match v1::identify_body_len(size) {
                    Ok(n) => n,
                    Err(e) => {
                        err(e);
                        break;
                    }
                };
                if rest.len() < len {
                    break;
                }
                let body = &rest[..len];
                rest = &rest[len..];
                // The pure decoder on its own, then through the session.
                let _ = v1::decode_identify(body, "127.0.0.1:4150");
                if let Err(e) = session.identify(body, &mut db, now) {
                    err(e);
                }
            }
            Command::Register => {
                if let Err(e) = session.register(&words[1..], &mut db) {
                    err(e);
                }
            }
            Command::Unregister => {
                if let Err(e) = session.unregister(&words[1..], &mut db) {
                    err(e);
                }
            }
        }
    }
    session.close(&mut db);
}

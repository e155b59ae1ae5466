//! `nsq_protocol::command::decode` over arbitrary bytes: decode until
//! `Ok(None)` or an error, with a precheck that always proceeds and nsqd's
//! default limits. Never panics; every `Some` consumes at least one byte,
//! `None` consumes nothing, the total never exceeds the input; and feeding
//! the same bytes in two pieces yields the same commands (streaming contract).

use bytes::BytesMut;
use nsq_protocol::command::{decode, Command, Limits, Precheck};

/// Decodes `first` to the end; returns the commands, how it stopped (`true`
/// = error) and the bytes consumed. `pending` is appended when `decode`
/// first asks for more.
fn run(first: &[u8], mut pending: Option<&[u8]>, limits: &Limits) -> (Vec<Command>, bool, usize) {
    let total = first.len() + pending.map_or(0, |p| p.len());
    let mut buf = BytesMut::from(first);
    let mut out = Vec::new();
    let mut consumed = 0usize;
    // Each successful decode consumes >= 1 byte, so this bound is never hit
    // unless decode loops without progress.
    for _ in 0..=total + 1 {
        let before = buf.len();
        match decode(&mut buf, limits, |_, _| Ok(Precheck::Proceed)) {
            Ok(Some(cmd)) => {
                assert!(buf.len() < before, "Some(..) consumed nothing");
                consumed += before - buf.len();
                assert!(consumed <= total, "consumed more than given");
                out.push(cmd);
            }
            Ok(None) => {
                assert_eq!(buf.len(), before, "None must consume nothing");
                match pending.take() {
                    Some(p) => buf.extend_from_slice(p),
                    None => return (out, false, consumed),
                }
            }
            Err(_) => return (out, true, consumed),
        }
    }
    panic!("decode made no progress");
}

pub fn check(data: &[u8]) {
    let limits = Limits::default();
    let whole = run(data, None, &limits);
    let Some(&first) = data.first() else {
        return;
    };
    // Split point taken from the first byte, scaled over the input.
    let cut = (first as usize * data.len()) / 256;
    let (a, b) = data.split_at(cut);
    let split = run(a, Some(b), &limits);
    assert_eq!(
        whole, split,
        "result depends on how the bytes arrived (cut at {cut})"
    );
}

//! Deferrals longer than `--max-req-timeout` (nsq-rs, beyond NSQ):
//! `--max-defer-timeout` bounds DPUB and HTTP `/pub?defer=`; when it is not
//! set (0) `--max-req-timeout` does, byte for byte as NSQ 1.3. REQ stays
//! bounded by `--max-req-timeout` either way.

#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use nsq_tests::*;

const DAY_MS: i64 = 24 * 3600 * 1000;

fn setup(n: &Nsqd) {
    assert_eq!(n.post("/topic/create?topic=t", b"").status, 200);
    assert_eq!(n.post("/channel/create?topic=t&channel=c", b"").status, 200);
}

fn deferred(n: &Nsqd) -> i64 {
    int(
        &n.channel_stats("t", "c").expect("channel t/c"),
        "deferred_count",
    )
}

#[test]
fn by_default_dpub_is_bounded_by_max_req_timeout_as_in_nsq() {
    let n = Nsqd::start(&["--max-req-timeout=2h"]);
    setup(&n);
    let mut c = n.connect();
    c.send(&dpub_cmd("t", 2 * 3600 * 1000, b"ok"));
    assert_eq!(c.read_frame().text(), "OK");
    c.send(&dpub_cmd("t", DAY_MS, b"too long"));
    assert_eq!(
        c.read_frame().text(),
        "E_INVALID DPUB timeout 86400000 out of range 0-7200000"
    );
    let r = n.post(&format!("/pub?topic=t&defer={DAY_MS}"), b"too long");
    assert_eq!(
        (r.status, r.text().as_str()),
        (400, r#"{"message":"INVALID_DEFER"}"#)
    );
    assert_eq!(n.get("/config/max_defer_timeout").text(), "0");
}

#[test]
fn max_defer_timeout_allows_a_day_over_tcp_and_http_while_req_keeps_its_bound() {
    let n = Nsqd::start(&["--max-defer-timeout=48h", "--max-req-timeout=2s"]);
    setup(&n);
    let mut p = n.connect();
    p.send(&dpub_cmd("t", DAY_MS, b"tomorrow"));
    assert_eq!(p.read_frame().text(), "OK");
    let r = n.post(&format!("/pub?topic=t&defer={DAY_MS}"), b"tomorrow too");
    assert_eq!((r.status, r.text().as_str()), (200, "OK"));
    p.send(&dpub_cmd("t", 49 * 3600 * 1000, b"too long"));
    assert_eq!(
        p.read_frame().text(),
        "E_INVALID DPUB timeout 176400000 out of range 0-172800000"
    );
    assert_eq!(deferred(&n), 2, "both long deferrals wait");
    assert_eq!(n.get("/config/max_defer_timeout").text(), "172800000000000");

    // REQ is still clamped to --max-req-timeout (2 s); E_INVALID closed p
    let mut p = n.connect();
    p.send(&pub_cmd("t", b"requeued"));
    assert_eq!(p.read_frame().text(), "OK");
    let mut c = n.connect();
    c.sub("t", "c");
    c.rdy(1);
    let m = recv_msgs(&mut c, 1, Duration::from_secs(5), false).remove(0);
    assert_eq!(m.body_str(), "requeued");
    let t0 = Instant::now();
    c.req(&m.id, DAY_MS);
    let again = recv_msgs(&mut c, 1, Duration::from_secs(10), false).remove(0);
    assert_eq!(again.body_str(), "requeued");
    assert!(
        t0.elapsed() < Duration::from_secs(6),
        "REQ clamped to --max-req-timeout: {:?}",
        t0.elapsed()
    );
    c.fin(&again.id);
    assert_eq!(deferred(&n), 2, "the day-long ones still wait");
}

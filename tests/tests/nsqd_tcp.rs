//! nsqd TCP V2 protocol, black-box, against the spec
//! (/work/shared/spec/README.md checklist items 1–65, tcp-protocol.md).
//!
//! Each test starts its own nsqd on free ports with a fresh data path.
//! Timing assertions are one-sided or generous ("not before X", "within X + several s").

#![forbid(unsafe_code)]

use nsq_tests::*;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Connect, send `bytes`, expect exactly `F(1,msg)` + close, then check the daemon still serves.
fn fatal_after(n: &Nsqd, bytes: &[u8], msg: &str) {
    let mut c = n.connect();
    c.send(bytes);
    c.expect_error_fatal(msg);
    n.assert_alive();
}

/// SUB t c on a fresh connection, then send `bytes`, expect fatal `msg`.
fn fatal_after_sub(n: &Nsqd, bytes: &[u8], msg: &str) {
    let mut c = n.connect();
    c.sub("t", "c");
    c.send(bytes);
    c.expect_error_fatal(msg);
    n.assert_alive();
}

/// A subscribed consumer on t/c with RDY `rdy`.
fn consumer(n: &Nsqd, topic: &str, channel: &str, rdy: i64) -> Conn {
    let mut c = n.connect();
    c.sub(topic, channel);
    if rdy > 0 {
        c.rdy(rdy);
    }
    c
}

/// A publisher connection.
fn publisher(n: &Nsqd) -> Conn {
    n.connect()
}

fn wait_channel(n: &Nsqd, t: &str, c: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    wait_for(secs(5), what, || {
        n.channel_stats(t, c).filter(|ch| pred(ch))
    })
}

fn only_client(ch: &Value) -> Value {
    let cl = ch["clients"].as_array().expect("clients array");
    assert_eq!(cl.len(), 1, "expected exactly one client in {ch}");
    cl[0].clone()
}

fn msg_id_is_hex16(id: &[u8; 16]) -> bool {
    id.iter()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
}

// ---------------------------------------------------------------------------
// 1–15: magic, PUB, basic errors, state machine
// ---------------------------------------------------------------------------

#[test]
fn item01_wrong_magic_gets_bad_protocol_and_close() {
    let n = Nsqd::start(&[]);
    let mut c = Conn::connect_raw(&n.tcp_addr);
    c.send(b"  V1");
    let got = c.read_until_closed(secs(5));
    let mut want = vec![0x00, 0x00, 0x00, 0x12, 0x00, 0x00, 0x00, 0x01];
    want.extend_from_slice(b"E_BAD_PROTOCOL");
    assert_eq!(got, want, "got {:?}", String::from_utf8_lossy(&got));
    n.assert_alive();
}

#[test]
fn item01b_http_request_on_tcp_port_gets_bad_protocol() {
    let n = Nsqd::start(&[]);
    let mut c = Conn::connect_raw(&n.tcp_addr);
    c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    // Remaining unread bytes may turn the close into a RST; the frame is still expected.
    let full = c.expect_error_fatal_or_reset("E_BAD_PROTOCOL");
    let _ = full;
    n.assert_alive();
}

#[test]
fn item01c_short_magic_then_eof_closes_silently() {
    let n = Nsqd::start(&[]);
    let mut c = Conn::connect_raw(&n.tcp_addr);
    c.send(b"  ");
    let _ = c.stream.shutdown(std::net::Shutdown::Write);
    c.expect_closed_silently(secs(5));
    n.assert_alive();
}

#[test]
fn item02_pub_ok_exact_bytes() {
    let n = Nsqd::start(&[]);
    let mut c = n.connect();
    let mut cmd = b"PUB t\n".to_vec();
    cmd.extend_from_slice(&[0, 0, 0, 5]);
    cmd.extend_from_slice(b"hello");
    c.send(&cmd);
    let f = c.read_frame();
    assert_eq!(
        f.bytes(),
        vec![0x00, 0x00, 0x00, 0x06, 0x00, 0x00, 0x00, 0x00, 0x4F, 0x4B]
    );
    let t = wait_for(secs(5), "topic t with message_count 1", || {
        n.topic_stats("t").filter(|t| t["message_count"] == 1)
    });
    assert_eq!(t["message_bytes"], 5, "{t}");
    // connection stays usable for more publishes
    c.publish("t", b"again");
}

#[test]
fn item03_pub_bad_topic() {
    let n = Nsqd::start(&[]);
    fatal_after(
        &n,
        b"PUB bad!topic\n",
        r#"E_BAD_TOPIC PUB topic name "bad!topic" is not valid"#,
    );
}

#[test]
fn item04_pub_body_size_zero() {
    let n = Nsqd::start(&[]);
    fatal_after(
        &n,
        &pub_cmd("t", b""),
        "E_BAD_MESSAGE PUB invalid message body size 0",
    );
}

#[test]
fn item04b_pub_body_size_negative() {
    let n = Nsqd::start(&[]);
    let mut cmd = b"PUB t\n".to_vec();
    cmd.extend_from_slice(&(-1i32).to_be_bytes());
    fatal_after(&n, &cmd, "E_BAD_MESSAGE PUB invalid message body size -1");
}

#[test]
fn item05_pub_message_too_big_header_only() {
    let n = Nsqd::start(&[]);
    let mut cmd = b"PUB t\n".to_vec();
    cmd.extend_from_slice(&1048577i32.to_be_bytes());
    fatal_after(
        &n,
        &cmd,
        "E_BAD_MESSAGE PUB message too big 1048577 > 1048576",
    );
}

#[test]
fn item05b_pub_message_too_big_with_body_sent() {
    // The body is not read by nsqd, so the close may be a RST; the error frame
    // (if it arrives) must be exact, and the daemon must keep serving.
    let n = Nsqd::start(&[]);
    let mut c = n.connect();
    let body = vec![b'x'; 1048577];
    let _ = c.try_send(&pub_cmd("t", &body));
    c.expect_error_fatal_or_reset("E_BAD_MESSAGE PUB message too big 1048577 > 1048576");
    n.assert_alive();
    assert!(n
        .topic_stats("t")
        .map(|t| t["message_count"] == 0)
        .unwrap_or(true));
}

#[test]
fn item05c_max_msg_size_flag_is_honoured() {
    let n = Nsqd::start(&["--max-msg-size=100"]);
    let mut c = n.connect();
    c.publish("t", &[b'a'; 100]);
    let mut cmd = b"PUB t\n".to_vec();
    cmd.extend_from_slice(&101i32.to_be_bytes());
    c.send(&cmd);
    c.expect_error_fatal("E_BAD_MESSAGE PUB message too big 101 > 100");
    n.assert_alive();
}

#[test]
fn item06_pub_without_topic() {
    let n = Nsqd::start(&[]);
    fatal_after(
        &n,
        b"PUB\n",
        "E_INVALID PUB insufficient number of parameters",
    );
}

#[test]
fn item07_unknown_command() {
    let n = Nsqd::start(&[]);
    fatal_after(&n, b"FOO\n", "E_INVALID invalid command FOO");
}

#[test]
fn item07b_commands_are_case_sensitive() {
    let n = Nsqd::start(&[]);
    fatal_after(&n, b"pub t\n", "E_INVALID invalid command pub");
}

#[test]
fn item07c_garbage_bytes_after_magic() {
    let n = Nsqd::start(&[]);
    let garbage: &[u8] = b"\x01\x02\xfe\xffGARBAGE";
    let mut line = garbage.to_vec();
    line.push(b'\n');
    let mut want = b"E_INVALID invalid command ".to_vec();
    want.extend_from_slice(garbage);
    let mut c = n.connect();
    c.send(&line);
    c.expect_error_fatal(&want);
    n.assert_alive();
}

#[test]
fn item08_empty_line() {
    let n = Nsqd::start(&[]);
    fatal_after(&n, b"\n", "E_INVALID invalid command ");
}

#[test]
fn item09_rdy_before_sub() {
    let n = Nsqd::start(&[]);
    fatal_after(&n, b"RDY 1\n", "E_INVALID cannot RDY in current state");
}

#[test]
fn item10_fin_before_sub() {
    let n = Nsqd::start(&[]);
    fatal_after(
        &n,
        b"FIN 0123456789abcdef\n",
        "E_INVALID cannot FIN in current state",
    );
}

#[test]
fn item10b_req_and_touch_before_sub() {
    let n = Nsqd::start(&[]);
    fatal_after(
        &n,
        b"REQ 0123456789abcdef 0\n",
        "E_INVALID cannot REQ in current state",
    );
    fatal_after(
        &n,
        b"TOUCH 0123456789abcdef\n",
        "E_INVALID cannot TOUCH in current state",
    );
}

#[test]
fn item11_cls_before_sub() {
    let n = Nsqd::start(&[]);
    fatal_after(&n, b"CLS\n", "E_INVALID cannot CLS in current state");
}

#[test]
fn item12_sub_missing_channel() {
    let n = Nsqd::start(&[]);
    fatal_after(
        &n,
        b"SUB t\n",
        "E_INVALID SUB insufficient number of parameters",
    );
}

#[test]
fn item13_sub_bad_channel() {
    let n = Nsqd::start(&[]);
    fatal_after(
        &n,
        b"SUB t bad/chan\n",
        r#"E_BAD_CHANNEL SUB channel name "bad/chan" is not valid"#,
    );
}

#[test]
fn item13b_sub_bad_topic() {
    let n = Nsqd::start(&[]);
    fatal_after(
        &n,
        b"SUB bad!t c\n",
        r#"E_BAD_TOPIC SUB topic name "bad!t" is not valid"#,
    );
}

#[test]
fn item14_second_sub_is_fatal() {
    let n = Nsqd::start(&[]);
    let mut c = n.connect();
    c.cmd("SUB t c");
    let f = c.read_frame();
    assert_eq!(f.bytes(), frame(0, b"OK"));
    c.cmd("SUB t c");
    c.expect_error_fatal("E_INVALID cannot SUB in current state");
    n.assert_alive();
}

#[test]
fn item15_identify_after_sub_is_fatal() {
    let n = Nsqd::start(&[]);
    // State is checked before the body is read, so the line alone triggers the error.
    fatal_after_sub(
        &n,
        b"IDENTIFY\n",
        "E_INVALID cannot IDENTIFY in current state",
    );
}

#[test]
fn item15b_auth_and_sub_after_sub_are_fatal() {
    let n = Nsqd::start(&[]);
    fatal_after_sub(&n, b"AUTH\n", "E_INVALID cannot AUTH in current state");
}

// ---------------------------------------------------------------------------
// 16: default heartbeat (30 s)
// ---------------------------------------------------------------------------

#[test]
fn item16_default_heartbeat_every_30s_not_reset_by_nop() {
    let n = Nsqd::start(&[]);
    let start = Instant::now();
    let mut c = n.connect();
    c.sub("t", "c");
    // NOP at ~15 s must not reset the interval (and produces no frame).
    match c.try_read_frame(secs(15)) {
        ReadOutcome::Timeout => {}
        other => panic!("no frame expected during the first 15 s, got {other:?}"),
    }
    c.nop();
    let f = match c.try_read_frame(secs(20)) {
        ReadOutcome::Frame(f) => f,
        other => panic!("expected a heartbeat ~30 s after connecting, got {other:?}"),
    };
    let at = start.elapsed();
    assert_eq!(
        f.bytes(),
        [&[0u8, 0, 0, 0x0F, 0, 0, 0, 0][..], b"_heartbeat_"].concat(),
        "heartbeat frame bytes"
    );
    assert!(at >= ms(29_000), "first heartbeat too early: {at:?}");
    assert!(
        at <= ms(33_000),
        "first heartbeat too late (interval reset by NOP?): {at:?}"
    );
    c.nop();
    // still a healthy connection
    c.publish("t", b"x");
}

// ---------------------------------------------------------------------------
// 17–24: delivery, FIN, REQ, TOUCH
// ---------------------------------------------------------------------------

#[test]
fn item17_message_frame_layout() {
    let n = Nsqd::start(&[]);
    let before = now_ns();
    let mut p = publisher(&n);
    p.publish("t", b"hello");
    let mut c = n.connect();
    c.sub("t", "c");
    c.rdy(1);
    // RDY produces no response: the next frame must be the message itself.
    let f = c.read_frame();
    let after = now_ns();
    let raw = f.bytes();
    assert_eq!(
        &raw[0..8],
        &[0, 0, 0, 0x23, 0, 0, 0, 2],
        "size 35 type 2; got {f:?}"
    );
    let m = f.msg();
    assert_eq!(m.attempts, 1);
    assert_eq!(m.body, b"hello");
    assert!(
        msg_id_is_hex16(&m.id_bytes),
        "id must be 16 lowercase hex bytes: {:?}",
        m.id
    );
    assert!(
        m.ts >= before - 1_000_000_000 && m.ts <= after + 1_000_000_000,
        "timestamp must be publish time in ns: ts={} window [{before}, {after}]",
        m.ts
    );
    c.expect_nothing(ms(500));
}

#[test]
fn item18_fin_no_response_and_stats() {
    let n = Nsqd::start(&[]);
    let mut c = consumer(&n, "t", "c", 1);
    publisher(&n).publish("t", b"hello");
    let m = c.expect_msg();
    c.fin(&m.id);
    c.expect_nothing(ms(500));
    let ch = wait_channel(&n, "t", "c", "in_flight_count 0 and finish_count 1", |ch| {
        ch["in_flight_count"] == 0
            && ch["clients"]
                .as_array()
                .map(|a| a.len() == 1 && a[0]["finish_count"] == 1)
                .unwrap_or(false)
    });
    let cl = only_client(&ch);
    assert_eq!(cl["in_flight_count"], 0, "{cl}");
    assert_eq!(cl["message_count"], 1, "{cl}");
}

#[test]
fn item19_double_fin_is_nonfatal() {
    let n = Nsqd::start(&[]);
    let mut c = consumer(&n, "t", "c", 1);
    publisher(&n).publish("t", b"hello");
    let m = c.expect_msg();
    c.fin(&m.id);
    c.fin(&m.id);
    c.expect_error_nonfatal(&format!(
        "E_FIN_FAILED FIN {} failed ID not in flight",
        m.id
    ));
}

#[test]
fn item19b_fin_of_message_owned_by_other_client_is_nonfatal() {
    let n = Nsqd::start(&[]);
    let mut a = consumer(&n, "t", "c", 1);
    let mut b = consumer(&n, "t", "c", 0);
    publisher(&n).publish("t", b"mine");
    let m = a.expect_msg();
    b.fin(&m.id);
    b.expect_error_nonfatal(&format!(
        "E_FIN_FAILED FIN {} failed client does not own message",
        m.id
    ));
    b.req(&m.id, 0);
    b.expect_error_nonfatal(&format!(
        "E_REQ_FAILED REQ {} failed client does not own message",
        m.id
    ));
    b.touch(&m.id);
    b.expect_error_nonfatal(&format!(
        "E_TOUCH_FAILED TOUCH {} failed client does not own message",
        m.id
    ));
    // the owner can still FIN it
    a.fin(&m.id);
    a.nop();
    a.send(&pub_cmd("t2", b"x"));
    a.expect_ok();
}

#[test]
fn item20_fin_invalid_id_length() {
    let n = Nsqd::start(&[]);
    fatal_after_sub(&n, b"FIN abc\n", "E_INVALID invalid message ID");
}

#[test]
fn item20b_fin_without_id() {
    let n = Nsqd::start(&[]);
    fatal_after_sub(&n, b"FIN\n", "E_INVALID FIN insufficient number of params");
}

#[test]
fn item21_req_zero_redelivers_with_attempts_2() {
    let n = Nsqd::start(&[]);
    let mut c = consumer(&n, "t", "c", 1);
    publisher(&n).publish("t", b"hello");
    let m1 = c.expect_msg();
    assert_eq!(m1.attempts, 1);
    c.req(&m1.id, 0);
    // no response frame for REQ: the next frame is the redelivery
    let m2 = c.expect_msg();
    assert_eq!(m2.id, m1.id);
    assert_eq!(m2.attempts, 2);
    assert_eq!(m2.body, b"hello");
    assert_eq!(m2.ts, m1.ts, "timestamp preserved across requeue");
    c.fin(&m2.id);
    let ch = wait_channel(&n, "t", "c", "requeue_count 1", |ch| {
        ch["requeue_count"] == 1 && ch["in_flight_count"] == 0
    });
    assert_eq!(ch["timeout_count"], 0, "{ch}");
    assert_eq!(only_client(&ch)["requeue_count"], 1, "{ch}");
}

#[test]
fn item22_req_huge_timeout_is_clamped_not_rejected() {
    let n = Nsqd::start(&[]);
    let mut c = consumer(&n, "t", "c", 1);
    publisher(&n).publish("t", b"hello");
    let m = c.expect_msg();
    c.req(&m.id, 99_999_999_999);
    c.expect_nothing(ms(1500)); // no error, no redelivery
    let ch = wait_channel(&n, "t", "c", "deferred_count 1", |ch| {
        ch["deferred_count"] == 1
    });
    assert_eq!(ch["in_flight_count"], 0, "{ch}");
    assert_eq!(ch["requeue_count"], 1, "{ch}");
    c.nop();
    c.send(&pub_cmd("t2", b"x"));
    c.expect_ok();
}

#[test]
fn item23_req_without_timeout() {
    let n = Nsqd::start(&[]);
    let mut c = consumer(&n, "t", "c", 1);
    publisher(&n).publish("t", b"hello");
    let m = c.expect_msg();
    c.cmd(&format!("REQ {}", m.id));
    c.expect_error_fatal("E_INVALID REQ insufficient number of params");
    n.assert_alive();
}

#[test]
fn item23b_req_unparseable_timeout() {
    let n = Nsqd::start(&[]);
    let mut c = consumer(&n, "t", "c", 1);
    publisher(&n).publish("t", b"hello");
    let m = c.expect_msg();
    c.cmd(&format!("REQ {} abc", m.id));
    c.expect_error_fatal("E_INVALID REQ could not parse timeout abc");
    n.assert_alive();
}

#[test]
fn item23c_req_unknown_id_is_nonfatal() {
    let n = Nsqd::start(&[]);
    let mut c = consumer(&n, "t", "c", 1);
    c.req("0123456789abcdef", 0);
    c.expect_error_nonfatal("E_REQ_FAILED REQ 0123456789abcdef failed ID not in flight");
}

#[test]
fn item24_touch_unknown_id_is_nonfatal() {
    let n = Nsqd::start(&[]);
    let mut c = consumer(&n, "t", "c", 1);
    c.touch("0123456789abcdef");
    c.expect_error_nonfatal("E_TOUCH_FAILED TOUCH 0123456789abcdef failed ID not in flight");
}

#[test]
fn item24b_touch_invalid_id() {
    let n = Nsqd::start(&[]);
    fatal_after_sub(&n, b"TOUCH abc\n", "E_INVALID invalid message ID");
}

// ---------------------------------------------------------------------------
// 25–28: RDY, CLS
// ---------------------------------------------------------------------------

#[test]
fn item25_rdy_out_of_range() {
    let n = Nsqd::start(&[]);
    fatal_after_sub(
        &n,
        b"RDY 2501\n",
        "E_INVALID RDY count 2501 out of range 0-2500",
    );
}

#[test]
fn item25b_rdy_2500_accepted() {
    let n = Nsqd::start(&[]);
    let mut c = consumer(&n, "t", "c", 2500);
    c.expect_nothing(ms(300));
    let ch = wait_channel(&n, "t", "c", "ready_count 2500", |ch| {
        ch["clients"]
            .as_array()
            .map(|a| a.len() == 1 && a[0]["ready_count"] == 2500)
            .unwrap_or(false)
    });
    assert_eq!(only_client(&ch)["state"], 3);
}

#[test]
fn item25c_max_rdy_count_flag() {
    let n = Nsqd::start(&["--max-rdy-count=10"]);
    fatal_after_sub(&n, b"RDY 11\n", "E_INVALID RDY count 11 out of range 0-10");
}

#[test]
fn item25d_rdy_overflow_parses_modulo_2_64() {
    let n = Nsqd::start(&[]);
    fatal_after_sub(
        &n,
        b"RDY 99999999999999999999\n",
        "E_INVALID RDY count 7766279631452241919 out of range 0-2500",
    );
}

#[test]
fn item26_rdy_negative_unparseable() {
    let n = Nsqd::start(&[]);
    fatal_after_sub(&n, b"RDY -1\n", "E_INVALID RDY could not parse count -1");
}

#[test]
fn item26b_rdy_non_digit() {
    let n = Nsqd::start(&[]);
    fatal_after_sub(&n, b"RDY 1a\n", "E_INVALID RDY could not parse count 1a");
}

#[test]
fn item27_rdy_without_argument_means_one() {
    let n = Nsqd::start(&[]);
    let mut c = n.connect();
    c.sub("t", "c");
    c.cmd("RDY");
    let mut p = publisher(&n);
    p.publish("t", b"one");
    p.publish("t", b"two");
    let m = c.expect_msg();
    // RDY 1: the second message is not sent while the first is in flight
    c.expect_nothing(ms(1000));
    let ch = wait_channel(&n, "t", "c", "ready_count 1", |ch| {
        ch["clients"]
            .as_array()
            .map(|a| a.len() == 1 && a[0]["ready_count"] == 1)
            .unwrap_or(false)
    });
    assert_eq!(only_client(&ch)["in_flight_count"], 1);
    c.fin(&m.id);
    let m2 = c.expect_msg();
    assert_ne!(m2.body, m.body);
}

#[test]
fn item28_cls_close_wait_and_no_more_messages() {
    let n = Nsqd::start(&[]);
    let mut c = n.connect();
    c.sub("t", "c");
    c.cmd("CLS");
    let f = c.recv();
    assert_eq!(
        f.bytes(),
        [&[0u8, 0, 0, 0x0E, 0, 0, 0, 0][..], b"CLOSE_WAIT"].concat(),
        "got {f:?}"
    );
    let mut p = publisher(&n);
    for i in 0..3 {
        p.publish("t", format!("m{i}").as_bytes());
    }
    // RDY in closing state is ignored silently (no error, no close, no messages)
    c.cmd("RDY 5");
    c.expect_nothing(ms(1500));
    let ch = wait_channel(&n, "t", "c", "client in state 4", |ch| {
        ch["clients"]
            .as_array()
            .map(|a| a.len() == 1 && a[0]["state"] == 4)
            .unwrap_or(false)
    });
    assert_eq!(ch["depth"], 3, "messages stay queued: {ch}");
    assert_eq!(only_client(&ch)["ready_count"], 0, "{ch}");
    // connection stays open: NOP, and PUB is still allowed in the closing state
    c.nop();
    c.send(&pub_cmd("t2", b"x"));
    c.expect_ok();
    // CLS again in closing state is fatal
    c.cmd("CLS");
    c.expect_error_fatal("E_INVALID cannot CLS in current state");
    n.assert_alive();
}

// ---------------------------------------------------------------------------
// 29–30: in-flight timeouts
// ---------------------------------------------------------------------------

#[test]
fn item29_default_msg_timeout_60s_redelivers() {
    let n = Nsqd::start(&[]);
    let mut c = consumer(&n, "t", "c", 1);
    // before the publish: nsqd sends the message after it, so a redelivery
    // `dt` later is at least `dt` after the delivery, however slowly the
    // first one reaches this client under load
    let t0 = Instant::now();
    publisher(&n).publish("t", b"slow");
    let m1 = c.expect_msg();
    // recv_timeout answers heartbeats with NOP, keeping the connection alive
    let f = c
        .recv_timeout(secs(70))
        .expect("redelivery after the 60 s msg timeout");
    let dt = t0.elapsed();
    let m2 = f.msg();
    assert!(dt >= ms(59_000), "redelivered too early: {dt:?}");
    assert!(dt <= ms(67_000), "redelivered too late: {dt:?}");
    assert_eq!(m2.id, m1.id);
    assert_eq!(m2.attempts, 2);
    let ch = n.channel_stats("t", "c").unwrap();
    assert_eq!(ch["timeout_count"], 1, "{ch}");
    assert_eq!(ch["requeue_count"], 0, "{ch}");
    c.fin(&m2.id);
}

#[test]
fn item29b_msg_timeout_flag() {
    let n = Nsqd::start(&["--msg-timeout=2s"]);
    let mut c = consumer(&n, "t", "c", 1);
    let t0 = Instant::now(); // before the publish, as in item29
    publisher(&n).publish("t", b"slow");
    let m1 = c.expect_msg();
    let m2 = c.expect_msg_within(secs(12));
    let dt = t0.elapsed();
    assert!(
        dt >= ms(2000),
        "redelivered before --msg-timeout=2s: {dt:?}"
    );
    assert_eq!((m2.id.as_str(), m2.attempts), (m1.id.as_str(), 2));
}

#[test]
fn item30_identify_msg_timeout_1000_redelivery_and_stats() {
    let n = Nsqd::start(&[]);
    let mut c = n.connect();
    let f = c.identify(r#"{"feature_negotiation":true,"msg_timeout":1000}"#);
    let want = fixture("identify_response.json")
        .trim_end()
        .replace(r#""msg_timeout":60000"#, r#""msg_timeout":1000"#);
    assert_eq!(f.text(), want, "IDENTIFY response");
    c.sub("t", "c");
    c.rdy(1);
    let t0 = Instant::now(); // before the publish, as in item29
    publisher(&n).publish("t", b"unacked");
    let m1 = c.expect_msg();
    let m2 = c.expect_msg_within(secs(10));
    let dt = t0.elapsed();
    assert!(
        dt >= ms(1000),
        "redelivered before msg_timeout 1000 ms: {dt:?}"
    );
    assert!(dt <= ms(8000), "redelivered too late: {dt:?}");
    assert_eq!(m2.id, m1.id);
    assert_eq!(m2.attempts, 2);
    assert_eq!(m2.body, b"unacked");
    let ch = wait_channel(&n, "t", "c", "timeout_count 1", |ch| {
        ch["timeout_count"] == 1
    });
    assert_eq!(ch["requeue_count"], 0, "timeouts are not requeues: {ch}");
    c.fin(&m2.id);
    c.nop();
    c.send(&pub_cmd("t2", b"x"));
    c.expect_ok(); // the FIN above was accepted (no E_FIN_FAILED before this OK)
}

#[test]
fn touch_postpones_timeout() {
    let n = Nsqd::start(&[]);
    let mut c = n.connect();
    c.identify(r#"{"msg_timeout":1000}"#);
    c.sub("t", "c");
    c.rdy(1);
    publisher(&n).publish("t", b"long-job");
    let m = c.expect_msg();
    let t0 = Instant::now();
    while t0.elapsed() < secs(4) {
        c.touch(&m.id);
        if let Some(f) = c.recv_timeout(ms(400)) {
            panic!("TOUCHed message must not be redelivered / no response expected, got {f:?}");
        }
    }
    c.fin(&m.id);
    c.send(&pub_cmd("t2", b"x"));
    c.expect_ok(); // FIN succeeded (an E_FIN_FAILED would arrive first)
    let ch = wait_channel(&n, "t", "c", "in_flight_count 0", |ch| {
        ch["in_flight_count"] == 0
    });
    assert_eq!(ch["timeout_count"], 0, "{ch}");
    assert_eq!(only_client(&ch)["finish_count"], 1, "{ch}");
}

#[test]
fn req_with_delay_comes_back_after_delay() {
    let n = Nsqd::start(&[]);
    let mut c = consumer(&n, "t", "c", 1);
    publisher(&n).publish("t", b"later");
    let m1 = c.expect_msg();
    let t0 = Instant::now();
    c.req(&m1.id, 1500);
    let ch = wait_channel(&n, "t", "c", "deferred_count 1 after REQ 1500", |ch| {
        ch["deferred_count"] == 1
    });
    assert_eq!(ch["in_flight_count"], 0, "{ch}");
    let m2 = c.expect_msg_within(secs(10));
    let dt = t0.elapsed();
    assert!(
        dt >= ms(1500),
        "REQ'd message came back before its 1500 ms delay: {dt:?}"
    );
    assert!(dt <= ms(9000), "REQ'd message came back too late: {dt:?}");
    assert_eq!((m2.id.as_str(), m2.attempts), (m1.id.as_str(), 2));
    c.fin(&m2.id);
    let ch = wait_channel(&n, "t", "c", "requeue_count 1", |ch| {
        ch["requeue_count"] == 1 && ch["in_flight_count"] == 0
    });
    assert_eq!(ch["deferred_count"], 0, "{ch}");
    assert_eq!(ch["timeout_count"], 0, "{ch}");
}

// ---------------------------------------------------------------------------
// 31–40, 45: IDENTIFY
// ---------------------------------------------------------------------------

#[test]
fn item31_identify_feature_negotiation_exact_json() {
    let n = Nsqd::start(&[]);
    let mut c = n.connect();
    let f = c.identify(r#"{"feature_negotiation":true}"#);
    let want = fixture("identify_response.json");
    assert_eq!(
        f.bytes(),
        frame(0, want.trim_end().as_bytes()),
        "got {:?}",
        f.text()
    );
    // nothing else follows (no upgrades negotiated)
    c.expect_nothing(ms(300));
    c.publish("t", b"x");
}

#[test]
fn item31b_identify_deflate_level_without_deflate_is_6() {
    let n = Nsqd::start(&[]);
    let mut c = n.connect();
    let f = c.identify(r#"{"feature_negotiation":true,"deflate_level":3}"#);
    let v: Value = serde_json::from_slice(&f.data).unwrap();
    assert_eq!(v["deflate"], false);
    assert_eq!(v["deflate_level"], 6, "{v}");
}

#[test]
fn item31c_identify_values_reflected() {
    let n = Nsqd::start(&[]);
    let mut c = n.connect();
    let f = c.identify(
        r#"{"feature_negotiation":true,"output_buffer_size":128,"output_buffer_timeout":1000,"sample_rate":5,"client_id":"cid","hostname":"hn","user_agent":"ua/1","short_id":"ignored","long_id":"ignored"}"#,
    );
    let v: Value = serde_json::from_slice(&f.data).unwrap();
    assert_eq!(v["output_buffer_timeout"], 1000, "{v}");
    assert_eq!(v["output_buffer_size"], 128, "{v}");
    assert_eq!(v["sample_rate"], 5, "{v}");
    c.sub("t", "c");
    let ch = wait_channel(&n, "t", "c", "one client", |ch| {
        ch["clients"]
            .as_array()
            .map(|a| a.len() == 1)
            .unwrap_or(false)
    });
    let cl = only_client(&ch);
    assert_eq!(
        (
            cl["client_id"].as_str(),
            cl["hostname"].as_str(),
            cl["user_agent"].as_str()
        ),
        (Some("cid"), Some("hn"), Some("ua/1")),
        "{cl}"
    );
    assert_eq!(cl["version"], "V2");
    assert_eq!(cl["state"], 3);
    assert_eq!(cl["sample_rate"], 5);
}

#[test]
fn item32_identify_empty_object_ok() {
    let n = Nsqd::start(&[]);
    let mut c = n.connect();
    c.send(&identify_cmd("{}"));
    c.expect_ok();
    c.publish("t", b"x");
}

#[test]
fn item32b_identify_null_ok_and_repeatable_in_init() {
    let n = Nsqd::start(&[]);
    let mut c = n.connect();
    c.send(&identify_cmd("null"));
    c.expect_ok();
    c.send(&identify_cmd(r#"{"client_id":"again"}"#));
    c.expect_ok();
    c.sub("t", "c");
}

#[test]
fn item33_identify_not_json() {
    let n = Nsqd::start(&[]);
    fatal_after(
        &n,
        &identify_cmd("not json"),
        "E_BAD_BODY IDENTIFY failed to decode JSON body",
    );
}

#[test]
fn item33b_identify_wrong_field_types() {
    let n = Nsqd::start(&[]);
    fatal_after(
        &n,
        &identify_cmd(r#"{"heartbeat_interval":"x"}"#),
        "E_BAD_BODY IDENTIFY failed to decode JSON body",
    );
    fatal_after(
        &n,
        &identify_cmd(r#"{"msg_timeout":1.5}"#),
        "E_BAD_BODY IDENTIFY failed to decode JSON body",
    );
    fatal_after(
        &n,
        &identify_cmd(r#"{"client_id":"x""#),
        "E_BAD_BODY IDENTIFY failed to decode JSON body",
    );
}

#[test]
fn item34_identify_bad_heartbeat() {
    let n = Nsqd::start(&[]);
    fatal_after(
        &n,
        &identify_cmd(r#"{"heartbeat_interval":500}"#),
        "E_BAD_BODY IDENTIFY heartbeat interval (500) is invalid",
    );
    fatal_after(
        &n,
        &identify_cmd(r#"{"heartbeat_interval":60001}"#),
        "E_BAD_BODY IDENTIFY heartbeat interval (60001) is invalid",
    );
}

#[test]
fn item35_identify_bad_sample_rate() {
    let n = Nsqd::start(&[]);
    fatal_after(
        &n,
        &identify_cmd(r#"{"sample_rate":100}"#),
        "E_BAD_BODY IDENTIFY sample rate (100) is invalid",
    );
}

#[test]
fn item36_identify_bad_output_buffer_size() {
    let n = Nsqd::start(&[]);
    fatal_after(
        &n,
        &identify_cmd(r#"{"output_buffer_size":32}"#),
        "E_BAD_BODY IDENTIFY output buffer size (32) is invalid",
    );
}

#[test]
fn item37_identify_bad_output_buffer_timeout() {
    let n = Nsqd::start(&[]);
    fatal_after(
        &n,
        &identify_cmd(r#"{"output_buffer_timeout":10}"#),
        "E_BAD_BODY IDENTIFY output buffer timeout (10) is invalid",
    );
}

#[test]
fn item38_identify_bad_msg_timeout() {
    let n = Nsqd::start(&[]);
    fatal_after(
        &n,
        &identify_cmd(r#"{"msg_timeout":999}"#),
        "E_BAD_BODY IDENTIFY msg timeout (999) is invalid",
    );
}

#[test]
fn item38b_identify_validation_order_heartbeat_first() {
    let n = Nsqd::start(&[]);
    fatal_after(
        &n,
        &identify_cmd(
            r#"{"msg_timeout":999,"sample_rate":100,"output_buffer_size":32,"output_buffer_timeout":10,"heartbeat_interval":500}"#,
        ),
        "E_BAD_BODY IDENTIFY heartbeat interval (500) is invalid",
    );
    fatal_after(
        &n,
        &identify_cmd(
            r#"{"msg_timeout":999,"sample_rate":100,"output_buffer_size":32,"output_buffer_timeout":10}"#,
        ),
        "E_BAD_BODY IDENTIFY output buffer timeout (10) is invalid",
    );
}

#[test]
fn item39_identify_size_zero() {
    let n = Nsqd::start(&[]);
    fatal_after(
        &n,
        &identify_cmd(""),
        "E_BAD_BODY IDENTIFY invalid body size 0",
    );
}

#[test]
fn item39b_identify_body_too_big() {
    let n = Nsqd::start(&[]);
    let mut cmd = b"IDENTIFY\n".to_vec();
    cmd.extend_from_slice(&5242881i32.to_be_bytes());
    fatal_after(
        &n,
        &cmd,
        "E_BAD_BODY IDENTIFY body too big 5242881 > 5242880",
    );
}

#[test]
fn item40_identify_snappy_and_deflate() {
    let n = Nsqd::start(&[]);
    fatal_after(
        &n,
        &identify_cmd(r#"{"feature_negotiation":true,"snappy":true,"deflate":true}"#),
        "E_IDENTIFY_FAILED cannot enable both deflate and snappy compression",
    );
}

#[test]
fn item45_sub_with_heartbeats_disabled() {
    let n = Nsqd::start(&[]);
    let mut c = n.connect();
    c.send(&identify_cmd(r#"{"heartbeat_interval":-1}"#));
    c.expect_ok();
    c.cmd("SUB t c");
    c.expect_error_fatal("E_INVALID cannot SUB with heartbeats disabled");
    n.assert_alive();
}

// ---------------------------------------------------------------------------
// 46–47: heartbeats
// ---------------------------------------------------------------------------

#[test]
fn item46_client_ignoring_heartbeats_is_disconnected_without_error() {
    let n = Nsqd::start(&[]);
    let mut c = n.connect();
    c.send(&identify_cmd(r#"{"heartbeat_interval":1000}"#));
    c.expect_ok();
    let t0 = Instant::now(); // last command was just sent
    let mut heartbeats = 0;
    let closed_at = loop {
        match c.try_read_frame(secs(8)) {
            ReadOutcome::Frame(f) => {
                assert!(
                    f.is_heartbeat(),
                    "only heartbeats expected before the close, got {f:?}"
                );
                heartbeats += 1;
            }
            ReadOutcome::Closed(rest) => {
                assert!(rest.is_empty(), "partial bytes before close: {rest:?}");
                break t0.elapsed();
            }
            ReadOutcome::Timeout => {
                panic!("connection not closed within 8 s of silence (heartbeats: {heartbeats})")
            }
        }
    };
    assert!(heartbeats >= 1, "expected ~1 s heartbeats before the close");
    assert!(closed_at >= ms(1500), "closed too early: {closed_at:?}");
    assert!(closed_at <= ms(5000), "closed too late: {closed_at:?}");
    n.assert_alive();
}

#[test]
fn item47_answering_heartbeats_keeps_connection_open() {
    let n = Nsqd::start(&[]);
    let mut c = n.connect();
    c.send(&identify_cmd(r#"{"heartbeat_interval":1000}"#));
    c.expect_ok();
    c.sub("t", "c");
    let t0 = Instant::now();
    let mut heartbeats = 0;
    while t0.elapsed() < secs(5) {
        match c.try_read_frame(ms(1500)) {
            ReadOutcome::Frame(f) => {
                assert!(
                    f.is_heartbeat(),
                    "NOP must never produce a frame; got {f:?}"
                );
                heartbeats += 1;
                c.nop();
            }
            ReadOutcome::Timeout => {
                panic!("no heartbeat within 1.5 s with heartbeat_interval 1000")
            }
            ReadOutcome::Closed(_) => {
                panic!("connection closed although every heartbeat was answered")
            }
        }
    }
    assert!(heartbeats >= 3, "heartbeats in 5 s: {heartbeats}");
    c.send(&pub_cmd("t", b"x"));
    // skip heartbeats until OK
    c.expect_ok();
}

// ---------------------------------------------------------------------------
// 48–56: MPUB, DPUB, AUTH
// ---------------------------------------------------------------------------

#[test]
fn item48_mpub_two_messages() {
    let n = Nsqd::start(&[]);
    let mut c = n.connect();
    c.send(&mpub_cmd("t", &[b"one", b"two"]));
    let f = c.read_frame();
    assert_eq!(f.bytes(), frame(0, b"OK"));
    let t = wait_for(secs(5), "message_count 2", || {
        n.topic_stats("t").filter(|t| t["message_count"] == 2)
    });
    assert_eq!(t["message_bytes"], 6, "{t}");
    let mut k = consumer(&n, "t", "c", 10);
    let got: BTreeSet<Vec<u8>> = recv_msgs(&mut k, 2, secs(5), true)
        .into_iter()
        .map(|m| m.body)
        .collect();
    assert_eq!(
        got,
        [b"one".to_vec(), b"two".to_vec()].into_iter().collect()
    );
}

#[test]
fn item49_mpub_count_zero() {
    let n = Nsqd::start(&[]);
    fatal_after(
        &n,
        &mpub_cmd("t", &[]),
        "E_BAD_BODY MPUB invalid message count 0",
    );
}

#[test]
fn item50_mpub_bad_topic_doubled_code() {
    let n = Nsqd::start(&[]);
    fatal_after(
        &n,
        b"MPUB x!\n",
        r#"E_BAD_TOPIC E_BAD_TOPIC MPUB topic name "x!" is not valid"#,
    );
}

#[test]
fn item50b_mpub_without_topic() {
    let n = Nsqd::start(&[]);
    fatal_after(
        &n,
        b"MPUB\n",
        "E_INVALID MPUB insufficient number of parameters",
    );
}

#[test]
fn item51_mpub_body_too_big() {
    let n = Nsqd::start(&[]);
    let mut cmd = b"MPUB t\n".to_vec();
    cmd.extend_from_slice(&5242881i32.to_be_bytes());
    fatal_after(&n, &cmd, "E_BAD_BODY MPUB body too big 5242881 > 5242880");
}

#[test]
fn item51b_mpub_body_size_zero() {
    let n = Nsqd::start(&[]);
    let mut cmd = b"MPUB t\n".to_vec();
    cmd.extend_from_slice(&0i32.to_be_bytes());
    fatal_after(&n, &cmd, "E_BAD_BODY MPUB invalid body size 0");
}

#[test]
fn item52_mpub_second_message_empty_publishes_nothing() {
    let n = Nsqd::start(&[]);
    let mut c = n.connect();
    c.send(&mpub_cmd("t", &[b"a", b""]));
    c.expect_error_fatal("E_BAD_MESSAGE MPUB invalid message(1) body size 0");
    n.assert_alive();
    // the topic was created before the body was validated, but nothing was published
    let t = n
        .topic_stats("t")
        .expect("topic t exists (created before MPUB body validation)");
    assert_eq!(t["message_count"], 0, "{t}");
    assert_eq!(t["depth"], 0, "{t}");
}

#[test]
fn item52b_mpub_message_too_big() {
    let n = Nsqd::start(&["--max-msg-size=10"]);
    fatal_after(
        &n,
        &mpub_cmd("t", &[b"ok", &[b'x'; 11]]),
        "E_BAD_MESSAGE MPUB message too big 11 > 10",
    );
}

#[test]
fn item53_dpub_not_delivered_early() {
    let n = Nsqd::start(&[]);
    let mut c = consumer(&n, "t", "c", 1);
    let mut p = publisher(&n);
    let t0 = Instant::now();
    p.send(&dpub_cmd("t", 1000, b"deferred"));
    p.expect_ok();
    let ch = wait_channel(&n, "t", "c", "deferred_count 1", |ch| {
        ch["deferred_count"] == 1
    });
    assert_eq!(ch["depth"], 0, "{ch}");
    let m = c.expect_msg_within(secs(10));
    let dt = t0.elapsed();
    assert!(dt >= ms(1000), "DPUB 1000 delivered early: {dt:?}");
    assert!(dt <= ms(8000), "DPUB 1000 delivered too late: {dt:?}");
    assert_eq!(m.body, b"deferred");
    assert_eq!(m.attempts, 1);
    c.fin(&m.id);
}

#[test]
fn item53b_dpub_longer_defer_not_early() {
    let n = Nsqd::start(&[]);
    let mut c = consumer(&n, "t", "c", 5);
    let mut p = publisher(&n);
    let t0 = Instant::now();
    p.send(&dpub_cmd("t", 3000, b"d3"));
    p.expect_ok();
    p.publish("t", b"now");
    let first = c.expect_msg();
    assert_eq!(
        first.body, b"now",
        "the non-deferred message must come first"
    );
    c.fin(&first.id);
    let m = c.expect_msg_within(secs(12));
    assert!(
        t0.elapsed() >= ms(3000),
        "DPUB 3000 delivered after {:?}",
        t0.elapsed()
    );
    assert_eq!(m.body, b"d3");
}

#[test]
fn item54_dpub_timeout_out_of_range() {
    let n = Nsqd::start(&[]);
    fatal_after(
        &n,
        &dpub_cmd("t", 3600001, b"x"),
        "E_INVALID DPUB timeout 3600001 out of range 0-3600000",
    );
}

#[test]
fn item55_dpub_unparseable_timeout() {
    let n = Nsqd::start(&[]);
    fatal_after(
        &n,
        b"DPUB t abc\n",
        "E_INVALID DPUB could not parse timeout abc",
    );
}

#[test]
fn item55b_dpub_insufficient_params() {
    let n = Nsqd::start(&[]);
    fatal_after(
        &n,
        b"DPUB t\n",
        "E_INVALID DPUB insufficient number of parameters",
    );
}

#[test]
fn item55c_dpub_bad_topic() {
    let n = Nsqd::start(&[]);
    fatal_after(
        &n,
        b"DPUB t! 10\n",
        r#"E_BAD_TOPIC DPUB topic name "t!" is not valid"#,
    );
}

#[test]
fn item56_auth_disabled() {
    let n = Nsqd::start(&[]);
    fatal_after(
        &n,
        &body_cmd("AUTH", b"secret"),
        "E_AUTH_DISABLED AUTH disabled",
    );
}

#[test]
fn item56b_auth_with_parameters() {
    let n = Nsqd::start(&[]);
    fatal_after(
        &n,
        b"AUTH x\n",
        "E_INVALID AUTH invalid number of parameters",
    );
}

// ---------------------------------------------------------------------------
// 60–65 and delivery semantics
// ---------------------------------------------------------------------------

#[test]
fn item60_max_channel_consumers() {
    let n = Nsqd::start(&["--max-channel-consumers=1"]);
    let mut a = consumer(&n, "t", "c", 1);
    let mut b = n.connect();
    b.cmd("SUB t c");
    b.expect_error_fatal("E_SUB_FAILED SUB failed consumers for t:c exceeds limit of 1");
    n.assert_alive();
    // another channel is fine, and the first consumer still works
    let _other = consumer(&n, "t", "c2", 1);
    publisher(&n).publish("t", b"x");
    let m = a.expect_msg();
    a.fin(&m.id);
}

#[test]
fn item61_two_channels_each_get_every_message() {
    let n = Nsqd::start(&[]);
    let mut a = consumer(&n, "t", "c1", 50);
    let mut b = consumer(&n, "t", "c2", 50);
    let mut p = publisher(&n);
    let want: BTreeSet<Vec<u8>> = (0..20).map(|i| format!("msg-{i}").into_bytes()).collect();
    for body in &want {
        p.publish("t", body);
    }
    let ga: Vec<Vec<u8>> = recv_msgs(&mut a, 20, secs(10), true)
        .into_iter()
        .map(|m| m.body)
        .collect();
    let gb: Vec<Vec<u8>> = recv_msgs(&mut b, 20, secs(10), true)
        .into_iter()
        .map(|m| m.body)
        .collect();
    assert_eq!(ga.iter().cloned().collect::<BTreeSet<_>>(), want);
    assert_eq!(gb.iter().cloned().collect::<BTreeSet<_>>(), want);
    a.expect_nothing(ms(500));
    b.expect_nothing(ms(100));
}

#[test]
fn item61b_two_consumers_one_channel_split_exactly_once() {
    let n = Nsqd::start(&[]);
    let mut a = consumer(&n, "t", "c", 5);
    let mut b = consumer(&n, "t", "c", 5);
    let mut p = publisher(&n);
    let total = 100;
    let all: Vec<Vec<u8>> = (0..total)
        .map(|i| format!("m{i:03}").into_bytes())
        .collect();
    let refs: Vec<&[u8]> = all.iter().map(|v| v.as_slice()).collect();
    p.mpublish("t", &refs);
    // First: A may hold at most 5 unacked messages, so B must get some.
    let first_a = recv_msgs(&mut a, 5, secs(5), false);
    let first_b = recv_msgs(&mut b, 5, secs(5), false);
    let mut count: BTreeMap<Vec<u8>, usize> = BTreeMap::new();
    let (mut na, mut nb) = (0usize, 0usize);
    for m in &first_a {
        *count.entry(m.body.clone()).or_default() += 1;
        a.fin(&m.id);
        na += 1;
    }
    for m in &first_b {
        *count.entry(m.body.clone()).or_default() += 1;
        b.fin(&m.id);
        nb += 1;
    }
    let deadline = Instant::now() + secs(20);
    while count.values().sum::<usize>() < total {
        assert!(
            Instant::now() < deadline,
            "only {} of {total} received",
            count.values().sum::<usize>()
        );
        for (c, k) in [(&mut a, &mut na), (&mut b, &mut nb)] {
            if let Some(f) = c.recv_timeout(ms(100)) {
                let m = f.msg();
                *count.entry(m.body.clone()).or_default() += 1;
                c.fin(&m.id);
                *k += 1;
            }
        }
    }
    a.expect_nothing(ms(700));
    b.expect_nothing(ms(100));
    assert_eq!(count.len(), total, "every message delivered");
    let dups: Vec<_> = count.iter().filter(|(_, &v)| v != 1).collect();
    assert!(
        dups.is_empty(),
        "messages delivered more than once: {dups:?}"
    );
    assert!(
        na > 0 && nb > 0,
        "both consumers must get a share: a={na} b={nb}"
    );
    let ch = wait_channel(&n, "t", "c", "in_flight 0", |ch| ch["in_flight_count"] == 0);
    assert_eq!(ch["message_count"], total as i64, "{ch}");
    assert_eq!(ch["depth"], 0, "{ch}");
}

#[test]
fn rdy_bounds_unacknowledged_messages() {
    let n = Nsqd::start(&[]);
    let bodies: Vec<Vec<u8>> = (0..20).map(|i| format!("r{i}").into_bytes()).collect();
    let refs: Vec<&[u8]> = bodies.iter().map(|v| v.as_slice()).collect();
    publisher(&n).mpublish("t", &refs);
    let mut c = consumer(&n, "t", "c", 5);
    let first = recv_msgs(&mut c, 5, secs(5), false);
    c.expect_nothing(ms(1000));
    let ch = wait_channel(&n, "t", "c", "in_flight 5 and depth 15", |ch| {
        ch["in_flight_count"] == 5 && ch["depth"] == 15
    });
    assert_eq!(only_client(&ch)["ready_count"], 5);
    // FIN 2 -> exactly 2 more
    c.fin(&first[0].id);
    c.fin(&first[1].id);
    let more = recv_msgs(&mut c, 2, secs(5), false);
    c.expect_nothing(ms(1000));
    // lower RDY below in-flight: nothing more until in-flight < RDY
    c.rdy(3);
    let mut inflight: Vec<Msg> = first[2..].iter().cloned().chain(more).collect();
    assert_eq!(inflight.len(), 5);
    c.fin(&inflight.remove(0).id);
    c.fin(&inflight.remove(0).id);
    c.expect_nothing(ms(1000)); // in flight 3, RDY 3
    c.fin(&inflight.remove(0).id); // in flight 2 -> exactly one more
    let one = recv_msgs(&mut c, 1, secs(5), false);
    c.expect_nothing(ms(1000));
    inflight.extend(one);
    assert_eq!(inflight.len(), 3);
    // RDY 0 stops delivery
    c.rdy(0);
    for m in inflight.drain(..) {
        c.fin(&m.id);
    }
    c.expect_nothing(ms(1000));
    let ch = wait_channel(&n, "t", "c", "in_flight 0", |ch| ch["in_flight_count"] == 0);
    assert_eq!(ch["depth"], 12, "{ch}");
}

#[test]
fn item62_ephemeral_channel_disappears_and_is_not_persisted() {
    let n = Nsqd::start(&[]);
    let mut c = n.connect();
    c.sub("t", "c#ephemeral");
    c.rdy(1);
    publisher(&n).publish("t", b"e");
    let m = c.expect_msg();
    c.fin(&m.id);
    assert!(
        n.channel_stats("t", "c#ephemeral").is_some(),
        "ephemeral channel listed while subscribed"
    );
    // the metadata file (written async) lists t but never the ephemeral channel
    let md = wait_for(secs(5), "nsqd.dat mentions topic t", || {
        n.read_metadata().filter(|s| s.contains(r#""name":"t""#))
    });
    assert!(
        !md.contains("ephemeral"),
        "ephemeral channel persisted: {md}"
    );
    drop(c);
    wait_for(
        secs(5),
        "ephemeral channel removed after its last client left",
        || {
            let t = n.topic_stats("t")?;
            let gone = t["channels"]
                .as_array()
                .map(|a| a.iter().all(|ch| ch["channel_name"] != "c#ephemeral"))
                .unwrap_or(true);
            gone.then_some(())
        },
    );
    sleep_ms(300);
    let md = n.read_metadata().unwrap();
    assert!(
        !md.contains("ephemeral"),
        "ephemeral channel persisted: {md}"
    );
}

#[test]
fn item63_rdy_zero_receives_nothing() {
    let n = Nsqd::start(&[]);
    let mut p = publisher(&n);
    for i in 0..3 {
        p.publish("t", format!("x{i}").as_bytes());
    }
    let mut c = n.connect();
    c.sub("t", "c");
    c.cmd("RDY 0");
    c.expect_nothing(ms(1500));
    let ch = n.channel_stats("t", "c").unwrap();
    assert_eq!(ch["depth"], 3, "{ch}");
    assert_eq!(ch["in_flight_count"], 0, "{ch}");
    c.rdy(1);
    c.expect_msg();
}

#[test]
fn item64_line_of_16384_bytes_accepted() {
    let n = Nsqd::start(&[]);
    let mut c = n.connect();
    let prefix = "PUB t ";
    let pad = "x".repeat(16384 - prefix.len() - 1);
    let line = format!("{prefix}{pad}");
    assert_eq!(line.len() + 1, 16384);
    c.send(&body_cmd(&line, b"hi"));
    c.expect_ok();
}

#[test]
fn item64b_line_of_16385_bytes_closes_without_error_frame() {
    let n = Nsqd::start(&[]);
    let mut c = n.connect();
    let prefix = "PUB t ";
    let pad = "x".repeat(16385 - prefix.len() - 1);
    let mut line = format!("{prefix}{pad}\n").into_bytes();
    assert_eq!(line.len(), 16385);
    line.extend_from_slice(&2i32.to_be_bytes());
    line.extend_from_slice(b"hi");
    let _ = c.try_send(&line);
    c.expect_closed_silently(secs(5));
    n.assert_alive();
}

#[test]
fn item65_trailing_carriage_return_accepted() {
    let n = Nsqd::start(&[]);
    let mut c = n.connect();
    c.send(&body_cmd("PUB t\r", b"crlf"));
    c.expect_ok();
    c.send(b"NOP\r\n");
    c.send(&body_cmd("PUB t\r", b"crlf2"));
    c.expect_ok();
    let t = n.topic_stats("t").expect("topic is named t (\\r stripped)");
    assert_eq!(t["message_count"], 2);
    let s = n.stats("");
    assert_eq!(
        s["topics"].as_array().unwrap().len(),
        1,
        "no topic named \"t\\r\": {s}"
    );
}

#[test]
fn pub_extra_params_ignored_and_publish_while_subscribed() {
    let n = Nsqd::start(&[]);
    let mut c = n.connect();
    c.send(&body_cmd("PUB t extra", b"x"));
    c.expect_ok();
    c.sub("t", "c");
    c.publish("t", b"from-subscriber");
    c.rdy(5);
    let got: BTreeSet<Vec<u8>> = recv_msgs(&mut c, 2, secs(5), true)
        .into_iter()
        .map(|m| m.body)
        .collect();
    assert!(got.contains(b"from-subscriber".as_slice()));
}

#[test]
fn invalid_and_valid_names() {
    let n = Nsqd::start(&[]);
    let long65 = "a".repeat(65);
    let eph65 = format!("{}#ephemeral", "a".repeat(55));
    for bad in [
        "bad!topic",
        "a#b",
        "#ephemeral",
        long65.as_str(),
        eph65.as_str(),
        "a:b",
        "a/b",
        "",
    ] {
        let mut c = n.connect();
        c.cmd(&format!("PUB {bad}"));
        c.expect_error_fatal(format!("E_BAD_TOPIC PUB topic name \"{bad}\" is not valid"));
        let mut c = n.connect();
        c.cmd(&format!("SUB t {bad}"));
        c.expect_error_fatal(format!(
            "E_BAD_CHANNEL SUB channel name \"{bad}\" is not valid"
        ));
    }
    let long64 = "a".repeat(64);
    let eph64 = format!("{}#ephemeral", "a".repeat(54));
    for good in [
        "a",
        "my-topic.v2",
        "x_y#ephemeral",
        "A.b-C_9",
        long64.as_str(),
        eph64.as_str(),
    ] {
        let mut c = n.connect();
        c.publish(good, b"x");
        let mut s = n.connect();
        s.sub("t", good);
    }
    n.assert_alive();
}

#[test]
fn channel_pause_via_http_stops_and_unpause_resumes_delivery() {
    let n = Nsqd::start(&[]);
    let mut c = consumer(&n, "t", "c", 10);
    let r = n.post("/channel/pause?topic=t&channel=c", b"");
    assert_eq!(r.status, 200, "{}", r.text());
    let mut p = publisher(&n);
    for i in 0..3 {
        p.publish("t", format!("p{i}").as_bytes());
    }
    c.expect_nothing(ms(1500));
    let ch = wait_channel(&n, "t", "c", "paused with depth 3", |ch| ch["depth"] == 3);
    assert_eq!(ch["paused"], true, "{ch}");
    let r = n.post("/channel/unpause?topic=t&channel=c", b"");
    assert_eq!(r.status, 200, "{}", r.text());
    let got = recv_msgs(&mut c, 3, secs(5), true);
    assert_eq!(got.len(), 3);
    let ch = wait_channel(&n, "t", "c", "unpaused, depth 0", |ch| {
        ch["depth"] == 0 && ch["in_flight_count"] == 0
    });
    assert_eq!(ch["paused"], false, "{ch}");
}

#[test]
fn topic_pause_via_http_stops_and_unpause_resumes_delivery() {
    let n = Nsqd::start(&[]);
    let mut c = consumer(&n, "t", "c", 10);
    let r = n.post("/topic/pause?topic=t", b"");
    assert_eq!(r.status, 200, "{}", r.text());
    let mut p = publisher(&n);
    for i in 0..3 {
        p.publish("t", format!("p{i}").as_bytes());
    }
    c.expect_nothing(ms(1500));
    let t = wait_for(secs(5), "topic depth 3", || {
        n.topic_stats("t").filter(|t| t["depth"] == 3)
    });
    assert_eq!(t["paused"], true, "{t}");
    let r = n.post("/topic/unpause?topic=t", b"");
    assert_eq!(r.status, 200, "{}", r.text());
    recv_msgs(&mut c, 3, secs(5), true);
}

#[test]
fn disconnect_leaves_inflight_to_time_out_then_redelivers() {
    let n = Nsqd::start(&["--msg-timeout=2s"]);
    let mut a = consumer(&n, "t", "c", 1);
    publisher(&n).publish("t", b"orphan");
    let m1 = a.expect_msg();
    drop(a);
    let t0 = Instant::now();
    let mut b = consumer(&n, "t", "c", 1);
    let m2 = b.expect_msg_within(secs(12));
    let dt = t0.elapsed();
    assert!(dt >= ms(1800), "in-flight messages of a disconnected client are not requeued at once, they time out: {dt:?}");
    assert_eq!((m2.id.as_str(), m2.attempts), (m1.id.as_str(), 2));
}

// ---------------------------------------------------------------------------
// More limits and semantics (tcp-protocol.md §4, nsqd.md §2)
// ---------------------------------------------------------------------------

#[test]
fn identify_upper_bounds() {
    let n = Nsqd::start(&[]);
    fatal_after(
        &n,
        &identify_cmd(r#"{"msg_timeout":900001}"#),
        "E_BAD_BODY IDENTIFY msg timeout (900001) is invalid",
    );
    fatal_after(
        &n,
        &identify_cmd(r#"{"output_buffer_size":65537}"#),
        "E_BAD_BODY IDENTIFY output buffer size (65537) is invalid",
    );
    fatal_after(
        &n,
        &identify_cmd(r#"{"output_buffer_timeout":30001}"#),
        "E_BAD_BODY IDENTIFY output buffer timeout (30001) is invalid",
    );
    fatal_after(
        &n,
        &identify_cmd(r#"{"sample_rate":-1}"#),
        "E_BAD_BODY IDENTIFY sample rate (-1) is invalid",
    );
    // boundary values are accepted
    let mut c = n.connect();
    c.send(&identify_cmd(
        r#"{"msg_timeout":900000,"output_buffer_size":65536,"output_buffer_timeout":30000,"sample_rate":99,"heartbeat_interval":60000}"#,
    ));
    c.expect_ok();
    let mut c = n.connect();
    c.send(&identify_cmd(r#"{"msg_timeout":1000,"output_buffer_size":64,"output_buffer_timeout":25,"heartbeat_interval":1000}"#));
    c.expect_ok();
}

#[test]
fn touch_is_capped_by_max_msg_timeout() {
    let n = Nsqd::start(&["--max-msg-timeout=3s"]);
    let mut c = n.connect();
    c.identify(r#"{"msg_timeout":1000}"#);
    c.sub("t", "c");
    c.rdy(1);
    publisher(&n).publish("t", b"touchy");
    let m1 = c.expect_msg();
    let t0 = Instant::now();
    // keep touching: the deadline can never move past delivery + 3 s
    let m2 = loop {
        assert!(
            t0.elapsed() < secs(12),
            "TOUCH must not extend beyond --max-msg-timeout (no redelivery after 12 s)"
        );
        c.touch(&m1.id);
        if let Some(f) = c.recv_timeout(ms(300)) {
            if f.ftype == FRAME_ERROR {
                // a TOUCH racing the timeout may fail (non-fatal); keep waiting for the redelivery
                assert!(f.text().starts_with("E_TOUCH_FAILED"), "{f:?}");
                continue;
            }
            break f.msg();
        }
    };
    let dt = t0.elapsed();
    assert!(dt >= ms(2900), "redelivered before max-msg-timeout: {dt:?}");
    assert_eq!((m2.id.as_str(), m2.attempts), (m1.id.as_str(), 2));
}

#[test]
fn req_delay_is_clamped_to_max_req_timeout() {
    let n = Nsqd::start(&["--max-req-timeout=2s"]);
    let mut c = consumer(&n, "t", "c", 1);
    publisher(&n).publish("t", b"clamped");
    let m1 = c.expect_msg();
    let t0 = Instant::now();
    c.req(&m1.id, 60_000);
    let m2 = c.expect_msg_within(secs(10));
    let dt = t0.elapsed();
    assert!(dt >= ms(2000), "came back before the clamped 2 s: {dt:?}");
    assert!(
        dt <= ms(9000),
        "REQ 60000 must be clamped to --max-req-timeout=2s, came back after {dt:?}"
    );
    assert_eq!(m2.attempts, 2);
}

#[test]
fn dpub_zero_behaves_like_pub_and_dpub_limit_follows_flag() {
    let n = Nsqd::start(&["--max-req-timeout=2s"]);
    let mut c = consumer(&n, "t", "c", 1);
    let mut p = publisher(&n);
    p.send(&dpub_cmd("t", 0, b"now"));
    p.expect_ok();
    let m = c.expect_msg_within(secs(3));
    assert_eq!(m.body, b"now");
    p.send(&dpub_cmd("t", 2001, b"x"));
    p.expect_error_fatal("E_INVALID DPUB timeout 2001 out of range 0-2000");
}

#[test]
fn dpub_body_errors() {
    let n = Nsqd::start(&[]);
    fatal_after(
        &n,
        &dpub_cmd("t", 10, b""),
        "E_BAD_MESSAGE DPUB invalid message body size 0",
    );
    let mut cmd = b"DPUB t 10\n".to_vec();
    cmd.extend_from_slice(&1048577i32.to_be_bytes());
    fatal_after(
        &n,
        &cmd,
        "E_BAD_MESSAGE DPUB message too big 1048577 > 1048576",
    );
}

#[test]
fn mpub_count_above_limit() {
    let n = Nsqd::start(&[]);
    // (5242880 - 4) / 5 = 1048575 is the largest allowed count
    let mut cmd = b"MPUB t\n".to_vec();
    cmd.extend_from_slice(&4i32.to_be_bytes());
    cmd.extend_from_slice(&1048576i32.to_be_bytes());
    fatal_after(&n, &cmd, "E_BAD_BODY MPUB invalid message count 1048576");
}

#[test]
fn message_ids_are_unique_lowercase_hex() {
    let n = Nsqd::start(&[]);
    let bodies: Vec<Vec<u8>> = (0..500).map(|i| format!("{i}").into_bytes()).collect();
    let refs: Vec<&[u8]> = bodies.iter().map(|b| b.as_slice()).collect();
    let mut p = publisher(&n);
    p.mpublish("t", &refs[..250]);
    for b in &refs[250..] {
        p.publish("t", b);
    }
    let mut c = consumer(&n, "t", "c", 500);
    let msgs = recv_msgs(&mut c, 500, secs(10), true);
    let ids: BTreeSet<String> = msgs.iter().map(|m| m.id.clone()).collect();
    assert_eq!(ids.len(), 500, "ids must be unique");
    assert!(
        msgs.iter().all(|m| msg_id_is_hex16(&m.id_bytes)),
        "ids must be lowercase hex"
    );
    let got: BTreeSet<Vec<u8>> = msgs.into_iter().map(|m| m.body).collect();
    assert_eq!(got, bodies.into_iter().collect());
}

#[test]
fn channel_created_later_only_gets_later_messages() {
    let n = Nsqd::start(&[]);
    let mut a = consumer(&n, "t", "c1", 10);
    let mut p = publisher(&n);
    p.publish("t", b"early");
    let m = a.expect_msg();
    a.fin(&m.id);
    let mut b = consumer(&n, "t", "c2", 10);
    b.expect_nothing(ms(700));
    p.publish("t", b"late");
    assert_eq!(b.expect_msg().body, b"late");
    assert_eq!(a.expect_msg().body, b"late");
}

#[test]
fn client_stats_identity_and_addresses() {
    let n = Nsqd::start(&[]);
    let mut c = n.connect();
    c.sub("t", "c");
    let local = c.stream.local_addr().unwrap();
    let ch = wait_channel(&n, "t", "c", "one client", |ch| ch["client_count"] == 1);
    let cl = only_client(&ch);
    assert_eq!(cl["remote_address"], local.to_string(), "{cl}");
    // without IDENTIFY client_id/hostname default to the remote IP
    assert_eq!(cl["client_id"], "127.0.0.1", "{cl}");
    assert_eq!(cl["hostname"], "127.0.0.1", "{cl}");
    let ts = int(&cl, "connect_ts");
    assert!(
        (ts - now_secs()).abs() <= 5,
        "connect_ts is unix seconds: {ts}"
    );
    // an IDENTIFY without client_id/hostname overwrites them with ""
    let mut d = n.connect();
    d.send(&identify_cmd(r#"{"user_agent":"ua"}"#));
    d.expect_ok();
    d.sub("t", "c2");
    let ch = wait_channel(&n, "t", "c2", "one client", |ch| ch["client_count"] == 1);
    let cl = only_client(&ch);
    assert_eq!(
        (cl["client_id"].as_str(), cl["hostname"].as_str()),
        (Some(""), Some("")),
        "{cl}"
    );
}

#[test]
fn heartbeats_reach_publishers_too() {
    let n = Nsqd::start(&[]);
    let mut c = n.connect();
    c.send(&identify_cmd(r#"{"heartbeat_interval":1000}"#));
    c.expect_ok();
    c.publish("t", b"x");
    match c.try_read_frame(secs(3)) {
        ReadOutcome::Frame(f) => assert!(f.is_heartbeat(), "{f:?}"),
        other => panic!("expected a heartbeat on a publishing connection, got {other:?}"),
    }
}

#[test]
fn fin_req_touch_allowed_after_cls() {
    let n = Nsqd::start(&[]);
    let mut c = consumer(&n, "t", "c", 3);
    let mut p = publisher(&n);
    for i in 0..3 {
        p.publish("t", format!("m{i}").as_bytes());
    }
    let msgs = recv_msgs(&mut c, 3, secs(5), false);
    c.cmd("CLS");
    c.expect_response(b"CLOSE_WAIT");
    c.touch(&msgs[0].id);
    c.fin(&msgs[0].id);
    c.req(&msgs[1].id, 0);
    c.fin(&msgs[2].id);
    c.nop();
    c.send(&pub_cmd("t2", b"x"));
    c.expect_ok(); // no E_*_FAILED before it
    c.expect_nothing(ms(1000)); // the REQ'd message is not sent to a closing client
    let ch = wait_channel(&n, "t", "c", "depth 1 after REQ in closing state", |ch| {
        ch["depth"] == 1 && ch["in_flight_count"] == 0
    });
    assert_eq!(ch["requeue_count"], 1, "{ch}");
}

#[test]
fn sample_rate_drops_part_of_the_stream() {
    let n = Nsqd::start(&[]);
    let mut c = n.connect();
    c.send(&identify_cmd(r#"{"sample_rate":10}"#));
    c.expect_ok();
    c.sub("t", "c");
    c.rdy(500);
    let bodies: Vec<Vec<u8>> = (0..300).map(|i| format!("s{i}").into_bytes()).collect();
    let refs: Vec<&[u8]> = bodies.iter().map(|b| b.as_slice()).collect();
    publisher(&n).mpublish("t", &refs);
    let mut got = 0;
    while let Some(f) = c.recv_timeout(ms(1500)) {
        let m = f.msg();
        c.fin(&m.id);
        got += 1;
    }
    // delivery probability (10+1)/100: ~33 of 300
    assert!(
        (5..=100).contains(&got),
        "sample_rate 10 delivered {got} of 300"
    );
    let ch = wait_channel(
        &n,
        "t",
        "c",
        "sampled-out messages are dropped, not queued",
        |ch| ch["depth"] == 0 && ch["in_flight_count"] == 0,
    );
    assert_eq!(ch["message_count"], 300, "{ch}");
}

#[test]
fn pause_keeps_inflight_finishable() {
    let n = Nsqd::start(&[]);
    let mut c = consumer(&n, "t", "c", 1);
    publisher(&n).publish("t", b"x");
    let m = c.expect_msg();
    assert_eq!(n.post("/channel/pause?topic=t&channel=c", b"").status, 200);
    c.fin(&m.id);
    c.send(&pub_cmd("t2", b"y"));
    c.expect_ok();
    let ch = wait_channel(&n, "t", "c", "in flight 0", |ch| ch["in_flight_count"] == 0);
    assert_eq!(only_client(&ch)["finish_count"], 1, "{ch}");
}

#[test]
fn ephemeral_topic_deleted_with_its_last_channel() {
    let n = Nsqd::start(&[]);
    let mut c = n.connect();
    c.sub("e#ephemeral", "c#ephemeral");
    assert!(n.topic_stats("e#ephemeral").is_some());
    drop(c);
    wait_for(
        secs(5),
        "ephemeral topic removed after its last (ephemeral) channel went away",
        || n.topic_stats("e#ephemeral").is_none().then_some(()),
    );
    // an ephemeral topic that never had a channel stays
    publisher(&n).publish("lonely#ephemeral", b"x");
    sleep_ms(1000);
    assert!(n.topic_stats("lonely#ephemeral").is_some());
}

//! A rolling upgrade under load (docs/replication.md, "Rolling upgrades"):
//! three members of the previous build (`NSQ_OLD_BIN_DIR`, built by
//! `scripts/rolling_upgrade.sh`) with a replicated topic that three
//! producers publish to at 50 messages a second each, through every member,
//! and a consumer that follows the group's leader. Each member in turn is
//! stopped (SIGTERM) and started on the new build from its data directory;
//! then the first is downgraded again. Every member speaks protocol 2 once
//! all run the new build, and 1 once one runs the old build again, when a
//! depth limit (an entry of protocol 2) is refused with 503
//! `REPLICATION_UPGRADE_PENDING`. The
//! account at the end: every acknowledged message delivered (0 lost),
//! duplicates counted, and for each step the longest time without an OK.
//!
//! Without `NSQ_OLD_BIN_DIR` the test says SKIPPED and passes: the test
//! command does not build a second nsqd.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nsq_tests::{free_ports, sleep_ms, Nsqd};

use super::members::*;

const TOPIC: &str = "upgrade";
const PRODUCERS: usize = 3;
const RATE: u64 = 50;

/// Each member's addresses while it runs: (tcp, http).
type Addrs = Arc<Mutex<BTreeMap<u64, (String, String)>>>;

/// A V2 connection whose every failure is an error, not a panic: the
/// members come and go under it.
struct Wire {
    s: TcpStream,
    buf: Vec<u8>,
}

enum Frame {
    Response(Vec<u8>),
    Error,
    Message { id: String, body: Vec<u8> },
}

impl Wire {
    fn open(addr: &str) -> std::io::Result<Wire> {
        let a = addr.parse().map_err(std::io::Error::other)?;
        let mut s = TcpStream::connect_timeout(&a, Duration::from_secs(2))?;
        s.set_nodelay(true)?;
        s.set_write_timeout(Some(Duration::from_secs(5)))?;
        s.write_all(b"  V2")?;
        Ok(Wire { s, buf: Vec::new() })
    }

    fn send(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.s.write_all(b)
    }

    /// The next frame within `wait` (heartbeats answered); Ok(None) on time.
    fn next(&mut self, wait: Duration) -> std::io::Result<Option<Frame>> {
        let deadline = Instant::now() + wait;
        loop {
            if self.buf.len() >= 8 {
                let n = u32::from_be_bytes(self.buf[..4].try_into().unwrap()) as usize;
                if self.buf.len() >= 4 + n {
                    let kind = u32::from_be_bytes(self.buf[4..8].try_into().unwrap());
                    let data: Vec<u8> = self.buf[8..4 + n].to_vec();
                    self.buf.drain(..4 + n);
                    match kind {
                        0 if data == b"_heartbeat_" => self.send(b"NOP\n")?,
                        0 => return Ok(Some(Frame::Response(data))),
                        1 => return Ok(Some(Frame::Error)),
                        _ if data.len() >= 26 => {
                            return Ok(Some(Frame::Message {
                                id: String::from_utf8_lossy(&data[10..26]).into(),
                                body: data[26..].to_vec(),
                            }))
                        }
                        _ => return Err(std::io::Error::other("a short message frame")),
                    }
                    continue;
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            self.s.set_read_timeout(Some(left))?;
            let mut chunk = [0u8; 65536];
            match self.s.read(&mut chunk) {
                Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Ok(None)
                }
                Err(e) => return Err(e),
            }
        }
    }
}

fn pub_cmd(body: &[u8]) -> Vec<u8> {
    let mut v = format!("PUB {TOPIC}\n").into_bytes();
    v.extend_from_slice(&(body.len() as u32).to_be_bytes());
    v.extend_from_slice(body);
    v
}

/// One producer: `RATE` PUBs a second through member `k` (or the next one
/// up), each body `p<k>-<seq>`; the OKs with their times.
fn produce(k: usize, addrs: Addrs, stop: Arc<AtomicBool>) -> Vec<(String, Instant)> {
    let mut acked = Vec::new();
    let mut seq = 0u64;
    let mut wire: Option<Wire> = None;
    let start = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let due = start + Duration::from_millis(seq * 1000 / RATE);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        if wire.is_none() {
            let up: Vec<String> = addrs
                .lock()
                .unwrap()
                .values()
                .map(|a| a.0.clone())
                .collect();
            if up.is_empty() {
                sleep_ms(50);
                continue;
            }
            wire = Wire::open(&up[(k + seq as usize) % up.len()]).ok();
            if wire.is_none() {
                sleep_ms(50);
                continue;
            }
        }
        let body = format!("p{k}-{seq}");
        seq += 1;
        let w = wire.as_mut().unwrap();
        let ok = w.send(&pub_cmd(body.as_bytes())).is_ok()
            && matches!(w.next(Duration::from_secs(10)), Ok(Some(Frame::Response(r))) if r == b"OK");
        if ok {
            acked.push((body, Instant::now()));
        } else {
            // refused or cut off: this one may or may not be committed (it
            // is not counted), and the next goes through a new connection
            wire = None;
        }
    }
    acked
}

/// The consumer: follows the leader of the topic's group, FINs what it
/// gets; every body with the number of times it came.
fn consume(addrs: Addrs, done: Arc<AtomicBool>) -> BTreeMap<String, u32> {
    let mut got: BTreeMap<String, u32> = BTreeMap::new();
    let group = group_of(TOPIC);
    while !done.load(Ordering::Relaxed) {
        let up = addrs.lock().unwrap().clone();
        let leader = up.values().find_map(|(_, http)| {
            let r = nsq_tests::http_request_timeout(
                http,
                "GET",
                "/replication",
                &[],
                None,
                Duration::from_secs(2),
            )
            .ok()?;
            let v: serde_json::Value = serde_json::from_slice(&r.body).ok()?;
            v["groups"][group]["leader"].as_u64()
        });
        let Some(tcp) = leader.and_then(|l| up.get(&l)).map(|a| a.0.clone()) else {
            sleep_ms(100);
            continue;
        };
        let Ok(mut w) = Wire::open(&tcp) else {
            sleep_ms(100);
            continue;
        };
        if w.send(format!("SUB {TOPIC} c\nRDY 50\n").as_bytes())
            .is_err()
        {
            continue;
        }
        while !done.load(Ordering::Relaxed) {
            match w.next(Duration::from_millis(500)) {
                Ok(Some(Frame::Message { id, body })) => {
                    *got.entry(String::from_utf8_lossy(&body).into())
                        .or_default() += 1;
                    if w.send(format!("FIN {id}\n").as_bytes()).is_err() {
                        break;
                    }
                }
                Ok(Some(Frame::Response(_))) | Ok(None) => {}
                // refused (not the leader any more) or cut off
                Ok(Some(Frame::Error)) | Err(_) => break,
            }
        }
        sleep_ms(50);
    }
    got
}

/// The longest time without an OK between `from` and `to`.
fn longest_silence(oks: &[Instant], from: Instant, to: Instant) -> Duration {
    let mut last = from;
    let mut worst = Duration::ZERO;
    for &t in oks.iter().filter(|t| **t > from && **t <= to) {
        worst = worst.max(t - last);
        last = t;
    }
    worst.max(to.saturating_duration_since(last))
}

fn protocols(ms: &[Member]) -> Vec<Option<u64>> {
    ms.iter()
        .map(|m| replication(&m.nsqd)["protocol"].as_u64())
        .collect()
}

fn restart_on(members: &mut Vec<Member>, id: u64, bin: &Path, dir: &Path, addrs: &Addrs) {
    addrs.lock().unwrap().remove(&id);
    let gone = stop_member(members, id);
    let args: Vec<&str> = gone.args.iter().map(String::as_str).collect();
    let nsqd = Nsqd::start_in_bin(bin, dir, &args);
    addrs
        .lock()
        .unwrap()
        .insert(id, (nsqd.tcp_addr.clone(), nsqd.http_addr.clone()));
    let args = gone.args.clone();
    drop(gone);
    members.push(Member { id, nsqd, args });
    members.sort_by_key(|m| m.id);
}

#[test]
fn a_cluster_upgraded_and_downgraded_member_by_member_under_load_loses_nothing() {
    let Some(old) = std::env::var_os("NSQ_OLD_BIN_DIR").map(PathBuf::from) else {
        eprintln!("SKIPPED: NSQ_OLD_BIN_DIR is not set (scripts/rolling_upgrade.sh builds the previous nsqd and sets it)");
        return;
    };
    let new = nsq_tests::bin_dir();
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let ports = free_ports(3);
    let peers = (1..=3u64)
        .map(|id| format!("{id}@127.0.0.1:{}", ports[id as usize - 1]))
        .collect::<Vec<_>>()
        .join(",");
    let mut members: Vec<Member> = (1..=3u64)
        .map(|id| {
            let args = member_args(id, ports[id as usize - 1], &peers);
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            let nsqd = Nsqd::start_in_bin(&old, dirs[id as usize - 1].path(), &a);
            Member { id, nsqd, args }
        })
        .collect();
    for m in &members {
        wait_standing(&m.nsqd, "member");
    }
    agreed_leaders(&members.iter().collect::<Vec<_>>(), None);
    assert_eq!(create(&members[0].nsqd, TOPIC, 3), (200, String::new()));
    wait_replicas(&members, TOPIC, 3);
    let r = members[1]
        .nsqd
        .post(&format!("/channel/create?topic={TOPIC}&channel=c"), b"");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        protocols(&members),
        vec![None; 3],
        "the old build says none"
    );

    let addrs: Addrs = Arc::new(Mutex::new(
        members
            .iter()
            .map(|m| (m.id, (m.nsqd.tcp_addr.clone(), m.nsqd.http_addr.clone())))
            .collect(),
    ));
    let (stop, done) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|k| {
            let (a, s) = (addrs.clone(), stop.clone());
            std::thread::spawn(move || produce(k, a, s))
        })
        .collect();
    let consumer = {
        let (a, d) = (addrs.clone(), done.clone());
        std::thread::spawn(move || consume(a, d))
    };
    sleep_ms(3000);

    let steps = [
        (1u64, &new, "upgrade"),
        (2, &new, "upgrade"),
        (3, &new, "upgrade"),
        (1, &old, "downgrade"),
    ];
    let mut windows = Vec::new();
    for (id, bin, what) in steps {
        let from = Instant::now();
        restart_on(&mut members, id, bin, dirs[id as usize - 1].path(), &addrs);
        let m = by_id(&members, id);
        wait_standing(&m.nsqd, "member");
        agreed_leaders(&members.iter().collect::<Vec<_>>(), None);
        if what == "upgrade" && id == 3 {
            // all three on the new build: each has met the other two
            nsq_tests::wait_for(WAIT, "every member speaking protocol 2", || {
                (protocols(&members) == vec![Some(2); 3]).then_some(())
            });
        }
        // the load runs a while on the new arrangement before the next step
        sleep_ms(3000);
        windows.push((format!("{what} member {id}"), from, Instant::now()));
    }
    // member 1 runs the old build again: the others speak what it speaks
    nsq_tests::wait_for(WAIT, "the new members back to protocol 1", || {
        (protocols(&members)[1..] == [Some(1), Some(1)]).then_some(())
    });
    // and what needs protocol 2 (a Limit entry) is not proposed meanwhile
    let r = members[1].nsqd.post(
        &format!("/channel/config?topic={TOPIC}&channel=c&max_depth=100000"),
        b"",
    );
    assert_eq!(
        (r.status, r.text()),
        (
            503,
            "{\"message\":\"REPLICATION_UPGRADE_PENDING\"}".to_string()
        ),
        "a limit while member 1 runs the old build"
    );

    stop.store(true, Ordering::Relaxed);
    let acked: Vec<(String, Instant)> = producers
        .into_iter()
        .flat_map(|p| p.join().expect("producer"))
        .collect();
    let expected: std::collections::BTreeSet<&str> =
        acked.iter().map(|(b, _)| b.as_str()).collect();
    // the consumer drains what was acknowledged
    let deadline = Instant::now() + Duration::from_secs(60);
    let got = loop {
        sleep_ms(1000);
        let unfinished: Vec<Option<u64>> =
            members.iter().map(|m| unfinished(&m.nsqd, TOPIC)).collect();
        if unfinished.iter().all(|u| *u == Some(0)) || Instant::now() > deadline {
            done.store(true, Ordering::Relaxed);
            break consumer.join().expect("consumer");
        }
    };
    let lost: Vec<&&str> = expected.iter().filter(|b| !got.contains_key(**b)).collect();
    let duplicates: u32 = got.values().map(|n| n - 1).sum();
    let unacked_delivered = got
        .keys()
        .filter(|b| !expected.contains(b.as_str()))
        .count();
    let mut oks: Vec<Instant> = acked.iter().map(|(_, t)| *t).collect();
    oks.sort();
    let mut report =
        String::from("| step | longest time without an OK | OKs in the step |\n|---|---|---|\n");
    for (name, from, to) in &windows {
        let n = oks.iter().filter(|t| **t > *from && **t <= *to).count();
        report += &format!(
            "| {name} | {} ms | {n} |\n",
            longest_silence(&oks, *from, *to).as_millis()
        );
    }
    report += &format!(
        "\nacknowledged {}, delivered {} distinct, lost {}, duplicates {duplicates}, \
         delivered without an acknowledgement {unacked_delivered}\n",
        expected.len(),
        got.len(),
        lost.len()
    );
    eprintln!("{report}");
    if let Some(path) = std::env::var_os("NSQ_UPGRADE_REPORT") {
        std::fs::write(path, &report).expect("write the report");
    }
    assert!(
        lost.is_empty(),
        "acknowledged and never delivered: {lost:?}\n{report}"
    );
    assert!(expected.len() > 1000, "the load ran: {report}");
}

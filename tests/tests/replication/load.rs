//! The load of the replication tests that change the cluster under it (a
//! rolling upgrade, members added and removed): producers that publish to
//! a replicated topic at a fixed rate through every member up, retrying a
//! failed PUB on another connection (and not counting it), a consumer that
//! follows the topic's group's leader, and the account at the end: every
//! acknowledged message delivered, duplicates counted, the longest time
//! without an OK per step.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nsq_tests::sleep_ms;

use super::members::*;

pub const TOPIC: &str = "upgrade";
pub const PRODUCERS: usize = 3;
pub const RATE: u64 = 50;

/// Each member's addresses while it runs: (tcp, http).
pub type Addrs = Arc<Mutex<BTreeMap<u64, (String, String)>>>;

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
pub fn produce(k: usize, addrs: Addrs, stop: Arc<AtomicBool>) -> Vec<(String, Instant)> {
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
pub fn consume(addrs: Addrs, done: Arc<AtomicBool>) -> BTreeMap<String, u32> {
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
pub fn longest_silence(oks: &[Instant], from: Instant, to: Instant) -> Duration {
    let mut last = from;
    let mut worst = Duration::ZERO;
    for &t in oks.iter().filter(|t| **t > from && **t <= to) {
        worst = worst.max(t - last);
        last = t;
    }
    worst.max(to.saturating_duration_since(last))
}

/// The load running: producers and the consumer, and the members they
/// use (each one's TCP and HTTP address while it is up).
pub struct Load {
    pub addrs: Addrs,
    stop: Arc<AtomicBool>,
    done: Arc<AtomicBool>,
    producers: Vec<JoinHandle<Vec<(String, Instant)>>>,
    consumer: JoinHandle<BTreeMap<String, u32>>,
}

/// What the load came to.
pub struct Account {
    pub acknowledged: usize,
    /// The bodies of the acknowledged messages.
    pub acked: BTreeSet<String>,
    pub lost: Vec<String>,
    /// The steps (of `finish`'s windows) in which no publish was
    /// acknowledged: the load did not run through them. Counted per step
    /// rather than as a total, which the machine's load decides.
    pub quiet_steps: Vec<String>,
    /// Duplicates and the rest, for the reader.
    pub report: String,
}

impl Load {
    /// Starts `PRODUCERS` producers and the consumer on `members`.
    pub fn start(members: &[Member]) -> Load {
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
        let producers = (0..PRODUCERS)
            .map(|k| {
                let (a, s) = (addrs.clone(), stop.clone());
                std::thread::spawn(move || produce(k, a, s))
            })
            .collect();
        let consumer = {
            let (a, d) = (addrs.clone(), done.clone());
            std::thread::spawn(move || consume(a, d))
        };
        Load {
            addrs,
            stop,
            done,
            producers,
            consumer,
        }
    }

    /// Member `id` is up at its addresses (used from now on).
    pub fn up(&self, m: &Member) {
        self.addrs
            .lock()
            .unwrap()
            .insert(m.id, (m.nsqd.tcp_addr.clone(), m.nsqd.http_addr.clone()));
    }

    /// Member `id` is going (not used from now on).
    pub fn down(&self, id: u64) {
        self.addrs.lock().unwrap().remove(&id);
    }

    /// Stops the producers, lets the consumer drain what the members hold
    /// unfinished (up to 60 s), and gives the account, the longest time
    /// without an OK in each of `windows`.
    pub fn finish(self, members: &[Member], windows: &[(String, Instant, Instant)]) -> Account {
        self.stop.store(true, Ordering::Relaxed);
        let acked: Vec<(String, Instant)> = self
            .producers
            .into_iter()
            .flat_map(|p| p.join().expect("producer"))
            .collect();
        let expected: BTreeSet<&str> = acked.iter().map(|(b, _)| b.as_str()).collect();
        let deadline = Instant::now() + Duration::from_secs(60);
        let got = loop {
            sleep_ms(1000);
            let unfinished: Vec<Option<u64>> =
                members.iter().map(|m| unfinished(&m.nsqd, TOPIC)).collect();
            if unfinished.iter().all(|u| *u == Some(0)) || Instant::now() > deadline {
                self.done.store(true, Ordering::Relaxed);
                break self.consumer.join().expect("consumer");
            }
        };
        let lost: Vec<String> = expected
            .iter()
            .filter(|b| !got.contains_key(**b))
            .map(|b| b.to_string())
            .collect();
        let duplicates: u32 = got.values().map(|n| n - 1).sum();
        let unacked_delivered = got
            .keys()
            .filter(|b| !expected.contains(b.as_str()))
            .count();
        let mut oks: Vec<Instant> = acked.iter().map(|(_, t)| *t).collect();
        oks.sort();
        let mut report = String::from(
            "| step | longest time without an OK | OKs in the step |\n|---|---|---|\n",
        );
        let mut quiet_steps = Vec::new();
        for (name, from, to) in windows {
            let n = oks.iter().filter(|t| **t > *from && **t <= *to).count();
            if n == 0 {
                quiet_steps.push(name.clone());
            }
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
        Account {
            acknowledged: expected.len(),
            acked: expected.iter().map(|b| b.to_string()).collect(),
            lost,
            quiet_steps,
            report,
        }
    }
}

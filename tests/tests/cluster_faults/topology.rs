//! The cluster of issue 18 on namespace hosts: which process runs on which
//! host with which flags, and how each is started, signalled, restarted.
//!
//! Hosts (all on `10.18.0.0/24`, see `nsq_tests::netns`): `ctl` (.1, where
//! the test thread itself runs), lookupds `l1..l3` (.11–.13), nsqds
//! `n1..n6` (.21–.26; `n6` starts as the spare that joins later), consumers
//! `c1..c4` (.31–.34) and `adm` (.41, nsqadmin). Every daemon uses NSQ's
//! default ports on its own address. Each nsqd host also runs a producer
//! publishing to `127.0.0.1:4150`, its local nsqd. Consumers find nsqds
//! through the three lookupds only.
//!
//! The daemons come from `NSQ_BIN_DIR` (so NSQ 1.3.0's Go binaries can be
//! swapped in); the producers and consumers are always this workspace's
//! `nsq_ledger` and pynsq.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nsq_tests::netns::{Net, NsGuard, SUBNET};
use nsq_tests::{bin_dir, http_request_timeout, sleep_ms, wait_timeout, workspace_root};

pub const TOPIC: &str = "ledger";
/// Durable channels: judged (no acknowledged message may be lost).
pub const DURABLE: [&str; 2] = ["a", "b"];
/// Reported, not judged: NSQ may drop messages of an ephemeral channel.
pub const EPHEMERAL: &str = "e#ephemeral";

pub const LOOKUPDS: [&str; 3] = ["l1", "l2", "l3"];
pub const NSQDS: [&str; 6] = ["n1", "n2", "n3", "n4", "n5", "n6"];
pub const CONSUMERS: [&str; 4] = ["c1", "c2", "c3", "c4"];
pub const ADMIN: &str = "adm";
pub const CONTROL: &str = "ctl";

/// Which client each consumer host runs, and its channels.
pub fn consumer_spec(host: &str) -> (Client, &'static [&'static str]) {
    match host {
        "c1" => (Client::Rust, &["a", EPHEMERAL]),
        "c2" => (Client::Rust, &["a", "b"]),
        "c3" => (Client::Pynsq, &["a", "b"]),
        "c4" => (Client::Rust, &["b", EPHEMERAL]),
        _ => panic!("no consumer host {host}"),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client {
    Rust,
    Pynsq,
}

/// Every interval the cluster is configured with; the recovery bounds are
/// sums of these (see `scenarios.rs`).
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// nsqd's PING to each lookupd (fixed in nsqd).
    pub ping: Duration,
    /// nsqd's timeout for one lookupd dial/read/write (fixed in nsqd).
    pub lookupd_io: Duration,
    /// nsqlookupd `--inactive-producer-timeout`.
    pub inactive: Duration,
    /// Consumers' `lookupd_poll_interval` and its first-poll jitter.
    pub poll: Duration,
    pub jitter: f64,
    /// Consumers' `lookupd_poll_timeout` and `dial_timeout`.
    pub lookupd_timeout: Duration,
    pub dial: Duration,
    /// Consumers' heartbeat interval; nsqd drops a silent client after 2×.
    pub heartbeat: Duration,
    /// nsqd `--msg-timeout`.
    pub msg_timeout: Duration,
    /// Allowance for scheduling on 2 busy cores, debug builds and the
    /// observer's 250 ms sampling.
    pub slack: Duration,
    /// A consumer receives steadily from an nsqd when no two deliveries
    /// are further apart than this (at the test's rates they come every
    /// ~0.1 s).
    pub steady_gap: Duration,
    /// A consumer has recovered when it received steadily for this long.
    pub steady_for: Duration,
}

impl Timing {
    pub fn standard() -> Timing {
        let s = Duration::from_secs;
        Timing {
            ping: s(15),
            lookupd_io: s(1),
            inactive: s(20),
            poll: s(5),
            jitter: 0.3,
            lookupd_timeout: s(2),
            dial: s(1),
            heartbeat: s(5),
            msg_timeout: s(10),
            slack: s(3),
            steady_gap: s(2),
            steady_for: s(3),
        }
    }

    /// How long messages held by a stopped or cut-off consumer take to
    /// reach the others. nsqd keeps writing to it (up to its RDY, timed-out
    /// messages included) until it drops the silent connection after two
    /// heartbeats, and a dropped client's in-flight messages wait out
    /// `--msg-timeout` as in NSQ, so the last one written is due
    /// `2 × heartbeat + msg_timeout` after the fault.
    pub fn held(&self) -> Duration {
        2 * self.heartbeat + self.msg_timeout + self.slack
    }
}

/// Where the programs are.
pub struct Bins {
    pub nsqd: PathBuf,
    pub nsqlookupd: PathBuf,
    pub nsqadmin: PathBuf,
    pub ledger: PathBuf,
    pub python: PathBuf,
    pub pynsq_consumer: PathBuf,
}

impl Bins {
    pub fn locate() -> Result<Bins, String> {
        let daemons = bin_dir();
        // nsq_ledger is ours even when NSQ_BIN_DIR holds Go daemons.
        let own = std::env::var("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .map(|p| {
                if p.is_absolute() {
                    p
                } else {
                    workspace_root().join(p)
                }
            })
            .unwrap_or_else(|_| workspace_root().join("target"))
            .join("debug");
        let ledger = [daemons.join("nsq_ledger"), own.join("nsq_ledger")]
            .into_iter()
            .find(|p| p.exists())
            .ok_or("nsq_ledger not built (cargo build -p nsq_ledger)")?;
        let python = std::env::var("NSQ_PYTHON")
            .map(PathBuf::from)
            .unwrap_or_else(|_| workspace_root().join(".venv/bin/python"));
        let b = Bins {
            nsqd: daemons.join("nsqd"),
            nsqlookupd: daemons.join("nsqlookupd"),
            nsqadmin: daemons.join("nsqadmin"),
            ledger,
            python,
            pynsq_consumer: workspace_root().join("tests/python/ledger_consumer.py"),
        };
        for p in [&b.nsqd, &b.nsqlookupd, &b.nsqadmin, &b.pynsq_consumer] {
            if !p.exists() {
                return Err(format!("{} not found", p.display()));
            }
        }
        let ok = std::process::Command::new(&b.python)
            .args(["-c", "import nsq, tornado"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            return Err(format!(
                "{} cannot import pynsq (scripts/test.sh creates .venv; or set NSQ_PYTHON)",
                b.python.display()
            ));
        }
        Ok(b)
    }
}

/// One process on one host; killed (SIGCONT, SIGKILL) and reaped on drop.
pub struct Proc {
    pub host: String,
    program: PathBuf,
    args: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
}

impl Proc {
    fn spawn(&mut self, net: &Net) -> Result<(), String> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("open {}: {e}", self.log.display()))?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        let child = net
            .command(&self.host, &self.program)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", self.program.display()))?;
        self.child = Some(child);
        Ok(())
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn signal(&self, sig: i32) {
        if let Some(pid) = self.pid() {
            nsq_tests::send_signal(pid, sig);
        }
    }

    /// SIGSTOP, returning once every thread has stopped.
    pub fn freeze(&self) {
        if let Some(pid) = self.pid() {
            nsq_tests::freeze(pid);
        }
    }

    /// SIGKILL (after SIGCONT, in case it is stopped) and reap.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            nsq_tests::send_signal(c.id(), libc::SIGCONT);
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait up to `timeout`; SIGKILL after that (`None`).
    pub fn terminate(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let mut c = self.child.take()?;
        nsq_tests::send_signal(c.id(), libc::SIGCONT);
        nsq_tests::send_signal(c.id(), libc::SIGTERM);
        match wait_timeout(&mut c, timeout) {
            Some(st) => Some(st),
            None => {
                let _ = c.kill();
                let _ = c.wait();
                None
            }
        }
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The running cluster. Field order is drop order: processes first, then
/// the test thread leaves `ctl`, then the namespaces go.
pub struct Cluster {
    pub procs: BTreeMap<String, Proc>,
    /// nsqd hosts that are up (or meant to be: crashed ones are out).
    pub live: BTreeSet<String>,
    /// nsqd hosts not in the cluster, next to join.
    pub spare: Vec<String>,
    incarnations: BTreeMap<String, u32>,
    pub dir: PathBuf,
    pub timing: Timing,
    bins: Bins,
    _in_ctl: NsGuard,
    pub net: Net,
}

pub fn ip_of(host: &str) -> String {
    let last = match host {
        CONTROL => 1,
        "l1" => 11,
        "l2" => 12,
        "l3" => 13,
        ADMIN => 41,
        h if h.starts_with('n') => 20 + h[1..].parse::<u8>().expect("nsqd host number"),
        h if h.starts_with('c') => 30 + h[1..].parse::<u8>().expect("consumer host number"),
        h => panic!("unknown host {h}"),
    };
    format!("{SUBNET}.{last}")
}

/// The nsqd TCP address as consumers log it.
pub fn nsqd_tcp(host: &str) -> String {
    format!("{}:4150", ip_of(host))
}

pub fn nsqd_http(host: &str) -> String {
    format!("{}:4151", ip_of(host))
}

pub fn lookupd_http(host: &str) -> String {
    format!("{}:4161", ip_of(host))
}

pub fn admin_http() -> String {
    format!("{}:4171", ip_of(ADMIN))
}

/// `GET /ping` answers 200 within `timeout`.
pub fn wait_ping(addr: &str, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        let r = http_request_timeout(addr, "GET", "/ping", &[], None, Duration::from_secs(1));
        if r.is_ok_and(|r| r.status == 200) {
            return true;
        }
        sleep_ms(50);
    }
    false
}

impl Cluster {
    /// Creates the hosts and moves the test thread into `ctl`. No process yet.
    pub fn create(dir: &Path, timing: Timing, bins: Bins) -> Result<Cluster, String> {
        let mut hosts: Vec<(&str, u8)> = Vec::new();
        let all: Vec<&str> = [CONTROL, ADMIN]
            .into_iter()
            .chain(LOOKUPDS)
            .chain(NSQDS)
            .chain(CONSUMERS)
            .collect();
        let lasts: Vec<u8> = all
            .iter()
            .map(|h| {
                ip_of(h)
                    .rsplit('.')
                    .next()
                    .and_then(|x| x.parse().ok())
                    .unwrap_or(0)
            })
            .collect();
        for (h, l) in all.iter().zip(&lasts) {
            hosts.push((h, *l));
        }
        let net = Net::create(&hosts)?;
        let in_ctl = net.enter(CONTROL)?;
        for sub in ["data", "ledgers", "logs"] {
            fs::create_dir_all(dir.join(sub)).map_err(|e| e.to_string())?;
        }
        Ok(Cluster {
            procs: BTreeMap::new(),
            live: BTreeSet::new(),
            spare: vec!["n6".to_string()],
            incarnations: BTreeMap::new(),
            dir: dir.to_path_buf(),
            timing,
            bins,
            _in_ctl: in_ctl,
            net,
        })
    }

    pub(crate) fn launch(
        &mut self,
        name: &str,
        host: &str,
        program: PathBuf,
        args: Vec<String>,
    ) -> Result<(), String> {
        let mut p = Proc {
            host: host.to_string(),
            program,
            args,
            log: self.dir.join("logs").join(format!("{name}.log")),
            child: None,
        };
        p.spawn(&self.net)?;
        if let Some(mut old) = self.procs.insert(name.to_string(), p) {
            old.kill();
        }
        Ok(())
    }

    pub fn proc(&mut self, name: &str) -> &mut Proc {
        self.procs
            .get_mut(name)
            .unwrap_or_else(|| panic!("no process {name}"))
    }

    pub fn lookupd_args(&self, host: &str) -> Vec<String> {
        vec![
            format!("--broadcast-address={}", ip_of(host)),
            format!(
                "--inactive-producer-timeout={}s",
                self.timing.inactive.as_secs()
            ),
        ]
    }

    pub fn start_lookupd(&mut self, host: &str) -> Result<(), String> {
        let args = self.lookupd_args(host);
        self.launch(
            &format!("lookupd@{host}"),
            host,
            self.bins.nsqlookupd.clone(),
            args,
        )?;
        if !wait_ping(&lookupd_http(host), Duration::from_secs(20)) {
            return Err(format!("nsqlookupd on {host} did not answer /ping"));
        }
        Ok(())
    }

    pub fn data_dir(&self, host: &str) -> PathBuf {
        self.dir.join("data").join(host)
    }

    /// nsqd with every acknowledged message on disk before `OK`
    /// (`--mem-queue-size=0 --sync-every=1`), registered with every lookupd.
    pub fn start_nsqd(&mut self, host: &str) -> Result<(), String> {
        self.start_nsqd_with(host, &[])
    }

    /// [`Cluster::start_nsqd`] with `extra` flags.
    pub fn start_nsqd_with(&mut self, host: &str, extra: &[String]) -> Result<(), String> {
        let data = self.data_dir(host);
        fs::create_dir_all(&data).map_err(|e| e.to_string())?;
        let mut args = vec![
            format!("--data-path={}", data.display()),
            format!("--broadcast-address={}", ip_of(host)),
            format!("--node-id={}", &host[1..]),
            "--mem-queue-size=0".to_string(),
            "--sync-every=1".to_string(),
            format!("--msg-timeout={}s", self.timing.msg_timeout.as_secs()),
        ];
        for l in LOOKUPDS {
            args.push(format!("--lookupd-tcp-address={}:4160", ip_of(l)));
        }
        args.extend(extra.iter().cloned());
        self.launch(&format!("nsqd@{host}"), host, self.bins.nsqd.clone(), args)?;
        if !wait_ping(&nsqd_http(host), Duration::from_secs(30)) {
            let tail = self.proc(&format!("nsqd@{host}")).log_tail(20);
            return Err(format!("nsqd on {host} did not answer /ping:\n{tail}"));
        }
        Ok(())
    }

    /// The host's producer; each start is a new incarnation with new ids.
    pub fn start_producer(&mut self, host: &str, rate: f64) -> Result<(), String> {
        let inc = self.incarnations.entry(host.to_string()).or_insert(0);
        *inc += 1;
        let args = vec![
            "produce".to_string(),
            "--nsqd-tcp-address=127.0.0.1:4150".to_string(),
            format!("--topic={TOPIC}"),
            format!("--id-prefix={host}.{inc}"),
            format!("--rate={rate}"),
            format!(
                "--ledger={}",
                self.dir
                    .join("ledgers")
                    .join(format!("producer-{host}.log"))
                    .display()
            ),
        ];
        self.launch(
            &format!("producer@{host}"),
            host,
            self.bins.ledger.clone(),
            args,
        )
    }

    pub fn consumer_ledger(&self, host: &str) -> PathBuf {
        self.dir
            .join("ledgers")
            .join(format!("consumer-{host}.log"))
    }

    pub fn producer_ledger(&self, host: &str) -> PathBuf {
        self.dir
            .join("ledgers")
            .join(format!("producer-{host}.log"))
    }

    pub fn start_consumer(&mut self, host: &str) -> Result<(), String> {
        let (client, channels) = consumer_spec(host);
        let t = self.timing;
        let ledger = self.consumer_ledger(host);
        let (program, mut args) = match client {
            Client::Rust => {
                let mut a = vec![
                    "consume".to_string(),
                    format!("--topic={TOPIC}"),
                    format!("--ledger={}", ledger.display()),
                    "--handlers=4".to_string(),
                    "--max-work=20ms".to_string(),
                ];
                for (k, v) in [
                    ("max_in_flight", "50".to_string()),
                    ("max_attempts", "0".to_string()),
                    ("lookupd_poll_interval", format!("{}ms", t.poll.as_millis())),
                    ("lookupd_poll_jitter", t.jitter.to_string()),
                    (
                        "lookupd_poll_timeout",
                        format!("{}ms", t.lookupd_timeout.as_millis()),
                    ),
                    ("dial_timeout", format!("{}ms", t.dial.as_millis())),
                    (
                        "heartbeat_interval",
                        format!("{}ms", t.heartbeat.as_millis()),
                    ),
                    ("read_timeout", format!("{}ms", 2 * t.heartbeat.as_millis())),
                ] {
                    a.push(format!("--consumer-opt={k},{v}"));
                }
                (self.bins.ledger.clone(), a)
            }
            Client::Pynsq => (
                self.bins.python.clone(),
                vec![
                    self.bins.pynsq_consumer.display().to_string(),
                    format!("--topic={TOPIC}"),
                    format!("--ledger={}", ledger.display()),
                    "--max-in-flight=50".to_string(),
                    "--max-work-ms=20".to_string(),
                    format!("--lookupd-poll-interval={}", t.poll.as_secs()),
                    format!("--heartbeat-interval={}", t.heartbeat.as_secs()),
                ],
            ),
        };
        for ch in channels {
            args.push(format!("--channel={ch}"));
        }
        for l in LOOKUPDS {
            args.push(format!("--lookupd-http-address={}", lookupd_http(l)));
        }
        self.launch(&format!("consumer@{host}"), host, program, args)
    }

    pub fn start_admin(&mut self) -> Result<(), String> {
        let mut args = vec![format!("--http-address={}", admin_http())];
        for l in LOOKUPDS {
            args.push(format!("--lookupd-http-address={}", lookupd_http(l)));
        }
        self.launch(
            &format!("nsqadmin@{ADMIN}"),
            ADMIN,
            self.bins.nsqadmin.clone(),
            args,
        )?;
        if !wait_ping(&admin_http(), Duration::from_secs(20)) {
            return Err("nsqadmin did not answer /ping".into());
        }
        Ok(())
    }

    /// Every (consumer, durable channel, nsqd address) that should see
    /// deliveries when `consumers` run and `nsqds` are live. The ephemeral
    /// channel is left out: nsqd drops its messages whenever its memory
    /// queue is full and no consumer is ready that instant, so silence on it
    /// says nothing about recovery; its losses are reported instead.
    pub fn pairs(consumers: &[&str], nsqds: &BTreeSet<String>) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        for c in consumers {
            for ch in consumer_spec(c).1.iter().filter(|ch| DURABLE.contains(ch)) {
                for n in nsqds {
                    out.push((c.to_string(), ch.to_string(), nsqd_tcp(n)));
                }
            }
        }
        out
    }

    /// Topic and channel depths, in flight and deferred of one nsqd
    /// (`None` when it does not answer).
    pub fn backlog(&self, host: &str) -> Option<BTreeMap<String, i64>> {
        let r = http_request_timeout(
            &nsqd_http(host),
            "GET",
            &format!("/stats?format=json&topic={TOPIC}"),
            &[],
            None,
            Duration::from_secs(2),
        )
        .ok()?;
        if r.status != 200 {
            return None;
        }
        let v: serde_json::Value = serde_json::from_slice(&r.body).ok()?;
        let mut out = BTreeMap::new();
        for t in v["topics"].as_array()? {
            if t["topic_name"] != TOPIC {
                continue;
            }
            out.insert("topic".to_string(), t["depth"].as_i64().unwrap_or(0));
            for c in t["channels"].as_array().into_iter().flatten() {
                let name = c["channel_name"].as_str().unwrap_or("?").to_string();
                let held = c["depth"].as_i64().unwrap_or(0)
                    + c["in_flight_count"].as_i64().unwrap_or(0)
                    + c["deferred_count"].as_i64().unwrap_or(0);
                out.insert(name, held);
            }
        }
        Some(out)
    }
}

//! The faults, each a bounded procedure on the running cluster that records
//! when it struck, when it healed, and what must follow within which time
//! ([`Check`]s, judged afterwards in `report.rs`).
//!
//! Every bound is a sum of configured intervals ([`Timing`]) plus a fixed
//! slack, with the reason spelled out where it is set:
//! * consumers poll every lookupd each `poll` (pynsq asks one per poll), so
//!   an nsqd every lookupd lists is found within `poll`;
//! * nsqd PINGs each lookupd every `ping` and re-registers on a new
//!   connection when a command fails, so a lookupd that lost an nsqd (or
//!   restarted) lists it again within `ping` (+ one `lookupd_io` timeout);
//! * a lookupd hides an nsqd it has not heard from for `inactive`;
//! * nsqd drops a silent consumer after 2 × `heartbeat` and times out a
//!   message after `msg_timeout`; either way it goes to another consumer.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use nsq_tests::{now_ns, sleep_ms, Rng};

use crate::observer::{LedgerTail, Observer};
use crate::topology::{consumer_spec, Client, Cluster, ADMIN, CONSUMERS, LOOKUPDS};

pub type Pair = (String, String, String);

/// Something that must be seen after a fault.
#[derive(Debug, Clone)]
pub enum Check {
    /// Every pair gets a delivery at or after `from` within `bound`.
    Deliveries {
        pairs: Vec<Pair>,
        from: i64,
        bound: Duration,
    },
    /// No pair goes longer than `bound` without a delivery in `[from, to]`.
    Continuity {
        pairs: Vec<Pair>,
        from: i64,
        to: i64,
        bound: Duration,
    },
    /// `source` lists exactly `nodes` (and, with `clear`, no warning)
    /// within `bound` of `from`.
    View {
        source: String,
        nodes: BTreeSet<String>,
        from: i64,
        bound: Duration,
        clear: bool,
    },
    /// `source` lists exactly `nodes` at every sample in `[from, to]`.
    Steady {
        source: String,
        nodes: BTreeSet<String>,
        from: i64,
        to: i64,
    },
    /// Messages held by `held_by` when it stopped reach other consumers:
    /// redeliveries to them from `from` on of messages last delivered to
    /// `held_by` before `to` (the heal), the latest within `bound`.
    Redelivered {
        held_by: String,
        from: i64,
        to: i64,
        bound: Duration,
    },
    /// A clean SIGTERM exit (`code` is the exit code, None = killed).
    CleanExit { what: String, code: Option<i32> },
}

/// One fault as it happened.
#[derive(Debug, Clone)]
pub struct FaultRecord {
    pub name: String,
    /// The scenario's window: messages sent in `[begin, end)` are its own.
    pub begin: i64,
    pub end: i64,
    pub fault_at: i64,
    pub heal_at: i64,
    pub checks: Vec<Check>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    NsqdCrash(String),
    NsqdPartition(String),
    NsqdPause(String),
    LookupdPause(String),
    ConsumerPause(String),
    LookupdsDown(String, String),
    LookupdPartial(String, Vec<String>),
    NsqdJoin,
    NsqdRemove(String),
    ConsumerPartition(String),
}

/// Everything a scenario works with. Field order is drop order: the
/// observer's threads stop before the cluster (and its namespaces) go.
pub struct Ctx {
    pub observer: Observer,
    pub tail: LedgerTail,
    pub rng: Rng,
    /// Long run: random durations in wide ranges; short: the minimum that
    /// still exercises the fault.
    pub long: bool,
    pub rate: f64,
    pub records: Vec<FaultRecord>,
    pub cluster: Cluster,
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

impl Ctx {
    /// `short` in the short run, else uniform in `lo..=hi` seconds.
    fn pick(&mut self, short: u64, lo: u64, hi: u64) -> Duration {
        if self.long {
            secs(lo + self.rng.below(hi - lo + 1))
        } else {
            secs(short)
        }
    }

    fn hold(&self, d: Duration) {
        sleep_ms(d.as_millis() as u64);
    }

    fn all_consumers() -> Vec<&'static str> {
        CONSUMERS.to_vec()
    }

    fn live(&self) -> BTreeSet<String> {
        self.cluster.live.clone()
    }

    /// Every lookupd and nsqadmin shows exactly `nodes` (no warning) within
    /// `bound` of `from`.
    fn views(&self, nodes: &BTreeSet<String>, from: i64, bound: Duration) -> Vec<Check> {
        LOOKUPDS
            .iter()
            .map(|l| l.to_string())
            .chain([ADMIN.to_string()])
            .map(|source| Check::View {
                clear: source == ADMIN,
                source,
                nodes: nodes.clone(),
                from,
                bound,
            })
            .collect()
    }

    /// Waits until every consumer has received from every live nsqd since
    /// `from` and steadily for a few seconds (no pause over `steady_gap`),
    /// and (with `views`) every lookupd and nsqadmin shows the live set; or
    /// until `limit` passed. So each fault starts on a quiet cluster and the
    /// previous one's aftermath is measured in its own window.
    pub fn settle(&mut self, from: i64, limit: Duration, views: bool) -> bool {
        let deadline = Instant::now() + limit;
        let pairs = Cluster::pairs(&Self::all_consumers(), &self.cluster.live);
        let gap = self.cluster.timing.steady_gap.as_nanos() as i64;
        let mut steady_since: Option<Instant> = None;
        loop {
            self.tail.update();
            let now = now_ns();
            let missing = self.tail.missing_since(from.max(now - gap), &pairs);
            let views_ok = !views
                || LOOKUPDS.iter().chain([&ADMIN]).all(|s| {
                    self.observer.latest(s).is_some_and(|v| {
                        v.nodes == self.cluster.live && (*s != ADMIN || v.message.is_empty())
                    })
                });
            if missing.is_empty() && views_ok {
                let since = *steady_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= self.cluster.timing.steady_for {
                    return true;
                }
            } else {
                steady_since = None;
            }
            if Instant::now() >= deadline {
                eprintln!("not settled after {limit:?}: {} pairs without deliveries {:?}…, views ok: {views_ok}", missing.len(), missing.iter().take(4).collect::<Vec<_>>());
                return false;
            }
            sleep_ms(200);
        }
    }

    fn record(
        &mut self,
        name: String,
        begin: i64,
        fault_at: i64,
        heal_at: i64,
        checks: Vec<Check>,
    ) {
        self.records.push(FaultRecord {
            name,
            begin,
            end: i64::MAX,
            fault_at,
            heal_at,
            checks,
        });
    }

    /// Longest bound of `checks` (how long to wait for recovery).
    fn longest(checks: &[Check]) -> Duration {
        checks
            .iter()
            .map(|c| match c {
                Check::Deliveries { bound, .. }
                | Check::View { bound, .. }
                | Check::Redelivered { bound, .. } => *bound,
                _ => Duration::ZERO,
            })
            .max()
            .unwrap_or_default()
    }

    /// Runs one fault, waits for the cluster to recover, records it.
    pub fn run(&mut self, fault: &Fault) -> Result<(), String> {
        let begin = now_ns();
        let t = self.cluster.timing;
        let (name, fault_at, heal_at, checks) = match fault {
            Fault::NsqdCrash(n) => self.nsqd_crash(n, t)?,
            Fault::NsqdPartition(n) => self.nsqd_partition(n, t)?,
            Fault::NsqdPause(n) => self.nsqd_pause(n, t)?,
            Fault::LookupdPause(l) => self.lookupd_pause(l, t)?,
            Fault::ConsumerPause(c) => self.consumer_pause(c, t)?,
            Fault::LookupdsDown(a, b) => self.lookupds_down(a, b, t)?,
            Fault::LookupdPartial(l, ns) => self.lookupd_partial(l, ns, t)?,
            Fault::NsqdJoin => self.nsqd_join(t)?,
            Fault::NsqdRemove(n) => self.nsqd_remove(n, t)?,
            Fault::ConsumerPartition(c) => self.consumer_partition(c, t)?,
        };
        let limit = Self::longest(&checks) + secs(5);
        let since = heal_at.max(fault_at);
        self.settle(since, limit, true);
        eprintln!("{name}: {:.1} s", (now_ns() - begin) as f64 / 1e9);
        self.record(name, begin, fault_at, heal_at, checks);
        Ok(())
    }

    /// The host crashes: nsqd and its producer SIGKILLed, restarted after a pause.
    fn nsqd_crash(&mut self, n: &str, t: crate::topology::Timing) -> Result<Outcome, String> {
        let down = self.pick(3, 1, 15);
        let fault_at = now_ns();
        self.cluster.proc(&format!("nsqd@{n}")).kill();
        self.cluster.proc(&format!("producer@{n}")).kill();
        self.cluster.live.remove(n);
        let gone = self.live();
        // The kernel closes its lookupd connections: unregistered at once.
        let mut checks = self.views(&gone, fault_at, t.slack);
        self.hold(down);
        self.cluster.start_nsqd(n)?;
        self.cluster.start_producer(n, self.rate)?;
        let heal_at = now_ns();
        self.cluster.live.insert(n.to_string());
        let live = self.live();
        // It registers with every lookupd as it starts; consumers find it at their next poll.
        checks.extend(self.views(&live, heal_at, t.slack));
        checks.push(Check::Deliveries {
            pairs: Cluster::pairs(&Self::all_consumers(), &live),
            from: heal_at,
            bound: t.poll + t.slack,
        });
        Ok((
            format!(
                "nsqd crash: SIGKILL {n} (+ producer), restart after {}s",
                down.as_secs()
            ),
            fault_at,
            heal_at,
            checks,
        ))
    }

    /// The host's link is down for longer than `--inactive-producer-timeout`.
    fn nsqd_partition(&mut self, n: &str, t: crate::topology::Timing) -> Result<Outcome, String> {
        let extra = self.pick(2, 2, 25);
        let down = t.inactive + extra;
        let fault_at = now_ns();
        self.cluster.net.link_down(n)?;
        let mut without = self.live();
        without.remove(n);
        // Its last PING was at most `ping` ago; it is hidden `inactive` after that.
        let mut checks = self.views(&without, fault_at, t.inactive + t.slack);
        self.hold(down);
        self.cluster.net.link_up(n)?;
        let heal_at = now_ns();
        let live = self.live();
        // Its next PING (within `ping`) fails or reconnects, and re-registers.
        let rereg = t.ping + t.lookupd_io + t.slack;
        checks.extend(self.views(&live, heal_at, rereg));
        // A Rust consumer's read timeout closed its connection to the host
        // during the partition; it reconnects at the poll after the
        // lookupds list the host again. pynsq has no read timeout: it
        // learns that nsqd dropped the connection only when its own
        // retransmission gets through (nsqd answers with a reset), and TCP
        // doubles the interval between retransmissions, so that can come
        // up to the partition's length after the heal (a CI run saw 26 s
        // after a 22 s partition, against 24 s allowed without it).
        let (rust, pynsq): (Vec<&str>, Vec<&str>) = Self::all_consumers()
            .into_iter()
            .partition(|c| consumer_spec(c).0 == Client::Rust);
        checks.push(Check::Deliveries {
            pairs: Cluster::pairs(&rust, &live),
            from: heal_at,
            bound: rereg + t.poll,
        });
        checks.push(Check::Deliveries {
            pairs: Cluster::pairs(&pynsq, &live),
            from: heal_at,
            bound: (rereg + t.poll).max(down + t.poll + t.slack),
        });
        Ok((
            format!("nsqd partition: {n} link down {}s", down.as_secs()),
            fault_at,
            heal_at,
            checks,
        ))
    }

    /// nsqd SIGSTOPped (longer than the consumers' read timeout), then SIGCONT.
    fn nsqd_pause(&mut self, n: &str, t: crate::topology::Timing) -> Result<Outcome, String> {
        let down = self.pick(12, 3, 30);
        let fault_at = now_ns();
        self.cluster.proc(&format!("nsqd@{n}")).freeze();
        self.hold(down);
        self.cluster
            .proc(&format!("nsqd@{n}"))
            .signal(libc::SIGCONT);
        let heal_at = now_ns();
        let live = self.live();
        // If a lookupd hid it meanwhile, its next PING brings it back.
        let rereg = t.ping + t.lookupd_io + t.slack;
        let mut checks = self.views(&live, heal_at, rereg);
        checks.push(Check::Deliveries {
            pairs: Cluster::pairs(&Self::all_consumers(), &live),
            from: heal_at,
            bound: rereg + t.poll,
        });
        Ok((
            format!("nsqd pause: SIGSTOP {n} {}s", down.as_secs()),
            fault_at,
            heal_at,
            checks,
        ))
    }

    /// A lookupd SIGSTOPped: consumers ask the others and never miss an nsqd.
    fn lookupd_pause(&mut self, l: &str, t: crate::topology::Timing) -> Result<Outcome, String> {
        let down = self.pick(10, 3, 30);
        let fault_at = now_ns();
        self.cluster.proc(&format!("lookupd@{l}")).freeze();
        self.hold(down);
        self.cluster
            .proc(&format!("lookupd@{l}"))
            .signal(libc::SIGCONT);
        let heal_at = now_ns();
        let live = self.live();
        let pairs = Cluster::pairs(&Self::all_consumers(), &live);
        let checks = vec![
            Check::Continuity {
                pairs,
                from: fault_at,
                to: heal_at,
                bound: t.slack,
            },
            // Registrations it timed out meanwhile come back with the next PING.
            Check::View {
                source: l.to_string(),
                nodes: live.clone(),
                from: heal_at,
                bound: t.ping + t.lookupd_io + t.slack,
                clear: false,
            },
            Check::View {
                source: ADMIN.to_string(),
                nodes: live,
                from: heal_at,
                bound: t.ping + t.lookupd_io + t.slack,
                clear: true,
            },
        ];
        Ok((
            format!("lookupd pause: SIGSTOP {l} {}s", down.as_secs()),
            fault_at,
            heal_at,
            checks,
        ))
    }

    /// A consumer SIGSTOPped with messages in flight: they go to the others.
    fn consumer_pause(&mut self, c: &str, t: crate::topology::Timing) -> Result<Outcome, String> {
        let down = self.pick(12, 11, 30);
        let fault_at = now_ns();
        self.cluster.proc(&format!("consumer@{c}")).freeze();
        self.hold(down);
        self.cluster
            .proc(&format!("consumer@{c}"))
            .signal(libc::SIGCONT);
        let heal_at = now_ns();
        let live = self.live();
        let checks = vec![
            Check::Redelivered {
                held_by: c.to_string(),
                from: fault_at,
                to: heal_at,
                bound: t.held(),
            },
            // Its dead connections are noticed at once; it reconnects at its next poll.
            Check::Deliveries {
                pairs: Cluster::pairs(&[c], &live),
                from: heal_at,
                bound: t.poll + t.slack,
            },
        ];
        let kind = if consumer_spec(c).0 == Client::Pynsq {
            "pynsq"
        } else {
            "Rust"
        };
        Ok((
            format!("consumer pause: SIGSTOP {c} ({kind}) {}s", down.as_secs()),
            fault_at,
            heal_at,
            checks,
        ))
    }

    /// One lookupd killed, then a second; both restarted.
    fn lookupds_down(
        &mut self,
        a: &str,
        b: &str,
        t: crate::topology::Timing,
    ) -> Result<Outcome, String> {
        let one = self.pick(4, 3, 20);
        let two = self.pick(4, 3, 20);
        let fault_at = now_ns();
        self.cluster.proc(&format!("lookupd@{a}")).kill();
        self.hold(one);
        self.cluster.proc(&format!("lookupd@{b}")).kill();
        self.hold(two);
        self.cluster.start_lookupd(a)?;
        self.cluster.start_lookupd(b)?;
        let heal_at = now_ns();
        let live = self.live();
        let pairs = Cluster::pairs(&Self::all_consumers(), &live);
        // A restarted lookupd is empty; each nsqd's next PING fails on the
        // old connection, reconnects and registers everything.
        let rereg = t.ping + t.lookupd_io + t.slack;
        let mut checks = vec![
            Check::Continuity {
                pairs,
                from: fault_at,
                to: heal_at,
                bound: t.slack,
            },
            // nsqadmin unions the lookupds: the surviving one shows every nsqd.
            Check::Steady {
                source: ADMIN.to_string(),
                nodes: live.clone(),
                from: fault_at,
                to: heal_at,
            },
        ];
        for l in [a, b] {
            checks.push(Check::View {
                source: l.to_string(),
                nodes: live.clone(),
                from: heal_at,
                bound: rereg,
                clear: false,
            });
        }
        checks.push(Check::View {
            source: ADMIN.to_string(),
            nodes: live,
            from: heal_at,
            bound: t.slack,
            clear: true,
        });
        Ok((
            format!(
                "lookupds down: SIGKILL {a}, {}s later {b}, restart both after {}s",
                one.as_secs(),
                two.as_secs()
            ),
            fault_at,
            heal_at,
            checks,
        ))
    }

    /// A lookupd cut off from some nsqds only; restarted consumers must
    /// still find every nsqd through the union of the lookupds.
    fn lookupd_partial(
        &mut self,
        l: &str,
        cut: &[String],
        t: crate::topology::Timing,
    ) -> Result<Outcome, String> {
        let extra = self.pick(2, 2, 20);
        let fault_at = now_ns();
        for n in cut {
            self.cluster.net.cut(l, n)?;
        }
        let live = self.live();
        let partial: BTreeSet<String> = live.iter().filter(|n| !cut.contains(n)).cloned().collect();
        let mut checks = vec![Check::View {
            source: l.to_string(),
            nodes: partial.clone(),
            from: fault_at,
            bound: t.inactive + t.slack,
            clear: false,
        }];
        // Once the lookupd hides them, two consumers start from nothing.
        self.observer_wait(l, &partial, t.inactive + t.slack + secs(2));
        let restarted = ["c2", "c3"];
        for c in restarted {
            if let Some(st) = self
                .cluster
                .proc(&format!("consumer@{c}"))
                .terminate(secs(40))
            {
                checks.push(Check::CleanExit {
                    what: format!("consumer {c} SIGTERM"),
                    code: st.code(),
                });
            } else {
                checks.push(Check::CleanExit {
                    what: format!("consumer {c} SIGTERM"),
                    code: None,
                });
            }
            self.cluster.start_consumer(c)?;
        }
        let started_at = now_ns();
        // Rust asks every lookupd at start; pynsq asks one per poll, the
        // second after up to poll × (1 + jitter).
        checks.push(Check::Deliveries {
            pairs: Cluster::pairs(&restarted, &live),
            from: started_at,
            bound: t.poll.mul_f64(1.0 + t.jitter) + t.slack,
        });
        let others: Vec<&str> = CONSUMERS
            .iter()
            .copied()
            .filter(|c| !restarted.contains(c))
            .collect();
        self.settle(
            started_at,
            t.poll.mul_f64(1.0 + t.jitter) + t.slack + secs(5),
            false,
        );
        let held = fault_at + (t.inactive + extra).as_nanos() as i64;
        let wait = held - now_ns();
        if wait > 0 {
            sleep_ms((wait / 1_000_000) as u64);
        }
        for n in cut {
            self.cluster.net.heal(l, n)?;
        }
        let heal_at = now_ns();
        checks.push(Check::Continuity {
            pairs: Cluster::pairs(&others, &live),
            from: fault_at,
            to: heal_at,
            bound: t.slack,
        });
        checks.push(Check::Steady {
            source: ADMIN.to_string(),
            nodes: live.clone(),
            from: fault_at,
            to: heal_at,
        });
        checks.push(Check::View {
            source: l.to_string(),
            nodes: live,
            from: heal_at,
            bound: t.ping + t.lookupd_io + t.slack,
            clear: false,
        });
        Ok((
            format!(
                "lookupd partial: {l} cut from {} for {}s; c2, c3 restarted",
                cut.join(", "),
                (heal_at - fault_at) / 1_000_000_000
            ),
            fault_at,
            heal_at,
            checks,
        ))
    }

    /// Waits until `source` shows `nodes` (true) or `limit` passes.
    fn observer_wait(&self, source: &str, nodes: &BTreeSet<String>, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if self
                .observer
                .latest(source)
                .is_some_and(|v| &v.nodes == nodes)
            {
                return true;
            }
            sleep_ms(100);
        }
        false
    }

    /// A new nsqd host (empty data) joins under load.
    fn nsqd_join(&mut self, t: crate::topology::Timing) -> Result<Outcome, String> {
        let n = self.cluster.spare.pop().ok_or("no spare nsqd host")?;
        let data = self.cluster.data_dir(&n);
        let _ = std::fs::remove_dir_all(&data);
        self.cluster.start_nsqd(&n)?;
        // Timed from its first /ping answer: how long a debug build takes
        // to start on a loaded machine is not what lookupd and the
        // consumers are measured on (it once made 0.8 s of the bound).
        let fault_at = now_ns();
        self.cluster.start_producer(&n, self.rate)?;
        self.cluster.live.insert(n.clone());
        let live = self.live();
        let only: BTreeSet<String> = [n.clone()].into();
        let mut checks = self.views(&live, fault_at, t.slack);
        checks.push(Check::Deliveries {
            pairs: Cluster::pairs(&Self::all_consumers(), &only),
            from: fault_at,
            bound: t.poll + t.slack,
        });
        Ok((
            format!("nsqd join: {n} (empty) starts with its producer"),
            fault_at,
            fault_at,
            checks,
        ))
    }

    /// An nsqd host leaves for good: producer stopped, channels drained,
    /// then a clean SIGTERM.
    fn nsqd_remove(&mut self, n: &str, t: crate::topology::Timing) -> Result<Outcome, String> {
        let mut checks = Vec::new();
        let st = self
            .cluster
            .proc(&format!("producer@{n}"))
            .terminate(secs(20));
        checks.push(Check::CleanExit {
            what: format!("producer {n} SIGTERM"),
            code: st.and_then(|s| s.code()),
        });
        let drained = self.wait_drained(n, secs(60));
        if !drained {
            eprintln!(
                "nsqd {n} not drained before removal: {:?}",
                self.cluster.backlog(n)
            );
        }
        let fault_at = now_ns();
        let st = self.cluster.proc(&format!("nsqd@{n}")).terminate(secs(30));
        checks.push(Check::CleanExit {
            what: format!("nsqd {n} SIGTERM"),
            code: st.and_then(|s| s.code()),
        });
        self.cluster.live.remove(n);
        // First in, first out: the host that left longest ago joins next.
        self.cluster.spare.insert(0, n.to_string());
        let live = self.live();
        // A clean exit closes its lookupd connections: unregistered at once.
        checks.extend(self.views(&live, fault_at, t.slack));
        Ok((
            format!("nsqd removed: {n} drained, SIGTERM"),
            fault_at,
            fault_at,
            checks,
        ))
    }

    /// Until every durable channel (and the topic) of `n` holds nothing.
    pub fn wait_drained(&self, n: &str, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(b) = self.cluster.backlog(n) {
                let durable_empty = ["topic", "a", "b"]
                    .iter()
                    .all(|k| b.get(*k).copied().unwrap_or(0) == 0);
                if durable_empty {
                    return true;
                }
            }
            sleep_ms(250);
        }
        false
    }

    /// A consumer host's link down with messages in flight.
    fn consumer_partition(
        &mut self,
        c: &str,
        t: crate::topology::Timing,
    ) -> Result<Outcome, String> {
        let down = self.pick(12, 11, 30);
        let fault_at = now_ns();
        self.cluster.net.link_down(c)?;
        self.hold(down);
        self.cluster.net.link_up(c)?;
        let heal_at = now_ns();
        let live = self.live();
        // Rust: its read timeout fired during the partition; a lookupd
        // round (3 dials of `dial` each at worst) then the next poll.
        // pynsq has no read timeout: it notices only when nsqd's
        // retransmitted FIN gets through, up to the partition's length
        // later (TCP backoff), then polls.
        let reconnect = match consumer_spec(c).0 {
            Client::Rust => t.poll + 3 * t.dial + t.slack,
            Client::Pynsq => t.poll + down + t.slack,
        };
        let checks = vec![
            Check::Redelivered {
                held_by: c.to_string(),
                from: fault_at,
                to: heal_at,
                bound: t.held(),
            },
            Check::Deliveries {
                pairs: Cluster::pairs(&[c], &live),
                from: heal_at,
                bound: reconnect,
            },
        ];
        let kind = if consumer_spec(c).0 == Client::Pynsq {
            "pynsq"
        } else {
            "Rust"
        };
        Ok((
            format!(
                "consumer partition: {c} ({kind}) link down {}s",
                down.as_secs()
            ),
            fault_at,
            heal_at,
            checks,
        ))
    }
}

/// (name, fault_at, heal_at, checks)
type Outcome = (String, i64, i64, Vec<Check>);

/// The short run: every fault once.
pub fn short_schedule() -> Vec<Fault> {
    vec![
        Fault::NsqdCrash("n1".into()),
        Fault::ConsumerPause("c3".into()),
        Fault::NsqdPause("n3".into()),
        Fault::LookupdPause("l1".into()),
        Fault::NsqdPartition("n2".into()),
        Fault::LookupdsDown("l2".into(), "l3".into()),
        Fault::LookupdPartial("l1".into(), vec!["n4".into(), "n5".into()]),
        Fault::NsqdJoin,
        Fault::NsqdRemove("n1".into()),
        Fault::ConsumerPartition("c2".into()),
    ]
}

/// The next round of the long run: every kind once, in random order, on
/// random targets among the hosts live at the time each one runs.
pub fn long_round(rng: &mut Rng) -> Vec<u8> {
    let mut kinds: Vec<u8> = (0..10).collect();
    for i in (1..kinds.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        kinds.swap(i, j);
    }
    kinds
}

/// A concrete fault of `kind` for the cluster as it is now.
pub fn fault_of_kind(kind: u8, live: &BTreeSet<String>, rng: &mut Rng) -> Fault {
    let pick = |v: &[String], rng: &mut Rng| v[rng.below(v.len() as u64) as usize].clone();
    let live: Vec<String> = live.iter().cloned().collect();
    let lookupds: Vec<String> = LOOKUPDS.iter().map(|s| s.to_string()).collect();
    let consumers: Vec<String> = CONSUMERS.iter().map(|s| s.to_string()).collect();
    match kind {
        0 => Fault::NsqdCrash(pick(&live, rng)),
        1 => Fault::NsqdPartition(pick(&live, rng)),
        2 => Fault::NsqdPause(pick(&live, rng)),
        3 => Fault::LookupdPause(pick(&lookupds, rng)),
        4 => Fault::ConsumerPause(pick(&consumers, rng)),
        5 => {
            let a = pick(&lookupds, rng);
            let rest: Vec<String> = lookupds.iter().filter(|l| **l != a).cloned().collect();
            Fault::LookupdsDown(a, pick(&rest, rng))
        }
        6 => {
            let l = pick(&lookupds, rng);
            let a = pick(&live, rng);
            let rest: Vec<String> = live.iter().filter(|n| **n != a).cloned().collect();
            Fault::LookupdPartial(l, vec![a, pick(&rest, rng)])
        }
        7 => Fault::NsqdJoin,
        8 => Fault::NsqdRemove(pick(&live, rng)),
        _ => Fault::ConsumerPartition(pick(&consumers, rng)),
    }
}

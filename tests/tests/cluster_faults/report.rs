//! Judging a run: every [`Check`] of every fault against the ledgers and the
//! observer's samples, the account per channel and per fault window, and
//! the Markdown report: one row per fault, one per kind of fault (the table
//! `docs/reliability.md` quotes), one per channel.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use nsq_tests::ledger::{ChannelAccount, Ledgers};

use crate::observer::Observer;
use crate::scenarios::{Check, FaultRecord};
use crate::topology::{Timing, ADMIN, DURABLE, EPHEMERAL};

/// The report's timing columns.
const COLUMNS: [&str; 4] = ["consumers", "lookupds", "nsqadmin", "held"];

/// One judged check.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// consumers, lookupds, nsqadmin, held, exit.
    pub column: &'static str,
    pub text: String,
    pub ok: bool,
    /// A measured time: (what it is in the cell, reference time, ns, bound).
    pub measured: Option<(&'static str, i64, i64, Duration)>,
}

fn s(ns: i64) -> String {
    format!("{:.1}", ns as f64 / 1e9)
}

fn ms(ns: i64) -> String {
    format!("{:.1}", ns as f64 / 1e6)
}

fn b(d: Duration) -> String {
    format!("{}", d.as_secs_f64().round() as u64)
}

fn within(ns: i64, bound: &Duration) -> bool {
    ns <= bound.as_nanos() as i64
}

/// Judges `check` of a fault whose window ends at `end`.
pub fn judge(
    check: &Check,
    end: i64,
    timing: &Timing,
    ledgers: &mut Ledgers,
    obs: &Observer,
) -> Verdict {
    let plain = |column, text: String, ok| Verdict {
        column,
        text,
        ok,
        measured: None,
    };
    match check {
        Check::Deliveries { pairs, from, bound } => {
            // Steadily again: a first message after a reconnect followed by
            // a stall does not count as recovered; a run as long as the one
            // `settle` waits for does.
            let gap = timing.steady_gap.as_nanos() as i64;
            let run = timing.steady_for.as_nanos() as i64;
            let firsts = ledgers.steady_after(*from, end, gap, run, pairs);
            let missing: Vec<(String, String, String)> = pairs
                .iter()
                .zip(&firsts)
                .filter(|(_, f)| f.is_none())
                .map(|(p, _)| p.clone())
                .collect();
            if !missing.is_empty() {
                // The longest pause says whether it never came back or
                // came back in fits.
                let gaps = ledgers.max_gaps(*from, end, &missing);
                let text: Vec<String> = missing
                    .iter()
                    .zip(gaps)
                    .map(|((c, ch, n), g)| format!("{c}/{ch}/{n} (longest pause {} s)", s(g)))
                    .collect();
                return plain(
                    "consumers",
                    format!(
                        "not receiving steadily: {} (≤ {})",
                        text.join(" "),
                        b(*bound)
                    ),
                    false,
                );
            }
            let (worst, at) = pairs
                .iter()
                .zip(&firsts)
                .filter_map(|(p, f)| f.map(|t| (t - from, format!("{}/{}/{}", p.0, p.1, p.2))))
                .max()
                .unwrap_or_default();
            Verdict {
                column: "consumers",
                text: format!("{} s at {at} (≤ {})", s(worst), b(*bound)),
                ok: within(worst, bound),
                measured: Some(("", *from, worst, *bound)),
            }
        }
        Check::Continuity {
            pairs,
            from,
            to,
            bound,
        } => {
            let gaps = ledgers.max_gaps(*from, *to, pairs);
            let (worst, at) = gaps
                .iter()
                .zip(pairs)
                .map(|(g, p)| (*g, format!("{}/{}/{}", p.0, p.1, p.2)))
                .max()
                .unwrap_or_default();
            Verdict {
                column: "consumers",
                text: format!("gap {} s at {at} (≤ {})", s(worst), b(*bound)),
                ok: within(worst, bound),
                measured: Some(("longest gap during fault", *from, worst, *bound)),
            }
        }
        Check::View {
            source,
            nodes,
            from,
            bound,
            clear,
        } => {
            let hit = obs.first_match(source, *from, |v| {
                &v.nodes == nodes && (!clear || v.message.is_empty())
            });
            let column = if source == ADMIN {
                "nsqadmin"
            } else {
                "lookupds"
            };
            match hit {
                Some(t) => Verdict {
                    column,
                    text: format!("{source} {} s (≤ {})", s(t - from), b(*bound)),
                    ok: within(t - from, bound),
                    measured: Some(("", *from, t - from, *bound)),
                },
                None => plain(
                    column,
                    format!("{source} never showed {nodes:?} (≤ {})", b(*bound)),
                    false,
                ),
            }
        }
        Check::Steady {
            source,
            nodes,
            from,
            to,
        } => {
            let (bad, all) = obs.violations(source, *from, *to, |v| &v.nodes == nodes);
            let column = if source == ADMIN {
                "nsqadmin"
            } else {
                "lookupds"
            };
            let text = if bad == 0 {
                "every nsqd throughout".to_string()
            } else {
                format!("{source} missed nsqds in {bad}/{all} samples")
            };
            plain(column, text, bad == 0 && all > 0)
        }
        Check::Redelivered {
            held_by,
            from,
            to,
            bound,
        } => {
            let end = to + bound.as_nanos() as i64;
            let r = ledgers.handed_over(held_by, *to, *from, end);
            match r.iter().map(|(t, _)| t - from).max() {
                None => plain("held", "none held".into(), true),
                Some(l) => Verdict {
                    column: "held",
                    text: format!("{} by {} s (≤ {})", r.len(), s(l), b(*bound)),
                    ok: within(l, bound),
                    measured: Some(("", *from, l, *bound)),
                },
            }
        }
        Check::CleanExit { what, code } => plain(
            "exit",
            format!(
                "{what}: {}",
                code.map(|c| format!("exit {c}")).unwrap_or("killed".into())
            ),
            *code == Some(0),
        ),
    }
}

/// The account of the durable and ephemeral channels over a window.
pub fn accounts(ledgers: &mut Ledgers, from: i64, to: i64) -> BTreeMap<String, ChannelAccount> {
    DURABLE
        .iter()
        .chain([&EPHEMERAL])
        .map(|ch| (ch.to_string(), ledgers.account(ch, from, to)))
        .collect()
}

/// Worst measured time per (column, label) and the other cell texts.
#[derive(Default)]
struct Cells {
    worst: BTreeMap<(&'static str, String), (i64, Duration)>,
    other: BTreeMap<&'static str, Vec<String>>,
}

impl Cells {
    fn add(&mut self, v: &Verdict, label: String) {
        match v.measured {
            Some((_, _, took, bound)) if v.ok => {
                let w = self.worst.entry((v.column, label)).or_insert((took, bound));
                *w = (w.0.max(took), w.1.max(bound));
            }
            _ if v.column != "exit" || !v.ok => {
                let t = self.other.entry(v.column).or_default();
                if !t.contains(&v.text) {
                    t.push(v.text.clone());
                }
            }
            _ => {}
        }
    }

    fn cell(&self, column: &str) -> String {
        let mut parts: Vec<String> = self
            .worst
            .iter()
            .filter(|((c, _), _)| *c == column)
            .map(|((_, label), (took, bound))| {
                let sep = if label.is_empty() { "" } else { " " };
                format!("{label}{sep}{} s (≤ {})", s(*took), b(*bound))
            })
            .collect();
        parts.extend(self.other.get(column).into_iter().flatten().cloned());
        if parts.is_empty() {
            "–".into()
        } else {
            parts.join("; ")
        }
    }
}

/// "on fault" / "on heal" for a measurement taken from either moment.
fn label(v: &Verdict, r: &FaultRecord) -> String {
    let Some((what, from, _, _)) = v.measured else {
        return String::new();
    };
    let when = if !what.is_empty() {
        what
    } else if r.fault_at == r.heal_at {
        ""
    } else if from == r.fault_at {
        "on fault"
    } else if from == r.heal_at {
        "on heal"
    } else {
        "restarted"
    };
    when.to_string()
}

#[derive(Default)]
struct KindTotals {
    runs: usize,
    ok_runs: usize,
    acknowledged: usize,
    lost: [usize; 2],
    duplicates: [usize; 2],
    cells: Cells,
}

pub struct Report {
    pub markdown: String,
    pub failures: Vec<String>,
}

/// The whole run: per-fault table, per-kind table, per-channel totals, and
/// what failed.
pub fn build(
    title: &str,
    records: &[FaultRecord],
    timing: &Timing,
    ledgers: &mut Ledgers,
    obs: &Observer,
) -> Report {
    let mut failures = Vec::new();
    let mut rows = String::new();
    let mut kinds: BTreeMap<String, KindTotals> = BTreeMap::new();
    for (i, r) in records.iter().enumerate() {
        let acc = accounts(ledgers, r.begin, r.end);
        let (a, bb) = (&acc["a"], &acc["b"]);
        let verdicts: Vec<Verdict> = r
            .checks
            .iter()
            .map(|c| judge(c, r.end, timing, ledgers, obs))
            .collect();
        let ok = verdicts.iter().all(|v| v.ok) && a.lost == 0 && bb.lost == 0;
        for v in verdicts.iter().filter(|v| !v.ok) {
            failures.push(format!("#{} {}: {} {}", i + 1, r.name, v.column, v.text));
        }
        if a.lost + bb.lost > 0 {
            failures.push(format!(
                "#{} {}: lost a {} {:?} b {} {:?}",
                i + 1,
                r.name,
                a.lost,
                a.lost_examples,
                bb.lost,
                bb.lost_examples
            ));
        }
        let mut cells = Cells::default();
        let kind = kinds
            .entry(r.name.split(':').next().unwrap_or("").to_string())
            .or_default();
        for v in &verdicts {
            cells.add(v, label(v, r));
            kind.cells.add(v, label(v, r));
        }
        kind.runs += 1;
        kind.ok_runs += usize::from(ok);
        kind.acknowledged += a.acknowledged;
        kind.lost[0] += a.lost;
        kind.lost[1] += bb.lost;
        kind.duplicates[0] += a.duplicates;
        kind.duplicates[1] += bb.duplicates;
        let _ = writeln!(
            rows,
            "| {} | {} | {} | {} / {} | {} / {} | {} | {} | {} | {} | {} |",
            i + 1,
            r.name,
            a.acknowledged,
            a.lost,
            bb.lost,
            a.duplicates,
            bb.duplicates,
            cells.cell("consumers"),
            cells.cell("lookupds"),
            cells.cell("nsqadmin"),
            cells.cell("held"),
            if ok { "yes" } else { "**no**" }
        );
    }
    let header = "| acknowledged | lost a / b | duplicates a / b | consumers receive from every nsqd | lookupds show it | nsqadmin shows it | held messages to others |";
    let mut md = String::new();
    let _ = writeln!(md, "### {title}\n");
    let _ = writeln!(
        md,
        "By kind of fault (worst of its runs; bounds in parentheses):\n"
    );
    let _ = writeln!(md, "| fault | runs | ok {header}");
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|");
    for (k, t) in &kinds {
        let cols: Vec<String> = COLUMNS.iter().map(|c| t.cells.cell(c)).collect();
        let _ = writeln!(
            md,
            "| {k} | {} | {} | {} | {} / {} | {} / {} | {} |",
            t.runs,
            t.ok_runs,
            t.acknowledged,
            t.lost[0],
            t.lost[1],
            t.duplicates[0],
            t.duplicates[1],
            cols.join(" | ")
        );
    }
    let _ = writeln!(md, "\nEvery fault:\n");
    let _ = writeln!(md, "| # | scenario {header} ok |");
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|");
    md.push_str(&rows);
    let _ = writeln!(
        md,
        "\n| channel | acknowledged | lost | duplicates (rate) | ids delivered twice or more | delivered without OK | publish → first delivery p50 / p99 (ms), worst (s) |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|");
    for (ch, acc) in accounts(ledgers, i64::MIN, i64::MAX) {
        let judged = ch != EPHEMERAL;
        if judged && acc.lost > 0 {
            failures.push(format!(
                "channel {ch}: {} acknowledged messages lost, e.g. {:?}",
                acc.lost, acc.lost_examples
            ));
        }
        if acc.unknown_ids > 0 {
            failures.push(format!(
                "channel {ch}: {} deliveries of ids no producer logged",
                acc.unknown_ids
            ));
        }
        let _ = writeln!(
            md,
            "| {ch}{} | {} | {} | {} ({:.4} %) | {} | {} | {} / {} ms, {} s |",
            if judged { "" } else { " (not judged)" },
            acc.acknowledged,
            acc.lost,
            acc.duplicates,
            acc.duplicate_rate() * 100.0,
            acc.duplicated_ids,
            acc.unacked_delivered,
            ms(acc.latency_p50_ns),
            ms(acc.latency_p99_ns),
            s(acc.latency_max_ns),
        );
    }
    if ledgers.bad_lines > 0 {
        let _ = writeln!(md, "\n{} ledger lines did not parse.", ledgers.bad_lines);
    }
    Report {
        markdown: md,
        failures,
    }
}

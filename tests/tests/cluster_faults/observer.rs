//! What the cluster shows while the faults run, recorded from `ctl`:
//!
//! * [`Observer`]: one thread per lookupd and one for nsqadmin, each asking
//!   every 250 ms which nsqds it lists (lookupd `GET /lookup?topic=`,
//!   nsqadmin `GET /api/nodes` and its warning `message`), kept as a time
//!   series so "when did it show the change" is answered afterwards;
//! * [`LedgerTail`]: the consumers' ledgers read as they grow, so the test
//!   knows when every consumer gets messages from every nsqd again and can
//!   move on (the exact figures come from the full ledgers at the end).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use nsq_tests::{http_request_timeout, now_ns, sleep_ms};

use crate::topology::TOPIC;

/// What one source listed at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    /// nsqd host names.
    pub nodes: BTreeSet<String>,
    /// nsqadmin's `message` (warnings about unreachable lookupds); "" otherwise.
    pub message: String,
}

#[derive(Debug, Clone)]
pub struct Sample {
    pub t: i64,
    pub view: Result<View, String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceKind {
    Lookupd,
    Admin,
}

type Series = Arc<Mutex<BTreeMap<String, Vec<Sample>>>>;

pub struct Observer {
    series: Series,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

const PERIOD_MS: u64 = 250;

fn host_of(ip_to_host: &HashMap<String, String>, ip: &str) -> String {
    ip_to_host
        .get(ip)
        .cloned()
        .unwrap_or_else(|| ip.to_string())
}

fn sample(
    kind: SourceKind,
    addr: &str,
    ip_to_host: &HashMap<String, String>,
) -> Result<View, String> {
    let path = match kind {
        SourceKind::Lookupd => format!("/lookup?topic={TOPIC}"),
        SourceKind::Admin => "/api/nodes".to_string(),
    };
    let r = http_request_timeout(addr, "GET", &path, &[], None, Duration::from_secs(1))
        .map_err(|e| e.to_string())?;
    if kind == SourceKind::Lookupd && r.status == 404 {
        // TOPIC_NOT_FOUND: nobody registered the topic (yet).
        return Ok(View {
            nodes: BTreeSet::new(),
            message: String::new(),
        });
    }
    if r.status != 200 {
        return Err(format!("{} {}", r.status, r.text()));
    }
    let v: serde_json::Value = serde_json::from_slice(&r.body).map_err(|e| e.to_string())?;
    let list = match kind {
        SourceKind::Lookupd => &v["producers"],
        SourceKind::Admin => &v["nodes"],
    };
    let nodes = list
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| host_of(ip_to_host, p["broadcast_address"].as_str().unwrap_or("?")))
        .collect();
    Ok(View {
        nodes,
        message: v["message"].as_str().unwrap_or("").to_string(),
    })
}

impl Observer {
    /// Starts sampling `(name, kind, http address)` sources.
    pub fn start(
        sources: &[(String, SourceKind, String)],
        ip_to_host: HashMap<String, String>,
    ) -> Observer {
        let series: Series = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let ip_to_host = Arc::new(ip_to_host);
        let threads = sources
            .iter()
            .cloned()
            .map(|(name, kind, addr)| {
                let (series, stop, map) = (series.clone(), stop.clone(), ip_to_host.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::SeqCst) {
                        let t = now_ns();
                        let view = sample(kind, &addr, &map);
                        series
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .entry(name.clone())
                            .or_default()
                            .push(Sample { t, view });
                        sleep_ms(PERIOD_MS);
                    }
                })
            })
            .collect();
        Observer {
            series,
            stop,
            threads,
        }
    }

    fn with<T>(&self, source: &str, f: impl FnOnce(&[Sample]) -> T) -> T {
        let s = self.series.lock().unwrap_or_else(|e| e.into_inner());
        f(s.get(source).map(Vec::as_slice).unwrap_or(&[]))
    }

    /// The latest view of `source` (None: no sample or an error).
    pub fn latest(&self, source: &str) -> Option<View> {
        self.with(source, |s| s.last().and_then(|x| x.view.clone().ok()))
    }

    /// First sample time at or after `from` whose view satisfies `ok`.
    pub fn first_match(&self, source: &str, from: i64, ok: impl Fn(&View) -> bool) -> Option<i64> {
        self.with(source, |s| {
            let start = s.partition_point(|x| x.t < from);
            s[start..]
                .iter()
                .find(|x| x.view.as_ref().is_ok_and(&ok))
                .map(|x| x.t)
        })
    }

    /// Samples in `[from, to]` that do not satisfy `ok` (errors included),
    /// and how many samples there were.
    pub fn violations(
        &self,
        source: &str,
        from: i64,
        to: i64,
        ok: impl Fn(&View) -> bool,
    ) -> (usize, usize) {
        self.with(source, |s| {
            let start = s.partition_point(|x| x.t < from);
            let w: Vec<&Sample> = s[start..].iter().take_while(|x| x.t <= to).collect();
            let bad = w.iter().filter(|x| !x.view.as_ref().is_ok_and(&ok)).count();
            (bad, w.len())
        })
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The consumers' ledgers, read as they grow: the latest delivery per
/// (consumer, channel, nsqd address).
pub struct LedgerTail {
    files: Vec<(String, PathBuf, u64, String)>,
    pub last: HashMap<(String, String, String), i64>,
}

impl LedgerTail {
    pub fn new(files: Vec<(String, PathBuf)>) -> LedgerTail {
        LedgerTail {
            files: files
                .into_iter()
                .map(|(c, p)| (c, p, 0, String::new()))
                .collect(),
            last: HashMap::new(),
        }
    }

    pub fn update(&mut self) {
        for (consumer, path, offset, partial) in &mut self.files {
            let Ok(mut f) = std::fs::File::open(&*path) else {
                continue;
            };
            if f.seek(SeekFrom::Start(*offset)).is_err() {
                continue;
            }
            let mut buf = String::new();
            let Ok(n) = f.read_to_string(&mut buf) else {
                continue;
            };
            *offset += n as u64;
            partial.push_str(&buf);
            let complete = partial.rfind('\n').map(|i| i + 1).unwrap_or(0);
            for line in partial[..complete].lines() {
                let w: Vec<&str> = line.split(' ').collect();
                if let ["R", channel, _id, t, _attempts, nsqd] = w[..] {
                    if let Ok(t) = t.parse::<i64>() {
                        let k = (consumer.clone(), channel.to_string(), nsqd.to_string());
                        let e = self.last.entry(k).or_insert(t);
                        *e = (*e).max(t);
                    }
                }
            }
            partial.drain(..complete);
        }
    }

    /// Pairs with no delivery at or after `t`.
    pub fn missing_since(
        &self,
        t: i64,
        pairs: &[(String, String, String)],
    ) -> Vec<(String, String, String)> {
        pairs
            .iter()
            .filter(|p| self.last.get(*p).is_none_or(|l| *l < t))
            .cloned()
            .collect()
    }
}

//! End-to-end processing latency as nsqadmin reports it: nsqd's per-node
//! object (each percentile gains `min`/`max`/`average`/`count`) and the
//! cluster aggregate (`host:"*"`), merged the way nsqadmin 1.3.0 merges them.
//!
//! Percentiles stay free-form maps (`BTreeMap`, so keys serialize sorted, as
//! Go's `map[string]float64` does): per-node entries carry `value`, merged ones don't.

use std::collections::BTreeMap;

use serde::Serialize;

use super::input::NsqdE2e;

pub type PercentileMap = BTreeMap<String, f64>;

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct E2eAggregate {
    pub count: i64,
    pub percentiles: Option<Vec<PercentileMap>>,
    pub topic: String,
    pub channel: String,
    pub host: String,
}

fn get(m: &PercentileMap, k: &str) -> f64 {
    m.get(k).copied().unwrap_or(0.0)
}

impl E2eAggregate {
    /// The per-node object: nsqd's values with empty labels.
    pub fn from_nsqd(e: &NsqdE2e) -> E2eAggregate {
        let percentiles = e.percentiles.as_ref().map(|ps| {
            ps.iter()
                .map(|p| {
                    let mut m = p.clone();
                    let v = get(p, "value");
                    m.insert("min".into(), v);
                    m.insert("max".into(), v);
                    m.insert("average".into(), v);
                    m.insert("count".into(), e.count as f64);
                    m
                })
                .collect()
        });
        E2eAggregate {
            count: e.count,
            percentiles,
            ..Default::default()
        }
    }

    /// A fresh cluster aggregate for a topic or channel.
    pub fn new_aggregate(topic: &str, channel: &str) -> E2eAggregate {
        E2eAggregate {
            topic: topic.into(),
            channel: channel.into(),
            host: "*".into(),
            ..Default::default()
        }
    }

    /// Merges `other` in: counts add up, `max` takes the larger, and the
    /// average is the count-weighted running mean. (`min` follows nsqadmin's
    /// arithmetic, which compares against the already-updated max.)
    pub fn add(&mut self, other: &E2eAggregate) {
        self.host = "*".into();
        self.count += other.count;
        let Some(theirs) = other.percentiles.as_ref().filter(|t| !t.is_empty()) else {
            return;
        };
        let mine = self.percentiles.get_or_insert_with(Vec::new);
        for value in theirs {
            let q = get(value, "quantile");
            let i = match mine.iter().position(|m| get(m, "quantile") == q) {
                Some(i) => i,
                None => {
                    let mut m = PercentileMap::new();
                    m.insert("quantile".into(), q);
                    mine.push(m);
                    mine.len() - 1
                }
            };
            let p = &mut mine[i];
            let max = get(value, "max").max(get(p, "max"));
            p.insert("max".into(), max);
            p.insert("min".into(), get(value, "max").min(max));
            let count = get(p, "count") + get(value, "count");
            p.insert("count".into(), count);
            if count == 0.0 {
                p.insert("average".into(), 0.0);
                continue;
            }
            let avg = get(p, "average");
            let delta = get(value, "average") - avg;
            p.insert("average".into(), avg + delta * get(value, "count") / count);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(count: i64, p99: f64) -> E2eAggregate {
        let mut m = PercentileMap::new();
        m.insert("quantile".into(), 0.99);
        m.insert("value".into(), p99);
        E2eAggregate::from_nsqd(&NsqdE2e {
            count,
            percentiles: Some(vec![m]),
        })
    }

    #[test]
    fn per_node_gains_min_max_average_count() {
        let n = node(4, 100.0);
        let json = String::from_utf8(nsq_protocol::gofmt::to_json(&n)).unwrap();
        assert_eq!(
            json,
            r#"{"count":4,"percentiles":[{"average":100,"count":4,"max":100,"min":100,"quantile":0.99,"value":100}],"topic":"","channel":"","host":""}"#
        );
    }

    #[test]
    fn aggregate_is_count_weighted() {
        let mut a = E2eAggregate::new_aggregate("t", "c");
        a.add(&node(1, 100.0));
        a.add(&node(3, 200.0));
        let p = &a.percentiles.as_ref().unwrap()[0];
        assert_eq!(
            (a.count, get(p, "count"), get(p, "max"), get(p, "average")),
            (4, 4.0, 200.0, 175.0)
        );
        assert_eq!(a.host, "*");
        assert!(!p.contains_key("value"));
    }

    #[test]
    fn no_percentiles_stays_null() {
        let mut a = E2eAggregate::new_aggregate("t", "");
        a.add(&E2eAggregate::from_nsqd(&NsqdE2e {
            count: 0,
            percentiles: None,
        }));
        assert_eq!(
            String::from_utf8(nsq_protocol::gofmt::to_json(&a)).unwrap(),
            r#"{"count":0,"percentiles":null,"topic":"t","channel":"","host":"*"}"#
        );
    }
}

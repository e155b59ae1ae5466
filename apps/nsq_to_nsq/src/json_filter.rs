//! The JSON options of nsq_to_nsq: `--require-json-field` /
//! `--require-json-value` pass or drop a message, `--whitelist-json-field`
//! trims it to some top-level fields.
//!
//! Behaviour and output bytes follow the Go tool, which decodes into a
//! `map[string]interface{}` and re-encodes with `encoding/json`: every number
//! is a float64 (so `3.0` comes back as `3`), keys come out sorted, and
//! strings are escaped as Go escapes them (`nsq_protocol::gofmt`). Messages
//! are only decoded when an option is set.

use bytes::Bytes;
use serde_json::{Map, Value};

/// What to do with one message.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    /// Publish this body.
    Pass(Bytes),
    /// FIN without publishing.
    Drop,
    /// Handler error: REQ with backoff (required value asked for, field missing).
    Backoff,
}

#[derive(Debug)]
pub struct JsonFilter {
    require_field: String,
    require_value: String,
    /// `--require-json-value` as a number, when it parses as one.
    require_number: Option<f64>,
    whitelist: Vec<String>,
}

impl JsonFilter {
    pub fn new(require_field: &str, require_value: &str, whitelist: Vec<String>) -> JsonFilter {
        JsonFilter {
            require_field: require_field.to_string(),
            require_value: require_value.to_string(),
            require_number: require_value.parse::<f64>().ok(),
            whitelist,
        }
    }

    pub fn apply(&self, body: &Bytes) -> Verdict {
        if self.require_field.is_empty() && self.whitelist.is_empty() {
            return Verdict::Pass(body.clone());
        }
        let object = match serde_json::from_slice::<Value>(body) {
            Ok(Value::Object(m)) => m,
            // Go decodes `null` into an empty (nil) map without error.
            Ok(Value::Null) => Map::new(),
            _ => {
                nsq_cli::golog::log(format!(
                    "ERROR: Unable to decode json: {}",
                    String::from_utf8_lossy(body)
                ));
                return Verdict::Drop;
            }
        };
        match self.check(&object) {
            Verdict::Pass(_) => {}
            other => return other,
        }
        if self.whitelist.is_empty() {
            return Verdict::Pass(body.clone());
        }
        let mut kept = Map::new();
        for key in &self.whitelist {
            if let Some(v) = object.get(key) {
                kept.insert(key.clone(), as_float64(v));
            }
        }
        // serde_json's map is ordered by key, as Go writes a map.
        Verdict::Pass(Bytes::from(nsq_protocol::gofmt::to_json(&Value::Object(
            kept,
        ))))
    }

    fn check(&self, object: &Map<String, Value>) -> Verdict {
        if self.require_field.is_empty() {
            return Verdict::Pass(Bytes::new());
        }
        let Some(v) = object.get(&self.require_field) else {
            if self.require_value.is_empty() {
                return Verdict::Drop;
            }
            nsq_cli::golog::log("ERROR: missing field to check required value");
            return Verdict::Backoff;
        };
        if self.require_value.is_empty() {
            return Verdict::Pass(Bytes::new());
        }
        let pass = match (v, self.require_number) {
            (Value::String(s), _) => *s == self.require_value,
            (Value::Number(n), Some(want)) => n.as_f64() == Some(want),
            _ => false,
        };
        if pass {
            Verdict::Pass(Bytes::new())
        } else {
            Verdict::Drop
        }
    }
}

/// The value as Go decodes it into an `interface{}`: every number a float64.
fn as_float64(v: &Value) -> Value {
    match v {
        Value::Number(n) => Value::from(n.as_f64().unwrap_or(0.0)),
        Value::Array(items) => Value::Array(items.iter().map(as_float64).collect()),
        Value::Object(m) => {
            Value::Object(m.iter().map(|(k, v)| (k.clone(), as_float64(v))).collect())
        }
        v => v.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(f: &JsonFilter, body: &str) -> Verdict {
        f.apply(&Bytes::from(body.to_string()))
    }

    fn pass(s: &str) -> Verdict {
        Verdict::Pass(Bytes::from(s.to_string()))
    }

    #[test]
    fn no_options_means_no_decoding() {
        let f = JsonFilter::new("", "", vec![]);
        assert_eq!(run(&f, "not json"), pass("not json"));
    }

    #[test]
    fn required_field_and_value() {
        let f = JsonFilter::new("kind", "", vec![]);
        assert_eq!(
            run(&f, r#"{"kind":1, "x": 2}"#),
            pass(r#"{"kind":1, "x": 2}"#)
        );
        assert_eq!(run(&f, r#"{"x":2}"#), Verdict::Drop);
        assert_eq!(run(&f, "[1]"), Verdict::Drop);
        let f = JsonFilter::new("kind", "click", vec![]);
        assert_eq!(run(&f, r#"{"kind":"click"}"#), pass(r#"{"kind":"click"}"#));
        assert_eq!(run(&f, r#"{"kind":"view"}"#), Verdict::Drop);
        assert_eq!(run(&f, r#"{"x":1}"#), Verdict::Backoff);
        let f = JsonFilter::new("n", "5", vec![]);
        assert!(matches!(run(&f, r#"{"n":5.0}"#), Verdict::Pass(_)));
        assert!(matches!(run(&f, r#"{"n":"5"}"#), Verdict::Pass(_)));
        assert_eq!(run(&f, r#"{"n":6}"#), Verdict::Drop);
        assert_eq!(run(&f, r#"{"n":true}"#), Verdict::Drop);
    }

    #[test]
    fn whitelist_reencodes_like_go() {
        let f = JsonFilter::new(
            "",
            "",
            vec![
                "b".into(),
                "a".into(),
                "z".into(),
                "f".into(),
                "o".into(),
                "s".into(),
            ],
        );
        let body = r#"{"a":3.0,"b":{"y":2,"x":[1.5,1e21,1e-7]},"c":1,"f":0.25,"o":1e300,"s":"<&>\u0001é"}"#;
        assert_eq!(
            run(&f, body),
            pass(
                r#"{"a":3,"b":{"x":[1.5,1e+21,1e-7],"y":2},"f":0.25,"o":1e+300,"s":"\u003c\u0026\u003e\u0001é"}"#
            )
        );
        assert_eq!(run(&f, "null"), pass("{}"));
    }
}

//! AUTH: asking the auth servers (`--auth-http-address`) what a client's
//! secret allows, and deciding from the answer whether it may publish to or
//! subscribe on a topic/channel.
//!
//! The decision ([`AuthState::is_allowed`]) is a pure function of the
//! server's answer; the query ([`query_any`]) is one NSQ "V1" request per
//! server tried (`nsq_http`'s client, as nsqd's `http_api` client), made by
//! the connection's own reader task so no other client waits on it. Errors are detailed here for the log only: clients are told
//! just `E_AUTH_FAILED AUTH failed`, as Go nsqd tells them.

use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::Method;
use nsq_http::url::query_escape;
use regex::Regex;
use serde::Deserialize;

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error(transparent)]
    Http(#[from] nsq_http::Error),
    #[error("{0}")]
    Json(String),
    #[error("unknown permission {0}")]
    Permission(String),
    #[error("unable to compile topic {0:?} {1}")]
    TopicRegex(String, String),
    #[error("unable to compile channel {0:?} {1}")]
    ChannelRegex(String, String),
    #[error("invalid TTL {0} (must be >0)")]
    Ttl(i64),
    #[error("{0}")]
    All(String),
}

/// How this nsqd reaches its auth servers (from the flags).
#[derive(Clone)]
pub struct AuthConfig {
    pub addresses: Vec<String>,
    pub post: bool,
    /// With `--http-client-*-timeout` and nsqd's client TLS.
    pub client: nsq_http::Client,
}

/// The facts about a connection the auth server is told.
#[derive(Debug, Clone)]
pub struct AuthQuery {
    pub remote_ip: String,
    pub tls: bool,
    pub common_name: String,
    pub secret: String,
}

impl AuthQuery {
    /// Go's `url.Values` in key order: common_name, remote_ip, secret, tls.
    fn params(&self) -> [(&'static str, String); 4] {
        [
            ("common_name", self.common_name.clone()),
            ("remote_ip", self.remote_ip.clone()),
            ("secret", self.secret.clone()),
            ("tls", if self.tls { "true" } else { "false" }.to_string()),
        ]
    }

    fn query_string(&self) -> String {
        self.params()
            .iter()
            .map(|(k, v)| format!("{k}={}", query_escape(v)))
            .collect::<Vec<_>>()
            .join("&")
    }

    /// The POST body: the parameters as a JSON object of one-element arrays
    /// (Go's `url.Values` marshalled).
    fn json_body(&self) -> Vec<u8> {
        let mut m = serde_json::Map::new();
        for (k, v) in self.params() {
            m.insert(
                k.to_string(),
                serde_json::Value::Array(vec![serde_json::Value::String(v)]),
            );
        }
        serde_json::to_vec(&m).unwrap_or_default()
    }
}

#[derive(Debug, Deserialize)]
struct RawState {
    #[serde(default)]
    ttl: Option<i64>,
    #[serde(default)]
    identity: Option<String>,
    #[serde(default)]
    identity_url: Option<String>,
    #[serde(default)]
    authorizations: Option<Vec<RawAuthorization>>,
}

#[derive(Debug, Deserialize)]
struct RawAuthorization {
    #[serde(default)]
    topic: Option<String>,
    #[serde(default)]
    channels: Option<Vec<String>>,
    #[serde(default)]
    permissions: Option<Vec<String>>,
}

/// One grant: a topic pattern, channel patterns, and what they allow.
#[derive(Debug, Clone)]
pub struct Authorization {
    topic: Regex,
    channels: Vec<Regex>,
    subscribe: bool,
    publish: bool,
}

impl Authorization {
    /// SUB (channel ≠ "") needs `subscribe`, publishing (channel "") needs
    /// `publish`; then the topic pattern must match somewhere in the name
    /// and some channel pattern must match the channel (for a publish, the
    /// empty string).
    fn is_allowed(&self, topic: &str, channel: &str) -> bool {
        let permitted = if channel.is_empty() {
            self.publish
        } else {
            self.subscribe
        };
        permitted && self.topic.is_match(topic) && self.channels.iter().any(|c| c.is_match(channel))
    }
}

/// A client's authorizations, valid until `expires`.
#[derive(Debug, Clone)]
pub struct AuthState {
    pub identity: String,
    pub identity_url: String,
    pub authorizations: Vec<Authorization>,
    pub expires: Instant,
}

impl AuthState {
    /// Validates an auth server answer as Go nsqd does.
    pub fn parse(body: &[u8], now: Instant) -> Result<AuthState, AuthError> {
        let raw: RawState =
            serde_json::from_slice(body).map_err(|e| AuthError::Json(e.to_string()))?;
        let mut authorizations = Vec::new();
        for a in raw.authorizations.unwrap_or_default() {
            let (mut subscribe, mut publish) = (false, false);
            for p in a.permissions.unwrap_or_default() {
                match p.as_str() {
                    "subscribe" => subscribe = true,
                    "publish" => publish = true,
                    _ => return Err(AuthError::Permission(p)),
                }
            }
            let t = a.topic.unwrap_or_default();
            let topic =
                Regex::new(&t).map_err(|e| AuthError::TopicRegex(t.clone(), e.to_string()))?;
            let mut channels = Vec::new();
            for c in a.channels.unwrap_or_default() {
                channels.push(
                    Regex::new(&c)
                        .map_err(|e| AuthError::ChannelRegex(c.clone(), e.to_string()))?,
                );
            }
            authorizations.push(Authorization {
                topic,
                channels,
                subscribe,
                publish,
            });
        }
        let ttl = raw.ttl.unwrap_or(0);
        if ttl <= 0 {
            return Err(AuthError::Ttl(ttl));
        }
        Ok(AuthState {
            identity: raw.identity.unwrap_or_default(),
            identity_url: raw.identity_url.unwrap_or_default(),
            authorizations,
            expires: now + Duration::from_secs(ttl as u64),
        })
    }

    pub fn is_expired(&self, now: Instant) -> bool {
        self.expires < now
    }

    pub fn is_allowed(&self, topic: &str, channel: &str) -> bool {
        self.authorizations
            .iter()
            .any(|a| a.is_allowed(topic, channel))
    }
}

/// Asks each auth server once, starting at a random one, until one answers
/// well; the errors of all failed ones joined by `; ` otherwise.
pub async fn query_any(cfg: &AuthConfig, q: &AuthQuery) -> Result<AuthState, AuthError> {
    let n = cfg.addresses.len();
    if n == 0 {
        return Err(AuthError::All("no auth servers".into()));
    }
    let start = rand::random::<usize>() % n;
    let mut errors: Vec<String> = Vec::new();
    for i in 0..n {
        let addr = &cfg.addresses[(start + i) % n];
        match query(cfg, addr, q).await {
            Ok(s) => return Ok(s),
            Err(e) => errors.push(format!("failed to auth against {addr} - {e}")),
        }
    }
    Err(AuthError::All(errors.join("; ")))
}

/// `host:port` → `http://host:port/auth`; anything with `://` as given.
pub fn endpoint(addr: &str) -> String {
    if addr.contains("://") {
        addr.to_string()
    } else {
        format!("http://{addr}/auth")
    }
}

/// NSQ's `QueryAuthd`: `GETV1` with the parameters in the query string, or
/// `POSTV1` with them as a JSON body.
async fn query(cfg: &AuthConfig, addr: &str, q: &AuthQuery) -> Result<AuthState, AuthError> {
    let url = endpoint(addr);
    let body = if cfg.post {
        cfg.client
            .v1(Method::POST, &url, Some(Bytes::from(q.json_body())))
            .await?
    } else {
        let url = format!("{url}?{}", q.query_string());
        cfg.client.v1(Method::GET, &url, None).await?
    };
    AuthState::parse(&body, Instant::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(json: &str) -> Result<AuthState, String> {
        AuthState::parse(json.as_bytes(), Instant::now()).map_err(|e| e.to_string())
    }

    #[test]
    fn permissions_by_regex() {
        let s = state(r#"{"ttl":60,"identity":"u","identity_url":"","authorizations":[{"topic":"^foo$","channels":[".*"],"permissions":["publish"]},{"topic":"bar","channels":["^c1$"],"permissions":["subscribe"]}]}"#).unwrap();
        assert!(s.is_allowed("foo", ""));
        assert!(!s.is_allowed("foo2", ""), "anchored topic pattern");
        assert!(
            !s.is_allowed("foo", "c1"),
            "publish does not imply subscribe"
        );
        assert!(s.is_allowed("xbarx", "c1"), "unanchored match");
        assert!(!s.is_allowed("bar", "c2"));
        assert!(!s.is_allowed("bar", ""), "subscribe does not imply publish");
        assert_eq!(s.identity, "u");
    }

    #[test]
    fn publishing_needs_a_channel_pattern_matching_empty() {
        let s = state(r#"{"ttl":1,"authorizations":[{"topic":".*","channels":["^x$"],"permissions":["publish"]}]}"#).unwrap();
        assert!(!s.is_allowed("t", ""));
        let s = state(r#"{"ttl":1,"authorizations":[{"topic":".*","channels":[],"permissions":["publish"]}]}"#).unwrap();
        assert!(!s.is_allowed("t", ""));
    }

    #[test]
    fn invalid_answers() {
        assert_eq!(
            state(r#"{"ttl":0,"authorizations":[]}"#).unwrap_err(),
            "invalid TTL 0 (must be >0)"
        );
        assert_eq!(
            state(r#"{"authorizations":[]}"#).unwrap_err(),
            "invalid TTL 0 (must be >0)"
        );
        assert_eq!(state(r#"{"ttl":5,"authorizations":[{"topic":"t","channels":[],"permissions":["admin"]}]}"#).unwrap_err(), "unknown permission admin");
        assert!(state(
            r#"{"ttl":5,"authorizations":[{"topic":"(","channels":[],"permissions":[]}]}"#
        )
        .unwrap_err()
        .starts_with("unable to compile topic \"(\""));
        assert!(state(
            r#"{"ttl":5,"authorizations":[{"topic":"t","channels":["["],"permissions":[]}]}"#
        )
        .unwrap_err()
        .starts_with("unable to compile channel"));
        assert!(state("nope").is_err());
        assert!(state(r#"{"ttl":1.5}"#).is_err());
        let s = state(r#"{"ttl":5,"identity":null,"authorizations":null}"#).unwrap();
        assert!(s.authorizations.is_empty());
    }

    #[test]
    fn request_encodings() {
        let q = AuthQuery {
            remote_ip: "10.0.0.5".into(),
            tls: false,
            common_name: "".into(),
            secret: "s3 cr&t/é".into(),
        };
        assert_eq!(
            q.query_string(),
            "common_name=&remote_ip=10.0.0.5&secret=s3+cr%26t%2F%C3%A9&tls=false"
        );
        let q = AuthQuery {
            remote_ip: "10.0.0.5".into(),
            tls: false,
            common_name: "".into(),
            secret: "s3cr3t".into(),
        };
        assert_eq!(
            String::from_utf8(q.json_body()).unwrap(),
            r#"{"common_name":[""],"remote_ip":["10.0.0.5"],"secret":["s3cr3t"],"tls":["false"]}"#
        );
        assert_eq!(endpoint("127.0.0.1:4181"), "http://127.0.0.1:4181/auth");
        assert_eq!(
            endpoint("https://auth.example/check"),
            "https://auth.example/check"
        );
    }
}

//! The auth server (`--auth-http-address`): asking it what a secret allows,
//! and deciding from its answer what the secret may do. nsqd's TCP `AUTH`
//! and the daemons' HTTP access control ([`crate::guard`]) both use this
//! one client and this one decision.
//!
//! The decision ([`AuthState::allows`]) is a pure function of the server's
//! answer; the query ([`query_any`]) is one NSQ "V1" request per server
//! tried (this crate's client, as nsqd's `http_api` client). Errors are
//! detailed for the log only: TCP clients are told just `E_AUTH_FAILED AUTH
//! failed`, as Go nsqd tells them, HTTP clients a bare status.
//!
//! Permissions: `subscribe` and `publish` keep NSQ's meaning; `admin` is an
//! nsq-rs extension (create, delete, empty, pause topics and channels,
//! tombstones, `PUT /config`), granted nothing over TCP. Go nsqd refuses an
//! answer naming `admin`, so an auth server shared with Go daemons should
//! grant it only on a separate endpoint.
//!
//! Never: caching answers (the TCP session keeps its own, the HTTP guard its
//! own) or talking to clients.

use std::time::{Duration, Instant};

use crate::url::query_escape;
use bytes::Bytes;
use hyper::Method;
use regex::Regex;
use serde::Deserialize;

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error(transparent)]
    Http(#[from] crate::Error),
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

impl AuthError {
    /// The auth server answered and refused the secret (401 or 403), as
    /// opposed to being unreachable or answering nonsense.
    pub fn is_refusal(&self) -> bool {
        matches!(self, AuthError::Http(e) if matches!(e.status_code(), Some(401 | 403)))
    }
}

/// What an authorization can grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    Subscribe,
    Publish,
    /// nsq-rs extension: administering topics, channels and the node.
    Admin,
}

/// How a daemon reaches its auth servers (from the flags).
#[derive(Clone)]
pub struct AuthConfig {
    pub addresses: Vec<String>,
    pub post: bool,
    /// With `--http-client-*-timeout` and nsqd's client TLS.
    pub client: crate::Client,
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
    admin: bool,
}

impl Authorization {
    fn has(&self, p: Permission) -> bool {
        match p {
            Permission::Subscribe => self.subscribe,
            Permission::Publish => self.publish,
            Permission::Admin => self.admin,
        }
    }

    /// The topic pattern must match somewhere in the name and some channel
    /// pattern must match the channel (the empty string for a topic-wide
    /// action, as for a publish).
    fn covers(&self, topic: &str, channel: &str) -> bool {
        self.topic.is_match(topic) && self.channels.iter().any(|c| c.is_match(channel))
    }

    /// SUB (channel ≠ "") needs `subscribe`, publishing (channel "") needs
    /// `publish`.
    fn is_allowed(&self, topic: &str, channel: &str) -> bool {
        let p = if channel.is_empty() {
            Permission::Publish
        } else {
            Permission::Subscribe
        };
        self.has(p) && self.covers(topic, channel)
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
            let (mut subscribe, mut publish, mut admin) = (false, false, false);
            for p in a.permissions.unwrap_or_default() {
                match p.as_str() {
                    "subscribe" => subscribe = true,
                    "publish" => publish = true,
                    "admin" => admin = true,
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
                admin,
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

    /// NSQ's TCP decision: SUB on (topic, channel), or publishing to topic
    /// (channel "").
    pub fn is_allowed(&self, topic: &str, channel: &str) -> bool {
        self.authorizations
            .iter()
            .any(|a| a.is_allowed(topic, channel))
    }

    /// Whether `p` is granted on (topic, channel); channel "" is the topic
    /// itself, and topic "" with channel "" the whole node (an `admin`
    /// grant whose patterns match the empty name, as `.*` does).
    pub fn allows(&self, p: Permission, topic: &str, channel: &str) -> bool {
        self.authorizations
            .iter()
            .any(|a| a.has(p) && a.covers(topic, channel))
    }

    /// Whether the secret may see `topic` in listings: some grant of any
    /// permission names it (its channels aside, so a subscriber sees a
    /// topic before its channel exists).
    pub fn sees_topic(&self, topic: &str) -> bool {
        self.authorizations.iter().any(|a| a.topic.is_match(topic))
    }

    /// Whether the secret may see channel `channel` of `topic`: it may
    /// subscribe to it or administer it, or publish to the topic.
    pub fn sees_channel(&self, topic: &str, channel: &str) -> bool {
        self.allows(Permission::Subscribe, topic, channel)
            || self.allows(Permission::Admin, topic, channel)
            || self.allows(Permission::Publish, topic, "")
    }
}

/// Asks each auth server once, starting at a random one, until one answers
/// well; the errors of all failed ones joined by `; ` otherwise.
pub async fn query_any(cfg: &AuthConfig, q: &AuthQuery) -> Result<AuthState, AuthError> {
    query_any_refused(cfg, q).await.map_err(|(e, _)| e)
}

/// [`query_any`], telling also whether some server refused the secret
/// (answered 401 or 403) rather than every one failing to answer.
pub async fn query_any_refused(
    cfg: &AuthConfig,
    q: &AuthQuery,
) -> Result<AuthState, (AuthError, bool)> {
    let n = cfg.addresses.len();
    if n == 0 {
        return Err((AuthError::All("no auth servers".into()), false));
    }
    let start = rand::random::<usize>() % n;
    let mut errors: Vec<String> = Vec::new();
    let mut refused = false;
    for i in 0..n {
        let addr = &cfg.addresses[(start + i) % n];
        match query(cfg, addr, q).await {
            Ok(s) => return Ok(s),
            Err(e) => {
                refused |= e.is_refusal();
                errors.push(format!("failed to auth against {addr} - {e}"));
            }
        }
    }
    Err((AuthError::All(errors.join("; ")), refused))
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
    fn admin_is_an_extension_granting_nothing_over_tcp() {
        let s = state(r#"{"ttl":60,"authorizations":[{"topic":"^t$","channels":["^$","^c$"],"permissions":["admin"]},{"topic":"^p$","channels":[".*"],"permissions":["publish"]}]}"#).unwrap();
        assert!(!s.is_allowed("t", ""), "admin is not publish");
        assert!(!s.is_allowed("t", "c"), "admin is not subscribe");
        assert!(s.allows(Permission::Admin, "t", ""));
        assert!(s.allows(Permission::Admin, "t", "c"));
        assert!(!s.allows(Permission::Admin, "t", "d"));
        assert!(!s.allows(Permission::Admin, "", ""), "not node-wide");
        assert!(!s.allows(Permission::Admin, "p", ""));
        assert!(s.allows(Permission::Publish, "p", ""));
        assert!(s.sees_topic("t") && s.sees_topic("p") && !s.sees_topic("x"));
        assert!(s.sees_channel("t", "c") && !s.sees_channel("t", "d"));
        assert!(
            s.sees_channel("p", "any"),
            "a publisher sees its topic's channels"
        );
        let node = state(r#"{"ttl":60,"authorizations":[{"topic":".*","channels":[".*"],"permissions":["admin"]}]}"#).unwrap();
        assert!(node.allows(Permission::Admin, "", ""));
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
        assert_eq!(
            state(
                r#"{"ttl":5,"authorizations":[{"topic":"t","channels":[],"permissions":["root"]}]}"#
            )
            .unwrap_err(),
            "unknown permission root"
        );
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

//! Opt-in access control of the daemons' HTTP APIs (nsq-rs extension, off
//! unless a daemon is started with `--http-auth-required`): every request
//! but the ones a daemon classifies [`Access::Open`] carries a secret,
//! which the auth server (`--auth-http-address`, [`crate::auth`]) is asked
//! about exactly as for TCP `AUTH`.
//!
//! Owns: reading the secret from the request, the per-listener cache of
//! the auth server's answers (and of its refusals, briefly), the decision
//! for a route's [`Access`] class, the 401/403/503 answers, and the cap on
//! concurrent connections of a guarded listener. Never: which route needs
//! what (each daemon classifies its own endpoints) or filtering listings
//! (the handlers do, given the [`Grant`] this puts in the request's
//! extensions).
//!
//! The secret is read from `Authorization: Bearer <secret>` only: a secret
//! in the query string would land in the daemons' own request log lines and
//! in every proxy's, and a cookie would let any page a browser visits use
//! it. The auth server is asked with the client's IP as `remote_ip`, `tls`
//! true on the HTTPS listener and an empty `common_name`.
//!
//! The auth server unreachable or answering nonsense is a 503 and the
//! request is not served: never open.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::response::Response;
use hyper::header::{HeaderMap, HeaderValue, AUTHORIZATION, WWW_AUTHENTICATE};
use hyper::StatusCode;
use tokio::sync::OnceCell;

use crate::auth::{query_any_refused, AuthConfig, AuthQuery, AuthState, Permission};
use crate::reply;

/// How long a refused secret is answered from the cache, so that a client
/// repeating a bad secret costs the auth server one request per this long.
pub const REFUSAL_TTL: Duration = Duration::from_secs(5);

/// Cached answers per listener; past this many, expired ones are dropped,
/// and if none were, all (a flood of distinct secrets must not grow memory).
const MAX_CACHED: usize = 10_000;

/// What a route needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// No secret (`/ping`: health checks and load balancers).
    Open,
    /// Any secret the auth server grants something (`/info`, `GET /config`,
    /// listings, which the handler filters through the [`Grant`]).
    Known,
    /// `publish` on the `topic` query parameter.
    Publish,
    /// `admin` on the `topic` query parameter (and, with `channel`, on the
    /// `channel` query parameter; else on the topic itself, channel "").
    Admin { channel: bool },
    /// `admin` on the whole node (topic "" and channel "").
    NodeAdmin,
    /// The `topic` query parameter must be a topic the secret sees
    /// ([`AuthState::sees_topic`]).
    SeeTopic,
}

/// The auth server's answer for the request's secret, in the request's
/// extensions for the handlers that filter what they list.
#[derive(Clone)]
pub struct Grant(pub Arc<AuthState>);

impl Grant {
    pub fn sees_topic(&self, topic: &str) -> bool {
        self.0.sees_topic(topic)
    }
    pub fn sees_channel(&self, topic: &str, channel: &str) -> bool {
        self.0.sees_channel(topic, channel)
    }
}

/// What the auth server said, as cached.
#[derive(Clone)]
enum Outcome {
    Granted(Arc<AuthState>),
    Refused,
    Unavailable,
}

struct Answer {
    outcome: Outcome,
    expires: Instant,
}

type Key = (String, IpAddr, bool);

/// One daemon's access control, shared by its HTTP and HTTPS listeners.
pub struct Guard {
    auth: AuthConfig,
    max_connections: usize,
    cache: Mutex<HashMap<Key, Arc<OnceCell<Answer>>>>,
}

/// The startup checks of the flags every daemon with an auth client shares
/// (`--auth-http-request-method`, `--http-auth-required`,
/// `--http-max-connections`); the message is what follows `FATAL: `.
pub fn check_flags(
    auth_http_request_method: &str,
    http_auth_required: bool,
    has_auth_http_address: bool,
    http_max_connections: i64,
) -> Result<(), String> {
    if !matches!(auth_http_request_method, "get" | "post") {
        return Err("--auth-http-request-method must be post or get".into());
    }
    if http_auth_required && !has_auth_http_address {
        return Err("--http-auth-required needs --auth-http-address".into());
    }
    if http_max_connections < 0 {
        return Err("--http-max-connections must be >= 0".into());
    }
    Ok(())
}

impl Guard {
    /// `max_connections` caps each guarded listener's open connections
    /// (0: no cap).
    pub fn new(auth: AuthConfig, max_connections: usize) -> Guard {
        Guard {
            auth,
            max_connections,
            cache: Mutex::new(HashMap::new()),
        }
    }

    pub fn max_connections(&self) -> Option<usize> {
        (self.max_connections > 0).then_some(self.max_connections)
    }

    /// The decision for a request to a route of class `access`: the grant
    /// to hand to the handler, or the answer to send instead.
    pub async fn check(
        &self,
        access: Access,
        headers: &HeaderMap,
        query: Option<&str>,
        remote: IpAddr,
        tls: bool,
    ) -> Result<Option<Grant>, Response> {
        if access == Access::Open {
            return Ok(None);
        }
        let Some(secret) = bearer(headers) else {
            return Err(unauthorized("Bearer"));
        };
        let state = match self.answer(secret, remote, tls).await {
            Outcome::Granted(s) if !s.authorizations.is_empty() => s,
            Outcome::Granted(_) | Outcome::Refused => {
                return Err(unauthorized("Bearer error=\"invalid_token\""))
            }
            Outcome::Unavailable => {
                return Err(reply::v1_error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "AUTH_UNAVAILABLE",
                ))
            }
        };
        // the first of a repeated parameter counts, as in the daemons
        let param = |name: &str| {
            query
                .and_then(|q| {
                    form_urlencoded::parse(q.as_bytes())
                        .find(|(k, _)| k == name)
                        .map(|(_, v)| v.into_owned())
                })
                .unwrap_or_default()
        };
        let allowed = match access {
            Access::Open | Access::Known => true,
            Access::Publish => state.allows(Permission::Publish, &param("topic"), ""),
            Access::Admin { channel: false } => {
                state.allows(Permission::Admin, &param("topic"), "")
            }
            Access::Admin { channel: true } => {
                state.allows(Permission::Admin, &param("topic"), &param("channel"))
            }
            Access::NodeAdmin => state.allows(Permission::Admin, "", ""),
            Access::SeeTopic => state.sees_topic(&param("topic")),
        };
        if !allowed {
            return Err(reply::v1_error(StatusCode::FORBIDDEN, "FORBIDDEN"));
        }
        Ok(Some(Grant(state)))
    }

    /// The cached answer for (secret, ip, tls), asking the auth server when
    /// there is none or it expired; concurrent requests with the same
    /// secret wait for one question.
    async fn answer(&self, secret: &str, remote: IpAddr, tls: bool) -> Outcome {
        let key: Key = (secret.to_string(), remote, tls);
        for _ in 0..2 {
            let cell = self.cell(&key);
            let answer = cell.get_or_init(|| self.ask(secret, remote, tls)).await;
            let now = Instant::now();
            if answer.expires > now {
                return answer.outcome.clone();
            }
            self.forget(&key, &cell);
            if let Outcome::Unavailable = answer.outcome {
                // never cached: whoever waited on this question shares its
                // failure, the next request asks again
                return Outcome::Unavailable;
            }
        }
        Outcome::Unavailable
    }

    fn cell(&self, key: &Key) -> Arc<OnceCell<Answer>> {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = cache.get(key) {
            return c.clone();
        }
        if cache.len() >= MAX_CACHED {
            let now = Instant::now();
            cache.retain(|_, c| c.get().is_none_or(|a| a.expires > now));
            if cache.len() >= MAX_CACHED {
                cache.clear();
            }
        }
        let c = Arc::new(OnceCell::new());
        cache.insert(key.clone(), c.clone());
        c
    }

    fn forget(&self, key: &Key, cell: &Arc<OnceCell<Answer>>) {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.get(key).is_some_and(|c| Arc::ptr_eq(c, cell)) {
            cache.remove(key);
        }
    }

    async fn ask(&self, secret: &str, remote: IpAddr, tls: bool) -> Answer {
        let q = AuthQuery {
            remote_ip: remote.to_canonical().to_string(),
            tls,
            common_name: String::new(),
            secret: secret.to_string(),
        };
        let now = Instant::now();
        match query_any_refused(&self.auth, &q).await {
            Ok(state) => Answer {
                expires: state.expires,
                outcome: Outcome::Granted(Arc::new(state)),
            },
            Err((e, true)) => {
                tracing::debug!(%remote, error = %e, "HTTP: auth server refused the secret");
                Answer {
                    outcome: Outcome::Refused,
                    expires: now + REFUSAL_TTL,
                }
            }
            Err((e, false)) => {
                tracing::warn!(%remote, error = %e, "HTTP: auth server unavailable");
                Answer {
                    outcome: Outcome::Unavailable,
                    expires: now,
                }
            }
        }
    }
}

/// The secret of `Authorization: Bearer <secret>` (scheme case-insensitive).
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, secret) = v.split_once(' ')?;
    let secret = secret.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !secret.is_empty()).then_some(secret)
}

fn unauthorized(challenge: &'static str) -> Response {
    let mut r = reply::v1_error(StatusCode::UNAUTHORIZED, "UNAUTHORIZED");
    r.headers_mut()
        .insert(WWW_AUTHENTICATE, HeaderValue::from_static(challenge));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bearer_secret_counts() {
        let h = |v: &str| {
            let mut m = HeaderMap::new();
            m.insert(AUTHORIZATION, HeaderValue::from_str(v).unwrap());
            m
        };
        assert_eq!(bearer(&h("Bearer s3cret")), Some("s3cret"));
        assert_eq!(bearer(&h("bearer  s3cret ")), Some("s3cret"));
        assert_eq!(bearer(&h("Bearer ")), None);
        assert_eq!(bearer(&h("Basic dTpw")), None);
        assert_eq!(bearer(&h("s3cret")), None);
        assert_eq!(bearer(&HeaderMap::new()), None);
    }

    fn guard(addr: &str) -> Guard {
        let client = crate::Client::new(crate::ClientOptions::new(
            Duration::from_millis(200),
            Duration::from_millis(500),
        ));
        Guard::new(
            AuthConfig {
                addresses: vec![addr.to_string()],
                post: false,
                client,
            },
            0,
        )
    }

    #[tokio::test]
    async fn no_secret_is_401_and_an_unreachable_auth_server_503() {
        // a port nothing listens on: bind, note it, close it
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        drop(l);
        let g = guard(&addr);
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let e = g
            .check(Access::Known, &HeaderMap::new(), None, ip, false)
            .await
            .err()
            .unwrap();
        assert_eq!(e.status(), 401);
        assert!(g
            .check(Access::Open, &HeaderMap::new(), None, ip, false)
            .await
            .unwrap()
            .is_none());
        let mut h = HeaderMap::new();
        h.insert(AUTHORIZATION, HeaderValue::from_static("Bearer x"));
        for _ in 0..2 {
            let e = g
                .check(Access::Publish, &h, Some("topic=t"), ip, false)
                .await
                .err()
                .unwrap();
            assert_eq!(e.status(), 503, "never open, never cached");
        }
        assert!(g.cache.lock().unwrap().is_empty());
    }
}

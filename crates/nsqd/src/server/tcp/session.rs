//! One V2 connection's protocol state, without the socket: where it is in
//! nsqd's state machine, what IDENTIFY negotiated, and what AUTH granted.
//!
//! Owns the rules a command must pass before it is parsed (which commands
//! each state allows, TLS required, heartbeats needed for SUB) and the
//! authorization checks, with nsqd's exact errors in nsqd's order. The
//! reader asks, the command files act; nothing here does I/O, so every rule
//! is unit-tested below.

use std::time::{Duration, Instant};

use nsq_protocol::error::{go_quote, E_AUTH_DISABLED, E_AUTH_FAILED, E_AUTH_FIRST, E_UNAUTHORIZED};
use nsq_protocol::identify::Negotiated;
use nsq_protocol::ProtocolError;

use nsq_http::auth::AuthState;

/// Where a connection is in nsqd's state machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Connected: IDENTIFY, AUTH, SUB and publishing allowed.
    Init,
    /// SUB done: RDY, FIN, REQ, TOUCH, CLS (and publishing).
    Subscribed,
    /// CLS sent: in-flight messages may still be answered; RDY is ignored.
    Closing,
}

impl State {
    /// The number `/stats` reports (nsqd's stateInit, stateSubscribed, stateClosing).
    pub fn code(self) -> i32 {
        match self {
            State::Init => 0,
            State::Subscribed => 3,
            State::Closing => 4,
        }
    }
}

/// What AUTH has established.
#[derive(Debug)]
pub enum Auth {
    /// nsqd has no auth server: everything is allowed, AUTH is refused.
    Disabled,
    /// AUTH has not succeeded yet.
    Required,
    /// The auth server's answer for `secret`; `refreshed` once it was asked
    /// again after the answer expired (an empty answer then means
    /// "unauthorized", not "AUTH first").
    Granted {
        state: AuthState,
        secret: String,
        refreshed: bool,
    },
    /// Asking again after expiry failed: every check fails.
    RefreshFailed,
}

/// What the reader does with a command line that passed the rules.
#[derive(Debug, PartialEq, Eq)]
pub enum Rule {
    Proceed,
    /// Consume the line, do nothing (RDY while closing).
    Ignore,
    /// nsqd authorizes an MPUB and creates its topic before it reads (and
    /// validates) the body.
    CreateTopicThenProceed(String),
}

#[derive(Debug)]
pub struct Session {
    pub state: State,
    pub auth: Auth,
    /// `None`: heartbeats (and the read deadline) disabled by IDENTIFY.
    pub heartbeat_ms: Option<i64>,
    pub msg_timeout: Duration,
    pub sample_rate: i32,
    /// Set once the TLS upgrade is done: the client certificate's subject
    /// common name ("" without one), for the auth server.
    pub tls: Option<String>,
    /// A compression layer is on.
    pub compressed: bool,
    tls_required: bool,
}

fn cannot(cmd: &str) -> ProtocolError {
    ProtocolError::invalid(format!("cannot {cmd} in current state"))
}

impl Session {
    pub fn new(
        auth_enabled: bool,
        tls_required: bool,
        heartbeat_ms: i64,
        msg_timeout: Duration,
    ) -> Session {
        Session {
            state: State::Init,
            auth: if auth_enabled {
                Auth::Required
            } else {
                Auth::Disabled
            },
            heartbeat_ms: Some(heartbeat_ms),
            msg_timeout,
            sample_rate: 0,
            tls: None,
            compressed: false,
            tls_required,
        }
    }

    /// nsqd's checks before a command's parameters are parsed.
    pub fn rules(&self, name: &[u8], params: &[&[u8]]) -> Result<Rule, ProtocolError> {
        if name != b"IDENTIFY" && self.tls_required && self.tls.is_none() {
            let mut desc = b"cannot ".to_vec();
            desc.extend_from_slice(name);
            desc.extend_from_slice(b" in current state (TLS required)");
            return Err(ProtocolError::invalid(desc));
        }
        use State::*;
        match (name, self.state) {
            (b"IDENTIFY", s) if s != Init => Err(cannot("IDENTIFY")),
            (b"AUTH", s) if s != Init => Err(cannot("AUTH")),
            (b"SUB", s) if s != Init => Err(cannot("SUB")),
            (b"SUB", _) if self.heartbeat_ms.is_none() => Err(ProtocolError::invalid(
                "cannot SUB with heartbeats disabled",
            )),
            (b"RDY", Closing) => Ok(Rule::Ignore),
            (b"RDY", s) if s != Subscribed => Err(cannot("RDY")),
            (b"FIN" | b"REQ" | b"TOUCH", Init) => {
                Err(cannot(std::str::from_utf8(name).unwrap_or("?")))
            }
            (b"CLS", s) if s != Subscribed => Err(cannot("CLS")),
            (b"MPUB", _) => match params.first().and_then(|t| std::str::from_utf8(t).ok()) {
                // a bad or missing topic is reported by the decoder
                Some(t) if nsq_protocol::names::is_valid_topic_name(t) => {
                    self.check_auth("MPUB", t, "")?;
                    Ok(Rule::CreateTopicThenProceed(t.to_string()))
                }
                _ => Ok(Rule::Proceed),
            },
            _ => Ok(Rule::Proceed),
        }
    }

    /// nsqd's authorization check for SUB (channel set) and publishing
    /// (channel ""), when auth is enabled.
    pub fn check_auth(&self, cmd: &str, topic: &str, channel: &str) -> Result<(), ProtocolError> {
        let first = || ProtocolError::fatal(E_AUTH_FIRST, format!("AUTH required before {cmd}"));
        match &self.auth {
            Auth::Disabled => Ok(()),
            Auth::Required => Err(first()),
            Auth::Granted {
                state,
                refreshed: false,
                ..
            } if state.authorizations.is_empty() => Err(first()),
            Auth::RefreshFailed => Err(ProtocolError::fatal(E_AUTH_FAILED, "AUTH failed")),
            Auth::Granted { state, .. } if state.is_allowed(topic, channel) => Ok(()),
            Auth::Granted { .. } => Err(ProtocolError::fatal(
                E_UNAUTHORIZED,
                format!(
                    "AUTH failed for {cmd} on {} {}",
                    go_quote(topic),
                    go_quote(channel)
                ),
            )),
        }
    }

    fn has_authorizations(&self) -> bool {
        matches!(&self.auth, Auth::Granted { state, .. } if !state.authorizations.is_empty())
    }

    /// Whether AUTH may be sent now (before the auth server is asked).
    pub fn may_auth(&self) -> Result<(), ProtocolError> {
        if self.has_authorizations() {
            return Err(ProtocolError::invalid("AUTH already set"));
        }
        if matches!(self.auth, Auth::Disabled) {
            return Err(ProtocolError::fatal(E_AUTH_DISABLED, "AUTH disabled"));
        }
        Ok(())
    }

    /// The auth server answered AUTH: kept even with no authorizations
    /// (nsqd then closes the connection with `E_UNAUTHORIZED`).
    pub fn authorized(
        &mut self,
        secret: String,
        state: AuthState,
    ) -> Result<&AuthState, ProtocolError> {
        self.auth = Auth::Granted {
            state,
            secret,
            refreshed: false,
        };
        match &self.auth {
            Auth::Granted { state, .. } if !state.authorizations.is_empty() => Ok(state),
            _ => Err(ProtocolError::fatal(
                E_UNAUTHORIZED,
                "AUTH no authorizations found",
            )),
        }
    }

    /// The secret to ask the auth server again with, when the answer has
    /// expired and the next command (`name`) needs it. The check itself
    /// must stay synchronous, so the reader asks before parsing.
    pub fn refresh_due(&self, name: &[u8], now: Instant) -> Option<&str> {
        match &self.auth {
            Auth::Granted { state, secret, .. }
                if !state.authorizations.is_empty()
                    && state.is_expired(now)
                    && matches!(name, b"SUB" | b"PUB" | b"MPUB" | b"DPUB") =>
            {
                Some(secret)
            }
            _ => None,
        }
    }

    /// The outcome of asking again; kept for the check of the command that
    /// needed it, so errors still come in nsqd's order.
    pub fn refreshed(&mut self, answer: Option<AuthState>) {
        self.auth = match (
            answer,
            std::mem::replace(&mut self.auth, Auth::RefreshFailed),
        ) {
            (Some(state), Auth::Granted { secret, .. }) => Auth::Granted {
                state,
                secret,
                refreshed: true,
            },
            _ => Auth::RefreshFailed,
        };
    }

    /// IDENTIFY's outcome for this connection.
    pub fn identified(&mut self, n: &Negotiated) {
        self.heartbeat_ms = n.heartbeat_ms;
        self.msg_timeout = Duration::from_millis(n.msg_timeout_ms.max(0) as u64);
        self.sample_rate = n.sample_rate;
    }

    /// nsqd closes a client that sends nothing for two heartbeat intervals.
    pub fn read_deadline(&self, last_read: Instant) -> Option<Instant> {
        self.heartbeat_ms
            .map(|h| last_read + Duration::from_millis(2 * h.max(0) as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [&[u8]; 11] = [
        b"IDENTIFY",
        b"AUTH",
        b"SUB",
        b"PUB",
        b"MPUB",
        b"DPUB",
        b"RDY",
        b"FIN",
        b"REQ",
        b"TOUCH",
        b"CLS",
    ];

    fn session() -> Session {
        Session::new(false, false, 30_000, Duration::from_secs(60))
    }

    fn allowed(s: &Session) -> Vec<&'static str> {
        ALL.iter()
            .filter(|n| s.rules(n, &[b"t"]).is_ok_and(|r| r != Rule::Ignore))
            .map(|n| std::str::from_utf8(n).unwrap())
            .collect()
    }

    fn granted(body: &str, now: Instant) -> AuthState {
        AuthState::parse(body.as_bytes(), now).unwrap()
    }

    const PUB_T: &str = r#"{"ttl":60,"identity":"me","authorizations":[{"topic":"^t$","channels":[".*"],"permissions":["publish"]}]}"#;

    #[test]
    fn each_state_allows_exactly_nsqds_commands() {
        let mut s = session();
        assert_eq!(
            allowed(&s),
            vec!["IDENTIFY", "AUTH", "SUB", "PUB", "MPUB", "DPUB"]
        );
        s.state = State::Subscribed;
        assert_eq!(
            allowed(&s),
            vec!["PUB", "MPUB", "DPUB", "RDY", "FIN", "REQ", "TOUCH", "CLS"]
        );
        s.state = State::Closing;
        assert_eq!(
            allowed(&s),
            vec!["PUB", "MPUB", "DPUB", "FIN", "REQ", "TOUCH"]
        );
        assert_eq!(
            s.rules(b"RDY", &[b"1"]),
            Ok(Rule::Ignore),
            "RDY while closing is ignored"
        );
        let e = s.rules(b"CLS", &[]).unwrap_err();
        assert_eq!(e.payload_lossy(), "E_INVALID cannot CLS in current state");
        assert!(e.fatal);
    }

    #[test]
    fn tls_required_refuses_everything_but_identify_until_upgraded() {
        let mut s = Session::new(false, true, 30_000, Duration::from_secs(60));
        assert_eq!(allowed(&s), vec!["IDENTIFY"]);
        assert_eq!(
            s.rules(b"PUB", &[b"t"]).unwrap_err().payload_lossy(),
            "E_INVALID cannot PUB in current state (TLS required)"
        );
        s.tls = Some(String::new());
        assert!(allowed(&s).contains(&"PUB"));
    }

    #[test]
    fn sub_needs_heartbeats_and_identify_sets_the_session() {
        let mut s = session();
        let req = nsq_protocol::identify::IdentifyRequest::parse(
            br#"{"heartbeat_interval":-1,"msg_timeout":5000,"sample_rate":20}"#,
        )
        .unwrap();
        let features = nsq_protocol::identify::ServerFeatures {
            default_heartbeat_ms: 30_000,
            max_heartbeat_ms: 60_000,
            default_msg_timeout_ms: 60_000,
            max_msg_timeout_ms: 900_000,
            ..Default::default()
        };
        let n = nsq_protocol::identify::negotiate(&req, &features).unwrap();
        s.identified(&n);
        assert_eq!(
            (s.heartbeat_ms, s.msg_timeout, s.sample_rate),
            (None, Duration::from_secs(5), 20)
        );
        assert_eq!(
            s.read_deadline(Instant::now()),
            None,
            "no heartbeats, no read deadline"
        );
        assert_eq!(
            s.rules(b"SUB", &[b"t", b"c"]).unwrap_err().payload_lossy(),
            "E_INVALID cannot SUB with heartbeats disabled"
        );
        let now = Instant::now();
        assert_eq!(
            session().read_deadline(now),
            Some(now + Duration::from_secs(60))
        );
    }

    #[test]
    fn mpub_is_authorized_and_its_topic_created_before_the_body_is_read() {
        let s = session();
        assert_eq!(
            s.rules(b"MPUB", &[b"t"]),
            Ok(Rule::CreateTopicThenProceed("t".into()))
        );
        assert_eq!(
            s.rules(b"MPUB", &[b"bad topic!"]),
            Ok(Rule::Proceed),
            "the decoder reports it"
        );
        let s = Session::new(true, false, 30_000, Duration::from_secs(60));
        assert_eq!(
            s.rules(b"MPUB", &[b"t"]).unwrap_err().payload_lossy(),
            "E_AUTH_FIRST AUTH required before MPUB"
        );
    }

    #[test]
    fn auth_disabled_allows_everything_and_refuses_auth() {
        let s = session();
        assert!(s.check_auth("SUB", "t", "c").is_ok());
        let e = s.may_auth().unwrap_err();
        assert_eq!(
            (e.payload_lossy().as_str(), e.fatal),
            ("E_AUTH_DISABLED AUTH disabled", true)
        );
    }

    #[test]
    fn auth_comes_first_then_grants_exactly_what_the_server_said() {
        let now = Instant::now();
        let mut s = Session::new(true, false, 30_000, Duration::from_secs(60));
        assert_eq!(
            s.check_auth("PUB", "t", "").unwrap_err().payload_lossy(),
            "E_AUTH_FIRST AUTH required before PUB"
        );
        assert!(s.may_auth().is_ok());
        let state = s.authorized("secret".into(), granted(PUB_T, now)).unwrap();
        assert_eq!(
            (state.identity.as_str(), state.authorizations.len()),
            ("me", 1)
        );
        assert!(s.check_auth("PUB", "t", "").is_ok());
        assert_eq!(
            s.check_auth("PUB", "other", "")
                .unwrap_err()
                .payload_lossy(),
            "E_UNAUTHORIZED AUTH failed for PUB on \"other\" \"\""
        );
        assert_eq!(
            s.check_auth("SUB", "t", "c").unwrap_err().payload_lossy(),
            "E_UNAUTHORIZED AUTH failed for SUB on \"t\" \"c\""
        );
        let e = s.may_auth().unwrap_err();
        assert_eq!(
            (e.payload_lossy().as_str(), e.fatal),
            ("E_INVALID AUTH already set", true)
        );
    }

    #[test]
    fn an_answer_with_no_authorizations_is_fatal() {
        let mut s = Session::new(true, false, 30_000, Duration::from_secs(60));
        let e = s
            .authorized(
                "x".into(),
                granted(r#"{"ttl":60,"authorizations":[]}"#, Instant::now()),
            )
            .unwrap_err();
        assert_eq!(
            (e.payload_lossy().as_str(), e.fatal),
            ("E_UNAUTHORIZED AUTH no authorizations found", true)
        );
        assert_eq!(
            s.check_auth("PUB", "t", "").unwrap_err().payload_lossy(),
            "E_AUTH_FIRST AUTH required before PUB"
        );
    }

    #[test]
    fn expired_authorizations_are_asked_for_again_only_before_commands_that_need_them() {
        let now = Instant::now();
        let mut s = Session::new(true, false, 30_000, Duration::from_secs(60));
        s.authorized("secret".into(), granted(PUB_T, now)).unwrap();
        let later = now + Duration::from_secs(61);
        assert_eq!(s.refresh_due(b"PUB", now), None, "not expired yet");
        assert_eq!(
            s.refresh_due(b"RDY", later),
            None,
            "RDY needs no authorization"
        );
        assert_eq!(s.refresh_due(b"PUB", later), Some("secret"));
        // the server now grants nothing: unauthorized, not "AUTH first"
        s.refreshed(Some(granted(r#"{"ttl":60,"authorizations":[]}"#, later)));
        assert_eq!(
            s.check_auth("PUB", "t", "").unwrap_err().payload_lossy(),
            "E_UNAUTHORIZED AUTH failed for PUB on \"t\" \"\""
        );
        // a refresh that fails makes every later check fail
        let mut s = Session::new(true, false, 30_000, Duration::from_secs(60));
        s.authorized("secret".into(), granted(PUB_T, now)).unwrap();
        s.refreshed(None);
        assert_eq!(
            s.check_auth("PUB", "t", "").unwrap_err().payload_lossy(),
            "E_AUTH_FAILED AUTH failed"
        );
        assert_eq!(s.refresh_due(b"PUB", later), None, "no second try");
    }

    #[test]
    fn states_report_nsqds_numbers() {
        assert_eq!(
            [
                State::Init.code(),
                State::Subscribed.code(),
                State::Closing.code()
            ],
            [0, 3, 4]
        );
    }
}

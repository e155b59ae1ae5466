//! AUTH: asks the auth servers what the client's secret allows (this
//! client's reader waits, no one else), and asks again before a command
//! that needs the authorizations once they have expired.

use nsq_protocol::error::{E_AUTH_DISABLED, E_AUTH_ERROR, E_AUTH_FAILED};
use nsq_protocol::ProtocolError;
use serde::Serialize;

use super::conn::Conn;
use nsq_http::auth::{query_any, AuthQuery, AuthState};

/// The AUTH response; field order is the wire order.
#[derive(Serialize)]
struct AuthResponse<'a> {
    identity: &'a str,
    identity_url: &'a str,
    permission_count: usize,
}

fn query(conn: &Conn, secret: &str) -> AuthQuery {
    AuthQuery {
        remote_ip: conn.client.remote_addr.ip().to_string(),
        tls: conn.session.tls.is_some(),
        common_name: conn.session.tls.clone().unwrap_or_default(),
        secret: secret.to_string(),
    }
}

/// Asks the auth servers, unless nsqd is closing the connection; the
/// error is detailed for the log only.
async fn ask(conn: &Conn, secret: &str) -> Option<AuthState> {
    let cfg = conn.nsqd.auth.as_ref()?;
    let q = query(conn, secret);
    let result = tokio::select! {
        r = query_any(cfg, &q) => r,
        _ = conn.client.closer.cancelled() => return None,
    };
    match result {
        Ok(state) => {
            conn.client.update_info(|i| {
                i.authed = !state.authorizations.is_empty();
                i.auth_identity = state.identity.clone();
                i.auth_identity_url = state.identity_url.clone();
            });
            Some(state)
        }
        Err(e) => {
            // Auth server trouble is for the log, not for untrusted clients.
            tracing::warn!(addr = %conn.client.remote_addr, error = %e, "AUTH failed");
            None
        }
    }
}

pub async fn auth(conn: &mut Conn, secret: &[u8]) -> Result<(), ProtocolError> {
    conn.session.may_auth()?;
    if conn.nsqd.auth.is_none() {
        return Err(ProtocolError::fatal(E_AUTH_DISABLED, "AUTH disabled"));
    }
    let secret = String::from_utf8_lossy(secret).into_owned();
    let Some(state) = ask(conn, &secret).await else {
        return Err(ProtocolError::fatal(E_AUTH_FAILED, "AUTH failed"));
    };
    let state = conn.session.authorized(secret, state)?;
    let resp = AuthResponse {
        identity: &state.identity,
        identity_url: &state.identity_url,
        permission_count: state.authorizations.len(),
    };
    let json = serde_json::to_vec(&resp)
        .map_err(|e| ProtocolError::fatal(E_AUTH_ERROR, format!("AUTH error {e}")))?;
    conn.client.send_response(&json);
    Ok(())
}

/// Asks again with the secret of the expired answer; the outcome is kept
/// for the check of the command that needed it.
pub async fn refresh(conn: &mut Conn, secret: &str) {
    let answer = ask(conn, secret).await;
    conn.session.refreshed(answer);
}

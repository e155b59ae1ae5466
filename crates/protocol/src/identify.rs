//! IDENTIFY: the client's JSON, its validation against the server's limits
//! (in nsqd's order, with its messages), and the feature-negotiation answer.

use serde::{Deserialize, Serialize};

use crate::error::{ProtocolError, E_BAD_BODY, E_IDENTIFY_FAILED};

/// What a client may send. Every field is optional; unknown fields are ignored.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
pub struct IdentifyRequest {
    pub client_id: Option<String>,
    pub hostname: Option<String>,
    pub user_agent: Option<String>,
    pub feature_negotiation: Option<bool>,
    pub heartbeat_interval: Option<i64>,
    pub output_buffer_size: Option<i64>,
    pub output_buffer_timeout: Option<i64>,
    pub tls_v1: Option<bool>,
    pub snappy: Option<bool>,
    pub deflate: Option<bool>,
    pub deflate_level: Option<i64>,
    pub sample_rate: Option<i32>,
    pub msg_timeout: Option<i64>,
    pub topology_region: Option<String>,
    pub topology_zone: Option<String>,
}

impl IdentifyRequest {
    /// Decodes the body; a top-level `null` is an empty request, as in Go.
    pub fn parse(body: &[u8]) -> Result<IdentifyRequest, ProtocolError> {
        let bad = || ProtocolError::fatal(E_BAD_BODY, "IDENTIFY failed to decode JSON body");
        let v: serde_json::Value = serde_json::from_slice(body).map_err(|_| bad())?;
        if v.is_null() {
            return Ok(IdentifyRequest::default());
        }
        serde_json::from_value(v).map_err(|_| bad())
    }
}

/// The server side of negotiation: nsqd's flags that bound a client's choices.
#[derive(Debug, Clone)]
pub struct ServerFeatures {
    pub default_heartbeat_ms: i64,
    pub max_heartbeat_ms: i64,
    pub default_output_buffer_size: i64,
    pub max_output_buffer_size: i64,
    pub default_output_buffer_timeout_ms: i64,
    pub min_output_buffer_timeout_ms: i64,
    pub max_output_buffer_timeout_ms: i64,
    pub default_msg_timeout_ms: i64,
    pub max_msg_timeout_ms: i64,
    pub max_rdy_count: i64,
    pub tls_available: bool,
    /// `--snappy` / `--deflate`: what the operator allows. A conflict is
    /// judged on these (as nsqd does) even where `compression_available` is
    /// false and the server then negotiates neither.
    pub snappy_enabled: bool,
    pub deflate_enabled: bool,
    pub compression_available: bool,
    pub max_deflate_level: i64,
    pub auth_required: bool,
    pub topology_region: String,
    pub topology_zone: String,
    pub version: String,
}

impl Default for ServerFeatures {
    fn default() -> Self {
        ServerFeatures {
            default_heartbeat_ms: 30_000,
            max_heartbeat_ms: 60_000,
            default_output_buffer_size: 16_384,
            max_output_buffer_size: 65_536,
            default_output_buffer_timeout_ms: 250,
            min_output_buffer_timeout_ms: 25,
            max_output_buffer_timeout_ms: 30_000,
            default_msg_timeout_ms: 60_000,
            max_msg_timeout_ms: 900_000,
            max_rdy_count: 2500,
            tls_available: false,
            snappy_enabled: true,
            deflate_enabled: true,
            compression_available: true,
            max_deflate_level: 6,
            auth_required: false,
            topology_region: String::new(),
            topology_zone: String::new(),
            version: crate::VERSION.to_string(),
        }
    }
}

/// The settings a connection runs with after IDENTIFY.
#[derive(Debug, Clone, PartialEq)]
pub struct Negotiated {
    pub client_id: String,
    pub hostname: String,
    pub user_agent: String,
    pub feature_negotiation: bool,
    /// `None`: heartbeats (and read/write deadlines) disabled.
    pub heartbeat_ms: Option<i64>,
    pub output_buffer_size: i64,
    /// 0: no timed flush.
    pub output_buffer_timeout_ms: i64,
    pub sample_rate: i32,
    pub msg_timeout_ms: i64,
    pub tls_v1: bool,
    pub snappy: bool,
    pub deflate: bool,
    pub deflate_level: i64,
    pub topology_region: String,
    pub topology_zone: String,
}

fn invalid(what: &str, v: i64) -> ProtocolError {
    ProtocolError::fatal(E_BAD_BODY, format!("IDENTIFY {what} ({v}) is invalid"))
}

/// Applies nsqd's IDENTIFY rules, first failure wins: heartbeat, output
/// buffer timeout, output buffer size, sample rate, msg timeout, compression.
pub fn negotiate(req: &IdentifyRequest, srv: &ServerFeatures) -> Result<Negotiated, ProtocolError> {
    let heartbeat_ms = match req.heartbeat_interval.unwrap_or(0) {
        -1 => None,
        0 => Some(srv.default_heartbeat_ms),
        v if (1000..=srv.max_heartbeat_ms).contains(&v) => Some(v),
        v => return Err(invalid("heartbeat interval", v)),
    };
    let mut output_buffer_timeout_ms = match req.output_buffer_timeout.unwrap_or(0) {
        -1 => 0,
        0 => srv.default_output_buffer_timeout_ms,
        v if (srv.min_output_buffer_timeout_ms..=srv.max_output_buffer_timeout_ms).contains(&v) => {
            v
        }
        v => return Err(invalid("output buffer timeout", v)),
    };
    let output_buffer_size = match req.output_buffer_size.unwrap_or(0) {
        -1 => {
            output_buffer_timeout_ms = 0;
            1
        }
        0 => srv.default_output_buffer_size,
        v if (64..=srv.max_output_buffer_size).contains(&v) => v,
        v => return Err(invalid("output buffer size", v)),
    };
    let sample_rate = match req.sample_rate.unwrap_or(0) {
        v @ 0..=99 => v,
        v => return Err(invalid("sample rate", v as i64)),
    };
    let msg_timeout_ms = match req.msg_timeout.unwrap_or(0) {
        0 => srv.default_msg_timeout_ms,
        v if (1000..=srv.max_msg_timeout_ms).contains(&v) => v,
        v => return Err(invalid("msg timeout", v)),
    };
    let fneg = req.feature_negotiation.unwrap_or(false);
    let tls_v1 = fneg && req.tls_v1.unwrap_or(false) && srv.tls_available;
    let snappy = fneg && req.snappy.unwrap_or(false) && srv.snappy_enabled;
    let deflate = fneg && req.deflate.unwrap_or(false) && srv.deflate_enabled;
    if snappy && deflate {
        return Err(ProtocolError::fatal(
            E_IDENTIFY_FAILED,
            "cannot enable both deflate and snappy compression",
        ));
    }
    let (snappy, deflate) = (
        snappy && srv.compression_available,
        deflate && srv.compression_available,
    );
    let wanted_level = if deflate {
        req.deflate_level.unwrap_or(0)
    } else {
        0
    };
    let deflate_level = if wanted_level <= 0 { 6 } else { wanted_level }.min(srv.max_deflate_level);
    Ok(Negotiated {
        client_id: req.client_id.clone().unwrap_or_default(),
        hostname: req.hostname.clone().unwrap_or_default(),
        user_agent: req.user_agent.clone().unwrap_or_default(),
        feature_negotiation: fneg,
        heartbeat_ms,
        output_buffer_size,
        output_buffer_timeout_ms,
        sample_rate,
        msg_timeout_ms,
        tls_v1,
        snappy,
        deflate,
        deflate_level,
        topology_region: req.topology_region.clone().unwrap_or_default(),
        topology_zone: req.topology_zone.clone().unwrap_or_default(),
    })
}

/// The feature-negotiation answer; field order is the wire order.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct IdentifyResponse {
    pub max_rdy_count: i64,
    pub version: String,
    pub max_msg_timeout: i64,
    pub msg_timeout: i64,
    pub tls_v1: bool,
    pub deflate: bool,
    pub deflate_level: i64,
    pub max_deflate_level: i64,
    pub snappy: bool,
    pub sample_rate: i32,
    pub auth_required: bool,
    pub output_buffer_size: i64,
    pub output_buffer_timeout: i64,
    pub topology_region: String,
    pub topology_zone: String,
}

impl IdentifyResponse {
    pub fn new(n: &Negotiated, srv: &ServerFeatures) -> IdentifyResponse {
        IdentifyResponse {
            max_rdy_count: srv.max_rdy_count,
            version: srv.version.clone(),
            max_msg_timeout: srv.max_msg_timeout_ms,
            msg_timeout: n.msg_timeout_ms,
            tls_v1: n.tls_v1,
            deflate: n.deflate,
            deflate_level: n.deflate_level,
            max_deflate_level: srv.max_deflate_level,
            snappy: n.snappy,
            sample_rate: n.sample_rate,
            auth_required: srv.auth_required,
            output_buffer_size: n.output_buffer_size,
            output_buffer_timeout: n.output_buffer_timeout_ms,
            topology_region: srv.topology_region.clone(),
            topology_zone: srv.topology_zone.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn neg(json: &str) -> Result<Negotiated, String> {
        let req = IdentifyRequest::parse(json.as_bytes()).map_err(|e| e.payload_lossy())?;
        negotiate(&req, &ServerFeatures::default()).map_err(|e| e.payload_lossy())
    }

    #[test]
    fn default_response_matches_sample() {
        let n = neg(r#"{"feature_negotiation":true}"#).unwrap();
        let json =
            serde_json::to_string(&IdentifyResponse::new(&n, &ServerFeatures::default())).unwrap();
        assert_eq!(
            json,
            r#"{"max_rdy_count":2500,"version":"1.3.0","max_msg_timeout":900000,"msg_timeout":60000,"tls_v1":false,"deflate":false,"deflate_level":6,"max_deflate_level":6,"snappy":false,"sample_rate":0,"auth_required":false,"output_buffer_size":16384,"output_buffer_timeout":250,"topology_region":"","topology_zone":""}"#
        );
    }

    #[test]
    fn validation_errors() {
        assert_eq!(
            neg("not json").unwrap_err(),
            "E_BAD_BODY IDENTIFY failed to decode JSON body"
        );
        assert_eq!(
            neg(r#"{"heartbeat_interval":500}"#).unwrap_err(),
            "E_BAD_BODY IDENTIFY heartbeat interval (500) is invalid"
        );
        assert_eq!(
            neg(r#"{"sample_rate":100}"#).unwrap_err(),
            "E_BAD_BODY IDENTIFY sample rate (100) is invalid"
        );
        assert_eq!(
            neg(r#"{"output_buffer_size":32}"#).unwrap_err(),
            "E_BAD_BODY IDENTIFY output buffer size (32) is invalid"
        );
        assert_eq!(
            neg(r#"{"output_buffer_timeout":10}"#).unwrap_err(),
            "E_BAD_BODY IDENTIFY output buffer timeout (10) is invalid"
        );
        assert_eq!(
            neg(r#"{"msg_timeout":999}"#).unwrap_err(),
            "E_BAD_BODY IDENTIFY msg timeout (999) is invalid"
        );
        assert_eq!(
            neg(r#"{"msg_timeout":1.5}"#).unwrap_err(),
            "E_BAD_BODY IDENTIFY failed to decode JSON body"
        );
        assert_eq!(
            neg(r#"{"feature_negotiation":true,"snappy":true,"deflate":true}"#).unwrap_err(),
            "E_IDENTIFY_FAILED cannot enable both deflate and snappy compression"
        );
    }

    #[test]
    fn values() {
        assert!(neg("null").is_ok());
        assert!(neg("{}").is_ok());
        let n =
            neg(r#"{"msg_timeout":1000,"heartbeat_interval":-1,"output_buffer_size":-1}"#).unwrap();
        assert_eq!(
            (
                n.msg_timeout_ms,
                n.heartbeat_ms,
                n.output_buffer_size,
                n.output_buffer_timeout_ms
            ),
            (1000, None, 1, 0)
        );
        let n = neg(r#"{"feature_negotiation":true,"deflate":true,"deflate_level":9}"#).unwrap();
        assert_eq!((n.deflate, n.deflate_level), (true, 6));
        let n = neg(r#"{"feature_negotiation":true,"deflate":true,"deflate_level":3}"#).unwrap();
        assert_eq!(n.deflate_level, 3);
        let n = neg(r#"{"feature_negotiation":true,"deflate_level":3}"#).unwrap();
        assert_eq!((n.deflate, n.deflate_level), (false, 6));
        let n = neg(r#"{"client_id":"c","unknown_field":[1,2]}"#).unwrap();
        assert_eq!(n.client_id, "c");
    }
}

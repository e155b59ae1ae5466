//! `GET|PUT /config/:opt`: read any option, change `nsqlookupd_http_addresses`
//! or `log_level` at run time. Guarded by `--allow-config-from-cidr` (not by
//! the admin users).

use std::sync::Arc;

use hyper::Method;

use super::{v1_json, v1_text, ApiErr, ApiResult, Req, MAX_BODY};
use crate::cidr::Cidr;
use crate::shared::Shared;
use nsq_cli::flags::{ConfigValue, Flags};
use nsq_cli::LogLevel;

pub fn handle(s: &Arc<Shared>, req: &Req, opt: &str) -> ApiResult {
    let cidr = s.options().allow_config_from_cidr.clone();
    if !cidr.is_empty() {
        let net = Cidr::parse(&cidr).map_err(|_| ApiErr::new(500, "INTERNAL_ERROR"))?;
        if !net.contains(req.remote.ip()) {
            return Err(ApiErr::new(403, "FORBIDDEN"));
        }
    }
    if req.method == Method::PUT {
        if req.body.is_empty() || req.body.len() >= MAX_BODY {
            return Err(ApiErr::new(413, "INVALID_VALUE"));
        }
        match opt {
            "nsqlookupd_http_addresses" => {
                let addrs: Option<Vec<String>> = serde_json::from_slice(&req.body)
                    .map_err(|_| ApiErr::new(400, "INVALID_VALUE"))?;
                s.update_options(|o| o.nsqlookupd_http_addresses = addrs.unwrap_or_default());
            }
            "log_level" => {
                let text = String::from_utf8_lossy(&req.body).into_owned();
                let level: LogLevel = text
                    .parse()
                    .map_err(|_| ApiErr::new(400, "INVALID_VALUE"))?;
                s.set_log_level(level);
                s.update_options(|o| o.log_level = level);
            }
            _ => return Err(ApiErr::new(400, "INVALID_OPTION")),
        }
    }
    if opt == "http_secret" {
        // a credential: settable in the --config file, never read back
        return Err(ApiErr::new(400, "INVALID_OPTION"));
    }
    match s.options().config_value(opt) {
        Some(ConfigValue::Text(t)) => Ok(v1_text(&t)),
        Some(ConfigValue::Json(v)) => Ok(v1_json(&v)),
        None => Err(ApiErr::new(400, "INVALID_OPTION")),
    }
}

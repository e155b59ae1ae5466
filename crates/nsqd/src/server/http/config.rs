//! `/config/<opt>`: every nsqd option as `GET` reports it (JSON, or a raw
//! string for string options, as nsqd does; the view comes with each
//! option's declaration in `crate::options`), and the two `PUT` can change
//! at run time: `nsqlookupd_tcp_addresses` and `log_level`.

use std::sync::Arc;

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::Response;

use nsq_cli::flags::{ConfigValue, Flags};
use nsq_cli::LogLevel;

use super::{err, json_response, ok_text, read_limited};
use crate::server::nsqd::NsqdInner;

/// An option as `GET /config/<opt>` shows it: from its declaration
/// (`nsq_cli::flags!`), except the three nsqd changes at run time.
fn config_value(nsqd: &NsqdInner, opt: &str) -> Option<ConfigValue> {
    match opt {
        "log_level" => Some(ConfigValue::Json(nsqd.log_level.lock().number().into())),
        "nsqlookupd_tcp_addresses" => Some(ConfigValue::Json(
            nsqd.lookupd_tcp_addresses.lock().clone().into(),
        )),
        "statsd_prefix" => Some(ConfigValue::Text(nsqd.statsd_prefix.lock().clone())),
        _ => nsqd.opts().config_value(opt),
    }
}

pub fn get(nsqd: &NsqdInner, opt: &str) -> Response {
    match config_value(nsqd, opt) {
        None => err(StatusCode::BAD_REQUEST, "INVALID_OPTION"),
        Some(ConfigValue::Text(s)) => ok_text(s),
        Some(ConfigValue::Json(v)) => {
            json_response(StatusCode::OK, nsq_protocol::gofmt::to_json(&v))
        }
    }
}

pub async fn put(nsqd: &Arc<NsqdInner>, opt: &str, body: Body) -> Response {
    let body = match read_limited(body, nsqd.opts().max_msg_size as usize).await {
        Ok(b) if !b.is_empty() => b,
        Ok(_) | Err(true) => return err(StatusCode::PAYLOAD_TOO_LARGE, "INVALID_VALUE"),
        Err(false) => return err(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR"),
    };
    match opt {
        "nsqlookupd_tcp_addresses" => {
            let Ok(addrs) = serde_json::from_slice::<Vec<String>>(&body) else {
                return err(StatusCode::BAD_REQUEST, "INVALID_VALUE");
            };
            *nsqd.lookupd_tcp_addresses.lock() = addrs;
            nsqd.lookupd_changed.notify_one();
        }
        "log_level" => {
            let Ok(level) = String::from_utf8_lossy(&body).trim().parse::<LogLevel>() else {
                return err(StatusCode::BAD_REQUEST, "INVALID_VALUE");
            };
            if let Some(hook) = nsqd.log_level_hook.lock().as_ref() {
                if !hook(level) {
                    return err(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR");
                }
            }
            *nsqd.log_level.lock() = level;
        }
        _ => return err(StatusCode::BAD_REQUEST, "INVALID_OPTION"),
    }
    get(nsqd, opt)
}

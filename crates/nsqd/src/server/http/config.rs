//! `/config/<opt>`: every nsqd option as `GET` reports it (JSON, or a raw
//! string for string options, as nsqd does), and the two `PUT` can change
//! at run time: `nsqlookupd_tcp_addresses` and `log_level`.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::Response;

use super::{err, json_response, ok_text, read_limited};
use crate::server::nsqd::NsqdInner;

/// A config value: JSON, or a raw string (nsqd returns strings unquoted).
enum ConfigValue {
    Json(serde_json::Value),
    Raw(String),
}

fn level_num(l: &str) -> i64 {
    match l {
        "debug" => 1,
        "info" => 2,
        "warn" => 3,
        "error" => 4,
        "fatal" => 5,
        _ => 2,
    }
}

fn config_value(nsqd: &NsqdInner, opt: &str) -> Option<ConfigValue> {
    use serde_json::json;
    use ConfigValue::*;
    let o = nsqd.opts();
    let ns = |d: Duration| Json(json!(d.as_nanos() as i64));
    Some(match opt {
        "id" => Json(json!(o.node_id)),
        "log_level" => Json(json!(level_num(&nsqd.log_level.lock()))),
        "log_prefix" => Raw(o.log_prefix.clone()),
        "tcp_address" => Raw(o.tcp_address.clone()),
        "http_address" => Raw(o.http_address.clone()),
        "https_address" => Raw(o.https_address.clone()),
        "broadcast_address" => Raw(o.broadcast_address.clone()),
        "broadcast_tcp_port" => Json(json!(o.broadcast_tcp_port)),
        "broadcast_http_port" => Json(json!(o.broadcast_http_port)),
        "nsqlookupd_tcp_addresses" => Json(json!(nsqd.lookupd_tcp_addresses.lock().clone())),
        "auth_http_addresses" => Json(json!(o.auth_http_addresses)),
        "auth_http_request_method" => Raw(o.auth_http_request_method.clone()),
        "http_client_connect_timeout" => ns(o.http_client_connect_timeout),
        "http_client_request_timeout" => ns(o.http_client_request_timeout),
        "topology_region" => Raw(o.topology_region.clone()),
        "topology_zone" => Raw(o.topology_zone.clone()),
        "data_path" => Raw(o.data_path.clone()),
        "mem_queue_size" => Json(json!(o.mem_queue_size)),
        "max_bytes_per_file" => Json(json!(o.max_bytes_per_file)),
        "sync_every" => Json(json!(o.sync_every)),
        "sync_timeout" => ns(o.sync_timeout),
        "queue_scan_worker_pool_max" => Json(json!(o.queue_scan_worker_pool_max)),
        "queue_scan_selection_count" => Json(json!(o.queue_scan_selection_count)),
        "msg_timeout" => ns(o.msg_timeout),
        "max_msg_timeout" => ns(o.max_msg_timeout),
        "max_msg_size" => Json(json!(o.max_msg_size)),
        "max_req_timeout" => ns(o.max_req_timeout),
        "max_body_size" => Json(json!(o.max_body_size)),
        "max_heartbeat_interval" => ns(o.max_heartbeat_interval),
        "max_rdy_count" => Json(json!(o.max_rdy_count)),
        "max_output_buffer_size" => Json(json!(o.max_output_buffer_size)),
        "max_output_buffer_timeout" => ns(o.max_output_buffer_timeout),
        "min_output_buffer_timeout" => ns(o.min_output_buffer_timeout),
        "output_buffer_timeout" => ns(o.output_buffer_timeout),
        "max_channel_consumers" => Json(json!(o.max_channel_consumers)),
        "max_attempts" => Json(json!(o.max_attempts)),
        "statsd_address" => Raw(o.statsd_address.clone()),
        "statsd_prefix" => Raw(nsqd.statsd_prefix.lock().clone()),
        "statsd_interval" => ns(o.statsd_interval),
        "statsd_mem_stats" => Json(json!(o.statsd_mem_stats)),
        "statsd_udp_packet_size" => Json(json!(o.statsd_udp_packet_size)),
        "statsd_exclude_ephemeral" => Json(json!(o.statsd_exclude_ephemeral)),
        "e2e_processing_latency_window_time" => ns(o.e2e_processing_latency_window_time),
        "e2e_processing_latency_percentiles" => Json(json!(o.e2e_processing_latency_percentiles)),
        "tls_cert" => Raw(o.tls_cert.clone()),
        "tls_key" => Raw(o.tls_key.clone()),
        "tls_client_auth_policy" => Raw(o.tls_client_auth_policy.clone()),
        "tls_root_ca_file" => Raw(o.tls_root_ca_file.clone()),
        "tls_required" => Json(json!(o.tls_required)),
        "tls_min_version" => Json(json!(o.tls_min_version)),
        "deflate" => Json(json!(o.deflate)),
        "max_deflate_level" => Json(json!(o.max_deflate_level)),
        "snappy" => Json(json!(o.snappy)),
        "enable_experiment" => Json(json!(o.enable_experiment)),
        _ => return None,
    })
}

pub fn get(nsqd: &NsqdInner, opt: &str) -> Response {
    match config_value(nsqd, opt) {
        None => err(StatusCode::BAD_REQUEST, "INVALID_OPTION"),
        Some(ConfigValue::Raw(s)) => ok_text(s),
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
            let level = String::from_utf8_lossy(&body).trim().to_lowercase();
            if !matches!(
                level.as_str(),
                "debug" | "info" | "warn" | "error" | "fatal"
            ) {
                return err(StatusCode::BAD_REQUEST, "INVALID_VALUE");
            }
            if let Some(hook) = nsqd.log_level_hook.lock().as_ref() {
                if !hook(&level) {
                    return err(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR");
                }
            }
            *nsqd.log_level.lock() = level;
        }
        _ => return err(StatusCode::BAD_REQUEST, "INVALID_OPTION"),
    }
    get(nsqd, opt)
}

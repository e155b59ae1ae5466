//! nsqd's settings, one field per flag, with nsqd's defaults. The binary
//! fills this from flags and the config file; everything else reads it.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Options {
    pub node_id: i64,
    pub log_level: String,
    pub log_prefix: String,
    pub tcp_address: String,
    pub http_address: String,
    pub https_address: String,
    pub broadcast_address: String,
    pub broadcast_tcp_port: u16,
    pub broadcast_http_port: u16,
    pub lookupd_tcp_addresses: Vec<String>,
    pub auth_http_addresses: Vec<String>,
    pub auth_http_request_method: String,
    pub http_client_connect_timeout: Duration,
    pub http_client_request_timeout: Duration,
    pub topology_region: String,
    pub topology_zone: String,
    pub data_path: String,
    pub mem_queue_size: i64,
    pub max_bytes_per_file: i64,
    pub sync_every: i64,
    pub sync_timeout: Duration,
    pub queue_scan_worker_pool_max: i64,
    pub queue_scan_selection_count: i64,
    pub msg_timeout: Duration,
    pub max_msg_timeout: Duration,
    pub max_msg_size: i64,
    pub max_req_timeout: Duration,
    pub max_body_size: i64,
    pub max_heartbeat_interval: Duration,
    pub max_rdy_count: i64,
    pub max_output_buffer_size: i64,
    pub max_output_buffer_timeout: Duration,
    pub min_output_buffer_timeout: Duration,
    pub output_buffer_timeout: Duration,
    pub max_channel_consumers: i64,
    /// nsq-rs: the default `max_attempts` of new channels (0: unlimited).
    pub max_attempts: u16,
    pub statsd_address: String,
    pub statsd_interval: Duration,
    pub statsd_mem_stats: bool,
    pub statsd_prefix: String,
    pub statsd_udp_packet_size: i64,
    pub statsd_exclude_ephemeral: bool,
    /// Sorted descending, each in (0, 1].
    pub e2e_processing_latency_percentiles: Vec<f64>,
    pub e2e_processing_latency_window_time: Duration,
    pub tls_cert: String,
    pub tls_key: String,
    pub tls_client_auth_policy: String,
    pub tls_root_ca_file: String,
    /// 0 false, 1 tcp-https, 2 true (as `/config/tls_required` reports it).
    pub tls_required: i64,
    pub tls_min_version: u16,
    pub deflate: bool,
    pub max_deflate_level: i64,
    pub snappy: bool,
    pub enable_experiment: Vec<String>,
}

/// `--tls-required` values, as `/config/tls_required` reports them.
pub const TLS_NOT_REQUIRED: i64 = 0;
/// `tcp-https`: TCP clients must upgrade, plain HTTP still serves.
pub const TLS_REQUIRED_EXCEPT_HTTP: i64 = 1;
pub const TLS_REQUIRED: i64 = 2;

/// The fixed client timeout of nsqd (not a flag); heartbeats default to half.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(60);

impl Default for Options {
    fn default() -> Self {
        let hostname = hostname();
        Options {
            node_id: default_node_id(&hostname),
            log_level: "info".into(),
            log_prefix: "[nsqd] ".into(),
            tcp_address: "0.0.0.0:4150".into(),
            http_address: "0.0.0.0:4151".into(),
            https_address: "0.0.0.0:4152".into(),
            broadcast_address: hostname,
            broadcast_tcp_port: 0,
            broadcast_http_port: 0,
            lookupd_tcp_addresses: vec![],
            auth_http_addresses: vec![],
            auth_http_request_method: "get".into(),
            http_client_connect_timeout: Duration::from_secs(2),
            http_client_request_timeout: Duration::from_secs(5),
            topology_region: String::new(),
            topology_zone: String::new(),
            data_path: String::new(),
            mem_queue_size: 10_000,
            max_bytes_per_file: 100 * 1024 * 1024,
            sync_every: 2500,
            sync_timeout: Duration::from_secs(2),
            queue_scan_worker_pool_max: 4,
            queue_scan_selection_count: 20,
            msg_timeout: Duration::from_secs(60),
            max_msg_timeout: Duration::from_secs(15 * 60),
            max_msg_size: 1024 * 1024,
            max_req_timeout: Duration::from_secs(3600),
            max_body_size: 5 * 1024 * 1024,
            max_heartbeat_interval: Duration::from_secs(60),
            max_rdy_count: 2500,
            max_output_buffer_size: 64 * 1024,
            max_output_buffer_timeout: Duration::from_secs(30),
            min_output_buffer_timeout: Duration::from_millis(25),
            output_buffer_timeout: Duration::from_millis(250),
            max_channel_consumers: 0,
            max_attempts: 0,
            statsd_address: String::new(),
            statsd_interval: Duration::from_secs(60),
            statsd_mem_stats: true,
            statsd_prefix: "nsq.%s".into(),
            statsd_udp_packet_size: 508,
            statsd_exclude_ephemeral: false,
            e2e_processing_latency_percentiles: vec![],
            e2e_processing_latency_window_time: Duration::from_secs(600),
            tls_cert: String::new(),
            tls_key: String::new(),
            tls_client_auth_policy: String::new(),
            tls_root_ca_file: String::new(),
            tls_required: 0,
            tls_min_version: 0x0301,
            deflate: true,
            max_deflate_level: 6,
            snappy: true,
            enable_experiment: vec![],
        }
    }
}

/// nsqd's default node id: CRC-32 (IEEE) of the MD5 digest of the hostname, mod 1024.
pub fn default_node_id(hostname: &str) -> i64 {
    use md5::{Digest, Md5};
    let digest = Md5::digest(hostname.as_bytes());
    (crc32fast::hash(&digest) % 1024) as i64
}

impl Options {
    /// Checks nsqd makes at startup; the message is what it prints after `FATAL: `.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=9).contains(&self.max_deflate_level) {
            return Err("--max-deflate-level must be [1,9]".into());
        }
        if !(0..1024).contains(&self.node_id) {
            return Err("--node-id must be [0,1024)".into());
        }
        let m = self.auth_http_request_method.as_str();
        if m != "get" && m != "post" {
            return Err("--auth-http-request-method must be post or get".into());
        }
        for p in &self.e2e_processing_latency_percentiles {
            if !(*p > 0.0 && *p <= 1.0) {
                return Err(format!("invalid E2E processing latency percentile: {p}"));
            }
        }
        Ok(())
    }

    pub fn limits(&self) -> nsq_protocol::Limits {
        nsq_protocol::Limits {
            max_msg_size: self.max_msg_size,
            max_body_size: self.max_body_size,
            max_rdy_count: self.max_rdy_count,
            max_req_timeout_ms: self.max_req_timeout.as_millis() as i64,
        }
    }
}

/// The OS hostname (nsqd's default broadcast address and node id seed).
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into our buffer.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    if r != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_id_is_in_range_and_stable() {
        let a = default_node_id("vm");
        assert!((0..1024).contains(&a));
        assert_eq!(a, default_node_id("vm"));
    }
}

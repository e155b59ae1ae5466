//! nsqd's settings: every flag of NSQ 1.3.0's nsqd, declared once with
//! its name, type, default and usage ([`nsq_cli::flags!`]), from which come
//! the command line, `--help`, the `--config` keys and `/config/<opt>`;
//! plus the checks nsqd makes at startup. Everything else reads this.

use std::collections::BTreeMap;
use std::time::Duration;

pub use nsq_cli::flags::TlsMinVersion;
use nsq_cli::flags::{ConfigValue, Json, TomlError, Value};
use nsq_cli::LogLevel;

nsq_cli::flags! {
    /// nsqd's options, one per flag.
    pub struct Options {
        /// path to a TOML config file (its keys are the flag names with _ for -)
        config: String = "", cfg = "";
        /// print the version and exit
        version: bool = false, cfg = "";
        /// deprecated; use --log-level
        verbose: bool = false, cfg = "";
        /// deprecated; use --node-id
        worker_id: bool = false, cfg = "";
        /// log level: debug, info, warn, error or fatal
        log_level: LogLevel = "info";
        /// text at the start of every log line
        log_prefix: String = "[nsqd] ";
        /// nsq-rs: log line format: nsq (NSQ's lines) or json (one object per line, for log pipelines)
        log_format: String = "nsq";
        /// the id part of message ids, in [0,1024); a hash of the host's name when not set
        node_id: i64 = default_node_id(&nsq_cli::hostname().unwrap_or_default()), flag = "node-id", cfg = "id";
        /// <addr>:<port> to listen on for TCP clients
        tcp_address: String = "0.0.0.0:4150";
        /// <addr>:<port> to listen on for HTTP clients (empty: no HTTP listener)
        http_address: String = "0.0.0.0:4151";
        /// <addr>:<port> to listen on for HTTPS clients (with --tls-cert and --tls-key)
        https_address: String = "0.0.0.0:4152";
        /// the address registered with nsqlookupd; the host's name when not set
        broadcast_address: String = nsq_cli::hostname().unwrap_or_default();
        /// the TCP port registered with nsqlookupd; the listening one when 0
        broadcast_tcp_port: u16 = 0;
        /// the HTTP port registered with nsqlookupd; the listening one when 0
        broadcast_http_port: u16 = 0;
        /// nsqlookupd TCP address to register with (may be given several times)
        lookupd_tcp_addresses: Vec<String> = "", flag = "lookupd-tcp-address", cfg = "nsqlookupd_tcp_addresses";
        /// auth server as <addr>:<port> or a full URL (may be given several times)
        auth_http_addresses: Vec<String> = "", flag = "auth-http-address";
        /// HTTP method of auth server requests: get or post
        auth_http_request_method: String = "get";
        /// nsq-rs: every HTTP/HTTPS request but /ping needs a secret (Authorization: Bearer <secret>) that --auth-http-address grants the endpoint's permission (README: Security)
        http_auth_required: bool = false;
        /// nsq-rs: with --http-auth-required, the most connections each HTTP/HTTPS listener keeps open (0: no cap)
        http_max_connections: i64 = 1024;
        /// how long an outgoing HTTP request may take to connect
        http_client_connect_timeout: Duration = "2s";
        /// how long an outgoing HTTP request may take in all
        http_client_request_timeout: Duration = "5s";
        /// this nsqd's region (topology-aware consumption)
        topology_region: String = "";
        /// this nsqd's zone (topology-aware consumption)
        topology_zone: String = "";
        /// where disk queues and nsqd.dat live (the working directory when empty)
        data_path: String = "";
        /// messages kept in memory per topic and per channel before the disk
        mem_queue_size: i64 = 10000;
        /// bytes per disk queue file before a new one is started
        max_bytes_per_file: i64 = 104857600;
        /// disk queue writes and reads between fsyncs
        sync_every: i64 = 2500;
        /// longest time between fsyncs of a disk queue with unsynced writes
        sync_timeout: Duration = "2s";
        /// accepted for compatibility; nsq-rs times each channel exactly instead of scanning
        queue_scan_worker_pool_max: i64 = 4;
        /// accepted for compatibility; nsq-rs times each channel exactly instead of scanning
        queue_scan_selection_count: i64 = 20;
        /// how long a delivered message may go unanswered before it is requeued
        msg_timeout: Duration = "1m0s";
        /// the longest message timeout a client may ask for (TOUCH included)
        max_msg_timeout: Duration = "15m0s";
        /// largest message body, in bytes
        max_msg_size: i64 = 1048576;
        /// the longest delay of a REQ (and of a deferred publish, unless --max-defer-timeout is set)
        max_req_timeout: Duration = "1h0m0s";
        /// nsq-rs: the longest delay of a deferred publish (DPUB, /pub?defer=); 0: --max-req-timeout, as NSQ
        max_defer_timeout: Duration = "0s";
        /// nsq-rs: deferred messages of a channel past its mem-queue-size spill to run files on disk in due order and come back when due (README: Beyond NSQ)
        deferred_spill: bool = false;
        /// largest command body, in bytes
        max_body_size: i64 = 5242880;
        /// the longest heartbeat interval a client may ask for
        max_heartbeat_interval: Duration = "1m0s";
        /// the largest RDY count a client may send
        max_rdy_count: i64 = 2500;
        /// the largest output buffer, in bytes, a client may ask for
        max_output_buffer_size: i64 = 65536;
        /// the longest output buffer timeout a client may ask for
        max_output_buffer_timeout: Duration = "30s";
        /// the shortest output buffer timeout a client may ask for
        min_output_buffer_timeout: Duration = "25ms";
        /// the output buffer timeout of a client that asks for none
        output_buffer_timeout: Duration = "250ms";
        /// consumers allowed per channel; 0 for no limit
        max_channel_consumers: i64 = 0;
        /// nsq-rs: deliveries a message gets at most per channel before it goes to the channel's dead-letter topic (0: unlimited, as NSQ; per channel: /channel/config)
        max_attempts: u16 = 0;
        /// nsq-rs: messages older than this (from their publish time) expire undelivered, in every topic that sets no max_age of its own (0: never, as NSQ; per topic and channel: /topic/config, /channel/config)
        max_age: Duration = "0s";
        /// UDP <addr>:<port> of a statsd daemon to push stats to
        statsd_address: String = "";
        /// time between pushes to statsd
        statsd_interval: Duration = "1m0s";
        /// also push memory statistics to statsd
        statsd_mem_stats: bool = true;
        /// prefix of the statsd keys (%s: this host)
        statsd_prefix: String = "nsq.%s";
        /// largest statsd UDP packet, in bytes
        statsd_udp_packet_size: i64 = 508;
        /// leave ephemeral topics and channels out of statsd
        statsd_exclude_ephemeral: bool = false;
        /// end-to-end latency percentile to report, in (0, 1] (may be given several times, or comma separated)
        e2e_processing_latency_percentiles: Percentiles = "", flag = "e2e-processing-latency-percentile";
        /// the time window of the end-to-end latency percentiles
        e2e_processing_latency_window_time: Duration = "10m0s";
        /// path to the certificate file
        tls_cert: String = "";
        /// path to the key file
        tls_key: String = "";
        /// client certificates: require, or require-verify (checked against --tls-root-ca-file)
        tls_client_auth_policy: String = "";
        /// path to the certificate authority file
        tls_root_ca_file: String = "";
        /// TLS for clients: true, false or tcp-https (TCP must upgrade, plain HTTP allowed)
        tls_required: TlsRequired = "false";
        /// oldest TLS version accepted: ssl3.0, tls1.0, tls1.1, tls1.2 or tls1.3 (nsq-rs speaks 1.2 and 1.3 only)
        tls_min_version: TlsMinVersion = "tls1.0";
        /// let clients negotiate deflate compression
        deflate: bool = true;
        /// the highest deflate level a client may negotiate
        max_deflate_level: i64 = 6;
        /// let clients negotiate snappy compression
        snappy: bool = true;
        /// accepted for compatibility; nsq-rs has no experiments (may be given several times)
        enable_experiment: Vec<String> = "";
        /// nsq-rs: <addr>:<port> to listen on for replication traffic from the other members (empty: not a member of a replication cluster; docs/replication.md)
        replication_address: String = "";
        /// nsq-rs: a member of the replication cluster as <node-id>@<host>:<port>, this nsqd's --node-id included (may be given several times, or comma separated)
        replication_peers: ReplicationPeers = "", flag = "replication-peer";
        /// nsq-rs: Raft groups per member that replicated topics are placed onto; the same on every member
        replication_groups: i64 = 16;
        /// nsq-rs: how long a follower waits without hearing from its group's leader before it stands for election (heartbeats go every fifth of it)
        replication_election_timeout: Duration = "1s";
        /// nsq-rs: a group takes a snapshot (its topics, channels and progress) once this many entries below its slowest channel are not in one; its log is then purged up to this many entries (at most 1000) below the snapshot
        replication_snapshot_entries: i64 = 10000;
    }
}

/// `--tls-required`, as `/config/tls_required` reports it: 0 false, 1
/// tcp-https, 2 true. A boolean flag that also takes `tcp-https`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TlsRequired {
    #[default]
    No,
    /// TCP clients must upgrade, plain HTTP still serves.
    ExceptHttp,
    Yes,
}

pub const TLS_NOT_REQUIRED: TlsRequired = TlsRequired::No;
pub const TLS_REQUIRED: TlsRequired = TlsRequired::Yes;

impl Value for TlsRequired {
    const TYPE: &'static str = "";
    const BOOL: bool = true;

    fn set(&mut self, s: &str) -> Result<(), String> {
        let s = s.to_lowercase();
        *self = match s.as_str() {
            "tcp-https" => TlsRequired::ExceptHttp,
            s => match nsq_cli::flags::parse_bool(s) {
                Some(true) => TlsRequired::Yes,
                Some(false) => TlsRequired::No,
                None => {
                    return Err(format!(
                        "strconv.ParseBool: parsing {}: invalid syntax",
                        nsq_protocol::gofmt::quote(s)
                    ))
                }
            },
        };
        Ok(())
    }

    fn show(&self) -> String {
        (*self as i64).to_string()
    }

    fn config(&self) -> ConfigValue {
        ConfigValue::Json(Json::from(*self as i64))
    }

    fn set_toml(&mut self, v: &nsq_cli::toml::Value) -> Result<(), TomlError> {
        let text = nsq_cli::flags::go_sprint_v(v);
        self.set(&text)
            .map_err(|_| TomlError::Fatal(format!("failed parsing tls_required {text}")))
    }
}

/// `--e2e-processing-latency-percentile`: repeatable, each value possibly
/// comma separated; kept sorted descending without duplicates.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Percentiles(pub Vec<f64>);

impl std::ops::Deref for Percentiles {
    type Target = [f64];

    fn deref(&self) -> &[f64] {
        &self.0
    }
}

impl Value for Percentiles {
    const TYPE: &'static str = "value";

    fn set(&mut self, s: &str) -> Result<(), String> {
        for v in s.split(',') {
            let p: f64 = v
                .trim()
                .parse()
                .map_err(|_| format!("invalid E2E processing latency percentile: {v}"))?;
            self.0.push(p);
        }
        self.0
            .sort_by(|a, b| b.partial_cmp(a).unwrap_or(std::cmp::Ordering::Equal));
        self.0.dedup();
        Ok(())
    }

    fn show(&self) -> String {
        self.0
            .iter()
            .map(|p| nsq_protocol::gofmt::go_float(*p))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn config(&self) -> ConfigValue {
        ConfigValue::Json(Json::from(self.0.clone()))
    }
}

/// `--replication-peer`: the members of the replication cluster by node id,
/// each `<node-id>@<host>:<port>`; repeatable, each value possibly comma
/// separated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplicationPeers(pub BTreeMap<u64, String>);

impl Value for ReplicationPeers {
    const TYPE: &'static str = "value";

    fn set(&mut self, s: &str) -> Result<(), String> {
        for v in s.split(',').map(str::trim).filter(|v| !v.is_empty()) {
            let bad = || format!("invalid --replication-peer {v:?} (want <node-id>@<host>:<port>)");
            let (id, addr) = v.split_once('@').ok_or_else(bad)?;
            let id: u64 = id.parse().map_err(|_| bad())?;
            let port = addr.rsplit_once(':').map(|(_, p)| p).ok_or_else(bad)?;
            if addr.starts_with(':') || port.parse::<u16>().is_err() {
                return Err(bad());
            }
            if let Some(old) = self.0.insert(id, addr.to_string()) {
                if old != addr {
                    return Err(format!(
                        "--replication-peer: node id {id} given twice ({old} and {addr})"
                    ));
                }
            }
        }
        Ok(())
    }

    fn show(&self) -> String {
        self.0
            .iter()
            .map(|(id, addr)| format!("{id}@{addr}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn config(&self) -> ConfigValue {
        ConfigValue::Json(Json::from(
            self.0
                .iter()
                .map(|(id, addr)| format!("{id}@{addr}"))
                .collect::<Vec<_>>(),
        ))
    }
}

/// The fixed client timeout of nsqd (not a flag); heartbeats default to half.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(60);

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
        nsq_http::guard::check_flags(
            &self.auth_http_request_method,
            self.http_auth_required,
            !self.auth_http_addresses.is_empty(),
            self.http_max_connections,
        )?;
        self.validate_replication()?;
        for p in self.e2e_processing_latency_percentiles.iter() {
            if !(*p > 0.0 && *p <= 1.0) {
                return Err(format!("invalid E2E processing latency percentile: {p}"));
            }
        }
        Ok(())
    }

    /// The replication flags go together: a listen address, at least one
    /// member besides this nsqd, a sane group count. An nsqd that names
    /// itself (by `--node-id`) among the peers forms a cluster with them;
    /// one that does not joins theirs once a member adds it
    /// (`POST /replication/members/add`).
    fn validate_replication(&self) -> Result<(), String> {
        let peers = &self.replication_peers.0;
        if self.replication_address.is_empty() {
            if !peers.is_empty() {
                return Err("--replication-peer needs --replication-address".into());
            }
            return Ok(());
        }
        if !(1..=1024).contains(&self.replication_groups) {
            return Err("--replication-groups must be [1,1024]".into());
        }
        if self.replication_snapshot_entries < 1 {
            return Err("--replication-snapshot-entries must be at least 1".into());
        }
        if self.replication_election_timeout < Duration::from_millis(50) {
            return Err("--replication-election-timeout must be at least 50ms".into());
        }
        let others = peers
            .keys()
            .filter(|id| **id != self.node_id as u64)
            .count();
        if others < 1 {
            return Err("--replication-peer must name at least one other member".into());
        }
        Ok(())
    }

    /// True when nsqd runs as a member of a replication cluster.
    pub fn replication_enabled(&self) -> bool {
        !self.replication_address.is_empty()
    }

    pub fn limits(&self) -> nsq_protocol::Limits {
        nsq_protocol::Limits {
            max_msg_size: self.max_msg_size,
            max_body_size: self.max_body_size,
            max_rdy_count: self.max_rdy_count,
            max_defer_timeout_ms: self.max_defer_timeout().as_millis() as i64,
        }
    }

    /// What bounds a deferred publish: `--max-defer-timeout`, or when it is
    /// 0 (not set) `--max-req-timeout`, as NSQ's proposal for it does.
    pub fn max_defer_timeout(&self) -> Duration {
        if self.max_defer_timeout.is_zero() {
            self.max_req_timeout
        } else {
            self.max_defer_timeout
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_nsqs() {
        let o = Options::default();
        assert_eq!(o.tcp_address, "0.0.0.0:4150");
        assert_eq!(o.msg_timeout, Duration::from_secs(60));
        assert_eq!(o.tls_min_version, TlsMinVersion(0x0301));
        assert_eq!(o.tls_required, TLS_NOT_REQUIRED);
        assert!(o.deflate && o.snappy);
        assert_eq!(
            o.node_id,
            default_node_id(&nsq_cli::hostname().unwrap_or_default())
        );
        assert!(o.validate().is_ok());
    }

    #[test]
    fn nsqd_value_types() {
        let mut t = TlsRequired::default();
        t.set("tcp-https").unwrap();
        assert_eq!(t, TlsRequired::ExceptHttp);
        t.set("TRUE").unwrap();
        assert_eq!(t, TLS_REQUIRED);
        assert!(t.set("maybe").is_err());
        let mut v = TlsMinVersion::default();
        v.set("TLS1.2").unwrap();
        assert_eq!((v.0, v.show().as_str()), (0x0303, "tls1.2"));
        assert!(v.set("tls9").is_err());
        let mut p = Percentiles::default();
        p.set("0.5,0.99").unwrap();
        p.set("0.95").unwrap();
        p.set("0.99").unwrap();
        assert_eq!(p.0, [0.99, 0.95, 0.5]);
        assert!(p.set("x").is_err());
    }

    #[test]
    fn replication_flags_go_together() {
        let mut o = Options {
            node_id: 2,
            ..Options::default()
        };
        let mut peers = ReplicationPeers::default();
        peers.set("1@10.0.0.1:4160, 2@10.0.0.2:4160").unwrap();
        peers.set("3@[::1]:4160").unwrap();
        assert_eq!(peers.show(), "1@10.0.0.1:4160,2@10.0.0.2:4160,3@[::1]:4160");
        for bad in ["x@h:1", "1@h", "1@:4160", "1-h:1", "1@h:99999", "3@other:1"] {
            assert!(peers.clone().set(bad).is_err(), "{bad}");
        }
        o.replication_peers = peers.clone();
        assert_eq!(
            o.validate().unwrap_err(),
            "--replication-peer needs --replication-address"
        );
        o.replication_address = "127.0.0.1:4160".into();
        assert!(o.validate().is_ok());
        // not named: it joins the others' cluster once they add it
        o.node_id = 7;
        assert!(o.validate().is_ok());
        o.node_id = 2;
        o.replication_groups = 0;
        assert!(o.validate().is_err());
        o.replication_groups = 16;
        o.replication_peers = ReplicationPeers::default();
        o.replication_peers.set("2@h:1").unwrap();
        assert!(o.validate().unwrap_err().contains("at least one other"));
    }

    #[test]
    fn node_id_is_in_range_and_stable() {
        let a = default_node_id("vm");
        assert!((0..1024).contains(&a));
        assert_eq!(a, default_node_id("vm"));
    }
}

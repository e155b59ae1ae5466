//! nsqadmin's options (one per command-line flag, nsqadmin's defaults), their
//! validation at startup, and their `/config/:opt` view.

use std::time::Duration;

use serde_json::Value;

use crate::cidr::Cidr;
use crate::error::StartError;

/// Every nsqadmin flag, under its config-file name. Two options change at
/// run time through `PUT /config`: `nsqlookupd_http_addresses` and `log_level`.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// 1 debug, 2 info, 3 warn, 4 error, 5 fatal (nsq's numbering).
    pub log_level: i64,
    pub log_prefix: String,
    pub http_address: String,
    pub base_path: String,
    pub dev_static_dir: String,
    pub graphite_url: String,
    pub proxy_graphite: bool,
    pub statsd_prefix: String,
    pub statsd_counter_format: String,
    pub statsd_gauge_format: String,
    pub statsd_interval: Duration,
    pub nsqlookupd_http_addresses: Vec<String>,
    pub nsqd_http_addresses: Vec<String>,
    pub http_client_connect_timeout: Duration,
    pub http_client_request_timeout: Duration,
    pub http_client_tls_insecure_skip_verify: bool,
    pub http_client_tls_root_ca_file: String,
    pub http_client_tls_cert: String,
    pub http_client_tls_key: String,
    pub allow_config_from_cidr: String,
    pub notification_http_endpoint: String,
    pub acl_http_header: String,
    pub admin_users: Vec<String>,
    /// nsq-rs: how often the history poller samples the cluster (not a flag).
    pub history_interval: Duration,
    /// nsq-rs: how much history is kept in memory (not a flag).
    pub history_window: Duration,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            log_level: 2,
            log_prefix: "[nsqadmin] ".into(),
            http_address: "0.0.0.0:4171".into(),
            base_path: "/".into(),
            dev_static_dir: String::new(),
            graphite_url: String::new(),
            proxy_graphite: false,
            statsd_prefix: "nsq.%s".into(),
            statsd_counter_format: "stats.counters.%s.count".into(),
            statsd_gauge_format: "stats.gauges.%s".into(),
            statsd_interval: Duration::from_secs(60),
            nsqlookupd_http_addresses: Vec::new(),
            nsqd_http_addresses: Vec::new(),
            http_client_connect_timeout: Duration::from_secs(2),
            http_client_request_timeout: Duration::from_secs(5),
            http_client_tls_insecure_skip_verify: false,
            http_client_tls_root_ca_file: String::new(),
            http_client_tls_cert: String::new(),
            http_client_tls_key: String::new(),
            allow_config_from_cidr: "127.0.0.1/8".into(),
            notification_http_endpoint: String::new(),
            acl_http_header: "X-Forwarded-User".into(),
            admin_users: Vec::new(),
            history_interval: Duration::from_secs(5),
            history_window: Duration::from_secs(30 * 60),
        }
    }
}

/// nsq's log level names → numbers.
pub fn parse_log_level(s: &str) -> Option<i64> {
    Some(match s.to_lowercase().as_str() {
        "debug" => 1,
        "info" => 2,
        "warn" => 3,
        "error" => 4,
        "fatal" => 5,
        _ => return None,
    })
}

/// `--base-path` as nsqadmin uses it: leading `/`, cleaned (`path.Clean`).
pub fn normalize_base_path(p: &str) -> String {
    if p.is_empty() {
        return "/".into();
    }
    let p = if p.starts_with('/') {
        p.to_string()
    } else {
        format!("/{p}")
    };
    clean_path(&p)
}

/// Go's `path.Clean` for rooted paths.
pub fn clean_path(p: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            s => out.push(s),
        }
    }
    format!("/{}", out.join("/"))
}

/// `path.Join(base, p)` for a rooted base.
pub fn join_path(base: &str, p: &str) -> String {
    clean_path(&format!("{base}/{p}"))
}

/// What `GET /config/:opt` answers: a raw string or a JSON value.
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigValue {
    Text(String),
    Json(Value),
}

impl Options {
    /// Checks what nsqadmin checks before listening and normalizes the base path.
    pub async fn validate(&mut self) -> Result<(), StartError> {
        if self.nsqd_http_addresses.is_empty() && self.nsqlookupd_http_addresses.is_empty() {
            return Err(StartError::Config(
                "--nsqd-http-address or --lookupd-http-address required".into(),
            ));
        }
        if !self.nsqd_http_addresses.is_empty() && !self.nsqlookupd_http_addresses.is_empty() {
            return Err(StartError::Config(
                "use --nsqd-http-address or --lookupd-http-address not both".into(),
            ));
        }
        if !self.http_client_tls_cert.is_empty() && self.http_client_tls_key.is_empty() {
            return Err(StartError::Config(
                "--http-client-tls-key must be specified with --http-client-tls-cert".into(),
            ));
        }
        if !self.http_client_tls_key.is_empty() && self.http_client_tls_cert.is_empty() {
            return Err(StartError::Config(
                "--http-client-tls-cert must be specified with --http-client-tls-key".into(),
            ));
        }
        for f in [
            &self.http_client_tls_cert,
            &self.http_client_tls_key,
            &self.http_client_tls_root_ca_file,
        ] {
            if !f.is_empty() {
                std::fs::metadata(f).map_err(|e| {
                    StartError::Config(format!("failed to read TLS file {f} - {e}"))
                })?;
            }
        }
        for a in &self.nsqlookupd_http_addresses {
            resolve(a).await.map_err(|e| {
                StartError::Config(format!(
                    "failed to resolve --lookupd-http-address ({a}) - {e}"
                ))
            })?;
        }
        for a in &self.nsqd_http_addresses {
            resolve(a).await.map_err(|e| {
                StartError::Config(format!("failed to resolve --nsqd-http-address ({a}) - {e}"))
            })?;
        }
        if self.proxy_graphite {
            self.graphite_url
                .parse::<hyper::Uri>()
                .map_err(|e| e.to_string())
                .and_then(|u| match u.host() {
                    Some(_) => Ok(()),
                    None => Err(format!("no host in {}", self.graphite_url)),
                })
                .map_err(|e| {
                    StartError::Config(format!(
                        "failed to parse --graphite-url ({}) - {e}",
                        self.graphite_url
                    ))
                })?;
        }
        if !self.allow_config_from_cidr.is_empty() {
            Cidr::parse(&self.allow_config_from_cidr).map_err(|e| {
                StartError::Config(format!(
                    "failed to parse --allow-config-from-cidr ({}) - {e}",
                    self.allow_config_from_cidr
                ))
            })?;
        }
        self.base_path = normalize_base_path(&self.base_path);
        Ok(())
    }

    /// The upstream client's TLS (`--http-client-tls-*`); `None`: Go's defaults.
    pub fn http_client_tls(
        &self,
    ) -> Result<Option<std::sync::Arc<rustls::ClientConfig>>, StartError> {
        nsq_http::tls::ClientTls {
            root_ca_file: &self.http_client_tls_root_ca_file,
            cert_file: &self.http_client_tls_cert,
            key_file: &self.http_client_tls_key,
            insecure_skip_verify: self.http_client_tls_insecure_skip_verify,
        }
        .config()
        .map_err(|e| StartError::Config(format!("failed to build TLS config - {e}")))
    }

    /// The value of option `name` (config-file name), as `/config` shows it.
    pub fn config_value(&self, name: &str) -> Option<ConfigValue> {
        use ConfigValue::{Json, Text};
        let ns = |d: Duration| Json(Value::from(d.as_nanos() as i64));
        let list = |v: &Vec<String>| Json(Value::from(v.clone()));
        Some(match name {
            "log_level" => Json(Value::from(self.log_level)),
            "log_prefix" => Text(self.log_prefix.clone()),
            "http_address" => Text(self.http_address.clone()),
            "base_path" => Text(self.base_path.clone()),
            "dev_static_dir" => Text(self.dev_static_dir.clone()),
            "graphite_url" => Text(self.graphite_url.clone()),
            "proxy_graphite" => Json(Value::from(self.proxy_graphite)),
            "statsd_prefix" => Text(self.statsd_prefix.clone()),
            "statsd_counter_format" => Text(self.statsd_counter_format.clone()),
            "statsd_gauge_format" => Text(self.statsd_gauge_format.clone()),
            "statsd_interval" => ns(self.statsd_interval),
            "nsqlookupd_http_addresses" => list(&self.nsqlookupd_http_addresses),
            "nsqd_http_addresses" => list(&self.nsqd_http_addresses),
            "http_client_connect_timeout" => ns(self.http_client_connect_timeout),
            "http_client_request_timeout" => ns(self.http_client_request_timeout),
            "http_client_tls_insecure_skip_verify" => {
                Json(Value::from(self.http_client_tls_insecure_skip_verify))
            }
            "http_client_tls_root_ca_file" => Text(self.http_client_tls_root_ca_file.clone()),
            "http_client_tls_cert" => Text(self.http_client_tls_cert.clone()),
            "http_client_tls_key" => Text(self.http_client_tls_key.clone()),
            "allow_config_from_cidr" => Text(self.allow_config_from_cidr.clone()),
            "notification_http_endpoint" => Text(self.notification_http_endpoint.clone()),
            "acl_http_header" => Text(self.acl_http_header.clone()),
            "admin_users" => list(&self.admin_users),
            _ => return None,
        })
    }
}

async fn resolve(addr: &str) -> Result<(), String> {
    if !addr.contains(':') {
        return Err(format!("address {addr}: missing port in address"));
    }
    match tokio::net::lookup_host(addr).await {
        Ok(mut it) => it
            .next()
            .map(|_| ())
            .ok_or_else(|| format!("lookup {addr}: no such host")),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_paths() {
        assert_eq!(normalize_base_path(""), "/");
        assert_eq!(normalize_base_path("admin/"), "/admin");
        assert_eq!(normalize_base_path("/a//b/../c"), "/a/c");
        assert_eq!(join_path("/", "/api/topics"), "/api/topics");
        assert_eq!(join_path("/admin", "/"), "/admin");
    }

    #[test]
    fn config_values() {
        let o = Options {
            nsqlookupd_http_addresses: vec!["127.0.0.1:4161".into()],
            ..Default::default()
        };
        assert_eq!(
            o.config_value("nsqlookupd_http_addresses"),
            Some(ConfigValue::Json(serde_json::json!(["127.0.0.1:4161"])))
        );
        assert_eq!(
            o.config_value("nsqd_http_addresses"),
            Some(ConfigValue::Json(serde_json::json!([])))
        );
        assert_eq!(
            o.config_value("http_client_request_timeout"),
            Some(ConfigValue::Json(serde_json::json!(5000000000i64)))
        );
        assert_eq!(
            o.config_value("base_path"),
            Some(ConfigValue::Text("/".into()))
        );
        assert_eq!(
            o.config_value("log_level"),
            Some(ConfigValue::Json(serde_json::json!(2)))
        );
        assert_eq!(o.config_value("verbose"), None);
    }

    #[tokio::test]
    async fn validation_messages() {
        let mut o = Options::default();
        assert_eq!(
            o.validate().await.unwrap_err().to_string(),
            "--nsqd-http-address or --lookupd-http-address required"
        );
        let mut o = Options {
            nsqd_http_addresses: vec!["a:1".into()],
            nsqlookupd_http_addresses: vec!["b:1".into()],
            ..Default::default()
        };
        assert_eq!(
            o.validate().await.unwrap_err().to_string(),
            "use --nsqd-http-address or --lookupd-http-address not both"
        );
        let mut o = Options {
            nsqd_http_addresses: vec!["127.0.0.1:1".into()],
            allow_config_from_cidr: "nope".into(),
            ..Default::default()
        };
        assert!(o
            .validate()
            .await
            .unwrap_err()
            .to_string()
            .starts_with("failed to parse --allow-config-from-cidr (nope) - "));
        let mut o = Options {
            nsqd_http_addresses: vec!["127.0.0.1".into()],
            ..Default::default()
        };
        assert!(o
            .validate()
            .await
            .unwrap_err()
            .to_string()
            .starts_with("failed to resolve --nsqd-http-address (127.0.0.1) - "));
    }
}

//! nsqadmin's options (one per command-line flag, nsqadmin's defaults), their
//! validation at startup, and their `/config/:opt` view.

use std::time::Duration;

use crate::cidr::Cidr;
use crate::error::StartError;

nsq_cli::flags! {
    /// Every nsqadmin flag (NSQ 1.3.0's names, types and defaults), under its
    /// config-file name. Two options change at run time through `PUT
    /// /config`: `nsqlookupd_http_addresses` and `log_level`.
    pub struct Options {
        /// path to a TOML config file (its keys are the flag names with _ for -)
        config: String = "", cfg = "";
        /// print the version and exit
        version: bool = false, cfg = "";
        /// deprecated; use --log-level
        verbose: bool = false, cfg = "";
        /// log level: debug, info, warn, error or fatal
        log_level: nsq_cli::LogLevel = "info";
        /// text at the start of every log line
        log_prefix: String = "[nsqadmin] ";
        /// nsq-rs: log line format: nsq (NSQ's lines) or json (one object per line, for log pipelines)
        log_format: String = "nsq";
        /// <addr>:<port> to listen on for HTTP clients
        http_address: String = "0.0.0.0:4171";
        /// the URL path nsqadmin is served under
        base_path: String = "/";
        /// serve /static from this directory (for UI development)
        dev_static_dir: String = "";
        /// graphite's HTTP address, for the rate charts
        graphite_url: String = "";
        /// send graphite requests through nsqadmin
        proxy_graphite: bool = false;
        /// the graphite key template of statsd counters (empty: none)
        statsd_counter_format: String = "stats.counters.%s.count";
        /// the graphite key template of statsd gauges (empty: none)
        statsd_gauge_format: String = "stats.gauges.%s";
        /// the statsd key prefix nsqd uses (%s: the nsqd host); must match nsqd's
        statsd_prefix: String = "nsq.%s";
        /// how often nsqd pushes to statsd; must match nsqd's
        statsd_interval: Duration = "1m0s";
        /// nsqlookupd HTTP address (may be given several times)
        nsqlookupd_http_addresses: Vec<String> = "", flag = "lookupd-http-address";
        /// nsqd HTTP address (may be given several times)
        nsqd_http_addresses: Vec<String> = "", flag = "nsqd-http-address";
        /// how long an upstream request may take to connect
        http_client_connect_timeout: Duration = "2s";
        /// how long an upstream request may take in all
        http_client_request_timeout: Duration = "5s";
        /// accept any certificate from an https upstream
        http_client_tls_insecure_skip_verify: bool = false;
        /// certificate authority file for https upstreams
        http_client_tls_root_ca_file: String = "";
        /// client certificate file for https upstreams
        http_client_tls_cert: String = "";
        /// client key file for https upstreams
        http_client_tls_key: String = "";
        /// the network from which /config may be used (empty: any)
        allow_config_from_cidr: String = "127.0.0.1/8";
        /// URL to POST a JSON notification of each admin action to
        notification_http_endpoint: String = "";
        /// the HTTP header carrying the authenticated user
        acl_http_header: String = "X-Forwarded-User";
        /// a user allowed to perform admin actions (may be given several times; none: anyone)
        admin_users: Vec<String> = "", flag = "admin-user";
        /// nsq-rs: the secret sent to nsqd and nsqlookupd (Authorization: Bearer) when they run with --http-auth-required; grant it admin for the actions nsqadmin should take (README: Security)
        http_secret: String = "";
    }
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
}

async fn resolve(addr: &str) -> Result<(), String> {
    // nsq-rs: `http://` or `https://` may name the scheme (no other).
    let addr = match addr.split_once("://") {
        Some(("http" | "https", rest)) => rest.trim_end_matches('/'),
        Some((scheme, _)) => return Err(format!("unsupported scheme {scheme:?} (http or https)")),
        None => addr,
    };
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
        use nsq_cli::flags::{ConfigValue, Flags};
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
        assert_eq!(o.config_value("version"), None);
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

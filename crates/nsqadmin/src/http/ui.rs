//! The web UI: the single page (any UI route serves it; routing happens in
//! the browser), its embedded assets (or `--dev-static-dir`), and the
//! optional graphite `/render` proxy.
//!
//! The page gets nsqadmin's JavaScript globals (`BASE_PATH`, `IS_ADMIN`,
//! `NSQLOOKUPD`, `GRAPHITE_URL`, …) from the options and the request.

use std::sync::Arc;

use axum::response::Response;
use bytes::Bytes;
use hyper::Method;
use serde::Serialize;

use super::{plain, Req, TEXT_CT};
use crate::options::join_path;
use crate::shared::Shared;

const INDEX_HTML: &str = include_str!("../../static/index.html");

/// Embedded assets: name → (content type, bytes).
const ASSETS: &[(&str, &str, &[u8])] = &[
    (
        "main.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../static/main.js"),
    ),
    (
        "base.css",
        "text/css; charset=utf-8",
        include_bytes!("../../static/base.css"),
    ),
    (
        "favicon.svg",
        "image/svg+xml",
        include_bytes!("../../static/favicon.svg"),
    ),
];

#[derive(Serialize)]
#[allow(non_snake_case)]
struct Globals<'a> {
    USER_AGENT: &'a str,
    VERSION: &'a str,
    GRAPHITE_URL: &'a str,
    GRAPH_ENABLED: bool,
    STATSD_COUNTER_FORMAT: &'a str,
    STATSD_GAUGE_FORMAT: &'a str,
    STATSD_INTERVAL: u64,
    STATSD_PREFIX: &'a str,
    NSQLOOKUPD: &'a [String],
    IS_ADMIN: bool,
    BASE_PATH: &'a str,
    /// nsq-rs: the history poller's period.
    HISTORY_INTERVAL_MS: u64,
}

pub fn index(s: &Arc<Shared>, req: &Req) -> Response {
    let o = s.options();
    let g = Globals {
        USER_AGENT: crate::USER_AGENT,
        VERSION: crate::VERSION,
        GRAPHITE_URL: if o.proxy_graphite {
            ""
        } else {
            &o.graphite_url
        },
        GRAPH_ENABLED: !o.graphite_url.is_empty(),
        STATSD_COUNTER_FORMAT: &o.statsd_counter_format,
        STATSD_GAUGE_FORMAT: &o.statsd_gauge_format,
        STATSD_INTERVAL: o.statsd_interval.as_secs(),
        STATSD_PREFIX: &o.statsd_prefix,
        NSQLOOKUPD: &o.nsqlookupd_http_addresses,
        IS_ADMIN: super::actions::is_admin(s, req),
        BASE_PATH: &o.base_path,
        HISTORY_INTERVAL_MS: crate::history::INTERVAL.as_millis() as u64,
    };
    // Go's JSON escaping of <, > and & keeps this safe inside <script>.
    let globals = String::from_utf8_lossy(&nsq_protocol::gofmt::to_json(&g)).into_owned();
    let static_base = join_path(&o.base_path, "/static");
    let html = INDEX_HTML
        .replace("{{GLOBALS}}", &globals)
        .replace("{{STATIC}}", &static_base)
        .replace("{{VERSION}}", crate::VERSION);
    plain(200, "text/html", html)
}

fn content_type(name: &str) -> &'static str {
    match name.rsplit_once('.').map(|(_, e)| e) {
        Some("js") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("html") => "text/html; charset=utf-8",
        Some("png") => "image/png",
        Some("svg") => "image/svg+xml",
        Some("json") | Some("map") => "application/json",
        Some("woff") => "application/font-woff",
        Some("woff2") => "application/font-woff2",
        Some("ttf") => "application/font-sfnt",
        Some("eot") => "application/vnd.ms-fontobject",
        _ => TEXT_CT,
    }
}

pub fn asset(s: &Arc<Shared>, name: &str) -> Response {
    let dev = s.options().dev_static_dir.clone();
    if !dev.is_empty() {
        if name.starts_with('.') || name.contains('/') {
            return plain(404, TEXT_CT, "NOT_FOUND");
        }
        return match std::fs::read(std::path::Path::new(&dev).join(name)) {
            Ok(b) => plain(200, content_type(name), b),
            Err(_) => plain(404, TEXT_CT, "NOT_FOUND"),
        };
    }
    match ASSETS.iter().find(|(n, _, _)| *n == name) {
        Some((_, ct, body)) => plain(200, ct, Bytes::from_static(body)),
        None => plain(404, TEXT_CT, "NOT_FOUND"),
    }
}

/// `GET <bp>/render?…` → graphite (same path and query; the graphite URL's
/// credentials, if any, sent as basic auth).
pub async fn render_proxy(s: &Arc<Shared>, req: &Req) -> Response {
    let graphite = s.options().graphite_url.clone();
    // scheme://[user:pass@]host[:port] of the graphite URL, then our path.
    let origin_end = graphite
        .find("://")
        .and_then(|i| graphite[i + 3..].find(['/', '?']).map(|j| i + 3 + j))
        .unwrap_or(graphite.len());
    let mut url = format!("{}{}", &graphite[..origin_end], req.path);
    if !req.query.is_empty() {
        url.push('?');
        url.push_str(&req.query);
    }
    match s
        .graphite_client
        .request(Method::GET, &url, &[], None)
        .await
    {
        Ok(r) => {
            let ct = r
                .headers
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("application/octet-stream")
                .to_string();
            let mut resp = plain(r.status.as_u16(), &ct, r.body);
            if let Some(v) = r.headers.get("cache-control") {
                resp.headers_mut().insert("cache-control", v.clone());
            }
            resp
        }
        Err(e) => {
            tracing::error!("graphite proxy: {e}");
            plain(502, TEXT_CT, Bytes::new())
        }
    }
}

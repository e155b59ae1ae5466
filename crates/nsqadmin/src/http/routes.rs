//! nsqadmin's route table and the routing rules of the router it uses
//! (julienschmidt/httprouter): exact segments, `:param` for one non-empty
//! segment, a redirect for a path that only matches with/without a trailing
//! slash or once cleaned (301 for GET, 307 otherwise), 405 with `Allow` for a
//! known path and the wrong method, and `OPTIONS` answered with `Allow`.
//!
//! Pure: paths in, decisions out.

use crate::options::{clean_path, join_path};

/// What a request is for. Parameters are percent-decoded path segments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Index,
    Ping,
    Static(String),
    Render,
    Topics,
    Topic(String),
    Channel(String, String),
    Nodes,
    Node(String),
    CreateTopicChannel,
    TopicAction(String),
    ChannelAction(String, String),
    TombstoneNode(String),
    DeleteTopic(String),
    DeleteChannel(String, String),
    Counter,
    Graphite,
    ConfigGet(String),
    ConfigPut(String),
    History,
    HistoryTopic(String),
    HistoryChannel(String, String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Index,
    Ping,
    Static,
    Render,
    Topics,
    Topic,
    Channel,
    Nodes,
    Node,
    CreateTopicChannel,
    TopicAction,
    ChannelAction,
    TombstoneNode,
    DeleteTopic,
    DeleteChannel,
    Counter,
    Graphite,
    ConfigGet,
    ConfigPut,
    History,
    HistoryTopic,
    HistoryChannel,
}

const TABLE: &[(&str, &str, Kind)] = &[
    ("GET", "/", Kind::Index),
    ("GET", "/ping", Kind::Ping),
    ("GET", "/topics", Kind::Index),
    ("GET", "/topics/:topic", Kind::Index),
    ("GET", "/topics/:topic/:channel", Kind::Index),
    ("GET", "/nodes", Kind::Index),
    ("GET", "/nodes/:node", Kind::Index),
    ("GET", "/counter", Kind::Index),
    ("GET", "/lookup", Kind::Index),
    ("GET", "/static/:asset", Kind::Static),
    ("GET", "/fonts/:asset", Kind::Static),
    ("GET", "/render", Kind::Render),
    ("GET", "/api/topics", Kind::Topics),
    ("GET", "/api/topics/:topic", Kind::Topic),
    ("GET", "/api/topics/:topic/:channel", Kind::Channel),
    ("GET", "/api/nodes", Kind::Nodes),
    ("GET", "/api/nodes/:node", Kind::Node),
    ("POST", "/api/topics", Kind::CreateTopicChannel),
    ("POST", "/api/topics/:topic", Kind::TopicAction),
    ("POST", "/api/topics/:topic/:channel", Kind::ChannelAction),
    ("DELETE", "/api/nodes/:node", Kind::TombstoneNode),
    ("DELETE", "/api/topics/:topic", Kind::DeleteTopic),
    ("DELETE", "/api/topics/:topic/:channel", Kind::DeleteChannel),
    ("GET", "/api/counter", Kind::Counter),
    ("GET", "/api/graphite", Kind::Graphite),
    ("GET", "/config/:opt", Kind::ConfigGet),
    ("PUT", "/config/:opt", Kind::ConfigPut),
    ("GET", "/api/history", Kind::History),
    ("GET", "/api/history/topics/:topic", Kind::HistoryTopic),
    (
        "GET",
        "/api/history/topics/:topic/:channel",
        Kind::HistoryChannel,
    ),
];

/// The router's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Found(Route),
    /// Redirect to this path (status 301 for GET, else 307).
    Redirect(String),
    /// Known path, other methods: value of the `Allow` header.
    MethodNotAllowed(String),
    /// `OPTIONS` on a known path: value of the `Allow` header.
    Options(String),
    NotFound,
}

/// The routes of one server (base path and optional graphite proxy applied).
#[derive(Debug, Clone)]
pub struct Router {
    routes: Vec<(&'static str, Vec<String>, Kind)>,
}

fn segments(path: &str) -> Vec<&str> {
    if path == "/" {
        return Vec::new();
    }
    path.strip_prefix('/').unwrap_or(path).split('/').collect()
}

fn decode(seg: &str) -> String {
    String::from_utf8_lossy(&nsq_http::url::percent_decode(seg)).into_owned()
}

impl Router {
    pub fn new(base_path: &str, proxy_graphite: bool) -> Router {
        let routes = TABLE
            .iter()
            .filter(|(_, _, k)| proxy_graphite || *k != Kind::Render)
            .map(|(m, p, k)| {
                (
                    *m,
                    segments(&join_path(base_path, p))
                        .into_iter()
                        .map(str::to_string)
                        .collect(),
                    *k,
                )
            })
            .collect();
        Router { routes }
    }

    fn matches(pattern: &[String], segs: &[&str]) -> Option<Vec<String>> {
        if pattern.len() != segs.len() {
            return None;
        }
        let mut params = Vec::new();
        for (p, s) in pattern.iter().zip(segs) {
            if p.starts_with(':') {
                if s.is_empty() {
                    return None;
                }
                params.push(decode(s));
            } else if p != s {
                return None;
            }
        }
        Some(params)
    }

    fn lookup(&self, method: &str, path: &str) -> Option<Route> {
        let segs = segments(path);
        self.routes
            .iter()
            .filter(|(m, _, _)| *m == method)
            .find_map(|(_, p, k)| Self::matches(p, &segs).map(|params| build(*k, params)))
    }

    fn allowed(&self, path: &str, except: &str) -> String {
        let segs = segments(path);
        let mut allow: Vec<&str> = Vec::new();
        for m in ["GET", "POST", "PUT", "DELETE"] {
            if m != except
                && self
                    .routes
                    .iter()
                    .any(|(rm, p, _)| *rm == m && Self::matches(p, &segs).is_some())
            {
                allow.push(m);
            }
        }
        if allow.is_empty() {
            return String::new();
        }
        allow.push("OPTIONS");
        allow.join(", ")
    }

    pub fn resolve(&self, method: &str, path: &str) -> Decision {
        let method = if method == "HEAD" { "GET" } else { method };
        if let Some(r) = self.lookup(method, path) {
            return Decision::Found(r);
        }
        if method == "OPTIONS" {
            let allow = self.allowed(path, method);
            if !allow.is_empty() {
                return Decision::Options(allow);
            }
        } else if method != "CONNECT" && path != "/" {
            let toggled = match path.strip_suffix('/') {
                Some(p) if !p.is_empty() => p.to_string(),
                Some(_) => String::new(),
                None => format!("{path}/"),
            };
            if !toggled.is_empty() && self.lookup(method, &toggled).is_some() {
                return Decision::Redirect(toggled);
            }
            let cleaned = clean_path(path);
            if cleaned != path && self.lookup(method, &cleaned).is_some() {
                return Decision::Redirect(cleaned);
            }
        }
        let allow = self.allowed(path, method);
        if !allow.is_empty() {
            return Decision::MethodNotAllowed(allow);
        }
        Decision::NotFound
    }
}

fn build(k: Kind, mut p: Vec<String>) -> Route {
    let mut next = || {
        if p.is_empty() {
            String::new()
        } else {
            p.remove(0)
        }
    };
    match k {
        Kind::Index => Route::Index,
        Kind::Ping => Route::Ping,
        Kind::Static => Route::Static(next()),
        Kind::Render => Route::Render,
        Kind::Topics => Route::Topics,
        Kind::Topic => Route::Topic(next()),
        Kind::Channel => Route::Channel(next(), next()),
        Kind::Nodes => Route::Nodes,
        Kind::Node => Route::Node(next()),
        Kind::CreateTopicChannel => Route::CreateTopicChannel,
        Kind::TopicAction => Route::TopicAction(next()),
        Kind::ChannelAction => Route::ChannelAction(next(), next()),
        Kind::TombstoneNode => Route::TombstoneNode(next()),
        Kind::DeleteTopic => Route::DeleteTopic(next()),
        Kind::DeleteChannel => Route::DeleteChannel(next(), next()),
        Kind::Counter => Route::Counter,
        Kind::Graphite => Route::Graphite,
        Kind::ConfigGet => Route::ConfigGet(next()),
        Kind::ConfigPut => Route::ConfigPut(next()),
        Kind::History => Route::History,
        Kind::HistoryTopic => Route::HistoryTopic(next()),
        Kind::HistoryChannel => Route::HistoryChannel(next(), next()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_and_params() {
        let r = Router::new("/", false);
        assert_eq!(r.resolve("GET", "/"), Decision::Found(Route::Index));
        assert_eq!(
            r.resolve("GET", "/topics/a/b"),
            Decision::Found(Route::Index)
        );
        assert_eq!(
            r.resolve("GET", "/api/topics/a/b"),
            Decision::Found(Route::Channel("a".into(), "b".into()))
        );
        assert_eq!(
            r.resolve("DELETE", "/api/nodes/127.0.0.1%3A4151"),
            Decision::Found(Route::TombstoneNode("127.0.0.1:4151".into()))
        );
        assert_eq!(r.resolve("GET", "/render"), Decision::NotFound);
        assert_eq!(
            Router::new("/", true).resolve("GET", "/render"),
            Decision::Found(Route::Render)
        );
    }

    #[test]
    fn router_rules() {
        let r = Router::new("/", false);
        assert_eq!(
            r.resolve("GET", "/topics/"),
            Decision::Redirect("/topics".into())
        );
        assert_eq!(
            r.resolve("POST", "/api/topics/"),
            Decision::Redirect("/api/topics".into())
        );
        assert_eq!(
            r.resolve("GET", "//api//nodes"),
            Decision::Redirect("/api/nodes".into())
        );
        assert_eq!(
            r.resolve("PUT", "/api/topics"),
            Decision::MethodNotAllowed("GET, POST, OPTIONS".into())
        );
        assert_eq!(
            r.resolve("OPTIONS", "/api/topics/t"),
            Decision::Options("GET, POST, DELETE, OPTIONS".into())
        );
        assert_eq!(r.resolve("GET", "/nope"), Decision::NotFound);
        assert_eq!(r.resolve("HEAD", "/ping"), Decision::Found(Route::Ping));
    }

    #[test]
    fn base_path() {
        let r = Router::new("/admin", false);
        assert_eq!(r.resolve("GET", "/admin"), Decision::Found(Route::Index));
        assert_eq!(
            r.resolve("GET", "/admin/"),
            Decision::Redirect("/admin".into())
        );
        assert_eq!(
            r.resolve("GET", "/admin/api/topics"),
            Decision::Found(Route::Topics)
        );
        assert_eq!(r.resolve("GET", "/api/topics"), Decision::NotFound);
    }
}

//! Request routing with julienschmidt/httprouter v1.3.0's rules, as NSQ's
//! three daemons configure it (spec nsqd.md §7, nsqlookupd.md §3): a table
//! of (method, path, endpoint) and the decision for a request.
//!
//! Owns: the route table and the decision for a (method, decoded path)
//! pair — handle, redirect, `OPTIONS` answer, 405 or 404. Never: building
//! responses ([`crate::server`]) or what an endpoint does (the daemons).
//!
//! A path is a list of segments; a segment is static or `:name` (one
//! non-empty segment). The rules:
//! 1. Exact match in the method's routes → handle.
//! 2. Else, if that method has any route and the path isn't `/`: a path that
//!    matches after removing (or adding) one trailing slash redirects there;
//!    otherwise the path is cleaned (`//`, `.`, `..`) and matched with its
//!    static segments compared case-insensitively (trailing slash fixed
//!    too) and redirects there. The redirect is 301 for GET, 307 for every
//!    other method.
//! 3. Else `OPTIONS` on a path some method serves → 200 with `Allow`.
//! 4. Else a path another method serves → 405 with `Allow`.
//! 5. Else 404.
//!
//! `Allow` lists the other methods serving the path plus `OPTIONS`, sorted
//! and joined with `", "`; for `OPTIONS *` it lists every method.

use nsq_protocol::text::fold_eq;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Static(String),
    Param,
}

#[derive(Debug, Clone)]
struct Route<E> {
    method: &'static str,
    path: String,
    segments: Vec<Segment>,
    endpoint: E,
}

/// The routes of one server.
#[derive(Debug, Clone)]
pub struct Routes<E> {
    routes: Vec<Route<E>>,
}

/// The routing decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Routed<E> {
    Handle(E),
    /// Redirect to `path` (decoded; the caller escapes it and keeps the
    /// query string). `status` is 301 or 307.
    Redirect {
        status: u16,
        path: String,
    },
    /// 200 with this `Allow` header and no body.
    Options {
        allow: String,
    },
    /// 405 with this `Allow` header.
    MethodNotAllowed {
        allow: String,
    },
    NotFound,
}

fn split(path: &str) -> Vec<&str> {
    match path.strip_prefix('/') {
        Some("") | None if path.len() <= 1 => Vec::new(),
        Some(rest) => rest.split('/').collect(),
        None => path.split('/').collect(),
    }
}

impl<E: Copy> Default for Routes<E> {
    fn default() -> Self {
        Routes { routes: Vec::new() }
    }
}

impl<E: Copy> Routes<E> {
    pub fn new() -> Routes<E> {
        Routes::default()
    }

    /// Adds a route; `path` is absolute, `:name` segments are parameters.
    pub fn add(mut self, method: &'static str, path: impl Into<String>, endpoint: E) -> Self {
        let path = path.into();
        let segments = split(&path)
            .into_iter()
            .map(|s| match s.strip_prefix(':') {
                Some(_) => Segment::Param,
                None => Segment::Static(s.to_string()),
            })
            .collect();
        self.routes.push(Route {
            method,
            path,
            segments,
            endpoint,
        });
        self
    }

    /// Every route: method, path pattern, endpoint.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &str, E)> + '_ {
        self.routes
            .iter()
            .map(|r| (r.method, r.path.as_str(), r.endpoint))
    }

    /// Routes `method` + decoded `path`.
    pub fn route(&self, method: &str, path: &str) -> Routed<E> {
        if self.routes.iter().any(|r| r.method == method) {
            if let Some(r) = self.find(method, |r| matches(&r.segments, path)) {
                return Routed::Handle(r.endpoint);
            }
            if method != "CONNECT" && path != "/" {
                let status = if method == "GET" { 301 } else { 307 };
                if let Some(path) = self.trailing_slash_redirect(method, path) {
                    return Routed::Redirect { status, path };
                }
                if let Some(path) = self.fixed_path(method, &clean_path(path)) {
                    return Routed::Redirect { status, path };
                }
            }
        }
        let allow = self.allowed(path, method);
        match (method, allow.is_empty()) {
            (_, true) => Routed::NotFound,
            ("OPTIONS", false) => Routed::Options { allow },
            (_, false) => Routed::MethodNotAllowed { allow },
        }
    }

    fn find(&self, method: &str, pred: impl Fn(&Route<E>) -> bool) -> Option<&Route<E>> {
        self.routes.iter().find(|r| r.method == method && pred(r))
    }

    /// httprouter's "TSR": the path with one trailing slash removed or
    /// added is a route of this method.
    fn trailing_slash_redirect(&self, method: &str, path: &str) -> Option<String> {
        let other = match path.strip_suffix('/') {
            Some(stripped) if !stripped.is_empty() => stripped.to_string(),
            _ => format!("{path}/"),
        };
        self.find(method, |r| matches(&r.segments, &other))
            .map(|_| other)
    }

    /// httprouter's `findCaseInsensitivePath` with trailing-slash fixing:
    /// static segments take the route's case, parameters the request's.
    fn fixed_path(&self, method: &str, cleaned: &str) -> Option<String> {
        let candidates = [
            Some(cleaned.to_string()),
            cleaned
                .strip_suffix('/')
                .filter(|s| !s.is_empty())
                .map(str::to_string),
            Some(format!("{cleaned}/")),
        ];
        candidates.into_iter().flatten().find_map(|c| {
            self.routes
                .iter()
                .filter(|r| r.method == method)
                .find_map(|r| fold_match(&r.segments, &c))
        })
    }

    /// The `Allow` value for `path`, excluding `method` itself ("" if none).
    fn allowed(&self, path: &str, method: &str) -> String {
        let mut methods: Vec<&str> = if path == "*" {
            self.routes.iter().map(|r| r.method).collect()
        } else {
            self.routes
                .iter()
                .filter(|r| r.method != method && matches(&r.segments, path))
                .map(|r| r.method)
                .collect()
        };
        methods.retain(|m| *m != "OPTIONS");
        if methods.is_empty() {
            return String::new();
        }
        methods.push("OPTIONS");
        methods.sort_unstable();
        methods.dedup();
        methods.join(", ")
    }
}

fn matches(segments: &[Segment], path: &str) -> bool {
    let parts = split(path);
    parts.len() == segments.len()
        && segments.iter().zip(&parts).all(|(s, p)| match s {
            Segment::Static(s) => s == p,
            Segment::Param => !p.is_empty(),
        })
}

/// The route's canonical spelling of `path` if they match with static
/// segments compared case-insensitively.
fn fold_match(segments: &[Segment], path: &str) -> Option<String> {
    let parts = split(path);
    if parts.len() != segments.len() {
        return None;
    }
    let mut out = String::new();
    for (s, p) in segments.iter().zip(&parts) {
        out.push('/');
        match s {
            Segment::Static(s) if fold_eq(s, p) => out.push_str(s),
            Segment::Param if !p.is_empty() => out.push_str(p),
            _ => return None,
        }
    }
    if out.is_empty() {
        out.push('/');
    }
    Some(out)
}

/// httprouter's `CleanPath`: Go's `path.Clean` that keeps a trailing slash
/// and always starts with `/`.
pub fn clean_path(p: &str) -> String {
    if p.is_empty() {
        return "/".into();
    }
    let mut trailing = p.len() > 1 && p.ends_with('/');
    let segments: Vec<&str> = p.split('/').collect();
    let mut out: Vec<&str> = Vec::new();
    for (i, seg) in segments.iter().enumerate() {
        let last = i == segments.len() - 1;
        match *seg {
            "" => {}
            "." => trailing |= last,
            ".." => {
                out.pop();
            }
            s => out.push(s),
        }
    }
    let mut cleaned = String::with_capacity(p.len() + 1);
    for seg in &out {
        cleaned.push('/');
        cleaned.push_str(seg);
    }
    if cleaned.is_empty() {
        return "/".into();
    }
    if trailing {
        cleaned.push('/');
    }
    cleaned
}

#[cfg(test)]
mod tests {
    use super::*;

    /// nsqlookupd's table (static routes only).
    fn lookupd() -> Routes<&'static str> {
        Routes::new()
            .add("GET", "/ping", "ping")
            .add("GET", "/lookup", "lookup")
            .add("GET", "/nodes", "nodes")
            .add("GET", "/debug", "debug")
            .add("POST", "/topic/create", "topic_create")
            .add("POST", "/channel/delete", "channel_delete")
            .add("GET", "/debug/pprof", "pprof")
            .add("GET", "/debug/pprof/symbol", "symbol")
            .add("POST", "/debug/pprof/symbol", "symbol")
    }

    /// nsqadmin-like table with parameters, under a base path.
    fn admin() -> Routes<&'static str> {
        Routes::new()
            .add("GET", "/admin", "index")
            .add("GET", "/admin/api/topics", "topics")
            .add("POST", "/admin/api/topics", "create")
            .add("GET", "/admin/api/topics/:topic", "topic")
            .add("POST", "/admin/api/topics/:topic", "topic_action")
            .add("DELETE", "/admin/api/topics/:topic", "delete_topic")
            .add("GET", "/admin/api/topics/:topic/:channel", "channel")
            .add("GET", "/admin/config/:opt", "config")
            .add("PUT", "/admin/config/:opt", "config")
    }

    fn redirect<E>(status: u16, path: &str) -> Routed<E> {
        Routed::Redirect {
            status,
            path: path.into(),
        }
    }

    #[test]
    fn exact_routes() {
        let r = lookupd();
        assert_eq!(r.route("GET", "/ping"), Routed::Handle("ping"));
        assert_eq!(
            r.route("POST", "/debug/pprof/symbol"),
            Routed::Handle("symbol")
        );
        let a = admin();
        assert_eq!(a.route("GET", "/admin"), Routed::Handle("index"));
        assert_eq!(
            a.route("GET", "/admin/api/topics/a/b"),
            Routed::Handle("channel")
        );
        assert_eq!(a.route("PUT", "/admin/config/x"), Routed::Handle("config"));
        assert_eq!(a.route("GET", "/api/topics"), Routed::NotFound);
    }

    #[test]
    fn trailing_slash_and_fixed_path_redirects() {
        let r = lookupd();
        assert_eq!(r.route("GET", "/ping/"), redirect(301, "/ping"));
        assert_eq!(r.route("GET", "/PING"), redirect(301, "/ping"));
        assert_eq!(r.route("GET", "//ping"), redirect(301, "/ping"));
        assert_eq!(r.route("GET", "/Lookup/"), redirect(301, "/lookup"));
        assert_eq!(r.route("GET", "/debug/"), redirect(301, "/debug"));
        assert_eq!(
            r.route("GET", "/debug/pprof/"),
            redirect(301, "/debug/pprof")
        );
        assert_eq!(r.route("GET", "/x/../nodes"), redirect(301, "/nodes"));
        assert_eq!(
            r.route("POST", "/topic/create/"),
            redirect(307, "/topic/create")
        );
        assert_eq!(
            r.route("POST", "/Channel/Delete"),
            redirect(307, "/channel/delete")
        );
        let a = admin();
        assert_eq!(a.route("GET", "/admin/"), redirect(301, "/admin"));
        assert_eq!(
            a.route("POST", "/admin/api/topics/"),
            redirect(307, "/admin/api/topics")
        );
        assert_eq!(
            a.route("GET", "//admin//api/Topics/T/"),
            redirect(301, "/admin/api/topics/T")
        );
        assert_eq!(
            a.route("PUT", "/admin/CONFIG/Opt"),
            redirect(307, "/admin/config/Opt")
        );
    }

    #[test]
    fn method_not_allowed_and_options() {
        let allow = |s: &str| Routed::<&str>::MethodNotAllowed { allow: s.into() };
        let r = lookupd();
        assert_eq!(r.route("POST", "/ping"), allow("GET, OPTIONS"));
        assert_eq!(r.route("GET", "/topic/create"), allow("OPTIONS, POST"));
        assert_eq!(
            r.route("PUT", "/debug/pprof/symbol"),
            allow("GET, OPTIONS, POST")
        );
        assert_eq!(r.route("HEAD", "/lookup"), allow("GET, OPTIONS"));
        assert_eq!(
            r.route("OPTIONS", "/ping"),
            Routed::Options {
                allow: "GET, OPTIONS".into()
            }
        );
        assert_eq!(
            r.route("OPTIONS", "*"),
            Routed::Options {
                allow: "GET, OPTIONS, POST".into()
            }
        );
        let a = admin();
        assert_eq!(
            a.route("PUT", "/admin/api/topics"),
            allow("GET, OPTIONS, POST")
        );
        assert_eq!(
            a.route("OPTIONS", "/admin/api/topics/t"),
            Routed::Options {
                allow: "DELETE, GET, OPTIONS, POST".into()
            }
        );
        assert_eq!(a.route("HEAD", "/admin"), allow("GET, OPTIONS"));
    }

    #[test]
    fn not_found() {
        let r = lookupd();
        for (m, p) in [
            ("GET", "/"),
            ("GET", "/nope"),
            ("GET", "/delete_topic"),
            ("POST", "/create_topic"),
            ("POST", "/ping/"), // no redirect across methods
            ("HEAD", "/ping/"),
            ("OPTIONS", "/nope"),
            ("GET", "/topic"),
            ("POST", "/topic/"),
        ] {
            assert_eq!(r.route(m, p), Routed::NotFound, "{m} {p}");
        }
        let a = admin();
        assert_eq!(a.route("GET", "/admin/config/"), Routed::NotFound);
        assert_eq!(a.route("GET", "/admin/api/topics/a/b/c"), Routed::NotFound);
    }

    #[test]
    fn clean_path_like_httprouter() {
        for (input, want) in [
            ("", "/"),
            ("/", "/"),
            ("//ping", "/ping"),
            ("/ping/", "/ping/"),
            ("/ping/.", "/ping/"),
            ("/a/../ping", "/ping"),
            ("/a/b/..", "/a"),
            ("/a/b/../", "/a/"),
            ("/../ping", "/ping"),
            ("ping", "/ping"),
            ("/./", "/"),
        ] {
            assert_eq!(clean_path(input), want, "{input:?}");
        }
    }
}

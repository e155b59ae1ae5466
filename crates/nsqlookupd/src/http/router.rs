//! Request routing with julienschmidt/httprouter v1.3.0 semantics, as NSQ
//! configures it (spec nsqd.md §7, nsqlookupd.md §3).
//!
//! Owns: the route table and the decision for a (method, path) pair —
//! handle, redirect, `OPTIONS` answer, 405 or 404. Never: building responses.
//!
//! httprouter's rules, restricted to static routes (all of ours):
//! 1. Exact match in the method's tree → handle.
//! 2. Else, if that method has any route and the path isn't `/`: a path that
//!    matches after removing (or adding) one trailing slash redirects there;
//!    otherwise the path is cleaned (`//`, `.`, `..`) and matched
//!    case-insensitively (trailing slash fixed too) and redirects there.
//!    The redirect is 301 for GET, 307 for every other method.
//! 3. Else `OPTIONS` on a path some method serves → 200 with `Allow`.
//! 4. Else a path another method serves → 405 with `Allow`.
//! 5. Else 404.
//!
//! `Allow` lists the other methods serving the path plus `OPTIONS`, sorted
//! and joined with `", "`; for `OPTIONS *` it lists every method.

use nsq_protocol::text::fold_eq;

/// What a route runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Ping,
    Info,
    Debug,
    Lookup,
    Topics,
    Channels,
    Nodes,
    TopicCreate,
    TopicDelete,
    TopicTombstone,
    ChannelCreate,
    ChannelDelete,
    /// Prometheus text exposition (nsq-rs addition; Go nsqlookupd has none).
    Metrics,
    /// Go's `net/http/pprof`; the name is the profile (`""` for the index).
    Pprof(&'static str),
}

/// nsqlookupd's routes, in NSQ's registration order.
const ROUTES: &[(&str, &str, Endpoint)] = &[
    ("GET", "/ping", Endpoint::Ping),
    ("GET", "/info", Endpoint::Info),
    ("GET", "/debug", Endpoint::Debug),
    ("GET", "/lookup", Endpoint::Lookup),
    ("GET", "/topics", Endpoint::Topics),
    ("GET", "/channels", Endpoint::Channels),
    ("GET", "/nodes", Endpoint::Nodes),
    ("POST", "/topic/create", Endpoint::TopicCreate),
    ("POST", "/topic/delete", Endpoint::TopicDelete),
    ("POST", "/channel/create", Endpoint::ChannelCreate),
    ("POST", "/channel/delete", Endpoint::ChannelDelete),
    ("POST", "/topic/tombstone", Endpoint::TopicTombstone),
    ("GET", "/metrics", Endpoint::Metrics),
    ("GET", "/debug/pprof", Endpoint::Pprof("")),
    ("GET", "/debug/pprof/cmdline", Endpoint::Pprof("cmdline")),
    ("GET", "/debug/pprof/symbol", Endpoint::Pprof("symbol")),
    ("POST", "/debug/pprof/symbol", Endpoint::Pprof("symbol")),
    ("GET", "/debug/pprof/profile", Endpoint::Pprof("profile")),
    ("GET", "/debug/pprof/heap", Endpoint::Pprof("heap")),
    (
        "GET",
        "/debug/pprof/goroutine",
        Endpoint::Pprof("goroutine"),
    ),
    ("GET", "/debug/pprof/block", Endpoint::Pprof("block")),
    (
        "GET",
        "/debug/pprof/threadcreate",
        Endpoint::Pprof("threadcreate"),
    ),
];

/// The routing decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Routed {
    Handle(Endpoint),
    /// Redirect to `path` (a route path, already canonical; the caller keeps
    /// the query string). `status` is 301 or 307.
    Redirect {
        status: u16,
        path: &'static str,
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

/// Routes `method` + decoded `path`.
pub fn route(method: &str, path: &str) -> Routed {
    if ROUTES.iter().any(|(m, _, _)| *m == method) {
        if let Some(e) = exact(method, path) {
            return Routed::Handle(e);
        }
        if method != "CONNECT" && path != "/" {
            let status = if method == "GET" { 301 } else { 307 };
            if let Some(path) = trailing_slash_redirect(method, path) {
                return Routed::Redirect { status, path };
            }
            if let Some(path) = fixed_path(method, &clean_path(path)) {
                return Routed::Redirect { status, path };
            }
        }
    }
    if method == "OPTIONS" {
        let allow = allowed(path, method);
        if !allow.is_empty() {
            return Routed::Options { allow };
        }
    } else {
        let allow = allowed(path, method);
        if !allow.is_empty() {
            return Routed::MethodNotAllowed { allow };
        }
    }
    Routed::NotFound
}

fn routes_of(method: &str) -> impl Iterator<Item = (&'static str, Endpoint)> + '_ {
    ROUTES
        .iter()
        .filter(move |(m, _, _)| *m == method)
        .map(|(_, p, e)| (*p, *e))
}

fn exact(method: &str, path: &str) -> Option<Endpoint> {
    routes_of(method).find(|(p, _)| *p == path).map(|(_, e)| e)
}

fn find_route(method: &str, pred: impl Fn(&str) -> bool) -> Option<&'static str> {
    routes_of(method).map(|(p, _)| p).find(|p| pred(p))
}

/// httprouter's "TSR": the path with one trailing slash removed or added is
/// a route of this method.
fn trailing_slash_redirect(method: &str, path: &str) -> Option<&'static str> {
    match path.strip_suffix('/') {
        Some(stripped) if !stripped.is_empty() => find_route(method, |p| p == stripped),
        _ => find_route(method, |p| p.strip_suffix('/') == Some(path)),
    }
}

/// httprouter's `findCaseInsensitivePath` with trailing-slash fixing.
fn fixed_path(method: &str, cleaned: &str) -> Option<&'static str> {
    find_route(method, |p| fold_eq(p, cleaned))
        .or_else(|| {
            let stripped = cleaned.strip_suffix('/').filter(|s| !s.is_empty())?;
            find_route(method, |p| fold_eq(p, stripped))
        })
        .or_else(|| {
            find_route(method, |p| {
                p.strip_suffix('/').is_some_and(|s| fold_eq(s, cleaned))
            })
        })
}

/// The `Allow` value for `path`, excluding `method` itself ("" if none).
fn allowed(path: &str, method: &str) -> String {
    let mut methods: Vec<&str> = if path == "*" {
        ROUTES.iter().map(|(m, _, _)| *m).collect()
    } else {
        ROUTES
            .iter()
            .filter(|(m, p, _)| *m != method && *p == path)
            .map(|(m, _, _)| *m)
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

    fn redirect(status: u16, path: &'static str) -> Routed {
        Routed::Redirect { status, path }
    }

    #[test]
    fn exact_routes() {
        assert_eq!(route("GET", "/ping"), Routed::Handle(Endpoint::Ping));
        assert_eq!(
            route("POST", "/topic/tombstone"),
            Routed::Handle(Endpoint::TopicTombstone)
        );
        assert_eq!(
            route("POST", "/debug/pprof/symbol"),
            Routed::Handle(Endpoint::Pprof("symbol"))
        );
    }

    #[test]
    fn trailing_slash_and_fixed_path_redirects() {
        assert_eq!(route("GET", "/ping/"), redirect(301, "/ping"));
        assert_eq!(route("GET", "/PING"), redirect(301, "/ping"));
        assert_eq!(route("GET", "//ping"), redirect(301, "/ping"));
        assert_eq!(route("GET", "/Lookup/"), redirect(301, "/lookup"));
        assert_eq!(route("GET", "/debug/"), redirect(301, "/debug"));
        assert_eq!(route("GET", "/debug/pprof/"), redirect(301, "/debug/pprof"));
        assert_eq!(route("GET", "/x/../nodes"), redirect(301, "/nodes"));
        assert_eq!(
            route("POST", "/topic/create/"),
            redirect(307, "/topic/create")
        );
        assert_eq!(
            route("POST", "/Channel/Delete"),
            redirect(307, "/channel/delete")
        );
    }

    #[test]
    fn method_not_allowed_and_options() {
        let allow = |s: &str| Routed::MethodNotAllowed { allow: s.into() };
        assert_eq!(route("POST", "/ping"), allow("GET, OPTIONS"));
        assert_eq!(route("GET", "/topic/create"), allow("OPTIONS, POST"));
        assert_eq!(
            route("PUT", "/debug/pprof/symbol"),
            allow("GET, OPTIONS, POST")
        );
        assert_eq!(route("HEAD", "/lookup"), allow("GET, OPTIONS"));
        assert_eq!(
            route("OPTIONS", "/ping"),
            Routed::Options {
                allow: "GET, OPTIONS".into()
            }
        );
        assert_eq!(
            route("OPTIONS", "*"),
            Routed::Options {
                allow: "GET, OPTIONS, POST".into()
            }
        );
    }

    #[test]
    fn not_found() {
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
            assert_eq!(route(m, p), Routed::NotFound, "{m} {p}");
        }
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

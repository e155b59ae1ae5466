//! nsqadmin's route table: NSQ's routes under `--base-path` (the graphite
//! proxy only with `--proxy-graphite`), decided by `nsq_http`'s router with
//! httprouter's rules. Pure: no handlers here.

use nsq_http::router::Routes;

use crate::options::join_path;

/// What a route runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
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
    Config,
    History,
    HistoryTopic,
    HistoryChannel,
    Replication,
    ReplicationAction,
}

const TABLE: &[(&str, &str, Endpoint)] = &[
    ("GET", "/", Endpoint::Index),
    ("GET", "/ping", Endpoint::Ping),
    ("GET", "/topics", Endpoint::Index),
    ("GET", "/topics/:topic", Endpoint::Index),
    ("GET", "/topics/:topic/:channel", Endpoint::Index),
    ("GET", "/nodes", Endpoint::Index),
    ("GET", "/nodes/:node", Endpoint::Index),
    ("GET", "/counter", Endpoint::Index),
    ("GET", "/lookup", Endpoint::Index),
    ("GET", "/replication", Endpoint::Index),
    ("GET", "/static/:asset", Endpoint::Static),
    ("GET", "/fonts/:asset", Endpoint::Static),
    ("GET", "/render", Endpoint::Render),
    ("GET", "/api/topics", Endpoint::Topics),
    ("GET", "/api/topics/:topic", Endpoint::Topic),
    ("GET", "/api/topics/:topic/:channel", Endpoint::Channel),
    ("GET", "/api/nodes", Endpoint::Nodes),
    ("GET", "/api/nodes/:node", Endpoint::Node),
    ("POST", "/api/topics", Endpoint::CreateTopicChannel),
    ("POST", "/api/topics/:topic", Endpoint::TopicAction),
    (
        "POST",
        "/api/topics/:topic/:channel",
        Endpoint::ChannelAction,
    ),
    ("DELETE", "/api/nodes/:node", Endpoint::TombstoneNode),
    ("DELETE", "/api/topics/:topic", Endpoint::DeleteTopic),
    (
        "DELETE",
        "/api/topics/:topic/:channel",
        Endpoint::DeleteChannel,
    ),
    ("GET", "/api/counter", Endpoint::Counter),
    // nsq-rs: the replication cluster's members, added and removed
    ("GET", "/api/replication", Endpoint::Replication),
    ("POST", "/api/replication", Endpoint::ReplicationAction),
    ("GET", "/api/graphite", Endpoint::Graphite),
    ("GET", "/config/:opt", Endpoint::Config),
    ("PUT", "/config/:opt", Endpoint::Config),
    ("GET", "/api/history", Endpoint::History),
    ("GET", "/api/history/topics/:topic", Endpoint::HistoryTopic),
    (
        "GET",
        "/api/history/topics/:topic/:channel",
        Endpoint::HistoryChannel,
    ),
];

/// The routes of one server (base path and optional graphite proxy applied).
pub fn routes(base_path: &str, proxy_graphite: bool) -> Routes<Endpoint> {
    TABLE
        .iter()
        .filter(|(_, _, e)| proxy_graphite || *e != Endpoint::Render)
        .fold(Routes::new(), |r, (m, p, e)| {
            r.add(m, join_path(base_path, p), *e)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nsq_http::router::Routed;

    #[test]
    fn routes_under_base_path() {
        let r = routes("/", false);
        assert_eq!(r.route("GET", "/"), Routed::Handle(Endpoint::Index));
        assert_eq!(
            r.route("GET", "/topics/a/b"),
            Routed::Handle(Endpoint::Index)
        );
        assert_eq!(
            r.route("DELETE", "/api/nodes/127.0.0.1:4151"),
            Routed::Handle(Endpoint::TombstoneNode)
        );
        assert_eq!(r.route("GET", "/render"), Routed::NotFound);
        assert_eq!(
            routes("/", true).route("GET", "/render"),
            Routed::Handle(Endpoint::Render)
        );
        let r = routes("/admin", false);
        assert_eq!(r.route("GET", "/admin"), Routed::Handle(Endpoint::Index));
        assert_eq!(
            r.route("GET", "/admin/"),
            Routed::Redirect {
                status: 301,
                path: "/admin".into()
            }
        );
        assert_eq!(
            r.route("GET", "/admin/api/topics"),
            Routed::Handle(Endpoint::Topics)
        );
        assert_eq!(r.route("GET", "/api/topics"), Routed::NotFound);
    }
}

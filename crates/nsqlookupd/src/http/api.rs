//! The HTTP API's endpoint logic (spec nsqlookupd.md §3): parameters in,
//! [`Reply`] out, with NSQ's exact JSON, messages and status codes.
//!
//! Owns: parameter checks, calls into the [`RegistrationDb`], JSON bodies in
//! NSQ's key order. Never: sockets, headers or the clock (`now` and the
//! [`WallClock`] come from the server shell, which also turns a [`Reply`] into
//! a response with NSQ's "V1" or "PlainText" header conventions).

use std::time::Instant;

use nsq_protocol::gofmt::to_json;
use nsq_protocol::lookupd::{Channels, Lookup, Node, Nodes, Topics};
use nsq_protocol::names::{is_valid_channel_name, is_valid_topic_name};
use serde::Serialize;
use tracing::info;

use nsq_http::guard::Grant;
use nsq_http::url::Params;

use super::Endpoint;
use crate::context::WallClock;
use crate::registration::RegistrationDb;

/// Go's zero `time.Time` as Unix nanoseconds (an overflowed value): what
/// `/debug` shows as `tombstoned_at` for a producer never tombstoned.
pub const GO_ZERO_TIME_UNIX_NANOS: i64 = -6795364578871345152;

/// An endpoint's answer, before headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// "PlainText" convention (`/ping`): the text, no `X-NSQ-Content-Type`.
    Plain(&'static str),
    /// "V1" success without a body.
    Empty,
    /// "V1" success with a JSON body.
    Json(Vec<u8>),
    /// "V1" error: `{"message":"<message>"}` with `status`.
    Error { status: u16, message: &'static str },
    /// Anything outside NSQ's conventions (the pprof stand-ins).
    Raw {
        status: u16,
        content_type: &'static str,
        body: Vec<u8>,
    },
}

impl Reply {
    pub fn status(&self) -> u16 {
        match self {
            Reply::Plain(_) | Reply::Empty | Reply::Json(_) => 200,
            Reply::Error { status, .. } | Reply::Raw { status, .. } => *status,
        }
    }
}

fn err(status: u16, message: &'static str) -> Reply {
    Reply::Error { status, message }
}

fn json<T: Serialize>(v: &T) -> Reply {
    Reply::Json(to_json(v))
}

/// What a request's secret may see (`--http-auth-required`): everything
/// without a [`Grant`].
#[derive(Clone, Copy)]
pub struct Sees<'a>(pub Option<&'a Grant>);

impl Sees<'_> {
    fn topic(&self, t: &str) -> bool {
        self.0.is_none_or(|g| g.sees_topic(t))
    }
    fn channel(&self, t: &str, c: &str) -> bool {
        self.0.is_none_or(|g| g.sees_channel(t, c))
    }
}

/// Runs `endpoint`. `raw_query` is the URL's query string, if any; listings
/// keep what `sees` allows.
pub fn handle(
    endpoint: Endpoint,
    raw_query: Option<&str>,
    db: &mut RegistrationDb,
    now: Instant,
    clock: &WallClock,
    sees: Sees<'_>,
) -> Reply {
    let result = match endpoint {
        Endpoint::Ping => Ok(Reply::Plain("OK")),
        Endpoint::Info => {
            #[derive(Serialize)]
            struct Info {
                version: &'static str,
            }
            Ok(json(&Info {
                version: crate::VERSION,
            }))
        }
        Endpoint::Debug => Ok(debug(db, clock)),
        Endpoint::Topics => Ok(json(&Topics {
            topics: db.topics().into_iter().filter(|t| sees.topic(t)).collect(),
        })),
        Endpoint::Nodes => Ok(nodes(db, now, sees)),
        Endpoint::Lookup => lookup(raw_query, db, now, sees),
        Endpoint::Channels => channels(raw_query, db, sees),
        Endpoint::TopicCreate => topic_create(raw_query, db),
        Endpoint::TopicDelete => topic_delete(raw_query, db),
        Endpoint::TopicTombstone => topic_tombstone(raw_query, db, now),
        Endpoint::ChannelCreate => channel_create(raw_query, db),
        Endpoint::ChannelDelete => channel_delete(raw_query, db),
        Endpoint::Pprof(name) => Ok(pprof(name)),
        Endpoint::Metrics => Ok(metrics(db, now, sees)),
    };
    result.unwrap_or_else(|e| e)
}

/// Parses the query string; a malformed one is 400 `INVALID_REQUEST`.
fn params(raw_query: Option<&str>) -> Result<Params, Reply> {
    Params::parse(raw_query.unwrap_or_default()).map_err(|_| err(400, "INVALID_REQUEST"))
}

fn required<'a>(p: &'a Params, key: &str, missing: &'static str) -> Result<&'a str, Reply> {
    p.get(key).ok_or_else(|| err(400, missing))
}

/// NSQ's `GetTopicChannelArgs`: both present and valid, checked in order.
fn topic_channel(p: &Params) -> Result<(&str, &str), Reply> {
    let topic = required(p, "topic", "MISSING_ARG_TOPIC")?;
    if !is_valid_topic_name(topic) {
        return Err(err(400, "INVALID_ARG_TOPIC"));
    }
    let channel = required(p, "channel", "MISSING_ARG_CHANNEL")?;
    if !is_valid_channel_name(channel) {
        return Err(err(400, "INVALID_ARG_CHANNEL"));
    }
    Ok((topic, channel))
}

fn lookup(
    q: Option<&str>,
    db: &RegistrationDb,
    now: Instant,
    sees: Sees<'_>,
) -> Result<Reply, Reply> {
    let p = params(q)?;
    let topic = required(&p, "topic", "MISSING_ARG_TOPIC")?;
    let found = db
        .lookup(topic, now)
        .ok_or_else(|| err(404, "TOPIC_NOT_FOUND"))?;
    Ok(json(&Lookup {
        channels: found
            .channels
            .into_iter()
            .filter(|c| sees.channel(topic, c))
            .collect(),
        producers: found.producers,
    }))
}

fn channels(q: Option<&str>, db: &RegistrationDb, sees: Sees<'_>) -> Result<Reply, Reply> {
    let p = params(q)?;
    let topic = required(&p, "topic", "MISSING_ARG_TOPIC")?;
    Ok(json(&Channels {
        channels: db
            .channels(topic)
            .into_iter()
            .filter(|c| sees.channel(topic, c))
            .collect(),
    }))
}

fn nodes(db: &RegistrationDb, now: Instant, sees: Sees<'_>) -> Reply {
    let producers = db
        .nodes(now)
        .into_iter()
        .map(|n| {
            // topics and tombstones are parallel lists: filter them together
            let (tombstones, topics) = n
                .tombstones
                .into_iter()
                .zip(n.topics)
                .filter(|(_, t)| sees.topic(t))
                .unzip();
            Node {
                producer: n.info,
                tombstones,
                topics,
            }
        })
        .collect();
    json(&Nodes { producers })
}

/// Prometheus text format 0.0.4: what `/nodes`, `/topics` and `/lookup`
/// say, as numbers a scraper can alert on (a topic with no live producer).
fn metrics(db: &RegistrationDb, now: Instant, sees: Sees<'_>) -> Reply {
    use std::fmt::Write;
    let nodes = db.nodes(now);
    let topics: Vec<String> = db.topics().into_iter().filter(|t| sees.topic(t)).collect();
    let mut out = String::new();
    let mut gauge = |name: &str, help: &str, rows: &[(String, usize)]| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for (labels, v) in rows {
            let _ = writeln!(out, "{name}{labels} {v}");
        }
    };
    let label = |t: &str| {
        format!(
            "{{topic=\"{}\"}}",
            t.replace('\\', "\\\\").replace('"', "\\\"")
        )
    };
    gauge(
        "nsqlookupd_up",
        "Always 1 while nsqlookupd answers.",
        &[(String::new(), 1)],
    );
    gauge(
        "nsqlookupd_producers",
        "Active nsqd producers (as /nodes lists them).",
        &[(String::new(), nodes.len())],
    );
    gauge(
        "nsqlookupd_topics",
        "Topics known (as /topics lists them).",
        &[(String::new(), topics.len())],
    );
    let per_topic: Vec<(String, usize, usize, usize)> = topics
        .iter()
        .map(|t| {
            let producers = db.lookup(t, now).map_or(0, |l| l.producers.len());
            let tombstoned = nodes
                .iter()
                .filter(|n| {
                    n.topics
                        .iter()
                        .zip(&n.tombstones)
                        .any(|(nt, tomb)| nt == t && *tomb)
                })
                .count();
            (label(t), producers, db.channels(t).len(), tombstoned)
        })
        .collect();
    gauge(
        "nsqlookupd_topic_producers",
        "Active, non-tombstoned producers of a topic (as /lookup returns them).",
        &per_topic
            .iter()
            .map(|r| (r.0.clone(), r.1))
            .collect::<Vec<_>>(),
    );
    gauge(
        "nsqlookupd_topic_channels",
        "Channels registered for a topic.",
        &per_topic
            .iter()
            .map(|r| (r.0.clone(), r.2))
            .collect::<Vec<_>>(),
    );
    gauge(
        "nsqlookupd_topic_tombstoned_producers",
        "Producers of a topic currently tombstoned.",
        &per_topic
            .iter()
            .map(|r| (r.0.clone(), r.3))
            .collect::<Vec<_>>(),
    );
    Reply::Raw {
        status: 200,
        content_type: "text/plain; version=0.0.4; charset=utf-8",
        body: out.into_bytes(),
    }
}

fn debug(db: &RegistrationDb, clock: &WallClock) -> Reply {
    /// One producer of `/debug` (Go marshals a map here: keys sorted).
    #[derive(Serialize)]
    struct DebugProducer<'a> {
        broadcast_address: &'a str,
        hostname: &'a str,
        http_port: i64,
        id: &'a str,
        last_update: i64,
        tcp_port: i64,
        tombstoned: bool,
        tombstoned_at: i64,
        topology_region: &'a str,
        topology_zone: &'a str,
        version: &'a str,
    }
    let dump = db.dump();
    let out: std::collections::BTreeMap<&String, Vec<DebugProducer<'_>>> = dump
        .iter()
        .map(|(key, producers)| {
            let list = producers
                .iter()
                .map(|p| DebugProducer {
                    broadcast_address: &p.info.broadcast_address,
                    hostname: &p.info.hostname,
                    http_port: p.info.http_port,
                    id: &p.info.remote_address,
                    last_update: clock.unix_nanos(p.last_update),
                    tcp_port: p.info.tcp_port,
                    tombstoned: p.tombstoned,
                    tombstoned_at: p
                        .tombstoned_at
                        .map_or(GO_ZERO_TIME_UNIX_NANOS, |t| clock.unix_nanos(t)),
                    topology_region: &p.info.topology_region,
                    topology_zone: &p.info.topology_zone,
                    version: &p.info.version,
                })
                .collect();
            (key, list)
        })
        .collect();
    json(&out)
}

fn topic_create(q: Option<&str>, db: &mut RegistrationDb) -> Result<Reply, Reply> {
    let p = params(q)?;
    let topic = required(&p, "topic", "MISSING_ARG_TOPIC")?;
    if !is_valid_topic_name(topic) {
        return Err(err(400, "INVALID_ARG_TOPIC"));
    }
    info!(topic, "DB: adding topic");
    db.create_topic(topic);
    Ok(Reply::Empty)
}

fn topic_delete(q: Option<&str>, db: &mut RegistrationDb) -> Result<Reply, Reply> {
    let p = params(q)?;
    let topic = required(&p, "topic", "MISSING_ARG_TOPIC")?;
    for r in db.delete_topic(topic) {
        info!(registration = %r, "DB: removing registration");
    }
    Ok(Reply::Empty)
}

fn topic_tombstone(q: Option<&str>, db: &mut RegistrationDb, now: Instant) -> Result<Reply, Reply> {
    let p = params(q)?;
    let topic = required(&p, "topic", "MISSING_ARG_TOPIC")?;
    let node = required(&p, "node", "MISSING_ARG_NODE")?;
    info!(topic, node, "DB: setting tombstone for producer");
    db.tombstone(topic, node, now);
    Ok(Reply::Empty)
}

fn channel_create(q: Option<&str>, db: &mut RegistrationDb) -> Result<Reply, Reply> {
    let p = params(q)?;
    let (topic, channel) = topic_channel(&p)?;
    info!(topic, channel, "DB: adding channel");
    db.create_channel(topic, channel);
    Ok(Reply::Empty)
}

fn channel_delete(q: Option<&str>, db: &mut RegistrationDb) -> Result<Reply, Reply> {
    let p = params(q)?;
    let (topic, channel) = topic_channel(&p)?;
    if !db.delete_channel(topic, channel) {
        return Err(err(404, "CHANNEL_NOT_FOUND"));
    }
    info!(topic, channel, "DB: removing channel");
    Ok(Reply::Empty)
}

/// Stand-ins for Go's `net/http/pprof` (implementation-defined per the
/// spec): the index and `cmdline` answer like Go's; profiles are not
/// available in a Rust process.
fn pprof(name: &str) -> Reply {
    const TEXT: &str = "text/plain; charset=utf-8";
    match name {
        "" => Reply::Raw {
            status: 200,
            content_type: "text/html; charset=utf-8",
            body: b"<html><head><title>/debug/pprof/</title></head><body>/debug/pprof/<br>\
<p>Profiles are not available in nsq-rs nsqlookupd.</p></body></html>\n"
                .to_vec(),
        },
        "cmdline" => {
            let args: Vec<String> = std::env::args_os()
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            Reply::Raw {
                status: 200,
                content_type: TEXT,
                body: args.join("\0").into_bytes(),
            }
        }
        "symbol" => Reply::Raw {
            status: 200,
            content_type: TEXT,
            body: b"num_symbols: 0\n".to_vec(),
        },
        _ => Reply::Raw {
            status: 501,
            content_type: TEXT,
            body: format!("profile {name} is not available in nsq-rs\n").into_bytes(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registration::PeerInfo;
    use std::time::Duration;

    fn setup() -> (RegistrationDb, Instant, WallClock) {
        (
            RegistrationDb::new(Duration::from_secs(300), Duration::from_secs(45)),
            Instant::now(),
            WallClock::now(),
        )
    }

    fn call(
        e: Endpoint,
        q: &str,
        db: &mut RegistrationDb,
        now: Instant,
        clock: &WallClock,
    ) -> (u16, String) {
        let r = handle(e, Some(q), db, now, clock, Sees(None));
        let body = match &r {
            Reply::Plain(s) => s.as_bytes().to_vec(),
            Reply::Empty => Vec::new(),
            Reply::Json(b) | Reply::Raw { body: b, .. } => b.clone(),
            Reply::Error { message, .. } => format!(r#"{{"message":"{message}"}}"#).into_bytes(),
        };
        (r.status(), String::from_utf8(body).unwrap())
    }

    fn peer() -> PeerInfo {
        PeerInfo {
            remote_address: "127.0.0.1:52662".into(),
            hostname: "vm".into(),
            broadcast_address: "127.0.0.1".into(),
            tcp_port: 24150,
            http_port: 24151,
            version: "1.3.0".into(),
            ..Default::default()
        }
    }

    #[test]
    fn empty_state() {
        let (mut db, now, c) = setup();
        let db = &mut db;
        assert_eq!(
            call(Endpoint::Topics, "", db, now, &c),
            (200, r#"{"topics":[]}"#.into())
        );
        assert_eq!(
            call(Endpoint::Channels, "topic=x", db, now, &c),
            (200, r#"{"channels":[]}"#.into())
        );
        assert_eq!(
            call(Endpoint::Nodes, "", db, now, &c),
            (200, r#"{"producers":[]}"#.into())
        );
        assert_eq!(call(Endpoint::Debug, "", db, now, &c), (200, "{}".into()));
        assert_eq!(
            call(Endpoint::Info, "", db, now, &c),
            (200, r#"{"version":"1.3.0"}"#.into())
        );
        assert_eq!(call(Endpoint::Ping, "", db, now, &c), (200, "OK".into()));
    }

    #[test]
    fn lookup_matches_sample_shape() {
        let (mut db, now, c) = setup();
        db.identify(peer(), now);
        db.register("127.0.0.1:52662", "sample", Some("c1"));
        let (status, body) = call(Endpoint::Lookup, "topic=sample", &mut db, now, &c);
        assert_eq!(status, 200);
        assert_eq!(
            body,
            r#"{"channels":["c1"],"producers":[{"remote_address":"127.0.0.1:52662","hostname":"vm","broadcast_address":"127.0.0.1","tcp_port":24150,"http_port":24151,"version":"1.3.0","topology_zone":"","topology_region":""}]}"#
        );
        let (_, body) = call(Endpoint::Nodes, "", &mut db, now, &c);
        assert_eq!(
            body,
            r#"{"producers":[{"remote_address":"127.0.0.1:52662","hostname":"vm","broadcast_address":"127.0.0.1","tcp_port":24150,"http_port":24151,"version":"1.3.0","topology_zone":"","topology_region":"","tombstones":[false],"topics":["sample"]}]}"#
        );
    }

    #[test]
    fn debug_dump_shape() {
        let (mut db, now, c) = setup();
        db.identify(peer(), now);
        let (_, body) = call(Endpoint::Debug, "", &mut db, now, &c);
        let want = format!(
            r#"{{"client::":[{{"broadcast_address":"127.0.0.1","hostname":"vm","http_port":24151,"id":"127.0.0.1:52662","last_update":{},"tcp_port":24150,"tombstoned":false,"tombstoned_at":-6795364578871345152,"topology_region":"","topology_zone":"","version":"1.3.0"}}]}}"#,
            c.unix_nanos(now)
        );
        assert_eq!(body, want);
    }

    #[test]
    fn errors() {
        let (mut db, now, c) = setup();
        let db = &mut db;
        let e = |s: u16, m: &str| (s, format!(r#"{{"message":"{m}"}}"#));
        assert_eq!(
            call(Endpoint::Lookup, "", db, now, &c),
            e(400, "MISSING_ARG_TOPIC")
        );
        assert_eq!(
            call(Endpoint::Lookup, "topic=none", db, now, &c),
            e(404, "TOPIC_NOT_FOUND")
        );
        assert_eq!(
            call(Endpoint::Lookup, "topic=%zz", db, now, &c),
            e(400, "INVALID_REQUEST")
        );
        assert_eq!(
            call(Endpoint::Channels, "", db, now, &c),
            e(400, "MISSING_ARG_TOPIC")
        );
        assert_eq!(
            call(Endpoint::TopicCreate, "topic=bad!", db, now, &c),
            e(400, "INVALID_ARG_TOPIC")
        );
        assert_eq!(
            call(Endpoint::TopicCreate, "", db, now, &c),
            e(400, "MISSING_ARG_TOPIC")
        );
        assert_eq!(
            call(Endpoint::TopicDelete, "", db, now, &c),
            e(400, "MISSING_ARG_TOPIC")
        );
        assert_eq!(
            call(Endpoint::TopicTombstone, "topic=t", db, now, &c),
            e(400, "MISSING_ARG_NODE")
        );
        assert_eq!(
            call(Endpoint::TopicTombstone, "node=n", db, now, &c),
            e(400, "MISSING_ARG_TOPIC")
        );
        assert_eq!(
            call(Endpoint::ChannelCreate, "channel=c", db, now, &c),
            e(400, "MISSING_ARG_TOPIC")
        );
        assert_eq!(
            call(Endpoint::ChannelCreate, "topic=t", db, now, &c),
            e(400, "MISSING_ARG_CHANNEL")
        );
        assert_eq!(
            call(Endpoint::ChannelCreate, "topic=t&channel=c!", db, now, &c),
            e(400, "INVALID_ARG_CHANNEL")
        );
        assert_eq!(
            call(Endpoint::ChannelDelete, "topic=t&channel=none", db, now, &c),
            e(404, "CHANNEL_NOT_FOUND")
        );
        assert_eq!(
            call(Endpoint::ChannelDelete, "topic=t;", db, now, &c),
            e(400, "INVALID_REQUEST")
        );
        // Endpoints without parameters ignore a malformed query, like NSQ.
        assert_eq!(call(Endpoint::Topics, "%zz", db, now, &c).0, 200);
    }

    #[test]
    fn mutations() {
        let (mut db, now, c) = setup();
        let db = &mut db;
        assert_eq!(
            call(Endpoint::TopicCreate, "topic=t", db, now, &c),
            (200, String::new())
        );
        assert_eq!(
            call(Endpoint::Lookup, "topic=t", db, now, &c),
            (200, r#"{"channels":[],"producers":[]}"#.into())
        );
        assert_eq!(
            call(Endpoint::ChannelCreate, "topic=u&channel=c", db, now, &c).0,
            200
        );
        assert_eq!(
            call(Endpoint::Topics, "", db, now, &c).1,
            r#"{"topics":["t","u"]}"#
        );
        assert_eq!(
            call(Endpoint::ChannelDelete, "topic=u&channel=c", db, now, &c).0,
            200
        );
        assert_eq!(
            call(Endpoint::Channels, "topic=u", db, now, &c).1,
            r#"{"channels":[]}"#
        );
        assert_eq!(call(Endpoint::TopicDelete, "topic=u", db, now, &c).0, 200);
        assert_eq!(
            call(Endpoint::TopicDelete, "topic=never", db, now, &c).0,
            200
        );
        assert_eq!(
            call(Endpoint::TopicTombstone, "topic=t&node=x:1", db, now, &c).0,
            200
        );
        assert_eq!(
            call(Endpoint::Topics, "", db, now, &c).1,
            r#"{"topics":["t"]}"#
        );
    }
}

//! The admin actions of `/api` (create, delete, pause/unpause/empty,
//! tombstone; nsq-rs: config, replay, replication members): the admin check (`--admin-user` + `--acl-http-header`), the
//! JSON body as Go's decoder reads it, the upstream calls (see `cluster`),
//! and the notification each action emits.

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use super::{v1_json, warning, ApiErr, ApiResult, Req};
use crate::cluster::ClusterError;
use crate::notify::AdminAction;
use crate::shared::Shared;
use nsq_http::url::query_escape;
use nsq_protocol::names::{is_valid_channel_name, is_valid_topic_name};

#[derive(Serialize)]
struct Message {
    message: String,
}

fn done(errs: Vec<String>) -> ApiResult {
    let messages = if errs.is_empty() {
        Vec::new()
    } else {
        let msg = errs.join("\n");
        tracing::warn!("{msg}");
        vec![msg]
    };
    Ok(v1_json(&Message {
        message: warning(&messages),
    }))
}

fn upstream(e: ClusterError) -> ApiErr {
    tracing::error!("{e}");
    ApiErr::new(502, format!("UPSTREAM_ERROR: {e}"))
}

/// Whether the request may perform admin actions.
pub fn is_admin(s: &Shared, req: &Req) -> bool {
    let opts = s.options();
    if opts.admin_users.is_empty() {
        return true;
    }
    let user = req.header(&opts.acl_http_header);
    opts.admin_users.iter().any(|u| u == user)
}

fn require_admin(s: &Shared, req: &Req) -> Result<(), ApiErr> {
    if is_admin(s, req) {
        Ok(())
    } else {
        Err(ApiErr::new(403, "FORBIDDEN"))
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Reads the first JSON value of `body` into string `fields` as Go's
/// `json.Decoder` fills a struct of strings: keys matched exactly, else
/// case-insensitively; missing or `null` → `""`; unknown keys ignored;
/// anything after the first value ignored. Errors carry the decoder's wording
/// where it is stable (`EOF`, `unexpected EOF`, type mismatches).
pub fn decode_fields(body: &[u8], fields: &[&str]) -> Result<Vec<String>, String> {
    let first = serde_json::Deserializer::from_slice(body)
        .into_iter::<Value>()
        .next();
    let v = match first {
        None => return Err("EOF".into()),
        Some(Err(e)) if e.is_eof() => return Err("unexpected EOF".into()),
        Some(Err(e)) => return Err(e.to_string()),
        Some(Ok(v)) => v,
    };
    let obj = match v {
        Value::Null => return Ok(vec![String::new(); fields.len()]),
        Value::Object(o) => o,
        other => {
            return Err(format!(
                "json: cannot unmarshal {} into Go value of type struct",
                json_kind(&other)
            ))
        }
    };
    let mut out = Vec::with_capacity(fields.len());
    for f in fields {
        let v = obj.get(*f).or_else(|| {
            obj.iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(f))
                .map(|(_, v)| v)
        });
        match v {
            None | Some(Value::Null) => out.push(String::new()),
            Some(Value::String(s)) => out.push(s.clone()),
            Some(other) => {
                return Err(format!(
                    "json: cannot unmarshal {} into Go struct field .{f} of type string",
                    json_kind(other)
                ))
            }
        }
    }
    Ok(out)
}

/// Queues the notification for an action (when an endpoint is configured).
fn notify(s: &Shared, req: &Req, action: &str, topic: &str, channel: &str, node: &str) {
    if s.options().notification_http_endpoint.is_empty() {
        return;
    }
    let scheme = if req.header("x-scheme") == "https" {
        "https"
    } else {
        "http"
    };
    let mut url = format!("{scheme}://{}{}", req.header("host"), req.path);
    if !req.query.is_empty() {
        url.push('?');
        url.push_str(&req.query);
    }
    s.notifier.send(AdminAction {
        action: action.into(),
        topic: topic.into(),
        channel: channel.into(),
        node: node.into(),
        timestamp: super::api::now_secs(),
        user: basic_auth_user(req.header("authorization")),
        remote_ip: req.remote.to_string(),
        user_agent: req.header("user-agent").into(),
        url,
        via: s.hostname.clone(),
    });
}

/// The user name of an `Authorization: Basic …` header (`""` if none).
fn basic_auth_user(h: &str) -> String {
    let Some(b64) = h.strip_prefix("Basic ") else {
        return String::new();
    };
    let Some(raw) = nsq_http::url::base64_decode(b64) else {
        return String::new();
    };
    let s = String::from_utf8_lossy(&raw);
    s.split_once(':')
        .map(|(u, _)| u.to_string())
        .unwrap_or_default()
}

pub async fn create_topic_channel(s: &Arc<Shared>, req: &Req) -> ApiResult {
    require_admin(s, req)?;
    let f = decode_fields(&req.body, &["topic", "channel"]).map_err(|e| ApiErr::new(400, e))?;
    let (topic, channel) = (&f[0], &f[1]);
    if !is_valid_topic_name(topic) {
        return Err(ApiErr::new(400, "INVALID_TOPIC"));
    }
    if !channel.is_empty() && !is_valid_channel_name(channel) {
        return Err(ApiErr::new(400, "INVALID_CHANNEL"));
    }
    let errs = match replicas_field(&req.body)? {
        // nsq-rs: a replicated topic is made through its group, on a member
        Some(n) => {
            s.ci.create_replicated_topic(topic, channel, &n, &s.upstreams())
                .await
                .map_err(|r| ApiErr::new(r.status, r.text))?
        }
        None => {
            let lookupds = s.upstreams().lookupds;
            s.ci.create_topic_channel(topic, channel, &lookupds)
                .await
                .map_err(upstream)?
        }
    };
    notify(s, req, "create_topic", topic, "", "");
    if !channel.is_empty() {
        notify(s, req, "create_channel", topic, channel, "");
    }
    done(errs)
}

/// `replicas` of a create's body (nsq-rs): a whole number, as a JSON
/// number or string; absent, null or empty for NSQ's unreplicated topic.
fn replicas_field(body: &[u8]) -> Result<Option<String>, ApiErr> {
    let bad = || ApiErr::new(400, "INVALID_ARG_REPLICAS");
    let v = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(mut o)) => o.remove("replicas"),
        _ => None,
    };
    let n = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::String(s)) if s.trim().is_empty() => return Ok(None),
        Some(Value::String(s)) => s.trim().to_string(),
        Some(_) => return Err(bad()),
    };
    match n.parse::<u8>() {
        Ok(k) if k > 0 => Ok(Some(n)),
        _ => Err(bad()),
    }
}

/// The settings of a `{"action":"config", …}` body (nsq-rs) as the query
/// of nsqd's `/topic/config` or `/channel/config`: only the keys present,
/// each checked here first (a JSON number or string; 400
/// `INVALID_ARG_<KEY>`), so that a bad value changes no nsqd at all.
fn config_query(body: &[u8], channel: bool) -> Result<String, ApiErr> {
    let keys: &[&str] = if channel {
        &[
            "max_attempts",
            "dead_letter_topic",
            "max_depth",
            "max_depth_policy",
            "max_age",
        ]
    } else {
        &[
            "mem_queue_size",
            "max_depth",
            "max_depth_policy",
            "max_age",
            "retention",
        ]
    };
    let obj = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(o)) => o,
        _ => return Err(ApiErr::new(400, "INVALID_BODY")),
    };
    let mut qs = String::new();
    for key in keys {
        let bad = || ApiErr::new(400, format!("INVALID_ARG_{}", key.to_ascii_uppercase()));
        let v = match obj.get(*key) {
            None | Some(Value::Null) => continue,
            Some(Value::String(s)) => s.trim().to_string(),
            Some(Value::Number(n)) => n.to_string(),
            Some(_) => return Err(bad()),
        };
        let ok = match *key {
            "max_depth_policy" => matches!(v.as_str(), "reject" | "drop-oldest"),
            "dead_letter_topic" => v.is_empty() || is_valid_topic_name(&v),
            // empty: back to --mem-queue-size
            "mem_queue_size" => v.is_empty() || v.parse::<u64>().is_ok(),
            // a replicated topic's (nsq-rs replay): its nsqds check it
            "retention" => !v.is_empty(),
            "max_attempts" => v.parse::<u16>().is_ok(),
            // Go's duration syntax, not negative; empty: back to the default
            "max_age" => {
                v.is_empty() || nsq_protocol::duration::parse_signed(&v).is_ok_and(|ns| ns >= 0)
            }
            _ => v.parse::<u64>().is_ok(),
        };
        if !ok {
            return Err(bad());
        }
        qs.push_str(&format!("&{key}={}", query_escape(&v)));
    }
    Ok(qs)
}

/// `POST /api/topics/:topic[/:channel]` with `{"action":"pause"|"unpause"|"empty"}`,
/// or (nsq-rs) `{"action":"config", …settings}`.
pub async fn topic_channel_action(
    s: &Arc<Shared>,
    req: &Req,
    topic: &str,
    channel: &str,
) -> ApiResult {
    require_admin(s, req)?;
    let f = decode_fields(&req.body, &["action"]).map_err(|e| ApiErr::new(400, e))?;
    let action = f[0].as_str();
    if !matches!(action, "pause" | "unpause" | "empty" | "config" | "reset") {
        return Err(ApiErr::new(400, "INVALID_ACTION"));
    }
    if action == "reset" {
        return reset_channel(s, req, topic, channel).await;
    }
    let (kind, mut qs) = if channel.is_empty() {
        ("topic", format!("topic={}", query_escape(topic)))
    } else {
        (
            "channel",
            format!(
                "topic={}&channel={}",
                query_escape(topic),
                query_escape(channel)
            ),
        )
    };
    if action == "config" {
        qs.push_str(&config_query(&req.body, !channel.is_empty())?);
    }
    let up = s.upstreams();
    let result =
        s.ci.producers_action(topic, &format!("{kind}/{action}"), &qs, &up)
            .await;
    // nsqadmin notifies these even when the upstream calls failed.
    notify(s, req, &format!("{action}_{kind}"), topic, channel, "");
    done(result.map_err(upstream)?)
}

/// `{"action":"reset","to":…}` of a channel (nsq-rs replay): asked of one
/// nsqd of the topic, which commits it through the topic's group; the
/// answer says where the channel went.
async fn reset_channel(s: &Arc<Shared>, req: &Req, topic: &str, channel: &str) -> ApiResult {
    if channel.is_empty() {
        return Err(ApiErr::new(400, "INVALID_ACTION"));
    }
    let f = decode_fields(&req.body, &["action", "to"]).map_err(|e| ApiErr::new(400, e))?;
    if f[1].trim().is_empty() {
        return Err(ApiErr::new(400, "MISSING_ARG_TO"));
    }
    let said =
        s.ci.reset_channel(topic, channel, f[1].trim(), &s.upstreams())
            .await
            .map_err(|r| ApiErr::new(r.status, r.text))?;
    notify(s, req, "reset_channel", topic, channel, "");
    Ok(v1_json(&Message { message: said }))
}

/// `POST /api/replication` (nsq-rs) with `{"action":"add","id":…,"address":…}`
/// or `{"action":"remove","id":…}`: asked of one member, which commits it
/// through the cluster; its refusal (a 4xx) is the answer, in its words.
pub async fn replication_action(s: &Arc<Shared>, req: &Req) -> ApiResult {
    use crate::cluster::members::MemberChange;
    require_admin(s, req)?;
    let f =
        decode_fields(&req.body, &["action", "id", "address"]).map_err(|e| ApiErr::new(400, e))?;
    let id = match f[1].trim() {
        "" => return Err(ApiErr::new(400, "MISSING_ARG_ID")),
        id => id
            .parse::<u64>()
            .map_err(|_| ApiErr::new(400, "INVALID_ARG_ID"))?,
    };
    let address = f[2].trim().to_string();
    let change = match f[0].as_str() {
        "add" if address.is_empty() => return Err(ApiErr::new(400, "MISSING_ARG_ADDRESS")),
        "add" => MemberChange::Add {
            id,
            address: address.clone(),
        },
        "remove" => MemberChange::Remove { id },
        _ => return Err(ApiErr::new(400, "INVALID_ACTION")),
    };
    let said =
        s.ci.change_member(&change, &s.upstreams())
            .await
            .map_err(|r| ApiErr::new(r.status, r.text))?;
    let node = match change {
        MemberChange::Add { .. } => format!("{id}@{address}"),
        MemberChange::Remove { .. } => id.to_string(),
    };
    notify(
        s,
        req,
        &format!("{}_replication_member", f[0]),
        "",
        "",
        &node,
    );
    Ok(v1_json(&Message { message: said }))
}

pub async fn tombstone_node(s: &Arc<Shared>, req: &Req, node: &str) -> ApiResult {
    require_admin(s, req)?;
    let f = decode_fields(&req.body, &["topic"]).map_err(|_| ApiErr::new(400, "INVALID_BODY"))?;
    let topic = &f[0];
    if !is_valid_topic_name(topic) {
        return Err(ApiErr::new(400, "INVALID_TOPIC"));
    }
    let lookupds = s.upstreams().lookupds;
    let errs =
        s.ci.tombstone_node_for_topic(topic, node, &lookupds)
            .await
            .map_err(upstream)?;
    notify(s, req, "tombstone_topic_producer", topic, "", node);
    done(errs)
}

pub async fn delete_topic(s: &Arc<Shared>, req: &Req, topic: &str) -> ApiResult {
    require_admin(s, req)?;
    let errs =
        s.ci.delete_topic(topic, &s.upstreams())
            .await
            .map_err(upstream)?;
    notify(s, req, "delete_topic", topic, "", "");
    done(errs)
}

pub async fn delete_channel(s: &Arc<Shared>, req: &Req, topic: &str, channel: &str) -> ApiResult {
    require_admin(s, req)?;
    let errs =
        s.ci.delete_channel(topic, channel, &s.upstreams())
            .await
            .map_err(upstream)?;
    notify(s, req, "delete_channel", topic, channel, "");
    done(errs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_like_go() {
        assert_eq!(decode_fields(b"", &["a"]).unwrap_err(), "EOF");
        assert_eq!(decode_fields(b"  \n", &["a"]).unwrap_err(), "EOF");
        assert_eq!(
            decode_fields(br#"{"a":"x""#, &["a"]).unwrap_err(),
            "unexpected EOF"
        );
        assert_eq!(
            decode_fields(br#"{"Topic":"t","x":1} trailing"#, &["topic", "channel"]).unwrap(),
            vec!["t".to_string(), String::new()]
        );
        assert_eq!(decode_fields(b"null", &["a"]).unwrap(), vec![String::new()]);
        assert!(decode_fields(br#"{"action":1}"#, &["action"])
            .unwrap_err()
            .starts_with("json: cannot unmarshal number"));
    }

    #[test]
    fn replicas_is_a_whole_number_or_absent() {
        let got = |b: &[u8]| replicas_field(b).map_err(|e| e.text);
        assert_eq!(got(br#"{"topic":"t"}"#), Ok(None));
        assert_eq!(got(br#"{"replicas":null}"#), Ok(None));
        assert_eq!(got(br#"{"replicas":" "}"#), Ok(None));
        assert_eq!(got(br#"{"replicas":3}"#), Ok(Some("3".into())));
        assert_eq!(got(br#"{"replicas":" 5 "}"#), Ok(Some("5".into())));
        for bad in [
            &br#"{"replicas":0}"#[..],
            br#"{"replicas":256}"#,
            br#"{"replicas":"x"}"#,
            br#"{"replicas":1.5}"#,
            br#"{"replicas":[3]}"#,
        ] {
            assert_eq!(got(bad), Err("INVALID_ARG_REPLICAS".into()), "{bad:?}");
        }
    }

    #[test]
    fn config_bodies_become_checked_queries() {
        let q = config_query(
            br#"{"action":"config","max_depth":10,"max_depth_policy":"drop-oldest","x":1}"#,
            false,
        );
        assert_eq!(q.unwrap(), "&max_depth=10&max_depth_policy=drop-oldest");
        let q = config_query(br#"{"max_attempts":"3","dead_letter_topic":""}"#, true);
        assert_eq!(q.unwrap(), "&max_attempts=3&dead_letter_topic=");
        let q = config_query(br#"{"max_age":"1h30m"}"#, false);
        assert_eq!(q.unwrap(), "&max_age=1h30m");
        for bad in [r#"{"max_age":"-1s"}"#, r#"{"max_age":"soon"}"#] {
            let e = config_query(bad.as_bytes(), true).unwrap_err();
            assert_eq!(e.code, 400);
        }
        for (body, want) in [
            (&br#"{"max_depth":-1}"#[..], "INVALID_ARG_MAX_DEPTH"),
            (
                br#"{"max_depth_policy":"oldest"}"#,
                "INVALID_ARG_MAX_DEPTH_POLICY",
            ),
            (br#"{"mem_queue_size":1.5}"#, "INVALID_ARG_MEM_QUEUE_SIZE"),
            (br#"[1]"#, "INVALID_BODY"),
        ] {
            assert_eq!(config_query(body, false).unwrap_err().text, want);
        }
        assert_eq!(
            config_query(br#"{"dead_letter_topic":"a b"}"#, true)
                .unwrap_err()
                .text,
            "INVALID_ARG_DEAD_LETTER_TOPIC"
        );
    }

    #[test]
    fn basic_auth() {
        assert_eq!(basic_auth_user("Basic dXNlcjpwYXNz"), "user");
        assert_eq!(basic_auth_user("Bearer x"), "");
        assert_eq!(basic_auth_user("Basic !!"), "");
    }
}

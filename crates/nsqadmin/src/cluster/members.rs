//! nsq-rs replication membership through nsqadmin (the Replication page;
//! docs/replication.md, "Membership online"): the cluster as one member's
//! `GET /replication` shows it, and a member added or removed by asking
//! one member's `POST /replication/members/add|remove`, which commits the
//! change through the cluster's own group (asking each member would ask
//! for the change once per member). Owns which nsqd is asked and what its
//! answer says to the user. Never: whether a change may be made (the
//! member checks it and says why not).

use hyper::Method;
use serde_json::Value;

use super::{ClusterError, ClusterInfo, Refused, Upstreams};

/// A membership change as nsqadmin passes it on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberChange {
    /// A new member: its node id and replication address (`host:port`).
    Add { id: u64, address: String },
    /// A member leaves the cluster.
    Remove { id: u64 },
}

impl MemberChange {
    /// The path and query of the member's endpoint.
    fn path(&self) -> String {
        match self {
            MemberChange::Add { id, address } => format!(
                "/replication/members/add?id={id}&address={}",
                nsq_http::url::query_escape(address)
            ),
            MemberChange::Remove { id } => format!("/replication/members/remove?id={id}"),
        }
    }
}

impl ClusterInfo {
    /// The first nsqd of the cluster that answers `GET /replication` (a
    /// member): its HTTP address and what it said. None when no nsqd is a
    /// member (nsqds without the replication flags answer 404).
    pub async fn replication(
        &self,
        up: &Upstreams,
    ) -> Result<(Option<(String, Value)>, Vec<String>), ClusterError> {
        let (producers, errs) = self.producers(up).await?;
        for p in &producers {
            let url = format!("http://{}/replication", p.http_address());
            tracing::info!("CI: querying {url}");
            if let Ok(body) = self.client.v1(Method::GET, &url, None).await {
                if let Ok(v @ Value::Object(_)) = serde_json::from_slice::<Value>(&body) {
                    return Ok((Some((p.http_address(), v)), errs));
                }
            }
        }
        Ok((None, errs))
    }

    /// Asks the members, one after the other, for `change` until one
    /// answers: the answer in words, or the refusal of the first member
    /// that refuses it (a 4xx: the change is wrong, asking another would
    /// not help). An nsqd that is no member (`NOT_FOUND`), one that cannot
    /// be reached and a 5xx (no leader of the cluster's group just now)
    /// pass to the next; the last of those when none answers.
    pub async fn change_member(
        &self,
        change: &MemberChange,
        up: &Upstreams,
    ) -> Result<String, Refused> {
        let (producers, _) = self.producers(up).await.map_err(|e| Refused {
            status: 502,
            text: format!("UPSTREAM_ERROR: {e}"),
        })?;
        let mut last = Refused {
            status: 502,
            text: "UPSTREAM_ERROR: no nsqd is a member of a replication cluster".into(),
        };
        for p in &producers {
            let url = format!("http://{}{}", p.http_address(), change.path());
            tracing::info!("CI: querying {url}");
            match self.client.v1(Method::POST, &url, None).await {
                Ok(body) => return Ok(answer_text(change, &body)),
                Err(e) => {
                    let refused = Refused::from_nsqd(&e);
                    let no_member = refused.status == 404 && refused.text == "NOT_FOUND";
                    if no_member {
                        continue;
                    }
                    if refused.status < 500 {
                        return Err(refused);
                    }
                    last = refused;
                }
            }
        }
        Err(last)
    }
}

/// What a member's answer to a change says, for the page: the members it
/// now names.
fn answer_text(change: &MemberChange, body: &[u8]) -> String {
    let v: Value = serde_json::from_slice(body).unwrap_or_default();
    let members: Vec<String> = v["peers"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .filter_map(|p| p["node_id"].as_u64())
                .map(|id| id.to_string())
                .collect()
        })
        .unwrap_or_default();
    let done = match change {
        MemberChange::Add { id, address } => format!("Member {id} added at {address}"),
        MemberChange::Remove { id } => format!("Member {id} removed"),
    };
    if members.is_empty() {
        return done;
    }
    format!(
        "{done}: the cluster's members are now {} (the groups carry the change out)",
        members.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_answers() {
        let add = MemberChange::Add {
            id: 4,
            address: "10.0.0.4:4200".into(),
        };
        assert_eq!(
            add.path(),
            "/replication/members/add?id=4&address=10.0.0.4%3A4200"
        );
        assert_eq!(
            MemberChange::Remove { id: 2 }.path(),
            "/replication/members/remove?id=2"
        );
        assert_eq!(
            answer_text(
                &add,
                br#"{"peers":[{"node_id":1},{"node_id":2},{"node_id":4}]}"#
            ),
            "Member 4 added at 10.0.0.4:4200: the cluster's members are now 1, 2, 4 (the groups carry the change out)"
        );
        assert_eq!(
            answer_text(&MemberChange::Remove { id: 3 }, b"not json"),
            "Member 3 removed"
        );
    }
}

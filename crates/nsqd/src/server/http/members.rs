//! `POST /replication/members/add?id=&address=` and
//! `/replication/members/remove?id=` (nsq-rs, on a member of a replication
//! cluster only): handed to the cluster as the request gave them
//! (`crate::server::cluster`), answered with the member's view of the
//! cluster once the change is in the cluster map (200), or why not: 400
//! (bad input, an address that does not answer as that member), 404 (no
//! such member), 409 (an existing id, the last voter of a group, another
//! change in progress), 503 (not committed now, a member of an older
//! build). Never: checking the change itself.

use axum::http::StatusCode;
use axum::response::Response;
use nsq_http::server::reply;

use super::{err, Query};
use crate::server::cluster::{MemberChange, MemberRefused};
use crate::server::nsqd::NsqdInner;

pub(super) async fn change(nsqd: &NsqdInner, add: bool, q: &Query) -> Response {
    let arg = |name: &str| q.get(name).map(|s| s.to_string()).unwrap_or_default();
    let change = if add {
        MemberChange::Add {
            id: arg("id"),
            address: arg("address"),
        }
    } else {
        MemberChange::Remove { id: arg("id") }
    };
    match nsqd.cluster().members(change).await {
        Ok(stats) => reply::v1_json(&stats),
        Err(e) => {
            let status = match &e {
                MemberRefused::Invalid(_) => StatusCode::BAD_REQUEST,
                MemberRefused::NotFound(_) => StatusCode::NOT_FOUND,
                MemberRefused::Conflict(_) => StatusCode::CONFLICT,
                MemberRefused::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            };
            tracing::warn!("REPLICATION: membership change refused: {e}");
            err(status, &e.to_string())
        }
    }
}

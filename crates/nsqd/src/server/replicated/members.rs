//! `POST /replication/members/add?id=&address=` and
//! `/replication/members/remove?id=` on a member (nsq-rs): the request's
//! words checked, the change made through the cluster map
//! (`nsq_replication::membership`), and each refusal given its HTTP class
//! and a code an operator can act on. Never: the rules of a change (the
//! replication crate's cluster map) or carrying it out in the groups (each
//! group's leader does). Design: docs/replication.md, "Membership online".

use std::time::Duration;

use nsq_protocol::stats::ReplicationStats;
use nsq_replication::cluster_map::{Change, Refusal};
use nsq_replication::membership::ChangeError;
use nsq_replication::NodeId;

use super::groups::Groups;
use crate::server::cluster::{MemberChange, MemberRefused};

/// How long a change may take to be committed (and the new member's
/// address to answer its probe) before the operator is told it failed.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(10);

/// Makes `change` and answers what the member shows afterwards.
pub async fn change(
    groups: &Groups,
    change: MemberChange,
) -> Result<ReplicationStats, MemberRefused> {
    let change = parse(change)?;
    groups
        .membership
        .change(change, CHANGE_TIMEOUT)
        .await
        .map_err(refused)?;
    Ok(groups.stats())
}

/// The request's words as a change.
fn parse(change: MemberChange) -> Result<Change, MemberRefused> {
    let id = |s: &str| -> Result<NodeId, MemberRefused> {
        if s.is_empty() {
            return Err(MemberRefused::Invalid("MISSING_ARG_ID".into()));
        }
        s.parse::<NodeId>()
            .map_err(|_| MemberRefused::Invalid(format!("INVALID_ARG_ID {s:?} is not a node id")))
    };
    Ok(match change {
        MemberChange::Add { id: i, address } => {
            let id = id(&i)?;
            if address.is_empty() {
                return Err(MemberRefused::Invalid("MISSING_ARG_ADDRESS".into()));
            }
            if !address
                .rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok())
            {
                return Err(MemberRefused::Invalid(format!(
                    "INVALID_ARG_ADDRESS {address:?} is not host:port (the new member's --replication-address)"
                )));
            }
            Change::Add { id, addr: address }
        }
        MemberChange::Remove { id: i } => Change::Remove { id: id(&i)? },
    })
}

/// A refused change's HTTP class and words.
fn refused(e: ChangeError) -> MemberRefused {
    let why = e.to_string();
    match e {
        ChangeError::Refused(r) => match r {
            Refusal::AlreadyMember(_) => {
                MemberRefused::Conflict(format!("REPLICATION_MEMBER_EXISTS {why}"))
            }
            Refusal::AddressInUse { .. } => {
                MemberRefused::Conflict(format!("REPLICATION_ADDRESS_IN_USE {why}"))
            }
            Refusal::NotMember(_) => {
                MemberRefused::NotFound(format!("REPLICATION_NOT_A_MEMBER {why}"))
            }
            Refusal::LastMember(_) | Refusal::LastVoter { .. } => MemberRefused::Conflict(format!(
                "REPLICATION_LAST_VOTER {why}: add a member first"
            )),
            Refusal::InProgress { .. } | Refusal::Stale { .. } => MemberRefused::Conflict(
                format!("REPLICATION_CHANGE_IN_PROGRESS {why}: try again once GET /replication shows no change"),
            ),
        },
        ChangeError::Unreachable(_) => {
            MemberRefused::Invalid(format!("REPLICATION_MEMBER_UNREACHABLE {why}"))
        }
        ChangeError::UpgradePending(_) => {
            MemberRefused::Unavailable(format!("REPLICATION_UPGRADE_PENDING {why}"))
        }
        ChangeError::NoMap => MemberRefused::Unavailable(format!("REPLICATION_NOT_A_MEMBER {why}")),
        ChangeError::Commit(_) => MemberRefused::Unavailable(format!("REPLICATION_TIMEOUT {why}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_is_checked_before_anything_is_asked() {
        let add = |id: &str, address: &str| {
            parse(MemberChange::Add {
                id: id.into(),
                address: address.into(),
            })
        };
        assert_eq!(
            add("4", "10.0.0.4:4250"),
            Ok(Change::Add {
                id: 4,
                addr: "10.0.0.4:4250".into()
            })
        );
        for (id, address, code) in [
            ("", "h:1", "MISSING_ARG_ID"),
            ("x", "h:1", "INVALID_ARG_ID"),
            ("4", "", "MISSING_ARG_ADDRESS"),
            ("4", "nohost", "INVALID_ARG_ADDRESS"),
            ("4", ":4250", "INVALID_ARG_ADDRESS"),
            ("4", "h:port", "INVALID_ARG_ADDRESS"),
        ] {
            match add(id, address) {
                Err(MemberRefused::Invalid(m)) => assert!(m.starts_with(code), "{m}"),
                other => panic!("{id} {address}: {other:?}"),
            }
        }
        assert_eq!(
            parse(MemberChange::Remove { id: "2".into() }),
            Ok(Change::Remove { id: 2 })
        );
    }

    #[test]
    fn each_refusal_has_its_class() {
        let c = |r| refused(ChangeError::Refused(r));
        assert!(matches!(
            c(Refusal::AlreadyMember(2)),
            MemberRefused::Conflict(m) if m.starts_with("REPLICATION_MEMBER_EXISTS node 2 is already a member")
        ));
        assert!(matches!(
            c(Refusal::LastVoter { id: 3, group: 8 }),
            MemberRefused::Conflict(m) if m.contains("last voter of group 8")
        ));
        assert!(matches!(
            c(Refusal::NotMember(9)),
            MemberRefused::NotFound(_)
        ));
        assert!(matches!(
            refused(ChangeError::Unreachable("h:1 is not reachable".into())),
            MemberRefused::Invalid(m) if m.starts_with("REPLICATION_MEMBER_UNREACHABLE")
        ));
    }
}

//! The rules of replicated topics that need no cluster to decide: which
//! Raft group a topic is placed on, and whether a `replicas=` asked for at
//! topic creation can be granted. Never: Raft, the network or the disk
//! (`crate::server::replication` runs the member; docs/replication.md,
//! "nsqd integration").

/// The Raft group a replicated topic lives in: CRC-32 (IEEE) of its name,
/// modulo the groups per member. Every member computes the same group from
/// the name alone, so placement needs no agreement and no table; the group
/// count is therefore fixed for the life of a cluster.
pub fn group_of(topic: &str, groups: u32) -> u32 {
    crc32fast::hash(topic.as_bytes()) % groups.max(1)
}

/// What this nsqd knows when `POST /topic/create` asks for `replicas`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreateContext {
    /// Members of the replication cluster; None when this nsqd is not one.
    pub cluster_size: Option<usize>,
    pub ephemeral: bool,
    /// The topic already exists here, unreplicated.
    pub exists_unreplicated: bool,
}

/// Why a `replicas=` is refused; Display is the HTTP error message (NSQ's
/// upper-case style), the request changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplicasError {
    /// Not a whole number from 1 to 255.
    #[error("INVALID_ARG_REPLICAS")]
    Invalid,
    /// This nsqd was not started as a member (`--replication-address`).
    #[error("REPLICATION_NOT_ENABLED")]
    NotEnabled,
    /// More replicas than members.
    #[error("REPLICAS_EXCEED_CLUSTER_SIZE")]
    ExceedsCluster,
    /// An `#ephemeral` topic keeps nothing, so it has nothing to replicate.
    #[error("EPHEMERAL_TOPIC_NOT_REPLICABLE")]
    Ephemeral,
    /// A topic becomes replicated only when it is created.
    #[error("TOPIC_EXISTS_UNREPLICATED")]
    ExistsUnreplicated,
}

/// Checks a `replicas=` value against the cluster and the topic; the number
/// of replicas granted.
pub fn check_replicas(value: &str, ctx: CreateContext) -> Result<u8, ReplicasError> {
    let n: u8 = value.parse().map_err(|_| ReplicasError::Invalid)?;
    if n == 0 {
        return Err(ReplicasError::Invalid);
    }
    let size = ctx.cluster_size.ok_or(ReplicasError::NotEnabled)?;
    if usize::from(n) > size {
        return Err(ReplicasError::ExceedsCluster);
    }
    if ctx.ephemeral {
        return Err(ReplicasError::Ephemeral);
    }
    if ctx.exists_unreplicated {
        return Err(ReplicasError::ExistsUnreplicated);
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMBER: CreateContext = CreateContext {
        cluster_size: Some(3),
        ephemeral: false,
        exists_unreplicated: false,
    };

    #[test]
    fn placement_is_stable_and_spreads() {
        assert_eq!(group_of("orders", 16), group_of("orders", 16));
        assert_eq!(group_of("orders", 16), crc32fast::hash(b"orders") % 16);
        assert_eq!(group_of("anything", 1), 0);
        assert_eq!(group_of("anything", 0), 0);
        let used: std::collections::HashSet<u32> =
            (0..200).map(|i| group_of(&format!("t{i}"), 16)).collect();
        assert_eq!(used.len(), 16);
    }

    #[test]
    fn replicas_are_checked_in_order() {
        assert_eq!(check_replicas("3", MEMBER), Ok(3));
        assert_eq!(check_replicas("1", MEMBER), Ok(1));
        for bad in ["", "0", "-1", "x", "2.0", "256"] {
            assert_eq!(
                check_replicas(bad, MEMBER),
                Err(ReplicasError::Invalid),
                "{bad}"
            );
        }
        let alone = CreateContext {
            cluster_size: None,
            ..MEMBER
        };
        assert_eq!(check_replicas("3", alone), Err(ReplicasError::NotEnabled));
        assert_eq!(
            check_replicas("4", MEMBER),
            Err(ReplicasError::ExceedsCluster)
        );
        let eph = CreateContext {
            ephemeral: true,
            ..MEMBER
        };
        assert_eq!(check_replicas("3", eph), Err(ReplicasError::Ephemeral));
        let exists = CreateContext {
            exists_unreplicated: true,
            ..MEMBER
        };
        assert_eq!(
            check_replicas("3", exists),
            Err(ReplicasError::ExistsUnreplicated)
        );
        assert_eq!(ReplicasError::Invalid.to_string(), "INVALID_ARG_REPLICAS");
    }
}

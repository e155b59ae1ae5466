//! The rules of replicated topics that need no cluster to decide: which
//! Raft group a topic is placed on, whether a `replicas=` asked for at
//! topic creation can be granted, and what a committed `TopicCreate` does
//! to the topic a member already has. Never: Raft, the network or the disk
//! (`crate::server::replication` runs the member; docs/replication.md,
//! "nsqd integration").

/// The Raft group a replicated topic lives in: CRC-32 (IEEE) of its name,
/// modulo the groups per member. Every member computes the same group from
/// the name alone, so placement needs no agreement and no table; the group
/// count is therefore fixed for the life of a cluster.
pub fn group_of(topic: &str, groups: u32) -> u32 {
    crc32fast::hash(topic.as_bytes()) % groups.max(1)
}

/// The topic of that name on this member, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    None,
    Unreplicated,
    Replicated(u8),
}

/// What this nsqd knows when `POST /topic/create` asks for `replicas`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreateContext {
    /// Members of the replication cluster; None when this nsqd is not one.
    pub cluster_size: Option<usize>,
    pub ephemeral: bool,
    pub existing: Existing,
}

/// A `replicas=` that passes the checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Granted {
    /// Propose the topic to its group with this many replicas.
    Propose(u8),
    /// The topic is already replicated so: creating it again changes
    /// nothing.
    Exists(u8),
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
    /// Its replicas are chosen once, when it is created.
    #[error("TOPIC_EXISTS_WITH_OTHER_REPLICAS")]
    ExistsWithOtherReplicas,
}

/// Checks a `replicas=` value against the cluster and the topic: what to
/// do with the number of replicas granted.
pub fn check_replicas(value: &str, ctx: CreateContext) -> Result<Granted, ReplicasError> {
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
    match ctx.existing {
        Existing::None => Ok(Granted::Propose(n)),
        Existing::Unreplicated => Err(ReplicasError::ExistsUnreplicated),
        Existing::Replicated(r) if r == n => Ok(Granted::Exists(n)),
        Existing::Replicated(_) => Err(ReplicasError::ExistsWithOtherReplicas),
    }
}

/// What applying a committed `TopicCreate` does on a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnCreate {
    /// Create the topic, replicated.
    Create,
    /// The member has the topic unreplicated (made here while the entry
    /// was on its way): the group decided, so it becomes replicated; its
    /// messages so far stay where they are.
    MakeReplicated,
    /// Already replicated: the entry is applied again (after a restart,
    /// or a second create that passed the checks at the same time as the
    /// first), and the first one's replicas stay.
    Keep,
}

/// The rule every member applies, in log order, so all agree.
pub fn on_topic_create(existing: Existing) -> OnCreate {
    match existing {
        Existing::None => OnCreate::Create,
        Existing::Unreplicated => OnCreate::MakeReplicated,
        Existing::Replicated(_) => OnCreate::Keep,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMBER: CreateContext = CreateContext {
        cluster_size: Some(3),
        ephemeral: false,
        existing: Existing::None,
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
        assert_eq!(check_replicas("3", MEMBER), Ok(Granted::Propose(3)));
        assert_eq!(check_replicas("1", MEMBER), Ok(Granted::Propose(1)));
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
            existing: Existing::Unreplicated,
            ..MEMBER
        };
        assert_eq!(
            check_replicas("3", exists),
            Err(ReplicasError::ExistsUnreplicated)
        );
        assert_eq!(ReplicasError::Invalid.to_string(), "INVALID_ARG_REPLICAS");
    }

    #[test]
    fn creating_a_replicated_topic_again_is_idempotent_with_its_replicas() {
        let replicated = CreateContext {
            existing: Existing::Replicated(3),
            ..MEMBER
        };
        assert_eq!(check_replicas("3", replicated), Ok(Granted::Exists(3)));
        assert_eq!(
            check_replicas("2", replicated),
            Err(ReplicasError::ExistsWithOtherReplicas)
        );
        // The cluster checks still come first.
        assert_eq!(
            check_replicas("4", replicated),
            Err(ReplicasError::ExceedsCluster)
        );
        assert_eq!(
            ReplicasError::ExistsWithOtherReplicas.to_string(),
            "TOPIC_EXISTS_WITH_OTHER_REPLICAS"
        );
    }

    #[test]
    fn applying_a_create_never_changes_a_replicated_topic() {
        assert_eq!(on_topic_create(Existing::None), OnCreate::Create);
        assert_eq!(
            on_topic_create(Existing::Unreplicated),
            OnCreate::MakeReplicated
        );
        assert_eq!(on_topic_create(Existing::Replicated(2)), OnCreate::Keep);
    }
}

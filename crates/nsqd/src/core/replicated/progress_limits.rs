//! The group's depth limits of a replicated topic and its channels (a
//! child of `progress`): the `max_depth` each `Limit` entry set, the depth
//! the group counts against it, whether a publish is refused (`reject`),
//! and which messages a `drop-oldest` channel drops when a batch is
//! applied. Owns those rules (docs/features/limits.md, "On a replicated
//! topic"). Never: the local queues (the leader's channel skips what this
//! says was dropped: `server::replicated::apply`).
//!
//! **The depth counted** is what the group holds unfinished, computed by
//! every member from the entries it applied, so all agree and a failover
//! does not change the answer: for a channel, the messages it has and has
//! not finished (waiting, in flight or deferred alike: the group does not
//! know which are in flight on the leader); for the topic itself, the
//! messages it holds for channels to come (while it has none, or is
//! paused), as a plain topic's limit bounds its own backlog.
//!
//! **`reject`** is a check made before a publish is proposed, on the
//! member that takes it, against what it has applied (a follower's view
//! is the leader's of a moment before), and by the group's leader before
//! it writes a publish forwarded to it (`server::replicated::groups`): a
//! check, not a reservation, as on a plain topic. A committed batch is
//! never refused.
//!
//! **`drop-oldest`** (channels only) is decided when a `Publish` is
//! applied, from the log alone: the channel's oldest unfinished messages
//! past its `max_depth` — the new batch's own first ones when the batch
//! alone is larger — are finished on the channel there and then, on
//! every member, counted as dropped. No entry records them: the log
//! already decides them, so nothing is lost or redelivered by a failover.
//! Messages the topic held and hands on later are not new: they never
//! cause a drop (as requeues never do). A topic's own `drop-oldest` is
//! not the group's: what a topic holds is no channel's yet, so no
//! channel's progress could record its drop, and a leader's held backlog
//! would drop what another member's redelivery still counts; such an
//! entry is skipped ([`limit_refusal`] says why before one is proposed).

use nsq_protocol::MessageId;

use super::{ChannelProgress, Outcome, Skip, TopicProgress};
use crate::core::limits::{Admit, Full, Limit};

/// Messages a channel's `drop-oldest` limit dropped when a batch was
/// applied: the leader's channel must not deliver them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    pub topic: String,
    pub channel: String,
    pub ids: Vec<MessageId>,
}

/// A limit as the group holds it, and the depth it counts (what a member
/// shows on `/topic/config` and `/channel/config`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupLimit {
    pub limit: Limit,
    /// Unfinished on the channel, or held by the topic.
    pub depth: u64,
    /// What the channel's `drop-oldest` dropped (0 for a topic).
    pub dropped: u64,
}

/// Why a limit cannot be the group's (the text of a 400), or None.
pub fn limit_refusal(channel: Option<&str>, limit: &Limit) -> Option<&'static str> {
    (channel.is_none() && limit.drops()).then_some(
        "REPLICATED_TOPIC_DROP_OLDEST: a replicated topic's own max_depth takes reject only \
         (what it holds is no channel's yet, so its drops could not be recorded through the \
         group); set drop-oldest on its channels",
    )
}

impl TopicProgress {
    /// The group's limit of the topic's own backlog (the default: none).
    pub fn depth_limit(&self) -> Limit {
        self.limit
    }

    /// The refusal by the group's `reject` limits of `incoming` new
    /// messages: a channel's (its unfinished messages), then the topic's
    /// own (what it holds, while it holds), as a plain topic checks them.
    pub fn refusal(&self, incoming: u64) -> Option<Full> {
        self.channels
            .iter()
            .find(|(_, c)| {
                c.limit.rejects() && c.limit.admit(c.unfinished, incoming) == Admit::Refuse
            })
            .map(|(name, c)| Full::Channel(name.clone(), c.limit.max_depth))
            .or_else(|| {
                let held = self.held_from.is_some() && self.limit.rejects();
                (held && self.limit.admit(self.held, incoming) == Admit::Refuse)
                    .then_some(Full::Topic(self.limit.max_depth))
            })
    }

    /// The group's limit of the topic (`channel` None) or of its channel,
    /// with the depth it counts; None for a channel the group lacks.
    pub fn group_limit(&self, channel: Option<&str>) -> Option<GroupLimit> {
        Some(match channel {
            None => GroupLimit {
                limit: self.limit,
                depth: self.held,
                dropped: 0,
            },
            Some(name) => {
                let c = self.channels.get(name)?;
                GroupLimit {
                    limit: c.limit,
                    depth: c.unfinished,
                    dropped: c.dropped,
                }
            }
        })
    }

    /// A `Limit` entry of the topic (`channel` None) or of its channel.
    pub(super) fn set_limit(&mut self, channel: Option<&str>, limit: Limit) -> Outcome {
        if limit_refusal(channel, &limit).is_some() {
            return Outcome::Skipped(Skip::NotReplicated);
        }
        let Some(name) = channel else {
            self.limit = limit;
            return Outcome::Applied;
        };
        match self.channels.get_mut(name) {
            Some(c) => {
                c.limit = limit;
                Outcome::Applied
            }
            None => Outcome::Skipped(Skip::UnknownChannel),
        }
    }

    /// After a batch reached the channels: each `drop-oldest` channel past
    /// its `max_depth` finishes its oldest unfinished messages, into `out`.
    pub(super) fn drop_oldest(&mut self, topic: &str, out: &mut Vec<Dropped>) {
        if self.held_from.is_some() {
            // held, the batch reached no channel
            return;
        }
        let limit = u64::MAX;
        for (name, c) in self.channels.iter_mut() {
            if !c.limit.drops() || c.unfinished <= c.limit.max_depth {
                continue;
            }
            let ids = c.drop_oldest(&self.batches, limit, c.unfinished - c.limit.max_depth);
            if !ids.is_empty() {
                out.push(Dropped {
                    topic: topic.to_string(),
                    channel: name.clone(),
                    ids,
                });
            }
        }
    }
}

impl ChannelProgress {
    /// The group's limit of the channel (the default: none).
    pub fn depth_limit(&self) -> Limit {
        self.limit
    }

    /// Messages the group's `drop-oldest` limit dropped on the channel.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Finishes the `n` oldest messages the channel has unfinished below
    /// `limit` (the topic's hold); their ids, oldest first.
    fn drop_oldest(
        &mut self,
        batches: &std::collections::BTreeMap<u64, Vec<MessageId>>,
        limit: u64,
        n: u64,
    ) -> Vec<MessageId> {
        let mut ids = Vec::new();
        for (&index, batch) in super::within(batches, self.floor, limit) {
            if ids.len() as u64 >= n {
                break;
            }
            let bits = self.finished.entry(index).or_default();
            for (k, id) in batch.iter().enumerate() {
                if ids.len() as u64 >= n {
                    break;
                }
                if bits.set(k as u32) {
                    ids.push(*id);
                }
            }
        }
        let count = ids.len() as u64;
        self.unfinished = self.unfinished.saturating_sub(count);
        self.dropped += count;
        if !self.due.is_empty() {
            for id in &ids {
                self.due.remove(id);
            }
        }
        self.advance(batches, limit);
        ids
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::super::{Pending, Progress};
    use super::*;
    use crate::core::limits::Policy;
    use crate::core::replicated::entry::{Cursor, Entry, Published};

    fn id(n: u64) -> MessageId {
        MessageId::from_guid(n)
    }

    /// A group applying entries one index after another, as a member does.
    struct Group {
        p: Progress,
        at: u64,
        dropped: Vec<Dropped>,
    }

    impl Group {
        fn new() -> Group {
            let mut g = Group {
                p: Progress::new(),
                at: 0,
                dropped: Vec::new(),
            };
            g.apply(Entry::TopicCreate {
                topic: "t".into(),
                replicas: 3,
            });
            g
        }

        fn apply(&mut self, e: Entry) -> Outcome {
            self.at += 1;
            self.p.apply_dropping(self.at, &e, &mut self.dropped)
        }

        fn channel(&mut self, c: &str) {
            self.apply(Entry::ChannelCreate {
                topic: "t".into(),
                channel: c.into(),
            });
        }

        fn limit(&mut self, channel: Option<&str>, max_depth: u64, policy: Policy) -> Outcome {
            self.apply(Entry::Limit {
                topic: "t".into(),
                channel: channel.map(String::from),
                limit: Limit { max_depth, policy },
            })
        }

        fn publish(&mut self, ns: std::ops::Range<u64>) {
            self.apply(Entry::Publish {
                topic: "t".into(),
                messages: ns
                    .map(|n| Published {
                        id: id(n),
                        timestamp: 1,
                        defer_ms: 0,
                        body: Bytes::from_static(b"x"),
                    })
                    .collect(),
            });
        }

        fn fin(&mut self, c: &str, ns: &[u64]) {
            self.apply(Entry::Finished {
                topic: "t".into(),
                channel: c.into(),
                cursor: Cursor {
                    index: 0,
                    offset: 0,
                },
                ids: ns.iter().map(|&n| id(n)).collect(),
            });
        }

        fn topic(&self) -> &TopicProgress {
            self.p.topic("t").unwrap()
        }

        fn unfinished_ids(&self, c: &str) -> Vec<MessageId> {
            self.p
                .unfinished("t", c)
                .unwrap()
                .into_iter()
                .flat_map(|Pending { ids, .. }| ids)
                .collect()
        }
    }

    #[test]
    fn reject_counts_what_the_channel_has_unfinished_in_flight_or_not() {
        let mut g = Group::new();
        g.channel("c");
        g.channel("other");
        assert_eq!(g.limit(Some("c"), 3, Policy::Reject), Outcome::Applied);
        g.publish(0..2);
        assert_eq!(g.topic().refusal(1), None);
        let full = Some(Full::Channel("c".into(), 3));
        assert_eq!(g.topic().refusal(2), full, "a batch is refused whole");
        g.publish(2..3);
        assert_eq!(g.topic().refusal(1), full);
        // Only a FIN committed through the group makes room.
        g.fin("c", &[1]);
        assert_eq!(g.topic().refusal(1), None);
        assert_eq!(g.topic().channel("c").unwrap().depth_limit().max_depth, 3);
        // 0 is no limit.
        g.limit(Some("c"), 0, Policy::Reject);
        assert_eq!(g.topic().refusal(1_000), None);
    }

    #[test]
    fn a_topics_limit_counts_what_it_holds_and_only_while_it_holds() {
        let mut g = Group::new();
        assert_eq!(g.limit(None, 2, Policy::Reject), Outcome::Applied);
        g.publish(0..2);
        assert_eq!(g.topic().refusal(1), Some(Full::Topic(2)));
        // A channel takes what it held: the topic flows and holds nothing.
        g.channel("c");
        assert_eq!(g.topic().held(), 0);
        assert_eq!(g.topic().refusal(5), None);
    }

    #[test]
    fn a_topics_drop_oldest_is_not_the_groups() {
        let mut g = Group::new();
        let drop = Limit {
            max_depth: 2,
            policy: Policy::DropOldest,
        };
        assert!(limit_refusal(None, &drop).is_some());
        assert_eq!(limit_refusal(Some("c"), &drop), None);
        assert_eq!(
            g.limit(None, 2, Policy::DropOldest),
            Outcome::Skipped(Skip::NotReplicated)
        );
        assert!(!g.topic().depth_limit().is_set());
        assert_eq!(
            g.limit(Some("nope"), 2, Policy::Reject),
            Outcome::Skipped(Skip::UnknownChannel)
        );
    }

    #[test]
    fn drop_oldest_finishes_the_oldest_unfinished_on_every_member_alike() {
        let mut g = Group::new();
        g.channel("c");
        g.channel("keep");
        g.limit(Some("c"), 3, Policy::DropOldest);
        g.publish(0..2);
        g.fin("c", &[0]);
        g.publish(2..5);
        // c had 1, 2, 3, 4 unfinished: the oldest, 1, is dropped.
        assert_eq!(g.dropped.len(), 1);
        assert_eq!(g.dropped[0].channel, "c");
        assert_eq!(g.dropped[0].ids, vec![id(1)]);
        assert_eq!(g.unfinished_ids("c"), vec![id(2), id(3), id(4)]);
        assert_eq!(g.topic().channel("c").unwrap().dropped(), 1);
        assert_eq!(g.topic().channel("keep").unwrap().unfinished(), 5);
        // A batch larger than the limit keeps its newest three.
        g.dropped.clear();
        g.publish(10..15);
        assert_eq!(g.dropped[0].ids, vec![id(2), id(3), id(4), id(10), id(11)]);
        assert_eq!(g.unfinished_ids("c"), vec![id(12), id(13), id(14)]);
        assert_eq!(g.topic().channel("c").unwrap().dropped(), 6);
        // A FIN of a dropped message changes nothing.
        g.fin("c", &[10]);
        assert_eq!(g.topic().channel("c").unwrap().unfinished(), 3);
        // Another member applying the same log (or its image) agrees.
        let mut again = Group::new();
        again.channel("c");
        again.channel("keep");
        again.limit(Some("c"), 3, Policy::DropOldest);
        again.publish(0..2);
        again.fin("c", &[0]);
        again.publish(2..5);
        again.publish(10..15);
        again.fin("c", &[10]);
        assert_eq!(again.p, g.p);
        let back = Progress::from_image(g.p.image().unwrap()).unwrap();
        assert_eq!(back, g.p);
    }

    #[test]
    fn what_a_topic_held_and_hands_on_never_causes_a_drop() {
        let mut g = Group::new();
        g.channel("c");
        g.limit(Some("c"), 1, Policy::DropOldest);
        g.apply(Entry::TopicPause {
            topic: "t".into(),
            paused: true,
        });
        g.publish(0..3);
        g.apply(Entry::TopicPause {
            topic: "t".into(),
            paused: false,
        });
        assert!(g.dropped.is_empty());
        assert_eq!(g.topic().channel("c").unwrap().unfinished(), 3);
        // The next publish brings it back to its limit.
        g.publish(3..4);
        assert_eq!(g.dropped[0].ids, vec![id(0), id(1), id(2)]);
        assert_eq!(g.unfinished_ids("c"), vec![id(3)]);
    }

    #[test]
    fn limits_and_drops_survive_an_image_and_older_images_still_read() {
        let mut g = Group::new();
        g.channel("c");
        let plain = g.p.image().unwrap();
        assert_eq!(plain[0], 1, "no limit: an image earlier builds read");
        g.limit(None, 9, Policy::Reject);
        g.limit(Some("c"), 1, Policy::DropOldest);
        g.publish(0..2);
        let image = g.p.image().unwrap();
        assert_eq!(image[0], 3);
        let back = Progress::from_image(image.clone()).unwrap();
        assert_eq!(back, g.p);
        assert_eq!(back.topic("t").unwrap().depth_limit().max_depth, 9);
        assert_eq!(back.topic("t").unwrap().channel("c").unwrap().dropped(), 1);
        for cut in 0..image.len() {
            assert!(
                Progress::from_image(image.slice(..cut)).is_err(),
                "cut {cut}"
            );
        }
        assert!(Progress::from_image(plain).is_ok());
    }
}

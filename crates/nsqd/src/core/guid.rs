//! Message ids as nsqd makes them: a Snowflake-style 64-bit number
//! `(ms-ish timestamp − twitter epoch) << 22 | node_id << 12 | sequence`,
//! rendered as 16 lowercase hex bytes. One generator per topic.

use nsq_protocol::MessageId;

const TWEPOCH: i64 = 1_288_834_974_288;
const SEQUENCE_BITS: u32 = 12;
const NODE_BITS: u32 = 10;
const SEQUENCE_MASK: i64 = (1 << SEQUENCE_BITS) - 1;

#[derive(Debug)]
pub struct GuidFactory {
    node_id: i64,
    last_ts: i64,
    sequence: i64,
}

impl GuidFactory {
    pub fn new(node_id: i64) -> GuidFactory {
        GuidFactory {
            node_id: node_id & ((1 << NODE_BITS) - 1),
            last_ts: -1,
            sequence: 0,
        }
    }

    /// The next id for a wall-clock time of `unix_ns`. nsqd sleeps a
    /// millisecond when the sequence overflows or the clock steps back; we
    /// instead borrow from the next tick so ids stay unique and increasing
    /// without blocking a publisher.
    pub fn next(&mut self, unix_ns: i64) -> MessageId {
        let ts = unix_ns >> 20;
        if ts > self.last_ts {
            self.last_ts = ts;
            self.sequence = 0;
        } else {
            self.sequence = (self.sequence + 1) & SEQUENCE_MASK;
            if self.sequence == 0 {
                self.last_ts += 1;
            }
        }
        let id = ((self.last_ts - TWEPOCH) << (NODE_BITS + SEQUENCE_BITS))
            | (self.node_id << SEQUENCE_BITS)
            | self.sequence;
        MessageId::from_guid(id as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_and_increasing_even_within_one_tick() {
        let mut g = GuidFactory::new(617);
        let now = 1_796_012_200_000_000_000i64;
        let mut prev = g.next(now);
        for _ in 0..10_000 {
            let id = g.next(now);
            assert!(id > prev, "{id} <= {prev}");
            prev = id;
        }
        // clock going backwards still yields larger ids
        assert!(g.next(now - 1_000_000_000) > prev);
    }

    #[test]
    fn node_id_is_embedded() {
        let mut g = GuidFactory::new(617);
        let id = g.next(1_796_012_200_000_000_000);
        let v = u64::from_str_radix(std::str::from_utf8(&id.0).unwrap(), 16).unwrap();
        assert_eq!((v >> 12) & 1023, 617);
    }
}

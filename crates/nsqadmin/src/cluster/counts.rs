//! The numbers a topic and a channel both show in `/api`, each derived
//! from nsqd's numbers and added up across nodes in one place for both:
//! the depth split between memory and backend ([`Depths`]), and the
//! messages delivered by topology locality ([`Locality`], whose sum is the
//! `delivery_msg_count` beside it).
//!
//! Both are flattened into their topic's or channel's object, so the keys
//! keep their places in nsqadmin 1.3.0's order.

use serde::Serialize;

/// A count nsqadmin leaves out of its answer while it is 0.
pub(super) fn is_zero(v: &i64) -> bool {
    *v == 0
}

/// A queue's depth: nsqd's `depth`, what of it waits on disk, and the rest,
/// in memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Depths {
    pub depth: i64,
    pub memory_depth: i64,
    pub backend_depth: i64,
}

impl Depths {
    /// From nsqd's `depth` and `backend_depth`.
    pub fn of(depth: i64, backend_depth: i64) -> Depths {
        Depths {
            depth,
            memory_depth: depth - backend_depth,
            backend_depth,
        }
    }

    pub(super) fn add(&mut self, o: &Depths) {
        self.depth += o.depth;
        self.memory_depth += o.memory_depth;
        self.backend_depth += o.backend_depth;
    }
}

/// Messages delivered to consumers in the nsqd's own zone, its region, or
/// elsewhere (each absent while 0, as from an nsqd without topology).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Locality {
    #[serde(skip_serializing_if = "is_zero")]
    pub zone_local_msg_count: i64,
    #[serde(skip_serializing_if = "is_zero")]
    pub region_local_msg_count: i64,
    #[serde(skip_serializing_if = "is_zero")]
    pub global_msg_count: i64,
}

impl Locality {
    /// `delivery_msg_count`: every delivery, wherever it went.
    pub fn total(&self) -> i64 {
        self.zone_local_msg_count + self.region_local_msg_count + self.global_msg_count
    }

    pub(super) fn add(&mut self, o: &Locality) {
        self.zone_local_msg_count += o.zone_local_msg_count;
        self.region_local_msg_count += o.region_local_msg_count;
        self.global_msg_count += o.global_msg_count;
    }
}

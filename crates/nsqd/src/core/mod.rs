//! nsqd's core: topics, channels and their queues as plain state machines.
//!
//! Owns every rule about where a message goes and when: fan-out from a
//! topic to its channels ([`topic`]), the memory queue and its overflow
//! ([`queue`]), delivery to clients with RDY credit, in-flight timeouts and
//! deferrals, with their opt-in spill to run files ([`channel`],
//! [`in_flight`], [`deferred`]), message ids
//! ([`guid`]), E2E latency percentiles ([`e2e`]) and the opt-in depth
//! limits of topics and channels ([`limits`]). The rules of opt-in
//! replicated topics are a wing of their own ([`replicated`]), which the
//! rest of the core never uses.
//!
//! Never: tokio, sockets, the disk, the clock or a thread-local RNG. The
//! server passes in monotonic time, wall-clock nanoseconds and RNG seeds;
//! the core hands back what to do — frames per client, records to append
//! to a backend, a refill to read, when to wake — and the server does it
//! (see `crate::server`). So every rule here is unit-tested without a
//! socket, a disk or a sleep.

pub mod channel;
pub mod deferred;
pub mod e2e;
mod effects;
pub mod guid;
pub mod ids;
pub mod in_flight;
pub mod limits;
pub mod queue;
pub mod replicated;
pub mod rng;
pub mod topic;

pub use channel::{Channel, ChannelConfig, DiskWork, SubError, Subscriber};
pub use deferred::{DeferredWork, Load, RestoredRun, SpillBatch, SpillConfig};
pub use ids::{ClientId, IdMap};
pub use in_flight::InFlightError;
pub use limits::{Full, Limit, Policy};
pub use queue::Refill;
pub use topic::{Backlogged, Exiting, Publish, Pump, Refused, Topic, TopicConfig};

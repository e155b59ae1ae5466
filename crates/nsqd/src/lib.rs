//! nsqd core.

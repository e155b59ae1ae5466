//! nsqlookupd's TCP side: [`v1`], the protocol's logic (no I/O), and,
//! with the `server` feature, `listener`: the listener and the
//! per-connection shell that feeds it.

#[cfg(feature = "server")]
mod listener;
pub mod v1;

#[cfg(feature = "server")]
pub(crate) use listener::serve;

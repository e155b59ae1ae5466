//! nsqlookupd (in progress).

//! go-diskqueue compatible disk queue (in progress).

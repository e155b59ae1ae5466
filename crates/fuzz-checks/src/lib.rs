//! The fuzz targets' checks, one module per target, each a plain
//! `pub fn check(data: &[u8])` that panics when the code under test breaks a
//! rule (see each module's doc for the rules).
//!
//! Two drivers call them and nothing else holds a copy:
//! * `fuzz/fuzz_targets/<target>.rs`: cargo-fuzz (libFuzzer, nightly),
//!   coverage-guided, run by `scripts/fuzz.sh`;
//! * `tests/replay.rs`: a stable test that replays `fuzz/regressions/`, a
//!   local `fuzz/corpus/` when present, hand-written seeds and a fixed batch
//!   of their mutations, in every test run.
//!
//! The checks never touch the network; `diskqueue_reader` writes its files
//! into a fresh temporary directory that it removes.
#![forbid(unsafe_code)]

pub mod diskqueue_reader;
pub mod http_mpub_binary;
pub mod http_mpub_text;
pub mod identify_json;
pub mod lookupd_v1;
pub mod mpub_body;
pub mod snappy_deflate_decode;
pub mod v2_command;

//! Snappy and DEFLATE decoding, fed in pieces, and round trips.
//! Check and rules: `nsq_fuzz_checks::snappy_deflate_decode` (crates/fuzz-checks).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| nsq_fuzz_checks::snappy_deflate_decode::check(data));

//! Nsqlookupd's V1 protocol over a byte stream.
//! Check and rules: `nsq_fuzz_checks::lookupd_v1` (crates/fuzz-checks).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| nsq_fuzz_checks::lookupd_v1::check(data));

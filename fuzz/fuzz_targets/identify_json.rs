//! IDENTIFY parsing, negotiation and the response's JSON.
//! Check and rules: `nsq_fuzz_checks::identify_json` (crates/fuzz-checks).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| nsq_fuzz_checks::identify_json::check(data));

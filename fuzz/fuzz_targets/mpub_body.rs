//! MPUB bodies under nsqd's default limits.
//! Check and rules: `nsq_fuzz_checks::mpub_body` (crates/fuzz-checks).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| nsq_fuzz_checks::mpub_body::check(data));

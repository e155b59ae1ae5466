//! V2 command decoding, whole and in two pieces.
//! Check and rules: `nsq_fuzz_checks::v2_command` (crates/fuzz-checks).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| nsq_fuzz_checks::v2_command::check(data));

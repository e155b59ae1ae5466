//! The disk queue's recovery and reader over arbitrary files.
//! Check and rules: `nsq_fuzz_checks::diskqueue_reader` (crates/fuzz-checks).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| nsq_fuzz_checks::diskqueue_reader::check(data));

//! HTTP `/mpub` text bodies against a model of nsqd's loop.
//! Check and rules: `nsq_fuzz_checks::http_mpub_text` (crates/fuzz-checks).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| nsq_fuzz_checks::http_mpub_text::check(data));

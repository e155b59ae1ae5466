//! HTTP `/mpub?binary=true` bodies under fuzzed limits.
//! Check and rules: `nsq_fuzz_checks::http_mpub_binary` (crates/fuzz-checks).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| nsq_fuzz_checks::http_mpub_binary::check(data));

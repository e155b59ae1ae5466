//! The fuzz targets' checks on stable, in every test run: each test replays
//! one target's `fuzz/regressions/<target>/`, the developer's local
//! `fuzz/corpus/<target>/` when there is one (git-ignored), the hand-written
//! seeds of `replay/seeds.rs`, and a fixed batch of their mutations
//! (`replay/mutate.rs`). Not coverage-guided: that is `scripts/fuzz.sh`.
//!
//! `FUZZ_REPLAY_SEED` (default `DEFAULT_SEED`) and `FUZZ_REPLAY_ITERS`
//! (default: each test's own count) change the batch. A failing input is
//! printed (seed, iteration, hex) and saved under `$TMPDIR` as
//! `fuzz-replay-<target>-<seed>-<iteration>`, ready to be copied into
//! `fuzz/regressions/<target>/`.

#[path = "replay/mutate.rs"]
mod mutate;
#[path = "replay/seeds.rs"]
mod seeds;

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use mutate::{hex, mutant, Rng};
use nsq_fuzz_checks as checks;

const DEFAULT_SEED: u64 = 0x6e73_712d_7273_2131;

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    let parsed = match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => v.parse(),
    };
    Some(parsed.unwrap_or_else(|_| panic!("{name}={v:?} is not a number")))
}

/// Runs `check` on `data`; on a panic reports where the input came from,
/// saves it, and lets the panic fail the test.
fn run(target: &str, check: fn(&[u8]), data: &[u8], origin: &str, file_tag: &str) {
    let Err(panic) = catch_unwind(AssertUnwindSafe(|| check(data))) else {
        return;
    };
    let saved = std::env::temp_dir().join(format!("fuzz-replay-{target}-{file_tag}"));
    let note = match std::fs::write(&saved, data) {
        Ok(()) => format!("saved as {}", saved.display()),
        Err(e) => format!("could not save it to {}: {e}", saved.display()),
    };
    eprintln!(
        "fuzz replay: {target} FAILED on {origin}\n  input ({} bytes): {}\n  {note}\n  \
         keep it: cp {} fuzz/regressions/{target}/<name>",
        data.len(),
        hex(data),
        saved.display(),
    );
    resume_unwind(panic);
}

/// Files of `dir` in name order (so runs are repeatable); none if it is
/// missing.
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    out.sort();
    out
}

/// Regressions, local corpus, seeds, then `iters` mutants of the seeds.
fn replay(target: &str, check: fn(&[u8]), seeds: Vec<Vec<u8>>, iters: u64) {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    // Resolved so a failure names `<repo>/fuzz/...`, not `../../fuzz/...`.
    let fuzz = fuzz.canonicalize().unwrap_or(fuzz);
    let mut replayed = 0usize;
    for sub in ["regressions", "corpus"] {
        for path in files(&fuzz.join(sub).join(target)) {
            let data =
                std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            let tag = format!("{sub}-{}", name.unwrap_or_default());
            run(target, check, &data, &path.display().to_string(), &tag);
            replayed += 1;
        }
    }
    for (i, s) in seeds.iter().enumerate() {
        run(target, check, s, &format!("seed #{i}"), &format!("seed{i}"));
    }
    let seed = env_u64("FUZZ_REPLAY_SEED").unwrap_or(DEFAULT_SEED);
    let iters = env_u64("FUZZ_REPLAY_ITERS").unwrap_or(iters);
    let mut rng = Rng::new(seed);
    for i in 0..iters {
        let data = mutant(&mut rng, &seeds);
        let origin = format!("FUZZ_REPLAY_SEED={seed:#x}, iteration {i}");
        run(target, check, &data, &origin, &format!("{seed:x}-{i}"));
    }
    eprintln!(
        "{target}: {replayed} files, {} seeds, {iters} mutants (seed {seed:#x})",
        seeds.len()
    );
}

// Default mutant counts: the whole file took 3.5-4.8 s wall on one core (debug
// build, `taskset -c 1`, a shared 2-core machine, 2026-12-03), well inside
// the ~10 s budget. Per 10 000 mutants: diskqueue_reader 4.8 s (files on
// tmpfs, fsyncs), snappy_deflate_decode 1.5 s, v2_command 0.6 s, the others
// 0.04-0.25 s; so 20 000 each, diskqueue_reader 4 000, snappy 10 000.

#[test]
fn v2_command() {
    replay(
        "v2_command",
        checks::v2_command::check,
        seeds::v2_command(),
        20_000,
    );
}

#[test]
fn identify_json() {
    replay(
        "identify_json",
        checks::identify_json::check,
        seeds::identify_json(),
        20_000,
    );
}

#[test]
fn mpub_body() {
    replay(
        "mpub_body",
        checks::mpub_body::check,
        seeds::mpub_body(),
        20_000,
    );
}

#[test]
fn http_mpub_text() {
    replay(
        "http_mpub_text",
        checks::http_mpub_text::check,
        seeds::http_mpub_text(),
        20_000,
    );
}

#[test]
fn http_mpub_binary() {
    replay(
        "http_mpub_binary",
        checks::http_mpub_binary::check,
        seeds::http_mpub_binary(),
        20_000,
    );
}

#[test]
fn diskqueue_reader() {
    replay(
        "diskqueue_reader",
        checks::diskqueue_reader::check,
        seeds::diskqueue_reader(),
        4_000,
    );
}

#[test]
fn lookupd_v1() {
    replay(
        "lookupd_v1",
        checks::lookupd_v1::check,
        seeds::lookupd_v1(),
        20_000,
    );
}

#[test]
fn snappy_deflate_decode() {
    replay(
        "snappy_deflate_decode",
        checks::snappy_deflate_decode::check,
        seeds::snappy_deflate_decode(),
        10_000,
    );
}

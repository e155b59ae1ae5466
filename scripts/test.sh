#!/usr/bin/env bash
# The single test command of this repository.
#
#   bash scripts/test.sh
#
# 1. checks formatting (cargo fmt --check, the workspace and fuzz/) and lints
#    (cargo clippy --workspace --all-targets -- -D warnings),
# 2. builds every binary (debug),
# 3. checks the systemd units in deploy/ (scripts/check_deploy.sh:
#    systemd-analyze verify where systemd is installed),
# 4. runs every Rust test of the workspace (unit tests, doc tests and the
#    black-box suites in tests/), the executables side by side since most of
#    them wait (scripts/suites.sh); first it starts the ~3.5-minute run of a
#    13-host cluster under faults in network namespaces (it needs root and
#    says SKIPPED without it), which runs while the rest build and run,
# 5. runs the Python interop tests (pynsq) against the freshly built nsqd,
# 6. runs nsqadmin in a real browser,
# 7. fuzzes every cargo-fuzz target for 5 s (FUZZ_BUILD=dev scripts/fuzz.sh 5) when a
#    nightly toolchain is installed (the targets are built at nice 19 beside
#    step 4); otherwise prints a SKIPPED line.
#
# What it installs, each announced before it is installed:
#   - Debian's strace (apt-get), when missing: tests/tests/durable_acks.rs
#   - the pinned Python packages of tests/python/requirements.txt, into
#     .venv/ in this repository (created if missing), before the Rust tests
#   - playwright-core from npm, into tests/browser/node_modules/, and Debian's
#     chromium (apt-get) when /usr/bin/chromium is missing
#   - cargo-fuzz (cargo install), into ~/.cargo/bin, when a nightly toolchain
#     exists and cargo-fuzz is missing
# Temporary files go to one directory made for the run and removed at its
# end (TMPDIR points there), so nothing is left in /tmp. The browser test's
# screenshots are kept in target/nsqadmin-screens/.
#
# Needs the Rust toolchain, Python 3 (3.11), Node.js and network access to
# crates.io, PyPI and npm. Exits non-zero on the first failure; prints each
# phase's wall time at the end.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
case "$TARGET" in /*) ;; *) TARGET="$ROOT/$TARGET" ;; esac

# Binaries the black-box tests start (tests/src/lib.rs and tests/python look here).
export NSQ_BIN_DIR="${NSQ_BIN_DIR:-$TARGET/debug}"

RUN_TMP="$(mktemp -d "${TMPDIR:-/tmp}/nsq-rs-test.XXXXXX")"
export TMPDIR="$RUN_TMP"
trap 'rm -rf "$RUN_TMP"' EXIT

STARTED=$SECONDS
TIMES=()
phase_start=$SECONDS
phase_name=""
# phase NAME: ends the previous phase (recording its wall time), starts NAME.
phase() {
    if [ -n "$phase_name" ]; then TIMES+=("$(printf '%5ds  %s' $((SECONDS - phase_start)) "$phase_name")"); fi
    phase_name="$1"
    phase_start=$SECONDS
    [ -z "$1" ] || echo "==> $1"
}

phase "cargo fmt --check"
cargo fmt --all -- --check
rustfmt --edition 2021 --check fuzz/fuzz_targets/*.rs

phase "cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

phase "cargo build --workspace --bins"
cargo build --workspace --bins

phase "systemd units (scripts/check_deploy.sh)"
bash scripts/check_deploy.sh "$NSQ_BIN_DIR"

# tests/tests/durable_acks.rs replays a trace of nsqd's system calls
if ! command -v strace >/dev/null; then
    echo "==> installing Debian's strace with apt-get (needed by tests/tests/durable_acks.rs)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq strace >/dev/null
fi

# before the Rust tests: the cluster test's pynsq consumer host needs it too
phase "pynsq into .venv"
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    echo "==> creating a Python virtualenv in $ROOT/.venv"
    "$PY" -m venv .venv
fi
echo "==> pip install: the pinned packages of tests/python/requirements.txt into $ROOT/.venv (from PyPI unless already there)"
.venv/bin/python -m pip install -q --disable-pip-version-check -r tests/python/requirements.txt

phase "cargo test: every test executable (scripts/suites.sh), the cluster under faults beside"
# The cluster under faults spends its ~3.5 minutes waiting out its faults'
# timeline, not computing: it starts first, and the other tests build
# (at nice 10, so its daemons keep their CPU) and run beside it (cargo
# holds no lock while tests run); its log is shown after them.
cargo test --workspace --test cluster_faults --no-run --quiet
CLUSTER_LOG="$RUN_TMP/cluster_faults.log"
setsid cargo test --workspace --test cluster_faults >"$CLUSTER_LOG" 2>&1 &
cluster_pid=$!
trap 'kill -TERM -- "-$cluster_pid" 2>/dev/null; rm -rf "$RUN_TMP"' EXIT
nice -n 10 cargo test --workspace --no-run --quiet
# The fuzz smoke run's build (its own workspace and target dir, nightly)
# takes ~2 CPU-minutes; at nice 19 it uses the cores the suites leave idle
# while they wait on sockets and timers, instead of adding its wall time
# at the end.
TOOLCHAINS="$(rustup toolchain list 2>/dev/null || true)"
FUZZ_LOG="$RUN_TMP/fuzz_build.log"
fuzz_pid=""
if grep -Eq '^nightly-[^0-9]' <<<"$TOOLCHAINS"; then
    FUZZ_BUILD=dev setsid nice -n 19 bash scripts/fuzz.sh --build-only >"$FUZZ_LOG" 2>&1 &
    fuzz_pid=$!
fi
trap 'kill -TERM -- "-$cluster_pid" 2>/dev/null; [ -z "$fuzz_pid" ] || kill -TERM -- "-$fuzz_pid" 2>/dev/null; rm -rf "$RUN_TMP"' EXIT
# Each executable side by side (most of them wait on sockets and timers):
# 80 s instead of 317 s one after another.
rc=0
bash scripts/suites.sh --skip cluster_faults || rc=$?
cluster_rc=0
wait "$cluster_pid" || cluster_rc=$?
trap '[ -z "$fuzz_pid" ] || kill -TERM -- "-$fuzz_pid" 2>/dev/null; rm -rf "$RUN_TMP"' EXIT
echo "==> tests/tests/cluster_faults (ran beside the suites above)"
cat "$CLUSTER_LOG"
if [ "$rc" -ne 0 ] || [ "$cluster_rc" -ne 0 ]; then
    echo "cargo test failed (suites: exit $rc, cluster_faults: exit $cluster_rc)" >&2
    exit 1
fi

phase "pytest tests/python (pynsq interop)"
.venv/bin/python -m pytest -q -p no:cacheprovider tests/python

phase "nsqadmin in a real browser (tests/browser/run.sh)"
rm -rf "$TARGET/nsqadmin-screens"
SCREENSHOT_DIR="$TARGET/nsqadmin-screens" bash tests/browser/run.sh

# Short fuzz smoke run: the fuzz targets (ASan, nightly, unoptimised: it
# checks they build and run, not how far they get; built beside the Rust
# tests, above) each run for 5 s
# from fuzz/corpus/; a crash fails the run (input left in
# fuzz/artifacts/). Longer runs: scripts/fuzz.sh 600 (see fuzz/README.md).
phase "fuzz smoke run (FUZZ_BUILD=dev scripts/fuzz.sh 5)"
if [ -n "$fuzz_pid" ]; then
    fuzz_rc=0
    wait "$fuzz_pid" || fuzz_rc=$?
    trap 'rm -rf "$RUN_TMP"' EXIT
    if [ "$fuzz_rc" -ne 0 ]; then
        cat "$FUZZ_LOG" >&2
        echo "the fuzz targets' build failed (exit $fuzz_rc)" >&2
        exit 1
    fi
    echo "==> fuzz targets built beside the Rust tests ($(grep -c Compiling "$FUZZ_LOG" || true) crates compiled)"
    FUZZ_BUILD=dev bash scripts/fuzz.sh 5
else
    echo "SKIPPED: fuzzing needs a nightly toolchain (rustup toolchain install nightly)"
fi

phase ""
echo
echo "==> all passed in $(((SECONDS - STARTED) / 60))m$(((SECONDS - STARTED) % 60))s; wall time per phase:"
printf '%s\n' "${TIMES[@]}"

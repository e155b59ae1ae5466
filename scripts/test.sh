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
# 4. builds every test executable, then runs the tests side by side, since
#    most of them wait on sockets and timers rather than compute: a
#    ~3.5-minute run of a 13-host cluster under faults in network
#    namespaces (it needs root and says SKIPPED without it), the Python
#    interop tests (pynsq), nsqadmin in a real browser, and every Rust test
#    executable of the workspace (unit tests, doc tests and the black-box
#    suites in tests/), eight at a time (scripts/suites.sh),
# 5. fuzzes every cargo-fuzz target for 5 s, two at a time (FUZZ_BUILD=dev
#    FUZZ_JOBS=2 scripts/fuzz.sh 5) when a nightly toolchain is installed
#    (the targets are built at nice 19 beside step 4); otherwise prints a
#    SKIPPED line.
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

# tests/tests/durable_acks.rs replays a trace of nsqd's system calls
if ! command -v strace >/dev/null; then
    echo "==> installing Debian's strace with apt-get (needed by tests/tests/durable_acks.rs)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq strace >/dev/null
fi
# The browser test's installs (Debian's chromium, npm's playwright-core;
# each announced as it starts) wait on the network and the disk, not the
# CPU, so they run while clippy and the build compile.
bash tests/browser/run.sh --install-only &
browser_install=$!

phase "cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

phase "cargo build --workspace --bins"
cargo build --workspace --bins

phase "systemd units (scripts/check_deploy.sh)"
bash scripts/check_deploy.sh "$NSQ_BIN_DIR"

# before the Rust tests: the cluster test's pynsq consumer host needs it too
phase "pynsq into .venv"
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    echo "==> creating a Python virtualenv in $ROOT/.venv"
    "$PY" -m venv .venv
fi
echo "==> pip install: the pinned packages of tests/python/requirements.txt into $ROOT/.venv (from PyPI unless already there)"
.venv/bin/python -m pip install -q --disable-pip-version-check -r tests/python/requirements.txt

phase "tests side by side: the cluster under faults, pytest, the browser, every Rust test executable"
# Most tests wait on sockets, timers and the daemons they start rather than
# compute, so once every test executable is built they run side by side:
# the ~3.5-minute cluster under faults (about 0.85 of a core), the pynsq
# interop tests (tests/python), nsqadmin in a real browser
# (tests/browser/run.sh; screenshots in target/nsqadmin-screens/) and every
# Rust test executable, eight at a time (scripts/suites.sh). The fuzz
# targets (their own workspace and target dir, nightly, ~2 CPU-minutes)
# build meanwhile on the CPU the tests leave idle. A background job's
# output is shown once it has ended.
BG_PIDS=()
BG_NAMES=()
# background NAME COMMAND...: runs COMMAND in its own process group, output to $RUN_TMP/NAME.log.
background() {
    local name="$1"
    shift
    setsid "$@" >"$RUN_TMP/$name.log" 2>&1 &
    BG_PIDS+=($!)
    BG_NAMES+=("$name")
}
# autogroup_nice PID N: once PID leads its own session (setsid has run),
# sets the nice of its scheduling group (/proc/PID/autogroup) to N.
autogroup_nice() {
    local i sid
    for i in $(seq 100); do
        sid="$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f4)"
        if [ "$sid" = "$1" ]; then
            echo "$2" >"/proc/$1/autogroup" 2>/dev/null || true
            return
        fi
        sleep 0.01
    done
}
cleanup() {
    local p
    for p in "${BG_PIDS[@]}"; do [ -z "$p" ] || kill -TERM -- "-$p" 2>/dev/null || true; done
    rm -rf "$RUN_TMP"
}
trap cleanup EXIT
# The browser test's installs, started before clippy, have finished.
if ! wait "$browser_install"; then
    echo "the browser test's installs failed (tests/browser/run.sh --install-only)" >&2
    exit 1
fi
TOOLCHAINS="$(rustup toolchain list 2>/dev/null || true)"
NIGHTLY=0
if grep -Eq '^nightly-[^0-9]' <<<"$TOOLCHAINS"; then
    NIGHTLY=1
    bash scripts/fuzz.sh --install-only
fi
cargo test --workspace --no-run --quiet
background cluster_faults cargo test --workspace --test cluster_faults
background pytest .venv/bin/python -m pytest -q -p no:cacheprovider tests/python
rm -rf "$TARGET/nsqadmin-screens"
background browser env SCREENSHOT_DIR="$TARGET/nsqadmin-screens" bash tests/browser/run.sh
fuzz_pid=""
if [ "$NIGHTLY" = 1 ]; then
    background fuzz_build env FUZZ_BUILD=dev nice -n 19 bash scripts/fuzz.sh --build-only
    fuzz_pid="${BG_PIDS[-1]}"
    # Its own session is its own scheduling group (autogroup), which the
    # kernel shares the CPU with as an equal of the tests' groups, whatever
    # the nice of the processes inside: the group itself gets nice 19.
    autogroup_nice "$fuzz_pid" 19
fi
rc=0
bash scripts/suites.sh --skip cluster_faults || rc=$?
failed=()
[ "$rc" -eq 0 ] || failed+=("Rust test executables")
for i in "${!BG_PIDS[@]}"; do
    [ "${BG_PIDS[$i]}" != "$fuzz_pid" ] || continue
    job_rc=0
    wait "${BG_PIDS[$i]}" || job_rc=$?
    BG_PIDS[i]=""
    echo "==> ${BG_NAMES[$i]} (ran beside the suites above): exit $job_rc"
    cat "$RUN_TMP/${BG_NAMES[$i]}.log"
    [ "$job_rc" -eq 0 ] || failed+=("${BG_NAMES[$i]}")
done
if [ "${#failed[@]}" -gt 0 ]; then
    echo "tests failed: ${failed[*]}" >&2
    exit 1
fi

# Short fuzz smoke run: the fuzz targets (ASan, nightly, unoptimised: it
# checks they build and run, not how far they get; built beside the tests
# above) each run for 5 s from fuzz/corpus/, two at a time; a crash fails
# the run (input left in fuzz/artifacts/). Longer runs: scripts/fuzz.sh 600
# (see fuzz/README.md).
phase "fuzz smoke run (FUZZ_BUILD=dev FUZZ_JOBS=2 scripts/fuzz.sh 5)"
if [ -n "$fuzz_pid" ]; then
    fuzz_rc=0
    wait "$fuzz_pid" || fuzz_rc=$?
    BG_PIDS=()
    if [ "$fuzz_rc" -ne 0 ]; then
        cat "$RUN_TMP/fuzz_build.log" >&2
        echo "the fuzz targets' build failed (exit $fuzz_rc)" >&2
        exit 1
    fi
    echo "==> fuzz targets built beside the tests ($(grep -c Compiling "$RUN_TMP/fuzz_build.log" || true) crates compiled)"
    FUZZ_BUILD=dev FUZZ_JOBS=2 bash scripts/fuzz.sh 5
else
    echo "SKIPPED: fuzzing needs a nightly toolchain (rustup toolchain install nightly)"
fi

phase ""
echo
echo "==> all passed in $(((SECONDS - STARTED) / 60))m$(((SECONDS - STARTED) % 60))s; wall time per phase:"
printf '%s\n' "${TIMES[@]}"

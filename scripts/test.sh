#!/usr/bin/env bash
# The single test command of this repository.
#
#   bash scripts/test.sh
#
# 1. checks formatting (cargo fmt --check, the workspace and fuzz/), the
#    imports between files (scripts/house.py: no circles; nsqd's rooms as
#    docs/architecture/nsqd.json draws them) and lints
#    (cargo clippy --workspace --all-targets -- -D warnings),
# 2. builds every binary (debug),
# 3. checks the systemd units in deploy/ (scripts/check_deploy.sh:
#    systemd-analyze verify where systemd is installed), then what
#    docs/deploying.md ships, each a phase: the container image built from
#    the Containerfile and its daemons run in containers
#    (scripts/check_image.sh), the Debian package installed into a
#    throwaway root (scripts/check_package.sh), the Prometheus alerts'
#    unit tests and a real Prometheus scraping a cluster
#    (scripts/check_monitoring.sh); each says SKIPPED where it cannot run,
# 4. builds every test executable, then runs the tests side by side, since
#    most of them wait on sockets and timers rather than compute: a
#    ~3.5-minute run of a 13-host cluster under faults in network
#    namespaces (it needs root and says SKIPPED without it), the Python
#    interop tests (pynsq), nsqadmin in a real browser, and every Rust test
#    executable of the workspace, eight at a time (scripts/suites.sh): unit
#    tests, doc tests, the black-box suites in tests/ (tests/tests/docs:
#    the runnable commands of README.md and docs/), and the fuzz
#    targets' checks replayed on stable (crates/fuzz-checks;
#    coverage-guided fuzzing is scripts/fuzz.sh, on nightly: see
#    fuzz/README.md).
#
# What it installs, each announced before it is installed:
#   - Debian's strace (apt-get), when missing: tests/tests/durable_acks.rs
#   - Debian's openssl and curl (apt-get), when missing: tests/tests/docs,
#     which runs the commands of README.md and docs/
#   - Debian's podman, runc, prometheus (with promtool) and python3-yaml
#     (apt-get), when missing: scripts/check_image.sh, check_monitoring.sh
#   - the pinned Python packages of tests/python/requirements.txt, into
#     .venv/ in this repository (created if missing), before the Rust tests
#   - playwright-core from npm, into tests/browser/node_modules/, and Debian's
#     chromium (apt-get) when /usr/bin/chromium is missing
#   - nsqjs from npm (pinned in tests/node/package-lock.json), into
#     tests/node/node_modules/: tests/tests/replication/clients.rs runs an
#     unmodified nsqjs Reader
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

# no circle of files importing each other in any crate, and nsqd's picture
# of its rooms (docs/architecture.md) held against its imports
phase "the house: imports against docs/architecture/nsqd.json (scripts/house.py)"
python3 scripts/house.py --check docs/architecture/nsqd.json

# tests/tests/durable_acks.rs replays a trace of nsqd's system calls
if ! command -v strace >/dev/null; then
    echo "==> installing Debian's strace with apt-get (needed by tests/tests/durable_acks.rs)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq strace >/dev/null
fi
# tests/tests/docs runs the docs' commands, which use curl, and openssl for a certificate
if ! command -v openssl >/dev/null || ! command -v curl >/dev/null; then
    echo "==> installing Debian's openssl and curl with apt-get (needed by tests/tests/docs)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl curl >/dev/null
fi
# the deployment checks: the image (podman, and runc as its runtime), the
# alerts (promtool, prometheus), the YAML they read (python3-yaml)
if ! command -v podman >/dev/null || ! command -v runc >/dev/null || ! command -v promtool >/dev/null ||
    ! command -v prometheus >/dev/null || ! /usr/bin/python3 -c 'import yaml' 2>/dev/null; then
    echo "==> installing Debian's podman, runc, prometheus and python3-yaml with apt-get (needed by scripts/check_image.sh and scripts/check_monitoring.sh)"
    # Debian's prometheus starts its service when installed; the checks run
    # their own, so a policy-rc.d keeps the packages' services from starting
    # (and a machine's own policy, if it has one, is left as it was).
    no_start=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && no_start=1
    fi
    apt_rc=0
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        podman runc prometheus python3-yaml >/dev/null; } || apt_rc=$?
    [ -z "$no_start" ] || rm -f /usr/sbin/policy-rc.d
    [ "$apt_rc" -eq 0 ] || exit "$apt_rc"
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
phase "container image (scripts/check_image.sh)"
bash scripts/check_image.sh "$NSQ_BIN_DIR"
phase "Debian package (scripts/check_package.sh)"
bash scripts/check_package.sh "$NSQ_BIN_DIR"
phase "Prometheus alerts and scrape (scripts/check_monitoring.sh)"
bash scripts/check_monitoring.sh "$NSQ_BIN_DIR"

# before the Rust tests: the cluster test's pynsq consumer host needs it too
phase "pynsq into .venv, nsqjs into tests/node"
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    echo "==> creating a Python virtualenv in $ROOT/.venv"
    "$PY" -m venv .venv
fi
echo "==> pip install: the pinned packages of tests/python/requirements.txt into $ROOT/.venv (from PyPI unless already there)"
.venv/bin/python -m pip install -q --disable-pip-version-check -r tests/python/requirements.txt

# the replication suite's real-client test runs an nsqjs Reader
# (tests/tests/replication/clients.rs)
if [ ! -d tests/node/node_modules/nsqjs ]; then
    echo "==> installing nsqjs from npm into $ROOT/tests/node/node_modules (tests/node/package-lock.json)"
    (cd tests/node && npm ci --no-audit --no-fund)
fi

phase "cargo test --workspace --no-run (every test executable)"
# Most tests wait on sockets, timers and the daemons they start rather than
# compute, so once every test executable is built they run side by side:
# the ~3.5-minute cluster under faults (about 0.85 of a core), the pynsq
# interop tests (tests/python), nsqadmin in a real browser
# (tests/browser/run.sh; screenshots in target/nsqadmin-screens/) and every
# Rust test executable, eight at a time (scripts/suites.sh). A background
# job's output is shown once it has ended.
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
cleanup() {
    local rc=$? p
    for p in "${BG_PIDS[@]}"; do [ -z "$p" ] || kill -TERM -- "-$p" 2>/dev/null || true; done
    rm -rf "$RUN_TMP"
    if [ "$rc" -ne 0 ] && [ -n "$phase_name" ]; then
        phase ""
        echo "==> failed after $((SECONDS - STARTED)) s; wall time per phase:" >&2
        printf '%s\n' "${TIMES[@]}" >&2
    fi
}
trap cleanup EXIT
# The browser test's installs, started before clippy, have finished.
if ! wait "$browser_install"; then
    echo "the browser test's installs failed (tests/browser/run.sh --install-only)" >&2
    exit 1
fi
cargo test --workspace --no-run --quiet
phase "tests side by side: the cluster under faults, pytest, the browser, every Rust test executable"
# One test after the other: the cluster under faults judges recovery times,
# and the replicated topic's leader loss would load the same two cores.
# The cluster under faults judges how soon consumers receive again against
# wall-clock bounds; everything beside it judges correctness with generous
# timeouts. So the others run at a lower priority (nice 10): they use the
# cores the cluster leaves idle, and cannot starve its daemons during a
# recovery (a CI run whose cluster got a quarter of its usual throughput
# while the suites peaked measured 9.4 s against 8).
background cluster_faults cargo test --workspace --test cluster_faults -- --test-threads=1
background pytest nice -n 10 .venv/bin/python -m pytest -q -p no:cacheprovider tests/python
rm -rf "$TARGET/nsqadmin-screens"
background browser env SCREENSHOT_DIR="$TARGET/nsqadmin-screens" nice -n 10 bash tests/browser/run.sh
rc=0
nice -n 10 bash scripts/suites.sh --skip cluster_faults || rc=$?
failed=()
[ "$rc" -eq 0 ] || failed+=("Rust test executables")
for i in "${!BG_PIDS[@]}"; do
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

phase ""
echo
echo "==> all passed in $(((SECONDS - STARTED) / 60))m$(((SECONDS - STARTED) % 60))s; wall time per phase:"
printf '%s\n' "${TIMES[@]}"

#!/usr/bin/env bash
# The single test command of this repository.
#
#   bash scripts/test.sh
#
# 1. checks formatting (cargo fmt --check, the workspace and fuzz/) and lints
#    (cargo clippy --workspace --all-targets -- -D warnings),
# 2. builds every binary (debug),
# 3. runs every Rust test of the workspace (unit tests + black-box suites in tests/;
#    installs Debian's strace first when missing, for tests/tests/durable_acks.rs),
# 4. creates .venv (if missing), installs the pinned Python test deps quietly,
# 5. runs the Python interop tests (pynsq) against the freshly built nsqd,
# 6. runs nsqadmin in a real browser,
# 7. fuzzes every cargo-fuzz target for 10 s (scripts/fuzz.sh 10) when a
#    nightly toolchain is installed; otherwise prints a SKIPPED line.
#
# Needs only the Rust toolchain, Python 3 (3.11) and network access to crates.io/PyPI.
# Exits non-zero on the first failure.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# Binaries the black-box tests start (tests/src/lib.rs and tests/python look here).
export NSQ_BIN_DIR="${NSQ_BIN_DIR:-${CARGO_TARGET_DIR:-$ROOT/target}/debug}"

echo "==> cargo fmt --check"
cargo fmt --all -- --check
rustfmt --edition 2021 --check fuzz/fuzz_targets/*.rs

echo "==> cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

echo "==> cargo build --workspace --bins"
cargo build --workspace --bins

# tests/tests/durable_acks.rs replays a trace of nsqd's system calls
if ! command -v strace >/dev/null; then
    echo "==> installing Debian's strace (needed by tests/tests/durable_acks.rs)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq strace >/dev/null
fi

echo "==> cargo test --workspace --no-fail-fast"
cargo test --workspace --no-fail-fast

PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    echo "==> creating .venv"
    "$PY" -m venv .venv
fi
echo "==> pip install -r tests/python/requirements.txt"
.venv/bin/python -m pip install -q --disable-pip-version-check -r tests/python/requirements.txt

echo "==> pytest tests/python"
.venv/bin/python -m pytest -q tests/python

echo "==> nsqadmin in a real browser (tests/browser/run.sh)"
SCREENSHOT_DIR="$(mktemp -d /tmp/nsqadmin-screens.XXXXXX)" bash tests/browser/run.sh

# Short fuzz smoke run: builds the fuzz targets (ASan, nightly) and runs each
# for 10 s from fuzz/corpus/; a crash fails the run (input left in
# fuzz/artifacts/). Longer runs: scripts/fuzz.sh 600 (see fuzz/README.md).
echo "==> fuzz smoke run (scripts/fuzz.sh 10)"
TOOLCHAINS="$(rustup toolchain list 2>/dev/null || true)"
if grep -Eq '^nightly-[^0-9]' <<<"$TOOLCHAINS"; then
    bash scripts/fuzz.sh 10
else
    echo "SKIPPED: fuzzing needs a nightly toolchain (rustup toolchain install nightly)"
fi

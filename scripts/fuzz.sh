#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/ for SECONDS each (default 60), one at
# a time on one core (FUZZ_JOBS=N: N at a time). Installs cargo-fuzz if missing; needs a nightly
# toolchain (rustup toolchain install nightly). Exits non-zero as soon as a
# target crashes; the crashing input and the run's log are left in
# fuzz/artifacts/<target>/. Nothing else is left behind.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#   scripts/fuzz.sh --build-only     (builds the targets, runs none)
#   scripts/fuzz.sh --install-only   (installs cargo-fuzz if missing, nothing else)
#
# FUZZ_BUILD=dev builds the targets unoptimised (cargo fuzz's --dev): 40% of
# the release build's CPU time, for smoke runs (the test command's); the
# default is an optimised build with debug assertions, for real fuzzing.
set -euo pipefail

BUILD_ONLY=0
INSTALL_ONLY=0
if [ "${1:-}" = "--build-only" ]; then BUILD_ONLY=1; shift; fi
if [ "${1:-}" = "--install-only" ]; then INSTALL_ONLY=1; shift; fi
SECONDS_EACH="${1:-60}"
shift || true
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT/fuzz"

if ! command -v cargo-fuzz >/dev/null 2>&1; then
    # --debug: it only drives cargo, and an unoptimised build takes a
    # fraction of the CPU.
    echo "==> installing cargo-fuzz (cargo install --locked --debug cargo-fuzz, into ${CARGO_HOME:-$HOME/.cargo}/bin)" >&2
    cargo install --locked --debug cargo-fuzz
fi
if [ "$INSTALL_ONLY" = 1 ]; then exit 0; fi
LOGS="$(mktemp -d "${TMPDIR:-/tmp}/nsq-fuzz.XXXXXX")"
trap 'rm -rf "$LOGS"' EXIT
TOOLCHAIN="${FUZZ_TOOLCHAIN:-nightly}"
case "${FUZZ_BUILD:-release}" in
    release) BUILD_FLAGS=(-a) ;;
    dev) BUILD_FLAGS=(-D) ;;
    *) echo "fuzz.sh: FUZZ_BUILD must be release or dev" >&2; exit 2 ;;
esac

if [ "$#" -gt 0 ]; then
    TARGETS=("$@")
else
    mapfile -t TARGETS < <(cargo "+$TOOLCHAIN" fuzz list)
fi

cargo "+$TOOLCHAIN" fuzz build "${BUILD_FLAGS[@]}"
if [ "$BUILD_ONLY" = 1 ]; then exit 0; fi

# fuzz_one TARGET: runs TARGET for SECONDS_EACH, prints its summary; on a
# crash keeps the input and log in fuzz/artifacts/TARGET/ and fails.
fuzz_one() {
    local t="$1" log="$LOGS/$1.log" rc=0
    mkdir -p "corpus/$t"
    cargo "+$TOOLCHAIN" fuzz run "${BUILD_FLAGS[@]}" "$t" "corpus/$t" -- \
        -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 -timeout=10 \
        -print_final_stats=1 >"$log" 2>&1 || rc=$?
    {
        echo "=== $t: ${SECONDS_EACH}s ==="
        grep -E '^(#[0-9]+ +DONE|Done [0-9]+ runs|stat::number_of_executed_units|SUMMARY|==[0-9]+==ERROR)' "$log" || true
    } >"$LOGS/$t.summary"
    if [ "$rc" -ne 0 ]; then
        tail -n 40 "$log" >>"$LOGS/$t.summary"
        mkdir -p "artifacts/$t"
        cp "$log" "artifacts/$t/fuzz.log"
        echo "fuzz.sh: $t CRASHED (exit $rc); input and log in fuzz/artifacts/$t/" >>"$LOGS/$t.summary"
        return 1
    fi
}

# FUZZ_JOBS targets at a time (default 1: each run gets a core to itself).
# No new target starts after a crash.
JOBS="${FUZZ_JOBS:-1}"
status=0
pids=()
names=()
for t in "${TARGETS[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || status=1; done
    [ "$status" -eq 0 ] || break
    fuzz_one "$t" &
    pids+=($!)
    names+=("$t")
done
for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || status=1
    cat "$LOGS/${names[$i]}.summary"
done
exit "$status"

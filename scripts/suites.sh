#!/usr/bin/env bash
# Runs every test executable of the workspace side by side.
#
#   bash scripts/suites.sh [--skip NAME]...
#
# `cargo test` runs its test executables one after another, and here most
# of them wait: on sockets, timers and the daemons they start (the
# workspace's suites took 317 s one by one for 31 CPU-seconds, 2026-12-02).
# This script builds them (`cargo test --workspace --no-run`), then runs
# them SUITE_JOBS at a time (default 8), the slowest known ones first, the
# heavy ones (HEAVY below) one after another in one of those slots, and
# the doc tests beside them. Each executable runs in its package's
# directory, as cargo runs it, with its default test threads. A suite's
# output is printed whole when it fails; a passing one prints how many of
# its tests passed. Exits non-zero if any suite failed, after all ran.
#
# --skip NAME leaves out the test target NAME (for example cluster_faults,
# which scripts/test.sh starts on its own beforehand). Extra cargo flags
# for the build: CARGO_TEST_FLAGS.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

SKIP=()
while [ $# -gt 0 ]; do
    case "$1" in
    --skip) SKIP+=("$2"); shift 2 ;;
    *) echo "usage: $0 [--skip NAME]..." >&2; exit 2 ;;
    esac
done
JOBS="${SUITE_JOBS:-8}"
# The longest suites measured (one by one, idle): nsqd_tcp 77 s, faults
# 32 s, hostile 22 s, then 10-18 s each; starting them first keeps the
# last one from starting late.
SLOW_FIRST=(nsqd_tcp faults hostile tls_cluster nsqd_durability nsq_diskqueue replication nsqadmin http_access)
# Suites that load the machine in bursts (long_defer: 47 MiB of deferred
# messages spilled to disk and read back; load: 2,000 connections and
# 40,000 deliveries) run one after the other in a slot of their own,
# started first: side by side with each other and everything else, a
# fresh-clone run saw both time out waiting for nsqd's answers.
HEAVY=(long_defer load)

OUT="$(mktemp -d "${TMPDIR:-/tmp}/nsq-rs-suites.XXXXXX")"
trap 'rm -rf "$OUT"' EXIT

# One line per test executable: id (package/kind/target), executable, package directory.
# shellcheck disable=SC2086
cargo test --workspace --no-run --message-format=json ${CARGO_TEST_FLAGS:-} >"$OUT/build.json"
python3 - "$OUT/build.json" "${SKIP[@]}" >"$OUT/list" <<'PY'
import json, os, sys
path, skip = sys.argv[1], set(sys.argv[2:])
for line in open(path):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable") or not m["profile"]["test"]:
        continue
    name = m["target"]["name"]
    if name in skip:
        continue
    pkg = os.path.basename(os.path.dirname(m["manifest_path"]))
    print(f'{pkg}/{m["target"]["kind"][0]}/{name}', m["executable"], os.path.dirname(m["manifest_path"]))
PY

# The heavy ones in their lane; the slowest of the rest first, then the
# rest in cargo's order.
heavy=()
for name in "${HEAVY[@]}"; do
    while read -r id exe dir; do
        [ "${id##*/}" = "$name" ] && heavy+=("$id $exe $dir")
    done <"$OUT/list"
done
ordered=()
for slow in "${SLOW_FIRST[@]}"; do
    while read -r id exe dir; do
        [ "${id##*/}" = "$slow" ] && ordered+=("$id $exe $dir")
    done <"$OUT/list"
done
while read -r id exe dir; do
    found=0
    for name in "${SLOW_FIRST[@]}" "${HEAVY[@]}"; do [ "${id##*/}" = "$name" ] && found=1; done
    [ "$found" = 1 ] || ordered+=("$id $exe $dir")
done <"$OUT/list"

# run_one ID COMMAND...: runs in the background-job slot, records log, status, seconds.
run_one() {
    local id="$1" key
    shift
    key="${id//\//_}"
    local started=$SECONDS rc=0
    "$@" >"$OUT/$key.log" 2>&1 || rc=$?
    echo "$rc $((SECONDS - started))" >"$OUT/$key.rc"
}

# counts LOG: "N passed, M ignored" summed over the log's `test result` lines
# (the doc tests print one per crate).
counts() {
    awk '/^test result/ { for (i = 1; i < NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^ignored/) g += $i } }
         END { printf "%d passed, %d ignored", p, g }' "$1"
}

report() {
    local id="$1" key rc secs
    key="${id//\//_}"
    read -r rc secs <"$OUT/$key.rc"
    if [ "$rc" -eq 0 ]; then
        printf '%4ds ok    %s: %s\n' "$secs" "$id" "$(counts "$OUT/$key.log")"
    else
        printf '%4ds FAIL  %s (exit %s):\n' "$secs" "$id" "$rc"
        cat "$OUT/$key.log"
        echo "---- end of $id"
        failed+=("$id")
    fi
}

started=$SECONDS
failed=()
running=()
reported=()
# Reports every finished suite not reported yet.
drain() {
    local id key
    for id in "${running[@]}"; do
        key="${id//\//_}"
        if [ -e "$OUT/$key.rc" ] && [[ " ${reported[*]} " != *" $id "* ]]; then
            report "$id"
            reported+=("$id")
        fi
    done
}

run_one "doc-tests" cargo test --workspace --doc --quiet ${CARGO_TEST_FLAGS:-} &
running+=("doc-tests")
# The heavy lane: one job slot, its suites one at a time.
(
    for entry in "${heavy[@]}"; do
        read -r id exe dir <<<"$entry"
        run_one "$id" bash -c 'cd "$1" && exec "$2"' _ "$dir" "$exe"
    done
) &
for entry in "${heavy[@]}"; do
    read -r id _ <<<"$entry"
    running+=("$id")
done
for entry in "${ordered[@]}"; do
    read -r id exe dir <<<"$entry"
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do
        wait -n || true
        drain
    done
    run_one "$id" bash -c 'cd "$1" && exec "$2"' _ "$dir" "$exe" &
    running+=("$id")
done
wait
drain

echo "==> ${#running[@]} test executables in $((SECONDS - started)) s, $JOBS at a time"
if [ "${#failed[@]}" -gt 0 ]; then
    echo "FAILED: ${failed[*]}" >&2
    exit 1
fi

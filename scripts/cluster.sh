#!/usr/bin/env bash
# NSQ as a cluster of hosts under faults, with an account of every message
# (issue 18; docs/reliability.md section 9). Runs the black-box test
# tests/tests/cluster_faults: 3 nsqlookupds, 5 nsqds (+1 joining) each with
# a local producer, 4 consumer hosts (one on pynsq), nsqadmin, each host a
# network namespace on a private bridge the test creates and removes.
#
#   bash scripts/cluster.sh             # short run: every fault once (~3 min; the test command runs this)
#   bash scripts/cluster.sh 1800        # long run: 30 minutes of faults in random rounds
#   NSQ_GO_BIN_DIR=/path/to/nsq-1.3.0/bin bash scripts/cluster.sh 1800
#                                       # the same run, then again with NSQ 1.3.0's Go daemons
#
# Other knobs (see tests/tests/cluster_faults/main.rs): NSQ_CLUSTER_SEED,
# NSQ_CLUSTER_RATE, NSQ_CLUSTER_KEEP=1 (keep logs, ledgers and data).
# Reports go to $CARGO_TARGET_DIR/cluster/report-{nsq-rs,go}.md (Markdown).
# Needs root. The test removes its namespaces and processes on exit, panic,
# SIGINT/SIGTERM, and (through a watchdog) if it is killed; this script
# only checks that nothing was left.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

SECS="${1:-0}"
[ "$(id -u)" = 0 ] || { echo "scripts/cluster.sh needs root (network namespaces)" >&2; exit 1; }

TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
OUT="$TARGET/cluster"
mkdir -p "$OUT"

cargo build --bin nsqd --bin nsqlookupd --bin nsqadmin --bin nsq_ledger
cargo test -p nsq-tests --test cluster_faults --no-run

PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -r tests/python/requirements.txt

leftovers() {
    local left
    left="$(ip netns list | awk '{print $1}' | grep '^nsqc' || true)"
    if [ -n "$left" ]; then
        echo "WARNING: namespaces left behind: $left" >&2
    fi
}
trap leftovers EXIT

run() { # $1 = report name, $2 = daemon directory
    echo "== cluster under faults: $1 (daemons from $2, ${SECS}s of faults; 0 = short run)"
    NSQ_BIN_DIR="$2" NSQ_CLUSTER_FAULT_SECS="$SECS" NSQ_CLUSTER_REPORT="$OUT/report-$1.md" \
        cargo test -p nsq-tests --test cluster_faults -- --exact cluster_under_faults --nocapture
}

status=0
run nsq-rs "$TARGET/debug" || status=$?
if [ -n "${NSQ_GO_BIN_DIR:-}" ]; then
    # Go's daemons are judged by the same bounds but do not fail the script:
    # the point is the comparison (same seed = same schedule of faults).
    NSQ_CLUSTER_JUDGE=0 run go "$NSQ_GO_BIN_DIR" || true
    echo "== side by side"
    cat "$OUT/report-nsq-rs.md" "$OUT/report-go.md" 2>/dev/null || true
fi
exit "$status"

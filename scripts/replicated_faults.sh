#!/usr/bin/env bash
# A replicated topic (replicas=3 on 5 nsqd members: a group of three, two
# members outside it; MEMBERS=3 for 3 members) under faults on the
# namespace cluster, with an account of every acknowledged message
# (docs/replication.md, "Proof"). Runs the black-box test
# tests/tests/cluster_faults/replicated.rs.
#
#   bash scripts/replicated_faults.sh        # the short plan (~2.5 min; the test command runs it)
#   bash scripts/replicated_faults.sh 1800   # 30 minutes of random rounds: the leader cut off,
#                                            # paused, lost with its disk and replaced, a follower
#                                            # lost and replaced, two of three lost
#
# MEMBERS=3 runs it on three members (the topic on all of them).
# NSQ_REPLICATED_SEED=N repeats a schedule. The report goes to
# $CARGO_TARGET_DIR/cluster/report-replicated.md. Needs root (network
# namespaces); the test removes its namespaces and processes when it ends.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

SECS="${1:-0}"
[ "$(id -u)" = 0 ] || { echo "scripts/replicated_faults.sh needs root (network namespaces)" >&2; exit 1; }

TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
OUT="$TARGET/cluster"
mkdir -p "$OUT"

cargo build --bin nsqd --bin nsqlookupd --bin nsq_ledger
cargo test -p nsq-tests --test cluster_faults --no-run

PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -r tests/python/requirements.txt

NSQ_BIN_DIR="$TARGET/debug" NSQ_REPLICATED_FAULT_SECS="$SECS" \
    NSQ_REPLICATED_MEMBERS="${MEMBERS:-5}" \
    NSQ_REPLICATED_REPORT="$OUT/report-replicated.md" \
    cargo test -p nsq-tests --test cluster_faults -- --exact \
    replicated::replicated_topic_survives_losing_its_leader --nocapture
echo "report: $OUT/report-replicated.md"

#!/usr/bin/env bash
# Longer local runs of the reliability suites (docs/reliability.md).
#
#   bash scripts/crash.sh [CYCLES] [HOSTILE_N] [TERM_CYCLES]
#
# 1. builds nsqd, nsqlookupd and nsqadmin (debug),
# 2. runs the SIGKILL crash-cycle test with NSQ_CRASH_CYCLES=CYCLES (default 100):
#    nsqd --mem-queue-size=0 --sync-every=1 under PUB load, SIGKILL, restart,
#    consume: every acknowledged message must come back,
# 3. runs the hostile-input test with NSQ_HOSTILE_N=HOSTILE_N garbage payloads
#    per port (default 10000),
# 4. runs the clean SIGTERM-cycle test with NSQ_TERM_CYCLES=TERM_CYCLES
#    (default 100): PUB/MPUB/DPUB, a consumer that FINs, holds in flight and
#    REQueues, SIGTERM (exit 0), restart on the same data path; at the end
#    everything not FINed is delivered and nothing FINed comes back.
# Exits non-zero on the first failure. Figures are printed (--nocapture).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

CYCLES="${1:-100}"
HOSTILE_N="${2:-10000}"
TERM_CYCLES="${3:-100}"
export NSQ_BIN_DIR="${NSQ_BIN_DIR:-${CARGO_TARGET_DIR:-$ROOT/target}/debug}"

cargo build --bin nsqd --bin nsqlookupd --bin nsqadmin

echo "== SIGKILL cycles: $CYCLES"
NSQ_CRASH_CYCLES="$CYCLES" cargo test -p nsq-tests --test faults \
    sigkill_cycles_under_publish_load_lose_no_acknowledged_message -- --exact --nocapture

echo "== hostile input: $HOSTILE_N payloads per port"
NSQ_HOSTILE_N="$HOSTILE_N" cargo test -p nsq-tests --test hostile -- --nocapture

echo "== SIGTERM cycles: $TERM_CYCLES"
NSQ_TERM_CYCLES="$TERM_CYCLES" cargo test -p nsq-tests --test faults \
    sigterm_cycles_under_consumer_lose_nothing_and_redeliver_only_unfinished -- --exact --nocapture

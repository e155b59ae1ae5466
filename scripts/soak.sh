#!/usr/bin/env bash
# Soak run of nsqd (docs/reliability.md, guarantee "Load and soak").
#
#   bash scripts/soak.sh [SECS] [RATE]
#
# Builds nsqd (debug) and runs tests/tests/load.rs::soak_mixed (ignored by
# default) for SECS seconds (default 600) at RATE messages/s (default 100):
# steady PUB/MPUB, consumers that FIN most messages, REQ some and let some
# time out (msg_timeout 1000 via IDENTIFY). At the end every published body
# must have been FINed on every channel and nsqd's RSS must be flat (end
# within max(10 MiB, 25 %) of the RSS after a 10 s warm-up). RSS is printed
# every 10 s (--nocapture).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

SECS="${1:-600}"
RATE="${2:-100}"
export NSQ_BIN_DIR="${NSQ_BIN_DIR:-${CARGO_TARGET_DIR:-$ROOT/target}/debug}"

cargo build --bin nsqd

echo "== soak: ${SECS}s at ${RATE} msg/s"
NSQ_SOAK_SECS="$SECS" NSQ_SOAK_RATE="$RATE" cargo test -p nsq-tests --test load \
    soak_mixed -- --exact --ignored --nocapture

#!/usr/bin/env bash
# How long a newcomer waits: a fresh clone of this repository's HEAD with an
# empty target/, `bash scripts/quickstart.sh` on free ports, a /pub, then
# `nsq_tail -n 1` through nsqlookupd; prints the seconds from the start to
# "running" and to the message consumed. Measure on an idle machine.
#
#   bash scripts/quickstart_time.sh [clone-dir]   (default: a new temp dir, removed after)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${1:-$(mktemp -d "${TMPDIR:-/tmp}/quickstart-time.XXXXXX")}"
[ -n "${1:-}" ] || trap 'rm -rf "$DIR"' EXIT
BASE="${QUICKSTART_TIME_PORT_BASE:-24150}"
git clone -q "$ROOT" "$DIR/nsq-rs"
cd "$DIR/nsq-rs"
unset CARGO_TARGET_DIR NSQ_BIN_DIR
LOG="$DIR/quickstart.log"
start=$(date +%s.%N)
# setsid: a background job of a non-interactive shell ignores SIGINT, so the
# script is stopped with SIGTERM to its own process group
setsid bash scripts/quickstart.sh --data "$DIR/data" \
    --nsqlookupd-tcp-port $((BASE + 10)) --nsqlookupd-http-port $((BASE + 11)) \
    --nsqd-tcp-port "$BASE" --nsqd-http-port $((BASE + 1)) \
    --nsqadmin-http-port $((BASE + 21)) >"$LOG" 2>&1 &
qs=$!
stop() { kill -TERM -- "-$qs" 2>/dev/null || true; wait "$qs" 2>/dev/null || true; }
until grep -q '==> running' "$LOG"; do
    if ! kill -0 "$qs" 2>/dev/null; then cat "$LOG" >&2; echo "quickstart.sh exited before running" >&2; exit 1; fi
    sleep 0.5
done
running=$(date +%s.%N)
curl -sf -d 'hello world 1' "http://127.0.0.1:$((BASE + 1))/pub?topic=test" >/dev/null
got=$(timeout 60 target/quick/nsq_tail --lookupd-http-address=127.0.0.1:$((BASE + 11)) --topic=test -n 1 2>/dev/null) || true
done_at=$(date +%s.%N)
stop
[ "$got" = "hello world 1" ] || { echo "nsq_tail did not print the message (got: $got)" >&2; exit 1; }
awk -v s="$start" -v r="$running" -v d="$done_at" \
    'BEGIN { printf "running after %.0f s; first message consumed after %.0f s (%d min %02d s)\n", r - s, d - s, int((d - s) / 60), int(d - s) % 60 }'

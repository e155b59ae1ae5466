#!/usr/bin/env bash
# The quick-start cluster in the foreground: nsqlookupd, one nsqd registered
# with it, and nsqadmin on :4171 (each once its binary exists). Ctrl-C stops
# them all cleanly (SIGTERM to each, then wait).
#
#   bash scripts/quickstart.sh
#
# Ports are NSQ's defaults (nsqlookupd 4160/4161, nsqd 4150/4151, nsqadmin
# 4171), on 127.0.0.1 only: this is a local cluster. Data goes to
# ${NSQ_DATA:-./nsq-data}.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# Only the three daemons: the release profile links with fat LTO, which
# costs minutes per binary on a first build.
echo "==> building nsqd, nsqlookupd, nsqadmin (release; the first build takes a few minutes)"
cargo build --release --bin nsqd --bin nsqlookupd --bin nsqadmin
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release"
DATA="${NSQ_DATA:-$ROOT/nsq-data}"
mkdir -p "$DATA"

pids=()
stop() {
    trap - INT TERM EXIT
    echo
    echo "==> stopping"
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    exit 0
}
trap stop INT TERM EXIT

lookupd_args=()
if [ -x "$BIN/nsqlookupd" ]; then
    "$BIN/nsqlookupd" --tcp-address=127.0.0.1:4160 --http-address=127.0.0.1:4161 --broadcast-address=127.0.0.1 &
    pids+=($!)
    lookupd_args=(--lookupd-tcp-address=127.0.0.1:4160)
fi
"$BIN/nsqd" --tcp-address=127.0.0.1:4150 --http-address=127.0.0.1:4151 --https-address=127.0.0.1:4152 \
    --data-path="$DATA" --broadcast-address=127.0.0.1 "${lookupd_args[@]}" &
pids+=($!)
if [ -x "$BIN/nsqadmin" ] && [ -x "$BIN/nsqlookupd" ]; then
    "$BIN/nsqadmin" --http-address=127.0.0.1:4171 --lookupd-http-address=127.0.0.1:4161 &
    pids+=($!)
fi
sleep 1
echo "==> running: nsqd 4150/4151${lookupd_args:+, nsqlookupd 4160/4161}$( [ -x "$BIN/nsqadmin" ] && echo ', nsqadmin http://127.0.0.1:4171' ). Ctrl-C stops."
echo "    try: curl -d 'hello world 1' 'http://127.0.0.1:4151/pub?topic=test'"
wait -n "${pids[@]}" || true
stop

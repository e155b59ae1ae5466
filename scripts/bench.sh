#!/usr/bin/env bash
# Throughput / latency / memory baseline of nsq-rs nsqd, driven by nsq_bench.
#
#   bash scripts/bench.sh
#
# 1. builds nsqd and nsq_bench with the release profile (fat LTO, as shipped),
# 2. starts nsqd on free 127.0.0.1 ports, temp --data-path, --mem-queue-size=1000000,
# 3. creates the topics and channels over HTTP,
# 4. pub (RUNFOR) then sub (RUNFOR, or until the published backlog is drained)
#    with writers = readers = nproc, batch 200, size 200, rdy 2500,
# 5. pubsub (RUNFOR),
# 6. latency at 1000, 20000 and 100000 msgs/s (RUNFOR each),
# 7. reports nsqd's idle RSS (before load), peak RSS (VmHWM) and RSS after the load,
# 8. prints every RESULT line; nsqd is killed by PID on exit.
#
# Environment: RUNFOR (default 5s), NSQD (use another nsqd binary, e.g. Go's),
# RATES (default "1000 20000 100000"), KEEP=1 keeps the temp dir (data + nsqd log).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

RUNFOR="${RUNFOR:-5s}"
RATES="${RATES:-1000 20000 100000}"
N="$(nproc)"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"

echo "==> cargo build --release -p nsqd-bin -p nsq_bench" >&2
cargo build --release -p nsqd-bin -p nsq_bench
NSQD="${NSQD:-$TARGET_DIR/release/nsqd}"
BENCH="$TARGET_DIR/release/nsq_bench"

# Three free loopback ports (tcp, http, https).
free_ports() {
    if command -v python3 >/dev/null 2>&1; then
        python3 -c 'import socket
ss=[socket.socket() for _ in range(3)]
[s.bind(("127.0.0.1",0)) for s in ss]
print(" ".join(str(s.getsockname()[1]) for s in ss))'
    else
        local p=$((20000 + RANDOM % 20000))
        echo "$p $((p + 1)) $((p + 2))"
    fi
}
read -r TCP_PORT HTTP_PORT HTTPS_PORT < <(free_ports)
TCP="127.0.0.1:$TCP_PORT"
HTTP="127.0.0.1:$HTTP_PORT"

WORK="$(mktemp -d -t nsq_bench.XXXXXX)"
mkdir -p "$WORK/data"
NSQD_PID=""
cleanup() {
    if [ -n "$NSQD_PID" ] && kill -0 "$NSQD_PID" 2>/dev/null; then
        kill "$NSQD_PID" 2>/dev/null || true
        for _ in $(seq 1 100); do kill -0 "$NSQD_PID" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$NSQD_PID" 2>/dev/null || true
        wait "$NSQD_PID" 2>/dev/null || true
    fi
    if [ "${KEEP:-0}" = 1 ]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "==> starting $NSQD on tcp $TCP http $HTTP (data $WORK/data)" >&2
"$NSQD" --tcp-address="$TCP" --http-address="$HTTP" --https-address="127.0.0.1:$HTTPS_PORT" \
    --data-path="$WORK/data" --mem-queue-size=1000000 >"$WORK/nsqd.log" 2>&1 &
NSQD_PID=$!
for _ in $(seq 1 100); do
    curl -fsS "http://$HTTP/ping" >/dev/null 2>&1 && break
    kill -0 "$NSQD_PID" 2>/dev/null || { cat "$WORK/nsqd.log" >&2; echo "nsqd exited" >&2; exit 1; }
    sleep 0.1
done
curl -fsS "http://$HTTP/ping" >/dev/null

status_kb() { awk -v k="$1:" '$1 == k { print $2 }' "/proc/$NSQD_PID/status"; }
# VmHWM is sampled after every phase and the largest value kept (the kernel's
# per-thread RSS counters make single readings slightly lag).
PEAK_RSS_KB=0
sample_peak() {
    local h; h="$(status_kb VmHWM)"
    [ -n "$h" ] && [ "$h" -gt "$PEAK_RSS_KB" ] && PEAK_RSS_KB="$h"
    return 0
}
sleep 1
IDLE_RSS_KB="$(status_kb VmRSS)"

create() {
    curl -fsS -X POST "http://$HTTP/topic/create?topic=$1" >/dev/null
    curl -fsS -X POST "http://$HTTP/channel/create?topic=$1&channel=ch" >/dev/null
}
create bench
create bench_pubsub
for r in $RATES; do create "lat_$r"; done

RESULTS=()
FAILED=0
# Runs nsq_bench; its log goes to stderr, its RESULT line is kept.
bench() {
    local phase="$1"; shift
    echo "==> $phase: nsq_bench $*" >&2
    local out rc=0
    out="$("$BENCH" "$@")" || rc=$?
    [ "$rc" = 0 ] || { FAILED=1; echo "!! $phase exited $rc" >&2; }
    out="$(printf '%s\n' "$out" | grep '^RESULT ' || true)"
    [ -n "$out" ] || out="RESULT {\"mode\":\"$phase\",\"errors\":1,\"first_error\":\"no RESULT line (exit $rc)\"}"
    echo "$out" >&2
    RESULTS+=("$out")
    LAST="$out"
    sample_peak
    echo "    nsqd VmRSS $(status_kb VmRSS) kB, VmHWM $(status_kb VmHWM) kB" >&2
}

bench pub pub --nsqd-tcp-address="$TCP" --topic bench --runfor "$RUNFOR" \
    --writers "$N" --batch-size 200 --size 200
PUB_MSGS="$(printf '%s' "$LAST" | sed -n 's/.*"msgs":\([0-9]*\).*/\1/p')"
COUNT_ARGS=()
[ -n "$PUB_MSGS" ] && [ "$PUB_MSGS" -gt 0 ] && COUNT_ARGS=(--count "$PUB_MSGS")

bench sub sub --nsqd-tcp-address="$TCP" --nsqd-http-address="$HTTP" --topic bench --channel ch --runfor "$RUNFOR" \
    --readers "$N" --rdy 2500 --size 200 "${COUNT_ARGS[@]}"

bench pubsub pubsub --nsqd-tcp-address="$TCP" --nsqd-http-address="$HTTP" --topic bench_pubsub \
    --channel ch --runfor "$RUNFOR" --writers "$N" --readers "$N" --batch-size 200 --size 200 --rdy 2500

for r in $RATES; do
    bench "latency_$r" latency --nsqd-tcp-address="$TCP" --nsqd-http-address="$HTTP" --topic "lat_$r" \
        --channel ch --runfor "$RUNFOR" --rate "$r" --size 200
done

sleep 2
sample_peak
AFTER_RSS_KB="$(status_kb VmRSS)"
RSS="RESULT {\"mode\":\"rss\",\"idle_rss_kb\":$IDLE_RSS_KB,\"peak_rss_kb\":$PEAK_RSS_KB,\"after_load_rss_kb\":$AFTER_RSS_KB}"
RESULTS+=("$RSS")

if ! kill -0 "$NSQD_PID" 2>/dev/null; then
    echo "!! nsqd is no longer running; log:" >&2
    tail -50 "$WORK/nsqd.log" >&2
    FAILED=1
fi

echo "==> results (nproc $N, runfor $RUNFOR)" >&2
printf '%s\n' "${RESULTS[@]}"
exit "$FAILED"

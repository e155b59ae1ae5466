#!/usr/bin/env bash
# Same-run comparison of durable publishing and consuming, nsq-rs against Go
# nsqd, both with --mem-queue-size=0 --sync-every=1 (docs/reliability.md 3a).
#
#   GO_NSQD=/path/to/go/nsqd bash scripts/durable.sh [ROUNDS]
#
# GO_NSQD is NSQ's own nsqd (built from its source by you); without it only
# nsq-rs runs. A (default: this repository's nsqd, release profile as shipped) is the nsq-rs
# binary. Each round, for A then GO_NSQD, each on a fresh data dir and free
# 127.0.0.1 ports, topic and channel created first:
#   pub    nsq_bench pub --writers W --pipeline 4 (MPUB 200 x 200 B) for
#          RUNFOR (default 3s), W = 1 then 4: acknowledged msgs/s (every OK
#          means "fsynced" on both sides);
#   sub    the backlog both runs left, all of it, consumed by 1 reader
#          (RDY 2500) from one channel, then by 4 readers (RDY 625 each: the
#          same total) from a second channel the same publishes filled:
#          msgs/s.
# Output: one line per measurement, `label phase key=value ...`, then the
# ratios nsq-rs / Go.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROUNDS="${1:-1}"
RUNFOR="${RUNFOR:-3s}"
. "$ROOT/scripts/nsqd_lib.sh"
bench_prepare durable
GO_NSQD="${GO_NSQD:-}"
DURABLE=(--mem-queue-size=0 --sync-every=1)
rate() { sed -n 's/^RESULT .*"msgs_per_sec":\([0-9.]*\).*/\1/p'; }

run() { # label bin
    local label="$1" bin="$2" w n p1 p4 s1 s4
    start_nsqd "$bin" "${DURABLE[@]}"
    curl -sf -X POST "http://$HTTP/topic/create?topic=d" >/dev/null
    curl -sf -X POST "http://$HTTP/channel/create?topic=d&channel=one" >/dev/null
    curl -sf -X POST "http://$HTTP/channel/create?topic=d&channel=four" >/dev/null
    for w in 1 4; do
        "$NSQ_BENCH" pub --nsqd-tcp-address="$TCP" --topic d --runfor "$RUNFOR" --writers "$w" \
            --batch-size 200 --size 200 --pipeline 4 | rate >"$WORK/p$w"
    done
    p1="$(cat "$WORK/p1")"; p4="$(cat "$WORK/p4")"
    # the whole backlog (both channels hold the same), timed to the last one
    n="$(curl -sf "http://$HTTP/stats?format=json&topic=d&channel=one" | python3 -c '
import json, sys
d = json.load(sys.stdin)
d = d.get("data", d)
print(sum(c["depth"] for t in d["topics"] for c in t["channels"]))')"
    s1="$("$NSQ_BENCH" sub --nsqd-tcp-address="$TCP" --topic d --channel one --count "$n" \
        --readers 1 --rdy 2500 --size 200 | rate)"
    s4="$("$NSQ_BENCH" sub --nsqd-tcp-address="$TCP" --topic d --channel four --count "$n" \
        --readers 4 --rdy 625 --size 200 | rate)"
    echo "$label pub writers=1 msgs_per_sec=${p1%.*}"
    echo "$label pub writers=4 msgs_per_sec=${p4%.*}"
    echo "$label sub readers=1 msgs_per_sec=${s1%.*}"
    echo "$label sub readers=4 msgs_per_sec=${s4%.*}"
    stop_nsqd
}

for round in $(seq "$ROUNDS"); do
    run "nsq-rs#$round" "$A" | tee -a "$WORK/results"
    if [ -n "$GO_NSQD" ]; then
        run "go#$round" "$GO_NSQD" | tee -a "$WORK/results"
    fi
done

if [ -n "$GO_NSQD" ]; then
    python3 - "$WORK/results" <<'EOF'
import collections, statistics, sys
vals = collections.defaultdict(list)
for line in open(sys.argv[1]):
    label, phase, who, rate = line.split()
    vals[(label.split("#")[0], phase, who)].append(float(rate.split("=")[1]))
for (impl, phase, who), v in sorted(vals.items()):
    if impl != "nsq-rs":
        continue
    go = vals.get(("go", phase, who))
    if go and statistics.median(go) > 0:
        print(f"ratio {phase} {who} nsq-rs/go={statistics.median(v) / statistics.median(go):.0f}x")
EOF
fi

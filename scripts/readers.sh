#!/usr/bin/env bash
# One consumer against four on the same channel load, in the same run
# (issue 23 part 2, docs/performance.md).
#
#   bash scripts/readers.sh [ROUNDS]
#
# A (default: this repository's nsqd, dist profile as shipped) is the nsqd.
# Each round, for each shape — memory (--mem-queue-size=10000000) and disk
# (--mem-queue-size=0) — on a fresh data dir and free 127.0.0.1 ports: a
# topic with two channels is filled by nsq_bench pub (2 writers, MPUB
# 200 x 200 B) for FILL (default 3s), so both channels hold the same
# backlog; then one channel is read to the end by 1 reader (RDY 2500) and
# the other by 4 readers (RDY 625 each: the same total), FIN each, the
# order of the two alternating between rounds. Output: a line per
# measurement, `shape readers=N msgs_per_sec=R`, then per shape the median
# of the ratio 4 readers / 1 reader over the rounds.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROUNDS="${1:-3}"
FILL="${FILL:-3s}"
. "$ROOT/scripts/nsqd_lib.sh"
bench_prepare readers
rate() { sed -n 's/^RESULT .*"msgs_per_sec":\([0-9.]*\).*/\1/p'; }

sub() { # channel readers count
    "$NSQ_BENCH" sub --nsqd-tcp-address="$TCP" --topic t --channel "$1" --count "$3" \
        --readers "$2" --rdy $((2500 / $2)) --size 200 | rate
}

run() { # shape round flags...
    local shape="$1" round="$2" n s1 s4
    shift 2
    start_nsqd "$A" "$@"
    curl -sf -X POST "http://$HTTP/topic/create?topic=t" >/dev/null
    for ch in one four; do
        curl -sf -X POST "http://$HTTP/channel/create?topic=t&channel=$ch" >/dev/null
    done
    "$NSQ_BENCH" pub --nsqd-tcp-address="$TCP" --topic t --runfor "$FILL" --writers 2 \
        --batch-size 200 --size 200 --pipeline 4 >/dev/null
    n="$(curl -sf "http://$HTTP/stats?format=json&topic=t&channel=one" | python3 -c '
import json, sys
d = json.load(sys.stdin)
d = d.get("data", d)
print(min(c["depth"] for t in d["topics"] for c in t["channels"]))')"
    if [ $((round % 2)) -eq 1 ]; then
        s1="$(sub one 1 "$n")"; s4="$(sub four 4 "$n")"
    else
        s4="$(sub four 4 "$n")"; s1="$(sub one 1 "$n")"
    fi
    stop_nsqd
    echo "$shape readers=1 msgs_per_sec=${s1%.*} messages=$n"
    echo "$shape readers=4 msgs_per_sec=${s4%.*} messages=$n"
}

for round in $(seq "$ROUNDS"); do
    run memory "$round" --mem-queue-size=10000000 | tee -a "$WORK/results"
    run disk "$round" --mem-queue-size=0 | tee -a "$WORK/results"
done

python3 - "$WORK/results" <<'EOF'
import collections, statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
by = collections.defaultdict(list)
for shape, readers, rate, _ in rows:
    by[(shape, readers)].append(float(rate.split("=")[1]))
for shape in ("memory", "disk"):
    one, four = by[(shape, "readers=1")], by[(shape, "readers=4")]
    ratios = [f / o for o, f in zip(one, four) if o > 0]
    print(f"ratio {shape} 4 readers / 1 reader: median {statistics.median(ratios):.2f} "
          f"(rounds: {', '.join(f'{r:.2f}' for r in ratios)})")
EOF

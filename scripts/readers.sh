#!/usr/bin/env bash
# One consumer against four (MANY) on the same channel load, in the same run
# (issue 23 part 2, docs/performance.md).
#
#   bash scripts/readers.sh [ROUNDS]
#   MANY=1 bash scripts/readers.sh [ROUNDS]   # 1 reader against 1: the noise floor
#
# A (default: this repository's nsqd, release profile as shipped) is the nsqd.
# Each round, for each shape — memory (--mem-queue-size=10000000) and disk
# (--mem-queue-size=0) — and for 1 reader (RDY 2500) and MANY (default 4)
# readers (RDY 2500 / MANY each: the same total), the order alternating
# between rounds: an nsqd on a fresh data dir and free 127.0.0.1 ports, a
# topic with one channel filled by nsq_bench pub (2 writers, MPUB 200 x
# 200 B) for FILL (default 3s), then the channel read to the end, FIN
# each. One nsqd per measurement: with two channels in one nsqd the second
# one read frees the message bodies both shared, which cost it ~300 ns a
# message more. Output: a line per measurement,
# `shape side readers=N msgs_per_sec=R cpu_ns_per_msg=C` (side: one or
# many; nsqd's user + system CPU during the read, per message), then per
# shape the medians of the ratios many / one over the
# rounds. With MANY=1 both sides are one reader: how far apart two equal
# measurements land on this machine, to read the other ratios against.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROUNDS="${1:-3}"
MANY="${MANY:-4}"
FILL="${FILL:-3s}"
. "$ROOT/scripts/nsqd_lib.sh"
bench_prepare readers
rate() { sed -n 's/^RESULT .*"msgs_per_sec":\([0-9.]*\).*/\1/p'; }

# nsqd's CPU time so far (user + system), in clock ticks
ticks() { awk '{print $14 + $15}' "/proc/$NSQD_PID/stat"; }

sub() { # channel readers count: prints "msgs/s ns-of-nsqd-CPU-per-msg"
    local t0 r t1
    t0="$(ticks)"
    r="$("$NSQ_BENCH" sub --nsqd-tcp-address="$TCP" --topic t --channel "$1" --count "$3" \
        --readers "$2" --rdy $((2500 / $2)) --size 200 | rate)"
    t1="$(ticks)"
    echo "${r%.*} $(( (t1 - t0) * 1000000000 / $(getconf CLK_TCK) / $3 ))"
}

one() { # side readers flags...: a fresh nsqd, filled, its channel read by N readers
    local side="$1" readers="$2" n r
    shift 2
    start_nsqd "$A" "$@"
    curl -sf -X POST "http://$HTTP/topic/create?topic=t" >/dev/null
    curl -sf -X POST "http://$HTTP/channel/create?topic=t&channel=c" >/dev/null
    "$NSQ_BENCH" pub --nsqd-tcp-address="$TCP" --topic t --runfor "$FILL" --writers 2 \
        --batch-size 200 --size 200 --pipeline 4 >/dev/null
    n="$(curl -sf "http://$HTTP/stats?format=json&topic=t&channel=c" | python3 -c '
import json, sys
d = json.load(sys.stdin)
d = d.get("data", d)
print(min(c["depth"] for t in d["topics"] for c in t["channels"]))')"
    r="$(sub c "$readers" "$n")"
    stop_nsqd
    echo "$side readers=$readers msgs_per_sec=${r% *} cpu_ns_per_msg=${r#* } messages=$n"
}

run() { # shape round flags...
    local shape="$1" round="$2"
    shift 2
    if [ $((round % 2)) -eq 1 ]; then
        echo "$shape $(one one 1 "$@")"; echo "$shape $(one many "$MANY" "$@")"
    else
        echo "$shape $(one many "$MANY" "$@")"; echo "$shape $(one one 1 "$@")"
    fi
}

for round in $(seq "$ROUNDS"); do
    run memory "$round" --mem-queue-size=10000000 | tee -a "$WORK/results"
    run disk "$round" --mem-queue-size=0 | tee -a "$WORK/results"
done

python3 - "$WORK/results" "$MANY" <<'EOF'
import collections, statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
many = sys.argv[2]
by = collections.defaultdict(list)
for shape, side, _, rate, cpu, _ in rows:
    by[(shape, side)].append((float(rate.split("=")[1]), float(cpu.split("=")[1])))
for shape in ("memory", "disk"):
    one, more = by[(shape, "one")], by[(shape, "many")]
    ratios = [f[0] / o[0] for o, f in zip(one, more) if o[0] > 0]
    # CPU per message is steadier than throughput on a shared machine:
    # above 1 means the many readers cost nsqd more per message than 1
    cpu = [f[1] / o[1] for o, f in zip(one, more) if o[1] > 0]
    print(f"ratio {shape} {many} readers / 1 reader: msgs/s median {statistics.median(ratios):.2f} "
          f"(rounds: {', '.join(f'{r:.2f}' for r in ratios)}); nsqd CPU per message median "
          f"{statistics.median(cpu):.2f} (rounds: {', '.join(f'{r:.2f}' for r in cpu)}); "
          f"1 reader {statistics.median(o[1] for o in one):.0f} ns/msg")
EOF

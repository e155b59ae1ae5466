#!/usr/bin/env bash
# One channel with 1, 4 and 32 consumers, two nsqd builds in the same run
# (issue 43, docs/performance.md).
#
#   A=/path/to/old/nsqd B=/path/to/new/nsqd bash scripts/consumers.sh [ROUNDS]
#
# A defaults to this repository's nsqd (release profile, built here), B to
# nothing (A alone). Each round, for each shape in SHAPES (default "memory
# disk": --mem-queue-size=10000000 and 0), each count C in CONSUMERS
# (default "1 4 32") and each build (the order of A and B alternating
# between rounds): an nsqd on a fresh data dir and free 127.0.0.1 ports, a
# topic with one channel, then two phases in turn, the issue's shape:
#   publish  C connections (nsq_bench pub: MPUB BATCH (200) x SIZE (200 B),
#            4 MPUBs in flight per connection) for FILL (default 3s);
#   consume  C connections, RDY RDY (default 2500) each, FIN each, until
#            the channel's whole depth was read.
# Output: a line per measurement, `shape consumers=C build pub_msgs_per_sec=
# pub_cpu_ns_per_msg= sub_msgs_per_sec= sub_cpu_ns_per_msg= messages=
# peak_rss_kib=` (nsqd's user + system CPU from /proc/<pid>/stat over the
# phase, per message), then per shape and count the medians of each build
# and B / A of each round, and per build C / 1 consumer of the consume CPU.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROUNDS="${1:-3}"
CONSUMERS="${CONSUMERS:-1 4 32}"
SHAPES="${SHAPES:-memory disk}"
FILL="${FILL:-3s}"
RDY="${RDY:-2500}"
SIZE="${SIZE:-200}"
BATCH="${BATCH:-200}"
. "$ROOT/scripts/nsqd_lib.sh"
bench_prepare consumers
B="${B:-}"

result() { sed -n 's/^RESULT .*"msgs_per_sec":\([0-9.]*\).*/\1/p'; }
ticks() { awk '{print $14 + $15}' "/proc/$NSQD_PID/stat"; }
ns_per_msg() { echo $(( ($2 - $1) * 1000000000 / $(getconf CLK_TCK) / ($3 > 0 ? $3 : 1) )); }

one() { # build-label binary consumers flags...
    local label="$1" bin="$2" c="$3" t0 t1 t2 p n r
    shift 3
    start_nsqd "$bin" "$@"
    curl -sf -X POST "http://$HTTP/topic/create?topic=t" >/dev/null
    curl -sf -X POST "http://$HTTP/channel/create?topic=t&channel=c" >/dev/null
    t0="$(ticks)"
    p="$("$NSQ_BENCH" pub --nsqd-tcp-address="$TCP" --topic t --runfor "$FILL" --writers "$c" \
        --batch-size "$BATCH" --size "$SIZE" --pipeline 4 | result)"
    t1="$(ticks)"
    n="$(curl -sf "http://$HTTP/stats?format=json&topic=t&channel=c" | python3 -c '
import json, sys
d = json.load(sys.stdin)
d = d.get("data", d)
print(min(c["depth"] for t in d["topics"] for c in t["channels"]))')"
    r="$("$NSQ_BENCH" sub --nsqd-tcp-address="$TCP" --topic t --channel c --count "$n" \
        --readers "$c" --rdy "$RDY" --size "$SIZE" | result)"
    t2="$(ticks)"
    echo "consumers=$c $label pub_msgs_per_sec=${p%.*} pub_cpu_ns_per_msg=$(ns_per_msg "$t0" "$t1" "$n")" \
        "sub_msgs_per_sec=${r%.*} sub_cpu_ns_per_msg=$(ns_per_msg "$t1" "$t2" "$n") messages=$n" \
        "peak_rss_kib=$(awk '$1=="VmHWM:"{print $2}' "/proc/$NSQD_PID/status")"
    stop_nsqd
}

flags() {
    case "$1" in
        memory) echo "--mem-queue-size=10000000" ;;
        disk) echo "--mem-queue-size=0" ;;
        *) echo "unknown shape $1" >&2; exit 2 ;;
    esac
}

echo "# A = $A" >&2
[ -n "$B" ] && echo "# B = $B" >&2
for round in $(seq "$ROUNDS"); do
    for shape in $SHAPES; do
        for c in $CONSUMERS; do
            builds=("A:$A")
            if [ -n "$B" ]; then
                if [ $((round % 2)) -eq 1 ]; then builds=("A:$A" "B:$B"); else builds=("B:$B" "A:$A"); fi
            fi
            for b in "${builds[@]}"; do
                # shellcheck disable=SC2046
                echo "$shape $(one "${b%%:*}" "${b#*:}" "$c" $(flags "$shape")) round=$round" | tee -a "$WORK/results"
            done
        done
    done
done

python3 - "$WORK/results" <<'EOF'
import collections, statistics, sys
rows = collections.defaultdict(dict)  # (shape, c, round) -> build -> fields
for line in open(sys.argv[1]):
    parts = line.split()
    shape, build = parts[0], parts[2]
    kv = dict(p.split("=") for p in parts[1:] if "=" in p)
    rows[(shape, int(kv["consumers"]), int(kv["round"]))][build] = {k: float(v) for k, v in kv.items()}
keys = ["pub_msgs_per_sec", "pub_cpu_ns_per_msg", "sub_msgs_per_sec", "sub_cpu_ns_per_msg", "peak_rss_kib"]
med = lambda xs: statistics.median(xs) if xs else float("nan")
shapes = sorted({k[0] for k in rows}, key=lambda s: ["memory", "disk"].index(s) if s in ("memory", "disk") else 9)
counts = sorted({k[1] for k in rows})
for shape in shapes:
    for c in counts:
        rs = [v for k, v in sorted(rows.items()) if k[0] == shape and k[1] == c]
        for build in ("A", "B"):
            got = [r[build] for r in rs if build in r]
            if got:
                print(f"median {shape} consumers={c} {build} " + " ".join(f"{k}={med([g[k] for g in got]):.0f}" for k in keys))
        pairs = [r for r in rs if "A" in r and "B" in r]
        if pairs:
            print(f"ratio B/A {shape} consumers={c} " + " ".join(
                f"{k}=" + ",".join(f"{r['B'][k] / r['A'][k]:.2f}" if r['A'][k] else "nan" for r in pairs) for k in keys))
    for build in ("A", "B"):
        one = {k[2]: v[build] for k, v in rows.items() if k[0] == shape and k[1] == 1 and build in v}
        for c in counts:
            if c == 1 or not one:
                continue
            many = {k[2]: v[build] for k, v in rows.items() if k[0] == shape and k[1] == c and build in v}
            cpu = [many[r]["sub_cpu_ns_per_msg"] / one[r]["sub_cpu_ns_per_msg"] for r in sorted(many) if r in one]
            rate = [many[r]["sub_msgs_per_sec"] / one[r]["sub_msgs_per_sec"] for r in sorted(many) if r in one]
            if cpu:
                print(f"scaling {shape} {build} {c}/1 consumers: consume CPU per message "
                      f"{','.join(f'{x:.2f}' for x in cpu)} (median {med(cpu):.2f}), msgs/s "
                      f"{','.join(f'{x:.2f}' for x in rate)} (median {med(rate):.2f})")
EOF

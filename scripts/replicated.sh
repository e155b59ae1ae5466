#!/usr/bin/env bash
# What replication costs, in one run (issue 21, docs/replication.md "Cost"):
# three nsqd members on 127.0.0.1 (dist profile as shipped), one topic
# created with replicas=3 and one without, each with a channel, on the same
# nsqds. Each round, for the unreplicated topic then the replicated one:
#   pub      nsq_bench pub to the replicated topic's leader, 2 writers,
#            MPUB 200 x 200 B, 4 in flight each, for RUNFOR (default 3s):
#            acknowledged msgs/s (replicated: each OK after a majority
#            fsynced the batch);
#   sub      the backlog read to the end, 1 reader, RDY 2500: msgs/s;
#   latency  nsq_bench latency at RATE msgs/s (default 20000) for RUNFOR on
#            the leader: publish-to-delivery p50/p99.
#
#   bash scripts/replicated.sh [ROUNDS]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROUNDS="${1:-1}"
RUNFOR="${RUNFOR:-3s}"
RATE="${RATE:-20000}"
. "$ROOT/scripts/nsqd_lib.sh"
bench_prepare replicated
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    bench_cleanup
}
trap cleanup EXIT

read -r -a PORTS < <(python3 -c 'import socket
ss=[socket.socket() for _ in range(9)]
[s.bind(("127.0.0.1",0)) for s in ss]
print(" ".join(str(s.getsockname()[1]) for s in ss))')
tcp() { echo "127.0.0.1:${PORTS[$(($1 * 3 - 3))]}"; }
http() { echo "127.0.0.1:${PORTS[$(($1 * 3 - 2))]}"; }
raft() { echo "127.0.0.1:${PORTS[$(($1 * 3 - 1))]}"; }
PEERS="1@$(raft 1),2@$(raft 2),3@$(raft 3)"
for i in 1 2 3; do
    mkdir -p "$WORK/n$i"
    "$A" --node-id="$i" --tcp-address="$(tcp "$i")" --http-address="$(http "$i")" \
        --data-path="$WORK/n$i" --replication-address="$(raft "$i")" \
        --replication-peer="$PEERS" >"$WORK/n$i.log" 2>&1 &
    PIDS+=($!)
done
for i in 1 2 3; do
    for _ in $(seq 100); do curl -sf "http://$(http "$i")/ping" >/dev/null 2>&1 && break; sleep 0.1; done
done
for _ in $(seq 100); do
    curl -sf -X POST "http://$(http 1)/topic/create?topic=r&replicas=3" >/dev/null 2>&1 && break
    sleep 0.2
done
curl -sf -X POST "http://$(http 1)/topic/create?topic=p" >/dev/null
for t in r p; do
    for _ in $(seq 50); do
        curl -sf -X POST "http://$(http 1)/channel/create?topic=$t&channel=ch" >/dev/null 2>&1 && break
        sleep 0.2
    done
done
LEADER="$(curl -sf "http://$(http 1)/stats?format=json&topic=r" | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(d["topics"][0]["replication"]["leader"])')"
TCP="$(tcp "$LEADER")"; HTTP="$(http "$LEADER")"
echo "replicated topic r led by node $LEADER ($TCP)" >&2

rate() { sed -n 's/^RESULT .*"msgs_per_sec":\([0-9.]*\).*/\1/p'; }
depth() {
    curl -sf "http://$HTTP/stats?format=json&topic=$1&channel=ch" | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(d["topics"][0]["channels"][0]["depth"])'
}
for round in $(seq "$ROUNDS"); do
    for t in p r; do
        label=$([ "$t" = r ] && echo replicated || echo unreplicated)
        p="$("$NSQ_BENCH" pub --nsqd-tcp-address="$TCP" --topic "$t" --runfor "$RUNFOR" \
            --writers 2 --batch-size 200 --size 200 --pipeline 4 | rate)"
        n="$(depth "$t")"
        s="$("$NSQ_BENCH" sub --nsqd-tcp-address="$TCP" --topic "$t" --channel ch --count "$n" \
            --readers 1 --rdy 2500 --size 200 | rate)"
        l="$("$NSQ_BENCH" latency --nsqd-tcp-address="$TCP" --topic "$t" --channel lat \
            --rate "$RATE" --runfor "$RUNFOR" --size 200 | sed -n 's/^RESULT //p' | python3 -c '
import json, sys
v = json.load(sys.stdin)
l = v["latency"]
print("p50_ms=%.2f p99_ms=%.2f missing=%d" % (l["p50_us"] / 1e3, l["p99_us"] / 1e3, v["missing"]))')"
        echo "$label#$round pub_msgs_per_sec=${p%.*} sub_msgs_per_sec=${s%.*} latency_at_${RATE}: $l"
    done
done

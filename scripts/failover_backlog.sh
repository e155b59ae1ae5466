#!/usr/bin/env bash
# What a failover costs with a backlog (docs/replication.md, "A new leader
# delivers what is unfinished"): three nsqd members on 127.0.0.1 (release
# profile), a replicas=3 topic with one channel, RUNFOR (default 7s) of
# nsq_bench pub to its leader (2 writers, MPUB 200 x 200 B, 4 in flight;
# its msgs/s printed) and no consumer: the backlog is every acknowledged
# message. Then the leader is SIGKILLed, and the two others are polled
# every 20 ms:
#   elected    until one of them leads the topic's group;
#   put back   until its channel counts the whole backlog again (its
#              places in the log: nothing is read before delivery);
#   drained    nsq_bench sub reads the backlog to the end from the new
#              leader (msgs/s), which also checks that none is missing.
# With SNAPSHOT_ENTRIES=N (--replication-snapshot-entries) the members may
# snapshot more often; a backlog holds the claim below its first batch, so
# none is taken until the drain (the new leader's snapshot index after it
# is printed).
#
#   bash scripts/failover_backlog.sh [ROUNDS]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROUNDS="${1:-1}"
RUNFOR="${RUNFOR:-7s}"
. "$ROOT/scripts/nsqd_lib.sh"
bench_prepare failover

now() { date +%s.%N; }
since() { python3 -c "print('%.2f' % ($(now) - $1))"; }
stat_of() {
    curl -sf -m 1 "http://$1/stats?format=json&topic=r&channel=ch" | python3 -c '
import json, sys
t = json.load(sys.stdin)["topics"][0]
r = t["replication"]
c = t["channels"][0] if t["channels"] else {"depth": 0}
print(int(r["is_leader"]), c["depth"], r["unfinished"])' 2>/dev/null || echo "0 0 0"
}

for round in $(seq "$ROUNDS"); do
    start_members --replication-snapshot-entries="${SNAPSHOT_ENTRIES:-10000}"
    for _ in $(seq 100); do
        curl -sf -X POST "http://$(http 1)/topic/create?topic=r&replicas=3" >/dev/null 2>&1 && break
        sleep 0.2
    done
    for _ in $(seq 50); do
        curl -sf -X POST "http://$(http 1)/channel/create?topic=r&channel=ch" >/dev/null 2>&1 && break
        sleep 0.2
    done
    LEADER="$(curl -sf "http://$(http 1)/stats?format=json&topic=r" | python3 -c '
import json, sys
print(json.load(sys.stdin)["topics"][0]["replication"]["leader"])')"
    published="$("$NSQ_BENCH" pub --nsqd-tcp-address="$(tcp "$LEADER")" --topic r --runfor "$RUNFOR" \
        --writers 2 --batch-size 200 --size 200 --pipeline 4 |
        sed -n 's/^RESULT .*"msgs_per_sec":\([0-9.]*\).*/\1/p')"
    read -r _ depth n < <(stat_of "$(http "$LEADER")")
    # Every member has applied the backlog before the leader goes.
    for i in 1 2 3; do
        for _ in $(seq 600); do
            read -r _ _ u < <(stat_of "$(http "$i")")
            [ "$u" = "$n" ] && break
            sleep 0.1
        done
    done
    t0="$(now)"
    kill -9 "${MEMBER_PID[$LEADER]}"
    elected="" put_back="" next=""
    while [ -z "$put_back" ]; do
        for i in 1 2 3; do
            [ "$i" = "$LEADER" ] && continue
            read -r lead d _ < <(stat_of "$(http "$i")")
            if [ "$lead" = 1 ]; then
                next="$i"
                [ -n "$elected" ] || elected="$(since "$t0")"
                if [ "$d" -ge "$n" ]; then put_back="$(since "$t0")"; fi
            fi
        done
        if python3 -c "import sys; sys.exit(0 if $(now) - $t0 > 300 else 1)"; then
            echo "no member put the backlog back within 300 s" >&2
            exit 1
        fi
        sleep 0.02
    done
    drained="$("$NSQ_BENCH" sub --nsqd-tcp-address="$(tcp "$next")" --topic r --channel ch --count "$n" \
        --readers 1 --rdy 2500 --size 200 | sed -n 's/^RESULT .*"msgs_per_sec":\([0-9.]*\).*/\1/p')"
    snap="$(curl -sf "http://$(http "$next")/stats?format=json&topic=r" | python3 -c '
import json, sys
d = json.load(sys.stdin)
g = d["topics"][0]["replication"]["group"]
print([x.get("snapshot") for x in d["replication"]["groups"] if x["group"] == g][0])')"
    echo "failover#$round published_msgs_per_sec=${published%.*} backlog=$n elected_s=$elected put_back_s=$put_back drained_msgs_per_sec=${drained%.*} snapshot_index=$snap"
    for p in "${MEMBER_PID[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${MEMBER_PID[@]}"; do wait "$p" 2>/dev/null || true; done
    PIDS=()
done

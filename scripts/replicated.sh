#!/usr/bin/env bash
# What replication costs, in one run (issue 21, docs/replication.md "Cost"):
# three nsqd members on 127.0.0.1 (release profile as shipped), one topic
# created with replicas=3 and one without, each with a channel, on the same
# nsqds. Each round, for the unreplicated topic then the replicated one:
#   pub      nsq_bench pub to the replicated topic's leader, 2 writers,
#            MPUB 200 x 200 B, 4 in flight each, for RUNFOR (default 3s):
#            acknowledged msgs/s (replicated: each OK after a majority
#            fsynced the batch);
#   sub      the backlog read to the end, 1 reader, RDY 2500: msgs/s;
#   latency  nsq_bench latency at RATE msgs/s (default 20000) for RUNFOR on
#            the leader: publish-to-delivery p50/p99.
# With JETSTREAM=1 (or nats-server on the PATH), also a NATS JetStream
# cluster of three nats-servers on 127.0.0.1 (Debian's nats-server,
# installed with apt-get when JETSTREAM=1 and it is missing), an R3 file
# stream with a pull consumer, at the same load shape with js_bench (each
# publish acknowledged by the stream; 800 unacknowledged per writer, as
# 4 MPUBs of 200; every message acked by the consumer).
# With RABBITMQ=1 (or rabbitmq-server installed), also a RabbitMQ cluster
# of three nodes on 127.0.0.1 (Debian's rabbitmq-server, installed with
# apt-get when RABBITMQ=1 and it is missing; their own epmd on a free port,
# every listener on 127.0.0.1), a quorum queue of 3 members, at the same
# load shape with amqp_bench (publisher confirms, 800 unconfirmed per
# writer; a prefetch of 2500 and every message acked by the consumer).
#
#   bash scripts/replicated.sh [ROUNDS]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROUNDS="${1:-1}"
RUNFOR="${RUNFOR:-3s}"
RATE="${RATE:-20000}"
. "$ROOT/scripts/nsqd_lib.sh"
bench_prepare replicated
if [ "${JETSTREAM:-}" = 1 ] && ! command -v nats-server >/dev/null; then
    echo "==> installing Debian's nats-server" >&2
    apt-get install -y -qq nats-server >/dev/null 2>&1 ||
        { apt-get update -qq && apt-get install -y -qq nats-server >/dev/null; }
fi
JS=""
if command -v nats-server >/dev/null; then
    (cd "$ROOT" && cargo build --profile "$PROFILE" -p nsq-benches --bin js_bench >&2)
    JS_BENCH="$TARGET_DIR/$PROFILE/js_bench"
    JS=1
fi

if [ "${RABBITMQ:-}" = 1 ] && [ ! -x /usr/lib/rabbitmq/bin/rabbitmq-server ]; then
    echo "==> installing Debian's rabbitmq-server" >&2
    apt-get install -y -qq rabbitmq-server >/dev/null 2>&1 ||
        { apt-get update -qq && apt-get install -y -qq rabbitmq-server >/dev/null; }
fi
MQ=""
if [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]; then
    (cd "$ROOT" && cargo build --profile "$PROFILE" -p nsq-benches --bin amqp_bench >&2)
    AMQP_BENCH="$TARGET_DIR/$PROFILE/amqp_bench"
    MQ=1
fi

start_members
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

if [ -n "$JS" ]; then
    read -r -a NP < <(python3 -c 'import socket
ss=[socket.socket() for _ in range(6)]
[s.bind(("127.0.0.1",0)) for s in ss]
print(" ".join(str(s.getsockname()[1]) for s in ss))')
    for i in 0 1 2; do
        routes=""
        for j in 0 1 2; do
            [ "$j" = "$i" ] || routes="$routes${routes:+, }nats-route://127.0.0.1:${NP[$((j * 2 + 1))]}"
        done
        mkdir -p "$WORK/js$i"
        cat >"$WORK/js$i.conf" <<CONF
server_name: js$i
listen: 127.0.0.1:${NP[$((i * 2))]}
jetstream { store_dir: "$WORK/js$i" }
cluster { name: bench, listen: 127.0.0.1:${NP[$((i * 2 + 1))]}, routes: [$routes] }
CONF
        nats-server -c "$WORK/js$i.conf" >"$WORK/js$i.log" 2>&1 &
        PIDS+=($!)
    done
    NATS="127.0.0.1:${NP[0]}"
    "$JS_BENCH" setup --server "$NATS" --stream bench --replicas 3 | sed -n 's/^RESULT /jetstream: /p' >&2
    echo "nats-server $(nats-server --version 2>&1 | head -1)" >&2
fi

if [ -n "$MQ" ]; then
    read -r -a RP < <(python3 -c 'import socket
ss=[socket.socket() for _ in range(7)]
[s.bind(("127.0.0.1",0)) for s in ss]
print(" ".join(str(s.getsockname()[1]) for s in ss))')
    # The nodes' own epmd (Erlang's name server) on a free port, on
    # 127.0.0.1, with its own cookie in their HOME; stopped at the end.
    export HOME="$WORK/rabbit" ERL_EPMD_PORT="${RP[6]}" ERL_EPMD_ADDRESS=127.0.0.1
    mkdir -p "$HOME"
    head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$HOME/.erlang.cookie"
    chmod 400 "$HOME/.erlang.cookie"
    epmd -address 127.0.0.1 -port "$ERL_EPMD_PORT" -daemon
    trap 'bench_cleanup; epmd -port "$ERL_EPMD_PORT" -kill >/dev/null 2>&1 || true' EXIT
    for i in 1 2 3; do
        d="$WORK/rabbit/r$i"
        mkdir -p "$d"
        : >"$d/plugins"
        printf 'listeners.tcp.1 = 127.0.0.1:%s\nloopback_users = none\n' "${RP[$((i * 2 - 2))]}" >"$d/rabbitmq.conf"
        RABBITMQ_NODENAME="r$i@localhost" RABBITMQ_DIST_PORT="${RP[$((i * 2 - 1))]}" \
            RABBITMQ_MNESIA_BASE="$d/mnesia" RABBITMQ_LOG_BASE="$d/log" \
            RABBITMQ_ENABLED_PLUGINS_FILE="$d/plugins" RABBITMQ_CONFIG_FILE="$d/rabbitmq" \
            RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
            /usr/lib/rabbitmq/bin/rabbitmq-server >"$WORK/rabbit$i.log" 2>&1 &
        PIDS+=($!)
    done
    CTL=/usr/lib/rabbitmq/bin/rabbitmqctl
    # A node answers once it is registered with epmd and booted.
    for i in 1 2 3; do
        for _ in $(seq 120); do
            "$CTL" -n "r$i@localhost" await_startup --timeout 5 >/dev/null 2>&1 && break
            sleep 1
        done
        "$CTL" -n "r$i@localhost" await_startup --timeout 5 >/dev/null ||
            { tail -20 "$WORK/rabbit$i.log" >&2; exit 1; }
    done
    for i in 2 3; do
        "$CTL" -n "r$i@localhost" stop_app >/dev/null
        "$CTL" -n "r$i@localhost" join_cluster r1@localhost >/dev/null
        "$CTL" -n "r$i@localhost" start_app >/dev/null
    done
    AMQP="127.0.0.1:${RP[0]}"
    "$AMQP_BENCH" setup --server "$AMQP" --queue bench --replicas 3 | sed -n 's/^RESULT /rabbitmq: /p' >&2
    echo "rabbitmq-server $("$CTL" -n r1@localhost version 2>/dev/null), cluster of $("$CTL" -n r1@localhost eval 'length(rabbit_nodes:all_running()).' 2>/dev/null) nodes" >&2
fi

rate() { sed -n 's/^RESULT .*"msgs_per_sec":\([0-9.]*\).*/\1/p'; }
depth() {
    curl -sf "http://$HTTP/stats?format=json&topic=$1&channel=ch" | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(d["topics"][0]["channels"][0]["depth"])'
}
# other_round LABEL BENCH --stream|--queue SERVER: a round's three
# measurements on another broker, with js_bench or amqp_bench.
other_round() {
    local label="$1" bench="$2" target="$3" server="$4" out p n s l secs="${RUNFOR%s}"
    field() { sed -n 's/^RESULT //p' | python3 -c "import json, sys; print(json.load(sys.stdin)[\"$1\"])"; }
    out="$("$bench" pub --server "$server" "$target" bench --writers 2 --window 800 --size 200 --runfor "$secs")"
    p="$(echo "$out" | field msgs_per_sec)"
    n="$(echo "$out" | field msgs)"
    s="$("$bench" sub --server "$server" "$target" bench --count "$n" --batch 2500 | field msgs_per_sec)"
    l="$("$bench" latency --server "$server" "$target" bench --rate "$RATE" --runfor "$secs" --size 200 |
        sed -n 's/^RESULT //p' | python3 -c '
import json, sys
v = json.load(sys.stdin)
print("p50_ms=%.2f p99_ms=%.2f missing=%d" % (v["p50_ms"], v["p99_ms"], v["sent"] - v["received"]))')"
    echo "$label#$round pub_msgs_per_sec=${p%.*} sub_msgs_per_sec=${s%.*} latency_at_${RATE}: $l"
}
for round in $(seq "$ROUNDS"); do
    for t in p r; do
        label=$([ "$t" = r ] && echo replicated || echo unreplicated)
        p="$("$NSQ_BENCH" pub --nsqd-tcp-address="$TCP" --topic "$t" --runfor "$RUNFOR" \
            --writers 2 --batch-size 200 --size 200 --pipeline 4 | rate)"
        n="$(depth "$t")"
        s="$("$NSQ_BENCH" sub --nsqd-tcp-address="$TCP" --topic "$t" --channel ch --count "$n" \
            --readers 1 --rdy 2500 --size 200 | rate)"
        # A fresh channel: the one of the round before would hold this
        # round's pub phase, and the latency run would wait out its drain.
        curl -sf -X POST "http://$HTTP/channel/delete?topic=$t&channel=lat" >/dev/null 2>&1 || true
        l="$("$NSQ_BENCH" latency --nsqd-tcp-address="$TCP" --topic "$t" --channel lat \
            --rate "$RATE" --runfor "$RUNFOR" --size 200 | sed -n 's/^RESULT //p' | python3 -c '
import json, sys
v = json.load(sys.stdin)
l = v["latency"]
print("p50_ms=%.2f p99_ms=%.2f missing=%d" % (l["p50_us"] / 1e3, l["p99_us"] / 1e3, v["missing"]))')"
        echo "$label#$round pub_msgs_per_sec=${p%.*} sub_msgs_per_sec=${s%.*} latency_at_${RATE}: $l"
    done
    [ -z "$JS" ] || other_round jetstream_r3 "$JS_BENCH" --stream "$NATS"
    [ -z "$MQ" ] || other_round rabbitmq_quorum3 "$AMQP_BENCH" --queue "$AMQP"
done

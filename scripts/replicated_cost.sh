#!/usr/bin/env bash
# What a replicated topic costs on the namespace hosts (issue 21,
# docs/replication.md "Cost"): five nsqd members on their own network
# namespaces (the replicated topic on a group of three of them), the load
# from another one, `release` binaries (as shipped). Runs the ignored
# benchmark tests/tests/cluster_faults/replicated_cost.rs.
#
#   bash scripts/replicated_cost.sh [ROUNDS]     # default 3
#   JETSTREAM=1 RABBITMQ=1 bash scripts/replicated_cost.sh
#                  # also a JetStream R3 stream and a RabbitMQ quorum queue
#                  # (installs Debian's nats-server and rabbitmq-server)
#   MEMBERS=3 bash scripts/replicated_cost.sh   # on three members (default five,
#                  # the topic on a group of three of them)
#   NSQ_REPLICATED_COST_OTHERS=0 bash scripts/replicated_cost.sh
#                  # the topics alone, even with the other brokers installed
#
# With nats-server on the PATH each round also measures a NATS JetStream
# R3 file stream, its servers on the members' hosts, driven by js_bench;
# with rabbitmq-server installed, a quorum queue of 3 members, a node of
# the cluster on each member's host, driven by amqp_bench.
#
# Needs root (network namespaces). The report (Markdown) goes to
# $CARGO_TARGET_DIR/cluster/report-replicated-cost.md.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

ROUNDS="${1:-3}"
[ "$(id -u)" = 0 ] || { echo "scripts/replicated_cost.sh needs root (network namespaces)" >&2; exit 1; }

TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
OUT="$TARGET/cluster"
mkdir -p "$OUT"

cargo build --release -p nsqd-bin -p nsqlookupd-bin -p nsqadmin-bin -p nsq_bench
if [ "${JETSTREAM:-}" = 1 ] && ! command -v nats-server >/dev/null; then
    echo "==> installing Debian's nats-server" >&2
    apt-get install -y -qq nats-server >/dev/null 2>&1 ||
        { apt-get update -qq && apt-get install -y -qq nats-server >/dev/null; }
fi
if command -v nats-server >/dev/null; then
    cargo build --release -p nsq-benches --bin js_bench
fi
if [ "${RABBITMQ:-}" = 1 ] && [ ! -x /usr/lib/rabbitmq/bin/rabbitmq-server ]; then
    echo "==> installing Debian's rabbitmq-server" >&2
    apt-get install -y -qq rabbitmq-server >/dev/null 2>&1 ||
        { apt-get update -qq && apt-get install -y -qq rabbitmq-server >/dev/null; }
fi
if [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]; then
    cargo build --release -p nsq-benches --bin amqp_bench
fi
cargo build --bin nsq_ledger
cargo test -p nsq-tests --test cluster_faults --no-run

PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -r tests/python/requirements.txt

NSQ_BIN_DIR="$TARGET/release" NSQ_REPLICATED_COST_ROUNDS="$ROUNDS" \
    NSQ_REPLICATED_MEMBERS="${MEMBERS:-5}" \
    NSQ_REPLICATED_REPORT="$OUT/report-replicated-cost.md" \
    cargo test -p nsq-tests --test cluster_faults -- --exact --ignored \
    replicated_cost::replicated_topic_cost_on_namespace_hosts --nocapture
echo "report: $OUT/report-replicated-cost.md"

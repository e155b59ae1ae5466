#!/usr/bin/env bash
# Checks the monitoring pack in deploy/prometheus/ with Debian's Prometheus.
#
#   bash scripts/check_monitoring.sh [BIN_DIR]
#
# 1. promtool: `check config` of prometheus.yml (and so of the rule files it
#    loads: alerts.yml, nsq_exporter.yml), `test rules` of tests/*.yml (each
#    alert with synthetic series, the exporter names' recording rules).
# 2. A real cluster from BIN_DIR (default target/debug) on free 127.0.0.1
#    ports: nsqlookupd; an nsqd with topic orders, whose channel billing a
#    consumer reads (nsq_tail through nsqlookupd: latency samples) and whose
#    channel audit nobody reads; three replication members with the
#    replicated topic ledger; and, where a tmpfs can be mounted, an nsqd
#    whose data path is remounted read-only under it (a failed disk write).
# 3. A real Prometheus, run with prometheus.yml (targets and intervals
#    replaced, every rule file kept), scrapes them all. Then: every metric
#    that alerts.yml, nsq_exporter.yml and the Grafana dashboard name has
#    series; every exporter name the recording rules make has series; every
#    rule evaluates without error; NsqChannelNoConsumers (orders/audit) and
#    NsqdDiskWriteFailing go pending; and once the ledger's leader and one
#    more member are stopped, NsqReplicatedTopicNoLeader and NsqdDown do.
# Without promtool/prometheus it prints SKIPPED (scripts/test.sh installs
# Debian's prometheus); without a tmpfs, the disk check says SKIPPED.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PROM_DIR="$ROOT/deploy/prometheus"
BIN_DIR="${1:-${NSQ_BIN_DIR:-${CARGO_TARGET_DIR:-$ROOT/target}/debug}}"
case "$BIN_DIR" in /*) ;; *) BIN_DIR="$PWD/$BIN_DIR" ;; esac

fail() { echo "check_monitoring.sh: $*" >&2; exit 1; }

for tool in promtool prometheus; do
    if ! command -v "$tool" >/dev/null; then
        echo "SKIPPED: monitoring checks: no $tool on this machine (scripts/test.sh installs Debian's prometheus)"
        exit 0
    fi
done
for b in nsqd nsqlookupd nsq_tail; do [ -x "$BIN_DIR/$b" ] || fail "$BIN_DIR/$b is missing (build the binaries first)"; done

# A Python with PyYAML for the YAML files (Debian's python3-yaml, which
# scripts/test.sh installs, serves /usr/bin/python3).
PY_YAML=""
for py in python3 /usr/bin/python3; do
    if "$py" -c 'import yaml' 2>/dev/null; then PY_YAML="$py"; break; fi
done
[ -n "$PY_YAML" ] || fail "no python3 with PyYAML (apt-get install python3-yaml)"

# --- promtool ------------------------------------------------------------------
out="$(promtool check config "$PROM_DIR/prometheus.yml" 2>&1)" || fail "promtool check config:"$'\n'"$out"
echo "ok   promtool check config: prometheus.yml, $(grep -o '[0-9]* rules found' <<<"$out" | paste -sd, | sed 's/,/, /g')"
out="$(cd "$PROM_DIR/tests" && promtool test rules ./*.yml 2>&1)" || fail "promtool test rules:"$'\n'"$out"
echo "ok   promtool test rules: $(cd "$PROM_DIR/tests" && ls ./*.yml | sed 's#^\./##' | paste -sd' ')"

# --- the names the rules and the dashboard use ---------------------------------
WORK="$(mktemp -d "${TMPDIR:-/tmp}/nsq-check-monitoring.XXXXXX")"
PIDS=()
MNT=""
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    [ -z "$MNT" ] || umount "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null || true
    rm -rf --one-file-system "$WORK"
}
trap cleanup EXIT

"$PY_YAML" - "$PROM_DIR" >"$WORK/names" <<'EOF' || fail "could not read the rules and the dashboard"
import json, re, sys, yaml
d = sys.argv[1]
exprs, records = [], []
for f in ("alerts.yml", "nsq_exporter.yml"):
    for g in yaml.safe_load(open(f"{d}/{f}"))["groups"]:
        for r in g["rules"]:
            exprs.append(r["expr"])
            if "record" in r and not r["record"].startswith("nsqrs:"):
                records.append(r["record"])
dash = json.load(open(f"{d}/grafana/nsq-rs.json"))
exprs += [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
exprs += [v["definition"] for v in dash["templating"]["list"] if v["type"] == "query"]
names = sorted({n for e in exprs for n in re.findall(r"\bnsq(?:d|lookupd)_[a-z0-9_]+\b", e)})
print("used " + " ".join(names))
print("recorded " + " ".join(sorted(set(records))))
EOF
read -r -a USED < <(sed -n 's/^used //p' "$WORK/names")
read -r -a RECORDED < <(sed -n 's/^recorded //p' "$WORK/names")

# --- the cluster --------------------------------------------------------------------
read -r -a PORTS < <(python3 "$ROOT/scripts/free_ports.py" 17)
[ "${#PORTS[@]}" = 17 ] || fail "no free ports"
LT=127.0.0.1:${PORTS[0]} LH=127.0.0.1:${PORTS[1]}
NT=127.0.0.1:${PORTS[2]} NH=127.0.0.1:${PORTS[3]}
DT=127.0.0.1:${PORTS[4]} DH=127.0.0.1:${PORTS[5]}
PROM=127.0.0.1:${PORTS[6]}
member() { echo "127.0.0.1:${PORTS[$((4 + 3 * $1 + $2))]}"; } # member ID 1|2|3 (tcp, http, raft)
wait_ping() { # NAME HTTP PID
    for _ in $(seq 300); do
        curl -sf "http://$2/ping" >/dev/null 2>&1 && return 0
        kill -0 "$3" 2>/dev/null || break
        sleep 0.1
    done
    fail "$1 did not answer /ping on $2:"$'\n'"$(tail -20 "$WORK/$1.log")"
}
start() { # NAME BIN ARGS...: in the background, logs in $WORK/NAME.log
    local name="$1" bin="$2"
    shift 2
    "$BIN_DIR/$bin" "$@" >"$WORK/$name.log" 2>&1 &
    PIDS+=($!)
    LAST_PID=$!
}
# post URL [curl args...]: an HTTP POST that must answer 2xx
post() { curl -sS -f -X POST "$@" >/dev/null 2>"$WORK/curl.err" || fail "POST $1: $(cat "$WORK/curl.err")"; }
NSQD_FLAGS=(--lookupd-tcp-address="$LT" --broadcast-address=127.0.0.1 "--e2e-processing-latency-percentile=0.99,0.95")

start nsqlookupd nsqlookupd --tcp-address="$LT" --http-address="$LH" --broadcast-address=127.0.0.1
wait_ping nsqlookupd "$LH" "$LAST_PID"
mkdir -p "$WORK/nsqd"
start nsqd nsqd --tcp-address="$NT" --http-address="$NH" --data-path="$WORK/nsqd" "${NSQD_FLAGS[@]}"
wait_ping nsqd "$NH" "$LAST_PID"
peers=""
for i in 1 2 3; do peers="$peers${peers:+,}$i@$(member "$i" 2)"; done
declare -A MEMBER_PID
for i in 1 2 3; do
    mkdir -p "$WORK/m$i"
    start "m$i" nsqd --node-id="$i" --tcp-address="$(member "$i" 0)" --http-address="$(member "$i" 1)" \
        --data-path="$WORK/m$i" --replication-address="$(member "$i" 2)" --replication-peer="$peers" "${NSQD_FLAGS[@]}"
    MEMBER_PID[$i]=$LAST_PID
done
for i in 1 2 3; do wait_ping "m$i" "$(member "$i" 1)" "${MEMBER_PID[$i]}"; done
TARGETS=("$NH" "$(member 1 1)" "$(member 2 1)" "$(member 3 1)")

DISK=""
mkdir -p "$WORK/disk"
if mount -t tmpfs -o size=4m tmpfs "$WORK/disk" 2>"$WORK/mount.err"; then
    MNT="$WORK/disk"
    start disk nsqd --tcp-address="$DT" --http-address="$DH" --data-path="$WORK/disk" --mem-queue-size=0 "${NSQD_FLAGS[@]}"
    wait_ping disk "$DH" "$LAST_PID"
    post "http://$DH/topic/create?topic=spill"
    mount -o remount,ro "$WORK/disk" || fail "could not remount the tmpfs read-only"
    # With no memory queue, the message must go to the disk queue, which now fails.
    code="$(curl -s -o /dev/null -w '%{http_code}' -d lost "http://$DH/pub?topic=spill")"
    [ "$code" != 200 ] || fail "/pub to an nsqd on a read-only disk answered 200"
    [[ "$(curl -s "http://$DH/ping")" == NOK* ]] || fail "/ping is not NOK after a failed disk write"
    DISK="$DH"
    TARGETS+=("$DH")
else
    echo "SKIPPED: NsqdDiskWriteFailing against a real failed write: cannot mount a tmpfs here ($(cat "$WORK/mount.err"))"
fi

# orders: billing read by a consumer through nsqlookupd, audit by nobody
post "http://$NH/topic/create?topic=orders"
post "http://$NH/channel/create?topic=orders&channel=billing"
post "http://$NH/channel/create?topic=orders&channel=audit"
post "http://$NH/pub?topic=orders" -d first
got="$(timeout 60 "$BIN_DIR/nsq_tail" --lookupd-http-address="$LH" --topic=orders --channel=billing -n 1 2>"$WORK/tail.log")" ||
    fail "nsq_tail did not read orders/billing:"$'\n'"$(cat "$WORK/tail.log")"
[ "$got" = first ] || fail "nsq_tail read '$got'"
# ledger: replicated on the three members
# The members elect their groups' leaders first: until then a create is refused.
out=""
for _ in $(seq 120); do
    out="$(curl -s -w ' (HTTP %{http_code})' -X POST "http://$(member 1 1)/topic/create?topic=ledger&replicas=3")" || true
    [[ "$out" != *"(HTTP 200)" ]] || break
    sleep 0.25
done
[[ "$out" == *"(HTTP 200)" ]] || fail "creating the replicated topic ledger: $out"
post "http://$(member 1 1)/channel/create?topic=ledger&channel=books"
post "http://$(member 1 1)/pub?topic=ledger" -d entry

# --- Prometheus -------------------------------------------------------------------
"$PY_YAML" - "$PROM_DIR/prometheus.yml" "$WORK/prometheus.yml" "$LH" "${TARGETS[@]}" <<'EOF'
import os, sys, yaml
src, dst, lookupd, *nsqds = sys.argv[1:]
c = yaml.safe_load(open(src))
c["global"].update(scrape_interval="1s", evaluation_interval="1s")
c["rule_files"] = [os.path.join(os.path.dirname(src), f) for f in c["rule_files"]]
jobs = {j["job_name"]: j for j in c["scrape_configs"]}
jobs["nsqd"]["static_configs"] = [{"targets": nsqds}]
jobs["nsqlookupd"]["static_configs"] = [{"targets": [lookupd]}]
yaml.safe_dump(c, open(dst, "w"))
EOF
prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
    --web.listen-address="$PROM" --log.level=warn >"$WORK/prometheus.log" 2>&1 &
PIDS+=($!)
PROM_PID=$!
for _ in $(seq 300); do
    curl -sf "http://$PROM/-/ready" >/dev/null 2>&1 && break
    kill -0 "$PROM_PID" 2>/dev/null || fail "prometheus exited:"$'\n'"$(tail -20 "$WORK/prometheus.log")"
    sleep 0.1
done
# prom SECONDS CHECK ARGS...: waits on Prometheus (scripts/prom_wait.py)
prom() { python3 "$ROOT/scripts/prom_wait.py" "$PROM" "$@" || fail "waiting on Prometheus for: ${*:2}"; }
n_targets=$((${#TARGETS[@]} + 1))
prom 60 targets "$n_targets"
echo "ok   prometheus $(prometheus --version 2>&1 | head -1 | awk '{print $3}') scrapes $n_targets targets (nsqd, 3 replication members$([ -z "$DISK" ] || echo ', nsqd on a failed disk'), nsqlookupd)"
prom 30 series "${USED[@]}"
echo "ok   every metric the alerts, the recording rules and the dashboard use has series (${#USED[@]}): ${USED[*]}"
prom 30 series "${RECORDED[@]}"
echo "ok   every lovoo/nsq_exporter name the recording rules make has series (${#RECORDED[@]}): ${RECORDED[*]}"
prom 30 rules
echo "ok   every rule evaluates without error"
active=(NsqChannelNoConsumers:channel=audit)
[ -z "$DISK" ] || active+=("NsqdDiskWriteFailing:instance=$DISK")
prom 60 alerts "${active[@]}"
echo "ok   active: NsqChannelNoConsumers for orders/audit (depth 1, no consumer)$([ -z "$DISK" ] || echo ", NsqdDiskWriteFailing for the nsqd whose disk write failed")"

leader=""
for i in 1 2 3; do
    if curl -sf "http://$(member "$i" 1)/metrics" | grep -q '^nsqd_replication_topic_is_leader{topic="ledger"} 1$'; then leader=$i; fi
done
[ -n "$leader" ] || fail "no member says it leads ledger"
other=$((leader % 3 + 1))
kill "${MEMBER_PID[$leader]}" "${MEMBER_PID[$other]}"
prom 60 alerts NsqReplicatedTopicNoLeader:topic=ledger "NsqdDown:instance=$(member "$leader" 1)"
echo "ok   with the ledger's leader (node $leader) and node $other stopped: NsqReplicatedTopicNoLeader (ledger) and NsqdDown are active"

#!/usr/bin/env bash
# The quick-start cluster in the foreground: nsqlookupd, one nsqd registered
# with it, and nsqadmin. Ctrl-C stops all three cleanly (SIGTERM, then wait:
# nsqd writes its queues to disk before it exits).
#
#   bash scripts/quickstart.sh [options]
#
# Builds nsqd, nsqlookupd, nsqadmin and nsq_tail with the quick profile,
# starts each daemon, and says "running" only once every one answers its
# /ping. If one fails to start (a port already taken, say), the script prints
# that daemon's own error, stops the others and exits 1; the same if one dies
# later. Ports, listen host and data directory are options (or environment
# variables, the option wins); --help lists them. Each daemon's log goes to
# <data>/logs/<daemon>.log and is shown here once the cluster is up.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

usage() {
    cat <<EOF
usage: bash scripts/quickstart.sh [options]

  --host ADDR                 listen address of every daemon   (\$NSQ_HOST, default 127.0.0.1)
  --nsqlookupd-tcp-port N     nsqlookupd TCP (nsqd registers)  (\$NSQLOOKUPD_TCP_PORT, default 4160)
  --nsqlookupd-http-port N    nsqlookupd HTTP                  (\$NSQLOOKUPD_HTTP_PORT, default 4161)
  --nsqd-tcp-port N           nsqd TCP (clients)               (\$NSQD_TCP_PORT, default 4150)
  --nsqd-http-port N          nsqd HTTP (/pub, /stats)         (\$NSQD_HTTP_PORT, default 4151)
  --nsqadmin-http-port N      nsqadmin web UI                  (\$NSQADMIN_HTTP_PORT, default 4171)
  --data DIR                  nsqd's queues and the logs       (\$NSQ_DATA, default ./nsq-data)
  --bin-dir DIR               use the binaries in DIR, build nothing (\$NSQ_BIN_DIR)
  -h, --help                  this text
EOF
}

HOST="${NSQ_HOST:-127.0.0.1}"
LOOKUPD_TCP="${NSQLOOKUPD_TCP_PORT:-4160}"
LOOKUPD_HTTP="${NSQLOOKUPD_HTTP_PORT:-4161}"
NSQD_TCP="${NSQD_TCP_PORT:-4150}"
NSQD_HTTP="${NSQD_HTTP_PORT:-4151}"
ADMIN_HTTP="${NSQADMIN_HTTP_PORT:-4171}"
DATA="${NSQ_DATA:-$ROOT/nsq-data}"
BIN="${NSQ_BIN_DIR:-}"

while [ "$#" -gt 0 ]; do
    opt="$1"
    case "$opt" in
        -h|--help) usage; exit 0 ;;
        --*=*) val="${opt#*=}"; opt="${opt%%=*}" ;;
        --*)
            if [ "$#" -lt 2 ]; then echo "quickstart.sh: $opt needs a value" >&2; usage >&2; exit 2; fi
            val="$2"; shift ;;
        *) echo "quickstart.sh: unknown argument $opt" >&2; usage >&2; exit 2 ;;
    esac
    case "$opt" in
        --host) HOST="$val" ;;
        --nsqlookupd-tcp-port) LOOKUPD_TCP="$val" ;;
        --nsqlookupd-http-port) LOOKUPD_HTTP="$val" ;;
        --nsqd-tcp-port) NSQD_TCP="$val" ;;
        --nsqd-http-port) NSQD_HTTP="$val" ;;
        --nsqadmin-http-port) ADMIN_HTTP="$val" ;;
        --data) DATA="$val" ;;
        --bin-dir) BIN="$val" ;;
        *) echo "quickstart.sh: unknown option $opt" >&2; usage >&2; exit 2 ;;
    esac
    shift
done
for p in "$LOOKUPD_TCP" "$LOOKUPD_HTTP" "$NSQD_TCP" "$NSQD_HTTP" "$ADMIN_HTTP"; do
    if ! [[ "$p" =~ ^[0-9]+$ ]] || [ "$p" -lt 1 ] || [ "$p" -gt 65535 ]; then
        echo "quickstart.sh: $p is not a port (1-65535)" >&2
        exit 2
    fi
done
# Where clients connect: a wildcard listen address is reached on loopback.
case "$HOST" in 0.0.0.0|"") CONNECT=127.0.0.1 ;; *) CONNECT="$HOST" ;; esac

if [ -z "$BIN" ]; then
    # The quick profile builds in a few minutes (level 1, no cross-crate
    # LTO); the shipped, fully optimised binaries are `cargo build
    # --release` (scripts/install.sh).
    echo "==> building nsqd, nsqlookupd, nsqadmin and nsq_tail (cargo build --profile quick)"
    (cd "$ROOT" && cargo build --profile quick --bin nsqd --bin nsqlookupd --bin nsqadmin --bin nsq_tail)
    BIN="${CARGO_TARGET_DIR:-$ROOT/target}/quick"
    case "$BIN" in /*) ;; *) BIN="$ROOT/$BIN" ;; esac
fi
for b in nsqd nsqlookupd nsqadmin nsq_tail; do
    if [ ! -x "$BIN/$b" ]; then echo "quickstart.sh: $BIN/$b is missing" >&2; exit 1; fi
done
mkdir -p "$DATA/nsqd" "$DATA/logs"
DATA="$(cd "$DATA" && pwd)"

# A path as the user would type it from where they started the script
# (relative under the current directory, absolute elsewhere).
shown() { case "$1" in "$PWD"/*) echo "${1#"$PWD"/}" ;; *) echo "$1" ;; esac; }

# http_ok PORT PATH: the daemon's HTTP answers 200 on PATH (bash's /dev/tcp,
# so the check needs no curl).
http_ok() {
    timeout 2 bash -c '
        exec 3<>"/dev/tcp/$0/$1" || exit 1
        printf "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n" "$2" "$0" >&3
        IFS= read -r status <&3 && [[ "$status" == "HTTP/1."?" 200"* ]]
    ' "$CONNECT" "$1" "$2" 2>/dev/null
}

names=()
pids=()
TAIL_PID=""

# stop_all STATUS: SIGTERM to every daemon still running (newest first, so
# nsqd leaves nsqlookupd while it is up), wait for each, exit STATUS.
stop_all() {
    local status="$1" i
    trap - INT TERM EXIT
    if [ "${#pids[@]}" -gt 0 ]; then
        echo "==> stopping ${names[*]}"
    fi
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        kill -TERM "${pids[$i]}" 2>/dev/null || true
        for _ in $(seq 300); do kill -0 "${pids[$i]}" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "${pids[$i]}" 2>/dev/null; then
            echo "==> ${names[$i]} still running after 30 s; SIGKILL (its state may not be saved)" >&2
            kill -KILL "${pids[$i]}" 2>/dev/null || true
            status=1
        fi
        wait "${pids[$i]}" 2>/dev/null || true
    done
    if [ -n "$TAIL_PID" ]; then kill "$TAIL_PID" 2>/dev/null || true; wait "$TAIL_PID" 2>/dev/null || true; fi
    exit "$status"
}
trap 'stop_all 0' INT TERM HUP
trap 'stop_all 1' EXIT

# fail NAME LOG WHAT: reports a daemon that did not come up or died, with the
# lines it wrote, then stops the rest.
fail() {
    echo >&2
    echo "==> $1 $3; its output ($(shown "$2")):" >&2
    sed 's/^/    /' "$2" | tail -n 20 >&2
    stop_all 1
}

# start NAME HTTP_PORT ARGS...: starts a daemon, waits up to 20 s for /ping.
start() {
    local name="$1" port="$2" log="$DATA/logs/$1.log" pid
    shift 2
    # Its own session: Ctrl-C signals the terminal's process group, and a
    # daemon in it would stop on its own while this script, interrupted in
    # `wait`, could take that exit for a crash. Only the script gets it;
    # stop_all then stops the daemons, newest first.
    setsid "$BIN/$name" "$@" >"$log" 2>&1 &
    pid=$!
    names+=("$name")
    pids+=("$pid")
    for _ in $(seq 200); do
        if ! kill -0 "$pid" 2>/dev/null; then
            local st=0
            wait "$pid" || st=$?
            unset 'pids[-1]' 'names[-1]'
            fail "$name" "$log" "failed to start (exit status $st)"
        fi
        if http_ok "$port" /ping; then return 0; fi
        sleep 0.1
    done
    fail "$name" "$log" "did not answer http://$CONNECT:$port/ping within 20 s"
}

echo "==> starting nsqlookupd, nsqd, nsqadmin (logs in $(shown "$DATA/logs")/)"
start nsqlookupd "$LOOKUPD_HTTP" \
    --tcp-address="$HOST:$LOOKUPD_TCP" --http-address="$HOST:$LOOKUPD_HTTP" --broadcast-address="$CONNECT"
start nsqd "$NSQD_HTTP" \
    --tcp-address="$HOST:$NSQD_TCP" --http-address="$HOST:$NSQD_HTTP" --data-path="$DATA/nsqd" \
    --broadcast-address="$CONNECT" --lookupd-tcp-address="$CONNECT:$LOOKUPD_TCP"
start nsqadmin "$ADMIN_HTTP" \
    --http-address="$HOST:$ADMIN_HTTP" --lookupd-http-address="$CONNECT:$LOOKUPD_HTTP"

NSQ_TAIL="$(shown "$BIN/nsq_tail")"
case "$NSQ_TAIL" in */*) ;; *) NSQ_TAIL="./$NSQ_TAIL" ;; esac
cat <<EOF
==> running (Ctrl-C stops all three):
    nsqlookupd  tcp $CONNECT:$LOOKUPD_TCP  http://$CONNECT:$LOOKUPD_HTTP
    nsqd        tcp $CONNECT:$NSQD_TCP  http://$CONNECT:$NSQD_HTTP  data $(shown "$DATA/nsqd")
    nsqadmin    http://$CONNECT:$ADMIN_HTTP

    publish:  curl -d 'hello world 1' 'http://$CONNECT:$NSQD_HTTP/pub?topic=test'
    consume:  $NSQ_TAIL --lookupd-http-address=$CONNECT:$LOOKUPD_HTTP --topic=test
    watch:    http://$CONNECT:$ADMIN_HTTP/topics/test

==> logs
EOF
tail -q -n 0 -F "$DATA/logs/nsqlookupd.log" "$DATA/logs/nsqd.log" "$DATA/logs/nsqadmin.log" &
TAIL_PID=$!

# Until Ctrl-C (the trap) or a daemon exiting on its own.
dead=""
wait -n -p dead "${pids[@]}" || true
for i in "${!pids[@]}"; do
    if [ "${pids[$i]}" = "$dead" ]; then
        name="${names[$i]}"
        unset "pids[$i]" "names[$i]"
        pids=("${pids[@]}")
        names=("${names[@]}")
        fail "$name" "$DATA/logs/$name.log" "exited unexpectedly"
    fi
done
stop_all 1

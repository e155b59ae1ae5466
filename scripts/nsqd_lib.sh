# Shared by the benchmark scripts (compare.sh, durable.sh): start and stop
# one nsqd on free 127.0.0.1 ports with a fresh data dir under $WORK.
# The caller sets WORK and NSQD_PID="" and kills $NSQD_PID on exit.

# start_nsqd BIN [flags...]: sets NSQD_PID, TCP, HTTP; retries on a port race.
start_nsqd() {
    local bin="$1"; shift
    for _ in 1 2 3 4 5; do
        read -r tp hp < <(python3 -c 'import socket
ss=[socket.socket() for _ in range(2)]
[s.bind(("127.0.0.1",0)) for s in ss]
print(" ".join(str(s.getsockname()[1]) for s in ss))')
        rm -rf "$WORK/data"; mkdir -p "$WORK/data"
        "$bin" --tcp-address="127.0.0.1:$tp" --http-address="127.0.0.1:$hp" \
            --data-path="$WORK/data" "$@" >"$WORK/nsqd.log" 2>&1 &
        NSQD_PID=$!
        TCP="127.0.0.1:$tp"; HTTP="127.0.0.1:$hp"
        for _ in $(seq 100); do
            curl -sf "http://$HTTP/ping" >/dev/null 2>&1 && return 0
            kill -0 "$NSQD_PID" 2>/dev/null || break
            sleep 0.05
        done
        kill "$NSQD_PID" 2>/dev/null || true; wait "$NSQD_PID" 2>/dev/null || true
    done
    echo "$(basename "$0"): $bin did not start:" >&2; tail -5 "$WORK/nsqd.log" >&2; exit 1
}
stop_nsqd() { kill "$NSQD_PID"; wait "$NSQD_PID" 2>/dev/null || true; NSQD_PID=""; }

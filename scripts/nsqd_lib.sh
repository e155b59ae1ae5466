# Shared by the benchmark scripts (compare.sh, durable.sh, readers.sh,
# replicated.sh): the builds they measure, a work dir removed on exit, and
# one nsqd on free 127.0.0.1 ports with a fresh data dir under $WORK.

# bench_prepare NAME: with ROOT set, builds nsqd and nsq_bench in $PROFILE
# (default release) unless A is given and nsq_bench is there; sets TARGET_DIR,
# A (default: that nsqd), NSQ_BENCH, WORK (a fresh temp dir), NSQD_PID and
# PIDS (empty), and on exit stops $NSQD_PID and every pid in PIDS and
# removes $WORK.
bench_prepare() {
    TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
    PROFILE="${PROFILE:-release}"
    if [ -z "${A:-}" ] || [ ! -x "$TARGET_DIR/$PROFILE/nsq_bench" ]; then
        (cd "$ROOT" && cargo build --profile "$PROFILE" -p nsqd-bin -p nsq_bench >&2)
    fi
    A="${A:-$TARGET_DIR/$PROFILE/nsqd}"
    NSQ_BENCH="$TARGET_DIR/$PROFILE/nsq_bench"
    WORK="$(mktemp -d -t "nsq_$1.XXXXXX")"
    NSQD_PID=""
    PIDS=()
    trap bench_cleanup EXIT
}
bench_cleanup() {
    if [ -n "$NSQD_PID" ]; then kill "$NSQD_PID" 2>/dev/null || true; wait "$NSQD_PID" 2>/dev/null || true; fi
    # Scripts that start several processes list them in PIDS.
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}

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

# start_members [flags...]: $MEMBERS (default three) $A members of one
# replication cluster on 127.0.0.1 (free ports; data in $WORK/n1..nN, logs
# $WORK/nI.log), each with the extra flags, answering /ping when it
# returns. Sets MEMBER_PID (by node id) and adds them to PIDS; tcp ID,
# http ID and raft ID give a member's addresses.
start_members() {
    local n="${MEMBERS:-3}" peers="" i
    read -r -a MEMBER_PORTS < <(python3 -c 'import socket,sys
ss=[socket.socket() for _ in range(3*int(sys.argv[1]))]
[s.bind(("127.0.0.1",0)) for s in ss]
print(" ".join(str(s.getsockname()[1]) for s in ss))' "$n")
    for i in $(seq "$n"); do peers="$peers${peers:+,}$i@$(raft "$i")"; done
    MEMBER_PID=()
    for i in $(seq "$n"); do
        rm -rf "$WORK/n$i"; mkdir -p "$WORK/n$i"
        "$A" --node-id="$i" --tcp-address="$(tcp "$i")" --http-address="$(http "$i")" \
            --data-path="$WORK/n$i" --replication-address="$(raft "$i")" \
            --replication-peer="$peers" "$@" >"$WORK/n$i.log" 2>&1 &
        MEMBER_PID[$i]=$!
        PIDS+=($!)
    done
    for i in $(seq "$n"); do
        for _ in $(seq 100); do curl -sf "http://$(http "$i")/ping" >/dev/null 2>&1 && break; sleep 0.1; done
    done
}
tcp() { echo "127.0.0.1:${MEMBER_PORTS[$(($1 * 3 - 3))]}"; }
http() { echo "127.0.0.1:${MEMBER_PORTS[$(($1 * 3 - 2))]}"; }
raft() { echo "127.0.0.1:${MEMBER_PORTS[$(($1 * 3 - 1))]}"; }

#!/usr/bin/env bash
# Same-run comparison of two nsqd builds (docs/performance.md).
#
#   A=/path/to/nsqd B=/path/to/other/nsqd bash scripts/compare.sh [ROUNDS]
#
# A defaults to this repository's nsqd built with the release profile (fat LTO,
# as shipped; built here), B to nothing
# (A alone). Each round runs, for A then B, each on a fresh data dir and free
# 127.0.0.1 ports:
#   tput   NSQ's baseline shape: nsqd --mem-queue-size=1000000, topic and
#          channel created first, writers (one connection per core, MPUB
#          200 x 200 B) for RUNFOR, then readers (one per core, RDY 2500, FIN
#          each) for RUNFOR; msgs/s, nsqd CPU us per message of each phase,
#          idle and peak RSS (VmHWM).
#   disk   the same with --mem-queue-size=0 (every message through the disk).
#   http   wrk -t2 -c64 on /pub (200 B) and /mpub (100 x 200 B, text mode).
#   lat    nsq_bench latency at 1k, 20k and 100k msgs/s (default IDENTIFY).
#   idle   CPU and RSS of an idle nsqd, then with 10,000 channels (100
#          topics x 100), over 30 s.
# PHASES (default "tput disk http lat idle") picks some.
#
# The load generators: BENCH_WRITER / BENCH_READER, when set, are NSQ's own
# bench_writer / bench_reader binaries (built from NSQ's source by you);
# otherwise nsq_bench's pub / sub modes, which have the same shape. wrk comes
# from the distribution (apt-get install wrk); without it the http phase is
# skipped. Output: one line per measurement, `label phase key=value ...`.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROUNDS="${1:-2}"
RUNFOR="${RUNFOR:-5s}"
PHASES="${PHASES:-tput disk http lat idle}"
. "$ROOT/scripts/nsqd_lib.sh"
bench_prepare compare
B="${B:-}"

secs() { python3 -c "import sys; s=sys.argv[1]; print(float(s[:-2])/1000 if s.endswith('ms') else float(s.rstrip('s')))" "$1"; }
cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
status_kb() { awk -v k="$2:" '$1==k{print $2}' "/proc/$1/status"; }


# rate of a writer/reader run, msgs/s
run_writer() {
    if [ -n "${BENCH_WRITER:-}" ]; then
        "$BENCH_WRITER" --runfor="$RUNFOR" --nsqd-tcp-address="$TCP" --topic="$1" --size=200 --batch-size=200 2>&1 \
            | sed -n 's/.* - \([0-9.]*\)ops\/s.*/\1/p'
    else
        "$NSQ_BENCH" pub --nsqd-tcp-address="$TCP" --topic "$1" --runfor "$RUNFOR" --writers "$(nproc)" \
            --batch-size 200 --size 200 --pipeline 1 | sed -n 's/^RESULT .*"msgs_per_sec":\([0-9.]*\).*/\1/p'
    fi
}
run_reader() {
    if [ -n "${BENCH_READER:-}" ]; then
        "$BENCH_READER" --runfor="$RUNFOR" --nsqd-tcp-address="$TCP" --topic="$1" --channel=ch --size=200 --rdy=2500 2>&1 \
            | sed -n 's/.* - \([0-9.]*\)ops\/s.*/\1/p'
    else
        "$NSQ_BENCH" sub --nsqd-tcp-address="$TCP" --topic "$1" --channel ch --runfor "$RUNFOR" --readers "$(nproc)" \
            --rdy 2500 --size 200 | sed -n 's/^RESULT .*"msgs_per_sec":\([0-9.]*\).*/\1/p'
    fi
}

phase_tput() { # label bin memq phase-name
    local label="$1" bin="$2" memq="$3" name="$4" s c0 c1 c2 idle w r
    s="$(secs "$RUNFOR")"
    start_nsqd "$bin" --mem-queue-size="$memq"
    curl -sf -X POST "http://$HTTP/topic/create?topic=sub_bench" >/dev/null
    curl -sf -X POST "http://$HTTP/channel/create?topic=sub_bench&channel=ch" >/dev/null
    idle="$(status_kb "$NSQD_PID" VmRSS)"
    c0="$(cpu_ticks "$NSQD_PID")"; w="$(run_writer sub_bench)"
    c1="$(cpu_ticks "$NSQD_PID")"; r="$(run_reader sub_bench)"
    c2="$(cpu_ticks "$NSQD_PID")"
    python3 - "$label" "$name" "$w" "$r" "$c0" "$c1" "$c2" "$s" "$idle" "$(status_kb "$NSQD_PID" VmHWM)" "$(getconf CLK_TCK)" <<'EOF'
import sys
label, name, w, r, c0, c1, c2, s, idle, hwm, hz = sys.argv[1:]
w, r, s, hz = float(w or 0), float(r or 0), float(s), float(hz)
us = lambda a, b, rate: (int(b) - int(a)) / hz * 1e6 / (rate * s) if rate else 0
print(f"{label} {name} pub_msgs_per_sec={w:.0f} sub_msgs_per_sec={r:.0f} "
      f"pub_cpu_us_per_msg={us(c0, c1, w):.3f} sub_cpu_us_per_msg={us(c1, c2, r):.3f} "
      f"idle_rss_kib={idle} peak_rss_kib={hwm}")
EOF
    stop_nsqd
}

phase_http() {
    local label="$1" bin="$2" p m
    command -v wrk >/dev/null || { echo "$label http SKIPPED (no wrk)"; return; }
    printf 'wrk.method = "POST"\nwrk.body = string.rep("x", 200)\n' >"$WORK/pub.lua"
    printf 'wrk.method = "POST"\nlocal t = {}\nfor i = 1, 100 do t[i] = string.rep("x", 200) end\nwrk.body = table.concat(t, "\\n")\n' >"$WORK/mpub.lua"
    start_nsqd "$bin" --mem-queue-size=1000000
    curl -sf -X POST "http://$HTTP/topic/create?topic=h" >/dev/null
    curl -sf -X POST "http://$HTTP/channel/create?topic=h&channel=c" >/dev/null
    p="$(wrk -t2 -c64 -d"$RUNFOR" -s "$WORK/pub.lua" "http://$HTTP/pub?topic=h" | awk '/Requests\/sec/{print $2} /Non-2xx/{print "ERR" $0}')"
    m="$(wrk -t2 -c64 -d"$RUNFOR" -s "$WORK/mpub.lua" "http://$HTTP/mpub?topic=h" | awk '/Requests\/sec/{print $2} /Non-2xx/{print "ERR" $0}')"
    echo "$label http pub_req_per_sec=$p mpub_req_per_sec=$m mpub_msgs_per_sec=$(python3 -c "print(round(float('$m')*100))" 2>/dev/null || echo ?) peak_rss_kib=$(status_kb "$NSQD_PID" VmHWM)"
    stop_nsqd
}

phase_lat() {
    local label="$1" bin="$2" r
    start_nsqd "$bin"
    for r in 1000 20000 100000; do
        "$NSQ_BENCH" latency --nsqd-tcp-address="$TCP" --topic "lat_$r" --channel ch --runfor "$RUNFOR" \
            --rate "$r" --size 200 | python3 -c '
import json, sys
for line in sys.stdin:
    if line.startswith("RESULT "):
        d = json.loads(line[7:])
        print(sys.argv[1], "lat", "rate=%d" % d["rate"], "p50_us=%.0f p99_us=%.0f p999_us=%.0f max_us=%.0f" %
              (d["p50_us"], d["p99_us"], d["p999_us"], d["max_us"]), "received=%d/%d" % (d["received"], d["published"]))
' "$label"
    done
    stop_nsqd
}

phase_idle() {
    local label="$1" bin="$2" c0 c1 c2 c3 rss0 rss1
    start_nsqd "$bin"
    sleep 1
    rss0="$(status_kb "$NSQD_PID" VmRSS)"; c0="$(cpu_ticks "$NSQD_PID")"; sleep 10; c1="$(cpu_ticks "$NSQD_PID")"
    python3 - "$HTTP" <<'EOF'
import http.client, sys
host, port = sys.argv[1].split(":")
c = http.client.HTTPConnection(host, int(port))
for t in range(100):
    c.request("POST", f"/topic/create?topic=t{t}"); c.getresponse().read()
    for ch in range(100):
        c.request("POST", f"/channel/create?topic=t{t}&channel=c{ch}"); c.getresponse().read()
EOF
    sleep 2
    rss1="$(status_kb "$NSQD_PID" VmRSS)"; c2="$(cpu_ticks "$NSQD_PID")"; sleep 30; c3="$(cpu_ticks "$NSQD_PID")"
    python3 -c "
hz=$(getconf CLK_TCK)
print('$label idle no_channels_cpu_pct=%.2f idle_rss_kib=$rss0 10k_channels_cpu_pct=%.2f 10k_channels_rss_kib=$rss1' % (($c1-$c0)/hz/10*100, ($c3-$c2)/hz/30*100))"
    stop_nsqd
}

for round in $(seq "$ROUNDS"); do
    for pair in "A:$A" "B:$B"; do
        label="${pair%%:*}"; bin="${pair#*:}"
        [ -n "$bin" ] || continue
        [ "$round" = 1 ] && echo "# $label = $bin" >&2
        for ph in $PHASES; do
            case "$ph" in
                tput) phase_tput "$label" "$bin" 1000000 tput ;;
                disk) phase_tput "$label" "$bin" 0 disk ;;
                http) phase_http "$label" "$bin" ;;
                lat) phase_lat "$label" "$bin" ;;
                idle) if [ "$round" = 1 ]; then phase_idle "$label" "$bin"; fi ;;
            esac
        done
    done
done

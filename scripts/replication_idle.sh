#!/usr/bin/env bash
# What an idle replication cluster costs (docs/replication.md, "Quiet
# groups"): three nsqd members (MEMBERS=5: five, which run groups of five
# and of three) on 127.0.0.1 with --replication-groups=G and no traffic;
# after SETTLE seconds, for SECS seconds: the CPU the members' processes
# use (percent of one core, summed), and the TCP segments with
# data and the bytes their sockets send (`ss -tip`), per second.
#
#   bash scripts/replication_idle.sh [GROUPS] [SECS]        # default 16, 20
#   B=/path/to/other/nsqd bash scripts/replication_idle.sh  # also that
#                 build, in turn with this one, in the same run
#
# A defaults to the release build of this tree (built if missing), as for the
# other benchmark scripts; ROUNDS (default 1) rounds of A (then B).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
GROUPS_N="${1:-16}"
SECS="${2:-20}"
SETTLE="${SETTLE:-8}"
ROUNDS="${ROUNDS:-1}"
. "$ROOT/scripts/nsqd_lib.sh"
bench_prepare replication_idle

# CPU ticks, data segments and bytes sent of the running members
usage() {
    local ticks=0 p pat=""
    for p in "${PIDS[@]}"; do
        read -r u s < <(awk '{print $14, $15}' "/proc/$p/stat")
        ticks=$((ticks + u + s))
        pat="$pat${pat:+|}pid=$p,"
    done
    ss -tinpH | awk -v pat="$pat" -v t="$ticks" '
        $0 ~ pat { mine = 1; next }
        mine { for (i = 1; i <= NF; i++) { split($i, kv, ":"); if (kv[1] == "bytes_sent") b += kv[2]; if (kv[1] == "data_segs_out") d += kv[2] } }
        { mine = 0 }
        END { printf "%d %d %d\n", t, d, b }'
}

measure() {
    # start_members starts $A: this measurement's build
    local label="$2" A="$1"
    PIDS=()
    start_members --replication-groups="$GROUPS_N"
    sleep "$SETTLE"
    local hz t0 d0 b0 t1 d1 b1
    hz="$(getconf CLK_TCK)"
    read -r t0 d0 b0 < <(usage)
    sleep "$SECS"
    read -r t1 d1 b1 < <(usage)
    for p in "${PIDS[@]}"; do kill "$p"; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    PIDS=()
    awk -v l="$label" -v g="$GROUPS_N" -v t=$((t1 - t0)) -v d=$((d1 - d0)) -v b=$((b1 - b0)) -v s="$SECS" -v hz="$hz" \
        'BEGIN { printf "%-3s groups=%-5d cpu %6.2f %% of a core   sent %7.0f segments/s %9.0f bytes/s\n", l, g, 100 * t / hz / s, d / s, b / s }'
}

for _ in $(seq "$ROUNDS"); do
    measure "$A" "A"
    if [ -n "${B:-}" ]; then measure "$B" "B"; fi
done

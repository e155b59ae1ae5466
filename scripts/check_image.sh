#!/usr/bin/env bash
# Builds the container image from the repository's Containerfile with
# Debian's podman and runs the daemons of NSQ's cluster from it.
#
#   bash scripts/check_image.sh [BIN_DIR]
#
# The machines that run the test command cannot pull public images, so the
# Containerfile's two FROMs are given local images: its final stage starts
# from a base made here (exactly the libraries `ldd` lists for the
# binaries, imported with `podman import`), and its "build" stage is
# replaced by the binaries of BIN_DIR (default target/debug; debug info
# stripped), passed with --build-context. Everything else is the
# Containerfile users build. Then:
#   1. the image: every binary at NSQ's path, user 65532, volume /data,
#      working directory /data, SIGTERM; its size;
#   2. deploy/compose.yaml: each service's command names a binary of the
#      image and its flags are accepted (`<command> --version`, run in the
#      image's root);
#   3. in containers (--network=host, Debian's runc): nsqlookupd, nsqd with
#      a named volume on /data, nsqadmin; a message published with /to_nsq
#      is read back with /nsq_tail through nsqlookupd; nsqadmin lists the
#      topic; nsqd's process runs as uid 65532; `podman stop` (SIGTERM)
#      ends nsqd with status 0, and a new nsqd container on the same volume
#      still holds the message left unread.
# Where containers cannot run (no podman, or the runtime refuses), the
# affected steps print SKIPPED with the reason. Image state lives in a
# temporary directory (podman --root/--runroot) removed at the end.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN_DIR="${1:-${NSQ_BIN_DIR:-${CARGO_TARGET_DIR:-$ROOT/target}/debug}}"
# NSQ's image holds these, at its root.
BINS=(nsqd nsqlookupd nsqadmin nsq_tail nsq_stat nsq_to_file nsq_to_http nsq_to_nsq to_nsq)
IMAGE=localhost/nsq-rs:check

fail() { echo "check_image.sh: $*" >&2; exit 1; }
skip() { echo "SKIPPED: $*"; }

for tool in podman runc; do
    if ! command -v "$tool" >/dev/null; then
        skip "container image build and run: no $tool on this machine (scripts/test.sh installs Debian's podman and runc)"
        exit 0
    fi
done
for b in "${BINS[@]}"; do [ -x "$BIN_DIR/$b" ] || fail "$BIN_DIR/$b is missing (build the binaries first)"; done

# A Python with PyYAML for the YAML files (Debian's python3-yaml, which
# scripts/test.sh installs, serves /usr/bin/python3).
PY_YAML=""
for py in python3 /usr/bin/python3; do
    if "$py" -c 'import yaml' 2>/dev/null; then PY_YAML="$py"; break; fi
done
[ -n "$PY_YAML" ] || fail "no python3 with PyYAML (apt-get install python3-yaml)"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/nsq-check-image.XXXXXX")"
# Debian's default crun refuses some hybrid cgroup layouts; runc runs there.
# No systemd to manage cgroups or take events; vfs needs no kernel overlay.
P=(podman --root "$WORK/storage" --runroot "$WORK/run" --tmpdir "$WORK/tmp" --storage-driver=vfs
    --runtime=runc --cgroup-manager=cgroupfs --events-backend=file)
# podman keeps a cache of image blobs in /var/lib/containers/cache whatever
# --root says: made by this run, it goes with it.
[ -e /var/lib/containers ] && made_var_lib=0 || made_var_lib=1
cleanup() {
    "${P[@]}" rm -a -f -t 0 >/dev/null 2>&1 || true
    "${P[@]}" volume rm -a -f >/dev/null 2>&1 || true
    "${P[@]}" image unmount -a >/dev/null 2>&1 || true
    # nothing of the run may stay mounted before its files go
    grep -o " ${WORK}[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
    rm -rf --one-file-system "$WORK"
    [ "$made_var_lib" = 0 ] || rm -rf /var/lib/containers
}
trap cleanup EXIT

# --- the image ---------------------------------------------------------------
t0=$SECONDS
mkdir -p "$WORK/binaries/out/bin" "$WORK/binaries/out/data" "$WORK/base" "$WORK/context"
for b in "${BINS[@]}"; do
    strip --strip-debug -o "$WORK/binaries/out/bin/$b" "$BIN_DIR/$b"
    # ld.so, libc, libm, libgcc_s: each at the path ldd shows, symlinks resolved
    ldd "$BIN_DIR/$b" | grep -o '/[^ ]*' | while read -r lib; do
        [ -e "$WORK/base$lib" ] || { mkdir -p "$WORK/base$(dirname "$lib")" && cp -L "$lib" "$WORK/base$lib"; }
    done
done
tar -C "$WORK/base" -c . | "${P[@]}" import -q - localhost/nsq-rs-base:check >/dev/null
echo "ok   base image: $(cd "$WORK/base" && find . -type f | sed 's#^\.##' | sort | tr '\n' ' ')"

# The empty context: the replaced "build" stage is the only one that reads it.
"${P[@]}" build -q --pull=never \
    --build-arg RUST_IMAGE=localhost/nsq-rs-base:check \
    --build-arg BASE_IMAGE=localhost/nsq-rs-base:check \
    --build-context build="$WORK/binaries" \
    -f "$ROOT/Containerfile" -t "$IMAGE" "$WORK/context" >"$WORK/build.log" 2>&1 ||
    fail "podman build failed:"$'\n'"$(cat "$WORK/build.log")"
conf="$("${P[@]}" image inspect --format '{{.Config.User}}|{{json .Config.Volumes}}|{{.Config.WorkingDir}}|{{.Config.StopSignal}}' "$IMAGE")"
[ "$conf" = '65532:65532|{"/data":{}}|/data|SIGTERM' ] ||
    fail "image config (user|volumes|workdir|stop signal) is $conf"
size="$("${P[@]}" image inspect --format '{{.Size}}' "$IMAGE")"
mnt="$("${P[@]}" image mount "$IMAGE")"
for b in "${BINS[@]}"; do [ -x "$mnt/$b" ] || fail "the image has no /$b"; done
[ "$(stat -c %u:%g "$mnt/data")" = 65532:65532 ] || fail "/data in the image is owned by $(stat -c %u:%g "$mnt/data")"
echo "ok   image $IMAGE built in $((SECONDS - t0)) s: $((size / 1000000)) MB (the binaries of $BIN_DIR, debug info stripped), ${BINS[*]/#//}, user 65532:65532, volume /data, SIGTERM"

# --- deploy/compose.yaml: every command runs against the image's binaries -----
"$PY_YAML" - "$ROOT/deploy/compose.yaml" >"$WORK/compose.cmds" <<'EOF' || fail "deploy/compose.yaml: could not read its services"
import shlex, sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
services = doc["services"]
assert {"nsqlookupd", "nsqd", "nsqadmin"} <= services.keys(), "NSQ's three daemons"
for name, svc in services.items():
    assert svc.get("image") == "localhost/nsq-rs:latest", f"{name}: image {svc.get('image')}"
    assert svc.get("build", {}).get("dockerfile") == "Containerfile", f"{name}: build"
    print(name + "\t" + "\t".join(shlex.split(svc["command"])))
EOF
n=0
while IFS=$'\t' read -r -a cmd; do
    svc="${cmd[0]}"
    bin="${cmd[1]}"
    [[ " ${BINS[*]/#//} " == *" $bin "* ]] || fail "compose.yaml: $svc runs $bin, not one of the image's binaries"
    out="$(chroot "$mnt" "${cmd[@]:1}" --version 2>&1)" ||
        fail "compose.yaml: $svc's command is refused by the image's $bin:"$'\n'"$out"
    n=$((n + 1))
done <"$WORK/compose.cmds"
"${P[@]}" image unmount "$IMAGE" >/dev/null
echo "ok   deploy/compose.yaml: the commands of its $n services are accepted by the image's binaries"

# --- the cluster in containers --------------------------------------------------
nofile="$(ulimit -Hn)"
[ "$nofile" = unlimited ] || [ "$nofile" -le 65536 ] || nofile=65536
[ "$nofile" != unlimited ] || nofile=65536
nproc="$(ulimit -Hu)"
[ "$nproc" = unlimited ] || [ "$nproc" -le 4096 ] || nproc=4096
[ "$nproc" != unlimited ] || nproc=4096
# Podman's default limits may be above what this process may grant; these are not.
RUN=(run --network=host --pull=never --ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc")
if ! out="$("${P[@]}" "${RUN[@]}" --rm "$IMAGE" /nsqd --version 2>&1)"; then
    skip "running the image's daemons in containers: podman with runc cannot start a container here:"$'\n'"$out"
    exit 0
fi
t0=$SECONDS
read -r LT LH NT NH AH < <(python3 "$ROOT/scripts/free_ports.py" 5)
[ -n "${AH:-}" ] || fail "no free ports"
wait_ping() { # NAME ADDR
    for _ in $(seq 300); do
        curl -sf "http://$2/ping" >/dev/null 2>&1 && return 0
        [ "$("${P[@]}" inspect --format '{{.State.Running}}' "$1" 2>/dev/null)" = true ] || break
        sleep 0.1
    done
    fail "$1 did not answer /ping on $2:"$'\n'"$("${P[@]}" logs "$1" 2>&1 | tail -20)"
}
start_nsqd() { # NAME
    "${P[@]}" "${RUN[@]}" -d --name "$1" -v nsqd-data:/data "$IMAGE" \
        /nsqd --tcp-address="127.0.0.1:$NT" --http-address="127.0.0.1:$NH" \
        --lookupd-tcp-address="127.0.0.1:$LT" --broadcast-address=127.0.0.1 --data-path=/data >/dev/null
    wait_ping "$1" "127.0.0.1:$NH"
}
"${P[@]}" volume create nsqd-data >/dev/null
"${P[@]}" "${RUN[@]}" -d --name nsqlookupd "$IMAGE" \
    /nsqlookupd --tcp-address="127.0.0.1:$LT" --http-address="127.0.0.1:$LH" --broadcast-address=127.0.0.1 >/dev/null
wait_ping nsqlookupd "127.0.0.1:$LH"
start_nsqd nsqd
"${P[@]}" "${RUN[@]}" -d --name nsqadmin "$IMAGE" \
    /nsqadmin --http-address="127.0.0.1:$AH" --lookupd-http-address="127.0.0.1:$LH" >/dev/null
wait_ping nsqadmin "127.0.0.1:$AH"

body="hello from a container $$"
printf '%s\n' "$body" | "${P[@]}" "${RUN[@]}" -i --rm "$IMAGE" \
    /to_nsq --topic=deployed --nsqd-tcp-address="127.0.0.1:$NT" >"$WORK/to_nsq.log" 2>&1 ||
    fail "/to_nsq failed:"$'\n'"$(cat "$WORK/to_nsq.log")"
got="$(timeout 120 "${P[@]}" "${RUN[@]}" --rm "$IMAGE" \
    /nsq_tail --lookupd-http-address="127.0.0.1:$LH" --topic=deployed --channel=check -n 1 2>"$WORK/tail.log")" ||
    fail "/nsq_tail through nsqlookupd failed:"$'\n'"$(cat "$WORK/tail.log")"
[ "$got" = "$body" ] || fail "/nsq_tail printed '$got', not '$body'"
echo "ok   /to_nsq -> nsqd -> /nsq_tail through nsqlookupd: '$got'"

topics="$(curl -sf "http://127.0.0.1:$AH/api/topics")" || fail "nsqadmin's /api/topics did not answer"
[[ "$topics" == *'"deployed"'* ]] || fail "nsqadmin's /api/topics: $topics"
echo "ok   nsqadmin (through nsqlookupd) lists the topic: $topics"

pid="$("${P[@]}" inspect --format '{{.State.Pid}}' nsqd)"
uid="$(awk '/^Uid:/ {print $2}' "/proc/$pid/status")"
[ "$uid" = 65532 ] || fail "nsqd in its container runs as uid $uid, not 65532"
echo "ok   nsqd's process runs as uid $uid"

curl -sf -d "kept across a stop" "http://127.0.0.1:$NH/pub?topic=kept" >/dev/null || fail "/pub to nsqd failed"
"${P[@]}" stop -t 60 nsqd >/dev/null
code="$("${P[@]}" inspect --format '{{.State.ExitCode}}' nsqd)"
[ "$code" = 0 ] || fail "nsqd exited with $code after SIGTERM:"$'\n'"$("${P[@]}" logs nsqd 2>&1 | tail -20)"
"${P[@]}" rm nsqd >/dev/null
start_nsqd nsqd-again
depth="$(curl -sf "http://127.0.0.1:$NH/stats?format=json&topic=kept" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["topics"][0]["depth"])')" || fail "no topic kept after the restart"
[ "$depth" = 1 ] || fail "topic kept has depth $depth after the restart, not 1"
echo "ok   podman stop (SIGTERM): nsqd exits 0; a new container on the volume has the unread message (depth $depth)"
echo "ok   containers: $((SECONDS - t0)) s"

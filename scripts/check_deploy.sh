#!/usr/bin/env bash
# Checks the systemd units and the sysusers file in deploy/systemd/.
#
#   bash scripts/check_deploy.sh [BIN_DIR]
#
# 1. Always: the properties the units promise (deploy/README.md) are there —
#    the nsq user, Restart=on-failure, SIGTERM, a raised LimitNOFILE,
#    ProtectSystem=strict, ExecStart=/usr/local/bin/<daemon>
#    --config=/etc/nsq/<daemon>.toml — and nsqd's writable path is the
#    data_path of deploy/config/nsqd.toml.
# 2. Where systemd-analyze exists: `systemd-analyze verify` of each unit,
#    with ExecStart pointed at the binaries in BIN_DIR (default
#    target/debug); any message (an unknown key, a bad value) fails.
# 3. Where systemd-sysusers exists: nsq.sysusers.conf creates the nsq user
#    in a scratch root.
# Without systemd the last two print SKIPPED. Temporary files are removed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
UNITS="$ROOT/deploy/systemd"
BIN_DIR="${1:-${NSQ_BIN_DIR:-${CARGO_TARGET_DIR:-$ROOT/target}/debug}}"
DAEMONS=(nsqlookupd nsqd nsqadmin)
# systemd wants absolute paths in ExecStart=
case "$BIN_DIR" in /*) ;; *) BIN_DIR="$PWD/$BIN_DIR" ;; esac

fail() { echo "check_deploy.sh: $*" >&2; exit 1; }

# The value of KEY in UNIT (the last assignment, as systemd reads it).
prop() { sed -n "s/^$2=//p" "$UNITS/$1.service" | tail -n 1; }

for d in "${DAEMONS[@]}"; do
    u="$UNITS/$d.service"
    [ -f "$u" ] || fail "$u is missing"
    [ "$(prop "$d" User)" = nsq ] || fail "$d.service: User= is not nsq"
    [ "$(prop "$d" Restart)" = on-failure ] || fail "$d.service: Restart= is not on-failure"
    [ "$(prop "$d" KillSignal)" = SIGTERM ] || fail "$d.service: KillSignal= is not SIGTERM"
    [ "$(prop "$d" ProtectSystem)" = strict ] || fail "$d.service: ProtectSystem= is not strict"
    nofile="$(prop "$d" LimitNOFILE)"
    [[ "$nofile" =~ ^[0-9]+$ ]] && [ "$nofile" -ge 65536 ] || fail "$d.service: LimitNOFILE=$nofile (want >= 65536)"
    [ "$(prop "$d" ExecStart)" = "/usr/local/bin/$d --config=/etc/nsq/$d.toml" ] ||
        fail "$d.service: ExecStart=$(prop "$d" ExecStart)"
    [ -f "$ROOT/deploy/config/$d.toml" ] || fail "deploy/config/$d.toml is missing"
done
data_path="$(sed -n 's/^data_path *= *"\(.*\)".*/\1/p' "$ROOT/deploy/config/nsqd.toml")"
[ -n "$data_path" ] || fail "deploy/config/nsqd.toml sets no data_path"
[ "$(prop nsqd ReadWritePaths)" = "$data_path" ] ||
    fail "nsqd.service: ReadWritePaths=$(prop nsqd ReadWritePaths), but nsqd.toml's data_path is $data_path"
[ "/var/lib/$(prop nsqd StateDirectory)" = "$data_path" ] ||
    fail "nsqd.service: StateDirectory=$(prop nsqd StateDirectory) does not create $data_path"
echo "ok   units: user, restart, SIGTERM, LimitNOFILE, ProtectSystem=strict, ExecStart, nsqd's data path"

SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/nsq-check-deploy.XXXXXX")"
trap 'rm -rf "$SCRATCH"' EXIT

if command -v systemd-analyze >/dev/null; then
    for d in "${DAEMONS[@]}"; do
        [ -x "$BIN_DIR/$d" ] || fail "$BIN_DIR/$d is missing (build the daemons first)"
        sed "s#/usr/local/bin/#$BIN_DIR/#" "$UNITS/$d.service" >"$SCRATCH/$d.service"
    done
    UNIT_FILES=("$SCRATCH/nsqlookupd.service" "$SCRATCH/nsqd.service" "$SCRATCH/nsqadmin.service")
    out="$(systemd-analyze verify "${UNIT_FILES[@]}" 2>&1)" ||
        fail "systemd-analyze verify failed:"$'\n'"$out"
    [ -z "$out" ] || fail "systemd-analyze verify:"$'\n'"$out"
    echo "ok   systemd-analyze verify: ${DAEMONS[*]/%/.service}"
else
    echo "SKIPPED: systemd-analyze verify (no systemd-analyze on this machine)"
fi

if command -v systemd-sysusers >/dev/null; then
    mkdir -p "$SCRATCH/root/etc"
    systemd-sysusers --root="$SCRATCH/root" "$UNITS/nsq.sysusers.conf" >/dev/null 2>&1 ||
        fail "systemd-sysusers rejected nsq.sysusers.conf"
    grep -q '^nsq:.*:/var/lib/nsq:' "$SCRATCH/root/etc/passwd" ||
        fail "nsq.sysusers.conf did not create the nsq user with home /var/lib/nsq"
    echo "ok   systemd-sysusers: nsq.sysusers.conf creates the nsq user"
else
    echo "SKIPPED: systemd-sysusers check (no systemd-sysusers on this machine)"
fi

#!/usr/bin/env bash
# Builds the Debian package (scripts/build_deb.sh) and installs it into a
# throwaway root, never this machine's own /usr.
#
#   bash scripts/check_package.sh [BIN_DIR]
#
# 1. The package from BIN_DIR (default target/debug), uncompressed (xz of
#    the debug binaries takes minutes): its control fields and files.
# 2. The throwaway root: this Debian machine's root file system under a
#    copy-on-write overlay (lower: /, upper: a temp dir), entered with
#    chroot; every write (dpkg's database, /usr/bin, /etc/passwd) lands in
#    the temp dir, dropped at the end. (A fresh mmdebstrap root measured
#    58-118 s here, most of it downloading and unpacking; the overlay is
#    ready at once.) Then in it:
#    `dpkg -i`: the binaries in /usr/bin, the units in /lib/systemd/system,
#    the configs in /etc/nsq, the nsq system user (home /var/lib/nsq, no
#    login shell) and /var/lib/nsq/nsqd (nsq, 0750);
#    `systemd-analyze verify --root` of the installed units;
#    the installed nsqlookupd and nsqd run once as nsq with the installed
#    /etc/nsq/*.toml (addresses moved to free ports): a message published
#    is queued in /var/lib/nsq/nsqd, SIGTERM ends nsqd with status 0;
#    `dpkg -r`: the files go, the configs and the data stay;
#    `dpkg -P`: nothing of the package is left, the nsq user included.
# Prints SKIPPED with the reason where it cannot run: not Debian (no dpkg;
# no adduser, which the package depends on),
# not root, no overlay mount, or nsq-rs or an nsq user already on this
# machine (the overlay would start with them). Without systemd-analyze,
# that check says SKIPPED.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN_DIR="${1:-${NSQ_BIN_DIR:-${CARGO_TARGET_DIR:-$ROOT/target}/debug}}"
BINS=(nsqd nsqlookupd nsqadmin nsq_tail nsq_stat nsq_to_file nsq_to_http nsq_to_nsq to_nsq)
DAEMONS=(nsqlookupd nsqd nsqadmin)

fail() { echo "check_package.sh: $*" >&2; exit 1; }

skip() { echo "SKIPPED: Debian package install checks: $*"; exit 0; }
for tool in dpkg dpkg-deb chroot adduser deluser; do
    command -v "$tool" >/dev/null || skip "no $tool on this machine"
done
[ "$(id -u)" = 0 ] || skip "not root (a chroot and mounts are needed)"
if dpkg-query -W nsq-rs >/dev/null 2>&1 || getent passwd nsq >/dev/null || getent group nsq >/dev/null ||
    [ -e /etc/nsq ] || [ -e /var/lib/nsq ]; then
    skip "this machine already has nsq-rs, an nsq user or group, /etc/nsq or /var/lib/nsq (the throwaway root is a copy-on-write view of it)"
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/nsq-check-package.XXXXXX")"
R="$WORK/root"
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    # innermost first: proc and dev inside the root, then the root
    grep -o " ${WORK}[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
    # never through a mount that is still there (dev is this machine's)
    rm -rf --one-file-system "$WORK"
}
trap cleanup EXIT

t0=$SECONDS
DEB="$(bash "$ROOT/scripts/build_deb.sh" --bin-dir "$BIN_DIR" --out "$WORK/deb" --compression none)"
info="$(dpkg-deb --field "$DEB" Package Version Architecture Depends)"
grep -qx 'Package: nsq-rs' <<<"$info" || fail "Package field: $info"
grep -q '^Depends: libc6 (>= 2\.[0-9]*), libgcc-s1, adduser$' <<<"$info" || fail "Depends field: $info"
contents="$(dpkg-deb --contents "$DEB" | awk '{print $6}' | sed 's#^\./#/#')"
for f in "${BINS[@]/#//usr/bin/}" "${DAEMONS[@]/%/.service}" "${DAEMONS[@]/%/.toml}"; do
    case "$f" in
        *.service) f="/lib/systemd/system/$f" ;;
        *.toml) f="/etc/nsq/$f" ;;
    esac
    grep -qx "$f" <<<"$contents" || fail "the package has no $f"
done
[ "$(dpkg-deb --ctrl-tarfile "$DEB" | tar -xO ./conffiles | sort | paste -sd' ')" = "/etc/nsq/nsqadmin.toml /etc/nsq/nsqd.toml /etc/nsq/nsqlookupd.toml" ] ||
    fail "conffiles are not the three configs"
echo "ok   $(basename "$DEB") built in $((SECONDS - t0)) s: $(($(stat -c %s "$DEB") / 1000000)) MB uncompressed (the binaries of $BIN_DIR, debug info stripped); $(grep '^Depends' <<<"$info")"

mkdir -p "$WORK/upper" "$WORK/overlay-work" "$R"
mount -t overlay overlay -o "lowerdir=/,upperdir=$WORK/upper,workdir=$WORK/overlay-work" "$R" 2>"$WORK/mount.err" ||
    skip "cannot mount an overlay of / here: $(cat "$WORK/mount.err")"
mount --bind /dev "$R/dev"
mount -t proc proc "$R/proc"
in_root() { chroot "$R" "$@"; }
cp "$DEB" "$R/tmp/nsq-rs.deb"
out="$(in_root dpkg -i /tmp/nsq-rs.deb 2>&1)" || fail "dpkg -i:"$'\n'"$out"
rm "$R/tmp/nsq-rs.deb"
[ "$(in_root dpkg-query -W -f '${Status}' nsq-rs)" = "install ok installed" ] || fail "nsq-rs is not installed"
for b in "${BINS[@]}"; do [ -x "$R/usr/bin/$b" ] || fail "/usr/bin/$b is not installed"; done
for d in "${DAEMONS[@]}"; do
    [ -f "$R/lib/systemd/system/$d.service" ] || fail "/lib/systemd/system/$d.service is not installed"
    grep -qx "ExecStart=/usr/bin/$d --config=/etc/nsq/$d.toml" "$R/lib/systemd/system/$d.service" ||
        fail "$d.service does not start /usr/bin/$d"
    [ -f "$R/etc/nsq/$d.toml" ] || fail "/etc/nsq/$d.toml is not installed"
done
user="$(in_root getent passwd nsq)" || fail "postinst made no nsq user"
IFS=: read -r _ _ uid gid _ home shell <<<"$user"
[ "$uid" -lt 1000 ] && [ "$home" = /var/lib/nsq ] && [ "$shell" = /usr/sbin/nologin ] ||
    fail "the nsq user is not a system user with home /var/lib/nsq and no login: $user"
[ "$(stat -c '%u:%g %a' "$R/var/lib/nsq/nsqd")" = "$uid:$gid 750" ] ||
    fail "/var/lib/nsq/nsqd is $(stat -c '%u:%g %a' "$R/var/lib/nsq/nsqd"), not nsq's with 0750"
echo "ok   dpkg -i: ${#BINS[@]} binaries in /usr/bin, units in /lib/systemd/system, /etc/nsq/*.toml, user $user, /var/lib/nsq/nsqd nsq 0750"

if command -v systemd-analyze >/dev/null; then
    units=()
    for d in "${DAEMONS[@]}"; do units+=("/lib/systemd/system/$d.service"); done
    out="$(systemd-analyze verify --root="$R" "${units[@]}" 2>&1)" ||
        fail "systemd-analyze verify of the installed units:"$'\n'"$out"
    [ -z "$out" ] || fail "systemd-analyze verify of the installed units:"$'\n'"$out"
    echo "ok   systemd-analyze verify --root: the installed ${DAEMONS[*]/%/.service}"
else
    echo "SKIPPED: systemd-analyze verify of the installed units (no systemd-analyze on this machine)"
fi

# The installed daemons, as the units run them: user nsq, the installed configs.
read -r LT LH NT NH < <(python3 "$ROOT/scripts/free_ports.py" 4)
[ -n "${NH:-}" ] || fail "no free ports"
# chroot itself, not a shell function, so that $! is the daemon (chroot execs it)
chroot --userspec=nsq:nsq "$R" /usr/bin/nsqlookupd --config=/etc/nsq/nsqlookupd.toml \
    --tcp-address="127.0.0.1:$LT" --http-address="127.0.0.1:$LH" >"$WORK/nsqlookupd.log" 2>&1 &
PIDS+=($!)
chroot --userspec=nsq:nsq "$R" /usr/bin/nsqd --config=/etc/nsq/nsqd.toml --tcp-address="127.0.0.1:$NT" --http-address="127.0.0.1:$NH" \
    --lookupd-tcp-address="127.0.0.1:$LT" --broadcast-address=127.0.0.1 >"$WORK/nsqd.log" 2>&1 &
PIDS+=($!)
NSQD_PID=$!
for _ in $(seq 300); do
    curl -sf "http://127.0.0.1:$NH/ping" >/dev/null 2>&1 && break
    kill -0 "$NSQD_PID" 2>/dev/null || fail "the installed nsqd exited:"$'\n'"$(tail -20 "$WORK/nsqd.log")"
    sleep 0.1
done
curl -sf -d "from the package" "http://127.0.0.1:$NH/pub?topic=installed" >/dev/null || fail "/pub to the installed nsqd failed"
[ "$(curl -sf "http://127.0.0.1:$NH/config/data_path")" = /var/lib/nsq/nsqd ] || fail "the installed nsqd does not use /var/lib/nsq/nsqd"
kill -TERM "$NSQD_PID"
rc=0
wait "$NSQD_PID" || rc=$?
[ "$rc" = 0 ] || fail "the installed nsqd exited with $rc on SIGTERM:"$'\n'"$(tail -20 "$WORK/nsqd.log")"
compgen -G "$R/var/lib/nsq/nsqd/installed.diskqueue.*" >/dev/null || fail "nsqd wrote no disk queue to /var/lib/nsq/nsqd: $(ls "$R/var/lib/nsq/nsqd")"
[ "$(stat -c %u "$R/var/lib/nsq/nsqd/nsqd.dat")" = "$uid" ] ||
    fail "nsqd.dat in /var/lib/nsq/nsqd is not nsq's"
for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
PIDS=()
echo "ok   the installed nsqd ran as nsq with /etc/nsq/nsqd.toml: a message queued in /var/lib/nsq/nsqd, SIGTERM exit 0"

out="$(in_root dpkg -r nsq-rs 2>&1)" || fail "dpkg -r:"$'\n'"$out"
for b in "${BINS[@]}"; do [ ! -e "$R/usr/bin/$b" ] || fail "dpkg -r left /usr/bin/$b"; done
[ ! -e "$R/lib/systemd/system/nsqd.service" ] || fail "dpkg -r left nsqd.service"
[ -f "$R/etc/nsq/nsqd.toml" ] && [ -d "$R/var/lib/nsq/nsqd" ] || fail "dpkg -r removed the configs or the data"
echo "ok   dpkg -r: binaries and units gone, /etc/nsq and /var/lib/nsq kept"
out="$(in_root dpkg -P nsq-rs 2>&1)" || fail "dpkg -P:"$'\n'"$out"
[ ! -e "$R/etc/nsq" ] && [ ! -e "$R/var/lib/nsq" ] || fail "dpkg -P left $(ls -d "$R/etc/nsq" "$R/var/lib/nsq" 2>/dev/null)"
! in_root getent passwd nsq >/dev/null || fail "dpkg -P left the nsq user"
! in_root getent group nsq >/dev/null || fail "dpkg -P left the nsq group"
[ -z "$(in_root dpkg-query -W -f '${Status}' nsq-rs 2>/dev/null)" ] || fail "dpkg still knows nsq-rs"
echo "ok   dpkg -P: /etc/nsq, /var/lib/nsq, the nsq user and group gone; dpkg knows no nsq-rs"

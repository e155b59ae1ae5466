#!/usr/bin/env bash
# Builds every nsq-rs binary (the three daemons and the apps) and installs
# them into PREFIX/bin.
#
#   bash scripts/install.sh [--prefix DIR] [--profile release|quick|dist] [--no-build]
#
#   --prefix DIR     install into DIR/bin (default: $CARGO_INSTALL_ROOT, else
#                    ~/.cargo, whose bin/ rustup already put on your PATH)
#   --profile NAME   release (default): fully optimised, as shipped (level 3,
#                    fat LTO, one codegen unit; the slowest build); quick:
#                    level 1, builds in three quarters of the CPU time, up to
#                    a quarter slower; dist: release with line tables (for perf)
#   --no-build       install what the profile's last build left in
#                    target/<profile>/ (e.g. under sudo, after building as yourself)
#
# One cargo build for all binaries (shared dependencies are compiled once),
# then `install -m 0755` of each into PREFIX/bin. For a system-wide install
# (the systemd units in deploy/ expect /usr/local/bin):
#
#   bash scripts/install.sh --prefix /usr/local       # builds, then asks for root if needed
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

BINS=(nsqd nsqlookupd nsqadmin nsq_tail to_nsq nsq_to_nsq nsq_stat nsq_to_file nsq_to_http nsq_pubsub nsq_bench)
PREFIX="${CARGO_INSTALL_ROOT:-$HOME/.cargo}"
PROFILE=release
BUILD=1

while [ "$#" -gt 0 ]; do
    case "$1" in
        --prefix) PREFIX="${2:?--prefix needs a directory}"; shift ;;
        --prefix=*) PREFIX="${1#*=}" ;;
        --profile) PROFILE="${2:?--profile needs a name}"; shift ;;
        --profile=*) PROFILE="${1#*=}" ;;
        --no-build) BUILD=0 ;;
        -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "install.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
case "$PROFILE" in
    release|quick|dist) ;;
    *) echo "install.sh: --profile is release, quick or dist, not $PROFILE" >&2; exit 2 ;;
esac

TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
case "$TARGET" in /*) ;; *) TARGET="$ROOT/$TARGET" ;; esac
OUT="$TARGET/$PROFILE"

if [ "$BUILD" = 1 ]; then
    args=()
    for b in "${BINS[@]}"; do args+=(--bin "$b"); done
    echo "==> cargo build --locked --profile $PROFILE (${#BINS[@]} binaries into $OUT)"
    (cd "$ROOT" && cargo build --locked --profile "$PROFILE" "${args[@]}")
fi
for b in "${BINS[@]}"; do
    if [ ! -x "$OUT/$b" ]; then
        echo "install.sh: $OUT/$b is missing; build it first (run without --no-build)" >&2
        exit 1
    fi
done

DEST="$PREFIX/bin"
SUDO=()
if ! mkdir -p "$DEST" 2>/dev/null || [ ! -w "$DEST" ]; then
    if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then
        echo "==> $DEST is not writable by $(id -un); installing with sudo"
        SUDO=(sudo)
        sudo mkdir -p "$DEST"
    else
        echo "install.sh: cannot write to $DEST" >&2
        exit 1
    fi
fi
echo "==> installing into $DEST: ${BINS[*]}"
for b in "${BINS[@]}"; do
    "${SUDO[@]}" install -m 0755 "$OUT/$b" "$DEST/$b"
done
case ":$PATH:" in
    *":$DEST:"*) echo "==> done; $("$DEST/nsqd" --version)" ;;
    *) echo "==> done; $DEST is not on your PATH: add it (export PATH=\"$DEST:\$PATH\")" ;;
esac

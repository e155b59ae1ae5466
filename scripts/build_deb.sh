#!/usr/bin/env bash
# Builds the Debian package nsq-rs_<version>_<arch>.deb with dpkg-deb from a
# staged tree (no debian/ source package, no cargo-deb: the binaries are
# whatever build you point it at, and dpkg-deb ships with dpkg).
#
#   bash scripts/build_deb.sh [--bin-dir DIR] [--out DIR]
#
#   --bin-dir DIR  the binaries to package (default target/release, the
#                  shipped build: `cargo build --locked --release --bins`)
#   --out DIR      where the .deb goes (default target/deb)
#   --compression xz|gzip|none
#                  dpkg-deb's compression (default xz, as Debian ships; xz
#                  of the debug binaries takes minutes on two cores, so the
#                  test command's package is built with none)
#
# The package (deploy/debian/: control template, maintainer scripts):
#   /usr/bin/        nsqd nsqlookupd nsqadmin nsq_tail nsq_stat nsq_to_file
#                    nsq_to_http nsq_to_nsq to_nsq (debug info stripped)
#   /lib/systemd/system/  the units of deploy/systemd/, ExecStart=/usr/bin/...
#   /etc/nsq/        the example configs of deploy/config/ (conffiles)
#   /usr/share/doc/nsq-rs/copyright
# postinst makes the nsq system user (adduser) and /var/lib/nsq/nsqd; purge
# deletes both. Version: the workspace's (Cargo.toml); Depends: the newest
# glibc symbol version the binaries use. DEBFULLNAME and DEBEMAIL set the
# Maintainer field. Prints the .deb's path.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
BIN_DIR="$TARGET/release"
OUT="$TARGET/deb"
COMPRESSION=xz
BINS=(nsqd nsqlookupd nsqadmin nsq_tail nsq_stat nsq_to_file nsq_to_http nsq_to_nsq to_nsq)
DAEMONS=(nsqlookupd nsqd nsqadmin)

while [ "$#" -gt 0 ]; do
    case "$1" in
        --bin-dir) BIN_DIR="${2:?--bin-dir needs a directory}"; shift ;;
        --bin-dir=*) BIN_DIR="${1#*=}" ;;
        --out) OUT="${2:?--out needs a directory}"; shift ;;
        --out=*) OUT="${1#*=}" ;;
        --compression) COMPRESSION="${2:?--compression needs xz, gzip or none}"; shift ;;
        --compression=*) COMPRESSION="${1#*=}" ;;
        -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "build_deb.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
for b in "${BINS[@]}"; do
    [ -x "$BIN_DIR/$b" ] || { echo "build_deb.sh: $BIN_DIR/$b is missing; build it first" >&2; exit 1; }
done

VERSION="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' "$ROOT/Cargo.toml")"
ARCH="$(dpkg --print-architecture)"
STAGE="$(mktemp -d "${TMPDIR:-/tmp}/nsq-deb.XXXXXX")"
trap 'rm -rf "$STAGE"' EXIT
PKG="$STAGE/nsq-rs"

install -d "$PKG/DEBIAN" "$PKG/usr/bin" "$PKG/lib/systemd/system" "$PKG/etc/nsq" "$PKG/usr/share/doc/nsq-rs"
for b in "${BINS[@]}"; do
    strip --strip-debug -o "$PKG/usr/bin/$b" "$BIN_DIR/$b"
    chmod 0755 "$PKG/usr/bin/$b"
done
for d in "${DAEMONS[@]}"; do
    sed "s#/usr/local/bin/#/usr/bin/#" "$ROOT/deploy/systemd/$d.service" >"$PKG/lib/systemd/system/$d.service"
    install -m 0644 "$ROOT/deploy/config/$d.toml" "$PKG/etc/nsq/$d.toml"
done
chmod 0644 "$PKG"/lib/systemd/system/*.service
{
    echo "nsq-rs: NSQ's daemons and apps in Rust"
    echo
    cat "$ROOT/LICENSE"
} >"$PKG/usr/share/doc/nsq-rs/copyright"
chmod 0644 "$PKG/usr/share/doc/nsq-rs/copyright"

glibc="$(objdump -T "$PKG"/usr/bin/* | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n 1)"
size_kb="$(du -sk --exclude=DEBIAN "$PKG" | cut -f1)"
maintainer="${DEBFULLNAME:-nsq-rs authors} <${DEBEMAIL:-nsq-rs@localhost}>"
sed -e "s/@VERSION@/$VERSION/" -e "s/@ARCH@/$ARCH/" -e "s/@INSTALLED_SIZE@/$size_kb/" \
    -e "s/@GLIBC@/$glibc/" -e "s/@MAINTAINER@/$maintainer/" \
    "$ROOT/deploy/debian/control.in" >"$PKG/DEBIAN/control"
for s in postinst prerm postrm; do install -m 0755 "$ROOT/deploy/debian/$s" "$PKG/DEBIAN/$s"; done
(cd "$PKG" && find etc -type f | sed 's#^#/#' | sort) >"$PKG/DEBIAN/conffiles"
(cd "$PKG" && find usr lib -type f -print0 | sort -z | xargs -0 md5sum) >"$PKG/DEBIAN/md5sums"

mkdir -p "$OUT"
DEB="$OUT/nsq-rs_${VERSION}_${ARCH}.deb"
dpkg-deb --root-owner-group -Z"$COMPRESSION" --build "$PKG" "$DEB" >/dev/null
echo "$DEB"

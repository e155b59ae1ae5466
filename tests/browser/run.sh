#!/usr/bin/env bash
# Real-browser test of nsqadmin (headless Chromium driven by playwright-core).
#
# Installs what it needs (chromium from Debian if /usr/bin/chromium is
# missing, playwright-core from npm into tests/browser/node_modules; never a
# browser download), builds the daemons unless NSQ_BIN_DIR points at built
# ones, then runs nsqadmin.test.js, which starts its own cluster on free
# 127.0.0.1 ports and stops it afterwards. With --install-only it installs
# what is missing and exits.
#
# Screenshots go to $SCREENSHOT_DIR (default: target/nsqadmin-screens, printed
# at the end); the cluster's data dirs and the browser profile go to a temp
# dir the test removes when it ends.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"

if [ ! -x /usr/bin/chromium ]; then
  echo "==> installing Debian's chromium (needed by the nsqadmin browser test)"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || [ ! -x /usr/bin/chromium ]; then
    echo "SKIPPED: nsqadmin browser test — chromium could not be installed on this machine (apt-get failed)"
    exit 0
  fi
fi
if [ ! -d "$HERE/node_modules/playwright-core" ]; then
  echo "==> installing playwright-core from npm into $HERE/node_modules (package-lock.json)"
  (cd "$HERE" && npm ci --no-audit --no-fund)
fi
if [ "${1:-}" = "--install-only" ]; then exit 0; fi
if [ -z "${NSQ_BIN_DIR:-}" ]; then
  (cd "$ROOT" && cargo build -p nsqd-bin -p nsqlookupd-bin -p nsqadmin-bin)
  NSQ_BIN_DIR="$ROOT/target/debug"
fi
OUT="${SCREENSHOT_DIR:-${CARGO_TARGET_DIR:-$ROOT/target}/nsqadmin-screens}"

exec node "$HERE/nsqadmin.test.js" "$NSQ_BIN_DIR" "$OUT"

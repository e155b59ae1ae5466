#!/usr/bin/env bash
# A rolling upgrade under load, and a downgrade (issue 45; docs/replication.md,
# "Rolling upgrades"): builds nsqd (debug) at OLD_COMMIT, the build before the
# first change of issue 45, in its own worktree and target dir under
# target/upgrade-old/, builds this checkout's binaries, then runs
# tests/tests/replication/upgrade.rs with NSQ_OLD_BIN_DIR pointing at the old
# build. The report (steps, longest time without an OK, the account) goes to
# target/upgrade-old/report.md and is printed.
#
#   bash scripts/rolling_upgrade.sh            # OLD_COMMIT=a8d206a
#   OLD_COMMIT=<rev> bash scripts/rolling_upgrade.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OLD_COMMIT="${OLD_COMMIT:-a8d206a}"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
OLD="$TARGET/upgrade-old"
mkdir -p "$OLD"
if [ ! -e "$OLD/src/.git" ]; then
    git worktree add --detach "$OLD/src" "$OLD_COMMIT" >/dev/null
else
    git -C "$OLD/src" checkout -q --detach "$OLD_COMMIT"
fi
echo "==> nsqd at $OLD_COMMIT (the old build) into $OLD/target/debug"
(cd "$OLD/src" && CARGO_TARGET_DIR="$OLD/target" cargo build --bin nsqd)
echo "==> this checkout's binaries"
cargo build --workspace --bins
export NSQ_BIN_DIR="${NSQ_BIN_DIR:-$TARGET/debug}"
export NSQ_OLD_BIN_DIR="$OLD/target/debug"
export NSQ_UPGRADE_REPORT="$OLD/report.md"
rm -f "$NSQ_UPGRADE_REPORT"
cargo test -p nsq-tests --test replication upgrade -- --nocapture --test-threads=1
echo "==> report ($NSQ_UPGRADE_REPORT)"
cat "$NSQ_UPGRADE_REPORT"

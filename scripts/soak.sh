#!/usr/bin/env bash
# The runtime soak (issue 13; docs/reliability.md): one 60-step run on 4 ranks interrupted in turn
# by SIGKILL, SIGSTOP, a taken rendezvous port, a full disk during a save (a small tmpfs: needs
# root, skipped otherwise) and a replaced data file, resumed after each; then compared with the
# same run uninterrupted. Prints the table docs/reliability.md reproduces. About 40 s.
#
#   scripts/soak.sh [BUILD_DIR]      (default: build; build it first with scripts/build.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
BIN=$BUILD/tests/runtime/pprun_e2e_tests
[ -x "$BIN" ] || { echo "soak.sh: $BIN is missing: build first (bash scripts/build.sh)" >&2; exit 2; }
exec "$BIN" --gtest_filter='Soak.*'

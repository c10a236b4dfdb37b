#!/usr/bin/env bash
# The README's test command: builds (if needed) and runs the whole test suite with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
bash scripts/build.sh
ctest --test-dir "$BUILD" --output-on-failure -j "${JOBS:-$(nproc)}" "$@"

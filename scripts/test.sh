#!/usr/bin/env bash
# The README's test command: installs what is missing (scripts/install-deps.sh: Debian packages and
# the Python environment .venv/), builds (if needed) and runs the whole test suite with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
bash scripts/install-deps.sh
bash scripts/build.sh
ctest --test-dir "$BUILD" --output-on-failure -j "${JOBS:-$(nproc)}" "$@"

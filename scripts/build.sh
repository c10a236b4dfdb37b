#!/usr/bin/env bash
# Configures and builds (Release) into build/: everything, or only the targets given
# (scripts/build.sh ppcompile pprun). Re-running only rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$BUILD" -j "$JOBS" ${1:+--target "$@"}

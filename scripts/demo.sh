#!/usr/bin/env bash
# The README's first command: installs the dependencies (Debian packages), builds, and runs the
# demo: the compiled plan of DeepSeek-V3's layout (PP16 x VPP2, Interleaved 1F1B) as a per-rank
# table.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
PPC=${BUILD_DIR:-build}/tools/ppcompile/ppcompile
echo
echo "== DeepSeek-V3 (layouts/deepseek-v3.layout), PP16 x VPP2, Interleaved1F1B, 32 microbatches =="
echo "\$ ppcompile --layout-file layouts/deepseek-v3.layout --pp 16 --schedule Interleaved1F1B --microbatches 32"
"$PPC" --layout-file layouts/deepseek-v3.layout --pp 16 --schedule Interleaved1F1B --microbatches 32

#!/usr/bin/env bash
# The README's first command: installs the dependencies (Debian packages), builds, and runs the
# demo: the compiled plan of DeepSeek-V3's layout (PP16 x VPP2, Interleaved 1F1B) as a per-rank
# table, then trains that plan (61 layers, the MTP layer and the loss, at a tiny width) on 16 CPU
# ranks, one process each.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh ppcompile pprun  # the tools only: scripts/test.sh builds the rest
PPC=${BUILD_DIR:-build}/tools/ppcompile/ppcompile
echo
echo "== DeepSeek-V3 (layouts/deepseek-v3.layout), PP16 x VPP2, Interleaved1F1B, 32 microbatches =="
echo "\$ ppcompile --layout-file layouts/deepseek-v3.layout --pp 16 --schedule Interleaved1F1B --microbatches 32"
"$PPC" --layout-file layouts/deepseek-v3.layout --pp 16 --schedule Interleaved1F1B --microbatches 32

echo
echo "== Training that plan: all 61 layers, the MTP layer and the loss (tiny width) on 16 CPU ranks =="
PLAN=${BUILD_DIR:-build}/deepseek-v3-plan.json
echo "\$ ppcompile --layout-file layouts/deepseek-v3.layout --pp 16 --schedule Interleaved1F1B --microbatches 32 --emit json -o $PLAN"
"$PPC" --layout-file layouts/deepseek-v3.layout --pp 16 --schedule Interleaved1F1B --microbatches 32 \
  --emit json -o "$PLAN"
echo "\$ pprun --plan $PLAN --config examples/deepseek-v3-tiny.json --global-batch 32 --steps 10"
"${BUILD_DIR:-build}/tools/pprun/pprun" --plan "$PLAN" --config examples/deepseek-v3-tiny.json \
  --global-batch 32 --steps 10

#!/usr/bin/env bash
# The README's first command: installs the dependencies (Debian packages), builds, and runs the
# demo: the compiled plan of DeepSeek-V3's layout (PP16 x VPP2, Interleaved 1F1B) as a per-rank
# table, then trains a small model on 4 CPU ranks (one process each) from a compiled plan.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
PPC=${BUILD_DIR:-build}/tools/ppcompile/ppcompile
echo
echo "== DeepSeek-V3 (layouts/deepseek-v3.layout), PP16 x VPP2, Interleaved1F1B, 32 microbatches =="
echo "\$ ppcompile --layout-file layouts/deepseek-v3.layout --pp 16 --schedule Interleaved1F1B --microbatches 32"
"$PPC" --layout-file layouts/deepseek-v3.layout --pp 16 --schedule Interleaved1F1B --microbatches 32

echo
echo "== Training a small Llama-style model from a compiled plan: 4 CPU ranks, 1F1B, 8 microbatches =="
PLAN=${BUILD_DIR:-build}/demo-plan.json
echo "\$ ppcompile --layout 'Ett|tt|tt|ttL' --pp 4 --schedule 1F1B --microbatches 8 --emit json -o $PLAN"
"$PPC" --layout 'Ett|tt|tt|ttL' --pp 4 --schedule 1F1B --microbatches 8 --emit json -o "$PLAN"
echo "\$ pprun --plan $PLAN --steps 40"
"${BUILD_DIR:-build}/tools/pprun/pprun" --plan "$PLAN" --steps 40

#!/usr/bin/env bash
# A tiny DeepSeek-V3-style mixture of experts (examples/deepseek-v3-moe-tiny.json: a dense first
# layer, 8 routed experts of top-2 with a sigmoid router and a shared expert, one MTP depth)
# trained end to end on the CPU, pipelined over 4 ranks by DualPipeV with its experts sharded over
# 2 data-parallel replicas: pp 4 x ep 2, 8 processes (docs/pprun.md, "Expert parallelism").
# Builds the tools first if they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD_DIR:-build}
[ -x "$B/tools/pprun/pprun" ] && [ -x "$B/tools/ppcompile/ppcompile" ] || bash scripts/build.sh ppcompile pprun
PLAN=$(mktemp --suffix=.json)
trap 'rm -f "$PLAN"' EXIT
echo "\$ ppcompile --layout 'Et|tt|tt|tt|tt|tt|t,m|L' --pp 4 --schedule DualPipeV --microbatches 8 --emit json"
"$B/tools/ppcompile/ppcompile" --layout 'Et|tt|tt|tt|tt|tt|t,m|L' --pp 4 --schedule DualPipeV \
  --microbatches 8 --emit json -o "$PLAN"
echo "\$ pprun --plan PLAN --config examples/deepseek-v3-moe-tiny.json --dp 2 --ep 2 --global-batch 32 --steps ${STEPS:-30}"
"$B/tools/pprun/pprun" --plan "$PLAN" --config examples/deepseek-v3-moe-tiny.json --dp 2 --ep 2 \
  --global-batch 32 --steps "${STEPS:-30}" --threads 1 --progress lines

#!/usr/bin/env bash
# The pipeline as users run it, in real processes: measured step time against the makespan the
# compiler's simulator gives for the per-action times measured in the same run (pprun prints the
# comparison at the end of every run), and the runtime's own overhead per action.
#
#   bench/runtime_pipeline.sh [BUILD_DIR]      (default: build)
#
# 1. 1F1B at pp 2, one rank per core, on a model where compute dominates.
# 2. The same on a tiny model (the runtime's overhead per action, in real processes).
set -euo pipefail
BUILD=${1:-build}
PPC=$BUILD/tools/ppcompile/ppcompile
PPRUN=$BUILD/tools/pprun/pprun
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

"$PPC" --layout 'Etttt|ttttL' --pp 2 --schedule 1F1B --microbatches 8 --emit json -o "$TMP/1f1b.json"

echo "== 1F1B, pp 2, one rank per core: 8 layers, hidden 256, ffn 704, seq 128, 8 microbatches of 4"
"$PPRUN" --plan "$TMP/1f1b.json" --threads 1 --steps 12 --progress none \
  --hidden 256 --heads 8 --kv-heads 4 --ffn 704 --seq-len 128 --global-batch 32 | grep -E 'timing|peak'

echo "== 1F1B, pp 2, tiny model (hidden 16, seq 8): runtime overhead per action"
"$PPRUN" --plan "$TMP/1f1b.json" --threads 1 --steps 60 --progress none \
  --hidden 16 --heads 2 --kv-heads 1 --ffn 32 --vocab 64 --seq-len 8 --global-batch 16 | grep -E 'timing'

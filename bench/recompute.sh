#!/usr/bin/env bash
# Issue 42: full recomputation against keeping every activation, side by side in one run, on the
# CPU: each rank's measured peak activation bytes (pprun's summary: what each F leaves alive on
# LibTorch's CPU allocator, and each I for its W, summed over the microbatches in flight) and the
# step (the replay, the slowest rank; median over the steps after the first). Goal: full at most
# half the bytes of none, its step at most 35 % longer. Also selective.
#
#   bench/recompute.sh [BUILD_DIR] [ROUNDS]      (default: build, 2)
#
# The modes alternate round by round (none, full, selective, none, ...) so that the machine's
# load falls on each alike.
set -euo pipefail
BUILD=${1:-build}
ROUNDS=${2:-2}
PPC=$BUILD/tools/ppcompile/ppcompile
PPRUN=$BUILD/tools/pprun/pprun
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

"$PPC" --layout 'Etttt|ttttL' --pp 2 --schedule 1F1B --microbatches 8 --emit json -o "$TMP/1f1b.json"
MODEL=(--hidden 256 --heads 8 --kv-heads 4 --ffn 704 --seq-len 128 --global-batch 32)

echo "== 1F1B, pp 2, one rank per core: 8 layers, hidden 256, ffn 704, seq 128, 8 microbatches of 4"
for round in $(seq "$ROUNDS"); do
  for mode in none full selective; do
    out=$("$PPRUN" --plan "$TMP/1f1b.json" --threads 1 --steps 8 --progress none "${MODEL[@]}" \
      --recompute "$mode" 2>&1)
    bytes=$(grep -oP 'peak activation bytes per rank: \K[0-9 ]+' <<<"$out")
    step=$(grep -oP 'step \K[0-9.]+(?= ms, simulated)' <<<"$out")
    echo "round $round  --recompute $mode  peak activation bytes per rank: $bytes  step: $step ms"
  done
done

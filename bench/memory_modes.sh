#!/usr/bin/env bash
# Issue 42's goal for the compiler, side by side in one run: DeepSeek-V3's costs
# (examples/cost-deepseek-v3.json), pp 16, 64 microbatches, 16 stages (E and 3 decoder layers, 14
# stages of 4, then 2 decoder layers, MTP and the head). The memory limit is 0.6x the peak
# (activations + parameters, worst rank) of 1F1B keeping every activation. Printed: each named
# schedule that runs the layout with full recomputation everywhere (--recompute full), Auto
# choosing its memory modes under the limit with recomputation only (the cost file without
# host_bandwidth) and with offloading allowed (the file as it is), each with its makespan, its
# peak against the limit and its lower bound (which counts the chosen modes' costs). The figures
# in bench/README.md come from this script.
#
#   bench/memory_modes.sh [PPCOMPILE]
set -euo pipefail
cd "$(dirname "$0")/.."
PPC=${1:-build/tools/ppcompile/ppcompile}
COST=examples/cost-deepseek-v3.json
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# The cost file without host_bandwidth (parsed, not edited as text: the field's place in the file
# does not matter).
python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c.pop("host_bandwidth"); json.dump(c, sys.stdout)' \
  "$COST" > "$TMP/recompute-only.json"
LAYOUT="Ettt|$(printf 'tttt|%.0s' $(seq 14))ttmL"
ARGS=(--layout "$LAYOUT" --pp 16 --microbatches 64)

# Peak activations + parameters of the worst rank, in bytes (from --emit stats and the costs).
peak_of() { # stats file -> bytes: the "memory limit" line with a limit of 1 byte gives the peak
  sed -n 's/.*(peak \([0-9.]*\) GiB.*/\1/p' "$1" | awk '{printf "%.0f", $1 * 1073741824}'
}
"$PPC" "${ARGS[@]}" --schedule 1F1B --cost "$COST" --memory-limit 1 --emit stats > "$TMP/1f1b"
PEAK=$(peak_of "$TMP/1f1b")
LIMIT=$(awk -v p="$PEAK" 'BEGIN {printf "%.0f", 0.6 * p}')
printf 'DeepSeek-V3 costs, pp 16, 64 microbatches; 1F1B keeping everything peaks at %s GiB;\n' \
  "$(awk -v p="$PEAK" 'BEGIN {printf "%.1f", p / 1073741824}')"
printf 'memory limit 0.6x: %s bytes (%s GiB)\n\n' "$LIMIT" \
  "$(awk -v p="$LIMIT" 'BEGIN {printf "%.1f", p / 1073741824}')"
printf '%-44s %10s %8s %10s %6s  %s\n' plan makespan fits "lower bnd" ratio modes
row() { # name, stats file
  local ms fits lb modes
  ms=$(sed -n 's/^makespan *//p' "$2")
  fits=$(grep -q ': fits' "$2" && echo yes || echo no)
  lb=$(sed -n 's/^lower bound *\([0-9.]*\).*/\1/p' "$2")
  modes=$(sed -n 's/^memory modes *//p' "$2")
  [ ${#modes} -gt 60 ] && modes="${modes:0:57}..."
  printf '%-44s %10s %8s %10s %6s  %s\n' "$1" "$ms" "$fits" "${lb:--}" \
    "$([ -n "$lb" ] && awk -v a="$ms" -v b="$lb" 'BEGIN {printf "%.3f", a / b}' || echo -)" "$modes"
}
BEST=
for s in GPipe 1F1B ZB-H1 ZB-H2 DualPipeV DualPipe; do
  if "$PPC" "${ARGS[@]}" --schedule "$s" --cost "$COST" --memory-limit "$LIMIT" --recompute full \
       --emit stats > "$TMP/$s" 2>/dev/null; then
    row "$s, --recompute full" "$TMP/$s"
    ms=$(sed -n 's/^makespan *//p' "$TMP/$s")
    if grep -q ': fits' "$TMP/$s"; then
      BEST=$(awk -v a="$ms" -v b="${BEST:-inf}" 'BEGIN {print (b == "inf" || a < b) ? a : b}')
    fi
  fi
done
for cost in "$TMP/recompute-only.json" "$COST"; do
  name="Auto, modes chosen ($([ "$cost" = "$COST" ] && echo offload allowed || echo recompute only))"
  "$PPC" "${ARGS[@]}" --schedule Auto --cost "$cost" --memory-limit "$LIMIT" --emit stats \
    > "$TMP/auto"
  row "$name" "$TMP/auto"
  ms=$(sed -n 's/^makespan *//p' "$TMP/auto")
  lb=$(sed -n 's/^lower bound *\([0-9.]*\).*/\1/p' "$TMP/auto")
  awk -v a="$ms" -v b="$BEST" -v l="$lb" 'BEGIN {
    printf "  %.1f %% shorter than the best named schedule with full recomputation that fits (%s); %.1f %% above its lower bound\n",
      100 * (1 - a / b), b, 100 * (a / l - 1) }'
done

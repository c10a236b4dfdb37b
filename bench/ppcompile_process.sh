#!/usr/bin/env bash
# ppcompile as users run it: whole processes with default flags and no environment, for every
# --emit that needs no drawing, on the two configurations of issue 11, against its targets (50x
# PyTorch's schedule generation + lowering: 11.8 s and 0.89 s there, so 236 ms and 18 ms).
# Times come from hyperfine (median, min and max of RUNS runs, output to /dev/null); peak memory
# and page faults from GNU time (one run). The figures in bench/README.md come from this script.
#
#   bench/ppcompile_process.sh [-r RUNS] [--vs OTHER_PPCOMPILE] [PPCOMPILE]
#
# PPCOMPILE defaults to build/tools/ppcompile/ppcompile. With --vs, each case also runs the other
# binary, alternating A B A B ..., and prints the median ratio A/B of the pairs (pairs keep the
# ratio meaningful on a machine whose speed drifts).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=30
OTHER=
while [ $# -gt 0 ]; do
  case "$1" in
    -r) RUNS=$2; shift 2 ;;
    --vs) OTHER=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) break ;;
  esac
done
PPC=${1:-build/tools/ppcompile/ppcompile}
for tool in hyperfine /usr/bin/time; do
  command -v "$tool" >/dev/null || { echo "needs $tool (Debian: apt-get install hyperfine time)" >&2; exit 2; }
done
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# name | arguments | target in ms
CASES=(
  "pp64-vpp4-m1024|--stages 256 --pp 64 --vpp 4 --schedule Interleaved1F1B --microbatches 1024|236"
  "pp32-vpp4-m256|--stages 128 --pp 32 --vpp 4 --schedule Interleaved1F1B --microbatches 256|18"
)
EMITS="stats table csv json layout"

# Median of the numbers on stdin.
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

# Seconds one run of "$@" takes (stdout to /dev/null).
one_run() {
  local t0 t1
  t0=$EPOCHREALTIME
  "$@" >/dev/null
  t1=$EPOCHREALTIME
  awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.6f\n", b - a}'
}

printf '%-16s %-7s %10s %10s %10s %8s %9s %9s%s\n' case emit "median ms" "min ms" "max ms" target \
  "peak MiB" "faults" "${OTHER:+  A/B median (min-max)}"
for c in "${CASES[@]}"; do
  IFS='|' read -r name args target <<<"$c"
  for emit in $EMITS; do
    read -ra cmd <<<"$PPC $args --emit $emit"
    hyperfine -N --style none --warmup 3 --runs "$RUNS" --export-csv "$TMP/h.csv" "${cmd[*]}" \
      >/dev/null 2>"$TMP/hyperfine.log"
    IFS=, read -r _ _ _ med _ _ min max < <(tail -n 1 "$TMP/h.csv")
    /usr/bin/time -f '%M %R' -o "$TMP/t" "${cmd[@]}" >/dev/null
    read -r kb faults <"$TMP/t"
    ratio=
    if [ -n "$OTHER" ]; then
      read -ra other <<<"$OTHER $args --emit $emit"
      : >"$TMP/r"
      for _ in $(seq "$RUNS"); do
        a=$(one_run "${cmd[@]}")
        b=$(one_run "${other[@]}")
        awk -v a="$a" -v b="$b" 'BEGIN {printf "%.4f\n", a / b}' >>"$TMP/r"
      done
      ratio=$(printf '  %.3f (%.3f-%.3f)' "$(median <"$TMP/r")" "$(sort -g "$TMP/r" | head -n 1)" \
        "$(sort -g "$TMP/r" | tail -n 1)")
    fi
    awk -v n="$name" -v e="$emit" -v med="$med" -v min="$min" -v max="$max" -v t="$target" \
      -v kb="$kb" -v f="$faults" -v r="$ratio" 'BEGIN {
        printf "%-16s %-7s %10.1f %10.1f %10.1f %8s %9.1f %9d%s\n", n, e, med * 1000, min * 1000,
          max * 1000, "<= " t, kb / 1024, f, r }'
  done
done

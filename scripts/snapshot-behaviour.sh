#!/usr/bin/env bash
# Writes what ppcompile and pprun produce on a fixed set of inputs into one directory, so that a
# refactoring can be checked to change nothing: run it before and after, then `diff -r`.
#
#   scripts/snapshot-behaviour.sh OUT_DIR [BUILD_DIR]
#
# ppcompile: every --emit on several plans (table without colour, csv both ways, json, stats,
# layout, layout-string, svg, dot, trace, html), --from-csv and --from-json round trips,
# --compare, --balance, --autotune, and a few user errors (exit code and message).
# pprun and examples/gpt2: the per-step losses and gradient norms (--metrics without its timing fields), the final
# parameters (--dump-params) and the checkpoint files, pipelined and --reference.
# Everything written is deterministic; timings are dropped.
set -euo pipefail
OUT=${1:?usage: snapshot-behaviour.sh OUT_DIR [BUILD_DIR]}
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD=$(cd "${2:-$ROOT/build}" && pwd)
PPC="$BUILD/tools/ppcompile/ppcompile"
PPRUN="$BUILD/tools/pprun/pprun"
GPT2="$BUILD/examples/gpt2/gpt2"  # a model of a user's own, through the library (docs/library.md)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$ROOT"

# ppcompile NAME ARGS...: stdout, stderr and the exit code of one run.
ppc() {
  local name=$1
  shift
  local rc=0
  "$PPC" "$@" >"$OUT/ppc.$name.out" 2>"$OUT/ppc.$name.err" || rc=$?
  echo "$rc" >"$OUT/ppc.$name.rc"
}

PLANS=(
  "1f1b|--layout Ett|tt|tt|ttL --pp 4 --schedule 1F1B --microbatches 8"
  "gpipe|--stages 4 --pp 4 --schedule GPipe --microbatches 5"
  "i1f1b|--layout Et|t*4|t|tL --pp 2 --schedule Interleaved1F1B --microbatches 4"
  "bfs|--stages 8 --pp 4 --schedule LoopedBFS --microbatches 6"
  "zbh1|--stages 4 --pp 4 --schedule ZB-H1 --microbatches 8"
  "zbh2|--layout Ett|tt|tt|ttL --pp 4 --schedule ZB-H2 --microbatches 8"
  "zb1p|--stages 8 --pp 4 --schedule InterleavedZeroBubble --microbatches 7"
  "zbv|--layout Et|t|t|t|t|t|t|tL --pp 4 --schedule ZBV --microbatches 8"
  "dualpipev|--layout Et|t|t|t|t|t|t|tL --pp 4 --schedule DualPipeV --microbatches 10"
  "dualpipe|--layout Et|tt|tt|tL --pp 4 --schedule DualPipe --microbatches 8"
  "dsv3|--layout-file layouts/deepseek-v3.layout --pp 16 --schedule Interleaved1F1B --microbatches 32"
)
for entry in "${PLANS[@]}"; do
  name=${entry%%|*}
  read -r -a args <<<"${entry#*|}"
  for emit in table csv json stats layout layout-string svg dot trace html; do
    ppc "$name.$emit" "${args[@]}" --emit "$emit" --color never
  done
  ppc "$name.csv-compute" "${args[@]}" --emit csv --compute-only
  ppc "$name.compact" "${args[@]}" --compact --color never
  # Graphviz lays out a 16-rank plan's graph in minutes: small plans only.
  [ "$name" = dsv3 ] || ppc "$name.dotsvg" "${args[@]}" --emit svg --engine dot
  cp "$OUT/ppc.$name.csv.out" "$OUT/in.$name.csv"
  cp "$OUT/ppc.$name.json.out" "$OUT/in.$name.json"
  ppc "$name.from-csv" --from-csv "$OUT/in.$name.csv" --emit json
  ppc "$name.from-json" --from-json "$OUT/in.$name.json" --emit table --color never
  ppc "$name.o" "${args[@]}" --emit json -o "$OUT/ppc.$name.o.file"
done
rm -f "$OUT"/in.*

ppc compare.dsv3 --layout-file layouts/deepseek-v3.layout --pp 16 --microbatches 64 --compare
ppc compare.cost --layout 'Et*61,mL' --pp 16 --microbatches 64 --compare --cost examples/cost-deepseek-v3.json
ppc balance.1f1b --layout 'Ettttttt|tL' --pp 2 --schedule 1F1B --microbatches 8 --balance
ppc balance.emit --layout 'Ettttttt|tL' --pp 2 --schedule 1F1B --microbatches 8 --balance --emit json
ppc autotune.table --layout 'Et*61,mL' --pp 16 --microbatches 64 \
  --cost examples/cost-deepseek-v3.json --memory-limit 80GiB --autotune
ppc autotune.emit --layout 'Et*15,L' --pp 4 --microbatches 8,16 --autotune --emit layout
ppc err.layout --layout 'Et|tx|L' --pp 3 --schedule 1F1B --microbatches 4
ppc err.schedule --layout 'Et|tL' --pp 2 --schedule Nope --microbatches 4
ppc err.vpp --layout 'Et|t|t|tL' --pp 4 --schedule ZBV --microbatches 4
ppc err.json --from-json /dev/null

# pprun and examples/gpt2: losses, final parameters and checkpoints (timing fields dropped from the
# metrics).
RUNS=(
  "1f1b;--layout Ett|tt|tt|ttL --pp 4 --schedule 1F1B --microbatches 8;"
  "zbh2;--layout Ett|tt|tt|ttL --pp 4 --schedule ZB-H2 --microbatches 8;"
  "dualpipev-mtp;--layout Et|t|t|t|t|t|tm|L --pp 4 --schedule DualPipeV --microbatches 8;"
  "dualpipe-tied;--layout Et|tt|tt|tL --pp 4 --schedule DualPipe --microbatches 8;--tie-embeddings"
  "i1f1b-dp;--layout Et|tt|tt|tL --pp 2 --schedule Interleaved1F1B --microbatches 4;--dp 2"
  "gpt2-1f1b;--layout Ett|tt|tt|ttL --pp 4 --schedule 1F1B --microbatches 8;;gpt2"
  "gpt2-zbv;--layout Et|t|t|t|t|t|t|tL --pp 4 --schedule ZBV --microbatches 8;;gpt2"
)
# A metrics file's whole lines: a last line without its newline is one a run killed while writing
# it left (docs/pprun.md, Outputs), not a line of the metrics.
complete_lines() {
  if [ -n "$(tail -c 1 "$1")" ]; then sed '$d' "$1"; else cat "$1"; fi
}
strip_timing() {
  # scalars (step_time_s, ...), per-rank arrays (compute_s) and the straggler object (which rank
  # was slowest, by how much): all timings
  complete_lines "$1" | sed -E -e 's/,"(step_time_s|tokens_per_s|elapsed_s|[a-z_]*_time[a-z_]*|[a-z_]*seconds[a-z_]*|[a-z_]*_ms|[a-z_]*_s)":[-0-9.e+]+//g' \
    -e 's/,"[a-z_]*_s":\[[-0-9.e+,]*\]//g' -e 's/,"straggler":\{[^}]*\}//g'
}
checksums() {  # every file under a directory, by relative path, with its sha256
  (cd "$1" && find . -type f | LC_ALL=C sort | xargs sha256sum)
}
for entry in "${RUNS[@]}"; do
  IFS=';' read -r name plan extra program <<<"$entry"
  run=$PPRUN
  [ "${program:-}" = gpt2 ] && run=$GPT2
  read -r -a pargs <<<"$plan"
  read -r -a xargs_ <<<"$extra"
  dir="$OUT/run.$name"
  mkdir -p "$dir"
  "$PPC" "${pargs[@]}" --emit json -o "$dir/plan.json"
  "$run" --plan "$dir/plan.json" --steps 4 --global-batch 8 "${xargs_[@]}" --progress none \
    --metrics "$dir/m.jsonl" --dump-params "$dir/params" --save "$dir/ckpt" >/dev/null 2>&1
  "$run" --plan "$dir/plan.json" --steps 4 --global-batch 8 "${xargs_[@]}" --progress none \
    --reference --metrics "$dir/ref.jsonl" --dump-params "$dir/ref-params" >/dev/null 2>&1
  strip_timing "$dir/m.jsonl" >"$OUT/pprun.$name.metrics"
  strip_timing "$dir/ref.jsonl" >"$OUT/pprun.$name.ref-metrics"
  checksums "$dir/params" >"$OUT/pprun.$name.params.sha256"
  checksums "$dir/ref-params" >"$OUT/pprun.$name.ref-params.sha256"
  checksums "$dir/ckpt" | grep -v trainer_state >"$OUT/pprun.$name.ckpt.sha256"
  rm -rf "$dir"
done
echo "snapshot-behaviour: $(find "$OUT" -type f | wc -l) files in $OUT"

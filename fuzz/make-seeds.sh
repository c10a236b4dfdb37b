#!/usr/bin/env bash
# Regenerates the committed seed corpora fuzz/corpus/<target>/ from the repository's own inputs,
# then shrinks each with libFuzzer's -merge=1 (only inputs that add coverage are kept):
#   layout      layouts/*.layout, the layouts of the docs and README, the docs' error examples
#   csv_import  the CSV plans of tests/golden (pp <= 4, up to 4 microbatches), some with a layout
#   json_plan   ppcompile --emit json over a grid (every schedule, pp 1-4, 1-4 microbatches, with a
#   pprun_plan  model and with --stages), each also without its lowered "actions"
#               and, for all three, broken plans from the verifier's mutation corpus
#               (tests/verify_mutation_test.cpp): plans that get as far as the deadlock model
#   cost_model  examples/cost-*.json and the example of docs/cost-model.md
#   model_config  examples/*-model.json
# Needs the normal build's ppcompile and ppc_tests (build/) and the fuzz build (scripts/fuzz.sh
# builds it).
set -euo pipefail
cd "$(dirname "$0")/.."
PPC=${PPCOMPILE:-build/tools/ppcompile/ppcompile}
RAW=$(mktemp -d)
trap 'rm -rf "$RAW"' EXIT
mkdir -p "$RAW"/{layout,csv_import,json,cost_model,model_config}

# --- layouts ---
cp layouts/*.layout "$RAW/layout/"
n=0
while IFS= read -r l; do
  printf '%s' "$l" >"$RAW/layout/doc-$n"
  n=$((n + 1))
done < <(
  cat <<'LAYOUTS'
Et*3|(tt|)*29,m|L
Et|t*4|t|tL
Ett|tt|tt|ttL
Et*8|t*9|t*9|t*6,L
E|(t|)*2|tL
Et*3|(tt|)*29,x|L
ET|L
Et # c
E|(t|*2
E|t)*2
E|()*3|L
E|(t|)|L
Et*|L
*3
Et*3*2
Et3|L
Et*0|L
Et*99999999999999999999
(t*1000|)*1000
((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((t))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))*2
t,t,t|t*1,0
LAYOUTS
)
printf 'Et|\xc3\xa9' >"$RAW/layout/doc-utf8"
printf 'Et|\xff' >"$RAW/layout/doc-badutf8"
printf '# a comment\n\nEt*2|\n  t*2 # more\r\n|tL\n' >"$RAW/layout/doc-file"
printf '\xef\xbb\xbfEt|tL\n' >"$RAW/layout/doc-bom"

# --- CSV plans from the golden files ---
for f in tests/golden/*/pp[124]_vpp*.txt; do
  awk -v out="$RAW/csv_import/$(basename "$(dirname "$f")")-$(basename "$f" .txt)" '
    /^\$ ppcompile/ { keep = ($0 ~ /--emit csv/ && $0 ~ /--microbatches [1-4]( |$)/ && $0 !~ /exit/); n++; next }
    keep { print > (out "-" n) }' "$f"
done
"$PPC" --layout 'Et|tt|tt|tL' --pp 2 --schedule Interleaved1F1B --microbatches 2 --emit csv \
  | { echo '#layout Et|tt|tt|tL'; cat; } >"$RAW/csv_import/layout-interleaved"
"$PPC" --layout 'Et|tL' --pp 2 --schedule 1F1B --microbatches 3 --emit csv --compute-only \
  | { echo '#layout Et|tL'; cat; } >"$RAW/csv_import/layout-compute-only"
"$PPC" --layout 'Et|tL' --pp 2 --schedule DualPipe --microbatches 4 --emit csv \
  | { echo '#layout Et|tL'; cat; } >"$RAW/csv_import/layout-dualpipe"
printf '0UNSHARD,0F0,0B0,0REDUCE_GRAD\n' >"$RAW/csv_import/fsdp"
printf '"0F0", 0B0\r\n' >"$RAW/csv_import/quoted"

# --- JSON plans over a grid ---
layout_of() {  # a model of N stages
  local n=$1 s="Et" i
  if [ "$n" -eq 1 ]; then echo "EtL"; return; fi
  for ((i = 2; i < n; i++)); do s+="|t"; done
  echo "$s|tL"
}
for sched in GPipe 1F1B ZB-H1 ZB-H2 DualPipe Interleaved1F1B LoopedBFS InterleavedZeroBubble ZBVZeroBubble DualPipeV; do
  case $sched in
    ZBVZeroBubble | DualPipeV) vpps=(2) ;;
    Interleaved1F1B | LoopedBFS | InterleavedZeroBubble) vpps=(1 2) ;;
    *) vpps=(1) ;;
  esac
  for pp in 1 2 4; do
    for vpp in "${vpps[@]}"; do
      for m in 1 2 4; do
        base="$RAW/json/$sched-pp$pp-vpp$vpp-m$m"
        n=$((pp * vpp))
        "$PPC" --layout "$(layout_of $n)" --pp $pp --schedule $sched --microbatches $m --emit json \
          -o "$base-model.json" 2>/dev/null || continue
        "$PPC" --stages $n --pp $pp --schedule $sched --microbatches $m --emit json \
          -o "$base-stages.json" 2>/dev/null || true
      done
    done
  done
done
for f in "$RAW"/json/*-model.json; do  # compute orders only: the loaders lower them
  python3 - "$f" "${f%.json}-compute.json" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
for r in plan["ranks"]:
    r.pop("actions", None)
json.dump(plan, open(sys.argv[2], "w"))
PY
done

# --- broken plans: two mutants per mutation and outcome (deadlocks, data and count errors...) ---
mkdir -p "$RAW/mutants"
PP_MUTANT_EXPORT="$RAW/mutants" "${PPC_TESTS:-build/tests/ppc_tests}" \
  --gtest_filter='VerifyMutants.AgreeWithAnExhaustiveSearch' >/dev/null
cp "$RAW"/mutants/*.json "$RAW/json/"
cp "$RAW"/mutants/*.csv "$RAW/csv_import/"

# --- cost models and model configs ---
cp examples/cost-*.json "$RAW/cost_model/"
awk '/^```json/ { on = 1; next } /^```/ { on = 0 } on' docs/cost-model.md >"$RAW/cost_model/doc.json"
printf '{"stage": {"f": 1, "b": 3}, "overlap": 0.5, "weight_grad_memory": 0.25}' >"$RAW/cost_model/stage"
cp examples/*-model.json "$RAW/model_config/"
printf '{"hidden": 96, "heads": 6, "kv_heads": 3, "rope_theta": 5e5, "norm_eps": 1e-6}' >"$RAW/model_config/gqa"

# --- shrink into fuzz/corpus/ ---
for t in layout csv_import json_plan pprun_plan cost_model model_config; do
  src="$RAW/$t"
  [ -d "$src" ] || src="$RAW/json"
  mkdir -p "fuzz/corpus/$t"
  rm -f "fuzz/corpus/$t"/*
  bash scripts/fuzz.sh --minimize "$t" "$src"
done

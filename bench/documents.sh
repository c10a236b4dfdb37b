#!/usr/bin/env bash
# Real tokens per second of pprun on documents (issue 41; docs/pprun.md, "Documents"): --pad (one
# document per sequence, padded to --seq-len: the baseline), --varlen (each microbatch as long as
# its longest document, in multiples of --granule; the step's rows grouped by length into the
# microbatches, the default), --varlen --no-length-buckets (the rows in data order) and --pack
# (whole documents packed into each sequence), side by side in one run, alternated, on a
# log-normal corpus (bench/make_documents.py).
# tokens/s counts predicted targets only (the metrics' tokens_per_s with documents), the first two
# steps (warm-up) left out; the median over the rounds.
#
#     bench/documents.sh [-r ROUNDS] [BUILD_DIR]
set -euo pipefail
rounds=3
if [[ "${1:-}" == "-r" ]]; then rounds=$2; shift 2; fi
build=${1:-build}
here=$(cd "$(dirname "$0")/.." && pwd)
pprun=$build/tools/pprun/pprun
ppcompile=$build/tools/ppcompile/ppcompile
py=$(command -v python3)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

seq=256
"$py" "$here/bench/make_documents.py" "$work/docs.bin" --docs 20000 --median 48 --sigma 1.1
"$ppcompile" --layout 'Ett|ttL' --pp 2 --schedule 1F1B --microbatches 4 --emit json \
  -o "$work/plan.json" >/dev/null
model=(--hidden 128 --heads 4 --kv-heads 2 --ffn 256 --seq-len $seq --global-batch 16
       --steps 8 --progress none --data "$work/docs.bin" --eod 0 --plan "$work/plan.json")

modes=(pad varlen varlen-data-order pack)
declare -A runs=([pad]="--pad" [varlen]="--varlen --granule 32"
                 [varlen-data-order]="--varlen --granule 32 --no-length-buckets" [pack]="--pack")
for r in $(seq 1 "$rounds"); do
  for mode in "${modes[@]}"; do
    # shellcheck disable=SC2086
    "$pprun" "${model[@]}" ${runs[$mode]} --metrics "$work/$mode.$r.jsonl" >/dev/null
  done
done

"$py" - "$work" "$rounds" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
rate = {}
modes = ("pad", "varlen", "varlen-data-order", "pack")
for mode in modes:
    per_round = []
    for r in range(1, rounds + 1):
        lines = [json.loads(l) for l in open(f"{work}/{mode}.{r}.jsonl")]
        steps = [l for l in lines if "tokens_per_s" in l][2:]
        per_round.append(sum(l["tokens_per_s"] * l["step_time_s"] for l in steps) /
                         sum(l["step_time_s"] for l in steps))
    rate[mode] = statistics.median(per_round)
print("| mode | real tokens/s (median of %d rounds) | vs --pad |" % rounds)
print("| --- | --- | --- |")
names = {"pad": "--pad", "varlen": "--varlen (length buckets)",
         "varlen-data-order": "--varlen --no-length-buckets", "pack": "--pack"}
for mode in modes:
    print(f"| {names[mode]} | {rate[mode]:.0f} | {rate[mode] / rate['pad']:.2f}x |")
PY

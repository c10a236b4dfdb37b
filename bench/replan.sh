#!/usr/bin/env bash
# Auto's length-aware microbatch order against the same plan in data order (issue 41, section 3;
# docs/pprun.md, "The microbatch order"): pprun --varlen on a long-tailed corpus
# (bench/make_documents.py), one plan compiled by --schedule Auto, run with its microbatches in
# data order and with --replan-lengths (each step's order planned for its lengths by
# ppc::plan_for_lengths: Auto's order), side by side in one run, alternated. Reports the simulated
# step (the planner's own simulation, under the costs a --profile run of the same plan measured at
# --seq-len, with attention's share growing with T^2), the measured step (step_time_s, the first
# two steps left out: the median over the steps, then over the rounds) and the planning time.
#
#     bench/replan.sh [-r ROUNDS] [BUILD_DIR]
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

seq=512 hidden=128 mbs=8
"$py" "$here/bench/make_documents.py" "$work/docs.bin" --docs 20000 --median 48 --sigma 1.1
"$ppcompile" --layout 'Ett|ttL' --pp 2 --schedule Auto --microbatches $mbs --emit json \
  -o "$work/plan.json" >/dev/null
# One sequence per microbatch: each microbatch as long as its document (in multiples of 32).
model=(--hidden $hidden --heads 4 --kv-heads 2 --ffn 256 --seq-len $seq --global-batch $mbs
       --progress none --data "$work/docs.bin" --eod 0 --plan "$work/plan.json")

# The costs: every microbatch at --seq-len (--pad), profiled; attention's share at T0 = seq is
# T0 / (6 d + T0) (docs/cost-model.md).
"$pprun" "${model[@]}" --steps 6 --pad --profile "$work/profile.json" >/dev/null
"$py" - "$work/profile.json" $seq $hidden <<'PY'
import json, sys
path, seq, hidden = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
p = json.load(open(path))
p["lengths"] = {"seq_len": seq, "attention": seq / (6 * hidden + seq)}
json.dump(p, open(path, "w"))
PY

for r in $(seq 1 "$rounds"); do
  "$pprun" "${model[@]}" --steps 12 --varlen --granule 32 --metrics "$work/data.$r.jsonl" >/dev/null
  "$pprun" "${model[@]}" --steps 12 --varlen --granule 32 --replan-lengths \
    --replan-costs "$work/profile.json" --metrics "$work/replan.$r.jsonl" >"$work/replan.$r.out"
done

"$py" - "$work" "$rounds" <<'PY'
import json, re, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def step_ms(path):
    lines = [json.loads(l) for l in open(path)]
    return 1e3 * statistics.median([l["step_time_s"] for l in lines if "step_time_s" in l][2:])
data = statistics.median(step_ms(f"{work}/data.{r}.jsonl") for r in range(1, rounds + 1))
replan = statistics.median(step_ms(f"{work}/replan.{r}.jsonl") for r in range(1, rounds + 1))
sim, planning = [], []
for r in range(1, rounds + 1):
    out = open(f"{work}/replan.{r}.out").read()
    m = re.search(r"simulated step under --replan-lengths's costs: ([\d.e+]+) in data order, "
                  r"([\d.e+]+) in the planned order", out)
    sim.append((float(m.group(1)), float(m.group(2))))
    m = re.search(r"(microbatch order replanned .*)", out)
    planning.append(m.group(1))
print("| order | simulated step (ms) | measured step (ms, median of %d rounds) |" % rounds)
print("| --- | --- | --- |")
print(f"| data order | {statistics.median(s[0] for s in sim):.1f} | {data:.1f} |")
print(f"| --replan-lengths | {statistics.median(s[1] for s in sim):.1f} | {replan:.1f} |")
print(f"| shorter by | {100 * (1 - statistics.median(s[1] for s in sim) / statistics.median(s[0] for s in sim)):.1f} % "
      f"| {100 * (1 - replan / data):.1f} % |")
for p in planning:
    print(p)
PY

#!/usr/bin/env bash
# Regenerates the committed seed corpora fuzz/corpus/<target>/ from the repository's own inputs,
# then shrinks each with libFuzzer's -merge=1 (only inputs that add coverage are kept):
#   layout      layouts/*.layout, the layouts of the docs and README, the docs' error examples
#   csv_import  the CSV plans of tests/compiler/golden (pp <= 4, up to 4 microbatches), some with a layout
#   json_plan   ppcompile --emit json over a grid (every schedule, pp 1-4, 1-4 microbatches, with a
#   pprun_plan  model and with --stages), each also without its lowered "actions"
#               and, for all three, broken plans from the verifier's mutation corpus
#               (tests/compiler/verify_mutation_test.cpp): plans that get as far as the deadlock model
#   cost_model  examples/cost-*.json and the example of docs/cost-model.md
#   model_config  examples/*-model.json
#   checkpoint, safetensors, token_file  tiny checkpoints written by pprun --save (and --export),
#               token files of every format and a safetensors file of every dtype (not shrunk)
# Needs the normal build's ppcompile, ppc_tests and pprun (build/; PPRUN=... for another pprun)
# and the fuzz build (scripts/fuzz.sh builds it).
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
for f in tests/compiler/golden/*/pp[124]_vpp*.txt; do
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

# --- files: checkpoints, safetensors, token files (named seeds, not shrunk) ---
# Checkpoints are written by pprun --save (the runtime build's pprun; PPRUN=... to use another)
# of a tiny model; the token files and one safetensors file by the Python below, from the
# formats' specifications (docs/pprun.md, docs/checkpoints.md), not by the readers' own writers.
files_seeds() {
  local PPR=${PPRUN:-build/tools/pprun/pprun} W="$RAW/files" c=fuzz/corpus
  if [ ! -x "$PPR" ]; then
    echo "make-seeds.sh: no pprun at $PPR (build the runtime, or set PPRUN): checkpoint seeds kept" >&2
    return
  fi
  mkdir -p "$W" "$c/checkpoint" "$c/safetensors" "$c/token_file"
  rm -f "$c/checkpoint"/* "$c/safetensors"/* "$c/token_file"/*
  local model=(--hidden 4 --heads 2 --kv-heads 1 --ffn 4 --vocab 8 --seq-len 4 --global-batch 2
    --progress none --threads 1)
  "$PPC" --layout 'Et|tL' --pp 2 --schedule 1F1B --microbatches 2 --emit json -o "$W/pp2.json"
  "$PPC" --layout 'EtmL' --pp 1 --schedule GPipe --microbatches 1 --emit json -o "$W/pp1.json"
  "$PPR" --plan "$W/pp2.json" "${model[@]}" --steps 2 --save "$W/pp2" >/dev/null 2>&1
  "$PPR" --plan "$W/pp1.json" "${model[@]}" --tie-embeddings --steps 1 --save "$W/pp1" >/dev/null 2>&1
  "$PPR" --plan "$W/pp2.json" "${model[@]}" --steps 2 --save-every 1 --save "$W/two" >/dev/null 2>&1
  rm "$W/two/latest"
  "$PPR" --export "$W/pp2" "$W/export.safetensors" >/dev/null 2>&1
  bash fuzz/pack-files.sh "$W/pp2" >"$c/checkpoint/pp2-1f1b"
  bash fuzz/pack-files.sh "$W/pp1/step-00000001" >"$c/checkpoint/pp1-tied-mtp-step-dir"
  bash fuzz/pack-files.sh "$W/two" >"$c/checkpoint/two-steps-no-latest"
  cp "$W/pp2/step-00000002/model-00001-of-00002.safetensors" "$c/safetensors/model-shard"
  cp "$W/pp1/step-00000001/optimizer-00001-of-00001.safetensors" "$c/safetensors/optimizer-shard"
  cp "$W/export.safetensors" "$c/safetensors/export"
  python3 - "$W" "$c" <<'PY'
import json, struct, sys
w, c = sys.argv[1], sys.argv[2]

def safetensors(tensors, metadata=None, pad=0):
    """tensors: (name, dtype, shape, bytes); laid out in order."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode() + b" " * pad
    return struct.pack("<Q", len(h)) + h + data

with open(f"{c}/safetensors/dtypes", "wb") as f:
    f.write(safetensors([
        ("a.bf16", "BF16", [2, 2], bytes(8)),
        ("b.i64", "I64", [3], struct.pack("<3q", -1, 0, 7)),
        ("c.bool", "BOOL", [2], b"\x01\x00"),
        ("d.scalar", "F64", [], struct.pack("<d", 1.5)),
        ("e.empty", "F16", [0, 4], b""),
        ("f.u8", "U8", [5], b"hello"),
        ("g.f8", "F8_E4M3", [1], b"\x38"),
        ("h.c64", "C64", [1], bytes(8)),
    ], {"format": "pt", "note": "caf\u00e9 \"q\""}, pad=5))
with open(f"{c}/safetensors/empty", "wb") as f:
    f.write(safetensors([], {}))

def pack(files):
    out = b""
    for i, (name, data) in enumerate(files):
        out += (b"\n" if i else b"") + b"=== " + name.encode() + b"\n" + data
    return out

def megatron_idx(code, lengths, docs, modes=False):
    s = len(lengths)
    size = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 8: 2}[code]
    ptrs, at = [], 0
    for n in lengths:
        ptrs.append(at)
        at += n * size
    out = b"MMIDIDX\x00\x00" + struct.pack("<QB", 1, code) + struct.pack("<QQ", s, len(docs))
    out += struct.pack(f"<{s}i", *lengths) + struct.pack(f"<{s}q", *ptrs)
    out += struct.pack(f"<{len(docs)}q", *docs)
    if modes:
        out += bytes(s)
    return out

toks = [(7 * i + 3) % 50 for i in range(30)]
seeds = {
    "text": pack([("args", b"text 256 8 tiny.txt"), ("tiny.txt", b"the quick brown fox jumps\n")]),
    "auto-text": pack([("args", b"auto 300 4 notes"), ("notes", b"abcdefgh")]),
    "uint16": pack([("args", b"uint16 64 8 train.bin"), ("train.bin", struct.pack("<30H", *toks))]),
    "auto-uint16": pack([("args", b"auto 50 16 train.bin"), ("train.bin", struct.pack("<30H", *toks))]),
    "uint32": pack([("args", b"uint32 70000 4 ids"), ("ids", struct.pack("<6I", 0, 1, 69999, 5, 6, 7))]),
    "megatron-uint16": pack([("args", b"megatron 64 8 corpus"),
        ("corpus.bin", struct.pack("<30H", *toks)),
        ("corpus.idx", megatron_idx(8, [10, 12, 8], [0, 2, 3]))]),
    "auto-megatron-int32-modes": pack([("args", b"auto 64 4 data/corpus.bin"),
        ("data/corpus.bin", struct.pack("<30i", *toks)),
        ("data/corpus.idx", megatron_idx(4, [15, 15], [0, 2], modes=True))]),
    "megatron-int64": pack([("args", b"megatron 50 4 c.idx"),
        ("c.bin", struct.pack("<12q", *toks[:12])), ("c.idx", megatron_idx(5, [12], [0, 1]))]),
    "token-over-vocab": pack([("args", b"uint16 49 8 train.bin"), ("train.bin", struct.pack("<30H", *toks))]),
}
for name, data in seeds.items():
    with open(f"{c}/token_file/{name}", "wb") as f:
        f.write(data)
PY
}
files_seeds

# --- shrink into fuzz/corpus/ ---
for t in layout csv_import json_plan pprun_plan cost_model model_config; do
  src="$RAW/$t"
  [ -d "$src" ] || src="$RAW/json"
  mkdir -p "fuzz/corpus/$t"
  rm -f "fuzz/corpus/$t"/*
  bash scripts/fuzz.sh --minimize "$t" "$src"
done

#!/usr/bin/env bash
# Issue 39's benchmarks on a GPU in one call (docs/gpu.md, bench/README.md), each side by side with
# PyTorch in the same call, each part under its own time limit, the whole within GPU_BENCH_BUDGET
# (480 s by default, the build included); one table at the end and every figure in one JSON file.
#   build     scripts/gpu-check.sh's build (build-gpu/), reused when it is there
#   parity    the fused path (PPRUN_KERNELS=auto on a GPU) against ATen's plain one (generic), and
#             cuDNN's attention (fused-cudnn) against it: a small model over 5 steps, the first
#             step's loss and gradient norm within 1e-5 (fp32) and 2e-3 (bf16, docs/gpu.md's), the
#             later losses within 5e-3 (AdamW's first steps amplify rounding: see compare())
#   layer     one Llama-3-8B decoder layer (hidden 4096, 32 heads, 8 kv heads, ffn 14336, seq 4096,
#             one sequence per microbatch; the stage EtL at vocabulary 256), bf16: pprun's F, B, I, W
#             and F+B (CUDA events; ZB-H2 for I and W, 1F1B for F and B) with the fused path, with
#             fused-cudnn and with generic (what ran before), against PyTorch eager
#             (bench/gpu_layer_eager.py --split: SDPA; its I is autograd's input gradient alone, its
#             W is B - I), in ms, TFLOP/s and % of the dense bf16 peak
#   layer2k   the same at hidden 2048, 32 heads, 8 kv heads, ffn 8192, seq 2048
#   model     a Llama-3-8B-shaped model cut to fit one GPU (8 layers, vocabulary 128,256, seq 4096,
#             4 microbatches of one sequence, bf16) at pp 1 under 1F1B: pprun's tokens/s and MFU
#             against torch.distributed.pipelining's single-stage Schedule1F1B of the same model
#             (bench/gpu_model_torch.py: eager, autocast bf16 over fp32 parameters); from pprun's
#             run also the work between steps (the whole step less the replay: clipping, AdamW,
#             the step's tokens) against the HBM bound of its bytes (32 per parameter: AdamW reads
#             parameter, gradient and both moments and writes three of them, the norm reads the
#             gradient) at the copy rate measured here (hbm), and its overhead per action
#   overhead  a small fast model (hidden 256, 8 layers, 16 microbatches, bf16) at pp 1: pprun's
#             runtime overhead per action (its replay less its actions' device times) and its step
#             against the sum of its actions (the ratio the issue wants within 1.05)
#   hbm       the device's copy rate (bytes read and written per second by a 1 GiB copy)
#
#   scripts/gpu-bench.sh                                       # on the GPU machine
#   GPU_BENCH_DEVICE=cpu GPU_BENCH_BUILD=build scripts/gpu-bench.sh   # the CPU dry run (tiny shapes)
#
# Environment:
#   GPU_BENCH_DEVICE  cuda (default) or cpu: the CPU dry run, every part at tiny shapes (the ctest
#                     gpu_bench.cpu_dry_run); its figures mean nothing. On the CPU the fused path
#                     is PPRUN_KERNELS=fused and the one it is held against the CPU's own (auto).
#   GPU_BENCH_BUILD   a build with tools/pprun/pprun and tools/ppcompile/ppcompile (default
#                     build-gpu/, made by scripts/gpu-check.sh's build when it has no pprun yet)
#   GPU_BENCH_PYTHON  the interpreter of the torch pprun links (default python3 on PATH)
#   GPU_BENCH_PARTS   the parts (default "parity layer layer2k hbm model overhead")
#   GPU_BENCH_BUDGET  seconds for everything (default 480); each part also has its own limit
#   GPU_BENCH_PEAK    the dense bf16 peak in TFLOP/s (default 989: H100 and H200)
#   GPU_BENCH_OUT     where the runs' files and gpu-bench.json go (default $OUT if set, else a
#                     temporary directory, kept and printed)
# Exit status: 0 every part that ran ran (figures are figures: a goal missed is not a failure, the
# table says it); 1 a part failed (a run that did not run, a parity check out of tolerance);
# 2 the build could not be done.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DEVICE=${GPU_BENCH_DEVICE:-cuda}
BUILD=${GPU_BENCH_BUILD:-build-gpu}
PY=${GPU_BENCH_PYTHON:-$(command -v python3)}
PARTS=${GPU_BENCH_PARTS:-parity layer layer2k hbm model overhead}
BUDGET=${GPU_BENCH_BUDGET:-480}
PEAK=${GPU_BENCH_PEAK:-989}
OUTDIR=${GPU_BENCH_OUT:-${OUT:-}}
START=$(date +%s)
case $DEVICE in cuda | cpu) ;; *) echo "gpu-bench: GPU_BENCH_DEVICE must be cuda or cpu" >&2; exit 2 ;; esac
if [ -z "$PY" ] || ! "$PY" -c 'import torch' 2>/dev/null; then
  echo "gpu-bench: no python with torch (GPU_BENCH_PYTHON='$PY')" >&2
  exit 2
fi
[ -n "$OUTDIR" ] || OUTDIR=$(mktemp -d)
mkdir -p "$OUTDIR" && OUTDIR=$(cd "$OUTDIR" && pwd)
FIG=$OUTDIR/figures.tsv  # part, what, value, unit, reference, ratio, note (one row per figure)
: >"$FIG"
FAILED=0
say() { echo "gpu-bench: $*"; }
bad() { FAILED=1; say "FAILED: $*"; printf '%s\t%s\t\t\t\t\t%s\n' "${PART:-}" "FAILED" "$*" >>"$FIG"; }
want() { [[ " $PARTS " == *" $1 "* ]]; }
left() { echo $((BUDGET - ($(date +%s) - START))); }
# limit SECONDS: the part's own limit, or what is left of the budget if less (at least 5 s).
limit() { local l; l=$(left); [ "$1" -lt "$l" ] && l=$1; [ "$l" -lt 5 ] && l=5; echo "$l"; }
# figure WHAT VALUE UNIT [REFERENCE [NOTE]]: one row; the ratio is REFERENCE / VALUE (> 1: pprun
# faster) for times, VALUE / REFERENCE for rates (unit ending in /s or %).
figure() {
  local ratio=""
  if [ -n "${4:-}" ] && [ -n "$2" ]; then
    ratio=$("$PY" -c "import sys; v, r, u = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
print(f'{(v / r if u.endswith(\"/s\") or u.endswith(\"%\") else r / v):.3f}' if v > 0 and r > 0 else '')" "$2" "$4" "$3")
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$PART" "$1" "$2" "$3" "${4:-}" "$ratio" "${5:-}" >>"$FIG"
  say "$PART: $1 $2 $3${4:+ (reference $4, ratio $ratio)}${5:+; $5}"
}

# ---- the build ----------------------------------------------------------------------------------
PART=build
PPRUN=$BUILD/tools/pprun/pprun
PPC=$BUILD/tools/ppcompile/ppcompile
if [ ! -x "$PPRUN" ] || [ ! -x "$PPC" ]; then
  [ "$BUILD" = build-gpu ] || { say "no pprun and ppcompile in $BUILD" >&2; exit 2; }
  say "building $BUILD through scripts/gpu-check.sh (none of its parts run)"
  # (GPU_CHECK_BUILD unset: gpu-check.sh then configures and builds its own build-gpu/)
  env -u GPU_CHECK_BUILD GPU_CHECK_PARTS=none GPU_CHECK_PYTHON="$PY" GPU_CHECK_DEVICE="$DEVICE" \
    GPU_CHECK_OUT="$OUTDIR/gpu-check" \
    timeout "$(limit 300)" scripts/gpu-check.sh >"$OUTDIR/build.log" 2>&1
  if [ ! -x "$PPRUN" ] || [ ! -x "$PPC" ]; then
    tail -20 "$OUTDIR/build.log"
    say "the build failed ($OUTDIR/build.log)"
    exit 2
  fi
fi
TORCH=$("$PY" -c 'import torch; print(torch.__version__)')
GPU=cpu
[ "$DEVICE" = cuda ] && GPU=$("$PY" -c 'import torch; print(torch.cuda.get_device_name(0))' 2>/dev/null || echo cuda)
say "pprun $PPRUN on $GPU, torch $TORCH, parts: $PARTS, budget ${BUDGET}s ($(left)s left), files in $OUTDIR"

# The fused path and what it is held against: on a GPU the default (auto: fused) against ATen's
# plain path (generic, what GPUs ran before); on the CPU the fused path forced against the CPU's own.
if [ "$DEVICE" = cuda ]; then NEW=auto OLD=generic; else NEW=fused OLD=auto; fi

# Sizes: the real ones on a GPU, tiny ones for the CPU dry run.
if [ "$DEVICE" = cuda ]; then
  SMALL=(--hidden 256 --heads 8 --kv-heads 4 --ffn 704 --vocab 512 --seq-len 128)
  L8B=(4096 32 8 14336 4096) L2K=(2048 32 8 8192 2048)
  MODEL=(8 128256 4096 4) TIMING_STEPS=6 EAGER_ITERS=(--warmup 3 --iters 10) HBM_MB=1024
  OVER_MB=16 OVER_STEPS=8
else
  SMALL=(--hidden 32 --heads 4 --kv-heads 2 --ffn 64 --vocab 128 --seq-len 16)
  L8B=(64 4 2 176 32) L2K=(32 4 2 64 16)
  MODEL=(2 256 32 2) TIMING_STEPS=2 EAGER_ITERS=(--warmup 1 --iters 1) HBM_MB=64
  OVER_MB=4 OVER_STEPS=2
fi

plan() {  # plan LAYOUT PP SCHEDULE MICROBATCHES FILE
  "$PPC" --layout "$1" --pp "$2" --schedule "$3" --microbatches "$4" --emit json -o "$5" >/dev/null
}
# pprun_run SECONDS KERNELS LOG ARGS...: pprun under PPRUN_KERNELS=KERNELS and a time limit.
pprun_run() {
  local secs=$1 kernels=$2 log=$3
  shift 3
  if ! PPRUN_KERNELS=$kernels timeout "$(limit "$secs")" "$PPRUN" "$@" >"$log" 2>&1; then
    tail -8 "$log"
    return 1
  fi
}
# The summary's figures: "F 1.2 B 3.4 ..." (mean device time per action, ms).
action_times() { sed -n 's/.*mean compute time per action: //p' "$1" | tr -d ',' | sed 's/ ms//g'; }
# timing LOG: "OVERHEAD_US STEP_MS SUM_MS RATIO WHOLE_MS" from pprun's timing line.
timing() {
  sed -n 's/.*runtime overhead \([0-9.]*\) us\/action.*; step \([0-9.]*\) ms, simulated makespan from the measured action times \([0-9.]*\) ms, ratio \([0-9.]*\); whole step \([0-9.]*\) ms.*/\1 \2 \3 \4 \5/p' "$1"
}
median_step_s() {  # the median step time (s) over steps 2..N of a --metrics file
  "$PY" -c "import json, statistics, sys
s = [json.loads(l)['step_time_s'] for l in open(sys.argv[1]) if l.strip()]
print(statistics.median(s[1:] if len(s) > 1 else s))" "$1"
}
calc() { "$PY" -c "print(f'{$1:.4g}')"; }

# ---- parity -------------------------------------------------------------------------------------
# compare NAME A.jsonl B.jsonl FIRST LATER: the first step's loss and gradient norm (the same weights:
# the kernels alone) within FIRST, every later step's loss within LATER, each relative to
# max(1, |b|). Later steps drift further: AdamW's first steps move a weight whose gradient is near
# zero by up to the learning rate one way or the other, so a rounding difference in such a gradient
# becomes a difference in the weight (the runs use a learning rate of 3e-4 to keep that small).
compare() {
  local r
  r=$("$PY" - "$2" "$3" "$4" "$5" <<'EOF'
import json, sys
a, b = ([json.loads(l) for l in open(f) if l.strip()] for f in sys.argv[1:3])
first, later = float(sys.argv[3]), float(sys.argv[4])
if len(a) != len(b) or not a:
    print(f"bad {len(a)} steps against {len(b)}"); sys.exit()
rel = lambda x, y: abs(x - y) / max(1.0, abs(y))
one = max(rel(a[0]["loss"], b[0]["loss"]), rel(a[0]["grad_norm"], b[0]["grad_norm"]))
rest = max([rel(x["loss"], y["loss"]) for x, y in zip(a[1:], b[1:])] or [0.0])
ok = one <= first and rest <= later
print(f"{'ok' if ok else 'bad'} {one:.2e} {rest:.2e} {len(a)} steps, loss {a[0]['loss']:.5f} -> "
      f"{a[-1]['loss']:.5f}")
EOF
  )
  read -r verdict one rest info <<<"$r"
  figure "$1: step 1" "$one" "largest difference" "" "loss and gradient norm (tolerance $4)"
  figure "$1: steps 2.." "$rest" "largest difference" "" "losses (tolerance $5); $info"
  [ "$verdict" = ok ] || bad "$1: $r (tolerances $4, $5)"
}
if want parity; then
  PART=parity
  plan EttttL 1 1F1B 4 "$OUTDIR/parity.json"
  P=(--plan "$OUTDIR/parity.json" --device "$DEVICE" --steps 5 --global-batch 8 --progress none
     --seed 7 --lr 3e-4 "${SMALL[@]}")
  for dt in bf16 fp32; do
    first=$([ $dt = bf16 ] && echo 2e-3 || echo 1e-5)
    ok=1
    for k in $OLD $NEW; do
      pprun_run 90 $k "$OUTDIR/parity-$dt-$k.log" "${P[@]}" --dtype $dt \
        --metrics "$OUTDIR/parity-$dt-$k.jsonl" || { bad "pprun $dt PPRUN_KERNELS=$k did not run"; ok=0; }
    done
    [ $ok = 1 ] && compare "$dt: $NEW against $OLD" "$OUTDIR/parity-$dt-$NEW.jsonl" \
      "$OUTDIR/parity-$dt-$OLD.jsonl" "$first" 5e-3
  done
  if [ "$DEVICE" = cuda ] &&
    pprun_run 90 fused-cudnn "$OUTDIR/parity-bf16-cudnn.log" "${P[@]}" --dtype bf16 \
      --metrics "$OUTDIR/parity-bf16-cudnn.jsonl"; then
    compare "bf16: fused-cudnn against $OLD" "$OUTDIR/parity-bf16-cudnn.jsonl" \
      "$OUTDIR/parity-bf16-$OLD.jsonl" 2e-3 5e-3
  elif [ "$DEVICE" = cuda ]; then
    bad "pprun bf16 PPRUN_KERNELS=fused-cudnn did not run"
  fi
fi

# ---- one decoder layer --------------------------------------------------------------------------
# layer NAME HIDDEN HEADS KV FFN SEQ: pprun's EtL (vocabulary 256) at pp 1 and the eager layer.
layer() {
  local name=$1 seq=$6
  local shape=(--hidden "$2" --heads "$3" --kv-heads "$4" --ffn "$5")
  local run=(--device "$DEVICE" --dtype bf16 "${shape[@]}" --seq-len "$seq" --vocab 256
             --global-batch 4 --steps $TIMING_STEPS --progress none)
  local flops
  flops=$("$PY" bench/gpu_layer_eager.py "${shape[@]}" --seq "$seq" --flops-only)
  # eager first: its figures are the references of pprun's
  declare -A E=()
  local edt=bf16
  [ "$DEVICE" = cpu ] && edt=fp32  # bf16 eager on a CPU: slow and meaningless
  if timeout "$(limit 90)" "$PY" bench/gpu_layer_eager.py "${shape[@]}" --seq "$seq" --device "$DEVICE" \
    --dtype $edt --split "${EAGER_ITERS[@]}" --peak "$PEAK" --json "$OUTDIR/$name-eager.json" \
    >"$OUTDIR/$name-eager.log" 2>&1; then
    while read -r k ms; do E[$k]=$ms; done < <("$PY" -c "import json, sys
r = json.load(open(sys.argv[1]))
for k, v in r['ms'].items(): print(k, v)" "$OUTDIR/$name-eager.json")
  else
    tail -5 "$OUTDIR/$name-eager.log"
    bad "the eager layer did not run"
  fi
  tf() {  # tf KIND MS: TFLOP/s of the layer's KIND
    "$PY" -c "import json, sys
f = json.loads(sys.argv[1]); k, ms = sys.argv[2], float(sys.argv[3])
print(f'{(f[\"F\"] + f[\"B\"] if k == \"FB\" else f[k]) / ms / 1e9:.1f}')" "$flops" "$1" "$2"
  }
  local k s
  for k in $NEW fused-cudnn $OLD; do
    [ "$DEVICE" = cpu ] && [ $k = fused-cudnn ] && continue
    declare -A T=()
    for s in 1F1B ZB-H2; do
      [ $k != $NEW ] && [ $s = ZB-H2 ] && continue  # I and W of the fused path only
      plan EtL 1 $s 4 "$OUTDIR/$name-$s.json"
      if pprun_run 90 $k "$OUTDIR/$name-$k-$s.log" --plan "$OUTDIR/$name-$s.json" "${run[@]}"; then
        read -r -a pairs <<<"$(action_times "$OUTDIR/$name-$k-$s.log")"
        for ((i = 0; i + 1 < ${#pairs[@]}; i += 2)); do
          [ -n "${T[${pairs[i]}]:-}" ] || T[${pairs[i]}]=${pairs[i + 1]}  # F and B from 1F1B
        done
      else
        bad "pprun's layer ($k, $s) did not run"
      fi
    done
    [ -n "${T[F]:-}" ] && [ -n "${T[B]:-}" ] && T[FB]=$(calc "${T[F]} + ${T[B]}")
    for kind in F B FB I W; do
      [ -n "${T[$kind]:-}" ] || continue
      figure "pprun $k $kind ms" "${T[$kind]}" ms "${E[$kind]:-}" \
        "$(tf $kind "${T[$kind]}") TFLOP/s, $(calc "100 * $(tf $kind "${T[$kind]}") / $PEAK") % of $PEAK"
    done
    if [ $k = $NEW ] && [ -n "${T[I]:-}" ] && [ -n "${T[W]:-}" ] && [ -n "${T[B]:-}" ]; then
      figure "pprun $k (I + W) / B" "$(calc "(${T[I]} + ${T[W]}) / ${T[B]}")" ratio "" "goal within 1.05"
    fi
    unset T
  done
  for kind in F B FB I W; do
    [ -n "${E[$kind]:-}" ] &&
      figure "eager $edt $kind ms" "${E[$kind]}" ms "" \
        "$(tf $kind "${E[$kind]}") TFLOP/s, $(calc "100 * $(tf $kind "${E[$kind]}") / $PEAK") % of $PEAK$([ $kind = W ] && echo ', B - I')"
  done
}
if want layer; then
  PART=layer
  layer layer "${L8B[@]}"
fi
if want layer2k; then
  PART=layer2k
  layer layer2k "${L2K[@]}"
fi

# ---- the device's copy rate ---------------------------------------------------------------------
HBM=""
if want hbm; then
  PART=hbm
  HBM=$(timeout "$(limit 60)" "$PY" - "$DEVICE" "$HBM_MB" <<'EOF'
import sys, time, torch
dev, mb = sys.argv[1], int(sys.argv[2])
a = torch.empty(mb << 20, dtype=torch.uint8, device=dev)
b = torch.empty_like(a)
best = float("inf")
for _ in range(12):
    if dev == "cuda":
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); b.copy_(a); e.record(); torch.cuda.synchronize(); t = s.elapsed_time(e) / 1e3
    else:
        t0 = time.perf_counter(); b.copy_(a); t = time.perf_counter() - t0
    best = min(best, t)
print(f"{2 * a.numel() / best / 1e9:.1f}")
EOF
  ) || { bad "the copy-rate probe did not run"; HBM=""; }
  [ -n "$HBM" ] && figure "copy rate (read + written)" "$HBM" "GB/s"
fi

# ---- the whole model ----------------------------------------------------------------------------
if want model; then
  PART=model
  read -r layers vocab seq mbs <<<"${MODEL[*]}"
  layout="E$(printf 't%.0s' $(seq 1 "$layers"))L"
  shape=(--hidden "${L8B[0]}" --heads "${L8B[1]}" --kv-heads "${L8B[2]}" --ffn "${L8B[3]}")
  plan "$layout" 1 1F1B "$mbs" "$OUTDIR/model.json"
  params=$("$PY" -c "h, H, kv, f, V, n = ${L8B[0]}, ${L8B[1]}, ${L8B[2]}, ${L8B[3]}, $vocab, $layers
hd = h // H
print(2 * V * h + h + n * (2 * h + h * (H + 2 * kv) * hd + H * hd * h + 3 * h * f))")
  mflops=$("$PY" bench/gpu_model_torch.py "${shape[@]}" --seq "$seq" --vocab "$vocab" --layers "$layers" \
    --microbatches "$mbs" --global-batch "$mbs" --flops-only 2>/dev/null)
  torch_tok=""
  if timeout "$(limit 150)" "$PY" bench/gpu_model_torch.py "${shape[@]}" --seq "$seq" --vocab "$vocab" \
    --layers "$layers" --microbatches "$mbs" --global-batch "$mbs" --steps $TIMING_STEPS \
    --device "$DEVICE" --dtype "$([ "$DEVICE" = cuda ] && echo bf16 || echo fp32)" --peak "$PEAK" \
    --json "$OUTDIR/model-torch.json" >"$OUTDIR/model-torch.log" 2>&1; then
    read -r torch_tok torch_mfu < <("$PY" -c "import json, sys; r = json.load(open(sys.argv[1]))
print(r['tokens_per_s'], 100 * r['mfu'])" "$OUTDIR/model-torch.json")
  else
    tail -5 "$OUTDIR/model-torch.log"
    bad "torch.distributed.pipelining's single stage did not run"
  fi
  if pprun_run 200 $NEW "$OUTDIR/model-pprun.log" --plan "$OUTDIR/model.json" --device "$DEVICE" \
    --dtype bf16 "${shape[@]}" --seq-len "$seq" --vocab "$vocab" --global-batch "$mbs" \
    --steps $TIMING_STEPS --progress none --metrics "$OUTDIR/model-pprun.jsonl"; then
    step_s=$(median_step_s "$OUTDIR/model-pprun.jsonl")
    tok=$(calc "$mbs * $seq / $step_s")
    mfu=$(calc "100 * $mflops / $step_s / ($PEAK * 1e12)")
    figure "pprun tokens/s" "$tok" "tokens/s" "$torch_tok" "goal 1.2x torch.distributed.pipelining"
    figure "pprun MFU" "$mfu" "%" "${torch_mfu:-}" "of $PEAK TFLOP/s; $params parameters"
    read -r over step_ms sum_ms ratio whole_ms <<<"$(timing "$OUTDIR/model-pprun.log")"
    if [ -n "${whole_ms:-}" ]; then
      between=$(calc "$whole_ms - $step_ms")
      bound=""
      [ -n "$HBM" ] && bound=$(calc "$params * 32 / ($HBM * 1e9) * 1e3")
      figure "between steps ms (whole step $whole_ms - replay $step_ms)" "$between" ms "" \
        "$([ -n "$bound" ] && echo "HBM bound $bound ms at $HBM GB/s: $(calc "$between / $bound") x the bound (goal 1.5)")"
      figure "overhead per action (model)" "$over" us "" "replay $step_ms ms against the sum of its actions $sum_ms ms: $ratio"
    else
      bad "pprun's summary gave no timing line"
    fi
  else
    bad "pprun's whole model did not run"
  fi
fi

# ---- the runtime's overhead per action ----------------------------------------------------------
if want overhead; then
  PART=overhead
  plan EttttttttL 1 1F1B $OVER_MB "$OUTDIR/overhead.json"
  if pprun_run 90 $NEW "$OUTDIR/overhead.log" --plan "$OUTDIR/overhead.json" --device "$DEVICE" \
    --dtype bf16 "${SMALL[@]}" --global-batch $OVER_MB --steps $OVER_STEPS --progress none; then
    read -r over step_ms sum_ms ratio whole_ms <<<"$(timing "$OUTDIR/overhead.log")"
    if [ -n "${ratio:-}" ]; then
      figure "overhead per action" "$over" us "" "goal at most 10 us with timing on"
      figure "replay / sum of its actions" "$ratio" ratio "" "replay $step_ms ms, actions $sum_ms ms; goal within 1.05"
    else
      bad "pprun's summary gave no timing line"
    fi
  else
    bad "the small model did not run"
  fi
fi

# ---- the table and the file ---------------------------------------------------------------------
"$PY" - "$FIG" "$OUTDIR/gpu-bench.json" "$GPU" "$TORCH" "$DEVICE" "$(($(date +%s) - START))" <<'EOF'
import datetime, json, sys
fig, out, gpu, torch_v, device, secs = sys.argv[1:7]
rows = [l.rstrip("\n").split("\t") for l in open(fig) if l.strip()]
keys = ("part", "what", "value", "unit", "reference", "ratio", "note")
figures = [dict(zip(keys, r + [""] * (7 - len(r)))) for r in rows]
json.dump({"gpu": gpu, "torch": torch_v, "device": device, "seconds": int(secs),
           "date": datetime.date.today().isoformat(), "figures": figures}, open(out, "w"), indent=1)
w = [max(len(f[k]) for f in figures + [dict(zip(keys, keys))]) for k in keys[:6]]
print(f"\ngpu-bench: {gpu}, torch {torch_v}, {secs} s" +
      (" (a CPU dry run at tiny shapes: its figures mean nothing)" if device == "cpu" else ""))
print("  ".join(k.ljust(n) for k, n in zip(keys, w)) + "  note")
for f in figures:
    print("  ".join(f[k].ljust(n) for k, n in zip(keys, w)) + "  " + f["note"])
print(f"gpu-bench: every figure in {out}")
EOF
exit $FAILED

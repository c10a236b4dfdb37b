#!/usr/bin/env bash
# pprun on a GPU, in one command (issue 28, section 4; docs/gpu.md): builds pprun against the
# machine's PyTorch (a CUDA build) if no build is given, then
#   (a) pp 1 --device cuda: losses against the CPU --reference over 10 steps (1e-4);
#   (b) pp 2 and pp 4 ranks sharing the GPU (test mode PPRUN_TEST_SHARE_GPU=1) under 1F1B, ZB-H2
#       and DualPipeV: losses against the same reference (1e-4);
#   (c) bf16 on the GPU (--dtype bf16, mixed precision): pipelined against the bf16 --reference
#       (2e-3), pp 2 under the same schedules;
#   (d) one Llama-3-8B-shaped decoder layer (hidden 4096, 32 heads, 8 kv heads, ffn 14336, seq 4096,
#       one sequence per microbatch): pprun's F, B, I and W times and TFLOP/s (ZB-H2 and 1F1B at
#       pp 1; pprun times each action with CUDA events on its compute stream), the same layer in
#       PyTorch eager (bench/gpu_layer_eager.py, SDPA), against the 989 TFLOP/s peak;
#   (e) one pp 1 training step at that width (4 layers, vocabulary 128,256): the step's time against
#       the sum of its actions' times (CUDA events), and that sum against the same step's under
#       CUDA_LAUNCH_BLOCKING=1 (each launch then waits for its kernel, so the events also take in
#       the launches' latency: an upper bound), a check of the events' timing.
# (d) and (e) run pprun with --dtype bf16. A pprun built before it had --dtype (GPU_CHECK_BUILD)
# says "skipped: pprun has no --dtype yet" in (c) and runs (d) and (e) in fp32.
#
#   scripts/gpu-check.sh                         # on the GPU machine, from a clean clone
#   GPU_CHECK_DEVICE=cpu GPU_CHECK_BUILD=build scripts/gpu-check.sh   # the CPU dry run (tiny shapes)
#
# Environment:
#   GPU_CHECK_DEVICE  cuda (default) or cpu: cpu runs every step on the CPU at tiny shapes, to test
#                     this script (the ctest gpu_check.cpu_dry_run does); its figures mean nothing.
#   GPU_CHECK_BUILD   a build directory with tools/pprun/pprun and tools/ppcompile/ppcompile to use;
#                     default build-gpu/, configured and built here when it has no pprun yet.
#   GPU_CHECK_PYTHON  the interpreter whose torch pprun links and runs the eager layer (default
#                     python3 on PATH).
#   GPU_CHECK_CARRY   the folder scripts/gpu-carry.sh filled (default .gpu-carry/): the Debian
#                     packages of the build dependencies, unpacked, for a machine without them.
#   GPU_CHECK_STEPS   steps of (a)-(c) (default 10); GPU_CHECK_PPS the pp of (b) (default "2 4").
#   GPU_CHECK_PARTS   the parts to run (default "a b c d e"); GPU_CHECK_SCHEDULES the schedules
#                     of (b) and (c) (default "1F1B ZB-H2 DualPipeV").
#   GPU_CHECK_OUT     where the runs' files go (default a temporary directory, removed).
# Exit status: 0 when every part that ran passed (skipped parts included), 1 when one failed,
# 2 when the build or a run could not be done.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DEVICE=${GPU_CHECK_DEVICE:-cuda}
BUILD=${GPU_CHECK_BUILD:-build-gpu}
PY=${GPU_CHECK_PYTHON:-$(command -v python3)}
CARRY=${GPU_CHECK_CARRY:-$ROOT/.gpu-carry}
STEPS=${GPU_CHECK_STEPS:-10}
PPS=${GPU_CHECK_PPS:-2 4}
PARTS=${GPU_CHECK_PARTS:-a b c d e}
SCHEDULES=${GPU_CHECK_SCHEDULES:-1F1B ZB-H2 DualPipeV}
case $DEVICE in cuda | cpu) ;; *) echo "gpu-check: GPU_CHECK_DEVICE must be cuda or cpu" >&2; exit 2 ;; esac
if [ -z "$PY" ] || ! "$PY" -c 'import torch' 2>/dev/null; then
  echo "gpu-check: no python with torch (GPU_CHECK_PYTHON='$PY')" >&2
  exit 2
fi
if [ -n "${GPU_CHECK_OUT:-}" ]; then
  OUT=$GPU_CHECK_OUT && mkdir -p "$OUT"
else
  OUT=$(mktemp -d) && trap 'rm -rf "$OUT"' EXIT
fi
FAILED=0
SUMMARY=()
note() { SUMMARY+=("$1"); echo "gpu-check: $1"; }
bad() { FAILED=1; note "FAILED: $1"; }
want() { [[ " $PARTS " == *" $1 "* ]]; }

# ---- the build ----------------------------------------------------------------------------------
PPRUN=$BUILD/tools/pprun/pprun
PPC=$BUILD/tools/ppcompile/ppcompile
if [ ! -x "$PPRUN" ] || [ ! -x "$PPC" ]; then
  args=(-S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPP_PYTHON="$PY"
        -DPP_BUILD_TESTS=OFF -DPP_BUILD_BENCH=OFF)
  if [ -d "$CARRY/root/usr" ]; then  # the carried Debian packages (scripts/gpu-carry.sh)
    args+=(-DCMAKE_PREFIX_PATH="$CARRY/root/usr" -DCMAKE_CXX_FLAGS="-isystem $CARRY/root/usr/include"
           -DCMAKE_EXE_LINKER_FLAGS="-L$CARRY/root/usr/lib/x86_64-linux-gnu"
           -DANTLR4_TOOL="$CARRY/antlr4-pregenerated")
  fi
  # NCCL from the torch environment's nvidia wheel (the one libtorch_cuda loads), and the toolkit.
  read -r nccl_inc nccl_lib < <("$PY" - <<'EOF'
import glob, os, sys
inc = lib = ""
for d in sys.path:
    inc = inc or next(iter(glob.glob(os.path.join(d, "nvidia", "**", "nccl.h"), recursive=True)), "")
    lib = lib or next(iter(sorted(glob.glob(os.path.join(d, "nvidia", "**", "libnccl.so*"),
                                            recursive=True))), "")
print(os.path.dirname(inc) or "-", lib or "-")
EOF
  )
  [ "$nccl_inc" != - ] && args+=(-DNCCL_INCLUDE_DIR="$nccl_inc")
  [ "$nccl_lib" != - ] && args+=(-DNCCL_LIBRARY="$nccl_lib")
  if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
    args+=(-DCUDAToolkit_ROOT=/usr/local/cuda)
  fi
  echo "gpu-check: configuring $BUILD: cmake ${args[*]}"
  cmake "${args[@]}" >"$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; echo "gpu-check: configure failed" >&2; exit 2; }
  grep -E 'LibTorch:|pprt: NCCL' "$OUT/configure.log"
  echo "gpu-check: building pprun and ppcompile"
  cmake --build "$BUILD" -j"$(nproc)" --target pprun ppcompile >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; echo "gpu-check: build failed" >&2; exit 2; }
fi
echo "gpu-check: pprun $PPRUN, device $DEVICE, python $PY (torch $("$PY" -c 'import torch; print(torch.__version__, "cuda" if torch.cuda.is_available() else "no cuda")'))"
[ "$DEVICE" = cuda ] && command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

HAS_DTYPE=0
# (not `pprun --help | grep -q`: grep stops reading at the match, pprun dies of SIGPIPE, and pipefail
# fails the pipeline)
grep -q -- '--dtype' <<<"$("$PPRUN" --help)" && HAS_DTYPE=1

# Sizes: (a)-(c) a small model at which a fp32 run on the GPU matches the CPU's to 1e-4; (d), (e)
# Llama-3-8B's layer. The CPU dry run shrinks both.
if [ "$DEVICE" = cuda ]; then
  SMALL=(--hidden 256 --heads 8 --kv-heads 4 --ffn 704 --vocab 512 --seq-len 128)
  LAYER=(--hidden 4096 --heads 32 --kv-heads 8 --ffn 14336 --seq 4096)
  VOCAB_E=128256 LAYOUT_E=EttttL TIMING_STEPS=6 EAGER_ITERS=(--warmup 3 --iters 10)
else
  SMALL=(--hidden 32 --heads 4 --kv-heads 2 --ffn 64 --vocab 128 --seq-len 16)
  LAYER=(--hidden 64 --heads 4 --kv-heads 2 --ffn 176 --seq 32)
  VOCAB_E=1024 LAYOUT_E=EttL TIMING_STEPS=3 EAGER_ITERS=(--warmup 1 --iters 1)
fi
MB=8
COMMON=(--steps "$STEPS" --global-batch 16 --progress none --seed 7 "${SMALL[@]}")
LAYER_PPRUN=(--hidden "${LAYER[1]}" --heads "${LAYER[3]}" --kv-heads "${LAYER[5]}" --ffn "${LAYER[7]}"
             --seq-len "${LAYER[9]}")

plan() {  # plan LAYOUT PP SCHEDULE MICROBATCHES FILE
  "$PPC" --layout "$1" --pp "$2" --schedule "$3" --microbatches "$4" --emit json -o "$5" >/dev/null
}
# compare NAME METRICS REFERENCE TOLERANCE: each step's loss within TOLERANCE x max(1, |reference|).
compare() {
  local r
  r=$("$PY" - "$2" "$3" "$4" <<'EOF'
import json, sys
run, ref = ([json.loads(l)["loss"] for l in open(f) if l.strip()] for f in sys.argv[1:3])
tol = float(sys.argv[3])
if len(run) != len(ref) or not run:
    print(f"bad: {len(run)} steps against {len(ref)}"); sys.exit()
worst = max(abs(a - b) / max(1.0, abs(b)) for a, b in zip(run, ref))
exact = all(a == b for a, b in zip(run, ref))
print(f"{'ok' if worst <= tol else 'bad'}: {len(run)} steps, loss {run[0]:.6f} -> {run[-1]:.6f}, "
      f"largest difference {worst:.2e} (tolerance {tol:g}){', bit-exact' if exact else ''}")
EOF
  )
  if [[ $r == ok* ]]; then note "$1: $r"; else bad "$1: $r"; fi
}
run_pprun() {  # run_pprun LOG ARGS...: pprun, its output in LOG; false (and says so) if it failed
  local log=$1
  shift
  if ! "$PPRUN" "$@" >"$log" 2>&1; then
    tail -15 "$log"
    return 1
  fi
}

# ---- (a) pp 1 on the device against the CPU reference ------------------------------------------
LAYOUT=EttttttttL
REF=$OUT/reference.jsonl
if want a || want b; then
  run_pprun "$OUT/reference.log" --reference --layout "$LAYOUT" --microbatches $MB --device cpu \
    "${COMMON[@]}" --metrics "$REF" || bad "the CPU --reference did not run"
fi
if want a; then
  plan "$LAYOUT" 1 1F1B $MB "$OUT/pp1.json"
  if run_pprun "$OUT/a.log" --plan "$OUT/pp1.json" --device "$DEVICE" "${COMMON[@]}" --metrics "$OUT/a.jsonl"; then
    compare "(a) pp 1 --device $DEVICE vs the CPU reference" "$OUT/a.jsonl" "$REF" 1e-4
  else
    bad "(a) pp 1 --device $DEVICE did not run"
  fi
fi

# ---- (b) pp 2 and 4 sharing the GPU ------------------------------------------------------------
layout_for() {  # layout_for PP SCHEDULE: the 8 layers split into the schedule's stages
  local stages=$1
  [ "$2" = DualPipeV ] && stages=$((2 * $1))
  case $stages in
    2) echo 'Etttt|ttttL' ;; 4) echo 'Ett|tt|tt|ttL' ;; 8) echo 'Et|t|t|t|t|t|t|tL' ;;
  esac
}
if want b; then
  for pp in $PPS; do
    for s in $SCHEDULES; do
      name="(b) pp $pp $s, $pp ranks sharing one $DEVICE"
      plan "$(layout_for "$pp" $s)" "$pp" $s $MB "$OUT/b$pp$s.json"
      if PPRUN_TEST_SHARE_GPU=$([ "$DEVICE" = cuda ] && echo 1 || echo 0) \
        run_pprun "$OUT/b$pp$s.log" --plan "$OUT/b$pp$s.json" --device "$DEVICE" "${COMMON[@]}" \
        --metrics "$OUT/b$pp$s.jsonl"; then
        compare "$name vs the CPU reference" "$OUT/b$pp$s.jsonl" "$REF" 1e-4
      else
        bad "$name did not run"
      fi
    done
  done
fi

# ---- (c) bf16 -----------------------------------------------------------------------------------
if want c; then
  if [ $HAS_DTYPE = 0 ]; then
    note "(c) bf16 on $DEVICE: skipped: pprun has no --dtype yet"
  else
    run_pprun "$OUT/cref.log" --reference --layout "$LAYOUT" --microbatches $MB --device "$DEVICE" \
      --dtype bf16 "${COMMON[@]}" --metrics "$OUT/cref.jsonl" || bad "(c) the bf16 --reference did not run"
    for s in $SCHEDULES; do
      plan "$(layout_for 2 $s)" 2 $s $MB "$OUT/c$s.json"
      if PPRUN_TEST_SHARE_GPU=$([ "$DEVICE" = cuda ] && echo 1 || echo 0) \
        run_pprun "$OUT/c$s.log" --plan "$OUT/c$s.json" --device "$DEVICE" --dtype bf16 \
        "${COMMON[@]}" --metrics "$OUT/c$s.jsonl"; then
        compare "(c) bf16 pp 2 $s vs the bf16 reference" "$OUT/c$s.jsonl" "$OUT/cref.jsonl" 2e-3
      else
        bad "(c) bf16 pp 2 $s did not run"
      fi
    done
  fi
fi

# ---- (d) one decoder layer ----------------------------------------------------------------------
# pprun's per-action times on a GPU are CUDA events recorded on its compute stream around each
# action (runtime/train/device_queue.cpp, DeviceQueue): the GPU's time for the action's kernels,
# without the host's launch latency. The stage is E, t and L at a vocabulary of 256: E and L add
# under 1 % of the layer's FLOPs at hidden 4096.
PEAK=989
summary_times() {  # summary_times LOG: "F 1.2 B 3.4 ..." from pprun's closing summary
  sed -n 's/.*mean compute time per action: //p' "$1" | tr -d ',' | sed 's/ ms//g'
}
if want d; then
  if [ $HAS_DTYPE = 1 ]; then DT=(--dtype bf16) DTNAME=bf16; else DT=() DTNAME=fp32; fi
  [ $HAS_DTYPE = 0 ] && note "(d) pprun's layer in bf16: skipped: pprun has no --dtype yet (fp32 below)"
  declare -A T=()
  for s in ZB-H2 1F1B; do
    plan EtL 1 $s 4 "$OUT/d$s.json"
    if run_pprun "$OUT/d$s.log" --plan "$OUT/d$s.json" --device "$DEVICE" \
      "${DT[@]}" "${LAYER_PPRUN[@]}" --vocab 256 --global-batch 4 --steps $TIMING_STEPS --progress none; then
      read -r -a kv <<<"$(summary_times "$OUT/d$s.log")"
      for ((i = 0; i + 1 < ${#kv[@]}; i += 2)); do  # F from ZB-H2, B from 1F1B
        [ -n "${T[${kv[i]}]:-}" ] || T[${kv[i]}]=${kv[i + 1]}
      done
    else
      bad "(d) pprun's layer under $s did not run"
    fi
  done
  FLOPS=$("$PY" bench/gpu_layer_eager.py "${LAYER[@]}" --flops-only)
  figure() {  # figure KIND MS: "KIND  MS ms  T TFLOP/s  P % of PEAK" for the layer's FLOPs of KIND
    "$PY" -c "import json, sys
f = json.loads(sys.argv[1]); k, ms = sys.argv[2], float(sys.argv[3])
fl = f['F'] + f['B'] if k == 'F+B' else f[k]
t = fl / ms / 1e9
print(f'{k:<3} {ms:10.3f} ms {t:8.2f} TFLOP/s {100 * t / $PEAK:5.1f} % of $PEAK')" "$FLOPS" "$1" "$2"
  }
  for k in F B I W; do
    if [ -n "${T[$k]:-}" ]; then
      note "(d) pprun $DTNAME layer      $(figure $k "${T[$k]}")"
    else
      bad "(d) pprun's summary gave no time for $k"
    fi
  done
  if [ -n "${T[F]:-}" ] && [ -n "${T[B]:-}" ]; then
    note "(d) pprun $DTNAME layer      $(figure F+B "$("$PY" -c "print(${T[F]} + ${T[B]})")")"
  fi
  for dt in bf16 fp32; do
    [ "$DEVICE" = cpu ] && [ $dt = bf16 ] && continue  # bf16 on a CPU: slow and meaningless
    if "$PY" bench/gpu_layer_eager.py "${LAYER[@]}" --device "$DEVICE" --dtype $dt "${EAGER_ITERS[@]}" \
      --json "$OUT/eager-$dt.json" >"$OUT/eager-$dt.log" 2>&1; then
      while read -r k ms; do note "(d) PyTorch eager $dt layer $(figure "$k" "$ms")"; done < <(
        "$PY" -c "import json; r = json.load(open('$OUT/eager-$dt.json'))
for k in ('F', 'B', 'FB'): print('F+B' if k == 'FB' else k, r['ms'][k])")
    else
      tail -5 "$OUT/eager-$dt.log"
      bad "(d) the PyTorch eager layer ($dt) did not run"
    fi
  done
fi

# ---- (e) one pp 1 step at that width ------------------------------------------------------------
if want e; then
  [ $HAS_DTYPE = 0 ] && note "(e) the step in bf16: skipped: pprun has no --dtype yet (fp32 below)"
  plan "$LAYOUT_E" 1 1F1B 2 "$OUT/e.json"
  E=(--plan "$OUT/e.json" --device "$DEVICE" "${LAYER_PPRUN[@]}" --vocab $VOCAB_E --global-batch 2
     --steps $TIMING_STEPS --progress none)
  [ $HAS_DTYPE = 1 ] && E+=(--dtype bf16)
  timing() { sed -n 's/.*timing over .*; step \([0-9.]*\) ms, simulated makespan from the measured action times \([0-9.]*\) ms.*/\1 \2/p' "$1"; }
  if run_pprun "$OUT/e.log" "${E[@]}" --metrics "$OUT/e.jsonl" &&
    CUDA_LAUNCH_BLOCKING=1 run_pprun "$OUT/e-blocking.log" "${E[@]}"; then
    read -r step sum <<<"$(timing "$OUT/e.log")"
    read -r _ blocking <<<"$(timing "$OUT/e-blocking.log")"
    [ -n "$step" ] && [ -n "$sum" ] && [ -n "$blocking" ] ||
      { bad "(e) pprun's summary gave no timing line"; step=nan sum=nan blocking=nan; }
    whole=$("$PY" -c "import json; s=[json.loads(l)['step_time_s'] for l in open('$OUT/e.jsonl')][1:]
print(f'{1e3*sum(s)/len(s):.3f}')")
    clock=$([ "$DEVICE" = cuda ] && echo "CUDA events" || echo "host clocks")
    note "(e) pp 1 step, $LAYOUT_E, vocab $VOCAB_E, 2 microbatches of 1: replay $step ms (whole step with the optimizer $whole ms) against the sum of its actions $sum ms ($clock): ratio $("$PY" -c "print(f'{$step/$sum:.3f}')")"
    note "(e) the sum of the actions by $clock $sum ms against $blocking ms under CUDA_LAUNCH_BLOCKING=1 (with the launches' latency: an upper bound): ratio $("$PY" -c "print(f'{$sum/$blocking:.3f}')")"
  else
    bad "(e) the pp 1 step at width ${LAYER[1]} did not run"
  fi
fi

echo
echo "gpu-check: summary ($DEVICE$([ "$DEVICE" = cpu ] && echo ': a dry run at tiny shapes, its figures mean nothing'))"
printf '  %s\n' "${SUMMARY[@]}"
exit $FAILED

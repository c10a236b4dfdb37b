#!/usr/bin/env bash
# pprun on a GPU in one prepared run (issues 28 and 38; docs/gpu.md, "scripts/gpu-check.sh"): on a
# GPU machine, from a clean clone with no edits, it builds pprun against the machine's PyTorch (a
# CUDA build) and runs every part below, each under its own time limit and with its own line in
# the summary, within GPU_CHECK_BUDGET seconds in all (480: the 8 of a 15-minute GPU window that
# remain after the machine's start and a rerun). A part that would not fit in what is left says
# "skipped: out of time". Every loss is compared with the CPU --reference's: 1e-4 relative in fp32,
# 2e-3 in bf16.
#   (a) pp 1 --device cuda;
#   (b) the ranks sharing the GPU (the test mode PPRUN_TEST_SHARE_GPU=1, real NCCL over its network
#       transport): pp 2 under 1F1B (its NCCL transport checked in NCCL's own log), Interleaved1F1B,
#       ZB-H2 and DualPipeV; pp 4 under 1F1B, Interleaved1F1B and DualPipeV; DualPipe (two model
#       copies) with MTP and tied embeddings; pp 2 x --dp 2 (4 ranks); --save after 5 steps and
#       --resume for the other 5;
#   (c) bf16 (--dtype bf16) pipelined, pp 2 under 1F1B and DualPipeV and pp 4 under
#       Interleaved1F1B, against the CPU's bf16 --reference;
#   (d) one Llama-3-8B-shaped decoder layer (hidden 4096, 32 heads, 8 kv heads, ffn 14336, seq 4096,
#       one sequence per microbatch) in bf16: pprun's F, B, I and W times and TFLOP/s (ZB-H2 and
#       1F1B at pp 1; CUDA events on its compute stream) and the same layer in PyTorch eager
#       (bench/gpu_layer_eager.py, SDPA) in bf16 and fp32, against the 989 TFLOP/s peak;
#   (e) one pp 1 training step at that width (4 layers, vocabulary 128,256) in bf16: the step's time
#       against the sum of its actions' times (CUDA events), and that sum against the same step's
#       under CUDA_LAUNCH_BLOCKING=1 (an upper bound: each launch waits for its kernel).
#
#   scripts/gpu-check.sh                    # on the GPU machine, from a clean clone (+ .gpu-carry/)
#   GPU_CHECK_DEVICE=cpu GPU_CHECK_BUILD=build scripts/gpu-check.sh   # the CPU dry run, tiny shapes
#
# Where things go: the logs of every run in $OUT/logs/, the figures (one line each) in
# $OUT/figures.txt, the summary in $OUT/summary.txt, where OUT is GPU_CHECK_OUT, else $OUT (the
# folder a lent GPU machine sends back), else a new temporary folder (kept; its name is printed).
# Scratch files (the carried packages' copy, the runs' plans and checkpoints) go to GPU_CHECK_WORK
# (default a temporary folder), outside the source tree: CMake refuses a package prefix inside it.
#
# Environment:
#   GPU_CHECK_DEVICE  cuda (default) or cpu: cpu runs every part on the CPU at tiny shapes, to test
#                     this script's every part (the ctest gpu_check.cpu_dry_run does); its figures
#                     mean nothing.
#   GPU_CHECK_BUILD   a build directory with tools/pprun/pprun and tools/ppcompile/ppcompile to use
#                     as it is; by default build-gpu/ (ignored by git), configured here the first
#                     time and brought up to date (an incremental build) on every run.
#   GPU_CHECK_PYTHON  the interpreter whose torch pprun links and runs the eager layer (default
#                     python3 on PATH).
#   GPU_CHECK_CARRY   the folder scripts/gpu-carry.sh filled (default .gpu-carry/): the Debian
#                     packages of the build dependencies and the generated parser, for a machine
#                     without them; copied outside the source tree, to ${TMPDIR:-/tmp}/pprun-gpu-carry
#                     (a fixed place: the build refers to it), before every build.
#   GPU_CHECK_BUDGET  seconds for the whole run, the build included (default 480).
#   GPU_CHECK_STEPS   steps of (a)-(c) (default 10; at least 2).
#   GPU_CHECK_PARTS   the parts to run (default "a b c d e"; "" builds only).
# Exit status: 0 when every part that ran passed, 1 when one failed (a skipped part fails nothing),
# 2 when the build or the references could not be done.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
T0=$(date +%s)
DEVICE=${GPU_CHECK_DEVICE:-cuda}
BUILD=${GPU_CHECK_BUILD:-build-gpu}
OWN_BUILD=$([ -z "${GPU_CHECK_BUILD:-}" ] && echo 1 || echo 0)  # this script configures and builds it
PY=${GPU_CHECK_PYTHON:-$(command -v python3)}
CARRY=${GPU_CHECK_CARRY:-$ROOT/.gpu-carry}
BUDGET=${GPU_CHECK_BUDGET:-480}
STEPS=${GPU_CHECK_STEPS:-10}
PARTS=${GPU_CHECK_PARTS-a b c d e}
case $DEVICE in cuda | cpu) ;; *) echo "gpu-check: GPU_CHECK_DEVICE must be cuda or cpu" >&2; exit 2 ;; esac
[ "$STEPS" -ge 2 ] 2>/dev/null || { echo "gpu-check: GPU_CHECK_STEPS must be at least 2" >&2; exit 2; }
if [ -z "$PY" ] || ! "$PY" -c 'import torch' 2>/dev/null; then
  echo "gpu-check: no python with torch (GPU_CHECK_PYTHON='$PY')" >&2
  exit 2
fi
OUT=${GPU_CHECK_OUT:-${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-out.XXXXXX")}}
if [ -n "${GPU_CHECK_WORK:-}" ]; then
  WORK=$GPU_CHECK_WORK
else
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-work.XXXXXX") && trap 'rm -rf "$WORK"' EXIT
fi
mkdir -p "$OUT/logs" "$WORK"
LOGS=$OUT/logs
FIGURES=$OUT/figures.txt
: >"$FIGURES"
FAILED=0
SUMMARY=()
elapsed() { echo $(($(date +%s) - T0)); }
note() { SUMMARY+=("$1"); echo "gpu-check: [$(elapsed) s] $1"; }
bad() { FAILED=1; note "FAILED $1"; }
figure() { echo "$1" >>"$FIGURES"; }
want() { [[ " $PARTS " == *" $1 "* ]]; }
echo "gpu-check: device $DEVICE, logs in $LOGS, figures in $FIGURES, budget ${BUDGET} s"

# ---- the build ----------------------------------------------------------------------------------
PPRUN=$BUILD/tools/pprun/pprun
PPC=$BUILD/tools/ppcompile/ppcompile
if [ $OWN_BUILD = 1 ] && [ -d "$CARRY/root/usr" ]; then
  # The carried Debian packages (scripts/gpu-carry.sh), copied outside the source tree: CMake's
  # install rules refuse an include directory of an imported package inside it. A fixed place,
  # copied again on every run: the build's cache refers to it.
  C=${TMPDIR:-/tmp}/pprun-gpu-carry
  rm -rf "$C" && cp -a "$CARRY" "$C" || { echo "gpu-check: cannot copy $CARRY to $C" >&2; exit 2; }
fi
# torch's CMake config probes the GPU's architecture unless told (and the probe fails under CMake
# 3.25 with nvcc 13: "requires the language dialect CUDA20"); a rebuild may configure again.
if [ "$DEVICE" = cuda ] && [ -z "${TORCH_CUDA_ARCH_LIST:-}" ]; then
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' ')
  export TORCH_CUDA_ARCH_LIST=${cap:-9.0}
fi
if [ $OWN_BUILD = 1 ] && [ ! -f "$BUILD/CMakeCache.txt" ]; then
  args=(-S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPP_PYTHON="$PY"
        -DPP_BUILD_TESTS=OFF -DPP_BUILD_BENCH=OFF)
  ldflags=()
  if [ -d "$CARRY/root/usr" ]; then
    args+=(-DCMAKE_PREFIX_PATH="$C/root/usr" -DCMAKE_CXX_FLAGS="-isystem $C/root/usr/include"
           -DANTLR4_TOOL="$C/antlr4-pregenerated")
    ldflags+=("-L$C/root/usr/lib/x86_64-linux-gnu")
  fi
  # NCCL from the torch environment's nvidia wheel (the libnccl.so.2 libtorch_cuda loads), and the
  # directories of its other nvidia libraries and of torch's: libtorch_cuda.so needs them at link
  # time (-rpath-link); --allow-shlib-undefined for what those libraries leave to the driver.
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
  while read -r dir; do ldflags+=("-Wl,-rpath-link,$dir"); done < <("$PY" - <<'EOF'
import glob, os, torch
site = os.path.dirname(os.path.dirname(torch.__file__))
for d in sorted(glob.glob(os.path.join(site, "nvidia", "*", "lib"))) + [os.path.join(os.path.dirname(torch.__file__), "lib")]:
    print(d)
EOF
  )
  if [ "$DEVICE" = cuda ]; then
    ldflags+=("-Wl,--allow-shlib-undefined")
    if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
      args+=(-DCUDAToolkit_ROOT=/usr/local/cuda -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
    fi
  fi
  args+=(-DCMAKE_EXE_LINKER_FLAGS="${ldflags[*]}")
  # (in the cache too: ninja re-runs cmake after a change to a CMake file, without this shell)
  [ -n "${TORCH_CUDA_ARCH_LIST:-}" ] && args+=(-DTORCH_CUDA_ARCH_LIST="$TORCH_CUDA_ARCH_LIST")
  echo "gpu-check: configuring $BUILD (TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-})"
  if ! cmake "${args[@]}" >"$LOGS/configure.log" 2>&1; then
    tail -30 "$LOGS/configure.log"
    rm -f "$BUILD/CMakeCache.txt"  # (the next run configures again)
    note "FAILED the build: configure (logs/configure.log)"
    printf '%s\n' "${SUMMARY[@]}" >"$OUT/summary.txt"
    exit 2
  fi
  grep -E 'LibTorch:|pprt: NCCL' "$LOGS/configure.log"
fi
if [ $OWN_BUILD = 1 ]; then
  if ! cmake --build "$BUILD" -j"$(nproc)" --target pprun ppcompile >"$LOGS/build.log" 2>&1; then
    grep -E 'error|FAILED' "$LOGS/build.log" | head -30
    note "FAILED the build: pprun and ppcompile (logs/build.log)"
    printf '%s\n' "${SUMMARY[@]}" >"$OUT/summary.txt"
    exit 2
  fi
  note "ok the build: pprun and ppcompile, by $(elapsed) s"
  figure "build: $(elapsed) s (configure if needed, pprun and ppcompile on $(nproc) cores)"
fi
[ -x "$PPRUN" ] && [ -x "$PPC" ] || { echo "gpu-check: no pprun or ppcompile in $BUILD" >&2; exit 2; }
torch_info=$("$PY" -c 'import torch; print(torch.__version__, "cuda" if torch.cuda.is_available() else "no cuda")')
echo "gpu-check: pprun $PPRUN, python $PY (torch $torch_info)"
figure "torch: $torch_info"
if [ "$DEVICE" = cuda ] && command -v nvidia-smi >/dev/null; then
  figure "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader | head -1)"
fi

# ---- sizes and helpers --------------------------------------------------------------------------
# (a)-(c): a small model at which a fp32 run on the GPU matches the CPU's to 1e-4; (d), (e):
# Llama-3-8B's layer. The CPU dry run shrinks both, and gives each run less time.
if [ "$DEVICE" = cuda ]; then
  SMALL=(--hidden 256 --heads 8 --kv-heads 4 --ffn 704 --vocab 512 --seq-len 128)
  LAYER=(--hidden 4096 --heads 32 --kv-heads 8 --ffn 14336 --seq 4096)
  VOCAB_E=128256 LAYOUT_E=EttttL TIMING_STEPS=6 EAGER_ITERS=(--warmup 3 --iters 10)
  LIMIT=90 LIMIT_BIG=150 SHARE=1
else
  SMALL=(--hidden 32 --heads 4 --kv-heads 2 --ffn 64 --vocab 128 --seq-len 16)
  LAYER=(--hidden 64 --heads 4 --kv-heads 2 --ffn 176 --seq 32)
  VOCAB_E=1024 LAYOUT_E=EttL TIMING_STEPS=3 EAGER_ITERS=(--warmup 1 --iters 1)
  LIMIT=120 LIMIT_BIG=120 SHARE=0
fi
MB=8
# --timeout bounds a run's first step (and setup): a hang costs a minute, not the default 300 s.
COMMON=(--steps "$STEPS" --global-batch 16 --progress none --seed 7 --timeout 60 "${SMALL[@]}")
LAYER_PPRUN=(--hidden "${LAYER[1]}" --heads "${LAYER[3]}" --kv-heads "${LAYER[5]}" --ffn "${LAYER[7]}"
             --seq-len "${LAYER[9]}")

plan() {  # plan LAYOUT PP SCHEDULE MICROBATCHES FILE
  "$PPC" --layout "$1" --pp "$2" --schedule "$3" --microbatches "$4" --emit json -o "$5" >/dev/null
}
# fits SECONDS: whether a run of that limit fits in the budget left.
fits() { [ $(($(elapsed) + $1)) -le "$BUDGET" ]; }
# run_limited NAME LIMIT LOG CMD...: CMD under a time limit (pprun stops its ranks on SIGTERM);
# false, with the log's tail and a summary line, if it failed or ran out of time.
run_limited() {
  local name=$1 limit=$2 log=$3 rc
  shift 3
  timeout -k 10 "$limit" "$@" >"$log" 2>&1
  rc=$?
  [ $rc = 0 ] && return 0
  tail -8 "$log" | sed 's/^/    /'
  if [ $rc = 124 ] || [ $rc = 137 ]; then
    bad "$name: timed out after $limit s (logs/$(basename "$log"))"
  else
    bad "$name: exit $rc (logs/$(basename "$log"))"
  fi
  return 1
}
# compare NAME METRICS REFERENCE TOLERANCE: each step's loss within TOLERANCE x max(1, |reference|).
compare() {
  local r
  r=$("$PY" - "$2" "$3" "$4" <<'EOF'
import json, sys
# (a line without its newline is one a killed run left half-written: docs/pprun.md, Outputs)
run, ref = ([json.loads(l)["loss"] for l in open(f) if l.endswith("\n")] for f in sys.argv[1:3])
tol = float(sys.argv[3])
if len(run) != len(ref) or not run:
    print(f"bad: {len(run)} steps against {len(ref)}"); sys.exit()
worst = max(abs(a - b) / max(1.0, abs(b)) for a, b in zip(run, ref))
exact = all(a == b for a, b in zip(run, ref))
print(f"{'ok' if worst <= tol else 'bad'}: {len(run)} steps, loss {run[0]:.6f} -> {run[-1]:.6f}, "
      f"largest difference {worst:.2e} (tolerance {tol:g}){', bit-exact' if exact else ''}")
EOF
  )
  figure "$1: ${r#*: }"
  if [[ $r == ok* ]]; then note "ok $1: ${r#ok: }"; else bad "$1: ${r#bad: }"; fi
}
# check NAME LAYOUT PP SCHEDULE REFERENCE TOLERANCE [FLAGS...]: a pipelined run on the device, the
# ranks sharing it, against REFERENCE's losses; skipped when out of time.
check() {
  local name=$1 layout=$2 pp=$3 schedule=$4 ref=$5 tol=$6 f
  shift 6
  f=$(echo "$name" | tr -c 'A-Za-z0-9' _)
  if ! fits "$LIMIT"; then note "skipped $name: out of time ($(elapsed) of $BUDGET s used)"; return; fi
  if [ ! -s "$ref" ]; then note "skipped $name: no reference"; return; fi
  plan "$layout" "$pp" "$schedule" $MB "$WORK/$f.json" || { bad "$name: ppcompile failed"; return; }
  PPRUN_TEST_SHARE_GPU=$SHARE run_limited "$name" "$LIMIT" "$LOGS/$f.log" \
    "$PPRUN" --plan "$WORK/$f.json" --device "$DEVICE" "${COMMON[@]}" --metrics "$WORK/$f.jsonl" "$@" &&
    compare "$name" "$WORK/$f.jsonl" "$ref" "$tol"
}

# ---- the CPU references, in the background ------------------------------------------------------
LAYOUT=EttttttttL
MTP_LAYOUT='Etttt|ttttmL'
REF=$WORK/reference.jsonl REF_MTP=$WORK/reference-mtp.jsonl REF16=$WORK/reference-bf16.jsonl
reference() {  # reference NAME OUT FLAGS...
  local name=$1 out=$2
  shift 2
  timeout -k 10 "$LIMIT_BIG" "$PPRUN" --reference --microbatches $MB --device cpu --threads 4 \
    "${COMMON[@]}" --metrics "$out" "$@" >"$LOGS/$name.log" 2>&1 || { rm -f "$out"; tail -5 "$LOGS/$name.log"; }
}
ref_pids=()
if want a || want b; then
  reference reference "$REF" --layout "$LAYOUT" & ref_pids+=($!)
  reference reference-mtp "$REF_MTP" --layout "$MTP_LAYOUT" --tie-embeddings & ref_pids+=($!)
fi
if want c; then reference reference-bf16 "$REF16" --layout "$LAYOUT" --dtype bf16 & ref_pids+=($!); fi
refs_done=0
wait_refs() {  # the references, before the first comparison
  [ $refs_done = 1 ] && return
  refs_done=1
  [ ${#ref_pids[@]} -eq 0 ] && return
  for p in "${ref_pids[@]}"; do wait "$p"; done
  local ok=1 n
  for n in reference reference-mtp reference-bf16; do
    [ -e "$LOGS/$n.log" ] || continue
    [ -s "$WORK/$n.jsonl" ] || { bad "the CPU $n did not run (logs/$n.log)"; ok=0; }
  done
  [ $ok = 1 ] && note "ok the CPU references, done by $(elapsed) s"
}

# ---- (a) pp 1 on the device ---------------------------------------------------------------------
if want a; then
  plan "$LAYOUT" 1 1F1B $MB "$WORK/a.json"
  if fits "$LIMIT" && run_limited "(a) pp 1 --device $DEVICE" "$LIMIT" "$LOGS/a.log" \
    "$PPRUN" --plan "$WORK/a.json" --device "$DEVICE" "${COMMON[@]}" --metrics "$WORK/a.jsonl"; then
    wait_refs
    compare "(a) pp 1 --device $DEVICE vs the CPU reference" "$WORK/a.jsonl" "$REF" 1e-4
  fi
fi

# ---- (b) several ranks sharing the device -------------------------------------------------------
if want b; then
  wait_refs
  on="sharing one $DEVICE"
  # The first run also shows which NCCL transport carried it (NCCL's own log, INFO level).
  if [ "$DEVICE" = cuda ]; then
    NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,P2P,NET check "(b) pp 2 1F1B, 2 ranks $on" 'Etttt|ttttL' 2 1F1B "$REF" 1e-4
    f=$LOGS/$(echo "(b) pp 2 1F1B, 2 ranks $on" | tr -c 'A-Za-z0-9' _).log
    via=$(grep -o 'via [A-Za-z/0-9]*' "$f" 2>/dev/null | sort | uniq -c | tr -s ' ' | paste -sd, -)
    figure "(b) NCCL's connections in the pp 2 1F1B run:${via:- none logged}"
    note "ok (b) NCCL's connections in the pp 2 1F1B run:${via:- none logged}"
  else
    check "(b) pp 2 1F1B, 2 ranks $on" 'Etttt|ttttL' 2 1F1B "$REF" 1e-4
  fi
  check "(b) pp 2 Interleaved1F1B, 2 ranks $on" 'Ett|tt|tt|ttL' 2 Interleaved1F1B "$REF" 1e-4
  check "(b) pp 2 ZB-H2, 2 ranks $on" 'Etttt|ttttL' 2 ZB-H2 "$REF" 1e-4
  check "(b) pp 2 DualPipeV, 2 ranks $on" 'Ett|tt|tt|ttL' 2 DualPipeV "$REF" 1e-4
  check "(b) pp 4 1F1B, 4 ranks $on" 'Ett|tt|tt|ttL' 4 1F1B "$REF" 1e-4
  check "(b) pp 4 Interleaved1F1B, 4 ranks $on" 'Et|t|t|t|t|t|t|tL' 4 Interleaved1F1B "$REF" 1e-4
  check "(b) pp 4 DualPipeV, 4 ranks $on" 'Et|t|t|t|t|t|t|tL' 4 DualPipeV "$REF" 1e-4
  check "(b) pp 2 DualPipe (two copies), MTP, tied embeddings, 2 ranks $on" "$MTP_LAYOUT" 2 DualPipe \
    "$REF_MTP" 1e-4 --tie-embeddings
  check "(b) pp 2 1F1B x --dp 2, 4 ranks $on" 'Etttt|ttttL' 2 1F1B "$REF" 1e-4 --dp 2
  # --save after half the steps, then --resume: the two halves together against the reference.
  name="(b) pp 2 1F1B --save after $((STEPS / 2)) steps, --resume for the rest, $on"
  if fits $((2 * LIMIT)); then
    plan 'Etttt|ttttL' 2 1F1B $MB "$WORK/save.json"
    rm -rf "$WORK/ckpt" "$WORK/save1.jsonl" "$WORK/save2.jsonl"
    if PPRUN_TEST_SHARE_GPU=$SHARE run_limited "$name (the first half)" "$LIMIT" "$LOGS/save1.log" \
      "$PPRUN" --plan "$WORK/save.json" --device "$DEVICE" "${COMMON[@]}" --stop-after $((STEPS / 2)) \
      --save "$WORK/ckpt" --metrics "$WORK/save1.jsonl" &&
      PPRUN_TEST_SHARE_GPU=$SHARE run_limited "$name (the second half)" "$LIMIT" "$LOGS/save2.log" \
        "$PPRUN" --plan "$WORK/save.json" --device "$DEVICE" "${COMMON[@]}" --resume "$WORK/ckpt" \
        --metrics "$WORK/save2.jsonl"; then
      cat "$WORK/save1.jsonl" "$WORK/save2.jsonl" >"$WORK/save.jsonl"
      compare "$name" "$WORK/save.jsonl" "$REF" 1e-4
    fi
  else
    note "skipped $name: out of time ($(elapsed) of $BUDGET s used)"
  fi
fi

# ---- (c) bf16 -----------------------------------------------------------------------------------
if want c; then
  wait_refs
  on="sharing one $DEVICE"
  check "(c) bf16 pp 2 1F1B, 2 ranks $on, vs the CPU's bf16 reference" 'Etttt|ttttL' 2 1F1B "$REF16" 2e-3 --dtype bf16
  check "(c) bf16 pp 2 DualPipeV, 2 ranks $on, vs the CPU's bf16 reference" 'Ett|tt|tt|ttL' 2 DualPipeV "$REF16" 2e-3 --dtype bf16
  check "(c) bf16 pp 4 Interleaved1F1B, 4 ranks $on, vs the CPU's bf16 reference" 'Et|t|t|t|t|t|t|tL' 4 Interleaved1F1B "$REF16" 2e-3 --dtype bf16
fi

# ---- (d) one decoder layer ----------------------------------------------------------------------
# pprun's per-action times on a GPU are CUDA events recorded on its compute stream around each
# action (runtime/train/device_queue.cpp): the GPU's time for the action's kernels, without the
# host's launch latency. The stage is E, t and L at a vocabulary of 256: E and L add under 1 % of
# the layer's FLOPs at hidden 4096.
PEAK=989
summary_times() {  # summary_times LOG: "F 1.2 B 3.4 ..." from pprun's closing summary
  sed -n 's/.*mean compute time per action: //p' "$1" | tr -d ',' | sed 's/ ms//g'
}
tflops() {  # tflops KIND MS: "KIND  MS ms  T TFLOP/s  P % of PEAK" for the layer's FLOPs of KIND
  "$PY" -c "import json, sys
f = json.loads(sys.argv[1]); k, ms = sys.argv[2], float(sys.argv[3])
fl = f['F'] + f['B'] if k == 'F+B' else f[k]
t = fl / ms / 1e9
print(f'{k:<3} {ms:10.3f} ms {t:8.2f} TFLOP/s {100 * t / $PEAK:5.1f} % of $PEAK')" "$FLOPS" "$1" "$2"
}
if want d; then
  declare -A T=()
  for s in ZB-H2 1F1B; do
    if ! fits "$LIMIT_BIG"; then note "skipped (d) pprun's layer under $s: out of time"; continue; fi
    plan EtL 1 $s 4 "$WORK/d$s.json"
    if run_limited "(d) pprun's layer under $s" "$LIMIT_BIG" "$LOGS/d$s.log" \
      "$PPRUN" --plan "$WORK/d$s.json" --device "$DEVICE" --dtype bf16 "${LAYER_PPRUN[@]}" --vocab 256 \
      --global-batch 4 --steps $TIMING_STEPS --progress none --timeout 60; then
      read -r -a kv <<<"$(summary_times "$LOGS/d$s.log")"
      for ((i = 0; i + 1 < ${#kv[@]}; i += 2)); do  # F from ZB-H2, B from 1F1B
        [ -n "${T[${kv[i]}]:-}" ] || T[${kv[i]}]=${kv[i + 1]}
      done
    fi
  done
  FLOPS=$("$PY" bench/gpu_layer_eager.py "${LAYER[@]}" --flops-only)
  for k in F B I W; do
    if [ -n "${T[$k]:-}" ]; then
      figure "(d) pprun bf16 layer      $(tflops $k "${T[$k]}")"
    elif [ ${#T[@]} -gt 0 ]; then
      bad "(d) pprun's summary gave no time for $k"
    fi
  done
  if [ -n "${T[F]:-}" ] && [ -n "${T[B]:-}" ]; then
    figure "(d) pprun bf16 layer      $(tflops F+B "$("$PY" -c "print(${T[F]} + ${T[B]})")")"
  fi
  [ ${#T[@]} -gt 0 ] && note "ok (d) pprun's layer: F, B, I, W timed (figures.txt)"
  for dt in bf16 fp32; do
    [ "$DEVICE" = cpu ] && [ $dt = bf16 ] && continue  # bf16 on a CPU: slow and meaningless
    if ! fits "$LIMIT_BIG"; then note "skipped (d) the PyTorch eager layer ($dt): out of time"; continue; fi
    if run_limited "(d) the PyTorch eager layer ($dt)" "$LIMIT_BIG" "$LOGS/eager-$dt.log" \
      "$PY" bench/gpu_layer_eager.py "${LAYER[@]}" --device "$DEVICE" --dtype $dt "${EAGER_ITERS[@]}" \
      --json "$WORK/eager-$dt.json"; then
      while read -r k ms; do figure "(d) PyTorch eager $dt layer $(tflops "$k" "$ms")"; done < <(
        "$PY" -c "import json; r = json.load(open('$WORK/eager-$dt.json'))
for k in ('F', 'B', 'FB'): print('F+B' if k == 'FB' else k, r['ms'][k])")
      note "ok (d) the PyTorch eager layer ($dt) timed (figures.txt)"
    fi
  done
fi

# ---- (e) one pp 1 step at that width ------------------------------------------------------------
if want e; then
  plan "$LAYOUT_E" 1 1F1B 2 "$WORK/e.json"
  E=(--plan "$WORK/e.json" --device "$DEVICE" "${LAYER_PPRUN[@]}" --vocab $VOCAB_E --global-batch 2
     --steps $TIMING_STEPS --progress none --dtype bf16 --timeout 60)
  timing() { sed -n 's/.*timing over .*; step \([0-9.]*\) ms, simulated makespan from the measured action times \([0-9.]*\) ms.*/\1 \2/p' "$1"; }
  if ! fits $((2 * LIMIT_BIG)); then
    note "skipped (e) the pp 1 step at width ${LAYER[1]}: out of time"
  elif run_limited "(e) the pp 1 step at width ${LAYER[1]}" "$LIMIT_BIG" "$LOGS/e.log" \
    "$PPRUN" "${E[@]}" --metrics "$WORK/e.jsonl" &&
    CUDA_LAUNCH_BLOCKING=1 run_limited "(e) the same step under CUDA_LAUNCH_BLOCKING=1" "$LIMIT_BIG" \
      "$LOGS/e-blocking.log" "$PPRUN" "${E[@]}"; then
    read -r step sum <<<"$(timing "$LOGS/e.log")"
    read -r _ blocking <<<"$(timing "$LOGS/e-blocking.log")"
    if [ -n "${step:-}" ] && [ -n "${sum:-}" ] && [ -n "${blocking:-}" ]; then
      whole=$("$PY" -c "import json; s=[json.loads(l)['step_time_s'] for l in open('$WORK/e.jsonl') if l.endswith('\n')][1:]
print(f'{1e3*sum(s)/len(s):.3f}')")
      clock=$([ "$DEVICE" = cuda ] && echo "CUDA events" || echo "host clocks")
      figure "(e) pp 1 step, $LAYOUT_E, vocab $VOCAB_E, 2 microbatches of 1: replay $step ms (whole step with the optimizer $whole ms) against the sum of its actions $sum ms ($clock): ratio $("$PY" -c "print(f'{$step/$sum:.3f}')")"
      figure "(e) the sum of the actions by $clock $sum ms against $blocking ms under CUDA_LAUNCH_BLOCKING=1 (with the launches' latency: an upper bound): ratio $("$PY" -c "print(f'{$sum/$blocking:.3f}')")"
      note "ok (e) the step's timing (figures.txt)"
    else
      bad "(e) pprun's summary gave no timing line"
    fi
  fi
fi

wait_refs
echo
echo "gpu-check: summary ($DEVICE$([ "$DEVICE" = cpu ] && echo ': a dry run at tiny shapes, its figures mean nothing'), $(elapsed) s)"
printf '  %s\n' "${SUMMARY[@]}" | tee "$OUT/summary.txt"
echo "gpu-check: figures ($FIGURES):"
sed 's/^/  /' "$FIGURES"
exit $FAILED

#!/usr/bin/env bash
# pprun against a ~200-line Python pipeline runtime (bench/python_pipeline.py: torch.distributed,
# Gloo, batch_isend_irecv, 1F1B, launched by torchrun), out of the box, on issue 11's model:
# pp 2, layout Ett|ttL (4 decoder layers), hidden 256, 8 heads / 4 kv heads, SwiGLU 704, seq 128,
# vocab 256, 8 microbatches x 4 sequences (global batch 32).
#
#   bench/vs_python.sh [options]
#     --build DIR       pprun/ppcompile build directory (default: build)
#     --reps N          runs of each system, in alternation (default 3)
#     --steps N         training steps per run; medians over steps 2..N (default 12)
#     --schedules LIST  the pprun schedules (default "1F1B ZB-H2 DualPipe": 1F1B, the Python runtime's
#                       schedule; ZB-H2 and DualPipe, the best two at this size by ppcompile --compare
#                       and by measurement, see bench/README.md; DualPipe keeps two model copies)
#     --blas1           also run each pprun schedule with OPENBLAS_NUM_THREADS=1 (diagnosis only:
#                       NOT out of the box, labelled as such; no effect on LibTorch builds on MKL,
#                       such as the torch 2.13 wheel's)
#     --blas-shim       also run each pprun schedule with bench/blas_threads_shim.c preloaded: pprun's
#                       at::set_num_threads(n) then also calls openblas_set_num_threads(n), as a fix
#                       in the runtime would (diagnosis only, labelled as such; needs cc)
#     --check           first check that the Python runtime trains pprun's model: its losses must
#                       equal `pprun --reference` (5 steps, printed side by side)
#     --out DIR         keep every run's log here (default: a new temporary directory, kept)
#
# Each system runs as a user runs it, with no thread variables of ours (they are removed from the
# environment; torchrun itself exports OMP_NUM_THREADS=1 to the Python ranks, as it always does):
#   python   .venv/bin/torchrun --nproc_per_node 2 ... bench/python_pipeline.py --steps N
#   pprun    pprun --plan PLAN --steps N <model size> --metrics FILE   (pprun spawns its 2 ranks)
# Per run: the median step time and tokens/s over steps 2..N, from each runtime's own per-step
# report (Python's step lines, pprun's --metrics). Per system: the median over runs (and the range
# of the run medians). Ratios: pprun tokens/s over Python tokens/s. `uptime` is recorded before
# every run; the machine's load disturbs these figures, so compare runs taken in alternation only.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=build REPS=3 STEPS=12 SCHEDULES="1F1B ZB-H2 DualPipe" BLAS1=0 SHIM=0 CHECK=0 OUT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --schedules) SCHEDULES=$2; shift 2 ;;
    --blas1) BLAS1=1; shift ;;
    --blas-shim) SHIM=1; shift ;;
    --check) CHECK=1; shift ;;
    --out) OUT=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "vs_python.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
PPC=$BUILD/tools/ppcompile/ppcompile
PPRUN=$BUILD/tools/pprun/pprun
# The project's Python environment (scripts/install-deps.sh), or PY=.../bin/python for another.
PY=${PY:-.venv/bin/python}
TORCHRUN=$(dirname "$PY")/torchrun
for f in "$PPC" "$PPRUN" "$PY" "$TORCHRUN"; do
  [ -x "$f" ] || { echo "vs_python.sh: missing $f (build pprun; run scripts/install-deps.sh)" >&2; exit 2; }
done
OUT=${OUT:-$(mktemp -d /tmp/vs_python.XXXXXX)}
mkdir -p "$OUT"

LAYOUT='Ett|ttL'
LAYOUT4='Et|t|t|tL'
MB=8
MODEL=(--hidden 256 --heads 8 --kv-heads 4 --ffn 704 --vocab 256 --seq-len 128 --global-batch 32)
# Out of the box: none of the variables that set thread counts, whatever the caller's shell has.
CLEAN=(env -u OMP_NUM_THREADS -u OPENBLAS_NUM_THREADS -u GOTO_NUM_THREADS -u MKL_NUM_THREADS)

free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
load() { uptime | sed 's/.*load average: //'; }

# Wall and CPU seconds (user + sys, the process and the children it waited for) of each run.
# Without /usr/bin/time (Debian package `time`), runs are not timed by it.
timed() {
  local t=$1
  shift
  if [ -x /usr/bin/time ]; then /usr/bin/time -f '%e %U %S' -o "$t" "$@"; else "$@"; fi
}

run_python() {  # $1: log file
  timed "$1.time" "${CLEAN[@]}" "$TORCHRUN" --nproc_per_node 2 --master_addr 127.0.0.1 --master_port "$(free_port)" \
    --monitor_interval 1 bench/python_pipeline.py --layout "$LAYOUT" \
    --microbatches $MB "${MODEL[@]}" --steps "$STEPS" >"$1" 2>&1
}
run_pprun() {  # $1: schedule, $2: log file, $3: metrics file, $4...: environment (diagnosis)
  local sched=$1 log=$2 metrics=$3
  shift 3
  timed "$log.time" "${CLEAN[@]}" "$@" "$PPRUN" --plan "$(plan_of "$sched")" --steps "$STEPS" "${MODEL[@]}" \
    --metrics "$metrics" >"$log" 2>&1
}

echo "== vs_python: $(nproc) cores, $(uname -r), logs in $OUT"
echo "   model: layout $LAYOUT, pp 2, hidden 256, heads 8 (kv 4), ffn 704, seq 128, vocab 256, $MB microbatches x 4"
echo "   $REPS runs per system in alternation, $STEPS steps per run, medians over steps 2..$STEPS"

if [ $CHECK = 1 ]; then
  echo "== check: the Python runtime against pprun --reference (same init, data and optimizer), 5 steps"
  OPENBLAS_NUM_THREADS=1 "$PPRUN" --reference --layout "$LAYOUT" --microbatches $MB "${MODEL[@]}" --steps 5 --threads 1 \
    --progress none --metrics "$OUT/check-reference.jsonl" >"$OUT/check-reference.log" 2>&1
  STEPS=5 run_python "$OUT/check-python.log"
  "$PY" - "$OUT/check-reference.jsonl" "$OUT/check-python.log" <<'EOF'
import json, re, sys
ref = [json.loads(l)["loss"] for l in open(sys.argv[1]) if l.endswith("\n")]  # whole lines
py = [float(m.group(1)) for m in re.finditer(r"^step \d+/\d+ loss (\S+)", open(sys.argv[2]).read(), re.M)]
worst = max(abs(a - b) / abs(a) for a, b in zip(ref, py)) if py else float("inf")
for i, (a, b) in enumerate(zip(ref, py)):
    print(f"   step {i + 1}: pprun --reference {a:.6f}  python {b:.6f}")
ok = len(py) == len(ref) and worst < 1e-5
print(f"   {'OK' if ok else 'MISMATCH'}: largest relative difference {worst:.2e} (must be < 1e-5)")
sys.exit(0 if ok else 1)
EOF
fi

# A schedule is NAME or NAME@LAYOUT (the same model split otherwise, e.g. Interleaved1F1B@Et|t|t|tL
# for two stages per rank); schedules that need two stages per rank (ZBVZeroBubble, DualPipeV) get
# Et|t|t|tL by themselves.
plan_of() { echo "$OUT/plan-$(printf %s "$1" | tr -c 'A-Za-z0-9-' _).json"; }
for s in $SCHEDULES; do
  if [ "${s#*@}" != "$s" ]; then
    "$PPC" --layout "${s#*@}" --pp 2 --schedule "${s%%@*}" --microbatches $MB --emit json -o "$(plan_of "$s")"
  else
    "$PPC" --layout "$LAYOUT" --pp 2 --schedule "$s" --microbatches $MB --emit json \
      -o "$(plan_of "$s")" 2>/dev/null ||
      "$PPC" --layout "$LAYOUT4" --pp 2 --schedule "$s" --microbatches $MB --emit json -o "$(plan_of "$s")"
  fi
done

if [ $SHIM = 1 ]; then
  cc -O2 -shared -fPIC bench/blas_threads_shim.c -o "$OUT/blas_threads_shim.so" -ldl
fi

SYSTEMS="python"
for s in $SCHEDULES; do SYSTEMS="$SYSTEMS pprun:$s"; done
[ $BLAS1 = 1 ] && for s in $SCHEDULES; do SYSTEMS="$SYSTEMS pprun-blas1:$s"; done
[ $SHIM = 1 ] && for s in $SCHEDULES; do SYSTEMS="$SYSTEMS pprun-shim:$s"; done

: >"$OUT/runs.tsv"  # system, rep, data file, load before, load after, exit code, log
for rep in $(seq 1 "$REPS"); do
  for sys in $SYSTEMS; do
    name=$(printf %s "$sys" | tr -c 'A-Za-z0-9-' _)
    log=$OUT/$name.$rep.log
    before=$(load)
    rc=0
    case $sys in
      python) run_python "$log" || rc=$? ; data=$log ;;
      pprun:*) run_pprun "${sys#pprun:}" "$log" "$OUT/$name.$rep.jsonl" || rc=$?; data=$OUT/$name.$rep.jsonl ;;
      pprun-blas1:*) run_pprun "${sys#*:}" "$log" "$OUT/$name.$rep.jsonl" OPENBLAS_NUM_THREADS=1 || rc=$?
        data=$OUT/$name.$rep.jsonl ;;
      pprun-shim:*) run_pprun "${sys#*:}" "$log" "$OUT/$name.$rep.jsonl" \
        LD_PRELOAD="$OUT/blas_threads_shim.so" || rc=$?
        data=$OUT/$name.$rep.jsonl ;;
    esac
    after=$(load)
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$sys" "$rep" "$data" "$before" "$after" "$rc" "$log" \
      >>"$OUT/runs.tsv"
    printf '   run %s %-20s load before %-17s after %-17s wall/user/sys %-16s %s\n' "$rep" "$sys" \
      "$before" "$after" "$(tr ' ' / <"$log.time" 2>/dev/null | tail -1)" \
      "$([ $rc = 0 ] || echo "FAILED (exit $rc, see $log)")"
  done
done

"$PY" - "$OUT/runs.tsv" "$STEPS" <<'EOF'
import json, re, statistics as st, sys
steps = int(sys.argv[2])
runs = {}  # system -> [per-run dict]
for line in open(sys.argv[1]):
    sys_, rep, path, before, after, rc, log = line.rstrip("\n").split("\t")
    if rc != "0":
        continue
    text = open(log).read()
    if sys_ == "python":
        per = [(float(t), float(k)) for t, k in
               re.findall(r"^step \d+/\d+ .*step-time (\S+) s tok/s (\S+)", text, re.M)]
    else:
        per = [(j["step_time_s"], j["tokens_per_s"])
               for j in (json.loads(l) for l in open(path) if l.endswith("\n"))]
    per = per[1:]  # steps 2..N
    if len(per) != steps - 1:
        print(f"   warning: {path}: {len(per) + 1} steps reported, expected {steps}")
    if not per:
        continue
    r = {"rep": rep, "t": st.median(t for t, _ in per), "k": st.median(k for _, k in per)}
    m = re.search(r"mean compute time per action: ([^;\n]*)", text)
    if m:  # "F 86.3 ms, B 155.8 ms" or "F .. ms, I .. ms, W .. ms"; B := I + W when split
        kinds = {k: float(v) for k, v in re.findall(r"(\w+) ([\d.]+) ms", m.group(1))}
        r.update({k: v for k, v in kinds.items() if k in ("F", "B", "I", "W")})
        if "B" not in r and "I" in r and "W" in r:
            r["B"] = r["I"] + r["W"]
    m = re.search(r"posting to the transport (\S+) us/op", text)
    if m:
        r["post"] = float(m.group(1))
    try:
        wall, user, system = map(float, open(log + ".time").read().split()[-3:])
        r["cpu"] = user + system
    except (OSError, ValueError):
        pass
    runs.setdefault(sys_, []).append(r)


def name(s):
    if s == "python":
        return "Python (torchrun, Gloo, 1F1B)"
    kind, sched = s.split(":", 1)
    return f"pprun {sched}" + {"pprun": " (out of the box)",
                               "pprun-blas1": ", OPENBLAS_NUM_THREADS=1 (diagnosis)",
                               "pprun-shim": ", openblas_set_num_threads shim (diagnosis)"}[kind]


def med(r, key, fmt):
    v = [x[key] for x in r if key in x]
    return fmt.format(st.median(v)) if v else "-"


print(f"== results: medians over steps 2..{steps} of each run, then over runs [range of the run medians]")
print(f"   {'system':<62} {'runs':>4} {'step s [range]':>18} {'tokens/s [range]':>20} {'vs Python':>9} "
      f"{'paired [range]':>18}")
base = st.median(x["k"] for x in runs["python"]) if "python" in runs else None
py_rep = {x["rep"]: x["k"] for x in runs.get("python", [])}
for s, r in runs.items():
    ts, ks = [x["t"] for x in r], [x["k"] for x in r]
    ratio = f"{st.median(ks) / base:.2f}x" if base else "-"
    paired = [x["k"] / py_rep[x["rep"]] for x in r if x["rep"] in py_rep]
    pr = f"{st.median(paired):.2f}x [{min(paired):.2f}-{max(paired):.2f}]" if paired else "-"
    print(f"   {name(s):<62} {len(r):>4} {st.median(ts):6.3f} [{min(ts):.2f}-{max(ts):.2f}] "
          f"{st.median(ks):6.0f} [{min(ks):.0f}-{max(ks):.0f}] {ratio:>9} {pr:>18}")
oob = [s for s in runs if s.startswith("pprun:")]
if base and oob:
    best = max(oob, key=lambda s: st.median(x["k"] for x in runs[s]))
    one = "pprun:1F1B" if "pprun:1F1B" in runs else None
    if one:
        print(f"   => out of the box, pprun 1F1B / Python 1F1B: "
              f"{st.median(x['k'] for x in runs[one]) / base:.2f}x (goal >= 1.15x)")
    print(f"   => out of the box, pprun's best here ({best.split(':', 1)[1]}) / Python: "
          f"{st.median(x['k'] for x in runs[best]) / base:.2f}x (goal >= 1.3x)")
print("   vs Python: median tokens/s over Python's median. paired: the median (and range) of the ratios")
print("   to the Python run of the same round (runs of a round are minutes apart, so less exposed to the")
print("   machine's load changing). Issue 11's goal, out of the box: >= 1.15x under 1F1B, >= 1.3x under")
print("   pprun's best schedule. Rows marked (diagnosis) are NOT out of the box.")
print(f"== per action (each runtime's own report, steps 2..{steps}, all ranks) and CPU time (medians over runs)")
print(f"   {'system':<62} {'F ms':>7} {'B ms':>7} {'I ms':>7} {'W ms':>7} {'B/F':>5} {'post us/op':>10} "
      f"{'CPU s/run':>9}")
for s, r in runs.items():
    bf = [x["B"] / x["F"] for x in r if "F" in x and "B" in x]
    cols = " ".join(f"{med(r, k, '{:.1f}'):>7}" for k in ("F", "B", "I", "W"))
    print(f"   {name(s):<62} {cols} {(f'{st.median(bf):.2f}' if bf else '-'):>5} "
          f"{med(r, 'post', '{:.0f}'):>10} {med(r, 'cpu', '{:.1f}'):>9}")
print("   B with I and W: I + W. post: pprun's posting to the transport per communication op.")
print("   CPU s/run: user + sys of the whole run (launcher and ranks, start-up included).")
EOF

#!/usr/bin/env bash
# Issue 30's real goal: on this machine, a model whose last stage is heavy (a large vocabulary)
# and whose first stage is light is profiled (pprun --profile), an order is synthesized for what
# was measured (ppcompile --schedule Auto --cost PROFILE), and the synthesized plan's measured step
# time is compared with every named schedule's on the same model under the same memory limit:
# medians of alternating rounds. Goal: Auto's median <= the best named schedule's.
#
#   bench/synth_real.sh [options]
#     --build DIR         pprun/ppcompile build directory (default: build)
#     --reps N            rounds; each round runs every plan once, in alternation (default 3)
#     --steps N           training steps per run; medians over steps 2..N (default 10)
#     --layout STR        the model's layout at two stages per rank (default 'Ett|tttt|tttt|tL');
#                         the one-stage-per-rank schedules run it with every other '|' removed
#     --memory-limit SIZE per-rank limit under the profile's costs (activations + parameters, as
#                         ppcompile --memory-limit); named plans that exceed it are left out and
#                         Auto is synthesized under it (default: none)
#     --profile-plan S    the schedule whose run is profiled (default DualPipeV; see below)
#     --small             a tiny model and 3 steps, one round: checks that everything runs,
#                         measures nothing
#     --out DIR           keep the profile, the plans and every run's log here (default: a new
#                         temporary directory)
#
# The model: pp 2, hidden 256, 8 heads / 4 kv heads, SwiGLU 704, seq 128, vocabulary 32768 (the
# output head and loss on the last stage cost about ten decoder layers), 8 microbatches of 2
# sequences. Auto is synthesized for the layout (two stages per rank) and for the one-stage-per-rank
# layout, and the one the profile predicts shorter runs. The profile comes from a run of DualPipeV (--profile-plan), whose order runs every
# stage's backward both whole (B, mostly inside OVERLAP_F_B) and split (I and W), so that the file
# holds F, B, I and W of every stage: a whole backward is not I + W (on this model the output
# head's B is much cheaper than its I + W), and a profile of a plan without B would charge every
# B as I + W. Named schedules: Interleaved1F1B, LoopedBFS, InterleavedZeroBubble on the layout
# (loop placement), ZBVZeroBubble and DualPipeV (V placement), and 1F1B, ZB-H1, ZB-H2 and DualPipe
# (two model copies: twice the parameters, left out when that exceeds --memory-limit) on the
# one-stage-per-rank layout. A step's time is pprun's --metrics step_time_s (the whole
# step, optimizer included). The profile holds each stage's optimizer time between steps too, so
# the simulated makespan is the whole step as well (each rank begins at its stages' optimizer):
# the last table lists it beside the measured step. The profile names the transport (Gloo), so
# the plans are simulated and Auto is synthesized under the eager message model
# (docs/cost-model.md, "Message models"); each run's end-of-run check (measured over simulated
# from the run's own times) is listed beside its step times. `uptime` is recorded before every
# run; compare only runs taken on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=build REPS=3 STEPS=10 LAYOUT='Ett|tttt|tttt|tL' LIMIT="" SMALL=0 OUT="" PROFILED=DualPipeV
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --layout) LAYOUT=$2; shift 2 ;;
    --memory-limit) LIMIT=$2; shift 2 ;;
    --profile-plan) PROFILED=$2; shift 2 ;;
    --small) SMALL=1; shift ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,40p' "$0"; exit 0 ;;
    *) echo "synth_real.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
PPC=$BUILD/tools/ppcompile/ppcompile PPRUN=$BUILD/tools/pprun/pprun
for b in "$PPC" "$PPRUN"; do
  [ -x "$b" ] || { echo "synth_real.sh: $b not found (build it: cmake --build $BUILD)" >&2; exit 2; }
done
MODEL=(--hidden 256 --heads 8 --kv-heads 4 --ffn 704 --seq-len 128 --vocab 32768 --global-batch 16)
if [ "$SMALL" = 1 ]; then
  MODEL=(--hidden 64 --heads 4 --kv-heads 2 --ffn 176 --seq-len 32 --vocab 4096 --global-batch 8)
  STEPS=3 REPS=1
fi
MBS=8 PP=2
[ -n "$OUT" ] || OUT=$(mktemp -d /tmp/synth_real.XXXXXX)
mkdir -p "$OUT"
# The one-stage-per-rank layout: every other '|' removed (stages 0+1, 2+3, ...).
LAYOUT1=$(awk -v s="$LAYOUT" 'BEGIN { n = split(s, p, "|"); o = p[1];
  for (i = 2; i <= n; i++) o = o ((i % 2) ? "|" : "") p[i]; print o }')
LIMIT_ARGS=()
[ -n "$LIMIT" ] && LIMIT_ARGS=(--memory-limit "$LIMIT")
echo "synth_real: layout $LAYOUT (one stage per rank: $LAYOUT1), pp $PP, $MBS microbatches," \
  "memory limit ${LIMIT:-none}, $REPS rounds of $STEPS steps; files in $OUT"

# 1. Profile.
"$PPC" --layout "$LAYOUT" --pp $PP --schedule "$PROFILED" --microbatches $MBS \
  --emit json -o "$OUT/profiled-plan.json"
"$PPRUN" --plan "$OUT/profiled-plan.json" "${MODEL[@]}" --steps "$STEPS" --progress none \
  --profile "$OUT/profile.json" > "$OUT/profile.log" 2>&1 || { cat "$OUT/profile.log"; exit 1; }
echo "profile: $OUT/profile.json (a run of $PROFILED)"

# 2. The plans: Auto, synthesized for the profile (and the limit), and the named ones that fit.
# Auto is synthesized for both stage counts the named schedules run (the layout at two stages per
# rank, and one stage per rank), and the one the profile predicts shorter is run.
simulated() { "$PPC" --from-json "$1" --cost "$OUT/profile.json" --emit stats |
  awk '/^makespan/ { print $2 }'; }
for per in 2 1; do
  layout=$LAYOUT; [ "$per" = 1 ] && layout=$LAYOUT1
  "$PPC" --layout "$layout" --pp $PP --schedule Auto --microbatches $MBS \
    --cost "$OUT/profile.json" "${LIMIT_ARGS[@]}" --emit json -o "$OUT/Auto.vpp$per.json"
  echo "Auto at $per stage(s) per rank: $(simulated "$OUT/Auto.vpp$per.json") under the profile"
done
if awk -v a="$(simulated "$OUT/Auto.vpp1.json")" -v b="$(simulated "$OUT/Auto.vpp2.json")" \
     'BEGIN { exit !(a < b) }'; then
  cp "$OUT/Auto.vpp1.json" "$OUT/Auto.json"
else
  cp "$OUT/Auto.vpp2.json" "$OUT/Auto.json"
fi
PLANS=(Auto)
for entry in Interleaved1F1B:2 LoopedBFS:2 InterleavedZeroBubble:2 ZBVZeroBubble:2 DualPipeV:2 \
             1F1B:1 ZB-H1:1 ZB-H2:1 DualPipe:1; do
  s=${entry%:*} per=${entry#*:}
  layout=$LAYOUT; [ "$per" = 1 ] && layout=$LAYOUT1
  if ! "$PPC" --layout "$layout" --pp $PP --schedule "$s" --microbatches $MBS --emit json \
       -o "$OUT/$s.json" > "$OUT/$s.compile.log" 2>&1; then
    echo "skipped $s: $(head -1 "$OUT/$s.compile.log")"; continue
  fi
  if [ -n "$LIMIT" ] && "$PPC" --from-json "$OUT/$s.json" --cost "$OUT/profile.json" \
       --memory-limit "$LIMIT" --emit stats | grep -q 'exceeded'; then
    echo "skipped $s: exceeds the memory limit under the profile"; continue
  fi
  PLANS+=("$s")
done
echo
echo "| plan | simulated under the profile (ms) | rank starts (the optimizer, ms) |"
echo "| --- | --- | --- |"
for p in "${PLANS[@]}"; do
  "$PPC" --from-json "$OUT/$p.json" --cost "$OUT/profile.json" --emit stats > "$OUT/$p.stats"
  awk '/^makespan/ { print $2 }' "$OUT/$p.stats" > "$OUT/$p.sim"
  echo "| $p | $(cat "$OUT/$p.sim") |" \
    "$(sed -n 's/^rank starts *\(.*\) (the previous.*/\1/p' "$OUT/$p.stats") |"
done

# 3. Alternating rounds (the order rotates by one plan per round).
# A metrics file's whole lines (docs/pprun.md, Outputs: not a last line without its newline).
complete_lines() {
  if [ -n "$(tail -c 1 "$1")" ]; then sed '$d' "$1"; else cat "$1"; fi
}
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan";
  else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
n=${#PLANS[@]}
for ((r = 1; r <= REPS; r++)); do
  for ((k = 0; k < n; k++)); do
    p=${PLANS[$(((k + r - 1) % n))]}
    echo "round $r $p: $(uptime)" >> "$OUT/uptime.log"
    if ! "$PPRUN" --plan "$OUT/$p.json" "${MODEL[@]}" --steps "$STEPS" --progress none \
         --metrics "$OUT/$p.r$r.jsonl" > "$OUT/$p.r$r.log" 2>&1; then
      echo "synth_real: $p failed in round $r:"; tail -5 "$OUT/$p.r$r.log"; exit 1
    fi
    # The median step time of the run (steps 2..N).
    # (whole lines: a last line without its newline would be one a killed run left half-written)
    complete_lines "$OUT/$p.r$r.jsonl" | tail -n +2 |
      sed 's/.*"step_time_s":\([0-9.eE+-]*\).*/\1/' | median \
      > "$OUT/$p.r$r.median"
    # pprun's end-of-run check: the measured schedule time over the plan simulated from the run's
    # own measured times under the transport's message model (docs/cost-model.md).
    sed -n 's/.* ratio \([0-9.]*\).*/\1/p' "$OUT/$p.r$r.log" | tail -1 > "$OUT/$p.r$r.ratio"
  done
done

echo
echo "| plan | median step time over rounds (s) | simulated whole step (s) | measured / simulated |" \
  "per round | end-of-run check per round |"
echo "| --- | --- | --- | --- | --- | --- |"
best_named="" best_t=""
for p in "${PLANS[@]}"; do
  t=$(cat "$OUT/$p".r*.median | median)
  sim=$(awk '{ printf "%.4f", $1 / 1000 }' "$OUT/$p.sim")
  echo "| $p | $t | $sim | $(awk -v a="$t" -v b="$sim" 'BEGIN { printf "%.3f", (b > 0 ? a / b : 0) }') |" \
    "$(cat "$OUT/$p".r*.median | tr '\n' ' ')| $(cat "$OUT/$p".r*.ratio | tr '\n' ' ')|"
  [ "$p" = Auto ] && auto_t=$t && continue
  if [ -z "$best_t" ] || awk -v a="$t" -v b="$best_t" 'BEGIN { exit !(a < b) }'; then
    best_named=$p best_t=$t
  fi
done
echo
if [ -z "$best_named" ]; then
  echo "no named schedule fits the limit: Auto $auto_t s"
elif awk -v a="$auto_t" -v b="$best_t" 'BEGIN { exit !(a <= b) }'; then
  echo "goal met: Auto $auto_t s <= the best named schedule, $best_named, $best_t s" \
    "($(awk -v a="$auto_t" -v b="$best_t" 'BEGIN { printf "%.3f", a / b }')x)"
else
  echo "goal missed: Auto $auto_t s > the best named schedule, $best_named, $best_t s" \
    "($(awk -v a="$auto_t" -v b="$best_t" 'BEGIN { printf "%.3f", a / b }')x)"
fi
[ "$SMALL" = 1 ] && echo "(--small: a check that everything runs; these times measure nothing)"
exit 0

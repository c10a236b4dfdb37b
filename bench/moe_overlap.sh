#!/usr/bin/env bash
# Issue 40, section 4: an OVERLAP_F_B that overlaps, measured on the CPU. A MoE model whose
# all-to-alls carry many bytes (hidden 512, small experts, top 2 of 4) trains with --overlap on and
# --overlap off, alternating, ROUNDS rounds, in one of two configurations (CONFIG):
#   pp2: pp 2 x dp 2 x ep 2 (4 processes) under DualPipeV, layout Et|tt|tt|tL;
#   pp1: pp 1 x dp 2 x ep 2 (2 processes) under Combined1F1B (one forward, then pairs
#        (F f; B f-1) as OVERLAP_F_B), layout EttttttL: one rank per core on a 2-core machine, so
#        the overlap's second thread of computation has the core while its rank waits on the link.
# Per run: the all-to-alls per step and rank, their time, the exposed part of it (the time a rank
# waited in an all-to-all while its other thread of computation did not compute: docs/pprun.md,
# "All-to-all time"), the fraction hidden, the exposed wall time (each instant once) and the whole
# step (the slowest rank's, median over
# the steps after the first), all from pprun's summary; then the medians over the rounds.
#
# Gloo's loopback all-to-all is fast next to the compute, so by default the runs go inside a
# network namespace of their own whose loopback is shaped by the kernel to RATE (tc's token
# bucket filter: this kernel has no netem, so there is a rate and no added delay); every message
# crosses it, the pipeline's sends and the data-parallel all-reduce too, as on a cluster link.
# NETNS=0 runs on the host's loopback. Needs root for the namespace (ip, tc: iproute2).
#
#   bench/moe_overlap.sh [BUILD_DIR]
#   env: CONFIG=pp2 ROUNDS=3 STEPS=6 RATE=400mbit MICROBATCHES=8 (16 under CONFIG=pp1) NETNS=1
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
PPRUN=$BUILD/tools/pprun/pprun
PPC=$BUILD/tools/ppcompile/ppcompile
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-6}
RATE=${RATE:-400mbit}
CONFIG=${CONFIG:-pp2}
case "$CONFIG" in
  pp2) PP=2 SCHEDULE=DualPipeV LAYOUT="Et|tt|tt|tL" MBS=${MICROBATCHES:-8} ;;
  pp1) PP=1 SCHEDULE=Combined1F1B LAYOUT="EttttttL" MBS=${MICROBATCHES:-16} ;;
  *) echo "bench/moe_overlap.sh: CONFIG=$CONFIG: expected pp2 or pp1" >&2; exit 2 ;;
esac
NETNS=${NETNS:-1}
NS=ppbench$$
TMP=$(mktemp -d)
cleanup() {
  [ "$NETNS" = 1 ] && ip netns del "$NS" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
RUN=()
if [ "$NETNS" = 1 ]; then
  ip netns add "$NS"
  ip netns exec "$NS" ip link set lo up
  # burst above lo's MTU (65536), or every full-sized packet is dropped
  ip netns exec "$NS" tc qdisc add dev lo root tbf rate "$RATE" burst 1mb latency 500ms
  RUN=(ip netns exec "$NS")
fi
cat > "$TMP/model.json" <<'JSON'
{"hidden": 512, "heads": 8, "kv_heads": 4, "ffn": 256, "vocab": 256, "seq_len": 128,
 "experts": 4, "top_k": 2, "expert_ffn": 32, "shared_experts": 0, "first_dense": 1,
 "aux_loss_coef": 0.0}
JSON
"$PPC" --layout "$LAYOUT" --pp "$PP" --schedule "$SCHEDULE" --microbatches "$MBS" --emit json \
  -o "$TMP/plan.json"
echo "MoE pp $PP x dp 2 x ep 2, $SCHEDULE, layout $LAYOUT, $MBS microbatches of 1 x 128 tokens;"
echo "hidden 512, 4 experts (top 2, expert ffn 32); link: $([ "$NETNS" = 1 ] &&
  echo "loopback shaped to $RATE (tbf) in netns $NS" || echo "host loopback"); $(uptime)"
printf '%-6s %-8s %8s %10s %12s %8s %10s %10s\n' round overlap a2a/step "a2a ms" "exposed ms" \
  hidden "wall ms" "step ms"
for r in $(seq "$ROUNDS"); do
  for mode in on off; do
    nice "${RUN[@]}" "$PPRUN" --config "$TMP/model.json" --plan "$TMP/plan.json" --dp 2 --ep 2 \
      --global-batch $((2 * MBS)) --steps "$STEPS" --threads 1 --progress none \
      --overlap "$mode" > "$TMP/out" 2>&1 || { cat "$TMP/out"; exit 1; }
    line=$(grep 'all-to-alls (expert parallelism' "$TMP/out")
    n=$(sed -n 's/.*per rank): \([0-9.]*\) per step.*/\1/p' <<< "$line")
    total=$(sed -n 's/.* per step, \([0-9.]*\) ms (.*/\1/p' <<< "$line")
    exposed=$(sed -n 's/.* sent), \([0-9.]*\) ms exposed.*/\1/p' <<< "$line")
    hidden=$(sed -n 's/.*exposed (\([0-9.-]*\) % hidden.*/\1/p' <<< "$line")
    wall=$(sed -n 's/.* \([0-9.]*\) ms of the step with no thread computing.*/\1/p' <<< "$line")
    step=$(sed -n 's/.*whole step \([0-9.]*\) ms.*/\1/p' "$TMP/out")
    printf '%-6s %-8s %8s %10s %12s %7s%% %10s %10s\n' "$r" "$mode" "$n" "$total" "$exposed" \
      "$hidden" "$wall" "$step"
    echo "$mode $total $exposed $step $wall" >> "$TMP/rows"
  done
done
echo "medians over $ROUNDS rounds:"
for mode in on off; do
  awk -v m="$mode" '$1 == m {print $2, $3, $4, $5}' "$TMP/rows" > "$TMP/$mode"
done
med() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
for mode in on off; do
  printf '  overlap %-3s: all-to-all %s ms, exposed %s ms (wall %s ms), step %s ms\n' "$mode" \
    "$(cut -d' ' -f1 "$TMP/$mode" | med)" "$(cut -d' ' -f2 "$TMP/$mode" | med)" \
    "$(cut -d' ' -f4 "$TMP/$mode" | med)" "$(cut -d' ' -f3 "$TMP/$mode" | med)"
done
on_step=$(cut -d' ' -f3 "$TMP/on" | med)
off_step=$(cut -d' ' -f3 "$TMP/off" | med)
on_exp=$(cut -d' ' -f2 "$TMP/on" | med)
off_exp=$(cut -d' ' -f2 "$TMP/off" | med)
off_tot=$(cut -d' ' -f1 "$TMP/off" | med)
on_wall=$(cut -d' ' -f4 "$TMP/on" | med)
awk -v a="$on_step" -v b="$off_step" -v e="$on_exp" -v x="$off_exp" -v t="$off_tot" \
  -v w="$on_wall" 'BEGIN {
  printf "  step with overlap %.1f %% shorter; all-to-all exposed %.1f %% of off'"'"'s (%.1f %% of off'"'"'s all-to-all time hidden)\n",
    100 * (1 - a / b), 100 * e / x, 100 * (x - e) / t
  printf "  by wall time (each instant once): exposed %.1f %% of off'"'"'s (%.1f %% hidden); step saved: %.1f %% of off'"'"'s all-to-all time\n",
    100 * w / t, 100 * (t - w) / t, 100 * (b - a) / t }'
echo "load after: $(uptime)"

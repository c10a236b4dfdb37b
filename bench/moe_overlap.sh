#!/usr/bin/env bash
# Issue 40, section 4: an OVERLAP_F_B that overlaps, measured on the CPU. A MoE model whose
# all-to-alls carry many bytes (hidden 512, small experts, top 2 of 4) trains with --overlap on and
# --overlap off, alternating, ROUNDS rounds, in one of two configurations (CONFIG):
#   pp1: pp 1 x dp 2 x ep 2 (2 ranks) under Combined1F1B (one forward, then pairs (F f; B f-1) as
#        OVERLAP_F_B), layout EttttttL: one rank per core on a 2-core machine (the default);
#   pp2: pp 2 x dp 2 x ep 2 (4 ranks) under DualPipeV, layout Et|tt|tt|tL.
# Per run: the all-to-alls per step and rank, their time, the exposed part of it (the time a rank
# waited in an all-to-all while its other thread of computation did not compute: docs/pprun.md,
# "All-to-all time"), the fraction hidden, the exposed wall time (each instant once) and the whole
# step (the slowest rank's, median over the steps after the first), all from pprun's summary; then
# the medians over the rounds.
#
# Gloo's loopback all-to-all is fast next to the compute, so the ranks talk over a link the kernel
# shapes to RATE with tc's token bucket filter (this kernel has no netem: a rate, no added delay);
# every message crosses it, the pipeline's sends and the data-parallel all-reduce too. LINK:
#   nic (the default): each rank on a host of its own (scripts/test-hosts.sh: a network namespace
#        whose eth0 joins a bridge), each host's link shaped to RATE in each direction (its eth0's
#        egress: what it sends; its bridge port's egress: what it receives), as a full-duplex NIC
#        per machine; the ranks are started by hand (RANK, WORLD_SIZE, MASTER_ADDR), rank k pinned
#        to core k mod the cores (PIN=1, taskset; PIN=0 lets them move);
#   lo:  the earlier bench: pprun starts the ranks in one namespace whose loopback is shaped to RATE
#        (burst 1 MB): one token bucket for every rank's sends in both directions;
#   host: the host's loopback, unshaped (NETNS=0 means this too).
# Needs root for LINK=nic and lo (ip, tc: iproute2; taskset: util-linux).
#
# SHARES (default 10240): under LINK=nic each rank in a cgroup of its own (the cgroup v1 cpu
# controller, /sys/fs/cgroup/cpu) with cpu.shares SHARES, so that the rank is one scheduling
# entity against the machine's other processes: the same share of its core whether one or two of
# its threads are runnable (without it --overlap on's second thread wins its rank a larger share
# of a loaded core than --overlap off's one thread: a gain from the load, not from the overlap),
# and with the default, near-dedicated cores on a shared machine (a nice 10 process weighs 110):
# it takes the cores from other work while it runs. Under LINK=lo and host (pprun starts the
# ranks) the whole job in one such cgroup. SHARES=0: no cgroups, the ranks under nice.
#
#   bench/moe_overlap.sh [BUILD_DIR]
#   env: CONFIG=pp1 LINK=nic ROUNDS=3 STEPS=6 RATE=1gbit (lo: 400mbit) BURST=32kb (nic)
#        MICROBATCHES=16 (8 under CONFIG=pp2) PIN=1 SHARES=10240 TRACE=DIR (each run's --trace
#        into DIR; bench/a2a_trace.py reads one)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
PPRUN=$BUILD/tools/pprun/pprun
PPC=$BUILD/tools/ppcompile/ppcompile
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-6}
CONFIG=${CONFIG:-pp1}
LINK=${LINK:-nic}
[ "${NETNS:-1}" = 0 ] && LINK=host
case "$CONFIG" in
  pp2) PP=2 SCHEDULE=DualPipeV LAYOUT="Et|tt|tt|tL" MBS=${MICROBATCHES:-8} ;;
  pp1) PP=1 SCHEDULE=Combined1F1B LAYOUT="EttttttL" MBS=${MICROBATCHES:-16} ;;
  *) echo "bench/moe_overlap.sh: CONFIG=$CONFIG: expected pp1 or pp2" >&2; exit 2 ;;
esac
case "$LINK" in
  nic) RATE=${RATE:-1gbit} ;;
  lo) RATE=${RATE:-400mbit} ;;
  host) RATE=none ;;
  *) echo "bench/moe_overlap.sh: LINK=$LINK: expected nic, lo or host" >&2; exit 2 ;;
esac
BURST=${BURST:-32kb}
PIN=${PIN:-1}
SHARES=${SHARES:-10240}
CGROUP=/sys/fs/cgroup/cpu
if [ "$SHARES" != 0 ] && [ ! -f "$CGROUP/cpu.shares" ]; then
  echo "bench/moe_overlap.sh: no cgroup v1 cpu controller at $CGROUP: the ranks only under nice" >&2
  SHARES=0
fi
RANKS=$((PP * 2))
CORES=$(nproc)
NS=ppbench$$
TMP=$(mktemp -d)
cleanup() {
  case "$LINK" in
    nic) scripts/test-hosts.sh down "$NS" 2>/dev/null || true ;;  # (kills the ranks left)
    lo) ip netns del "$NS" 2>/dev/null || true ;;
  esac
  for g in "$CGROUP/$NS"-*; do  # empty once its processes are gone
    [ -d "$g" ] || continue
    for _ in 1 2 3 4 5; do rmdir "$g" 2>/dev/null && break; sleep 0.2; done
  done
  rm -rf "$TMP"
}
trap cleanup EXIT
RUN=()
case "$LINK" in
  nic)
    scripts/test-hosts.sh up "$NS" "$RANKS"
    # Segmentation offloads of at most 24 KiB, under the bucket's BURST: tbf would otherwise cut
    # each 64 KiB offload into 1500-byte packets itself, at about 10 ms of a core per MB sent
    # (measured: 0.7 s of softirq time for 63 MB at burst 32kb), taken from the ranks' compute.
    for k in $(seq "$RANKS"); do
      ip -n "$NS-$k" link set eth0 gso_max_size 24576
      ip -n "$NS-net" link set "p$k" gso_max_size 24576
      tc -n "$NS-$k" qdisc add dev eth0 root tbf rate "$RATE" burst "$BURST" latency 200ms
      tc -n "$NS-net" qdisc add dev "p$k" root tbf rate "$RATE" burst "$BURST" latency 200ms
    done
    link="a link per rank at $RATE each way (tbf burst $BURST, hosts $NS-1..$RANKS)"
    [ "$PIN" = 1 ] && link="$link, rank k on core k mod $CORES"
    [ "$SHARES" = 0 ] || link="$link, each rank a cgroup of cpu.shares $SHARES"
    for k in $(seq 0 $((RANKS - 1))); do
      [ "$SHARES" = 0 ] && break
      mkdir -p "$CGROUP/$NS-rank$k"
      echo "$SHARES" > "$CGROUP/$NS-rank$k/cpu.shares"
    done
    ;;
  lo)
    ip netns add "$NS"
    ip netns exec "$NS" ip link set lo up
    # burst above lo's MTU (65536), or every full-sized packet is dropped
    ip netns exec "$NS" tc qdisc add dev lo root tbf rate "$RATE" burst 1mb latency 500ms
    RUN=(ip netns exec "$NS")
    link="one loopback shaped to $RATE (tbf) in netns $NS"
    ;;
  host) link="host loopback" ;;
esac
if [ "$LINK" != nic ] && [ "$SHARES" != 0 ]; then  # pprun starts the ranks: one cgroup for all
  mkdir -p "$CGROUP/$NS-all"
  echo "$SHARES" > "$CGROUP/$NS-all/cpu.shares"
  link="$link, the job a cgroup of cpu.shares $SHARES"
fi
cat > "$TMP/model.json" <<'JSON'
{"hidden": 512, "heads": 8, "kv_heads": 4, "ffn": 256, "vocab": 256, "seq_len": 128,
 "experts": 4, "top_k": 2, "expert_ffn": 32, "shared_experts": 0, "first_dense": 1,
 "aux_loss_coef": 0.0}
JSON
"$PPC" --layout "$LAYOUT" --pp "$PP" --schedule "$SCHEDULE" --microbatches "$MBS" --emit json \
  -o "$TMP/plan.json"
[ -z "${TRACE:-}" ] || mkdir -p "$TRACE"
echo "MoE pp $PP x dp 2 x ep 2, $SCHEDULE, layout $LAYOUT, $MBS microbatches of 1 x 128 tokens;"
echo "hidden 512, 4 experts (top 2, expert ffn 32); link: $link; $(uptime)"

# One run: `$1` on or off, rank 0's output into $TMP/out.
run() {
  local args=(--config "$TMP/model.json" --plan "$TMP/plan.json" --dp 2 --ep 2
    --global-batch $((2 * MBS)) --steps "$STEPS" --threads 1 --progress none --overlap "$1")
  [ -z "${TRACE:-}" ] || args+=(--trace "$TRACE/overlap-$1-$2.json")
  if [ "$LINK" != nic ]; then
    (
      [ "$SHARES" = 0 ] || echo "$BASHPID" > "$CGROUP/$NS-all/cgroup.procs"
      exec nice "${RUN[@]}" "$PPRUN" "${args[@]}" > "$TMP/out" 2>&1
    ) || { cat "$TMP/out"; exit 1; }
    return
  fi
  local pids=() k pin=()
  for k in $(seq 0 $((RANKS - 1))); do
    [ "$PIN" = 1 ] && pin=(taskset -c $((k % CORES)))
    (
      [ "$SHARES" = 0 ] || echo "$BASHPID" > "$CGROUP/$NS-rank$k/cgroup.procs"
      RANK=$k WORLD_SIZE=$RANKS LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=10.200.0.1 \
        MASTER_PORT=29500 GLOO_SOCKET_IFNAME=eth0 exec nice scripts/test-hosts.sh exec "$NS" \
        $((k + 1)) "${pin[@]}" "$PPRUN" "${args[@]}" > "$TMP/out.$k" 2>&1
    ) &
    pids+=($!)
  done
  local failed=0
  for k in "${!pids[@]}"; do wait "${pids[$k]}" || failed=1; done
  [ "$failed" = 0 ] || { tail -n 20 "$TMP"/out.*; exit 1; }
  cp "$TMP/out.0" "$TMP/out"
}

printf '%-6s %-8s %8s %10s %12s %8s %10s %10s\n' round overlap a2a/step "a2a ms" "exposed ms" \
  hidden "wall ms" "step ms"
for r in $(seq "$ROUNDS"); do
  for mode in on off; do
    run "$mode" "$r"
    line=$(grep 'all-to-alls (expert parallelism' "$TMP/out")
    n=$(sed -n 's/.*per rank): \([0-9.]*\) per step.*/\1/p' <<< "$line")
    total=$(sed -n 's/.* per step, \([0-9.]*\) ms (.*/\1/p' <<< "$line")
    exposed=$(sed -n 's/.* sent), \([0-9.]*\) ms exposed.*/\1/p' <<< "$line")
    hidden=$(sed -n 's/.*exposed (\([0-9.-]*\) % hidden.*/\1/p' <<< "$line")
    wall=$(sed -n 's/.* \([0-9.]*\) ms of the step with no thread computing.*/\1/p' <<< "$line")
    step=$(sed -n 's/.*whole step \([0-9.]*\) ms.*/\1/p' "$TMP/out")
    printf '%-6s %-8s %8s %10s %12s %7s%% %10s %10s   (%s)\n' "$r" "$mode" "$n" "$total" \
      "$exposed" "$hidden" "$wall" "$step" "$(uptime | sed 's/.*load average: //')"
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
  printf "  all-to-all without overlap: %.1f %% of off'"'"'s step\n", 100 * t / b
  printf "  step with overlap %.1f %% shorter; all-to-all exposed %.1f %% of off'"'"'s (%.1f %% of off'"'"'s all-to-all time hidden)\n",
    100 * (1 - a / b), 100 * e / x, 100 * (x - e) / t
  printf "  by wall time (each instant once): exposed %.1f %% of off'"'"'s (%.1f %% hidden); step saved: %.1f %% of off'"'"'s all-to-all time\n",
    100 * w / t, 100 * (t - w) / t, 100 * (b - a) / t }'
echo "load after: $(uptime)"

#!/usr/bin/env bash
# Issue 42, section 4, measured on the CPU: under a memory limit that 1F1B keeping everything
# exceeds, Auto's plan with the memory modes it chooses against 1F1B with full recomputation, both
# run by pprun side by side (alternating round by round, with 1F1B keeping everything as the
# reference), each against what ppcompile predicts for it from a profile of the model.
#
#   bench/memory_measured.sh [BUILD_DIR] [ROUNDS]      (default: build, 3)
#   env: PROFILE_LAYOUT PROFILE_SCHEDULE PROFILE_RECOMPUTE: the plan profiled (1. below)
#
# 1. The profile: pprun --profile of the plans' own layout and ranks (Etttt|ttttL, pp 2: two
#    processes on the machine, as when they run) under ZB-H1, stage 0 recomputing fully (the
#    profile's `layers` then hold what full recomputation keeps and costs for E and t, stage 1 what
#    keeping everything costs, and the profile converts stage 0 back to keeping everything).
#    ZB-H1 runs I and W, so the profile has `i`, `w` and `weight_grad_memory` (what an I keeps for
#    its W), which Auto's orders with I and W need; measured on the layout compared, it is that
#    layout's (a four-stage DualPipeV profile gives 0.774 where these stages keep 0.920, and its
#    per-stage times carry four stages' overheads: PROFILE_LAYOUT='Ett|tt|tt|ttL'
#    PROFILE_SCHEDULE=DualPipeV PROFILE_RECOMPUTE=stage1:selective,stage2:full, the default until
#    2026-12-07 09:40, predicts Auto's rank 0 at 0.83 of its held peak and 1F1B's steps 11 % long).
#    No stage recomputes selectively, so the selective mode's fields are the compiler's defaults;
#    Auto's choice is printed (it chose full recomputation in every run so far).
# 2. The plans, pp 2, 2 stages (Etttt|ttttL), 8 microbatches: 1F1B keeping everything; its
#    measured peak activation bytes (the worst rank's) set the limit: that rank's parameters
#    (the profile's, as ppcompile counts them) plus 0.6x its activation peak; Auto under that
#    limit (ppcompile --schedule Auto --memory-limit LIMIT --cost PROFILE: it records the modes it
#    chose in the plan, which pprun follows); 1F1B with --recompute full.
# 3. ROUNDS rounds, each profiling again (step 1's command) and then running each plan with
#    pprun: the whole step (the slowest rank, median over the steps after the first, the optimizer
#    included: what the simulation's makespan covers) and each rank's peak activation bytes; and
#    ppcompile --from-json PLAN --cost (that round's profile): the makespan and each rank's peak
#    held activation (`peak held`: between F and B/I and between I and W, as pprun measures; the
#    stats' `peak activation` also counts what a recomputing B or I rebuilds). A round's
#    prediction thus comes from times taken minutes before its runs, under the same load; the
#    table gives the medians over the rounds (of the steps, the predictions and their ratios).
#    Each round prints the load average (uptime).
# 4. ZB-H2 against 1F1B keeping everything, recomputing fully and offloading (below).
set -euo pipefail
BUILD=${1:-build}
ROUNDS=${2:-3}
PPC=$BUILD/tools/ppcompile/ppcompile
PPRUN=$BUILD/tools/pprun/pprun
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
MODEL=(--hidden 256 --heads 8 --kv-heads 4 --ffn 704 --seq-len 128 --global-batch 16 --threads 1
       --progress none)
SHAPE=(--layout 'Etttt|ttttL' --pp 2 --microbatches 8)

# The plan profiled (env: PROFILE_LAYOUT, PROFILE_SCHEDULE, PROFILE_RECOMPUTE).
PROFILE_LAYOUT=${PROFILE_LAYOUT:-Etttt|ttttL}
PROFILE_SCHEDULE=${PROFILE_SCHEDULE:-ZB-H1}
PROFILE_RECOMPUTE=${PROFILE_RECOMPUTE:-stage0:full}
"$PPC" --layout "$PROFILE_LAYOUT" --pp 2 --microbatches 8 --schedule "$PROFILE_SCHEDULE" \
  --emit json -o "$TMP/profiled.json"
echo "== profiled: $PROFILE_SCHEDULE on $PROFILE_LAYOUT, --recompute $PROFILE_RECOMPUTE"
profile() { # file: the profile of step 1
  "$PPRUN" --plan "$TMP/profiled.json" "${MODEL[@]}" --steps 6 --profile "$1" \
    --recompute "$PROFILE_RECOMPUTE" > /dev/null
  python3 -c 'import json,sys; p = json.load(open(sys.argv[1])); print("   profile: layers", p["layers"], "weight_grad_memory", p.get("weight_grad_memory"))' \
    "$1"
}
echo "== profile ($(uptime | sed 's/.*load/load/')):"
profile "$TMP/profile.json"

"$PPC" "${SHAPE[@]}" --schedule 1F1B --emit json -o "$TMP/none.json"
"$PPC" "${SHAPE[@]}" --schedule 1F1B --recompute full --emit json -o "$TMP/full.json"

run() { # plan -> "whole_step_ms peak_bytes_rank0 peak_bytes_rank1"
  local out
  out=$("$PPRUN" --plan "$1" "${MODEL[@]}" --steps 6 2>&1)
  echo "$(grep -oP 'whole step \K[0-9.]+' <<<"$out") $(grep -oP 'peak activation bytes per rank: \K[0-9 ]+' <<<"$out")"
}
predict() { # plan profile -> "makespan held_rank0 held_rank1 peak_rank0 peak_rank1"
  local s peaks held
  s=$("$PPC" --from-json "$1" --cost "$2" --emit stats)
  peaks=$(awk '/^rank  busy/ {on = 1; next} on && $1 ~ /^[0-9]+$/ {printf "%s ", $5; next} {on = 0}' <<<"$s")
  held=$(sed -n 's/^peak held *\([0-9.e+ ]*\) per rank.*/\1/p' <<<"$s")
  echo "$(sed -n 's/^makespan *//p' <<<"$s" | awk '{print $1}') ${held:-$peaks} $peaks"
}

read -r _ b0 b1 <<<"$(run "$TMP/none.json")"
worst=$(( b0 > b1 ? 0 : 1 ))
peak=$(( b0 > b1 ? b0 : b1 ))
# The worst rank's parameters as ppcompile counts them (a limit of 1 byte prints them).
params=$("$PPC" --from-json "$TMP/none.json" --cost "$TMP/profile.json" --memory-limit 1 \
  --emit stats 2>/dev/null | sed -n 's/.*parameters \([0-9.]*\) \(.*\))$/\1 \2/p' |
  awk '{m = $2 == "GiB" ? 1073741824 : $2 == "MiB" ? 1048576 : $2 == "KiB" ? 1024 : 1; printf "%.0f", $1 * m}')
LIMIT=$(awk -v p="$params" -v a="$peak" 'BEGIN {printf "%.0f", p + 0.6 * a}')
echo "== 1F1B keeping everything: measured peak activation bytes $b0 / $b1 (rank $worst);"
echo "   limit = parameters $params + 0.6 x $peak = $LIMIT bytes"
"$PPC" "${SHAPE[@]}" --schedule Auto --cost "$TMP/profile.json" --memory-limit "$LIMIT" \
  --emit json -o "$TMP/auto.json"
"$PPC" --from-json "$TMP/auto.json" --cost "$TMP/profile.json" --memory-limit "$LIMIT" \
  --emit stats | grep -E '^(memory|  stage)' | sed 's/^/   Auto: /'
"$PPC" --from-json "$TMP/full.json" --cost "$TMP/profile.json" --memory-limit "$LIMIT" \
  --emit stats | grep -E '^memory limit' | sed 's/^/   1F1B full: /'

declare -A steps preds ratios held0 held1 bytes0 bytes1 trans0 trans1
for round in $(seq "$ROUNDS"); do
  prof="$TMP/profile.json"
  if [ "$round" -gt 1 ]; then
    prof="$TMP/profile_$round.json"
    echo "round $round  profile ($(uptime | sed 's/.*load/load/'))"
    profile "$prof"
  fi
  for p in auto full none; do
    read -r ms r0 r1 <<<"$(run "$TMP/$p.json")"
    read -r pm p0 p1 q0 q1 <<<"$(predict "$TMP/$p.json" "$prof")"
    ratio=$(awk -v a="$pm" -v b="$ms" 'BEGIN {printf "%.3f", a / b}')
    echo "round $round  $p: whole step $ms ms (predicted $pm, $ratio), peak activation bytes" \
      "$r0 / $r1 (predicted held $p0 / $p1; $(uptime | sed 's/.*load/load/'))"
    steps[$p]+="$ms "
    preds[$p]+="$pm "
    ratios[$p]+="$ratio "
    held0[$p]+="$p0 "
    held1[$p]+="$p1 "
    bytes0[$p]=$r0
    bytes1[$p]=$r1
    trans0[$p]=$q0
    trans1[$p]=$q1
  done
done
median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
printf '\n%-26s %10s %10s %7s  %-23s %-23s %-13s %s\n' "plan (medians of $ROUNDS)" "step (ms)" \
  "predicted" ratio "peak bytes r0 / r1" "predicted held r0 / r1" "held ratios" \
  "with transients r0 / r1"
for p in auto full none; do
  ms=$(median <<<"${steps[$p]}")
  pm=$(median <<<"${preds[$p]}")
  p0=$(median <<<"${held0[$p]}")
  p1=$(median <<<"${held1[$p]}")
  name=$([ "$p" = auto ] && echo "Auto, its modes" || ([ "$p" = full ] && echo "1F1B, --recompute full" || echo "1F1B, keeping everything"))
  printf '%-26s %10s %10s %7s  %-23s %-23s %-13s %s\n' "$name" "$ms" "$pm" \
    "$(median <<<"${ratios[$p]}")" "${bytes0[$p]} / ${bytes1[$p]}" \
    "$(printf '%.0f / %.0f' "$p0" "$p1")" \
    "$(awk -v a="$p0" -v b="${bytes0[$p]}" -v c="$p1" -v d="${bytes1[$p]}" 'BEGIN {printf "%.3f / %.3f", a / b, c / d}')" \
    "$(printf '%.0f / %.0f' "${trans0[$p]}" "${trans1[$p]}")"
done
echo "(steps per round: ${steps[auto]}/ ${steps[full]}/ ${steps[none]}; ratios: ${ratios[auto]}/ ${ratios[full]}/ ${ratios[none]})"

# 4. ZB-H2 (issue 42, section 5): its peak comes from what each I keeps for its W, which neither
#    recomputation (the I reruns the forward and keeps the W's inputs as without it) nor
#    offloading (only what a forward saves goes to the host) removes. Peak activation bytes per
#    rank, keeping everything, recomputing fully, offloading every stage (the CPU's test copy).
"$PPC" "${SHAPE[@]}" --schedule ZB-H2 --emit json -o "$TMP/zbh2.json"
"$PPC" "${SHAPE[@]}" --schedule 1F1B --emit json -o "$TMP/1f1b.json"
echo
for plan in 1f1b zbh2; do
  for mode in "" "--recompute full" "--offload all --offload-test-host-copy"; do
    # shellcheck disable=SC2086
    out=$("$PPRUN" --plan "$TMP/$plan.json" "${MODEL[@]}" --steps 2 $mode 2>&1)
    printf '%-5s %-40s peak activation bytes per rank: %s\n' "$plan" "${mode:-keeping everything}" \
      "$(grep -oP 'peak activation bytes per rank: \K[0-9 ]+' <<<"$out")"
  done
done

#!/usr/bin/env bash
# pprun's checkpoints as a user runs them: a model of about 100 M parameters (14 decoder layers,
# hidden 768, ffn 2048) on 4 ranks (pp 4, 1F1B), saving synchronously, saving in the background
# (--save-async) and resuming, against dd writing and reading the same number of bytes on the same
# disk, in alternation (the machine may be shared: compare within a round). Prints per round and
# the medians:
#   sync-s    seconds training stopped per synchronous save (pprun's summary: the slowest rank,
#             median over the saves)
#   async-s   the same with --save-async: the copy to host memory (and any wait for the previous
#             save); the goal is at most 10 % of sync-s (async/sync)
#   wait-s    of async-s, the wait for the previous save's write (0 unless the steps between
#             the saves took less time than a write: then raise STEPS)
#   write-s   seconds a background save took to write and commit (slowest rank, median)
#   step-w    mean step time (ms, slowest rank) of the steps that ran while a save was written in
#   step-o    the background, and of the other steps of the same run
#   save      MB/s of the synchronous save (all ranks' shards, over the pause), against
#   dd-write  dd of as many bytes from non-zero data in /dev/shm, conv=fsync
#   load      MB/s of --resume reading its parameters and AdamW moments (pages dropped first),
#   dd-read   dd reading a file of as many bytes (pages dropped first)
# Usage: bench/checkpoint_io.sh [DIR [ROUNDS]]   DIR: a directory on the disk to measure
#        (default build/ckpt-bench); ROUNDS: default 3. STEPS: the background run's steps
#        (default 24: saves after steps 12 and 24, steps 13-24 beside the first save's write).
#        Needs about 5 GB of disk and 1.3 GB of /dev/shm.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build}
PPC=$BUILD/tools/ppcompile/ppcompile
PPRUN=$BUILD/tools/pprun/pprun
DIR=${1:-$BUILD/ckpt-bench}
ROUNDS=${2:-3}
STEPS=${STEPS:-24}
mkdir -p "$DIR"
SRC=/dev/shm/ckpt_bench_src.$$
trap 'rm -rf "$SRC" "$DIR/ck" "$DIR/cka" "$DIR/dd.bin"' EXIT

"$PPC" --layout 'Etttt|tttt|ttt|tttL' --pp 4 --schedule 1F1B --microbatches 4 --emit json \
  -o "$DIR/plan.json"
MODEL=(--hidden 768 --heads 12 --kv-heads 12 --ffn 2048 --vocab 256 --seq-len 16
  --global-batch 4 --progress none)

drop_pages() { for f in "$@"; do dd if="$f" iflag=nocache count=0 status=none; done; }
dd_mbs() { tail -1 | awk '{ printf "%.0f", $1 / $(NF-3) / 1e6 }'; }
# The number after $1 in the text on stdin ("paused 1.234 s" -> 1.234).
after() { grep -o "$1 [0-9.]*" | head -1 | awk '{print $NF}'; }
# pprun ARGS: its output; on a failure, the output and the exit.
pprun() {
  local out
  if ! out=$("$PPRUN" "$@" 2>&1); then
    printf '%s\ncheckpoint_io: pprun failed\n' "$out" >&2
    exit 1
  fi
  printf '%s\n' "$out"
}

printf '%-6s %8s %8s %8s %6s %6s %8s %8s %8s %7s %8s %7s %8s\n' round MB sync-s async-s wait-s \
  async/ write-s step-w step-o save dd-write load dd-read
rows=()
for r in $(seq "$ROUNDS"); do
  # Synchronous: two saves.
  rm -rf "$DIR/ck"
  out=$(pprun --plan "$DIR/plan.json" "${MODEL[@]}" --steps 2 --save "$DIR/ck" --save-every 1)
  # "checkpoints: 2 saved, 1192.7 MB each; training paused 1.234 s per save (...): 966 MB/s"
  line=$(grep -o 'checkpoints: .*' <<<"$out")
  mb=$(awk '{print $4}' <<<"$line")
  sync=$(after paused <<<"$line")
  save=$(sed -E 's/.*: ([0-9]+) MB\/s/\1/' <<<"$line")
  # In the background: two saves, the first written while training goes on.
  rm -rf "$DIR/cka"
  out=$(pprun --plan "$DIR/plan.json" "${MODEL[@]}" --steps "$STEPS" --save "$DIR/cka" \
    --save-every $((STEPS / 2)) --save-async)
  # "checkpoints: 2 saved in the background, ...; training paused 0.041 s per save (median,
  #  slowest rank[; 0.030 s of it waiting for the previous save's write: ...]), each written in
  #  2.345 s: 508 MB/s" and "steps during a background write: 812.31 ms (mean of 6), the others
  #  790.12 ms (mean of 5; slowest rank)"
  line=$(grep -o 'checkpoints: .*' <<<"$out")
  async=$(after paused <<<"$line")
  wait=$(grep -o '[0-9.]* s of it waiting' <<<"$line" | awk '{print $1}' || true)
  wait=${wait:-0}
  write=$(after 'written in' <<<"$line")
  line=$(grep -o 'steps during a background write: .*' <<<"$out" || echo "")
  stepw=$(after 'write:' <<<"$line")
  stepo=$(after 'others' <<<"$line")
  ratio=$(awk -v a="$async" -v s="$sync" 'BEGIN { printf "%.3f", a / s }')
  # dd against the synchronous checkpoint's size; then the resume.
  bytes=$(du -sb "$DIR/ck/step-00000002" | awk '{print $1}')
  count=$(((bytes + (16 << 20) - 1) / (16 << 20)))
  if [ ! -f "$SRC" ]; then
    python3 -c '
import sys
block = bytes(range(1, 256)) * 4112
with open(sys.argv[1], "wb") as f:
    for _ in range(int(sys.argv[2]) * 16):
        f.write(block[: 1 << 20])' "$SRC" "$count"
  fi
  ddw=$(dd if="$SRC" of="$DIR/dd.bin" bs=16M count="$count" conv=fsync 2>&1 | dd_mbs)
  drop_pages "$DIR"/ck/step-00000002/*.safetensors
  out=$(pprun --plan "$DIR/plan.json" "${MODEL[@]}" --steps 3 --resume "$DIR/ck")
  load=$(grep -o 'resumed: .*' <<<"$out" | sed -E 's/.*: ([0-9]+) MB\/s/\1/')
  drop_pages "$DIR/dd.bin"
  ddr=$(dd if="$DIR/dd.bin" of=/dev/null bs=16M 2>&1 | dd_mbs)
  printf '%-6s %8s %8s %8s %6s %6s %8s %8s %8s %7s %8s %7s %8s\n' "$r" "$mb" "$sync" "$async" \
    "$wait" "$ratio" "$write" "${stepw:-?}" "${stepo:-?}" "$save" "$ddw" "$load" "$ddr"
  rows+=("$mb $sync $async $wait $ratio $write ${stepw:-0} ${stepo:-0} $save $ddw $load $ddr")
done
printf '%s\n' "${rows[@]}" | python3 -c '
import statistics, sys
cols = list(zip(*[map(float, l.split()) for l in sys.stdin if l.strip()]))
m = [statistics.median(c) for c in cols]
print("median %8.1f %8.3f %8.3f %6.3f %6.3f %8.3f %8.1f %8.1f %7.0f %8.0f %7.0f %8.0f" % tuple(m))
print("pause of a background save at %.1f %% of a synchronous one (goal: at most 10 %%); steps "
      "beside a background write at %.2f x the others" % (100 * m[4], m[6] / m[7] if m[7] else 0))
if max(cols[3]) > 0:
    print("a background save waited for the previous write (wait-s): the STEPS/2 steps between "
          "the saves took less time than a write; raise STEPS")
print("save at %.0f %% of dd-write, load at %.0f %% of dd-read" % (100 * m[8] / m[9],
      100 * m[10] / m[11]))'

#!/usr/bin/env bash
# pprun's checkpoints as a user runs them: a model of about 100 M parameters (14 decoder layers,
# hidden 768, ffn 2048) on 4 ranks (pp 4, 1F1B), saving twice and resuming once, against dd
# writing and reading the same number of bytes on the same disk, in alternation (the machine may
# be shared: compare within a round). Prints per round and the medians:
#   pause     seconds training stopped per save (pprun's summary: the slowest rank, median)
#   save      MB/s of that save (all ranks' shards, over the pause), against
#   dd-write  dd of as many bytes from non-zero data in /dev/shm, conv=fsync
#   load      MB/s of --resume reading its parameters and AdamW moments (pages dropped first),
#   dd-read   dd reading a file of as many bytes (pages dropped first)
# Usage: bench/checkpoint_io.sh [DIR [ROUNDS]]   DIR: a directory on the disk to measure
#        (default build/ckpt-bench); ROUNDS: default 3. Needs about 3 GB of disk and 1.3 GB of
#        /dev/shm.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build}
PPC=$BUILD/tools/ppcompile/ppcompile
PPRUN=$BUILD/tools/pprun/pprun
DIR=${1:-$BUILD/ckpt-bench}
ROUNDS=${2:-3}
mkdir -p "$DIR"
SRC=/dev/shm/ckpt_bench_src.$$
trap 'rm -rf "$SRC" "$DIR/ck" "$DIR/dd.bin"' EXIT

"$PPC" --layout 'Etttt|tttt|ttt|tttL' --pp 4 --schedule 1F1B --microbatches 4 --emit json \
  -o "$DIR/plan.json"
MODEL=(--hidden 768 --heads 12 --kv-heads 12 --ffn 2048 --vocab 256 --seq-len 16
  --global-batch 4 --progress none)

drop_pages() { for f in "$@"; do dd if="$f" iflag=nocache count=0 status=none; done; }
dd_mbs() { tail -1 | awk '{ printf "%.0f", $1 / $(NF-3) / 1e6 }'; }

printf '%-6s %10s %10s %10s %10s %10s %10s\n' round MB pause-s save dd-write load dd-read
rows=()
for r in $(seq "$ROUNDS"); do
  rm -rf "$DIR/ck"
  out=$("$PPRUN" --plan "$DIR/plan.json" "${MODEL[@]}" --steps 2 --save "$DIR/ck" --save-every 1)
  line=$(grep -o 'checkpoints: .*' <<<"$out")
  # "checkpoints: 2 saved, 1192.7 MB each; training paused 1.234 s per save (...): 966 MB/s"
  mb=$(awk '{print $4}' <<<"$line")
  pause=$(sed -E 's/.*paused ([0-9.]+) s.*/\1/' <<<"$line")
  save=$(sed -E 's/.*: ([0-9]+) MB\/s/\1/' <<<"$line")
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
  out=$("$PPRUN" --plan "$DIR/plan.json" "${MODEL[@]}" --steps 3 --resume "$DIR/ck")
  load=$(grep -o 'resumed: .*' <<<"$out" | sed -E 's/.*: ([0-9]+) MB\/s/\1/')
  drop_pages "$DIR/dd.bin"
  ddr=$(dd if="$DIR/dd.bin" of=/dev/null bs=16M 2>&1 | dd_mbs)
  printf '%-6s %10s %10s %10s %10s %10s %10s\n' "$r" "$mb" "$pause" "$save" "$ddw" "$load" "$ddr"
  rows+=("$mb $pause $save $ddw $load $ddr")
done
printf '%s\n' "${rows[@]}" | python3 -c '
import statistics, sys
cols = list(zip(*[map(float, l.split()) for l in sys.stdin if l.strip()]))
m = [statistics.median(c) for c in cols]
print("median %10.1f %10.3f %10.0f %10.0f %10.0f %10.0f" % tuple(m))
print("save at %.0f %% of dd-write, load at %.0f %% of dd-read" % (100 * m[2] / m[3], 100 * m[4] / m[5]))'

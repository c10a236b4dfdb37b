#!/usr/bin/env bash
# Safetensors write and read throughput (build/bench/io_bench: 100 M float32 parameters, 400 MB)
# against dd on the same disk (25 blocks of 16 MiB, 419 MB), in alternation: the machine is
# shared, so compare the two within a round. Prints one row per round and the medians, in MB/s
# (1e6 bytes per second).
#   write:      dd if=/dev/zero of=F bs=16M count=25 conv=fsync, and the same from a file of
#               non-zero bytes in /dev/shm (a virtual disk may store zeros faster than data)  vs
#               write_safetensors (+ fsync) of the parameters (non-zero)
#   read cold:  dd if=F of=/dev/null bs=16M after dropping F's cached pages (iflag=nocache
#               count=0)  vs  SafetensorsFile open + read of every tensor after posix_fadvise
#               DONTNEED
#   read warm:  the same, from the page cache
# dd and io_bench write over the same file: on a virtual disk, blocks never written before are
# slower to write than blocks written again (the first write to a fresh file can take twice as long).
# Usage: bench/safetensors_io.sh [DIR [ROUNDS]]   DIR: a directory on the disk to measure
#        (default build/io-bench); ROUNDS: default 5.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=${IO_BENCH:-$ROOT/build/bench/io_bench}
DIR=${1:-$ROOT/build/io-bench}
ROUNDS=${2:-5}
[ -x "$BENCH" ] || { echo "safetensors_io.sh: build io_bench first ($BENCH)" >&2; exit 2; }
mkdir -p "$DIR"
DD=$DIR/io_bench.safetensors  # dd and io_bench overwrite the same file
export IO_BENCH_KEEP=1
SRC=/dev/shm/io_bench_src.$$
trap 'rm -f "$DD" "$SRC"' EXIT
# 400 MiB of non-zero bytes in memory, the source of the second dd write.
python3 -c '
import sys
block = bytes(range(1, 256)) * 4112
with open(sys.argv[1], "wb") as f:
    for _ in range(400):
        f.write(block[: 1 << 20])' "$SRC"

# dd's summary line, "419430400 bytes (419 MB, 400 MiB) copied, 1.2 s, 349 MB/s", as MB/s.
dd_mbs() { tail -1 | awk '{ printf "%.0f", $1 / $(NF-3) / 1e6 }'; }
bench_mbs() {
  IO_BENCH_DIR=$DIR "$BENCH" --benchmark_filter="^$1/" --benchmark_format=json 2>/dev/null |
    python3 -c 'import json, sys; print(round(json.load(sys.stdin)["benchmarks"][0]["MB/s"]))'
}

printf '%-6s %12s %12s %12s %12s %12s %12s %12s\n' round dd-write-zero dd-write-data st-write \
  dd-read-cold st-read-cold dd-read-warm st-read-warm
rows=()
for r in $(seq "$ROUNDS"); do
  dz=$(dd if=/dev/zero of="$DD" bs=16M count=25 conv=fsync 2>&1 | dd_mbs)
  dw=$(dd if="$SRC" of="$DD" bs=16M count=25 conv=fsync 2>&1 | dd_mbs)
  sw=$(bench_mbs BM_Write)
  dd if="$DD" iflag=nocache count=0 status=none
  dc=$(dd if="$DD" of=/dev/null bs=16M 2>&1 | dd_mbs)
  sc=$(bench_mbs BM_ReadCold)
  dr=$(dd if="$DD" of=/dev/null bs=16M 2>&1 | dd_mbs)
  sr=$(bench_mbs BM_ReadWarm)
  printf '%-6s %12s %12s %12s %12s %12s %12s %12s\n' "$r" "$dz" "$dw" "$sw" "$dc" "$sc" "$dr" "$sr"
  rows+=("$dz $dw $sw $dc $sc $dr $sr")
done
printf '%s\n' "${rows[@]}" | python3 -c '
import statistics, sys
cols = list(zip(*[map(float, line.split()) for line in sys.stdin if line.strip()]))
print("%-6s" % "median" + "".join(" %12.0f" % statistics.median(c) for c in cols))'

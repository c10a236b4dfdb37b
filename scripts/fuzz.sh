#!/usr/bin/env bash
# Builds the fuzz targets (fuzz/: clang, libFuzzer, ASan + UBSan) and runs each one for SECONDS
# (default 60) from its committed corpus, then prints executions, coverage and findings per target.
#
#   scripts/fuzz.sh [--no-build] [SECONDS] [TARGET...]     fuzz (every target unless named)
#   scripts/fuzz.sh --minimize TARGET [DIR...]             shrink fuzz/corpus/TARGET with -merge=1,
#                                                          keeping what DIRs add to its coverage
# Environment:
#   FUZZ_BUILD_DIR  the fuzz build (default build-fuzz; ctest's smoke passes <build>/fuzz/clang)
#   FUZZ_WORK       where each target's new inputs and findings go: FUZZ_WORK/TARGET/{corpus,
#                   crash-*, timeout-*, oom-*, leak-*} (default: a temporary directory, removed
#                   unless something was found)
#   FUZZ_RUNS       also stop a target after this many executions
#   FUZZ_TIMEOUT    seconds one input may take before it counts as a finding (default 2: about
#                   1 s of work under the sanitizers, with room for a busy machine)
#   FUZZ_RSS_MB     memory limit of the process (default 2048)
#   FUZZ_MALLOC_MB  largest single allocation (default 512)
# Exit status: 0 when nothing was found, 1 when a target found something (a crash, an exception
# other than ppc::UserError, a broken round trip, a timeout, an out-of-memory or a leak).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD=${FUZZ_BUILD_DIR:-build-fuzz}
mapfile -t ALL_TARGETS < <(sed -n 's/^set(PP_FUZZ_TARGETS \(.*\))$/\1/p' fuzz/targets.cmake | tr ' ' '\n')

build() {
  local cxx
  cxx=$(command -v clang++-14 || command -v clang++ || true)
  if [ -z "$cxx" ]; then
    echo "fuzz.sh: clang++ not found (scripts/install-deps.sh installs clang-14)" >&2
    exit 2
  fi
  if [ ! -f "$BUILD/build.ninja" ]; then
    local launcher=()
    if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
    cmake -S . -B "$BUILD" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" -DPP_FUZZ=ON "${launcher[@]}" >/dev/null
  fi
  cmake --build "$BUILD" -j "${JOBS:-$(nproc)}"
}

if [ "${1:-}" = "--minimize" ]; then
  shift
  target=${1:?usage: scripts/fuzz.sh --minimize TARGET [DIR...]}
  shift
  build >/dev/null
  new=$(mktemp -d)
  crashes=$(mktemp -d)
  "$BUILD/fuzz/fuzz_$target" -merge=1 -timeout="${FUZZ_TIMEOUT:-2}" -rss_limit_mb="${FUZZ_RSS_MB:-2048}" \
    -artifact_prefix="$crashes/" "$new" "fuzz/corpus/$target" "$@" 2>&1 |
    grep -E "^MERGE-OUTER: [0-9]+ new files" || true
  if [ -n "$(ls -A "$crashes")" ]; then
    echo "fuzz.sh: some inputs break the contract (kept out of the corpus): $crashes" >&2
    ls "$crashes" >&2
    rm -rf "$new"
    exit 1
  fi
  rmdir "$crashes"
  before=$(find "fuzz/corpus/$target" -type f | wc -l)
  rm -rf "fuzz/corpus/$target"
  mv "$new" "fuzz/corpus/$target"
  chmod 755 "fuzz/corpus/$target"
  echo "fuzz.sh: fuzz/corpus/$target: $before -> $(find "fuzz/corpus/$target" -type f | wc -l) inputs"
  exit 0
fi

NO_BUILD=0
if [ "${1:-}" = "--no-build" ]; then NO_BUILD=1; shift; fi
SECONDS_EACH=60
if [[ "${1:-}" =~ ^[0-9]+$ ]]; then SECONDS_EACH=$1; shift; fi
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then TARGETS=("${ALL_TARGETS[@]}"); fi
for t in "${TARGETS[@]}"; do
  if ! printf '%s\n' "${ALL_TARGETS[@]}" | grep -qx "$t"; then
    echo "fuzz.sh: unknown target '$t' (targets: ${ALL_TARGETS[*]})" >&2
    exit 2
  fi
done
if [ "$NO_BUILD" = 0 ]; then build; fi

WORK=${FUZZ_WORK:-}
TEMP_WORK=0
if [ -z "$WORK" ]; then WORK=$(mktemp -d); TEMP_WORK=1; fi
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)

summary=()
total_findings=0
for t in "${TARGETS[@]}"; do
  bin="$BUILD/fuzz/fuzz_$t"
  if [ ! -x "$bin" ]; then echo "fuzz.sh: $bin is not built" >&2; exit 2; fi
  dir="$WORK/$t"
  mkdir -p "$dir/corpus"
  seeds=("$ROOT/fuzz/corpus/$t")
  if [ -d "$ROOT/fuzz/regressions/$t" ]; then seeds+=("$ROOT/fuzz/regressions/$t"); fi
  opts=(-max_total_time="$SECONDS_EACH" -timeout="${FUZZ_TIMEOUT:-2}"
        -rss_limit_mb="${FUZZ_RSS_MB:-2048}" -malloc_limit_mb="${FUZZ_MALLOC_MB:-512}"
        -artifact_prefix="$dir/" -print_final_stats=1 -reload=0)
  if [ -n "${FUZZ_RUNS:-}" ]; then opts+=(-runs="$FUZZ_RUNS"); fi
  if [ -f "$ROOT/fuzz/$t.dict" ]; then opts+=(-dict="$ROOT/fuzz/$t.dict"); fi
  echo "fuzz.sh: $t for ${SECONDS_EACH}s (log: $dir/log)"
  status=0
  start=$(date +%s)
  "$bin" "${opts[@]}" "$dir/corpus" "${seeds[@]}" >"$dir/log" 2>&1 || status=$?
  took=$(($(date +%s) - start))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$dir/log" | tail -1)
  last=$(grep -E '^#[0-9]+.*cov: ' "$dir/log" | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$last")
  findings=$(find "$dir" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'timeout-*' -o -name 'oom-*' \
    -o -name 'leak-*' -o -name 'slow-unit-*' \) | wc -l)
  if [ "$status" -ne 0 ] && [ "$findings" -eq 0 ]; then findings=1; fi  # died without an artifact
  if [ "$findings" -gt 0 ]; then
    total_findings=$((total_findings + findings))
    echo "fuzz.sh: $t FOUND SOMETHING (exit $status); the end of its log:"
    grep -E "fuzz contract violated|ERROR: |SUMMARY: |Test unit written|Base64: " "$dir/log" | head -20 || tail -30 "$dir/log"
  fi
  summary+=("$(printf '%-12s %8s %12s %8s %7s %8s %7s %9s' "$t" "$took" "${execs:-?}" "${rate:-?}" \
    "${cov:-?}" "${ft:-?}" "${corp:-?}" "$findings")")
done

printf '%-12s %8s %12s %8s %7s %8s %7s %9s\n' target seconds executions exec/s cov ft corpus findings
printf '%s\n' "${summary[@]}"
if [ "$total_findings" -gt 0 ]; then
  echo "fuzz.sh: findings are in $WORK (each crash-*/timeout-*/oom-* file is the input; rerun one with $BUILD/fuzz/fuzz_TARGET FILE)"
  exit 1
fi
if [ "$TEMP_WORK" = 1 ]; then rm -rf "$WORK"; fi
exit 0

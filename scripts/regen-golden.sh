#!/usr/bin/env bash
# Regenerates tests/compiler/golden/: the emitted table and CSV of every schedule over a grid of
# pp x vpp x microbatches. A changed golden file is a reviewed change: look at `git diff
# tests/compiler/golden` and explain every changed order in the commit message.
#
# Usage: scripts/regen-golden.sh [BUILD_DIR]   (default: build; builds ppcompile first)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
cmake --build "$BUILD" --target ppcompile >/dev/null
PPC="$BUILD/tools/ppcompile/ppcompile"

# The grid. Schedules are listed by name; the stages-per-rank each accepts comes from
# `ppcompile --list-schedules` (column vpp: 1, 2 or any).
SCHEDULES="GPipe 1F1B Interleaved1F1B LoopedBFS ZB-H1 ZB-H2 InterleavedZeroBubble ZBVZeroBubble DualPipeV DualPipe Combined1F1B"
PPS="1 2 4 8"
VPPS="1 2 4"
MICROBATCHES="1 2 3 4 5 7 8 12 16"

vpp_rule() { "$PPC" --list-schedules | awk -v s="$1" '$1 == s { print $2 }'; }

rm -rf tests/compiler/golden
for s in $SCHEDULES; do
  rule=$(vpp_rule "$s")
  [ -n "$rule" ] || { echo "unknown schedule $s" >&2; exit 1; }
  mkdir -p "tests/compiler/golden/$s"
  for pp in $PPS; do
    for vpp in $VPPS; do
      case "$rule" in
        1) [ "$vpp" = 1 ] || continue ;;
        2) [ "$vpp" = 2 ] || continue ;;
      esac
      f="tests/compiler/golden/$s/pp${pp}_vpp${vpp}.txt"
      {
        echo "# Golden output of ppcompile for $s at pp $pp, vpp $vpp. Regenerate: scripts/regen-golden.sh"
        echo "# tests/compiler/golden_test.cpp reruns every command below and compares; it also verifies every CSV plan."
        for m in $MICROBATCHES; do
          for emit in table csv; do
            args="--stages $((pp * vpp)) --pp $pp --schedule $s --microbatches $m --emit $emit"
            set +e
            out=$("$PPC" $args 2>&1)
            rc=$?
            set -e
            if [ $rc -eq 0 ]; then echo "\$ ppcompile $args"; else echo "\$ ppcompile $args (exit $rc)"; fi
            printf '%s\n' "$out"
          done
        done
      } > "$f"
    done
  done
done
echo "regenerated $(find tests/compiler/golden -name '*.txt' | wc -l) golden files in tests/compiler/golden"

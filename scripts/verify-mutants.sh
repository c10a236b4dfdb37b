#!/usr/bin/env bash
# The verifier against a larger mutation corpus than the test suite's
# (tests/compiler/verify_mutation_test.cpp): N mutants per mutation and base plan (default 50), every
# schedule at pp 2-5 with 2-8 microbatches, each judged by an exhaustive search of its states.
#   scripts/verify-mutants.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
bash scripts/build.sh >/dev/null
PP_MUTANTS=${1:-50} "$BUILD/tests/ppc_tests" --gtest_filter='VerifyMutants.*'

// When a rank fails, every other rank must stop within the timeout and say which rank was lost.
//
// Protocol over the rendezvous store (which outlives the ranks under the spawning pprun and
// torchrun; under SLURM rank 0 hosts it):
//  - a rank that fails for any reason sets "failed/<rank>" to its message, and the first to fail
//    also sets "first-failure";
//  - the spawning pprun sets "lost/<rank>" when a rank dies from a signal;
//  - a rank that sees a communication failure waits up to a grace period for the others: a
//    rank marked lost, or one that never reports, is the lost one (a killed or stopped process
//    cannot report); if every rank reported, the first failure is the cause.
// No LibTorch.
#pragma once

#include <chrono>
#include <stdexcept>
#include <string>

#include "runtime/transport.h"

namespace pprt {

// A run that failed at run time (not the user's input): exit code 1. The message names the rank.
class RunFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Records this rank's failure in the store (best effort: the store may be gone).
void report_failure(Store* store, int rank, const std::string& message);

// After a communication failure on `rank`: reports it, waits (at most `grace`) for the other
// ranks' reports and returns what was lost, e.g. "lost rank 2 (killed by signal 9)" or
// "lost rank 2 (it did not report within 3 s)".
std::string diagnose_lost_rank(Store* store, int rank, int world, const std::string& message,
                               std::chrono::milliseconds grace);

}  // namespace pprt

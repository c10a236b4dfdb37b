// When a rank fails, every other rank must stop within the timeout and say which rank was lost.
//
// Protocol over the rendezvous store (which outlives the ranks under the spawning pprun and
// torchrun; under SLURM rank 0 hosts it):
//  - a rank that fails for any reason sets "failed/<rank>" to its message, and the first to fail
//    also sets "first-failure";
//  - the spawning pprun sets "lost/<rank>" when a rank dies from a signal;
//  - every rank runs a FailureWatch: once any failure is recorded, it acknowledges that its rank
//    is alive ("alive/<rank>"), and if its rank is blocked waiting for a live peer it stops the
//    rank itself (with the diagnosis) instead of letting it wait for the timeout;
//  - a rank diagnosing a failure waits up to a grace period for every other rank to report a
//    failure or acknowledge: a rank marked lost, or one that does neither, is the lost one (a
//    killed or stopped process cannot answer); if every rank answered, the first failure is the
//    cause.
// No LibTorch.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime/transport/transport.h"

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

// For the rank that hosts the store (SLURM, or ranks started by hand): before exiting after a
// failure, waits (at most twice the `grace` of diagnose_lost_rank, plus 2 s) until every rank has
// finished its diagnosis ("diagnosed/<r>") or been found lost, so that no rank loses the store in
// the middle of its diagnosis.
void linger_for_reports(Store* store, int world, std::chrono::milliseconds grace);

// Watches the store for failures of other ranks while this rank trains (see above). Stop it
// before the run's final barrier: after it, the store's host may be gone.
class FailureWatch {
 public:
  FailureWatch(Store* store, int rank, int world, std::chrono::milliseconds grace,
               bool hosts_store);
  ~FailureWatch();
  FailureWatch(const FailureWatch&) = delete;
  FailureWatch& operator=(const FailureWatch&) = delete;

  // The rank's own thread has failed and reports it itself: the watch stands down.
  void main_failing() { main_failing_ = true; }
  // A file to remove if the watch stops the rank (it exits without unwinding: temporary files of
  // outputs that are written atomically).
  void remove_on_stop(const std::string& path);
  void stop();

 private:
  void loop();

  Store* store_;
  int rank_, world_;
  std::chrono::milliseconds grace_;
  bool hosts_store_;
  std::atomic<bool> main_failing_{false};
  std::mutex m_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::vector<std::string> remove_on_stop_;
  std::thread thread_;
};

}  // namespace pprt

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
//    cause;
//  - a rank that cannot reach the store (its host, or the network to it, is down: the store's
//    operations would block for the store's whole timeout) gives up on it after the grace period
//    and names the ranks that run on the store's host (RankHosts) as lost;
//  - a rank whose own thread is stuck in a host call that has no timeout of its own (a CUDA call
//    that does not return) is stopped by its watch once that call outlasts the step's timeout
//    (set_where: the watch asks where the thread is), as a failure of its own.
// Every line a stopped rank prints says where it was in its plan (train/where.h).
// No LibTorch.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
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

// Where the ranks run, for naming what a network failure cut off: each rank's IPv4 address on
// the network that reaches the rendezvous store (its route towards it), gathered when the job
// starts, and the store's own address.
struct RankHosts {
  std::string store;               // the rendezvous store, "ADDR:PORT" as the ranks reach it
  std::string store_host;          // its IPv4 address ("" if unknown)
  std::vector<std::string> hosts;  // per rank: its IPv4 address ("" if unknown)
};

// This machine's IPv4 address on the route towards `host` (a name or an address), or "" when it
// has none (no IPv4 route, a name that does not resolve). Sends nothing.
std::string local_address_towards(const std::string& host);
// `host` resolved to an IPv4 address ("" if it does not resolve).
std::string ipv4_address_of(const std::string& host);
// An IPv4 address as a number plus one (0: "" or not an address), and back.
uint64_t ipv4_number(const std::string& address);
std::string ipv4_text(uint64_t number);

// Records this rank's failure in the store (best effort: the store may be gone).
void report_failure(Store* store, int rank, const std::string& message);

// After a communication failure on `rank`: reports it, waits (at most `grace`) for the other
// ranks' reports and returns what was lost, e.g. "lost rank 2 (killed by signal 9)",
// "lost rank 2 (no answer within 3 s: the process died or hangs)" or, when the store itself does
// not answer within the grace period, "lost ranks 0, 1 (on 10.0.0.1, the rendezvous store's host,
// which does not answer ...)". `hosts` (may be null) names hosts in the verdict.
std::string diagnose_lost_rank(Store* store, int rank, int world, const std::string& message,
                               std::chrono::milliseconds grace, const RankHosts* hosts = nullptr);

// For the rank that hosts the store (SLURM, or ranks started by hand): before exiting after a
// failure, waits (at most twice the `grace` of diagnose_lost_rank, plus 2 s) until every rank has
// finished its diagnosis ("diagnosed/<r>") or been found lost, so that no rank loses the store in
// the middle of its diagnosis.
void linger_for_reports(Store* store, int world, std::chrono::milliseconds grace);

// Watches the store for failures of other ranks while this rank trains (see above). Stop it
// before the run's final barrier: after it, the store's host may be gone. The store must outlive
// the process's failure exit (the watch's thread may still be blocked in it).
class FailureWatch {
 public:
  FailureWatch(Store* store, int rank, int world, std::chrono::milliseconds grace,
               bool hosts_store);
  ~FailureWatch();
  FailureWatch(const FailureWatch&) = delete;
  FailureWatch& operator=(const FailureWatch&) = delete;

  // Where the ranks run (once gathered), for the verdicts.
  void set_hosts(RankHosts hosts);
  // Where the rank's thread is: `describe` says it (the lines printed when the watch stops the
  // rank end with it); `overdue` says it when its current host call has outlasted its limit, else
  // "". Both are called from the watch's thread and must be safe to call from there and to
  // outlive the caller (capture what they use by shared_ptr). With them the watch also runs for a
  // job of one rank.
  void set_where(std::function<std::string()> describe, std::function<std::string()> overdue);
  std::shared_ptr<const RankHosts> hosts() const;
  // The rank's own thread has failed and reports it itself: the watch stands down (and is not
  // waited for: it may be blocked in a store that does not answer).
  void main_failing();
  void stop();

 private:
  struct State;
  static void loop(std::shared_ptr<State> s);
  std::shared_ptr<State> state_;
  std::thread thread_;
};

}  // namespace pprt

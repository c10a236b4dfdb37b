// Runs a lowered plan under the deadlock model (docs/deadlock-model.md), optionally with costs.
//
// Each rank runs its actions in order. A compute action needs its inputs (received or produced
// locally before it) and takes costs.compute(); a maximal run of consecutive SEND/RECV is one
// batch, entered when the rank reaches it; an op of a batch is matched when the peer's batch that
// holds its counterpart is current too, at the later of the two entry times, and is done
// costs.transfer() after that; the batch completes when all its ops are done. The result does not
// depend on the order in which ranks are advanced.
//
// Used by the verifier (no costs: it only needs to know whether every rank finishes) and by the
// simulator (costs from the cost model).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "compiler/plan.h"
#include "compiler/stuck.h"

namespace ppc {

struct ExecCosts {
  // Duration of a compute action (an OverlapFB as a whole) on `rank`.
  std::function<double(const Action&, int rank)> compute;
  // Duration of the transfer of a SEND (from the match to done). Null = 0.
  std::function<double(const Action& send)> transfer;
  // Called for every compute action as it runs, in each rank's order: its start and end. Lets a
  // caller follow the run (the simulator's memory timeline) without recording every action's
  // times.
  std::function<void(int rank, const Action&, double start, double end)> on_compute;
  // Per rank: when it begins (its clock before its first action). Empty = every rank at 0.
  std::vector<double> begin;
};

struct Interval {
  double start = 0, end = 0;
};

struct Execution {
  std::vector<std::string> errors;  // dependency errors (an action ran before its input existed)
  std::vector<StuckRank> stuck;     // ranks that could not finish (deadlock), if no errors
  size_t batches = 0;
  size_t sends = 0;  // SEND actions (messages)
  // times[r][i]: when rank r's action i ran (compute) or its batch was entered / the op was done
  // (comm). Filled only when record_times is set.
  std::vector<std::vector<Interval>> times;
  // end[r]: when rank r finished its last action (its last compute, or its last batch's transfers),
  // the latest end of any of its actions. Filled when costs are given and there are no errors.
  std::vector<double> end;
  // Per rank, when costs are given: the time its compute actions took in all, when its first one
  // started and when its last one ended (0 and 0 for a rank without any).
  std::vector<double> busy, first_start, last_end;

  bool finished() const { return errors.empty() && stuck.empty(); }
  // "deadlock: rank 0 waits at ..." or the first error; empty if finished.
  std::string failure() const;
};

// `plan` must be lowered and must have passed the shape and count checks of the verifier.
Execution execute(const Plan& plan, const ExecCosts* costs, bool record_times,
                  size_t max_errors = 20);

// execute() for a plan that is still being written (lower_while_verifying): each rank runs as far
// as the part of its order written so far lets it, and the run ends once all of it is there. The
// result equals execute()'s, since the model's outcome does not depend on the order in which
// ranks advance. `orders` holds each rank's order (final_sizes[r] actions once written); the
// actions made available must have passed the verifier's shape checks. `plan` must outlive the
// run (only its placement and shape are read while it runs: its `lowered` may be assigned
// meanwhile).
class GrowingExecution {
 public:
  GrowingExecution(const Plan& plan, const ExecCosts* costs, bool record_times, size_t max_errors,
                   std::vector<const Action*> orders, std::vector<size_t> final_sizes);
  ~GrowingExecution();
  GrowingExecution(const GrowingExecution&) = delete;
  GrowingExecution& operator=(const GrowingExecution&) = delete;

  // Rank r's first `available` actions are written (more than at the last call).
  void extend(int rank, size_t available);
  // Every action is written: the run's result.
  Execution finish();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace ppc

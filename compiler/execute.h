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

#include "compiler/dependencies.h"
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

// Where the counterpart of each communication action is: what the model looks up as ranks enter
// their batches. execute() builds it from the plan; lower_and_verify (verify.h) builds it while
// the plan is being written, for a GrowingExecution.
struct CommPartner {
  int32_t position;  // where the counterpart is in the peer's order
  CommPartner() {}   // uninitialised on purpose: compute actions have none
};
struct CommIndex {
  CommPositions position;                          // of every communication action
  std::vector<std::vector<CommPartner>> partner;  // per rank and action (communication only)
  size_t batches = 0;                              // maximal runs of communication actions
  size_t sends = 0;                                // SEND actions
  CommIndex(int num_stages, int microbatches) : position(num_stages, microbatches) {}
};

// `plan` must be lowered and must have passed the shape and count checks of the verifier.
Execution execute(const Plan& plan, const ExecCosts* costs, bool record_times,
                  size_t max_errors = 20);

// The index of a lowered plan that passed the verifier's shape checks (threads for large plans).
CommIndex build_comm_index(const Plan& plan);

// execute() for a plan that is still being written (lower_and_verify): each rank runs as far as
// the part of its order written so far lets it, and the run ends once all of it is there. The
// result equals execute()'s, since the model's outcome does not depend on the order in which
// ranks advance. An op must be in `index` by the time it is made available: its own position, and
// its counterpart's position, or CommPositions::kNever if the counterpart is not written yet (the
// counterpart's own entry then names the op). `orders` holds each rank's order (final_sizes[r]
// actions once written), `index` must outlive the run, and so must `plan` (only its placement and
// shape are read while it runs: its `lowered` may be assigned meanwhile).
class GrowingExecution {
 public:
  GrowingExecution(const Plan& plan, const ExecCosts* costs, bool record_times, size_t max_errors,
                   const CommIndex& index, std::vector<const Action*> orders,
                   std::vector<size_t> final_sizes);
  ~GrowingExecution();
  GrowingExecution(const GrowingExecution&) = delete;
  GrowingExecution& operator=(const GrowingExecution&) = delete;

  // Rank r's first `available` actions are written and indexed.
  void extend(int rank, size_t available);
  // Every action is written and indexed: the run's result.
  Execution finish();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace ppc

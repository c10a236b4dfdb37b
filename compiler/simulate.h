// The simulator: start and end of every action of a lowered plan under a cost model, following
// the deadlock model's semantics (deadlock_model.h): compute takes its cost, a communication batch
// waits for its peers' matching batches and then for the transfer.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "compiler/cost_model.h"
#include "compiler/deadlock_model.h"
#include "compiler/plan.h"

namespace ppc {

class LengthCosts;  // lengths.h

struct MemoryPoint {
  double time;
  double value;
};

struct Simulation {
  double makespan = 0;
  std::vector<double> busy;         // per rank: time spent computing
  std::vector<double> rank_bubble;  // per rank: 1 - busy / makespan
  double bubble = 0;                // overall: 1 - sum(busy) / (pp * makespan)
  std::vector<double> peak_memory;  // per rank: peak activation memory
  // Per rank: the peak of what is held between F and B/I and between I and W, without the
  // transients of memory modes (what a B or I rebuilds, what an F holds until offloaded): what
  // pprun measures as peak activation bytes. Equal to peak_memory when no stage has a mode.
  std::vector<double> peak_held;
  std::vector<std::vector<MemoryPoint>> memory;  // per rank, activation memory after each change
  double comm_bytes = 0;
  size_t messages = 0;
  std::vector<std::vector<Interval>> times;  // per rank, per lowered action
  bool unit = true;  // costs were unit costs (memory counts microbatch-stages)

  // Iterations back to back: each rank starts the next step as soon as it has finished this one
  // (the zero-bubble paper's optimizer post-validation), so a step costs the longest span of a rank
  // from its first compute to its last. This is the bubble the ZB-H2 and ZBV "zero" refers to.
  std::vector<double> first_start;   // per rank: start of its first compute action
  std::vector<double> last_end;      // per rank: end of its last compute action
  double steady_period = 0;          // max over ranks of last_end - first_start
  double steady_bubble = 0;          // 1 - sum(busy) / (pp * steady_period)
  std::vector<double> param_memory;  // per rank: parameters of the stages it holds (both copies)
  // Per rank: when it begins the step (rank_starts(); empty when every rank begins at 0). The
  // makespan runs from the all-reduce that ends the previous step, so it includes these.
  std::vector<double> start;
  // When the microbatches have lengths (CostModel::microbatch_lengths): describe_lengths().
  std::string lengths;
};

// `plan` must be lowered and verified. Throws UserError if it does not run to completion.
// Times follow model.messages.
Simulation simulate(const Plan& plan, const CostModel& model);

// The run of a lowered plan under the eager message model (MessageModel::Eager), in execute()'s
// form (deadlock_model.h): times, per-rank ends, busy, first start and last end. A rank ends once
// its last compute has ended and its messages have arrived (the runtime waits for its sends at
// the end of a step). A plan that finishes under the deadlock model finishes under this one; if a
// rank cannot, `errors` says where.
struct EagerOptions {
  // The time a rank spends posting one SEND or RECV (before the op is out and the rank goes on):
  // none, one for every rank, or one per rank.
  std::vector<double> post;
  // Per rank: when it begins (empty: all at 0). pprun's check gives each rank its measured start.
  std::vector<double> start;
};
Execution execute_eager(const Plan& plan, const ExecCosts& costs, bool record_times,
                        const EagerOptions& options = {});

// The simulator in two steps, so that another run of the deadlock model can serve it (the
// verifier's, in verify_and_lower): run `plan` under execute() with costs() (recording times when
// timeline()), then finish() the run. The result equals simulate(plan, model)'s, except that
// without a timeline `times` and `memory` are left empty (what --emit stats needs).
class SimulationRun {
 public:
  SimulationRun(const Plan& plan, const CostModel& model, bool timeline);
  SimulationRun(const SimulationRun&) = delete;
  SimulationRun& operator=(const SimulationRun&) = delete;

  const ExecCosts& costs() const { return exec_; }
  bool timeline() const { return timeline_; }
  // `ex` must have finished. Under the eager message model `ex` only proves that the plan runs:
  // finish_eager() times it.
  Simulation finish(Execution&& ex);
  // The plan timed under the eager message model (model.messages == Eager), without a run of the
  // deadlock model. Throws UserError if it does not run to completion.
  Simulation finish_eager();

 private:
  Simulation finish_timed(Execution&& ex);
  // The activation memory of `rank` as it runs its next compute action `a` (in its order) from
  // start to end: a prefetch for the action after it (an offloaded B or I), then each part.
  void run_action(int rank, const Action& a, double start, double end);
  // The activation memory of `rank` as it runs plain action `part` from start to end; `stays`: an
  // F whose offloaded part stays on the device (its own B or I comes next).
  void change_memory(int rank, const Action& part, double start, double end, bool stays);
  void mem_change(int rank, double time, double delta);  // the activation memory now
  void held_change(int rank, double delta);              // of it, what is held between actions

  const Plan& plan_;
  const CostModel& model_;
  bool timeline_;
  std::vector<StageCost> costs_;
  ExecCosts exec_;
  Simulation sim_;
  std::vector<double> mem_;       // per rank: activation memory now
  std::vector<double> held_now_;  // per rank: of it, held between actions (Simulation::peak_held)
  std::vector<size_t> next_;      // per rank: the index of its next compute action
  MessageCosts messages_;         // per-boundary message costs (measured costs only)
  // Per microbatch, when the microbatches have lengths (lengths.h); null otherwise.
  std::shared_ptr<const LengthCosts> lengths_;
};

}  // namespace ppc

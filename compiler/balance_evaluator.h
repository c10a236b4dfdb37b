// The cost evaluation behind --balance (balance.h): a split of a model's layers into the stages of
// one compiled schedule, scored by its simulation, with stage costs from prefix sums and a lower
// bound on the simulated makespan that balance.cpp's search prunes by.
#pragma once

#include <limits>
#include <map>
#include <optional>
#include <vector>

#include "compiler/cost_model.h"
#include "compiler/layout.h"
#include "compiler/plan.h"

namespace ppc::balancing {

struct Score {
  double makespan = std::numeric_limits<double>::infinity();
  double peak_total = 0;
  double overflow = 0;  // how far the peak is over the memory limit (0: fits)
};

// a is better than b: fits where b does not (or overflows less), else a shorter makespan (by more
// than rounding noise).
bool better(const Score& a, const Score& b);

// A split whose lower bound is `bound` cannot beat `best` (a split that fits). The bound sums
// stage costs from prefix sums, the simulator from the layers: a margin far above rounding keeps
// the pruning safe.
bool cannot_beat(double bound, const Score& best);

// One compute action's contribution to a rank's busy time, aggregated over microbatches.
// Compute actions of one kind on the same stages, aggregated over microbatches. The action's
// stages are layout stages, so that action_cost prices it from per-layout-stage costs exactly as
// the simulator prices the plan's actions.
struct Term {
  Action action;
  double count;
};

struct RankShape {
  int first_stage = 0;     // plan stage of the forward (part) of the rank's first compute
  int last_backward = -1;  // plan stage of the backward (part) of its last B or I, or -1
  std::vector<Term> all;   // every compute action of the rank
  std::vector<Term> upto;  // those up to and including that last B or I
};

// Splits of one model into the stages of one compiled schedule: stage costs, a lower bound on
// the simulated makespan (from the fixed compute orders) and the simulation itself.
class Evaluator {
 public:
  Evaluator(Plan base, const CostModel& cost, std::optional<double> limit,
            const std::vector<LayerKind>& layers);

  int stages() const { return plan_.layout.num_stages(); }
  int layers() const { return static_cast<int>(layers_.size()); }
  long long simulations() const { return simulations_; }
  long long compute_actions() const;

  StageCost stage_cost(int from, int to) const;

  // Stage costs of the first `known` stages of `cuts`; the rest cost nothing (a lower bound).
  void costs_of(const std::vector<int>& cuts, int known, std::vector<StageCost>& out) const;

  // Parameter memory of the most loaded rank.
  double max_params(const std::vector<StageCost>& c) const;

  // A lower bound on the simulated makespan with stage costs `c`, valid for every split whose
  // stage costs are at least `c` (compute durations only grow with stage costs): a rank starts no
  // earlier than its first forward's input can arrive, is then busy for the sum of its actions,
  // and after its last B or I the gradient still has to run through every stage below.
  double lower_bound(const std::vector<StageCost>& c) const;

  // Compiles the split like ppcompile does (lower_for_model) and simulates it.
  Score evaluate(const std::vector<int>& cuts);

  bool seen(const std::vector<int>& cuts) const { return cache_.count(cuts) != 0; }

 private:
  // Durations only grow with stage costs (action_cost is monotone in each), so costs that are
  // lower bounds give a lower bound.
  double busy(const std::vector<Term>& terms, const std::vector<StageCost>& c) const;

  Plan plan_;
  CostModel cost_;
  std::optional<double> limit_;
  std::vector<LayerKind> layers_;
  std::vector<StageCost> pf_;  // prefix sums of the layers' costs
  StageCost empty_;
  double msg_ = 0;
  std::vector<RankShape> ranks_;
  mutable std::vector<double> fchain_, bchain_;
  std::map<std::vector<int>, Score> cache_;
  long long simulations_ = 0;
};

}  // namespace ppc::balancing

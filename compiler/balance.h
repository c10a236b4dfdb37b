// ppcompile --balance: re-split a model's layers into pipeline stages so that the simulated
// makespan is as short as the search can make it (docs/balance.md).
//
// The layers keep their model order; the layout's own '|' splits are ignored. The stages are the
// pp x vpp stages the schedule runs (empty stages allowed). A split is scored by compiling it like
// any other plan (generate, lower_for_model, simulate under the cost model); with a memory limit,
// splits whose peak (activations + parameters) exceeds it lose to every split that fits.
//
// The method (what it guarantees is in docs/balance.md):
//  1. the classic linear partition (min_bottleneck_split): the split that minimizes the heaviest
//     stage's work per microbatch, found exactly; with one stage per rank and additive costs this
//     is the split that minimizes the steady-state time per microbatch;
//  2. local search from the best of that split and the layout as given (when it has the right
//     number of stages): moves of one or more stage boundaries by one layer, tried in the order
//     of a lower bound on their makespan, each scored by the simulator;
//  3. branch and bound over all splits with that lower bound, with what is left of the budget:
//     when it finishes, no split has a shorter simulated makespan (proven_optimal).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "compiler/layout.h"
#include "compiler/simulate.h"

namespace ppc {

// The layers of a layout in model order (its stages one after the other).
std::vector<LayerKind> model_layers(const Layout& layout);

// `layers` split at `cuts`: stage k holds layers [cuts[k], cuts[k+1]). cuts.front() == 0,
// cuts.back() == layers.size(), non-decreasing (equal neighbours make an empty stage). The result
// has stages only (no source text or positions).
Layout split_layers(const std::vector<LayerKind>& layers, const std::vector<int>& cuts);

// The linear partition problem: `weights` (non-negative, in order) split into `stages`
// contiguous parts, where an empty part weighs `empty_weight`, minimizing the heaviest part.
// Exact (a binary search over the bit patterns of the candidate bottleneck, with a greedy
// feasibility test). Among the optimal splits it returns one whose cuts stay close to an even
// spread of the weight. Needs stages >= 1 and at least one weight.
struct BottleneckSplit {
  std::vector<int> cuts;  // stages + 1 entries
  double bottleneck = 0;  // the heaviest part of this split, which is the optimum
};
BottleneckSplit min_bottleneck_split(const std::vector<double>& weights, int stages,
                                     double empty_weight);

struct BalanceOptions {
  Layout layout;  // the model (parse_layout); its layer order is kept, its splits ignored
  int pp = 1;
  std::optional<int> vpp;  // stages per rank; default: the schedule's, else the layout's
  std::string schedule;
  int microbatches = 1;
  CostModel cost;  // unit costs (cost.unit) are taken per layer: unit_layer_costs()
  std::optional<double> memory_limit;  // per rank: peak activations + parameters
  // Most splits to simulate; 0 = automatic: 2^18 / (50 + compute actions of the plan), at least
  // 4 (about a tenth of a second of simulation on one core). The seeds are simulated regardless.
  long long budget = 0;
  // Called now and then with the fraction of the budget used (0..1). Optional.
  std::function<void(double)> progress;
};

struct BalanceResult {
  Layout layout;  // the chosen split; its source is its layout string (layout_string)
  int vpp = 1;
  double makespan = 0;                   // simulated, as ppcompile compiles the layout
  double peak_total = 0;                 // max over ranks of peak activations + parameters
  bool fits = true;                      // peak_total <= memory_limit (true without a limit)
  double bottleneck = 0;                 // heaviest stage's work per microbatch in the chosen split
  double min_bottleneck = 0;             // the optimum of that (linear partition)
  double bottleneck_split_makespan = 0;  // the bottleneck-optimal split's makespan
  std::optional<double> given_makespan;  // the layout as given, if it has pp x vpp stages
  long long simulations = 0;             // splits simulated
  long long budget = 0;                  // the budget they were drawn from
  bool proven_optimal = false;           // branch and bound finished within the budget
};

// Throws UserError for what the user must change (a layout that is not a model, a vpp the
// schedule cannot run, too few microbatches for the schedule, ...).
BalanceResult balance_layout(const BalanceOptions& opts);

// Lines for --emit stats: the balanced layout, how it compares with the bottleneck-optimal split
// and the layout as given, and what the search did.
std::string describe_balance(const BalanceResult& result);

// The stages per rank --balance uses for a schedule when --vpp is not given: 1 or 2 for the
// schedules that fix it, else the layout's stages / pp when that divides, else 1.
int default_balance_vpp(const std::string& schedule, const Layout& layout, int pp);

}  // namespace ppc

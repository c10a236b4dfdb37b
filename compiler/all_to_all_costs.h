// What the all-to-alls of expert parallelism (issue 40, all_to_all.h) cost: each stage's share of
// them in its F, B and I (docs/cost-model.md, "All-to-alls and overlap"). The simulator, lowering,
// the lower bound and Auto read them through stage_costs() (cost_model.h) and time an
// OVERLAP_F_B with overlapped_time(), which hides one part's all-to-alls under the other part's
// computation.
#pragma once

#include <string>
#include <vector>

#include "compiler/cost_model.h"
#include "compiler/plan.h"

namespace ppc {

// One all-to-all (a dispatch or a combine) of one MoE layer for one microbatch: the cost file's
// layers.t.all_to_all (pprun --profile measures it), else derived: latency + message_bytes *
// top_k * (ep - 1) / ep / bandwidth (each token's activation to top_k experts, the share that
// leaves the rank). 0 under unit costs or without expert parallelism.
double all_to_all_time(const Plan& plan, const CostModel& model);

// Adds each stage's all-to-alls to `costs` (stage_costs' last step): all_to_all_f and
// all_to_all_b, and the same time to f, b and i, except for measured per-stage entries, whose
// times already hold the all-to-alls their run made. `with_memory`: count the forwards that the
// plan's full recomputation reruns inside B and I.
void add_all_to_alls(const Plan& plan, const CostModel& model, std::vector<StageCost>& costs,
                     bool with_memory);

// Whether any stage has all-to-alls that an OVERLAP_F_B could hide.
bool hides_all_to_all(const std::vector<StageCost>& costs);

// The all-to-all time an OVERLAP_F_B hides: the sum of its parts' all-to-alls less what of them
// stays exposed (its duration less its computations' overlapped duration).
double hidden_all_to_all(const Action& overlap, const std::vector<StageCost>& costs,
                         const CostModel& model);

// --emit stats' line under expert parallelism (empty otherwise, and under unit costs): what one
// all-to-all takes, and the all-to-all time of the step's compute actions over every rank, with
// what OVERLAP_F_Bs hide of it:
//   all-to-alls   ep 2, first 1 decoder layers dense: 3.5 each; 24 per step over the ranks,
//                 6 (25.0 %) hidden by OVERLAP_F_B
std::string describe_all_to_alls(const Plan& plan, const CostModel& model);

}  // namespace ppc

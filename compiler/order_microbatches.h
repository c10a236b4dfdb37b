// Ordering a step's microbatches for their lengths (docs/ppcompile.md, "--lengths"): which data
// microbatch each of a plan's microbatch slots processes, so that the simulated step is shortest.
//
// The plan's actions stay as they are (so it stays verified: verification does not depend on
// costs); only Plan::microbatch_order changes, and with it the cost of each action. Under DualPipe
// the order also chooses the pairs of every OVERLAP_F_B (a slot of each direction) and which
// microbatches go in each direction.
//
// The search: the simulated step of a few orders (data order; shortest and longest first; short
// ones at both ends and long ones in the middle, and the reverse; under two model copies the same
// with the lengths dealt to the two directions in turn), then swaps of two slots from the best,
// kept when they shorten the step, until the budget of simulations is spent. Deterministic: the
// same plan, costs and lengths give the same order (every rank of a run can plan its own step).
#pragma once

#include <cstdint>
#include <vector>

#include "compiler/cost_model.h"
#include "compiler/plan.h"

namespace ppc {

struct OrderOptions {
  int simulations = 256;  // most simulated steps the search runs (at least the first orders)
  uint64_t seed = 1;      // of the swaps
};

struct OrderResult {
  std::vector<int> order;      // Plan::microbatch_order
  double data_order_step = 0;  // simulated makespan in data order
  double step = 0;             // with `order`
  int simulations = 0;         // simulated steps run
};

// The best order found for `model.microbatch_lengths` (one per microbatch of `plan`, in data
// order). `plan` must be lowered and verified.
OrderResult order_microbatches(const Plan& plan, const CostModel& model,
                               const OrderOptions& options = {});

// What the runtime calls each step: the lengths the data loader will deliver in, the plan with its
// microbatch_order set for them out. `model`'s own microbatch_lengths are ignored.
Plan plan_for_lengths(Plan plan, const CostModel& model, const std::vector<long long>& lengths,
                      const OrderOptions& options = {});

}  // namespace ppc

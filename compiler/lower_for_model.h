// Lowering under a cost model: lower_send_recv (lowering proper, unit costs by default) given the
// model's durations, and the faster of its two placements of SENDs by the simulator's measure.
#pragma once

#include "compiler/lower_send_recv.h"
#include "compiler/plan.h"
#include "compiler/simulate.h"

namespace ppc {

// Durations for lower_send_recv, so that its batches follow the model's timing. Empty (lowering's
// own unit costs, which equal the unit model's) when model.unit.
LoweringCosts lowering_costs(const Plan& plan, const CostModel& model);

// Lowers a compute-only plan for a cost model. Under unit costs this is lower_send_recv(plan).
// Otherwise both placements of SENDs (posted at once, or held back while the receiver computes;
// see LoweringCosts::defer_sends) are lowered and simulated, and the one with the shorter
// makespan is returned (the first on a tie).
Plan lower_for_model(const Plan& plan, const CostModel& model);

// lower_for_model's plan with its simulation (which choosing it took; under unit costs simulated
// once), so that a caller that needs both does not simulate the chosen plan again.
struct LoweredPlan {
  Plan plan;
  Simulation sim;
};
LoweredPlan lower_and_simulate(const Plan& plan, const CostModel& model);

}  // namespace ppc

// The terminal table's time steps: when each compute action runs if every action takes one step.
#pragma once

#include <cstdint>
#include <vector>

#include "compiler/plan.h"

namespace ppc {

// The time steps of the compute orders when every action takes one step (as in PyTorch's
// _format_pipeline_order): steps[r][i] is when rank r runs its i-th compute action. The steps are
// those of lowering (lower_send_recv.h) with every compute lasting 1 and transfers free, found
// without lowering: see compute_steps.cpp. Throws the UserError lowering would throw when the
// compute order cannot run.
std::vector<std::vector<int32_t>> compute_steps(const Plan& plan);

}  // namespace ppc

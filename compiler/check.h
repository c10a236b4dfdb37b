// The passes between building a plan (compile() or an importer) and emitting it, as ppcompile
// runs them: verify the compute order, lower it (unless it is lowered already), verify the lowered
// plan, and simulate it if the output needs that. Each replay of the plan runs once: under unit
// costs the lowering is also the compute order's check that it can run (the verifier's check 3),
// and the deadlock model's run of the lowered plan is also the simulator's.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "compiler/plan.h"
#include "compiler/simulate.h"
#include "compiler/verify.h"

namespace ppc {

enum class SimulationNeed : uint8_t {
  None,
  Summary,   // totals, bubbles and peaks, without per-action times (--emit stats)
  Timeline,  // everything simulate() returns (pictures)
};

struct CheckedPlan {
  Plan plan;                      // lowered, unless the compute order failed verification
  VerifyReport report;            // of the lowered plan, or of the compute order if that failed
  std::optional<Simulation> sim;  // when asked for and the plan is valid
};

// Equal to: report = verify(compute order); if ok, plan = lower_for_model(plan, cost) (when not
// lowered yet) and report = verify(plan); if ok and asked, sim = simulate(plan, cost) (without
// times and memory points for Summary).
//
// `alongside`, when set, is called once with the final plan whenever its compute order passed
// verification, and what it makes is only valid if the returned report is ok. For a plan
// lowered here (from that verified compute order, by lower_and_verify, which verifies the lowered
// plan as lowering writes it) it runs on another thread, so that work which needs only the plan
// (an emitter writing into memory) overlaps the verification: as soon as lowering is done, or,
// when it reads only the compute order (`reads`), from the start of lowering. Otherwise it runs
// after that verification. It may throw: the exception reaches the caller after the verification
// ends, unless the plan failed it.
using AlongsideFn = std::function<void(const Plan&)>;
enum class AlongsideReads : uint8_t {
  WholePlan,     // lowered order included
  ComputeOrder,  // the plan but its lowered order, which lowering may still be writing meanwhile
};
CheckedPlan check_and_lower(Plan plan, const CostModel& cost, SimulationNeed need,
                            const AlongsideFn& alongside = {},
                            AlongsideReads reads = AlongsideReads::WholePlan);

}  // namespace ppc

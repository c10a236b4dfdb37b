#include "compiler/lower_for_model.h"

#include <memory>
#include <utility>

#include "compiler/measured_costs.h"

namespace ppc {

LoweringCosts lowering_costs(const Plan& plan, const CostModel& model) {
  if (model.unit) return {};
  auto costs = std::make_shared<const std::vector<StageCost>>(stage_costs(plan, model));
  LoweringCosts lc;
  lc.compute = [costs, model](const Action& a, int) { return action_cost(a, *costs, model); };
  if (model.measured) {  // per-boundary message times
    auto times = std::make_shared<const std::vector<double>>(message_costs(plan, model).time);
    lc.transfer = [times](const Action& send) { return (*times)[MessageCosts::index(send)]; };
    return lc;
  }
  const double per_message = message_time(model);
  if (per_message > 0) lc.transfer = [per_message](const Action&) { return per_message; };
  return lc;
}

Plan lower_for_model(const Plan& plan, const CostModel& model) {
  if (model.unit) return lower_send_recv(plan);
  return lower_and_simulate(plan, model).plan;
}

LoweredPlan lower_and_simulate(const Plan& plan, const CostModel& model) {
  auto lowered = [&](Plan p) {
    LoweredPlan l{std::move(p), {}};
    l.sim = simulate(l.plan, model);
    return l;
  };
  if (model.unit) return lowered(lower_send_recv(plan));
  LoweringCosts at_once = lowering_costs(plan, model);
  LoweringCosts held = at_once;
  held.defer_sends = true;
  LoweredPlan a = lowered(lower_send_recv(plan, at_once));
  LoweredPlan b = lowered(lower_send_recv(plan, held));
  return b.sim.makespan < a.sim.makespan ? std::move(b) : std::move(a);
}

}  // namespace ppc

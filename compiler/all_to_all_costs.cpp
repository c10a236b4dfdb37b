#include "compiler/all_to_all_costs.h"

#include <fmt/format.h>

#include <algorithm>

#include "compiler/all_to_all.h"

namespace ppc {

double all_to_all_time(const Plan& plan, const CostModel& model) {
  if (model.unit || !plan.expert_parallel.on()) return 0.0;
  const LayerCost& t = model.layer(LayerKind::Decoder);
  if (t.all_to_all) return *t.all_to_all;
  const double ep = plan.expert_parallel.ep;
  const double bytes = model.message_bytes * model.top_k * (ep - 1) / ep;
  return model.latency + (model.bandwidth > 0 ? bytes / model.bandwidth : 0.0);
}

void add_all_to_alls(const Plan& plan, const CostModel& model, std::vector<StageCost>& costs,
                     bool with_memory) {
  const double one = all_to_all_time(plan, model);
  if (one <= 0) return;
  const bool measured = model.measured != nullptr;
  const auto moe = moe_layers(plan);
  Plan keeping_all;  // the plan's skeleton without memory modes, for the counts
  const Plan* counted = &plan;
  if (!with_memory && !plan.memory.empty()) {
    keeping_all.layout = plan.layout;
    keeping_all.has_model = plan.has_model;
    keeping_all.placement = plan.placement;
    keeping_all.copies = plan.copies;
    keeping_all.expert_parallel = plan.expert_parallel;
    counted = &keeping_all;
  }
  for (int s = 0; s < plan.num_stages(); ++s) {
    StageCost& c = costs[static_cast<size_t>(s)];
    c.all_to_all_f = one * all_to_all_count(*counted, moe, s, ActionKind::F);
    c.all_to_all_b = one * all_to_all_count(*counted, moe, s, ActionKind::B);
    if (measured) continue;
    c.f += c.all_to_all_f;
    c.b += c.all_to_all_b;
    c.i += c.all_to_all_b;
  }
}

bool hides_all_to_all(const std::vector<StageCost>& costs) {
  return std::any_of(costs.begin(), costs.end(),
                     [](const StageCost& c) { return c.all_to_all_f > 0 || c.all_to_all_b > 0; });
}

double hidden_all_to_all(const Action& overlap, const std::vector<StageCost>& costs,
                         const CostModel& model) {
  const Action fp = overlap.forward_part(), bp = overlap.backward_part();
  const StageCost &f = costs[static_cast<size_t>(fp.stage)],
                  &b = costs[static_cast<size_t>(bp.stage)];
  const double af = std::min(f.all_to_all_f, f.f),
               ab = std::min(b.all_to_all(bp.kind), b.time(bp.kind));
  const double whole = overlapped_time(f.f, af, b.time(bp.kind), ab, model.overlap);
  const double cf = f.f - af, cb = b.time(bp.kind) - ab;
  const double compute = std::max(cf, cb) + (1.0 - model.overlap) * std::min(cf, cb);
  return af + ab - (whole - compute);
}

std::string describe_all_to_alls(const Plan& plan, const CostModel& model) {
  const double one = all_to_all_time(plan, model);
  if (one <= 0) return "";
  const std::vector<StageCost> costs = stage_costs(plan, model);
  double total = 0, hidden = 0;
  for (const auto& order : plan.compute)
    for (const Action& a : order) {
      for_each_part(a, [&](const Action& p) {
        total += std::min(costs[static_cast<size_t>(p.stage)].all_to_all(p.kind),
                          costs[static_cast<size_t>(p.stage)].time(p.kind));
      });
      if (is_compound(a.kind)) hidden += hidden_all_to_all(a, costs, model);
    }
  return fmt::format(
      "all-to-alls   ep {}, first {} decoder layers dense: {:g} each; {:g} per step over the "
      "ranks, {:g} ({:.1f} %) hidden by OVERLAP_F_B\n",
      plan.expert_parallel.ep, plan.expert_parallel.first_dense, one, total, hidden,
      total > 0 ? 100.0 * hidden / total : 0.0);
}

}  // namespace ppc

#include "compiler/simulate.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include "compiler/diagnostic.h"

namespace ppc {

std::vector<StageCost> stage_costs(const Plan& plan, const CostModel& model) {
  std::vector<StageCost> out(static_cast<size_t>(plan.num_stages()));
  if (model.unit) return out;
  for (int s = 0; s < plan.num_stages(); ++s) {
    const auto& layers = plan.layout.stages[static_cast<size_t>(plan.layout_stage(s))];
    StageCost c{0, 0, 0, 0, 0, 0};
    if (layers.empty()) {
      const LayerCost& e = model.empty_stage;
      c = StageCost{e.f, e.backward(), e.i, e.w, e.activation, e.params};
    }
    for (LayerKind k : layers) {
      const LayerCost& l = model.layers[static_cast<size_t>(k)];
      c.f += l.f;
      c.b += l.backward();
      c.i += l.i;
      c.w += l.w;
      c.activation += l.activation;
      c.params += l.params;
    }
    out[static_cast<size_t>(s)] = c;
  }
  return out;
}

double action_cost(const Action& a, const std::vector<StageCost>& costs, const CostModel& model) {
  auto part = [&](ActionKind k, int s) {
    const StageCost& c = costs[static_cast<size_t>(s)];
    switch (k) {
      case ActionKind::F:
        return c.f;
      case ActionKind::B:
        return c.b;
      case ActionKind::I:
        return c.i;
      case ActionKind::W:
        return c.w;
      default:
        return 0.0;
    }
  };
  if (a.kind != ActionKind::OverlapFB) return part(a.kind, a.stage);
  const double f = part(ActionKind::F, a.stage), b = part(a.sub_kind, a.stage2);
  return std::max(f, b) + (1.0 - model.overlap) * std::min(f, b);
}

std::string format_memory(double value, bool in_bytes) {
  if (!in_bytes) return fmt::format("{:.4g}", value);
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (value >= 1024 && u < 5) {
    value /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:g} B", value) : fmt::format("{:.1f} {}", value, kUnits[u]);
}

double message_time(const CostModel& model) {
  if (model.unit) return 0.0;
  return model.latency + (model.bandwidth > 0 ? model.message_bytes / model.bandwidth : 0.0);
}

LoweringCosts lowering_costs(const Plan& plan, const CostModel& model) {
  if (model.unit) return {};
  auto costs = std::make_shared<const std::vector<StageCost>>(stage_costs(plan, model));
  LoweringCosts lc;
  lc.compute = [costs, model](const Action& a, int) { return action_cost(a, *costs, model); };
  const double per_message = message_time(model);
  if (per_message > 0) lc.transfer = [per_message](const Action&) { return per_message; };
  return lc;
}

Plan lower_for_model(const Plan& plan, const CostModel& model) {
  if (model.unit) return lower_send_recv(plan);
  LoweringCosts eager = lowering_costs(plan, model);
  LoweringCosts held = eager;
  held.defer_sends = true;
  Plan a = lower_send_recv(plan, eager);
  Plan b = lower_send_recv(plan, held);
  return simulate(b, model).makespan < simulate(a, model).makespan ? std::move(b) : std::move(a);
}

Simulation simulate(const Plan& plan, const CostModel& model) {
  PPC_INTERNAL_ASSERT(plan.is_lowered(), "simulate needs a lowered plan");
  const auto costs = stage_costs(plan, model);
  ExecCosts ec;
  ec.compute = [&](const Action& a, int) { return action_cost(a, costs, model); };
  const double per_message = message_time(model);
  ec.transfer = [&](const Action&) { return per_message; };
  Execution ex = execute(plan, &ec, true);
  if (!ex.finished()) throw UserError("the plan does not run to completion: " + ex.failure());

  Simulation sim;
  sim.unit = model.unit;
  const int pp = plan.pp();
  sim.busy.assign(static_cast<size_t>(pp), 0.0);
  sim.peak_memory.assign(static_cast<size_t>(pp), 0.0);
  sim.memory.assign(static_cast<size_t>(pp), {});
  for (int r = 0; r < pp; ++r) {
    const auto& acts = plan.lowered[static_cast<size_t>(r)];
    const auto& times = ex.times[static_cast<size_t>(r)];
    double mem = 0;
    auto& points = sim.memory[static_cast<size_t>(r)];
    points.reserve(2 * plan.compute[static_cast<size_t>(r)].size() +
                   1);  // at most a rise and a fall each
    points.push_back({0, 0});
    auto change = [&](double t, double delta) {
      mem += delta;
      if (mem < 1e-12 && mem > -1e-12) mem = 0;
      if (!points.empty() && points.back().time == t)
        points.back().value = mem;
      else
        points.push_back({t, mem});
      sim.peak_memory[static_cast<size_t>(r)] =
          std::max(sim.peak_memory[static_cast<size_t>(r)], mem);
    };
    auto apply = [&](const Action& p, const Interval& iv) {
      const double act = costs[static_cast<size_t>(p.stage)].activation;
      const double keep = act * model.weight_grad_memory;
      switch (p.kind) {
        case ActionKind::F:
          change(iv.start, act);
          break;
        case ActionKind::B:
          change(iv.end, -act);
          break;
        case ActionKind::I:
          change(iv.end, -(act - keep));
          break;
        case ActionKind::W:
          if (keep != 0) change(iv.end, -keep);
          break;
        default:
          break;
      }
    };
    for (size_t i = 0; i < acts.size(); ++i) {
      const Action& a = acts[i];
      const Interval& iv = times[i];
      sim.makespan = std::max(sim.makespan, iv.end);
      if (is_comm(a.kind)) {
        if (is_send(a.kind)) {
          ++sim.messages;
          sim.comm_bytes += model.message_bytes;
        }
        continue;
      }
      sim.busy[static_cast<size_t>(r)] += iv.end - iv.start;
      for_each_part(a, [&](const Action& p) { apply(p, iv); });
    }
  }
  sim.first_start.assign(static_cast<size_t>(pp), 0.0);
  sim.last_end.assign(static_cast<size_t>(pp), 0.0);
  sim.param_memory.assign(static_cast<size_t>(pp), 0.0);
  for (int r = 0; r < pp; ++r) {
    const size_t ru = static_cast<size_t>(r);
    const auto& acts = plan.lowered[ru];
    const auto& times = ex.times[ru];
    size_t first = 0, last = acts.size();
    while (first < acts.size() && is_comm(acts[first].kind)) ++first;
    while (last > first && is_comm(acts[last - 1].kind)) --last;
    if (first < last) {
      sim.first_start[ru] = times[first].start;
      sim.last_end[ru] = times[last - 1].end;
      sim.steady_period = std::max(sim.steady_period, sim.last_end[ru] - sim.first_start[ru]);
    }
    for (int s : plan.placement.rank_stages[ru])
      sim.param_memory[ru] += costs[static_cast<size_t>(s)].params;
  }
  sim.rank_bubble.assign(static_cast<size_t>(pp), 0.0);
  double total_busy = 0;
  for (int r = 0; r < pp; ++r) {
    total_busy += sim.busy[static_cast<size_t>(r)];
    sim.rank_bubble[static_cast<size_t>(r)] =
        sim.makespan > 0 ? 1.0 - sim.busy[static_cast<size_t>(r)] / sim.makespan : 0.0;
  }
  sim.bubble = sim.makespan > 0 ? 1.0 - total_busy / (pp * sim.makespan) : 0.0;
  sim.steady_bubble = sim.steady_period > 0 ? 1.0 - total_busy / (pp * sim.steady_period) : 0.0;
  sim.times = std::move(ex.times);
  return sim;
}

}  // namespace ppc

#include "compiler/simulate.h"

#include <fmt/format.h>

#include <algorithm>

#include "compiler/diagnostic.h"
#include "compiler/measured_costs.h"

namespace ppc {

std::vector<StageCost> stage_costs(const Plan& plan, const CostModel& model) {
  std::vector<StageCost> out(static_cast<size_t>(plan.num_stages()));
  if (model.unit) return out;
  if (model.measured) return measured_stage_costs(plan, model);
  for (int s = 0; s < plan.num_stages(); ++s) {
    const auto& layers = plan.layout.stages[static_cast<size_t>(plan.layout_stage(s))];
    StageCost c{0, 0, 0, 0, 0, 0, 0};
    if (layers.empty()) {
      const LayerCost& e = model.empty_stage;
      c = StageCost{e.f, e.backward(), e.i, e.w, e.activation, e.params, e.optimizer};
    }
    for (LayerKind k : layers) {
      const LayerCost& l = model.layer(k);
      c.f += l.f;
      c.b += l.backward();
      c.i += l.i;
      c.w += l.w;
      c.activation += l.activation;
      c.params += l.params;
      c.optimizer += l.optimizer;
    }
    out[static_cast<size_t>(s)] = c;
  }
  return out;
}

std::vector<double> rank_starts(const Plan& plan, const std::vector<StageCost>& costs) {
  std::vector<double> out(static_cast<size_t>(plan.pp()), 0.0);
  bool any = false;
  for (int r = 0; r < plan.pp(); ++r)
    for (int s : plan.placement.rank_stages[static_cast<size_t>(r)]) {
      out[static_cast<size_t>(r)] += costs[static_cast<size_t>(s)].optimizer;
      any |= costs[static_cast<size_t>(s)].optimizer > 0;
    }
  if (!any) out.clear();
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

MessageModel message_model_of_transport(const std::string& transport) {
  return transport == "gloo" ? MessageModel::Eager : MessageModel::Rendezvous;
}

Simulation simulate(const Plan& plan, const CostModel& model) {
  PPC_INTERNAL_ASSERT(plan.is_lowered(), "simulate needs a lowered plan");
  SimulationRun run(plan, model, true);
  if (model.messages == MessageModel::Eager) return run.finish_eager();
  Execution ex = execute(plan, &run.costs(), true);
  if (!ex.finished()) throw UserError("the plan does not run to completion: " + ex.failure());
  return run.finish(std::move(ex));
}

SimulationRun::SimulationRun(const Plan& plan, const CostModel& model, bool timeline)
    : plan_(plan), model_(model), timeline_(timeline), costs_(stage_costs(plan, model)) {
  const size_t pp = static_cast<size_t>(plan.pp());
  exec_.compute = [this](const Action& a, int) { return action_cost(a, costs_, model_); };
  exec_.begin = rank_starts(plan, costs_);  // the previous step's optimizer, rank by rank
  if (model.measured) {                     // per-boundary message times
    messages_ = message_costs(plan, model);
    exec_.transfer = [this](const Action& send) {
      return messages_.time[2 * static_cast<size_t>(send.stage) + (send.kind == ActionKind::SendB)];
    };
  } else if (const double per_message = message_time(model); per_message > 0) {
    exec_.transfer = [per_message](const Action&) { return per_message; };
  }
  // The memory timeline needs each change's time; the totals, and without a timeline the peaks
  // (which follow from each rank's order alone), need no call per action: see finish(). Under the
  // eager model finish() times the plan itself (the run it is given is the verifier's).
  if (timeline && model.messages == MessageModel::Rendezvous)
    exec_.on_compute = [this](int r, const Action& a, double start, double end) {
      for_each_part(a, [&](const Action& p) { change_memory(r, p, start, end); });
    };
  sim_.unit = model.unit;
  sim_.peak_memory.assign(pp, 0.0);
  mem_.assign(pp, 0.0);
  if (timeline) {
    sim_.memory.assign(pp, {});
    for (size_t r = 0; r < pp; ++r) {
      auto& points = sim_.memory[r];
      points.reserve(2 * plan.compute[r].size() + 1);  // at most a rise and a fall each
      points.push_back({0, 0});
    }
  }
}

// A rise at a forward's start, a fall at a backward's end, in the order the rank runs them.
void SimulationRun::change_memory(int r, const Action& p, double start, double end) {
  const size_t ru = static_cast<size_t>(r);
  double& mem = mem_[ru];
  double& peak = sim_.peak_memory[ru];
  auto change = [&](double t, double delta) {
    mem += delta;
    if (mem < 1e-12 && mem > -1e-12) mem = 0;
    if (timeline_) {
      auto& points = sim_.memory[ru];
      if (!points.empty() && points.back().time == t)
        points.back().value = mem;
      else
        points.push_back({t, mem});
    }
    peak = std::max(peak, mem);
  };
  const double act = costs_[static_cast<size_t>(p.stage)].activation;
  const double keep = act * model_.weight_grad_memory;
  switch (p.kind) {
    case ActionKind::F:
      change(start, act);
      break;
    case ActionKind::B:
      change(end, -act);
      break;
    case ActionKind::I:
      change(end, -(act - keep));
      break;
    case ActionKind::W:
      if (keep != 0) change(end, -keep);
      break;
    default:
      break;
  }
}

Simulation SimulationRun::finish(Execution&& ex) {
  PPC_INTERNAL_ASSERT(ex.finished() && ex.end.size() == static_cast<size_t>(plan_.pp()),
                      "SimulationRun::finish needs a finished run with costs");
  // The verifier's run (the deadlock model) proved the plan; under the eager model its times are
  // not the ones wanted.
  if (model_.messages == MessageModel::Eager) return finish_eager();
  return finish_timed(std::move(ex));
}

Simulation SimulationRun::finish_eager() {
  ExecCosts costs = exec_;
  if (timeline_)
    costs.on_compute = [this](int r, const Action& a, double start, double end) {
      for_each_part(a, [&](const Action& p) { change_memory(r, p, start, end); });
    };
  EagerOptions options;
  if (model_.post > 0) options.post = {model_.post};
  options.start = exec_.begin;
  Execution ex = execute_eager(plan_, costs, timeline_, options);
  if (!ex.finished()) throw UserError("the plan does not run to completion: " + ex.failure());
  return finish_timed(std::move(ex));
}

Simulation SimulationRun::finish_timed(Execution&& ex) {
  const int pp = plan_.pp();
  if (!timeline_)  // the peaks: the same changes in the same order, without their times
    for (int r = 0; r < pp; ++r)
      for (const Action& a : plan_.compute[static_cast<size_t>(r)])
        for_each_part(a, [&](const Action& p) { change_memory(r, p, 0, 0); });
  Simulation sim = std::move(sim_);
  sim.busy = std::move(ex.busy);
  sim.first_start = std::move(ex.first_start);
  sim.last_end = std::move(ex.last_end);
  // Every action of a rank ends by the time the rank has finished: the makespan is the latest.
  for (double e : ex.end) sim.makespan = std::max(sim.makespan, e);
  sim.messages = ex.sends;
  if (model_.measured) {  // per-boundary message sizes
    for (const auto& order : plan_.lowered)
      for (const Action& a : order)
        if (is_send(a.kind))
          sim.comm_bytes +=
              messages_.bytes[2 * static_cast<size_t>(a.stage) + (a.kind == ActionKind::SendB)];
  } else {
    for (size_t i = 0; i < ex.sends; ++i) sim.comm_bytes += model_.message_bytes;
  }
  sim.start = exec_.begin;
  sim.param_memory.assign(static_cast<size_t>(pp), 0.0);
  for (int r = 0; r < pp; ++r) {
    const size_t ru = static_cast<size_t>(r);
    if (!plan_.compute[ru].empty())  // it ran compute actions
      sim.steady_period = std::max(sim.steady_period, sim.last_end[ru] - sim.first_start[ru]);
    for (int s : plan_.placement.rank_stages[ru])
      sim.param_memory[ru] += costs_[static_cast<size_t>(s)].params;
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
  if (timeline_) sim.times = std::move(ex.times);
  return sim;
}

}  // namespace ppc

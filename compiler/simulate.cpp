#include "compiler/simulate.h"

#include <algorithm>
#include <optional>

#include "compiler/diagnostic.h"
#include "compiler/lengths.h"
#include "compiler/measured_costs.h"

namespace ppc {

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
      return messages_.time[MessageCosts::index(send)];
    };
  } else if (const double per_message = message_time(model); per_message > 0) {
    exec_.transfer = [per_message](const Action&) { return per_message; };
  }
  if (!model.microbatch_lengths.empty()) {  // each microbatch at its length (lengths.h)
    lengths_ = std::make_shared<LengthCosts>(plan, model);
    sim_.lengths = describe_lengths(plan, model);
    exec_.compute = [this](const Action& a, int) { return lengths_->action_cost(a, model_); };
    if (exec_.transfer) {
      const double latency = model.latency;
      exec_.transfer = [this, latency, blind = std::move(exec_.transfer)](const Action& send) {
        return lengths_->transfer(send, blind(send), latency);
      };
    }
  }
  // The memory timeline needs each change's time; the totals, and without a timeline the peaks
  // (which follow from each rank's order alone), need no call per action: see finish(). Under the
  // eager model finish() times the plan itself (the run it is given is the verifier's).
  if (timeline && model.messages == MessageModel::Rendezvous)
    exec_.on_compute = [this](int r, const Action& a, double start, double end) {
      run_action(r, a, start, end);
    };
  sim_.unit = model.unit;
  sim_.peak_memory.assign(pp, 0.0);
  sim_.peak_held.assign(pp, 0.0);
  mem_.assign(pp, 0.0);
  held_now_.assign(pp, 0.0);
  next_.assign(pp, 0);
  if (timeline) {
    sim_.memory.assign(pp, {});
    for (size_t r = 0; r < pp; ++r) {
      auto& points = sim_.memory[r];
      points.reserve(2 * plan.compute[r].size() + 1);  // at most a rise and a fall each
      points.push_back({0, 0});
    }
  }
}

// Offloading (pprun, runtime/train/slot_offload.h): when a compute action starts, the offloaded
// part of the rank's next B or I starts back, so it is held from then on.
void SimulationRun::run_action(int r, const Action& a, double start, double end) {
  const size_t ru = static_cast<size_t>(r);
  const std::vector<Action>& order = plan_.compute[ru];
  const size_t k = next_[ru]++;
  PPC_INTERNAL_ASSERT(k < order.size(), "a rank's compute actions in its order");
  const Action* next = k + 1 < order.size() ? &order[k + 1] : nullptr;
  const bool kept = next && own_backward_next(a, *next);
  if (const std::optional<Action> b = next ? backward_run(*next) : std::nullopt; b && !kept) {
    const StageCost& c =
        lengths_ ? lengths_->cost(b->stage, b->microbatch) : costs_[static_cast<size_t>(b->stage)];
    if (c.forward_transient != 0) {
      mem_change(r, start, c.forward_transient);
      held_change(r, c.forward_transient);
    }
  }
  for_each_part(a, [&](const Action& p) { change_memory(r, p, start, end, kept); });
}

void SimulationRun::mem_change(int r, double t, double delta) {
  const size_t ru = static_cast<size_t>(r);
  double& mem = mem_[ru];
  mem += delta;
  if (mem < 1e-12 && mem > -1e-12) mem = 0;
  if (timeline_) {
    auto& points = sim_.memory[ru];
    if (!points.empty() && points.back().time == t)
      points.back().value = mem;
    else
      points.push_back({t, mem});
  }
  sim_.peak_memory[ru] = std::max(sim_.peak_memory[ru], mem);
}

void SimulationRun::held_change(int r, double delta) {
  double& held = held_now_[static_cast<size_t>(r)];
  held += delta;
  sim_.peak_held[static_cast<size_t>(r)] = std::max(sim_.peak_held[static_cast<size_t>(r)], held);
}

// A rise at a forward's start, a fall at a backward's end (the kind's Memory), in the order the
// rank runs them.
void SimulationRun::change_memory(int r, const Action& p, double start, double end, bool stays) {
  auto change = [&](double t, double delta) { mem_change(r, t, delta); };
  // Under a memory mode (memory_costs.h) a stage keeps `activation` from F to its backward, and
  // holds its transients while an F (offloaded after it) or a B or I (recomputed or fetched back
  // before it) runs; what an I leaves for its W is a share of the whole activation. The offloaded
  // part (`forward_transient`) is back from the start of the action before the B or I (run_action),
  // or never left (`stays`); a B or I itself rebuilds the recomputed part.
  const StageCost& c =
      lengths_ ? lengths_->cost(p.stage, p.microbatch) : costs_[static_cast<size_t>(p.stage)];
  const double act = c.activation, whole = act + c.transient;
  const double keep = whole * model_.weight_grad_memory;
  const double rebuilt = c.transient - c.forward_transient;  // recomputed in the B or I
  auto hold = [&](double delta) { held_change(r, delta); };
  switch (kind_info(p.kind).memory) {
    case Memory::Holds:
      change(start, act + c.forward_transient);
      if (c.forward_transient != 0 && !stays) change(end, -c.forward_transient);
      hold(act + (stays ? c.forward_transient : 0.0));
      break;
    case Memory::Frees:
      if (rebuilt != 0) change(start, rebuilt);
      change(end, -whole);
      hold(-act - c.forward_transient);
      break;
    case Memory::FreesInput:
      if (rebuilt != 0) change(start, rebuilt);
      change(end, -(whole - keep));
      hold(keep - act - c.forward_transient);
      break;
    case Memory::FreesWeight:
      if (keep != 0) change(end, -keep);
      hold(-keep);
      break;
    case Memory::None:
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
      run_action(r, a, start, end);
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
      for (const Action& a : plan_.compute[static_cast<size_t>(r)]) run_action(r, a, 0, 0);
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
          sim.comm_bytes += messages_.bytes[MessageCosts::index(a)] *
                            (lengths_ ? lengths_->scale(a.microbatch) : 1.0);
  } else {
    if (lengths_)
      for (const auto& order : plan_.lowered)
        for (const Action& a : order)
          if (is_send(a.kind))
            sim.comm_bytes += model_.message_bytes * lengths_->scale(a.microbatch);
    if (!lengths_)
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

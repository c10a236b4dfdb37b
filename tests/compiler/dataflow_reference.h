// A reference for the simulator's timing, independent of lowering and of the deadlock model.
#pragma once

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

#include "compiler/plan.h"
#include "compiler/simulate.h"

namespace ppc {

// The makespan of the compute orders when sends never block (asynchronous point-to-point, the
// model the published formulas assume): every action starts when its rank is free and its
// inputs exist. Independent of lowering and of the deadlock model.
inline double dataflow_makespan(const Plan& plan, const CostModel& model) {
  const auto sc = stage_costs(plan, model);
  std::map<std::tuple<int, int, int>, double> done;  // (0 = F, 1 = B/I; stage; mb) -> end time
  std::vector<size_t> pos(static_cast<size_t>(plan.pp()), 0);
  std::vector<double> free_at(static_cast<size_t>(plan.pp()), 0);
  auto input_time = [&](const Action& a, double* t) {
    auto need = [&](int ev, int s, int mb) {
      auto it = done.find({ev, s, mb});
      if (it == done.end()) return false;
      *t = std::max(*t, it->second);
      return true;
    };
    if (a.kind == ActionKind::F)
      return plan.prev_stage(a.stage) < 0 || need(0, plan.prev_stage(a.stage), a.microbatch);
    if (a.kind == ActionKind::W) return need(1, a.stage, a.microbatch);
    return need(0, a.stage, a.microbatch) &&
           (plan.next_stage(a.stage) < 0 || need(1, plan.next_stage(a.stage), a.microbatch));
  };
  double makespan = 0;
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < plan.pp(); ++r) {
      const auto& order = plan.compute[static_cast<size_t>(r)];
      size_t& i = pos[static_cast<size_t>(r)];
      while (i < order.size()) {
        const Action& a = order[i];
        double start = free_at[static_cast<size_t>(r)];
        if (a.kind == ActionKind::OverlapFB) {
          const Action f = a.forward_part(), b = a.backward_part();
          double tb = start;
          if (!input_time(f, &start)) break;
          done[{0, f.stage, f.microbatch}] = start;  // the backward may need this forward
          const bool ok = input_time(b, &tb);
          done.erase({0, f.stage, f.microbatch});
          if (!ok) break;
          start = std::max(start, tb);
        } else if (!input_time(a, &start)) {
          break;
        }
        const double end = start + action_cost(a, sc, model);
        if (a.kind == ActionKind::OverlapFB) {
          done[{0, a.stage, a.microbatch}] = end;
          done[{1, a.stage2, a.microbatch2}] = end;
        } else if (a.kind != ActionKind::W) {
          done[{a.kind == ActionKind::F ? 0 : 1, a.stage, a.microbatch}] = end;
        }
        free_at[static_cast<size_t>(r)] = end;
        makespan = std::max(makespan, end);
        ++i;
        progress = true;
      }
    }
  }
  return makespan;
}

}  // namespace ppc

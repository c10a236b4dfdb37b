// --schedule Auto's improvement passes (synthesize_improve.h).
#include "compiler/synthesize_improve.h"

#include <algorithm>
#include <cmath>

#include "compiler/lower_bound.h"
#include "compiler/lower_for_model.h"
#include "compiler/simulate.h"

namespace ppc::synthesis {

namespace {

// The rank whose last compute ends last (the lowest on a tie).
size_t last_ending_rank(const Simulation& sim) {
  size_t r = 0;
  for (size_t q = 1; q < sim.last_end.size(); ++q)
    if (sim.last_end[q] > sim.last_end[r]) r = q;
  return r;
}

// One rank's order with the oldest `k` Ws of the run of Ws that ends it moved earlier: one after
// every `gap`-th of its actions that are not Ws, starting `skip` of them before that run and going
// back (each W goes only where its own I ran before it). Returns false if none could move.
bool hoist_tail_ws(std::vector<Action>& order, size_t k, size_t skip, size_t gap) {
  size_t tail = order.size();
  while (tail > 0 && order[tail - 1].kind == ActionKind::W) --tail;
  const size_t in_tail = order.size() - tail;
  k = std::min(k, in_tail);
  std::vector<size_t> after;  // insertion points: after these positions, ascending
  size_t seen = 0;
  for (size_t j = tail; j-- > 0 && after.size() < k;)
    if (order[j].kind != ActionKind::W && seen++ >= skip && (seen - 1 - skip) % gap == 0)
      after.push_back(j);
  std::reverse(after.begin(), after.end());
  // Where each W's I ran (the order has one I, or an OVERLAP_F_B holding it, per W).
  std::vector<size_t> i_at(in_tail, order.size());
  for (size_t j = 0; j < tail; ++j)
    for_each_part(order[j], [&](const Action& p) {
      if (p.kind != ActionKind::I) return;
      for (size_t q = 0; q < in_tail; ++q)
        if (order[tail + q].stage == p.stage && order[tail + q].microbatch == p.microbatch)
          i_at[q] = j;
    });
  std::vector<Action> out;
  out.reserve(order.size());
  std::vector<bool> moved(in_tail, false);
  size_t point = 0;
  bool any = false;
  for (size_t j = 0; j < tail; ++j) {
    out.push_back(order[j]);
    if (point < after.size() && after[point] == j) {
      ++point;
      for (size_t q = 0; q < in_tail; ++q)  // the oldest W not moved yet that may run here
        if (!moved[q] && i_at[q] <= j) {
          out.push_back(order[tail + q]);
          moved[q] = any = true;
          break;
        }
    }
  }
  for (size_t q = 0; q < in_tail; ++q)
    if (!moved[q]) out.push_back(order[tail + q]);
  order = std::move(out);
  return any;
}

// Ws that outlast the pace-setting rank (the one with the largest lower bound). A rank that kept
// its Ws back while its forwards and backwards kept it busy may end with a run of Ws that goes on
// after the pace-setting rank has finished. Then the oldest Ws of each such run (as many as the
// overrun takes) move earlier, spread among the rank's other actions at a few depths and spacings;
// the best of these, when it makes the plan shorter, is kept, and the search repeats from it.
// Ws send nothing, so every exchange keeps its order and lowering cannot get stuck on the result;
// a W moved earlier frees its memory earlier, so the peak does not grow.
Scored move_w_tails(Scored best, const SynthesisOptions& opts, int rounds, int& scored) {
  if (opts.cost.unit) return best;
  const std::vector<StageCost> c = stage_costs(best.plan, opts.cost);
  const int pace = makespan_lower_bound(best.plan, opts.cost).rank;
  for (int round = 0; round < rounds; ++round) {
    const Simulation sim = lower_and_simulate(best.plan, opts.cost).sim;
    const double target = sim.last_end[static_cast<size_t>(pace)];
    Search search(opts);
    for (const double depth : {0.25, 0.5, 0.75})
      for (const size_t gap : {1, 2}) {
        Plan next = best.plan;
        bool moved = false;
        for (int r = 0; r < next.pp(); ++r) {
          const size_t ru = static_cast<size_t>(r);
          std::vector<Action>& order = next.compute[ru];
          const double over = sim.last_end[ru] - target;
          if (r == pace || over <= 0 || order.empty() || order.back().kind != ActionKind::W)
            continue;
          const double w = c[static_cast<size_t>(order.back().stage)].w;
          const size_t k = static_cast<size_t>(std::ceil(over / std::max(w, 1e-12)));
          size_t others = 0;
          for (const Action& a : order) others += a.kind != ActionKind::W;
          moved |= hoist_tail_ws(order, k, static_cast<size_t>(depth * others), gap);
        }
        if (moved) search.score(std::move(next), best.what + ", Ws moved from the tails");
      }
    scored += search.scored();
    if (!search.best() || !better(*search.best(), best)) break;
    best = *search.best();
  }
  return best;
}

// Where rank `order`'s W at `w` may go: at or after the position just past its own I (or the
// OVERLAP_F_B holding it).
size_t earliest_w_slot(const std::vector<Action>& order, size_t w) {
  for (size_t j = w; j-- > 0;) {
    bool found = false;
    for_each_part(order[j], [&](const Action& p) {
      found |= p.kind == ActionKind::I && p.stage == order[w].stage &&
               p.microbatch == order[w].microbatch;
    });
    if (found) return j + 1;
  }
  return 0;
}

// Waits on the rank that ends last, filled with Ws. Where that rank's compute action starts later
// than its previous one ended (its input still on the way, or a message batch), a W that runs
// later (the next one after it, or the first of its closing run of Ws) moves to just before it,
// so the rank works while it waits and the messages that arrive meanwhile share one batch. A move
// is kept when the plan still fits and gets shorter, or keeps its makespan and that rank ends
// earlier (another rank may end at the same time); the largest waits are tried first, and the
// pass stops when no move helps or after `evaluations` tries. A W sends nothing and frees memory:
// every exchange keeps its place in each rank's order (lowering cannot get stuck on the result)
// and the peak does not grow.
Scored fill_waits(Scored best, const SynthesisOptions& opts, int evaluations, int& scored) {
  if (opts.cost.unit) return best;
  constexpr size_t kWaitsTried = 8;
  const std::vector<StageCost> c = stage_costs(best.plan, opts.cost);
  LoweredPlan now = lower_and_simulate(best.plan, opts.cost);
  while (evaluations > 0) {
    const Plan& lowered = now.plan;
    const Simulation& sim = now.sim;
    const size_t r = last_ending_rank(sim);
    // (wait, index in the compute order) of r's compute actions that start after a wait.
    std::vector<std::pair<double, size_t>> waits;
    double prev_end = -1;
    size_t k = 0;
    for (size_t j = 0; j < lowered.lowered[r].size(); ++j) {
      if (!is_compute(lowered.lowered[r][j].kind)) continue;
      const Interval& t = sim.times[r][j];
      if (prev_end >= 0 && t.start > prev_end + 1e-9 * sim.makespan)
        waits.emplace_back(t.start - prev_end, k);
      prev_end = t.end;
      ++k;
    }
    std::stable_sort(waits.begin(), waits.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    if (waits.size() > kWaitsTried) waits.resize(kWaitsTried);
    const std::vector<Action>& order = best.plan.compute[r];
    size_t tail = order.size();
    while (tail > 0 && order[tail - 1].kind == ActionKind::W) --tail;
    bool improved = false;
    for (const auto& entry : waits) {
      const size_t q = entry.second;  // (a lambda below cannot capture a structured binding)
      std::vector<size_t> tried;
      // The next W after q, the first of the closing run, the shortest after q (the first such).
      auto may_move = [&](size_t w) {
        return order[w].kind == ActionKind::W && earliest_w_slot(order, w) <= q;
      };
      size_t shortest = order.size();
      for (size_t w = q + 1; w < order.size(); ++w)
        if (may_move(w) &&
            (shortest == order.size() || c[static_cast<size_t>(order[w].stage)].w <
                                             c[static_cast<size_t>(order[shortest].stage)].w))
          shortest = w;
      for (size_t from : {q + 1, std::max(tail, q + 1), shortest}) {
        size_t w = from;
        while (w < order.size() && !may_move(w)) ++w;
        if (w >= order.size() || std::find(tried.begin(), tried.end(), w) != tried.end()) continue;
        tried.push_back(w);
        Plan next = best.plan;
        std::vector<Action>& o = next.compute[r];
        const Action moved = o[w];
        o.erase(o.begin() + static_cast<std::ptrdiff_t>(w));
        o.insert(o.begin() + static_cast<std::ptrdiff_t>(q), moved);
        --evaluations;
        ++scored;
        Tried t = try_order(next, opts);
        const Simulation& s = t.lowered.sim;
        const bool shorter =
            s.makespan < best.makespan * (1 - 1e-12) ||
            (s.makespan <= best.makespan && s.last_end[r] < sim.last_end[r] - 1e-9 * sim.makespan);
        if ((t.fits || !best.fits) && shorter) {
          adopt(best, std::move(next), t);
          now = std::move(t.lowered);
          improved = true;
          break;
        }
      }
      if (improved) break;
    }
    if (!improved) break;
    if (best.what.find("waits filled") == std::string::npos) best.what += ", waits filled with Ws";
  }
  return best;
}

// Split backwards joined where that helps: on the rank that ends last, an I of a stage whose B is
// shorter than its I + W becomes a B in its place and its W goes, latest I first; a change is kept
// when the plan still fits and gets shorter (a B sends what its I sent, from the same place in the
// order, and a W sends nothing, so lowering cannot get stuck on the result). Where the rank has
// time to spare the held-back W fills it and the split wins; where it has none the B saves the
// difference. Stops when no change helps or after `evaluations` tries.
Scored join_backwards(Scored best, const SynthesisOptions& opts, int evaluations, int& scored) {
  if (opts.cost.unit) return best;
  const std::vector<StageCost> c = stage_costs(best.plan, opts.cost);
  if (std::none_of(c.begin(), c.end(),
                   [](const StageCost& k) { return k.whole_backward_shorter(); }))
    return best;
  Simulation sim = lower_and_simulate(best.plan, opts.cost).sim;
  while (evaluations > 0) {
    const size_t r = last_ending_rank(sim);
    const std::vector<Action>& order = best.plan.compute[r];
    bool improved = false;
    for (size_t j = order.size(); j-- > 0 && evaluations > 0;) {
      const Action& a = order[j];
      if (a.kind != ActionKind::I || !c[static_cast<size_t>(a.stage)].whole_backward_shorter())
        continue;
      Plan next = best.plan;
      std::vector<Action>& o = next.compute[r];
      const auto w = std::find_if(
          o.begin() + static_cast<std::ptrdiff_t>(j) + 1, o.end(), [&](const Action& x) {
            return x.kind == ActionKind::W && x.stage == a.stage && x.microbatch == a.microbatch;
          });
      if (w == o.end()) continue;
      o.erase(w);
      o[j] = Action::compute(ActionKind::B, a.stage, a.microbatch);
      --evaluations;
      ++scored;
      Tried t = try_order(next, opts);
      if ((t.fits || !best.fits) && t.lowered.sim.makespan < best.makespan * (1 - 1e-12)) {
        adopt(best, std::move(next), t);
        sim = std::move(t.lowered.sim);
        improved = true;
        break;
      }
    }
    if (!improved) break;
    if (best.what.find("backwards joined") == std::string::npos)
      best.what += ", split backwards joined into Bs";
  }
  return best;
}

}  // namespace

// The Ws of `s` moved (move_w_tails, then fill_waits), and split backwards joined where a B is
// shorter (join_backwards), until none makes it shorter.
Scored improve(Scored s, const SynthesisOptions& opts, int& scored) {
  for (int pass = 0; pass < 4; ++pass) {
    const double before = s.makespan;
    s = fill_waits(move_w_tails(std::move(s), opts, 3, scored), opts, 120, scored);
    s = join_backwards(std::move(s), opts, 120, scored);
    if (!(s.makespan < before)) break;
  }
  return s;
}

}  // namespace ppc::synthesis

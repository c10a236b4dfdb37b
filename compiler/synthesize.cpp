// --schedule Auto: the search over list-scheduling policies and placements (synthesize.h).
#include "compiler/synthesize.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "compiler/diagnostic.h"
#include "compiler/lower_bound.h"
#include "compiler/lower_for_model.h"
#include "compiler/simulate.h"

namespace ppc {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Scored {
  Plan plan;  // compute order
  double makespan = kInf;
  double peak_total = kInf;
  bool fits = false;
  std::string what;
};

// Better: fits the limit, then shorter, then less memory.
bool better(const Scored& a, const Scored& b) {
  if (a.fits != b.fits) return a.fits;
  if (!a.fits) return a.peak_total < b.peak_total;
  if (a.makespan != b.makespan) return a.makespan < b.makespan * (1 - 1e-12);
  return a.peak_total < b.peak_total;
}

class Search {
 public:
  Search(const SynthesisOptions& opts) : opts_(opts) {}

  void score(Plan plan, std::string what) {
    Scored s;
    const Plan lowered = lower_for_model(plan, opts_.cost);
    const Simulation sim = simulate(lowered, opts_.cost);
    s.makespan = sim.makespan;
    s.peak_total = 0;
    for (size_t r = 0; r < sim.peak_memory.size(); ++r)
      s.peak_total = std::max(s.peak_total, sim.peak_memory[r] + sim.param_memory[r]);
    s.fits = !opts_.memory_limit || s.peak_total <= *opts_.memory_limit;
    s.plan = std::move(plan);
    s.what = std::move(what);
    ++scored_;
    if (!best_ || better(s, *best_)) best_ = std::move(s);
  }

  const std::optional<Scored>& best() const { return best_; }
  int scored() const { return scored_; }

 private:
  const SynthesisOptions& opts_;
  std::optional<Scored> best_;
  int scored_ = 0;
};

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
    const Simulation sim = simulate(lower_for_model(best.plan, opts.cost), opts.cost);
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

// The plan skeleton of Auto on `style`: what plan_skeleton checks, on that placement.
Plan skeleton(const SynthesisOptions& o, PlacementStyle style) {
  ScheduleInfo info = auto_schedule();
  info.placement = style;
  CompileOptions co;
  co.layout = o.layout;
  co.has_model = o.has_model;
  co.num_layers = o.num_layers;
  co.pp = o.pp;
  co.vpp = o.vpp;
  co.schedule = info.name;
  co.microbatches = o.microbatches;
  return plan_skeleton(co, info);
}

// The policies tried on every placement: a set that between them gave the best order found by
// trying every combination of the options (768 of them) on a grid of configurations (uniform and
// DeepSeek-V3 costs, pp 4-32, 1-4 stages per rank, 8-64 microbatches, with and without memory
// limits); each was the best on some configuration. Options that do nothing without overlaps are
// dropped when the costs have none, and the duplicates this makes are removed.
std::vector<ListPolicy> policies(const CostModel& cost, int pp) {
  struct Row {
    bool split, pair_b, new_last, bwd_deep, fwd_deep, w_first;
    int held_w;   // max_held_w
    double wait;  // partner_wait
    int cap;      // max_in_flight in units of pp (0: none)
  };
  static const Row kRows[] = {
      {true, false, true, false, true, false, 0, 0, 1},
      {true, true, true, true, true, false, 0, 0, 0},
      {true, true, true, false, true, false, 0, 0, 0},
      {false, true, true, true, true, true, 0, 1, 0},
      {true, true, true, true, true, false, 0, 0, 2},
      {true, false, true, false, true, false, 0, 0, 2},
      {false, true, false, false, true, true, 0, 1, 2},
      {true, true, true, false, true, true, 0, 0, 1},
      {true, true, false, true, true, true, 0, 0, 0},
      {true, true, false, false, true, true, 0, 0, 0},
      {true, false, true, false, false, true, 8, 0, 2},
  };
  const bool overlaps = !cost.unit && cost.overlap > 0;
  std::vector<ListPolicy> out;
  std::vector<std::string> seen;
  for (const Row& row : kRows) {
    ListPolicy p;
    p.split_backward = row.split;
    p.overlap = overlaps;
    p.pair_full_backward = overlaps && row.pair_b;
    p.pair_new_last = overlaps && row.new_last;
    p.backward_deepest_first = row.bwd_deep;
    p.forward_deepest_first = row.fwd_deep;
    p.w_before_new_forward = row.w_first;
    p.max_held_w = row.held_w;
    p.partner_wait = overlaps ? row.wait : 0;
    p.max_in_flight = row.cap * pp;
    const std::string d = p.describe();
    if (std::find(seen.begin(), seen.end(), d) != seen.end()) continue;
    seen.push_back(d);
    out.push_back(p);
  }
  return out;
}

}  // namespace

const ScheduleInfo& auto_schedule() {
  static const ScheduleInfo info{
      "Auto",
      {"Synthesized", "Synthesize"},
      "synthesized for the costs and the memory limit: list scheduling over priorities and "
      "placements (loop, V), the best simulated order (docs/schedules.md)",
      VppRule::Any,
      PlacementStyle::Loop,
      1,
      nullptr};
  return info;
}

bool is_auto(const ScheduleInfo& info) {
  return &info == &auto_schedule();
}

SynthesisResult synthesize(const SynthesisOptions& opts) {
  std::vector<PlacementStyle> styles = opts.placements;
  Plan loop = skeleton(opts, PlacementStyle::Loop);
  if (styles.empty()) {
    styles.push_back(PlacementStyle::Loop);
    if (loop.vpp() == 2) styles.push_back(PlacementStyle::V);
  }
  Search search(opts);
  SynthesisResult res;
  res.lower_bound = kInf;
  Scored best_named;
  std::optional<UserError> no_room;
  for (PlacementStyle style : styles) {
    Plan base = style == PlacementStyle::Loop ? loop : skeleton(opts, style);
    res.lower_bound = std::min(res.lower_bound, makespan_lower_bound(base, opts.cost).value);
    ListScheduleInput in;
    in.skeleton = &base;
    in.cost = &opts.cost;
    if (opts.memory_limit) {
      const std::vector<StageCost> c = stage_costs(base, opts.cost);
      for (int r = 0; r < base.pp(); ++r) {
        double params = 0;
        for (int s : base.placement.rank_stages[static_cast<size_t>(r)])
          params += c[static_cast<size_t>(s)].params;
        in.activation_budget.push_back(*opts.memory_limit - params);
      }
    }
    try {
      for (const ListPolicy& p : policies(opts.cost, base.pp())) {
        Plan plan = base;
        plan.compute = list_schedule(in, p).orders;
        search.score(std::move(plan), fmt::format("list scheduling on {} placement: {}",
                                                  placement_name(style), p.describe()));
      }
    } catch (const UserError& e) {
      if (!no_room) no_room = e;  // this placement leaves no room for a microbatch
    }
    if (!opts.named_candidates) continue;
    for (const ScheduleInfo& info : all_schedules()) {
      if (info.copies != 1 || info.placement != style) continue;
      if (info.vpp_rule == VppRule::One && base.vpp() != 1) continue;
      if (info.vpp_rule == VppRule::Two && base.vpp() != 2) continue;
      Plan plan = base;
      try {
        if (info.check)
          info.check(ScheduleParams{base.pp(), base.vpp(), base.microbatches, &base.placement});
        plan.compute = info.generate(
            ScheduleParams{base.pp(), base.vpp(), base.microbatches, &base.placement});
      } catch (const UserError&) {
        continue;
      }
      Search one(opts);
      one.score(plan, "as " + info.name);
      if (!best_named.plan.placement.pp || better(*one.best(), best_named)) {
        best_named = *one.best();
        best_named.what = info.name;
      }
      search.score(std::move(plan),
                   fmt::format("as {} ({} placement)", info.name, placement_name(style)));
    }
  }
  if (!search.best()) throw *no_room;
  int hoisted = 0;
  const Scored b = move_w_tails(*search.best(), opts, 3, hoisted);
  res.plan = b.plan;
  res.plan.schedule = auto_schedule().name;
  res.makespan = b.makespan;
  res.peak_total = b.peak_total;
  res.fits = b.fits;
  res.chosen = b.what;
  res.candidates = search.scored() + hoisted;
  if (best_named.plan.placement.pp) {
    res.best_named = best_named.what;
    res.best_named_makespan = best_named.makespan;
  }
  return res;
}

Plan compile_auto(const CompileOptions& co) {
  SynthesisOptions o;
  o.layout = co.layout;
  o.has_model = co.has_model;
  o.num_layers = co.num_layers;
  o.pp = co.pp;
  o.vpp = co.vpp;
  o.microbatches = co.microbatches;
  if (co.cost) o.cost = *co.cost;
  o.memory_limit = co.memory_limit;
  return synthesize(o).plan;
}

std::string describe_bound(const Plan& plan, const CostModel& cost, double makespan) {
  const LowerBound lb = makespan_lower_bound(plan, cost);
  const RankBound& r = lb.ranks[static_cast<size_t>(lb.rank)];
  return fmt::format(
      "lower bound   {:g} (rank {}: first backward at {:g}, work {:g}, overlaps save at most "
      "{:g}); makespan {:.3f}x of it",
      lb.value, lb.rank, r.first_backward, r.work, r.max_saving,
      lb.value > 0 ? makespan / lb.value : 1.0);
}

}  // namespace ppc

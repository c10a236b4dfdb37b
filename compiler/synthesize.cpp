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
// How many of the best candidates improve() works on.
constexpr size_t kImproved = 3;

double peak_total(const Simulation& sim) {
  double peak = 0;
  for (size_t r = 0; r < sim.peak_memory.size(); ++r)
    peak = std::max(peak, sim.peak_memory[r] + sim.param_memory[r]);
  return peak;
}

// The rank whose last compute ends last (the lowest on a tie).
size_t last_ending_rank(const Simulation& sim) {
  size_t r = 0;
  for (size_t q = 1; q < sim.last_end.size(); ++q)
    if (sim.last_end[q] > sim.last_end[r]) r = q;
  return r;
}

// A changed order of an improvement pass, lowered and simulated, with its peak and whether it fits.
struct Tried {
  LoweredPlan lowered;
  double peak = 0;
  bool fits = true;
};
Tried try_order(const Plan& plan, const SynthesisOptions& opts) {
  Tried t{lower_and_simulate(plan, opts.cost)};
  t.peak = peak_total(t.lowered.sim);
  t.fits = !opts.memory_limit || t.peak <= *opts.memory_limit;
  return t;
}

struct Scored {
  Plan plan;  // compute order
  double makespan = kInf;
  double peak_total = kInf;
  bool fits = false;
  std::string what;
};

// `best` takes the changed order `plan`, tried as `t`.
void adopt(Scored& best, Plan&& plan, const Tried& t) {
  best.plan = std::move(plan);
  best.makespan = t.lowered.sim.makespan;
  best.peak_total = t.peak;
  best.fits = t.fits;
}

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
    const Tried t = try_order(plan, opts_);
    adopt(s, std::move(plan), t);
    s.what = std::move(what);
    ++scored_;
    // The best few, for improve(): a candidate that times the same as one kept is taken for the
    // same order.
    auto same = [&](const Scored& t) {
      return t.makespan == s.makespan && t.peak_total == s.peak_total && t.fits == s.fits;
    };
    if (std::none_of(top_.begin(), top_.end(), same)) {
      auto at =
          std::find_if(top_.begin(), top_.end(), [&](const Scored& t) { return better(s, t); });
      if (at != top_.end() || top_.size() < kImproved) top_.insert(at, s);
      if (top_.size() > kImproved) top_.pop_back();
    }
    if (!best_ || better(s, *best_)) best_ = std::move(s);
  }

  const std::optional<Scored>& best() const { return best_; }
  // The best kImproved candidates with different timings, best first.
  const std::vector<Scored>& top() const { return top_; }
  int scored() const { return scored_; }

 private:
  const SynthesisOptions& opts_;
  std::optional<Scored> best_;
  std::vector<Scored> top_;
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
// limits); each was the best on some configuration. Each is tried twice, without and with
// `lookahead` (ranks other than the busiest wait for an input that outranks a lone forward; it
// lets the first microbatch's forwards and gradients pass the ranks on their way without waiting
// for a forward of a later one to end). Where a stage's whole backward is shorter than its I + W
// (`full_b_shorter`), the split ones are also tried with Bs on the busiest ranks. Options that do
// nothing without overlaps are dropped when the costs have none, and the duplicates this makes are
// removed.
std::vector<ListPolicy> policies(const CostModel& cost, int pp, bool full_b_shorter) {
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
  for (const bool full_b : {false, true})
    for (const bool lookahead : {false, true})
      for (const Row& row : kRows) {
        if (full_b && (!full_b_shorter || !row.split)) continue;
        ListPolicy p;
        p.busiest_full_b = full_b;
        p.lookahead = lookahead;
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
    // Where some stage's whole backward is shorter than its I + W (measured profiles), the split
    // policies are also tried with Bs on the busiest ranks.
    bool full_b_shorter = false;
    if (!opts.cost.unit)
      for (const StageCost& k : stage_costs(base, opts.cost))
        full_b_shorter |= k.whole_backward_shorter();
    // The list scheduler runs under the cost model's message model. Under the eager one it also
    // runs under the rendezvous: neither gives the better orders everywhere (docs/schedules.md),
    // and every candidate is ranked under the eager model anyway.
    CostModel rendezvous = opts.cost;
    rendezvous.messages = MessageModel::Rendezvous;
    std::vector<const CostModel*> timings{&opts.cost};
    if (!opts.cost.unit && opts.cost.messages == MessageModel::Eager)
      timings.push_back(&rendezvous);
    try {
      for (const CostModel* timing : timings)
        for (const ListPolicy& p : policies(opts.cost, base.pp(), full_b_shorter)) {
          in.cost = timing;
          Plan plan = base;
          plan.compute = list_schedule(in, p).orders;
          search.score(
              std::move(plan),
              fmt::format("list scheduling on {} placement{}: {}", placement_name(style),
                          timings.size() == 1    ? ""
                          : timing == &opts.cost ? " (timed under the eager message model)"
                                                 : " (timed under the rendezvous message model)",
                          p.describe()));
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
  Scored b = *search.best();
  for (const Scored& c : search.top()) {
    Scored i = improve(c, opts, hoisted);
    if (better(i, b)) b = std::move(i);
  }
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

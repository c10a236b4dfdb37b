// --schedule Auto: the search over list-scheduling policies and placements (synthesize.h).
#include "compiler/synthesize.h"

#include <fmt/format.h>

#include <algorithm>

#include "compiler/all_to_all_costs.h"
#include "compiler/diagnostic.h"
#include "compiler/lower_bound.h"
#include "compiler/memory_choice.h"
#include "compiler/simulate.h"
#include "compiler/synthesize_improve.h"
#include "compiler/synthesize_search.h"

namespace ppc {

namespace {

using synthesis::better;
using synthesis::improve;
using synthesis::kInf;
using synthesis::Scored;
using synthesis::Search;

}  // namespace

Plan auto_skeleton(const SynthesisOptions& o, PlacementStyle style) {
  ScheduleInfo info = *find_schedule(kAuto);  // its row of the schedule table
  info.placement = style;
  CompileOptions co;
  co.layout = o.layout;
  co.has_model = o.has_model;
  co.num_layers = o.num_layers;
  co.pp = o.pp;
  co.vpp = o.vpp;
  co.schedule = info.name;
  co.microbatches = o.microbatches;
  co.memory = o.memory;
  co.expert_parallel = o.expert_parallel;
  return plan_skeleton(co, info);
}

std::string ListPolicy::describe() const {
  std::string s = split_backward ? "I/W split" : "full B";
  if (overlap) s += pair_full_backward ? ", overlap (B in pairs)" : ", overlap";
  if (overlap && pair_new_last) s += ", new microbatches pair last";
  s += backward_deepest_first ? ", backward deepest first" : ", backward oldest first";
  s += forward_deepest_first ? ", forward deepest first" : ", forward oldest first";
  s += w_before_new_forward ? ", W before a new microbatch" : ", new microbatch before W";
  if (max_held_w > 0) s += fmt::format(", at most {} Ws held back", max_held_w);
  if (partner_wait > 0) s += fmt::format(", waits {:g}x for a partner", partner_wait);
  if (lookahead) s += ", waits for a deeper input";
  if (split_backward && busiest_full_b) s += ", B on the busiest ranks where shorter";
  if (max_in_flight > 0) s += fmt::format(", at most {} in flight", max_in_flight);
  if (split_backward && w_at_once) s += ", each W right after its I";
  return s;
}

namespace {

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
std::vector<ListPolicy> policies(const CostModel& cost, int pp, bool full_b_shorter,
                                 bool hides_all_to_all, bool w_cannot_wait) {
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
  const bool overlaps = !cost.unit && (cost.overlap > 0 || hides_all_to_all);
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
  // Where what an I keeps for its W cannot wait (memory modes under a limit), each split policy
  // again with every W right after its I.
  if (w_cannot_wait)
    for (size_t k = 0, n = out.size(); k < n; ++k)
      if (out[k].split_backward && !out[k].busiest_full_b) {
        ListPolicy p = out[k];
        p.w_at_once = true;
        out.push_back(p);
      }
  return out;
}

}  // namespace

SynthesisResult synthesize(const SynthesisOptions& opts) {
  std::vector<PlacementStyle> styles = opts.placements;
  Plan loop = auto_skeleton(opts, PlacementStyle::Loop);
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
    Plan base = style == PlacementStyle::Loop ? loop : auto_skeleton(opts, style);
    res.lower_bound = std::min(res.lower_bound, makespan_lower_bound(base, opts.cost).value);
    ListScheduleInput in;
    in.skeleton = &base;
    in.cost = &opts.cost;
    if (opts.memory_limit) {
      const std::vector<StageCost> c = stage_costs(base, opts.cost);
      for (int r = 0; r < base.pp(); ++r) {
        // And the largest transients of a memory mode: a backward's and a forward's (an
        // OVERLAP_F_B runs both).
        double params = 0, transient = 0, forward_transient = 0;
        for (int s : base.placement.rank_stages[static_cast<size_t>(r)]) {
          params += c[static_cast<size_t>(s)].params;
          transient = std::max(transient, c[static_cast<size_t>(s)].transient);
          forward_transient =
              std::max(forward_transient, c[static_cast<size_t>(s)].forward_transient);
        }
        in.activation_budget.push_back(*opts.memory_limit - params - transient - forward_transient);
      }
    }
    // Where some stage's whole backward is shorter than its I + W (measured profiles), the split
    // policies are also tried with Bs on the busiest ranks.
    bool full_b_shorter = false, hides = false, w_cannot_wait = false;
    if (!opts.cost.unit) {
      const std::vector<StageCost> costs = stage_costs(base, opts.cost);
      for (const StageCost& k : costs) {
        full_b_shorter |= k.whole_backward_shorter();
        // Under a memory limit, a memory mode whose I leaves its W more than the stage keeps
        // from its F: the split policies are also tried with each W right after its I.
        w_cannot_wait |= opts.memory_limit && k.transient > 0 &&
                         opts.cost.weight_grad_memory * (k.activation + k.transient) > k.activation;
      }
      hides = hides_all_to_all(costs);
    }
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
        for (const ListPolicy& p :
             policies(opts.cost, base.pp(), full_b_shorter, hides, w_cannot_wait)) {
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
      if (!info.generate || info.copies != 1 || info.placement != style) continue;
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
  res.plan.schedule = kAuto;
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
  o.memory = co.memory;
  o.expert_parallel = co.expert_parallel;
  return synthesize_choosing_memory(o).plan;
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

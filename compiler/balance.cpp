// ppcompile --balance: the split of a model's layers into stages with the shortest simulated
// makespan the search finds (balance.h, docs/balance.md).
#include "compiler/balance.h"

#include <fmt/format.h>
#include <math.h>  // lgamma_r

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>

#include "compiler/compile.h"
#include "compiler/cost_model.h"
#include "compiler/diagnostic.h"
#include "compiler/layout.h"
#include "compiler/measured_costs.h"
#include "compiler/schedule.h"
#include "compiler/synthesize.h"

#include "compiler/balance_evaluator.h"

namespace ppc {

namespace {

using balancing::better;
using balancing::cannot_beat;
using balancing::Evaluator;
using balancing::Score;

// --- the search ----------------------------------------------------------------------------------
class Search {
 public:
  static constexpr int kPatience = 32;

  Search(Evaluator& ev, long long budget, std::function<void(double)> progress)
      : ev_(ev), budget_(budget), progress_(std::move(progress)) {
    // Chains of cuts moved together: all of them for the usual stage counts, fewer when there
    // are thousands of stages (each move's lower bound costs about one pass over the stages).
    const long long S = ev_.stages();
    max_chain_ = static_cast<int>(std::clamp<long long>(40'000'000 / (8 * S * S + 1), 1, S));
  }

  bool out_of_budget() const { return ev_.simulations() >= budget_; }

  // Scores `cuts` and keeps it if it is the best so far.
  void consider(const std::vector<int>& cuts) {
    const bool fresh = !ev_.seen(cuts);
    const Score s = ev_.evaluate(cuts);
    if (fresh && progress_)
      progress_(std::min(1.0, static_cast<double>(ev_.simulations()) / budget_));
    if (best_cuts_.empty() || better(s, best_)) {
      best_ = s;
      best_cuts_ = cuts;
    }
  }

  // Moves of one or more consecutive cuts by one layer, best lower bound first; the first that
  // improves is taken. Ends at a local optimum (no move can improve by its bound), after
  // kPatience moves in a row that do not improve, or when the budget is spent.
  void local_search() {
    const int S = ev_.stages();
    std::vector<StageCost> costs;
    while (!out_of_budget()) {
      std::vector<std::pair<double, std::vector<int>>> moves;
      const std::vector<int> cur = best_cuts_;
      for (int a = 1; a < S; ++a)
        for (int b = a; b < S && b - a < max_chain_; ++b)
          for (int d : {-1, 1}) {
            if (d < 0 && cur[static_cast<size_t>(a)] - 1 < cur[static_cast<size_t>(a) - 1])
              continue;
            if (d > 0 && cur[static_cast<size_t>(b)] + 1 > cur[static_cast<size_t>(b) + 1])
              continue;
            std::vector<int> next = cur;
            for (int k = a; k <= b; ++k) next[static_cast<size_t>(k)] += d;
            if (ev_.seen(next)) continue;
            ev_.costs_of(next, S, costs);
            if (fits_params(costs)) moves.emplace_back(ev_.lower_bound(costs), std::move(next));
          }
      std::stable_sort(moves.begin(), moves.end(),
                       [](const auto& x, const auto& y) { return x.first < y.first; });
      bool improved = false;
      int tried = 0;
      for (const auto& [bound, next] : moves) {
        if (out_of_budget() || tried++ == kPatience) return;
        if (cannot_beat(bound, best_)) break;
        consider(next);
        if (best_cuts_ == next) {
          improved = true;
          break;
        }
      }
      if (!improved) return;
    }
  }

  // Depth-first over the cut positions, pruned by the lower bound (and by parameter memory when
  // a limit is given). Returns true when it went through every split.
  bool branch_and_bound(long long max_nodes) {
    const int S = ev_.stages(), n = ev_.layers();
    std::vector<int> cuts(static_cast<size_t>(S) + 1, 0);
    cuts.back() = n;
    std::vector<StageCost> costs;
    long long nodes = 0;
    bool complete = true;
    // Fixes stage k's end (cuts[k + 1]), given cuts[0..k].
    std::function<void(int)> dfs = [&](int k) {
      if (!complete) return;
      const int from = cuts[static_cast<size_t>(k)];
      for (int to = k == S - 1 ? n : from; to <= n; ++to) {
        if (++nodes > max_nodes || out_of_budget()) {
          complete = false;
          return;
        }
        cuts[static_cast<size_t>(k) + 1] = to;
        ev_.costs_of(cuts, k + 1, costs);
        const bool pruned = !fits_params(costs) || cannot_beat(ev_.lower_bound(costs), best_);
        if (pruned) {
          // Costs only grow with `to` once the stage holds a layer: nothing further can pass.
          if (to > from) break;
          continue;
        }
        if (k == S - 1)
          consider(cuts);
        else
          dfs(k + 1);
        if (!complete) return;
      }
    };
    dfs(0);
    return complete;
  }

  const Score& best() const { return best_; }
  const std::vector<int>& best_cuts() const { return best_cuts_; }
  void set_limit(std::optional<double> limit) { limit_ = limit; }

 private:
  // Parameters alone already over the limit: no such split fits. Only prunes once a split that
  // fits is known (until then every split is a candidate for the smallest overflow).
  bool fits_params(const std::vector<StageCost>& costs) const {
    if (!limit_ || best_cuts_.empty() || best_.overflow > 0) return true;
    return ev_.max_params(costs) <= *limit_;
  }

  Evaluator& ev_;
  long long budget_;
  int max_chain_ = 1;
  std::function<void(double)> progress_;
  std::optional<double> limit_;
  Score best_;
  std::vector<int> best_cuts_;
};

constexpr long long kMaxNodes = 400'000;

// Seeds for several stages per rank: rank r holds one stage of each chunk (loop placement: chunk
// c is stages c*pp .. c*pp+pp-1; V placement: stages r and 2pp-1-r), so if every stage of chunk c
// gets the same share of the weight, every rank gets the same load whatever the shares are. The
// shares follow the near-even ways to give each rank's q = layers / pp layers to its chunks
// (q = 4, vpp 3: 1+1+2 in each order), at most kMaxChunkSeeds of them. Cuts go where the
// prefix weight is nearest each stage's cumulative target.
constexpr size_t kMaxChunkSeeds = 24;
constexpr size_t kChunkSeedsSimulated = 4;

std::vector<std::vector<int>> chunk_seeds(const std::vector<double>& weights, int pp, int vpp,
                                          bool v_placement) {
  std::vector<std::vector<int>> seeds;
  const int n = static_cast<int>(weights.size());
  const int q = n / pp;
  if (vpp < 2 || q < 1) return seeds;
  std::vector<int> parts(static_cast<size_t>(vpp), q / vpp);
  for (int c = 0; c < q % vpp; ++c) ++parts[static_cast<size_t>(vpp - 1 - c)];  // sorted
  std::vector<double> prefix(static_cast<size_t>(n) + 1, 0.0);
  for (int j = 0; j < n; ++j)
    prefix[static_cast<size_t>(j) + 1] =
        prefix[static_cast<size_t>(j)] + weights[static_cast<size_t>(j)];
  const int S = pp * vpp;
  do {
    std::vector<int> cuts(static_cast<size_t>(S) + 1, 0);
    cuts.back() = n;
    double target = 0;
    for (int s = 1; s < S; ++s) {
      // The chunk of stage s - 1 on this placement: V runs chunk 1 from the far end.
      const int c = v_placement ? ((s - 1) < pp ? 0 : 1) : (s - 1) / pp;
      target += prefix.back() * parts[static_cast<size_t>(c)] / (static_cast<double>(q) * pp);
      int j = cuts[static_cast<size_t>(s) - 1];
      while (j < n && std::abs(prefix[static_cast<size_t>(j) + 1] - target) <=
                          std::abs(prefix[static_cast<size_t>(j)] - target))
        ++j;
      cuts[static_cast<size_t>(s)] = j;
    }
    seeds.push_back(std::move(cuts));
  } while (seeds.size() < kMaxChunkSeeds && std::next_permutation(parts.begin(), parts.end()));
  return seeds;
}

// log Γ(x) without a write to the global `signgam`, as std::lgamma does: autotune balances
// several candidates at once on different threads.
double log_gamma(double x) {
  int sign = 0;
  return ::lgamma_r(x, &sign);
}

// log of the number of splits of n layers into S stages (empty allowed): C(n + S - 1, S - 1).
double log_splits(long long n, long long S) {
  return log_gamma(static_cast<double>(n + S)) - log_gamma(static_cast<double>(S)) -
         log_gamma(static_cast<double>(n + 1));
}

std::vector<int> cuts_of(const Layout& layout) {
  std::vector<int> cuts{0};
  for (const auto& stage : layout.stages)
    cuts.push_back(cuts.back() + static_cast<int>(stage.size()));
  return cuts;
}

}  // namespace

std::string describe_balance(const BalanceResult& r) {
  std::string out = fmt::format("balanced      {}\n", r.layout.source);
  out += fmt::format(
      "              makespan {:g}; bottleneck-optimal split {:g} (heaviest stage {:g} per "
      "microbatch); layout as given {}\n",
      r.makespan, r.bottleneck_split_makespan, r.min_bottleneck,
      r.given_makespan ? fmt::format("{:g}", *r.given_makespan)
                       : std::string("- (other stage count)"));
  out += fmt::format("              {} splits simulated (budget {}); {}\n", r.simulations, r.budget,
                     r.proven_optimal ? "optimal: branch and bound went through every split"
                                      : "best found (not proven optimal)");
  if (!r.fits) out += "              no split found fits the memory limit\n";
  return out;
}

int default_balance_vpp(const std::string& schedule, const Layout& layout, int pp) {
  const ScheduleInfo* info = find_schedule(schedule);
  if (info && info->vpp_rule == VppRule::One) return 1;
  if (info && info->vpp_rule == VppRule::Two) return 2;
  const int S = layout.num_stages();
  return pp >= 1 && S % pp == 0 ? S / pp : 1;
}

BalanceResult balance_layout(const BalanceOptions& opts) {
  check_model(opts.layout);
  const ScheduleInfo* info = find_schedule(opts.schedule);
  if (!info)
    throw UserError(fmt::format("unknown schedule '{}' (known: {}; see --list-schedules)",
                                opts.schedule, schedule_names()),
                    input_location("--schedule"));
  if (info->synthesize)  // its order depends on the split: the search below assumes it does not
    throw UserError(fmt::format("{} synthesizes an order for the layout as given; --autotune "
                                "balances the layout for it",
                                info->name),
                    input_location("--schedule"));
  const int vpp = opts.vpp ? *opts.vpp : default_balance_vpp(info->name, opts.layout, opts.pp);
  if (vpp < 1)
    throw UserError(fmt::format("must be at least 1, got {}", vpp), input_location("--vpp"));
  if (info->vpp_rule == VppRule::One && vpp != 1)
    throw UserError(fmt::format("{} runs one stage per rank; drop --vpp {}", info->name, vpp),
                    input_location("--vpp"));
  if (info->vpp_rule == VppRule::Two && vpp != 2)
    throw UserError(fmt::format("{} runs two stages per rank; drop --vpp {}", info->name, vpp),
                    input_location("--vpp"));
  if (opts.pp < 1 || opts.pp > kMaxPp)
    throw UserError(fmt::format("--pp must be between 1 and {}, got {}", kMaxPp, opts.pp));
  const long long S = static_cast<long long>(opts.pp) * vpp;
  if (S > kMaxLayoutItems)
    throw UserError(fmt::format("--pp {} x --vpp {} is too many stages", opts.pp, vpp));

  const std::vector<LayerKind> layers = model_layers(opts.layout);
  const int n = static_cast<int>(layers.size());
  std::vector<int> even(static_cast<size_t>(S) + 1);
  for (long long k = 0; k <= S; ++k) even[static_cast<size_t>(k)] = static_cast<int>(k * n / S);

  CompileOptions co;
  co.layout = split_layers(layers, even);
  co.has_model = true;
  co.pp = opts.pp;
  co.vpp = vpp;
  co.schedule = info->name;
  co.microbatches = opts.microbatches;
  Plan base = compile(co);

  const CostModel cost = opts.cost.unit ? unit_layer_costs() : opts.cost;
  // Work per microbatch of a layer as the schedule runs it: F plus B, or I plus W.
  double full = 0, split = 0;
  for (const auto& r : base.compute)
    for (const Action& a : r)
      for_each_part(a, [&](const Action& p) {
        if (p.kind == ActionKind::B) full += 1;
        if (p.kind == ActionKind::I) split += 1;
      });
  const double share_full = full + split > 0 ? full / (full + split) : 1.0;
  auto work = [&](const LayerCost& l) {
    return l.f + share_full * l.backward() + (1 - share_full) * (l.i + l.w);
  };
  std::vector<double> weights;
  for (const StageCost& l : model_layer_costs(cost, layers))
    weights.push_back(l.f + share_full * l.b + (1 - share_full) * (l.i + l.w));

  Evaluator ev(std::move(base), cost, opts.memory_limit, layers);
  long long budget = opts.budget;
  if (budget <= 0)  // a simulation costs about 50 + (compute actions) units of 0.6 us
    budget = std::max<long long>(4, (1LL << 18) / (50 + ev.compute_actions()));

  BalanceResult res;
  res.vpp = vpp;
  res.budget = budget;
  Search search(ev, budget, opts.progress);
  search.set_limit(opts.memory_limit);
  const BottleneckSplit seed =
      min_bottleneck_split(weights, static_cast<int>(S), work(cost.empty_stage));
  res.min_bottleneck = seed.bottleneck;
  search.consider(seed.cuts);
  res.bottleneck_split_makespan = ev.evaluate(seed.cuts).makespan;
  if (opts.layout.num_stages() == S) {
    const std::vector<int> given = cuts_of(opts.layout);
    search.consider(given);
    res.given_makespan = ev.evaluate(given).makespan;
  }
  // The chunk seeds with the best lower bounds.
  {
    std::vector<std::pair<double, std::vector<int>>> ranked;
    std::vector<StageCost> costs;
    for (auto& cuts : chunk_seeds(weights, opts.pp, vpp,
                                  info->placement == PlacementStyle::V && info->copies == 1)) {
      ev.costs_of(cuts, static_cast<int>(S), costs);
      ranked.emplace_back(ev.lower_bound(costs), std::move(cuts));
    }
    std::stable_sort(ranked.begin(), ranked.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t i = 0; i < ranked.size() && i < kChunkSeedsSimulated; ++i)
      search.consider(ranked[i].second);
  }
  search.local_search();
  // Branch and bound with what is left, where it can finish: at most kMaxNodes partial splits
  // (a few tenths of a second of lower bounds), so not on spaces of more than about 10^9 splits.
  if (!search.out_of_budget() && log_splits(n, S) <= 9 * std::log(10.0))
    res.proven_optimal =
        search.branch_and_bound(std::min(kMaxNodes, 200 * budget)) && search.best().overflow == 0;

  const std::vector<int>& cuts = search.best_cuts();
  // Its text is its layout string (which parse_layout reads back to the same stages; the tests
  // check that). Not parsed here: --autotune balances on several threads.
  res.layout = split_layers(layers, cuts);
  res.layout.source = layout_string(res.layout);
  res.layout.input = "balanced layout";
  res.makespan = search.best().makespan;
  res.peak_total = search.best().peak_total;
  res.fits = search.best().overflow == 0;
  for (size_t k = 0; k + 1 < cuts.size(); ++k) {
    double w = cuts[k] == cuts[k + 1] ? work(cost.empty_stage) : 0;
    for (int j = cuts[k]; j < cuts[k + 1]; ++j) w += weights[static_cast<size_t>(j)];
    res.bottleneck = std::max(res.bottleneck, w);
  }
  res.simulations = ev.simulations();
  return res;
}

}  // namespace ppc

// The cost evaluation behind --balance (balance_evaluator.h): stage costs, the lower bound and
// the simulation of a split.
#include "compiler/balance_evaluator.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "compiler/lower_for_model.h"
#include "compiler/measured_costs.h"
#include "compiler/simulate.h"

namespace ppc::balancing {

bool better(const Score& a, const Score& b) {
  if (a.overflow != b.overflow) return a.overflow < b.overflow;
  return a.makespan < b.makespan * (1 - 1e-12);
}

bool cannot_beat(double bound, const Score& best) {
  return best.overflow == 0 && bound * (1 - 1e-9) >= best.makespan;
}

namespace {

std::vector<Term> aggregate(const Plan& plan, const std::vector<Action>& acts, size_t end) {
  std::map<std::tuple<int, int, int, int>, double> counts;
  for (size_t i = 0; i < end; ++i) {
    const Action& a = acts[i];
    const int s1 = plan.layout_stage(a.stage);
    const int s2 = is_compound(a.kind) ? plan.layout_stage(a.stage2) : -1;
    counts[{static_cast<int>(a.kind), static_cast<int>(a.sub_kind), s1, s2}] += 1;
  }
  std::vector<Term> out;
  for (const auto& [key, count] : counts) {
    const auto [kind, sub, s1, s2] = key;
    const Action a = is_compound(static_cast<ActionKind>(kind))
                         ? Action::overlap(s1, 0, static_cast<ActionKind>(sub), s2, 0)
                         : Action::compute(static_cast<ActionKind>(kind), s1, 0);
    out.push_back(Term{a, count});
  }
  return out;
}

}  // namespace

Evaluator::Evaluator(Plan base, const CostModel& cost, std::optional<double> limit,
                     const std::vector<LayerKind>& layers)
    : plan_(std::move(base)), cost_(cost), limit_(limit), layers_(layers) {
  const size_t n = layers.size();
  pf_.assign(n + 1, {0, 0, 0, 0, 0, 0});
  const std::vector<StageCost> per_layer = model_layer_costs(cost_, layers);  // measured too
  for (size_t j = 0; j < n; ++j) {
    const StageCost& l = per_layer[j];
    const StageCost& p = pf_[j];
    pf_[j + 1] =
        StageCost{p.f + l.f,          p.b + l.b, p.i + l.i, p.w + l.w, p.activation + l.activation,
                  p.params + l.params};
  }
  const LayerCost& e = cost_.empty_stage;
  empty_ = StageCost{e.f, e.backward(), e.i, e.w, e.activation, e.params};
  msg_ = min_message_time(cost_);  // the shortest: a bound for every boundary
  for (int r = 0; r < plan_.pp(); ++r) {
    const auto& acts = plan_.compute[static_cast<size_t>(r)];
    RankShape shape;
    size_t last = acts.size();
    for (size_t i = acts.size(); i-- > 0;) {
      const Action& a = acts[i];
      int backward = -1;  // the stage of its B or I (part)
      for_each_part(a, [&](const Action& p) {
        if (is_backward_input(p.kind)) backward = p.stage;
      });
      if (backward >= 0) {
        last = i;
        shape.last_backward = backward;
        break;
      }
    }
    if (!acts.empty()) shape.first_stage = acts.front().stage;
    shape.all = aggregate(plan_, acts, acts.size());
    if (last < acts.size()) shape.upto = aggregate(plan_, acts, last + 1);
    ranks_.push_back(std::move(shape));
  }
}

long long Evaluator::compute_actions() const {
  long long n = 0;
  for (const auto& r : plan_.compute) n += static_cast<long long>(r.size());
  return n;
}

StageCost Evaluator::stage_cost(int from, int to) const {
  if (from == to) return empty_;
  const StageCost &a = pf_[static_cast<size_t>(from)], &b = pf_[static_cast<size_t>(to)];
  return StageCost{b.f - a.f,          b.b - a.b, b.i - a.i, b.w - a.w, b.activation - a.activation,
                   b.params - a.params};
}

void Evaluator::costs_of(const std::vector<int>& cuts, int known,
                         std::vector<StageCost>& out) const {
  out.assign(static_cast<size_t>(stages()), StageCost{0, 0, 0, 0, 0, 0});
  for (int k = 0; k < known; ++k)
    out[static_cast<size_t>(k)] =
        stage_cost(cuts[static_cast<size_t>(k)], cuts[static_cast<size_t>(k) + 1]);
}

double Evaluator::max_params(const std::vector<StageCost>& c) const {
  double worst = 0;
  for (int r = 0; r < plan_.pp(); ++r) {
    double sum = 0;
    for (int s : plan_.placement.rank_stages[static_cast<size_t>(r)])
      sum += c[static_cast<size_t>(plan_.layout_stage(s))].params;
    worst = std::max(worst, sum);
  }
  return worst;
}

double Evaluator::lower_bound(const std::vector<StageCost>& c) const {
  const int S = plan_.num_stages();
  fchain_.assign(static_cast<size_t>(S), 0.0);
  bchain_.assign(static_cast<size_t>(S), 0.0);
  for (int s = 0; s < S; ++s) {
    const int p = plan_.prev_stage(s);
    if (p < 0) continue;
    const StageCost& cp = c[static_cast<size_t>(plan_.layout_stage(p))];
    const double hop = plan_.rank_of(p) != plan_.rank_of(s) ? msg_ : 0.0;
    fchain_[static_cast<size_t>(s)] = fchain_[static_cast<size_t>(p)] + cp.f + hop;
    bchain_[static_cast<size_t>(s)] = bchain_[static_cast<size_t>(p)] + std::min(cp.b, cp.i) + hop;
  }
  double bound = 0;
  for (const RankShape& r : ranks_) {
    const double start = fchain_[static_cast<size_t>(r.first_stage)];
    bound = std::max(bound, start + busy(r.all, c));
    if (r.last_backward >= 0)
      bound =
          std::max(bound, start + busy(r.upto, c) + bchain_[static_cast<size_t>(r.last_backward)]);
  }
  return bound;
}

Score Evaluator::evaluate(const std::vector<int>& cuts) {
  auto it = cache_.find(cuts);
  if (it != cache_.end()) return it->second;
  for (size_t k = 0; k + 1 < cuts.size(); ++k)
    plan_.layout.stages[k].assign(layers_.begin() + cuts[k], layers_.begin() + cuts[k + 1]);
  const Plan lowered = lower_for_model(plan_, cost_);
  const Simulation sim = simulate(lowered, cost_);
  Score s;
  s.makespan = sim.makespan;
  for (size_t r = 0; r < sim.peak_memory.size(); ++r)
    s.peak_total = std::max(s.peak_total, sim.peak_memory[r] + sim.param_memory[r]);
  if (limit_) s.overflow = std::max(0.0, s.peak_total - *limit_);
  ++simulations_;
  cache_.emplace(cuts, s);
  return s;
}

double Evaluator::busy(const std::vector<Term>& terms, const std::vector<StageCost>& c) const {
  double sum = 0;
  for (const Term& t : terms) sum += t.count * action_cost(t.action, c, cost_);
  return sum;
}

}  // namespace ppc::balancing

// The candidates of --schedule Auto's search (synthesize.cpp) and of its improvement passes
// (synthesize_improve.cpp): a compute order lowered and simulated as ppcompile would, scored by
// whether it fits the memory limit, its makespan and its peak; and the search that keeps the best.
#pragma once

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "compiler/lower_for_model.h"
#include "compiler/plan.h"
#include "compiler/simulate.h"
#include "compiler/synthesize.h"

namespace ppc::synthesis {

inline constexpr double kInf = std::numeric_limits<double>::infinity();
// How many of the best candidates improve() works on.
inline constexpr size_t kImproved = 3;

inline double peak_total(const Simulation& sim) {
  double peak = 0;
  for (size_t r = 0; r < sim.peak_memory.size(); ++r)
    peak = std::max(peak, sim.peak_memory[r] + sim.param_memory[r]);
  return peak;
}

// A changed order of an improvement pass, lowered and simulated, with its peak and whether it fits.
struct Tried {
  LoweredPlan lowered;
  double peak = 0;
  bool fits = true;
};
inline Tried try_order(const Plan& plan, const SynthesisOptions& opts) {
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
inline void adopt(Scored& best, Plan&& plan, const Tried& t) {
  best.plan = std::move(plan);
  best.makespan = t.lowered.sim.makespan;
  best.peak_total = t.peak;
  best.fits = t.fits;
}

// Better: fits the limit, then shorter, then less memory.
inline bool better(const Scored& a, const Scored& b) {
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

}  // namespace ppc::synthesis

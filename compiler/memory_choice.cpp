#include "compiler/memory_choice.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "compiler/compile.h"
#include "compiler/diagnostic.h"
#include "compiler/schedule.h"

namespace ppc {
namespace {

constexpr std::array<MemoryMode, 4> kModes{MemoryMode::None, MemoryMode::Selective,
                                           MemoryMode::Offload, MemoryMode::Full};

MemoryPolicy per_stage(const std::vector<MemoryMode>& modes) {
  MemoryPolicy p;
  for (size_t s = 0; s < modes.size(); ++s)
    if (modes[s] != MemoryMode::None)
      p.rules.push_back(
          MemoryRule{MemoryRule::Target::Stage, LayerKind::Decoder, static_cast<int>(s), modes[s]});
  return p;
}

}  // namespace

SynthesisResult synthesize_choosing_memory(const SynthesisOptions& opts) {
  if (!opts.memory_limit || !opts.memory.empty()) return synthesize(opts);
  const double limit = *opts.memory_limit;
  std::optional<SynthesisResult> best;
  std::optional<UserError> first_error;
  auto consider = [&](const MemoryPolicy& policy) {
    SynthesisOptions o = opts;
    o.memory = policy;
    try {
      SynthesisResult r = synthesize(o);
      r.plan.memory = policy;
      if (!best || (r.fits && !best->fits) ||
          (r.fits == best->fits && r.makespan < best->makespan * (1 - 1e-12)))
        best = std::move(r);
    } catch (const UserError& e) {  // no room for one microbatch under these modes
      if (!first_error) first_error = e;
    }
  };
  consider(MemoryPolicy{});
  if (best && best->fits) {  // modes are tried only where the limit costs time
    SynthesisOptions unlimited = opts;
    unlimited.memory_limit.reset();
    if (synthesize(unlimited).makespan >= best->makespan * (1 - 1e-9)) return std::move(*best);
  }

  // The stage costs under each mode, on Auto's loop placement.
  const Plan base = auto_skeleton(opts, PlacementStyle::Loop);
  const int S = base.num_stages(), pp = base.pp(), vpp = base.vpp();
  const bool offload = !opts.cost.unit && opts.cost.host_bandwidth.has_value();
  std::vector<std::vector<StageCost>> by_mode;  // [mode][stage]
  for (MemoryMode m : kModes) {
    Plan p = base;
    p.memory.rules = {MemoryRule{MemoryRule::Target::All, LayerKind::Decoder, 0, m}};
    by_mode.push_back(stage_costs(p, opts.cost));
  }
  auto allowed = [&](size_t m) { return kModes[m] != MemoryMode::Offload || offload; };
  auto extra_time = [&](size_t m, size_t s) { return by_mode[m][s].b - by_mode[0][s].b; };

  // One microbatch with the least-keeping mode everywhere: the smallest limit that works.
  double smallest = 0;
  int worst = 0;
  for (int r = 0; r < pp; ++r) {
    double need = 0, transient = 0;
    for (int s : base.placement.rank_stages[static_cast<size_t>(r)]) {
      const size_t su = static_cast<size_t>(s);
      double least = HUGE_VAL, t = 0;
      for (size_t m = 0; m < kModes.size(); ++m)
        if (allowed(m) && by_mode[m][su].activation < least) {
          least = by_mode[m][su].activation;
          t = by_mode[m][su].transient + by_mode[m][su].forward_transient;
        }
      need += by_mode[0][su].params + least;
      transient = std::max(transient, t);
    }
    if (need + transient > smallest) {
      smallest = need + transient;
      worst = r;
    }
  }
  if (smallest > limit * (1 + 1e-12))
    throw UserError(
        fmt::format("no memory mode fits one microbatch on rank {}: the smallest limit that works "
                    "is {} (every stage in the mode that keeps the least)",
                    worst, format_memory(smallest, !opts.cost.unit)),
        input_location("--memory-limit"));

  // Candidates: each stage holds `want` microbatches (a multiple of the ones in flight after it),
  // its rank's stages upgraded, the most bytes saved per time added first, until they fit.
  for (double scale : {0.25, 0.5, 0.625, 0.75, 0.875, 1.0, 1.25, 1.5, 2.0}) {
    std::vector<size_t> mode(static_cast<size_t>(S), 0);
    for (int r = 0; r < pp; ++r) {
      const auto& stages = base.placement.rank_stages[static_cast<size_t>(r)];
      auto want = [&](int s) {
        return std::clamp(std::ceil(scale * (S - s) / vpp), 1.0,
                          static_cast<double>(opts.microbatches));
      };
      auto need = [&] {
        double n = 0, t = 0;
        for (int s : stages) {
          const StageCost& c = by_mode[mode[static_cast<size_t>(s)]][static_cast<size_t>(s)];
          n += c.params + c.activation * want(s);
          t = std::max(t, c.transient + c.forward_transient);
        }
        return n + t;
      };
      while (need() > limit) {
        // The upgrade of one stage to a mode keeping less that saves the most per time added.
        double best_ratio = -1;
        int pick = -1;
        size_t pick_mode = 0;
        for (int s : stages) {
          const size_t su = static_cast<size_t>(s);
          for (size_t m = 0; m < kModes.size(); ++m) {
            if (!allowed(m)) continue;
            const double saved =
                (by_mode[mode[su]][su].activation - by_mode[m][su].activation) * want(s);
            if (saved <= 0) continue;
            const double added = std::max(1e-9, extra_time(m, su) - extra_time(mode[su], su));
            if (saved / added > best_ratio) {
              best_ratio = saved / added;
              pick = s;
              pick_mode = m;
            }
          }
        }
        if (pick < 0) break;  // keeps the least already: the list scheduler holds fewer
        mode[static_cast<size_t>(pick)] = pick_mode;
      }
    }
    std::vector<MemoryMode> modes;
    for (size_t m : mode) modes.push_back(kModes[m]);
    consider(per_stage(modes));
  }
  std::vector<MemoryMode> full(static_cast<size_t>(S), MemoryMode::Full);
  consider(per_stage(full));
  if (!best) throw *first_error;
  return std::move(*best);
}

}  // namespace ppc

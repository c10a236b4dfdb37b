// Measured per-stage and per-boundary costs applied to a plan's stages (measured_costs.h).
#include "compiler/measured_costs.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "compiler/diagnostic.h"

namespace ppc {

namespace {

StageCost of_layer(const LayerCost& l) {
  return StageCost{l.f, l.backward(), l.i, l.w, l.activation, l.params, l.optimizer};
}

void add(StageCost& to, const StageCost& c, double k = 1) {
  to.f += k * c.f;
  to.b += k * c.b;
  to.i += k * c.i;
  to.w += k * c.w;
  to.activation += k * c.activation;
  to.params += k * c.params;
  to.optimizer += k * c.optimizer;
}

constexpr StageCost kZero{0, 0, 0, 0, 0, 0, 0};

std::vector<LayerKind> layers_of(const Layout& layout) {
  std::vector<LayerKind> out;
  for (const auto& s : layout.stages) out.insert(out.end(), s.begin(), s.end());
  return out;
}

// Start position (layers before it) of every stage, and the total at the end.
std::vector<int> starts_of(const Layout& layout) {
  std::vector<int> out{0};
  for (const auto& s : layout.stages) out.push_back(out.back() + static_cast<int>(s.size()));
  return out;
}

void check_same_model(const MeasuredCosts& mc, const std::vector<LayerKind>& layers) {
  const std::vector<LayerKind> measured = layers_of(mc.layout);
  if (measured == layers) return;
  std::string want, got;
  for (LayerKind k : layers) want += layer_symbol(k);
  for (LayerKind k : measured) got += layer_symbol(k);
  throw UserError(
      fmt::format("layout: the stages were measured on a model of {} layers ({}), but this model "
                  "has {} ({}); measured costs apply to the model they were measured on",
                  measured.size(), mc.layout.source, layers.size(),
                  want.size() > 40 ? want.substr(0, 37) + "..." : want),
      input_location(mc.input));
}

// Per layer of the model: its kind's costs, or its share of the measured stage that holds it.
std::vector<StageCost> layer_costs(const CostModel& model, const MeasuredCosts& mc) {
  std::vector<StageCost> out;
  for (size_t t = 0; t < mc.layout.stages.size(); ++t) {
    const auto& stage = mc.layout.stages[t];
    const auto& entry = mc.stages[t];
    double total = 0;
    for (LayerKind k : stage) {
      const LayerCost& l = model.layer(k);
      total += l.f + l.backward();
    }
    for (LayerKind k : stage) {
      const LayerCost& l = model.layer(k);
      if (!entry) {
        out.push_back(of_layer(l));
        continue;
      }
      const double share =
          total > 0 ? (l.f + l.backward()) / total : 1.0 / static_cast<double>(stage.size());
      StageCost c = kZero;
      add(c, *entry, share);
      out.push_back(c);
    }
  }
  return out;
}

// Costs per layout stage of a model layout.
std::vector<StageCost> model_stage_costs(const Layout& layout, const CostModel& model) {
  const MeasuredCosts& mc = *model.measured;
  const std::vector<LayerKind> layers = layers_of(layout);
  check_same_model(mc, layers);
  const std::vector<StageCost> per_layer = layer_costs(model, mc);
  const std::vector<int> a = starts_of(layout), p = starts_of(mc.layout);
  const int K = layout.num_stages(), T = mc.layout.num_stages();
  std::vector<StageCost> out(static_cast<size_t>(K), kZero);
  std::vector<bool> got_empty(static_cast<size_t>(K), false);  // a measured entry set it
  for (int k = 0; k < K; ++k)
    for (int j = a[static_cast<size_t>(k)]; j < a[static_cast<size_t>(k) + 1]; ++j)
      add(out[static_cast<size_t>(k)], per_layer[static_cast<size_t>(j)]);
  // Empty measured stages: to the matching empty plan stage at the same place, else to the plan
  // stage that holds the layer at that place.
  for (int t = 0; t < T; ++t) {
    if (!mc.layout.stages[static_cast<size_t>(t)].empty()) continue;
    const int pos = p[static_cast<size_t>(t)];
    // Which empty stage at `pos` this is, counting the measured layout's.
    int nth = 0;
    for (int u = 0; u < t; ++u)
      nth += mc.layout.stages[static_cast<size_t>(u)].empty() && p[static_cast<size_t>(u)] == pos;
    int target = -1, seen = 0;
    for (int k = 0; k < K && target < 0; ++k)
      if (layout.stages[static_cast<size_t>(k)].empty() && a[static_cast<size_t>(k)] == pos &&
          seen++ == nth)
        target = k;
    const auto& entry = mc.stages[static_cast<size_t>(t)];
    if (target >= 0) {
      if (entry) {
        out[static_cast<size_t>(target)] = *entry;
        got_empty[static_cast<size_t>(target)] = true;
      }
      continue;
    }
    if (!entry) continue;
    for (int k = 0; k < K; ++k)
      if (a[static_cast<size_t>(k)] <= pos &&
          (pos < a[static_cast<size_t>(k) + 1] || (k == K - 1 && pos == a.back()))) {
        add(out[static_cast<size_t>(k)], *entry);
        break;
      }
  }
  // An empty plan stage without a measured match costs what an empty stage costs.
  for (int k = 0; k < K; ++k)
    if (layout.stages[static_cast<size_t>(k)].empty() && !got_empty[static_cast<size_t>(k)])
      out[static_cast<size_t>(k)] = of_layer(model.empty_stage);
  return out;
}

// Costs per layout stage of a generic layout of K stages: stage k covers measured stages
// [k T / K, (k + 1) T / K).
std::vector<StageCost> generic_stage_costs(int K, const CostModel& model) {
  const MeasuredCosts& mc = *model.measured;
  const int T = mc.layout.num_stages();
  std::vector<StageCost> out(static_cast<size_t>(K), kZero);
  for (int k = 0; k < K; ++k) {
    const double lo = static_cast<double>(k) * T / K, hi = static_cast<double>(k + 1) * T / K;
    for (int t = static_cast<int>(std::floor(lo)); t < T && t < hi; ++t) {
      const double part = std::min(hi, t + 1.0) - std::max(lo, static_cast<double>(t));
      if (part <= 0) continue;
      const auto& entry = mc.stages[static_cast<size_t>(t)];
      add(out[static_cast<size_t>(k)], entry ? *entry : of_layer(model.empty_stage), part);
    }
  }
  return out;
}

// The measured boundary at the place of layout boundary k (between layout stages k and k + 1),
// if any.
const MeasuredBoundary* boundary_at(const Plan& plan, const std::vector<int>& a, int k,
                                    const MeasuredCosts& mc, const std::vector<int>& p) {
  const int K = plan.layout.num_stages(), T = mc.layout.num_stages();
  if (mc.boundaries.empty()) return nullptr;
  if (plan.has_model) {
    const int pos = a[static_cast<size_t>(k) + 1];
    // With empty stages several boundaries share a place: the k-th boundary among the plan's at
    // that place takes the k-th of the measured ones there, else the last.
    int nth = 0;
    for (int u = 0; u < k; ++u) nth += a[static_cast<size_t>(u) + 1] == pos;
    const MeasuredBoundary* found = nullptr;
    int seen = 0;
    for (int t = 0; t + 1 < T; ++t)
      if (p[static_cast<size_t>(t) + 1] == pos) {
        found = &mc.boundaries[static_cast<size_t>(t)];
        if (seen++ == nth) break;
      }
    return found;
  }
  const long long num = static_cast<long long>(k + 1) * T;
  if (num % K != 0) return nullptr;
  const long long t = num / K - 1;
  return t >= 0 && t + 1 < T ? &mc.boundaries[static_cast<size_t>(t)] : nullptr;
}

}  // namespace

std::vector<StageCost> measured_stage_costs(const Plan& plan, const CostModel& model) {
  PPC_INTERNAL_ASSERT(model.measured != nullptr, "measured_stage_costs without measured costs");
  const std::vector<StageCost> per_layout =
      plan.has_model ? model_stage_costs(plan.layout, model)
                     : generic_stage_costs(plan.layout.num_stages(), model);
  std::vector<StageCost> out(static_cast<size_t>(plan.num_stages()));
  for (int s = 0; s < plan.num_stages(); ++s)
    out[static_cast<size_t>(s)] = per_layout[static_cast<size_t>(plan.layout_stage(s))];
  return out;
}

MessageCosts message_costs(const Plan& plan, const CostModel& model) {
  const size_t S = static_cast<size_t>(plan.num_stages());
  MessageCosts mc;
  if (model.unit) {
    mc.time.assign(2 * S, 0.0);
    mc.bytes.assign(2 * S, 0.0);
    return mc;
  }
  mc.time.assign(2 * S, message_time(model));
  mc.bytes.assign(2 * S, model.message_bytes);
  if (!model.measured || model.measured->boundaries.empty()) return mc;
  const MeasuredCosts& m = *model.measured;
  const std::vector<int> a = starts_of(plan.layout), p = starts_of(m.layout);
  if (plan.has_model) check_same_model(m, layers_of(plan.layout));
  const int K = plan.layout.num_stages();
  std::vector<double> time(static_cast<size_t>(K), message_time(model)),
      bytes(static_cast<size_t>(K), model.message_bytes);  // per layout boundary k (k + 1 < K)
  for (int k = 0; k + 1 < K; ++k) {
    const MeasuredBoundary* b = boundary_at(plan, a, k, m, p);
    if (!b) continue;
    const double by = b->message_bytes.value_or(model.message_bytes);
    bytes[static_cast<size_t>(k)] = by;
    time[static_cast<size_t>(k)] =
        b->time ? *b->time : model.latency + (model.bandwidth > 0 ? by / model.bandwidth : 0.0);
  }
  for (int s = 0; s < plan.num_stages(); ++s) {
    const int ls = plan.layout_stage(s);
    const size_t su = static_cast<size_t>(s);
    if (ls + 1 < K) {
      mc.time[2 * su] = time[static_cast<size_t>(ls)];
      mc.bytes[2 * su] = bytes[static_cast<size_t>(ls)];
    }
    if (ls > 0) {
      mc.time[2 * su + 1] = time[static_cast<size_t>(ls) - 1];
      mc.bytes[2 * su + 1] = bytes[static_cast<size_t>(ls) - 1];
    }
  }
  for (size_t k = 1; k < mc.time.size(); ++k)
    mc.uniform &= mc.time[k] == mc.time[0] && mc.bytes[k] == mc.bytes[0];
  return mc;
}

std::vector<StageCost> model_layer_costs(const CostModel& model,
                                         const std::vector<LayerKind>& layers) {
  if (!model.measured) {
    std::vector<StageCost> out;
    for (LayerKind k : layers) out.push_back(of_layer(model.layer(k)));
    return out;
  }
  check_same_model(*model.measured, layers);
  return layer_costs(model, *model.measured);
}

double min_message_time(const CostModel& model) {
  if (model.unit) return 0;
  double t = message_time(model);
  if (model.measured)
    for (const MeasuredBoundary& b : model.measured->boundaries) {
      const double by = b.message_bytes.value_or(model.message_bytes);
      t = std::min(
          t, b.time ? *b.time : model.latency + (model.bandwidth > 0 ? by / model.bandwidth : 0.0));
    }
  return t;
}

}  // namespace ppc

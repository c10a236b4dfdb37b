#include "compiler/memory_costs.h"

#include <fmt/format.h>

#include <algorithm>

namespace ppc {

LayerModeCost layer_mode_cost(const LayerCost& l, const CostModel& model, MemoryMode mode) {
  const bool unit = model.unit;
  const double act = unit ? 1.0 : l.activation, f = unit ? 1.0 : l.f;
  const double msg = unit ? 0.0 : model.message_bytes;
  const double full_keeps = l.activation_full ? *l.activation_full
                            : msg > 0         ? std::min(act, msg)
                                              : act / 8;
  LayerModeCost c;
  switch (mode) {
    case MemoryMode::None:
      c.kept = act;
      break;
    case MemoryMode::Selective:
      c.kept = l.activation_selective ? *l.activation_selective : (act + full_keeps) / 2;
      c.recompute = l.recompute_selective ? *l.recompute_selective : f / 10;
      break;
    case MemoryMode::Full:
      c.kept = full_keeps;
      c.recompute = l.recompute_full ? *l.recompute_full : f;
      break;
    case MemoryMode::Offload:
      c.offloaded = act;
      break;
  }
  c.rebuilt = act - c.kept;
  return c;
}

void apply_memory_policy(const Plan& plan, const CostModel& model, std::vector<StageCost>& costs) {
  const double host = model.host_bandwidth ? *model.host_bandwidth : model.bandwidth;
  for (int s = 0; s < plan.num_stages(); ++s) {
    const auto& layers = plan.layout.stages[static_cast<size_t>(plan.layout_stage(s))];
    double act = 0, f = 0, kept = 0, recompute = 0, offloaded = 0;
    int after_first = 0, keep_input = 0;  // layers after the stage's first; of them, under full
    // An empty stage (a generic --stages stage) counts as one layer costing model.empty_stage.
    static const std::vector<LayerKind> kOne{LayerKind::Decoder};
    for (LayerKind k : layers.empty() ? kOne : layers) {
      const LayerCost& l = layers.empty() ? model.empty_stage : model.layer(k);
      const MemoryMode mode = plan.memory.mode_of(s, k);
      const LayerModeCost m = layer_mode_cost(l, model, mode);
      keep_input += after_first++ > 0 && mode == MemoryMode::Full;
      act += model.unit ? 1.0 : l.activation;
      f += model.unit ? 1.0 : l.f;
      kept += m.kept;
      recompute += m.recompute;
      offloaded += m.offloaded;
    }
    if (act <= 0 || kept >= act) continue;  // keeps everything (or has nothing to keep)
    StageCost& c = costs[static_cast<size_t>(s)];
    // The stage keeps `c.activation` keeping everything; each layer's mode saves the bytes of its
    // activation it does not keep. A stage's activation can be less than its layers' sum (a
    // measured stage, whose layers' entries each count their output): a layer that does not keep
    // its input lets the stage free the output of the layer before it. A fully recomputing layer
    // keeps its input, so that share of the difference comes back per such layer after the first
    // (whose input comes from outside the stage's forward: a message or the tokens). Unit costs
    // count a stage as 1 whatever its layers: the layers' proportion of it.
    const double freed = std::max(0.0, act - c.activation);
    const double share = after_first > 1 ? static_cast<double>(keep_input) / (after_first - 1) : 0;
    const double kept_bytes =
        model.unit ? kept * c.activation / act
                   : std::clamp(c.activation - (act - kept) + freed * share, 0.0, c.activation);
    c.transient = c.activation - kept_bytes;
    // What goes to the host is what offloading does not keep: the layers' offloaded entries, as
    // kept_bytes counts them (at most what the stage does not keep; unit costs: their proportion).
    c.forward_transient =
        model.unit ? offloaded * c.activation / act : std::min(offloaded, c.transient);
    c.activation = kept_bytes;
    c.recompute = f > 0 ? c.f * recompute / f : 0.0;
    c.offload = host > 0 ? c.forward_transient / host : 0.0;
    c.exposed = std::max(0.0, 2 * c.offload - (c.f + c.b));
    c.b += c.recompute + c.exposed;
    c.i += c.recompute + c.exposed;
  }
}

std::string describe_memory_modes(const Plan& plan, const CostModel& model) {
  if (plan.memory.empty()) return "";
  const std::vector<StageCost> with = stage_costs(plan, model);
  std::string out = fmt::format("memory modes  {}\n", format_memory_policy(plan.memory));
  for (int s = 0; s < plan.num_stages(); ++s) {
    const StageCost& c = with[static_cast<size_t>(s)];
    if (c.transient == 0 && c.forward_transient == 0) continue;
    out += fmt::format(
        "  stage {:<5} keeps {} of {} per microbatch; recompute {:g}; transfer {:g} ({:g} "
        "exposed)\n",
        s, format_memory(c.activation, model.memory_in_bytes),
        format_memory(c.activation + c.transient, model.memory_in_bytes), c.recompute, c.offload,
        c.exposed);
  }
  return out;
}

}  // namespace ppc

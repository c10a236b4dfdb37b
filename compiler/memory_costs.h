// What issue 42's memory modes cost (docs/cost-model.md, "Recomputation and offloading"): per
// layer, the activation bytes each mode keeps from a forward to its backward and the forward time
// a recomputation adds before the backward; per stage, the plan's memory policy applied to the
// stage costs, which the simulator, the lower bound and Auto then read as they read any other.
//
// A layer's mode costs, from its cost entry, or derived from its other numbers when absent:
//   none       keeps `activation`; nothing to redo.
//   selective  keeps `activation_selective` (default: halfway between `activation` and what full
//              keeps) and redoes `recompute_selective` (default: a tenth of `f`: the attention core
//              and the MLP activation function, about 9 % of a layer's forward flops at 4k tokens).
//   full       keeps `activation_full` (default: the layer's input, `message_bytes`, at most
//              `activation`; an eighth of `activation` when the model gives no message size) and
//              redoes `recompute_full` (default: `f`).
//   offload    keeps nothing on the device between F and its backward; the activation crosses the
//              host link (`host_bandwidth`, default `bandwidth`; 0 is infinite) twice, on a side
//              stream.
// Under unit costs each layer counts as f = 1 and activation = 1 with no message size.
#pragma once

#include <string>
#include <vector>

#include "compiler/cost_model.h"
#include "compiler/memory_mode.h"
#include "compiler/plan.h"

namespace ppc {

struct LayerModeCost {
  double kept = 0;       // bytes kept on the device from F until the backward
  double rebuilt = 0;    // bytes rebuilt before the backward (recomputed or fetched back)
  double recompute = 0;  // forward time added before the B or I
  double offloaded = 0;  // bytes sent to the host after F (and back before the backward)
};
LayerModeCost layer_mode_cost(const LayerCost& layer, const CostModel& model, MemoryMode mode);

// `costs` (stage_costs_keeping_all(plan, model)) under plan.memory: each stage's activation less
// what its layers' modes do not keep, its B and I longer by the recomputation, the transients and
// the offload's transfer set (StageCost). A stage measured per stage that holds less than its
// layers' entries add up to (each counts its output, freed once a next layer that does not keep
// its input has run) keeps that difference again for its fully recomputed layers after its first;
// its recomputation is scaled by the layers' ratio (recomputation over f). Under unit costs a
// stage keeps the share of its unit that its layers keep.
// An offload's transfers (one each way per microbatch) overlap the stage's compute; the part of
// both that exceeds the stage's F + B is exposed, added to its B and I.
void apply_memory_policy(const Plan& plan, const CostModel& model, std::vector<StageCost>& costs);

// For --emit stats: "" when the plan keeps everything; else a line with the policy and one per
// stage that does not keep everything: its bytes kept of the whole per microbatch, the
// recomputation added to its B and I, an offload's transfer each way and the part exposed.
//   memory modes  all:full,stage3:none
//     stage 0     keeps 4.7e+08 of 1.6e+09 per microbatch; recompute 48; transfer 0 (0 exposed)
std::string describe_memory_modes(const Plan& plan, const CostModel& model);

}  // namespace ppc

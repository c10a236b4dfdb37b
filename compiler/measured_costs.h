// Per-stage and per-boundary entries of a cost file (docs/cost-model.md, "Measured costs"):
// what one stage of a layout costs (F, B, I, W, activation and parameter memory) and what one
// message across a stage boundary costs (bytes, time), overriding the per-layer costs. This is
// the form `pprun --profile` writes: the costs of the plan it ran, stage by stage.
//
// The entries are tied to positions in the model's layers, so they also apply to other splits of
// the same model:
//  - a plan stage that holds exactly the layers of one or more consecutive measured stages (the
//    layout itself, or --compare's merges of it) costs their sum;
//  - a plan stage that cuts through a measured stage gets a share of it: each measured stage's
//    costs are spread over its layers in proportion to the per-layer costs (F + B of the layer's
//    kind), or equally when the file gives none; layers of stages without an entry cost what
//    their kind costs;
//  - an empty measured stage's costs go to the empty plan stage at the same place, if any;
//  - a plan boundary at the place of a measured boundary (the same count of layers before it)
//    takes its message bytes and time; other boundaries take the file's message_bytes, latency
//    and bandwidth.
// A generic layout (--stages N) counts measured stages instead of layers: plan stage k of K covers
// measured stages [k T / K, (k + 1) T / K) of T, in proportion where it cuts one.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compiler/cost_model.h"
#include "compiler/layout.h"
#include "compiler/plan.h"

namespace ppc {

struct MeasuredBoundary {
  std::optional<double> message_bytes;  // bytes of one activation or gradient message
  std::optional<double> time;           // time of one message (else latency + bytes / bandwidth)
};

struct MeasuredCosts {
  std::string input;  // the file, for messages
  Layout layout;      // the stages the entries were measured on ("layout")
  std::vector<std::optional<StageCost>> stages;  // one per layout stage; nullopt: not measured
  std::vector<MeasuredBoundary> boundaries;      // between stage k and k + 1; S - 1 of them
};

// The costs of every plan stage (stage_costs() when the model has measured entries). Throws
// UserError when the plan's model has other layers than the measured layout.
std::vector<StageCost> measured_stage_costs(const Plan& plan, const CostModel& model);

// The cost of every message of a plan (MessageCosts, simulate.h). Under unit costs every time is
// 0; without measured entries every message takes message_time(model) and model.message_bytes.
MessageCosts message_costs(const Plan& plan, const CostModel& model);

// What each of a model's layers costs under `model`, in model order: its kind's costs, or its
// share of the measured stage that holds it (balance.cpp splits layers with these).
std::vector<StageCost> model_layer_costs(const CostModel& model,
                                         const std::vector<LayerKind>& layers);

// The shortest time any message takes (for lower bounds).
double min_message_time(const CostModel& model);

}  // namespace ppc
